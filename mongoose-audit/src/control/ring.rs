//! The bounded ring of one group's audit: [`ControlAudit`], its record and byte
//! bounds, field truncation, the mirror and the counters.

use std::collections::VecDeque;
use std::fmt;
use std::io::Write;

use mongoose_core::EvidenceStatus;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::record::{AuditRecord, NewRecord, RecordType};
use super::{DEFAULT_AUDIT_BYTES, DEFAULT_AUDIT_CAPACITY, MAX_AUDIT_FIELD_BYTES};

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
#[serde(rename_all = "camelCase")]
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
    pub fn write(&self, new: NewRecord) -> u64 {
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

    pub(super) fn snapshot(&self) -> (Vec<AuditRecord>, AuditCounts) {
        let ring = self.ring.lock();
        (ring.records.iter().cloned().collect(), ring.counts())
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
