//! The control audit: every input, decision, effect outcome and reply of a group's
//! control logic, in a bounded ring, with a verifiable export.
//!
//! control-plane-contracts "Control audit". Records carry a group-local gap-free `seq`,
//! the `request_id`, the `root_id` shared by every record of one request and, for a
//! record caused by another, its `cause_seq`. When the ring drops records, or a mirror
//! write fails, [`ControlAudit::is_complete`] is false and the export's manifest says so.
//!
//! The ring is bounded twice: by records ([`DEFAULT_AUDIT_CAPACITY`]) and by bytes
//! ([`DEFAULT_AUDIT_BYTES`], the sum of the retained records' sizes); whichever is
//! reached first drops the oldest records, counted in `dropped` (so the audit is no
//! longer complete). A text field longer than [`MAX_AUDIT_FIELD_BYTES`] (a giant admin
//! command argument, an error that quotes one) is cut with a
//! `…[truncated: N bytes]` marker and counted in `truncated`: the record stays, its
//! text is abridged, so one request can never pin more than a few KiB.

use std::collections::VecDeque;
use std::fmt;
use std::fs;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use mongoose_core::{EvidenceStatus, FailureKind};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::ControlError;

/// The default ring capacity per group.
pub const DEFAULT_AUDIT_CAPACITY: usize = 10_000;

/// The default bound of a group's ring in bytes: the sum of its records' sizes
/// ([`AuditCounts::bytes`]).
pub const DEFAULT_AUDIT_BYTES: usize = 8 << 20;

/// The longest text field a record keeps (in bytes); a longer one is cut at a
/// character boundary and ends with `…[truncated: N bytes]`, N its full length.
pub const MAX_AUDIT_FIELD_BYTES: usize = 4096;

/// The manifest's `format` value.
pub const EXPORT_FORMAT: &str = "mongoose-control-audit";

/// The manifest's `version` value.
pub const EXPORT_VERSION: u32 = 1;

/// What a record is.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum RecordType {
    /// A request or completion the control logic received.
    Input,
    /// A rule that fired, before the effects it requests.
    Decision,
    /// The result of an effect, pending or final.
    EffectOutcome,
    /// The final reply to a request.
    Reply,
    /// A record the group writes itself (quarantine, death, refusals at close).
    Fallback,
}

/// One control audit record.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Group-local, gap-free sequence.
    pub seq: u64,
    /// What the record is.
    pub record: RecordType,
    /// The request (`None` for records not caused by a request; `-1` in an export).
    #[serde(with = "crate::sentinel")]
    pub request_id: Option<u64>,
    /// The request this record belongs to, shared by all its records (`-1` in an
    /// export when `None`).
    #[serde(with = "crate::sentinel")]
    pub root_id: Option<u64>,
    /// The record that caused this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause_seq: Option<u64>,
    /// The effect's operation id, `requestId.n` (EffectOutcome records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_id: Option<String>,
    /// Input: the fact (Add, Stop, ...); Decision: the rule; EffectOutcome: the
    /// effect; Fallback: its kind (ProcessorQuarantined, NotRunning, ...).
    pub what: String,
    /// Outcome (Reply, EffectOutcome).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Human detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The registration concerned, if any (`-1` in an export when `None`).
    #[serde(with = "crate::sentinel")]
    pub generation: Option<u64>,
    /// The processor or service name, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The failure kind of a reply or failed outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<FailureKind>,
    /// Decision: the state the rule found (`ABSENT`, `RUNNING`, `QUARANTINED`,
    /// `STOPPED`, or a service's version `vN`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Decision: the state the rule leads to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Decision: the effects it requests, each as `opId Effect(generation)`, in the
    /// order they run; their outcomes are the EffectOutcome records with those opIds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub effects: Vec<String>,
    /// The effect that caused this record (a reply that follows an effect carries the
    /// last effect's opId).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause_op: Option<String>,
}

/// A record to write; [`ControlAudit::write`] gives it its `seq`.
#[derive(Clone, Debug)]
pub(crate) struct NewRecord {
    pub(crate) record: RecordType,
    pub(crate) request_id: Option<u64>,
    pub(crate) root_id: Option<u64>,
    pub(crate) cause_seq: Option<u64>,
    pub(crate) op_id: Option<String>,
    pub(crate) what: String,
    pub(crate) outcome: Option<String>,
    pub(crate) reason: Option<String>,
    pub(crate) generation: Option<u64>,
    pub(crate) name: Option<String>,
    pub(crate) kind: Option<FailureKind>,
    pub(crate) from: Option<String>,
    pub(crate) to: Option<String>,
    pub(crate) effects: Vec<String>,
    pub(crate) cause_op: Option<String>,
}

impl NewRecord {
    pub(crate) fn new(
        record: RecordType,
        request_id: Option<u64>,
        what: impl Into<String>,
    ) -> Self {
        NewRecord {
            record,
            request_id,
            root_id: request_id,
            cause_seq: None,
            op_id: None,
            what: what.into(),
            outcome: None,
            reason: None,
            generation: None,
            name: None,
            kind: None,
            from: None,
            to: None,
            effects: Vec::new(),
            cause_op: None,
        }
    }

    pub(crate) fn transition(mut self, from: &str, to: &str) -> Self {
        self.from = Some(from.to_owned());
        self.to = Some(to.to_owned());
        self
    }

    pub(crate) fn effects(mut self, effects: Vec<String>) -> Self {
        self.effects = effects;
        self
    }

    pub(crate) fn cause_op(mut self, op: Option<String>) -> Self {
        self.cause_op = op;
        self
    }

    pub(crate) fn cause(mut self, cause_seq: u64) -> Self {
        self.cause_seq = Some(cause_seq);
        self
    }

    pub(crate) fn op(mut self, op_id: String) -> Self {
        self.op_id = Some(op_id);
        self
    }

    pub(crate) fn generation(mut self, generation: Option<u64>) -> Self {
        self.generation = generation;
        self
    }

    pub(crate) fn name(mut self, name: Option<&str>) -> Self {
        self.name = name.map(str::to_owned);
        self
    }

    pub(crate) fn outcome(mut self, outcome: impl Into<String>) -> Self {
        self.outcome = Some(outcome.into());
        self
    }

    pub(crate) fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    pub(crate) fn kind(mut self, kind: FailureKind) -> Self {
        self.kind = Some(kind);
        self
    }
}

/// Where records are mirrored as they are written (for example a log file). It must
/// not block: it is written on the group's agent thread.
pub type AuditMirror = Box<dyn Write + Send>;

struct Ring {
    records: VecDeque<AuditRecord>,
    capacity: usize,
    max_bytes: usize,
    bytes: usize,
    truncated: u64,
    next_seq: u64,
    dropped: u64,
    sink_failures: u64,
    unacknowledged_failures: u64,
    mirror: Option<AuditMirror>,
}

/// The control audit of one group: a bounded ring of [`AuditRecord`]s.
pub struct ControlAudit {
    ring: Mutex<Ring>,
}

impl fmt::Debug for ControlAudit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let counts = self.counts();
        f.debug_struct("ControlAudit")
            .field("counts", &counts)
            .finish()
    }
}

/// The audit's counters, taken together.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct AuditCounts {
    /// Records ever written.
    pub total: u64,
    /// Records in the ring now.
    pub retained: u64,
    /// Records dropped by the ring.
    pub dropped: u64,
    /// Mirror writes that failed.
    pub sink_failures: u64,
    /// Nothing dropped and no write failed.
    pub complete: bool,
    /// The retained records' size in bytes (bounded by the ring's byte capacity).
    #[serde(default)]
    pub bytes: u64,
    /// Text fields cut to [`MAX_AUDIT_FIELD_BYTES`] (the records are kept).
    #[serde(default)]
    pub truncated: u64,
}

impl ControlAudit {
    /// An audit keeping at most `capacity` records (0 means the default) and at most
    /// [`DEFAULT_AUDIT_BYTES`] of them.
    pub fn new(capacity: usize, mirror: Option<AuditMirror>) -> Self {
        Self::with_limits(capacity, DEFAULT_AUDIT_BYTES, mirror)
    }

    /// An audit keeping at most `capacity` records and `max_bytes` bytes of them (0
    /// means the default for either); the oldest records go first.
    pub fn with_limits(capacity: usize, max_bytes: usize, mirror: Option<AuditMirror>) -> Self {
        let capacity = if capacity == 0 {
            DEFAULT_AUDIT_CAPACITY
        } else {
            capacity
        };
        let max_bytes = if max_bytes == 0 {
            DEFAULT_AUDIT_BYTES
        } else {
            max_bytes
        };
        ControlAudit {
            ring: Mutex::new(Ring {
                records: VecDeque::with_capacity(capacity.min(1024)),
                capacity,
                max_bytes,
                bytes: 0,
                truncated: 0,
                next_seq: 1,
                dropped: 0,
                sink_failures: 0,
                unacknowledged_failures: 0,
                mirror,
            }),
        }
    }

    /// Writes a record; returns its seq.
    pub(crate) fn write(&self, new: NewRecord) -> u64 {
        let mut ring = self.ring.lock();
        let seq = ring.push(new);
        if ring.mirror.is_some() {
            let line = ring
                .records
                .back()
                .and_then(|record| serde_json::to_string(record).ok());
            let written = match (line, ring.mirror.as_mut()) {
                (Some(line), Some(mirror)) => writeln!(mirror, "{line}").is_ok(),
                _ => false,
            };
            if !written {
                ring.sink_failures += 1;
                ring.unacknowledged_failures += 1;
                tracing::error!(
                    seq,
                    "control audit mirror write failed: evidence is degraded"
                );
                ring.push(
                    NewRecord::new(RecordType::Fallback, None, "SinkWriteFailed")
                        .cause(seq)
                        .reason("mirror write failed"),
                );
            }
        }
        seq
    }

    /// The records in the ring, oldest first.
    pub fn records(&self) -> Vec<AuditRecord> {
        self.ring.lock().records.iter().cloned().collect()
    }

    /// False once anything was dropped or failed to write.
    pub fn is_complete(&self) -> bool {
        self.counts().complete
    }

    /// The counters.
    pub fn counts(&self) -> AuditCounts {
        self.ring.lock().counts()
    }

    /// UNVERIFIED while a write failure is unacknowledged.
    pub fn evidence(&self) -> EvidenceStatus {
        if self.ring.lock().unacknowledged_failures > 0 {
            EvidenceStatus::Unverified
        } else {
            EvidenceStatus::NotDegraded
        }
    }

    /// Acknowledges the write failures so far (evidence is NOT_DEGRADED again; the
    /// audit stays incomplete).
    pub fn acknowledge_failures(&self) {
        self.ring.lock().unacknowledged_failures = 0;
    }

    /// The records as JSON Lines, with no manifest.
    pub fn export_text(&self) -> String {
        let (records, _) = self.snapshot();
        render(&records)
    }

    fn snapshot(&self) -> (Vec<AuditRecord>, AuditCounts) {
        let ring = self.ring.lock();
        (ring.records.iter().cloned().collect(), ring.counts())
    }

    /// Writes the records as JSON Lines to `path` and a manifest to
    /// [`manifest_path`]`(path)`, from one snapshot. An old manifest is removed first,
    /// so an interrupted export never claims to be complete. Returns the manifest path.
    ///
    /// # Errors
    /// [`ControlError::AuditIo`] when a file cannot be removed or written.
    pub fn export(&self, path: &Path) -> Result<PathBuf, ControlError> {
        let manifest = manifest_path(path);
        match fs::remove_file(&manifest) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                return Err(ControlError::AuditIo {
                    path: manifest,
                    error,
                })
            }
        }
        let (records, counts) = self.snapshot();
        let text = render(&records);
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error| ControlError::AuditIo { path, error }
        };
        fs::write(path, text.as_bytes()).map_err(io(path))?;
        let body = Manifest {
            format: EXPORT_FORMAT.to_owned(),
            version: EXPORT_VERSION,
            sha256: sha256_hex(text.as_bytes()),
            total: counts.total,
            retained: counts.retained,
            dropped: counts.dropped,
            sink_failures: counts.sink_failures,
            complete: counts.complete,
        };
        let json = serde_json::to_vec_pretty(&body).map_err(|error| ControlError::AuditIo {
            path: manifest.clone(),
            error: std::io::Error::other(error),
        })?;
        let temporary = manifest.with_extension("json.tmp");
        fs::write(&temporary, json).map_err(io(&temporary))?;
        fs::rename(&temporary, &manifest).map_err(io(&manifest))?;
        Ok(manifest)
    }
}

impl Ring {
    fn push(&mut self, new: NewRecord) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut cut = 0u64;
        let record = AuditRecord {
            seq,
            record: new.record,
            request_id: new.request_id,
            root_id: new.root_id,
            cause_seq: new.cause_seq,
            op_id: bounded_option(new.op_id, &mut cut),
            what: bounded(new.what, &mut cut),
            outcome: bounded_option(new.outcome, &mut cut),
            reason: bounded_option(new.reason, &mut cut),
            generation: new.generation,
            name: bounded_option(new.name, &mut cut),
            kind: new.kind,
            from: bounded_option(new.from, &mut cut),
            to: bounded_option(new.to, &mut cut),
            effects: new
                .effects
                .into_iter()
                .map(|effect| bounded(effect, &mut cut))
                .collect(),
            cause_op: bounded_option(new.cause_op, &mut cut),
        };
        self.truncated += cut;
        let size = record_size(&record);
        // the newest record is always kept: the oldest go first, counted as dropped
        while self.records.len() >= self.capacity
            || (!self.records.is_empty() && self.bytes + size > self.max_bytes)
        {
            let Some(oldest) = self.records.pop_front() else {
                break;
            };
            self.bytes -= record_size(&oldest);
            self.dropped += 1;
        }
        self.bytes += size;
        self.records.push_back(record);
        seq
    }

    fn counts(&self) -> AuditCounts {
        AuditCounts {
            total: self.next_seq - 1,
            retained: self.records.len() as u64,
            dropped: self.dropped,
            sink_failures: self.sink_failures,
            complete: self.dropped == 0 && self.sink_failures == 0,
            bytes: self.bytes as u64,
            truncated: self.truncated,
        }
    }
}

/// `text`, cut to [`MAX_AUDIT_FIELD_BYTES`] at a character boundary with a marker that
/// gives its full length when it is longer (counted in `cut`).
fn bounded(text: String, cut: &mut u64) -> String {
    if text.len() <= MAX_AUDIT_FIELD_BYTES {
        return text;
    }
    *cut += 1;
    let mut end = MAX_AUDIT_FIELD_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…[truncated: {} bytes]", &text[..end], text.len())
}

fn bounded_option(text: Option<String>, cut: &mut u64) -> Option<String> {
    text.map(|text| bounded(text, cut))
}

/// The bytes a record holds: its fixed part and its texts.
fn record_size(record: &AuditRecord) -> usize {
    let optional = |text: &Option<String>| text.as_ref().map_or(0, String::len);
    std::mem::size_of::<AuditRecord>()
        + record.what.len()
        + optional(&record.op_id)
        + optional(&record.outcome)
        + optional(&record.reason)
        + optional(&record.name)
        + optional(&record.from)
        + optional(&record.to)
        + optional(&record.cause_op)
        + record
            .effects
            .iter()
            .map(|effect| effect.len() + std::mem::size_of::<String>())
            .sum::<usize>()
}

fn render(records: &[AuditRecord]) -> String {
    let mut text = String::new();
    for record in records {
        // a record of plain strings and numbers always serializes
        if let Ok(line) = serde_json::to_string(record) {
            text.push_str(&line);
            text.push('\n');
        }
    }
    text
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The manifest written beside an export.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always [`EXPORT_FORMAT`].
    pub format: String,
    /// Always [`EXPORT_VERSION`].
    pub version: u32,
    /// The sha256 of the exact exported bytes, in lowercase hex.
    pub sha256: String,
    /// Records ever written.
    pub total: u64,
    /// Records exported.
    pub retained: u64,
    /// Records dropped before the export.
    pub dropped: u64,
    /// Mirror writes that failed.
    pub sink_failures: u64,
    /// Nothing dropped and no write failed.
    pub complete: bool,
}

/// The manifest path of an export: the export's file name with `.manifest.json` added.
pub fn manifest_path(export: &Path) -> PathBuf {
    let mut name = export.file_name().unwrap_or_default().to_os_string();
    name.push(".manifest.json");
    export.with_file_name(name)
}

/// What [`verify`] concludes about an export.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verification {
    /// The manifest matches the bytes and nothing was dropped or failed. Necessary,
    /// not sufficient, for an invariant pass.
    Complete,
    /// The manifest matches, but records were dropped or failed to write.
    Incomplete,
    /// The manifest is missing, malformed, inconsistent or does not match the bytes.
    Unknown,
}

impl Verification {
    /// True only for [`Verification::Complete`].
    pub fn permits_invariant_pass(self) -> bool {
        self == Verification::Complete
    }
}

/// Checks an export against its manifest, reading only the two files.
pub fn verify(path: &Path) -> Verification {
    let Ok(manifest_bytes) = fs::read(manifest_path(path)) else {
        return Verification::Unknown;
    };
    let Ok(manifest) = serde_json::from_slice::<Manifest>(&manifest_bytes) else {
        return Verification::Unknown;
    };
    let Ok(bytes) = fs::read(path) else {
        return Verification::Unknown;
    };
    let lines = bytes.iter().filter(|byte| **byte == b'\n').count() as u64;
    let consistent = manifest.format == EXPORT_FORMAT
        && manifest.version == EXPORT_VERSION
        && manifest.sha256 == sha256_hex(&bytes)
        && manifest.retained == lines
        && manifest.total == manifest.retained + manifest.dropped
            // a failed mirror write adds a fallback record, never removes one
        && manifest.complete == (manifest.dropped == 0 && manifest.sink_failures == 0);
    match (consistent, manifest.complete) {
        (false, _) => Verification::Unknown,
        (true, true) => Verification::Complete,
        (true, false) => Verification::Incomplete,
    }
}

/// Reads an export and returns the records of one request (by `root_id`), in export
/// order.
///
/// # Errors
/// [`ControlError::AuditIo`] when the file cannot be read or a line is not a record.
pub fn read_request(path: &Path, root_id: Option<u64>) -> Result<Vec<AuditRecord>, ControlError> {
    let io = |error| ControlError::AuditIo {
        path: path.to_path_buf(),
        error,
    };
    let file = fs::File::open(path).map_err(io)?;
    let mut found = Vec::new();
    for line in std::io::BufReader::new(file).lines() {
        let line = line.map_err(io)?;
        if line.trim().is_empty() {
            continue;
        }
        let record: AuditRecord = serde_json::from_str(&line)
            .map_err(|error| io(std::io::Error::new(std::io::ErrorKind::InvalidData, error)))?;
        if record.root_id == root_id {
            found.push(record);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn audit_with(records: usize, capacity: usize) -> ControlAudit {
        let audit = ControlAudit::new(capacity, None);
        for request in 0..records as u64 {
            let input = audit.write(NewRecord::new(RecordType::Input, Some(request), "Add"));
            audit.write(
                NewRecord::new(RecordType::Reply, Some(request), "Reply")
                    .cause(input)
                    .outcome("APPLIED"),
            );
        }
        audit
    }

    // control-plane-contracts "Control audit": seq gap-free, completeness
    #[test]
    fn records_carry_gap_free_seqs_and_the_ring_marks_drops_incomplete() {
        let audit = audit_with(3, 4);
        let records = audit.records();
        let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, vec![3, 4, 5, 6]);
        let counts = audit.counts();
        assert_eq!((counts.total, counts.retained, counts.dropped), (6, 4, 2));
        assert!(!audit.is_complete());
        assert!(audit_with(2, 4).is_complete());
    }

    // control-plane-contracts "Exporting it, with a completeness manifest"
    #[test]
    fn a_complete_export_verifies_complete() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pricing.jsonl");
        audit_with(2, 100).export(&path).expect("exported");
        assert_eq!(verify(&path), Verification::Complete);
    }

    #[test]
    fn an_export_of_a_ring_that_dropped_records_verifies_incomplete() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pricing.jsonl");
        audit_with(5, 3).export(&path).expect("exported");
        assert_eq!(verify(&path), Verification::Incomplete);
    }

    #[test]
    fn an_export_whose_bytes_changed_verifies_unknown() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pricing.jsonl");
        audit_with(2, 100).export(&path).expect("exported");
        let mut text = fs::read_to_string(&path).expect("read");
        text = text.replacen("APPLIED", "REFUSED", 1);
        fs::write(&path, text).expect("tampered");
        assert_eq!(verify(&path), Verification::Unknown);
    }

    #[test]
    fn an_export_without_a_manifest_or_with_a_malformed_one_verifies_unknown() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pricing.jsonl");
        audit_with(2, 100).export(&path).expect("exported");
        fs::write(manifest_path(&path), b"{ not json").expect("broken");
        assert_eq!(verify(&path), Verification::Unknown);
        fs::remove_file(manifest_path(&path)).expect("removed");
        assert_eq!(verify(&path), Verification::Unknown);
    }

    #[test]
    fn a_manifest_that_contradicts_its_counts_verifies_unknown() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pricing.jsonl");
        audit_with(5, 3).export(&path).expect("exported");
        let manifest = manifest_path(&path);
        let mut body: Manifest =
            serde_json::from_slice(&fs::read(&manifest).expect("read")).expect("parsed");
        body.complete = true; // claims completeness despite drops
        fs::write(&manifest, serde_json::to_vec(&body).expect("json")).expect("written");
        assert_eq!(verify(&path), Verification::Unknown);
    }

    // control-plane-contracts: "An export started again on the same path deletes the old sidecar first"
    #[test]
    fn a_re_export_that_fails_leaves_no_old_manifest_claiming_completeness() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pricing.jsonl");
        let audit = audit_with(2, 100);
        audit.export(&path).expect("exported");
        assert!(manifest_path(&path).exists());
        // the export file becomes a directory: the next export fails writing it
        fs::remove_file(&path).expect("removed");
        fs::create_dir(&path).expect("dir");
        audit
            .export(&path)
            .expect_err("cannot write over a directory");
        assert!(!manifest_path(&path).exists());
        assert_eq!(verify(&path), Verification::Unknown);
    }

    #[test]
    fn reading_an_export_by_root_id_returns_only_that_requests_records() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pricing.jsonl");
        audit_with(3, 100).export(&path).expect("exported");
        let records = read_request(&path, Some(1)).expect("read");
        assert_eq!(records.len(), 2);
        assert!(records.iter().all(|r| r.root_id == Some(1)));
        assert_eq!(records[1].cause_seq, Some(records[0].seq));
    }

    fn serialized_bytes(audit: &ControlAudit) -> usize {
        audit
            .records()
            .iter()
            .map(|record| serde_json::to_string(record).map_or(0, |line| line.len()))
            .sum()
    }

    // issue 10, item 3: one 1.9 MB admin command argument pinned about 7 MB in the ring
    // (the decision's command line, the failed effect's reason, the reply's reason), so
    // repeated requests grew memory without bound
    #[test]
    fn giant_fields_are_truncated_so_repeated_requests_pin_a_bounded_number_of_bytes() {
        let audit = ControlAudit::new(0, None);
        let giant = "a".repeat(1_900_000);
        for request in 0..30 {
            let input = audit.write(NewRecord::new(RecordType::Input, Some(request), "Admin"));
            for _ in 0..3 {
                audit.write(
                    NewRecord::new(RecordType::Decision, Some(request), "adminInvoke")
                        .cause(input)
                        .reason(format!("command: balance {giant}")),
                );
            }
        }
        let retained = serialized_bytes(&audit);
        assert!(
            retained <= DEFAULT_AUDIT_BYTES,
            "120 records of 1.9 MB each pin {retained} bytes"
        );
        let first = &audit.records()[1];
        let reason = first.reason.as_deref().unwrap_or_default();
        assert!(
            reason.len() < MAX_AUDIT_FIELD_BYTES + 64,
            "{}",
            reason.len()
        );
        assert!(
            reason.ends_with("…[truncated: 1900017 bytes]"),
            "the marker gives the full length: {} bytes",
            reason.len()
        );
        let counts = audit.counts();
        assert_eq!(counts.truncated, 90);
        assert!(counts.complete, "truncated records are kept, not dropped");
    }

    // issue 10, item 3: the ring's bytes are bounded, not only its records; what it
    // drops for bytes is counted like what it drops for records
    #[test]
    fn the_ring_is_bounded_in_bytes_and_a_drop_for_bytes_makes_it_incomplete() {
        let audit = ControlAudit::with_limits(10_000, 64 * 1024, None);
        for request in 0..100 {
            audit.write(
                NewRecord::new(RecordType::Input, Some(request), "Admin").reason("x".repeat(3000)),
            );
        }
        let counts = audit.counts();
        assert!(counts.bytes <= 64 * 1024, "{counts:?}");
        assert!(counts.dropped > 0 && !counts.complete, "{counts:?}");
        assert_eq!(counts.total, counts.retained + counts.dropped, "{counts:?}");
        let seqs: Vec<u64> = audit.records().iter().map(|r| r.seq).collect();
        assert_eq!(seqs.last(), Some(&100), "the newest are kept");
        assert!(seqs.windows(2).all(|pair| pair[1] == pair[0] + 1));
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("bank.jsonl");
        audit.export(&path).expect("exported");
        assert_eq!(verify(&path), Verification::Incomplete);
    }

    struct FailingMirror;
    impl Write for FailingMirror {
        fn write(&mut self, _buf: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk full"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    // control-plane-contracts "Replies and outcomes": evidence UNVERIFIED while a write failure is unacknowledged
    #[test]
    fn a_failed_mirror_write_degrades_evidence_until_acknowledged_and_keeps_the_audit_incomplete() {
        let audit = ControlAudit::new(100, Some(Box::new(FailingMirror)));
        audit.write(NewRecord::new(RecordType::Input, Some(1), "Add"));
        assert_eq!(audit.evidence(), EvidenceStatus::Unverified);
        assert!(audit
            .records()
            .iter()
            .any(|r| r.record == RecordType::Fallback && r.what == "SinkWriteFailed"));
        audit.acknowledge_failures();
        assert_eq!(audit.evidence(), EvidenceStatus::NotDegraded);
        assert!(!audit.is_complete());
    }
}
