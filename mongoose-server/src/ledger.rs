//! The ledger: the reference's kill-test application made real, and a model of a
//! stateful processor that survives `kill -9` with every line applied exactly once.
//!
//! Input lines are `account,amount` (account `[A-Za-z0-9_-]{1,64}`, amount a signed
//! 64-bit integer). For each line the ledger:
//!
//! 1. skips it if its saved state already contains it ([`Delivery::already_applied`]
//!    against the `(epoch, position)` saved with the state), before any change;
//! 2. applies it, or appends a malformed line with its position and reason to
//!    `rejected.log` (counted in its state and in `/metrics` as
//!    `mongoose_ledger_rejected_lines_total`);
//! 3. appends `position,account,balance` to the alerts file, unbuffered, when the
//!    account's balance is negative after the line;
//! 4. asks for the delivery-complete hook, which appends one checksummed record
//!    (the account's new balance, the counts and the feed's `(epoch, position)`) to the
//!    state journal in one write (fsync'd when `sync`). Every `compact_every` records
//!    the whole state is written as a checksummed snapshot (temp file, fsync, rename,
//!    fsync dir) and the journal emptied.
//!
//! A crash between the alert and the save repeats at most that line's alert; the state
//! is never applied twice, and the source's pointer is never ahead of the saved
//! position, so no line is skipped.
//!
//! # Torn writes and damage
//!
//! A crash can only cut the record being written short: the journal then ends with a
//! part of a record and no newline, and that record's line was never committed (the
//! pointer moves only after the record is saved). The next start cuts that part off
//! and the line is read again. Anything else that fails its checksum (a record with
//! whole records after it, a whole last record, a snapshot) was changed after it was
//! written: cutting it off would drop lines the pointer may already be past, so the
//! ledger refuses to start, leaves its files as they are, and its error names the
//! file, the record and its byte offset, and the way to recover ([`LedgerState::load`]).
//!
//! Its admin command `balance ACCOUNT` answers with the account's balance in memory
//! (`POST /processors/{group}/{name}/commands/balance` with `{"args": ["ACCOUNT"]}`): it
//! runs on the group's thread between lines, so it reads a balance every line before it
//! is applied to ([`mongoose_control::admin`]).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::config::{
    AdminConfig, FeedConfig, GroupConfig, IdleStrategyConfig, OverloadConfig, ServerConfig,
    SourceKind,
};
use crate::sinks::FileSink;
use crate::{Server, ServerBuilder, ServerError, SettingsCheck, SettingsError};
use mongoose_control::admin;
use mongoose_core::{
    CompletionKey, Delivery, DeliveryContext, Epoch, PositionValue, Processor, ProcessorError,
    SavedPosition, Subscriptions,
};
use mongoose_source_file::{Line, ReadStrategy};
use serde::{Deserialize, Serialize};
use tracing::{debug, warn};

/// The ledger's durable state: what `--dump-state` prints.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerState {
    /// Balance per account.
    pub balances: BTreeMap<String, i64>,
    /// Lines applied.
    pub applied: u64,
    /// Malformed lines (written to `rejected.log`).
    pub rejected: u64,
    /// The feed epoch of the last line of lane 0 in the state (a single-file feed's
    /// only lane).
    pub epoch: u64,
    /// The feed position (byte offset after the line) of the last line of lane 0 in
    /// the state.
    pub position: u64,
    /// The `(epoch, position)` of the last line of every other lane in the state: one
    /// per file of a glob feed (lanes start at 1). A state written before lanes has
    /// none: its `epoch`/`position` are lane 0's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub lanes: BTreeMap<u32, LanePosition>,
}

/// The saved `(epoch, position)` of one lane.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LanePosition {
    /// The lane's epoch.
    pub epoch: u64,
    /// The byte offset after the lane's last line in the state.
    pub position: u64,
}

impl LedgerState {
    /// The saved `(epoch, position)` of `lane`, if the state holds a line of it.
    pub fn position_of(&self, lane: u32) -> Option<LanePosition> {
        if lane == 0 {
            return (self.epoch != 0).then_some(LanePosition {
                epoch: self.epoch,
                position: self.position,
            });
        }
        self.lanes.get(&lane).copied()
    }

    /// What the state holds for `lane`, `(0, 0)` when nothing.
    fn stored_position(&self, lane: u32) -> LanePosition {
        if lane == 0 {
            return LanePosition {
                epoch: self.epoch,
                position: self.position,
            };
        }
        self.lanes.get(&lane).copied().unwrap_or_default()
    }

    /// Records `(epoch, position)` as the last line of `lane` in the state.
    pub fn set_position(&mut self, lane: u32, epoch: u64, position: u64) {
        if lane == 0 {
            self.epoch = epoch;
            self.position = position;
        } else {
            self.lanes.insert(lane, LanePosition { epoch, position });
        }
    }
}

impl LedgerState {
    /// The state file inside a state folder.
    pub fn path(state_dir: &Path) -> PathBuf {
        state_dir.join("state.json")
    }

    /// The journal of per-delivery records after the snapshot.
    pub fn journal_path(state_dir: &Path) -> PathBuf {
        state_dir.join("journal.log")
    }

    /// Reads the saved state: the snapshot, then every whole record of the journal. A
    /// torn last record (a crash mid-write) is left out; a damaged snapshot or journal
    /// record is an error that names the file, the record and what to do, and nothing
    /// is changed on disk.
    pub fn load(state_dir: &Path) -> Result<Self, ProcessorError> {
        Self::load_with_journal_end(state_dir).map(|(state, _)| state)
    }

    /// The saved state and the length of the journal's whole records (a torn last
    /// record ends before it).
    fn load_with_journal_end(state_dir: &Path) -> Result<(Self, u64), ProcessorError> {
        let path = Self::path(state_dir);
        let mut state = match std::fs::read(&path) {
            Ok(bytes) => decode_snapshot(&bytes).map_err(|damage| {
                ProcessorError::new(format!(
                    "the ledger snapshot {} {damage}: the ledger does not start, and leaves the file as it is. {}",
                    path.display(),
                    recovery(state_dir)
                ))
            })?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Self::default(),
            Err(error) => {
                return Err(ProcessorError::new(format!("cannot read {}: {error}", path.display())))
            }
        };
        let journal = Self::journal_path(state_dir);
        let bytes = match std::fs::read(&journal) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(error) => {
                return Err(ProcessorError::new(format!(
                    "cannot read {}: {error}",
                    journal.display()
                )))
            }
        };
        let mut end = 0usize;
        let mut number = 0usize;
        while end < bytes.len() {
            let rest = &bytes[end..];
            let whole = first_line_length(rest).and_then(|length| {
                JournalRecord::decode(&rest[..length]).map(|record| (record, length))
            });
            let Some((record, length)) = whole else {
                if let Some(damage) = journal_damage(rest) {
                    return Err(ProcessorError::new(format!(
                        "the ledger journal {} is damaged: record {} at byte offset {end} fails its checksum and {damage}. The ledger does not start, and leaves the journal as it is. {}",
                        journal.display(),
                        number + 1,
                        recovery(state_dir)
                    )));
                }
                break; // a torn last record (a crash mid-write): the state ends before it
            };
            record.apply(&mut state);
            end += length;
            number += 1;
        }
        Ok((state, end as u64))
    }

    /// Saves atomically: a temp file, fsync, rename over the state, fsync the folder
    /// (when `sync` is true; without it a process crash still never tears the file,
    /// only a power loss can lose the last saves).
    pub fn save(&self, state_dir: &Path, sync: bool) -> std::io::Result<()> {
        let path = Self::path(state_dir);
        let temporary = state_dir.join("state.json.tmp");
        let bytes = encode_snapshot(self)?;
        let mut file = File::create(&temporary)?;
        file.write_all(&bytes)?;
        if sync {
            file.sync_all()?;
        }
        drop(file);
        std::fs::rename(&temporary, &path)?;
        if sync {
            File::open(state_dir)?.sync_all()?;
        }
        Ok(())
    }
}

/// The snapshot layout this ledger writes: `{"format":2,"crc32":N,"state":STATE}` and a
/// newline, where `N` is the crc32 of the exact bytes of `STATE` (the
/// [`LedgerState`] as compact JSON). Format 1 is a bare [`LedgerState`] without a
/// checksum (read, never written).
const SNAPSHOT_FORMAT: u32 = 2;

/// What comes before the state's bytes in a snapshot with checksum `crc32`.
fn snapshot_prefix(crc32: u32) -> String {
    format!("{{\"format\":{SNAPSHOT_FORMAT},\"crc32\":{crc32},\"state\":")
}

fn encode_snapshot(state: &LedgerState) -> std::io::Result<Vec<u8>> {
    let body = serde_json::to_vec(state).map_err(std::io::Error::other)?;
    let mut bytes = snapshot_prefix(crc32fast::hash(&body)).into_bytes();
    bytes.extend_from_slice(&body);
    bytes.extend_from_slice(b"}\n");
    Ok(bytes)
}

/// The fields that tell a snapshot's layout (the others are ignored here).
#[derive(Deserialize)]
struct SnapshotHeader {
    format: Option<u32>,
    crc32: Option<u32>,
}

/// The state in a snapshot, or what is wrong with it (completing "the ledger snapshot
/// PATH ...").
fn decode_snapshot(bytes: &[u8]) -> Result<LedgerState, String> {
    let header: SnapshotHeader = serde_json::from_slice(bytes)
        .map_err(|error| format!("is damaged: it is not valid JSON ({error})"))?;
    match (header.format, header.crc32) {
        (None, _) => {
            // format 1, written before snapshots had a checksum: the next one has it
            let state = serde_json::from_slice(bytes).map_err(|error| {
                format!("is damaged: it is not a ledger state ({error})")
            })?;
            debug!("the ledger snapshot has no checksum (format 1); the next snapshot has one");
            Ok(state)
        }
        (Some(SNAPSHOT_FORMAT), Some(crc32)) => {
            let body = bytes
                .strip_prefix(snapshot_prefix(crc32).as_bytes())
                .and_then(|rest| rest.strip_suffix(b"}\n"))
                .ok_or_else(|| {
                    format!("is damaged: it is not laid out as the ledger writes it (format {SNAPSHOT_FORMAT})")
                })?;
            if crc32fast::hash(body) != crc32 {
                return Err(
                    "fails its checksum: it was changed after it was written (a crash never does that: snapshots are renamed into place whole)"
                        .to_owned(),
                );
            }
            serde_json::from_slice(body).map_err(|error| {
                format!("is damaged: its state does not decode although its checksum matches ({error})")
            })
        }
        (Some(SNAPSHOT_FORMAT), None) => Err("is damaged: it has no crc32".to_owned()),
        (Some(format), _) => Err(format!(
            "has format {format}, which this ledger does not read (it reads {SNAPSHOT_FORMAT}, and 1 without a format field): it was written by a newer version, or it is damaged"
        )),
    }
}

/// The length of the first line of `bytes` with its newline, if it has one.
fn first_line_length(bytes: &[u8]) -> Option<usize> {
    bytes
        .iter()
        .position(|byte| *byte == b'\n')
        .map(|index| index + 1)
}

/// Whether the journal bytes from a record that fails its checksum to the end are
/// damage (`Some`, completing "record N at byte offset B fails its checksum and ..."),
/// or a torn write (`None`).
///
/// A crash cuts the record being written short: what it leaves has no newline (the
/// newline is a record's last byte, and JSON holds none) and is the journal's end.
/// Anything else (a newline in it, whole records after it, or a whole record whose
/// newline alone is damaged) was changed after it was written.
fn journal_damage(rest: &[u8]) -> Option<String> {
    let whole_after = whole_records_in(&rest[1..]);
    if whole_after > 0 {
        let follow = if whole_after == 1 {
            "whole record follows"
        } else {
            "whole records follow"
        };
        return Some(format!(
            "{whole_after} {follow} it: a crash only ever cuts the last record short, so this is damage, not a torn write"
        ));
    }
    let whole_but_damaged = rest.contains(&b'\n')
        || rest.split_last().is_some_and(|(_, body)| {
            let mut terminated = body.to_vec();
            terminated.push(b'\n');
            JournalRecord::decode(&terminated).is_some()
        });
    whole_but_damaged.then(|| {
        "it is the last record but a whole one (it has its newline, or only its newline is damaged): a crash only ever cuts a record short, so this is damage, and the line it saved may already be committed by the feed's pointer (cutting the record off would skip that line)"
            .to_owned()
    })
}

/// How many whole records with a valid checksum start anywhere in `bytes`, at a line
/// start or not (a lost newline merges two records into one line).
fn whole_records_in(bytes: &[u8]) -> usize {
    (0..bytes.len())
        .filter(|start| {
            let candidate = &bytes[*start..];
            candidate.len() > 9
                && candidate[8] == b' '
                && candidate[..8].iter().all(u8::is_ascii_hexdigit)
                && first_line_length(candidate)
                    .and_then(|length| JournalRecord::decode(&candidate[..length]))
                    .is_some()
        })
        .count()
}

/// What an operator can do about a damaged state folder, for the error messages.
fn recovery(state_dir: &Path) -> String {
    format!(
        "To recover, with the server stopped, either restore the state folder {dir} from a backup together with the feed's pointer file saved with it (for a file feed, `<input file>.readPointer` beside the input), or move {dir} away (keep it to inspect) and remove that pointer file, so that the input is read again from its start and every line is applied once into a new state (this needs the input to still hold every line the ledger has read; the alerts of the lines read again are written again)",
        dir = state_dir.display()
    )
}

/// One journal record: what a delivery changed, with the counts and position after it.
/// Records hold absolute values, so replaying a record again changes nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct JournalRecord {
    account: Option<(String, i64)>,
    /// Accounts changed by earlier deliveries whose saves failed: a later record
    /// carries them, so a save that succeeds after failed ones never leaves their
    /// changes out while its position says they are applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    unsaved: Vec<(String, i64)>,
    applied: u64,
    rejected: u64,
    /// The lane of `epoch`/`position` (absent: lane 0, as in records written before
    /// lanes).
    #[serde(default, skip_serializing_if = "is_lane_zero")]
    lane: u32,
    epoch: u64,
    position: u64,
    /// The `(lane, epoch, position)` of other lanes changed by earlier deliveries whose
    /// saves failed (as `unsaved` for accounts): their changes are in this record, so
    /// their positions are too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    unsaved_lanes: Vec<(u32, u64, u64)>,
}

fn is_lane_zero(lane: &u32) -> bool {
    *lane == 0
}

impl JournalRecord {
    /// `crc32 (8 hex digits) SPACE json NEWLINE`.
    fn encode(&self) -> Vec<u8> {
        let json = serde_json::to_vec(self).unwrap_or_default();
        let mut line = format!("{:08x} ", crc32fast::hash(&json)).into_bytes();
        line.extend_from_slice(&json);
        line.push(b'\n');
        line
    }

    fn decode(line: &[u8]) -> Option<Self> {
        let body = line.strip_suffix(b"\n")?;
        if body.len() < 10 || body[8] != b' ' {
            return None;
        }
        let checksum = u32::from_str_radix(std::str::from_utf8(&body[..8]).ok()?, 16).ok()?;
        let json = &body[9..];
        if crc32fast::hash(json) != checksum {
            return None;
        }
        serde_json::from_slice(json).ok()
    }

    fn apply(&self, state: &mut LedgerState) {
        for (account, balance) in self.unsaved.iter().chain(&self.account) {
            state.balances.insert(account.clone(), *balance);
        }
        state.applied = self.applied;
        state.rejected = self.rejected;
        for (lane, epoch, position) in &self.unsaved_lanes {
            state.set_position(*lane, *epoch, *position);
        }
        state.set_position(self.lane, self.epoch, self.position);
    }
}

/// The ledger's settings (`[groups.processors.settings]` in the config).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerSettings {
    /// The feed of `account,amount` lines (default `lines`).
    #[serde(default = "default_feed")]
    pub feed: String,
    /// Where the state and `rejected.log` live.
    pub state_dir: PathBuf,
    /// The alerts file (or give `alerts_sink`).
    #[serde(default)]
    pub alerts: Option<PathBuf>,
    /// A configured `[[sinks]]` entry to write alerts to, instead of `alerts`.
    #[serde(default)]
    pub alerts_sink: Option<String>,
    /// Skip re-delivered lines by the saved position (default true; false shows what a
    /// crash does without the consumer-side offset).
    #[serde(default = "yes")]
    pub guard: bool,
    /// fsync each journal record and snapshot (default true; without it a process
    /// crash still loses nothing, only a power loss can).
    #[serde(default = "yes")]
    pub sync: bool,
    /// Journal records between two snapshots (default 100,000).
    #[serde(default = "default_compact_every")]
    pub compact_every: u64,
}

fn default_compact_every() -> u64 {
    100_000
}

fn default_feed() -> String {
    "lines".to_owned()
}

fn yes() -> bool {
    true
}

/// Why a line is not applied.
fn parse_line(line: &str) -> Result<(&str, i64), &'static str> {
    let (account, amount) = line.split_once(',').ok_or("expected account,amount")?;
    let valid_account = !account.is_empty()
        && account.len() <= 64
        && account
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-');
    if !valid_account {
        return Err("the account must be 1 to 64 of A-Z a-z 0-9 _ -");
    }
    let amount = amount
        .trim_end()
        .parse::<i64>()
        .map_err(|_| "the amount is not a signed 64-bit integer")?;
    Ok((account, amount))
}

const SAVE: CompletionKey = CompletionKey::SAVE;

/// The ledger processor.
#[derive(Debug)]
pub struct Ledger {
    settings: LedgerSettings,
    state: LedgerState,
    alerts: FileSink,
    rejected: File,
    journal: File,
    /// The journal's length after its last whole record.
    journal_len: u64,
    /// A failed write left bytes after `journal_len` that could not be cut off yet.
    journal_cut_pending: bool,
    journal_records: u64,
    /// The accounts changed since the last save that succeeded.
    changed: std::collections::BTreeSet<String>,
    /// The lane of the last delivery: its position goes in the next record.
    lane: u32,
    /// The lanes whose position changed since the last save that succeeded.
    changed_lanes: std::collections::BTreeSet<u32>,
}

impl Ledger {
    /// Opens the ledger: restores the saved state, opens the alerts and rejected files
    /// for appending.
    pub fn open(settings: LedgerSettings, alerts: FileSink) -> Result<Self, ProcessorError> {
        std::fs::create_dir_all(&settings.state_dir).map_err(|error| {
            ProcessorError::new(format!(
                "cannot create {}: {error}",
                settings.state_dir.display()
            ))
        })?;
        let (state, journal_end) = LedgerState::load_with_journal_end(&settings.state_dir)?;
        let journal_path = LedgerState::journal_path(&settings.state_dir);
        let journal = OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(false)
            .open(&journal_path)
            .map_err(|error| {
                ProcessorError::new(format!("cannot open {}: {error}", journal_path.display()))
            })?;
        let length = journal.metadata().map(|meta| meta.len()).unwrap_or(0);
        if length > journal_end {
            warn!(journal = %journal_path.display(), at = journal_end, torn_bytes = length - journal_end, "the ledger journal ends with a torn record (a crash cut its write short; its line was not committed and is read again): it is cut off");
            journal.set_len(journal_end).map_err(|error| {
                ProcessorError::new(format!("cannot cut {}: {error}", journal_path.display()))
            })?;
        }
        let mut journal = journal;
        std::io::Seek::seek(&mut journal, std::io::SeekFrom::End(0))?;
        let append = |path: &Path| {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|error| {
                    ProcessorError::new(format!(
                        "cannot open {} for appending: {error}",
                        path.display()
                    ))
                })
        };
        let rejected = append(&settings.state_dir.join("rejected.log"))?;
        Ok(Ledger {
            settings,
            state,
            alerts,
            rejected,
            journal,
            journal_len: journal_end,
            journal_cut_pending: false,
            journal_records: 0,
            changed: std::collections::BTreeSet::new(),
            lane: 0,
            changed_lanes: std::collections::BTreeSet::new(),
        })
    }

    /// The state in memory.
    pub fn state(&self) -> &LedgerState {
        &self.state
    }

    fn on_line(&mut self, line: &Line) -> Result<(), ProcessorError> {
        let delivery = DeliveryContext::current();
        if self.settings.guard {
            if let Some(delivery) = &delivery {
                // one saved position per lane (per file of a glob feed)
                let lane = delivery.lane();
                if let Some(saved) = self.state.position_of(lane) {
                    if delivery.already_applied(Epoch(saved.epoch), (lane, saved.position)) {
                        return Ok(()); // a re-delivery: the saved state already holds it
                    }
                }
            }
        }
        // `offset`, or `lane:offset` on a lane other than 0
        let position = delivery.as_ref().map_or_else(
            || "0".to_owned(),
            |delivery| delivery.position().to_string(),
        );
        // a line that is not UTF-8 has U+FFFD in its account or amount: rejected
        let text = line.text();
        match parse_line(&text) {
            Err(reason) => {
                self.state.rejected += 1;
                metrics::counter!("mongoose_ledger_rejected_lines_total").increment(1);
                writeln!(self.rejected, "{position},{reason},{line}")?;
            }
            Ok((account, amount)) => {
                let balance = self.state.balances.entry(account.to_owned()).or_insert(0);
                match balance.checked_add(amount) {
                    None => {
                        self.state.rejected += 1;
                        metrics::counter!("mongoose_ledger_rejected_lines_total").increment(1);
                        writeln!(
                            self.rejected,
                            "{position},the balance would overflow,{line}"
                        )?;
                    }
                    Some(updated) => {
                        *balance = updated;
                        self.state.applied += 1;
                        self.changed.insert(account.to_owned());
                        if updated < 0 {
                            // unbuffered: one write per alert, before the state save
                            self.alerts
                                .write_line(&format!("{position},{account},{updated}"))?;
                        }
                    }
                }
            }
        }
        if !DeliveryContext::on_complete(SAVE) {
            // no source position (not a positioned feed): save at once
            self.save()?;
        }
        Ok(())
    }

    /// Appends one record of what the delivery changed; compacts into a snapshot every
    /// `compact_every` records.
    fn save(&mut self) -> Result<(), ProcessorError> {
        // the changed account is forgotten only once its record is written: a failed
        // save is retried with it
        let mut changed = self.changed.iter().map(|account| {
            let balance = self.state.balances.get(account).copied().unwrap_or(0);
            (account.clone(), balance)
        });
        let account = changed.next();
        let saved = self.state.stored_position(self.lane);
        let record = JournalRecord {
            account,
            unsaved: changed.collect(),
            applied: self.state.applied,
            rejected: self.state.rejected,
            lane: self.lane,
            epoch: saved.epoch,
            position: saved.position,
            unsaved_lanes: self
                .changed_lanes
                .iter()
                .filter(|lane| **lane != self.lane)
                .map(|lane| {
                    let saved = self.state.stored_position(*lane);
                    (*lane, saved.epoch, saved.position)
                })
                .collect(),
        };
        let state_dir = self.settings.state_dir.clone();
        let failed = move |error: std::io::Error| {
            ProcessorError::new(format!(
                "cannot save the ledger state in {}: {error}",
                state_dir.display()
            ))
        };
        let encoded = record.encode();
        if self.journal_cut_pending {
            // a failed write left a part of a record that could not be cut off then: a
            // whole record after it would make it damage at the next start
            self.cut_journal_to_whole_records().map_err(&failed)?;
        }
        if let Err(error) = self.journal.write_all(&encoded) {
            // a part of the record may have been written: cut it off, so the retry's
            // record follows the last whole one
            self.journal_cut_pending = self.cut_journal_to_whole_records().is_err();
            return Err(failed(error));
        }
        // the record is in the file even if the sync below fails (a retry then writes
        // the same absolute values again after it)
        self.journal_len += encoded.len() as u64;
        if self.settings.sync {
            self.journal.sync_data().map_err(&failed)?;
        }
        self.changed.clear();
        self.changed_lanes.clear();
        self.journal_records += 1;
        if self.journal_records >= self.settings.compact_every.max(1) {
            // the snapshot holds everything the journal does; a crash before the journal
            // is emptied replays records whose absolute values the snapshot already has
            self.state
                .save(&self.settings.state_dir, self.settings.sync)
                .map_err(&failed)?;
            self.journal.set_len(0).map_err(&failed)?;
            std::io::Seek::seek(&mut self.journal, std::io::SeekFrom::Start(0)).map_err(&failed)?;
            self.journal_len = 0;
            if self.settings.sync {
                self.journal.sync_all().map_err(&failed)?;
            }
            self.journal_records = 0;
        }
        Ok(())
    }
}

impl Ledger {
    /// Cuts the journal back to its whole records and puts the write position there.
    fn cut_journal_to_whole_records(&mut self) -> std::io::Result<()> {
        self.journal.set_len(self.journal_len)?;
        std::io::Seek::seek(
            &mut self.journal,
            std::io::SeekFrom::Start(self.journal_len),
        )?;
        Ok(())
    }

    /// The admin command `balance ACCOUNT`: the account's balance, or an error naming
    /// an account the ledger never saw.
    pub fn balance(&mut self, args: &[String]) -> Result<String, ProcessorError> {
        let [account] = args else {
            return Err("usage: balance ACCOUNT".into());
        };
        match self.state.balances.get(account) {
            Some(balance) => Ok(balance.to_string()),
            None => Err(format!("no account '{account}' in the ledger").into()),
        }
    }
}

impl Processor for Ledger {
    fn start(&mut self, subscriptions: &mut dyn Subscriptions) -> Result<(), ProcessorError> {
        let feed = self.settings.feed.clone();
        subscriptions.subscribe(&feed, Ledger::on_line)?;
        admin::register_command("balance", Ledger::balance);
        Ok(())
    }

    fn saved_positions(&self) -> Vec<SavedPosition> {
        if !self.settings.guard {
            // without the guard the saved position decides nothing
            return Vec::new();
        }
        // one per lane the state holds a line of (a glob feed: one per file)
        let mut saved: Vec<SavedPosition> = self
            .state
            .position_of(0)
            .into_iter()
            .map(|lane_zero| (0, lane_zero))
            .chain(self.state.lanes.iter().map(|(lane, saved)| (*lane, *saved)))
            .map(|(lane, saved)| SavedPosition {
                feed: self.settings.feed.clone(),
                saved: Some((
                    Epoch(saved.epoch),
                    PositionValue {
                        lane,
                        offset: saved.position,
                    },
                )),
            })
            .collect();
        if saved.is_empty() {
            saved.push(SavedPosition {
                feed: self.settings.feed.clone(),
                saved: None,
            });
        }
        saved
    }

    fn on_delivery_complete(
        &mut self,
        _key: CompletionKey,
        delivery: &Delivery,
    ) -> Result<(), ProcessorError> {
        let lane = delivery.lane();
        let offset = delivery.position().offset;
        let past = self
            .state
            .position_of(lane)
            .is_none_or(|saved| offset > saved.position);
        if self.settings.guard || past {
            self.state
                .set_position(lane, delivery.epoch().get(), offset);
        }
        self.lane = lane;
        self.changed_lanes.insert(lane);
        if let Err(error) = self.save() {
            warn!(%error, "ledger save failed: retried by the group's retry policy");
            return Err(error);
        }
        Ok(())
    }
}

impl LedgerSettings {
    /// The ledger kind's settings check (its `validate(settings)` hook, run when the
    /// server is built and by `mongoose validate`): the settings deserialize (no
    /// unknown key, `state_dir` given), the feed is one the server has, exactly one of
    /// `alerts` (a file, not a directory) or `alerts_sink` (a configured sink) is
    /// given, and `state_dir` is a directory or does not exist yet. Opens nothing.
    pub fn check(check: &SettingsCheck<'_>) -> Result<(), SettingsError> {
        let settings: LedgerSettings = check.settings()?;
        check.feed("feed", &settings.feed)?;
        match (&settings.alerts, &settings.alerts_sink) {
            (Some(path), None) => {
                let resolved = check.resolve(path);
                if resolved.is_dir() {
                    return Err(SettingsError::at(
                        "alerts",
                        format!(
                            "{} is a directory: give the path of the alerts file (it need not exist yet)",
                            resolved.display()
                        ),
                    ));
                }
            }
            (None, Some(sink)) => check.sink("alerts_sink", sink)?,
            (None, None) => {
                return Err(SettingsError::new(
                    "no alerts output: give the ledger exactly one of alerts (a file) or alerts_sink (a configured sink)",
                ))
            }
            (Some(_), Some(_)) => {
                return Err(SettingsError::new(
                    "both alerts and alerts_sink are given: give the ledger exactly one of alerts (a file) or alerts_sink (a configured sink)",
                ))
            }
        }
        let state_dir = check.resolve(&settings.state_dir);
        if state_dir.exists() && !state_dir.is_dir() {
            return Err(SettingsError::at(
                "state_dir",
                format!(
                    "{} exists and is not a directory: give the ledger's state folder (it is created if missing)",
                    state_dir.display()
                ),
            ));
        }
        Ok(())
    }

    /// The defaults of a config file's settings table, with these paths: the feed
    /// `lines`, the guard on, fsync on, a snapshot every 100,000 records.
    pub fn new(state_dir: PathBuf, alerts: PathBuf) -> Self {
        LedgerSettings {
            feed: default_feed(),
            state_dir,
            alerts: Some(alerts),
            alerts_sink: None,
            guard: true,
            sync: true,
            compact_every: default_compact_every(),
        }
    }
}

/// The ledger example's server (`cargo run --example ledger`), built as values rather
/// than as TOML text, so its paths may hold any character a file name can, U+200B or
/// a byte that is not UTF-8 included: a COMMITED file feed `lines` on `input`, a group
/// `ledger` with the ledger processor `ledger`, and the admin API if asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerExample {
    /// The input file of `account,amount` lines (tailed).
    pub input: PathBuf,
    /// Where the state and `rejected.log` live.
    pub state_dir: PathBuf,
    /// The alerts file.
    pub alerts: PathBuf,
    /// Serve the admin API at this address (`127.0.0.1:PORT`).
    pub admin: Option<String>,
}

impl LedgerExample {
    /// The group and the processor's name.
    pub const GROUP: &'static str = "ledger";

    /// The server's configuration, checked as a file's is: the feed, the group (its
    /// processor is added by [`LedgerExample::server_builder`]: a config's processor
    /// settings are a TOML table, which holds UTF-8 text only) and the admin address.
    pub fn server_config(&self) -> Result<ServerConfig, ServerError> {
        ServerConfig {
            admin: self.admin.as_ref().map(|address| AdminConfig {
                address: address.clone(),
                token_file: None,
                export_root: None,
            }),
            feeds: vec![FeedConfig {
                name: default_feed(),
                source: SourceKind::File,
                path: self.input.clone(),
                read_strategy: ReadStrategy::Committed,
                queue_capacity: None,
                overload: OverloadConfig::default(),
                status_events: false,
                rotated: None,
                scan_interval_millis: None,
                max_open_files: None,
            }],
            groups: vec![GroupConfig {
                name: Self::GROUP.to_owned(),
                idle_strategy: IdleStrategyConfig::Backoff,
                core: None,
                processors: Vec::new(),
            }],
            base_dir: PathBuf::from("."),
            ..ServerConfig::default()
        }
        .validated()
    }

    /// The ledger's settings.
    pub fn ledger_settings(&self) -> LedgerSettings {
        LedgerSettings::new(self.state_dir.clone(), self.alerts.clone())
    }

    /// A builder of the server on `config` (from [`LedgerExample::server_config`])
    /// with the ledger added to its group. The ledger opens here: a state it cannot
    /// read (or an alerts file it cannot open) fails now, naming the file.
    pub fn server_builder(&self, config: ServerConfig) -> Result<ServerBuilder, ServerError> {
        let settings = self.ledger_settings();
        let refused = |message: String| ServerError::ProcessorSettings {
            name: Self::GROUP.to_owned(),
            kind: "ledger".to_owned(),
            message,
        };
        let alerts = FileSink::open(&self.alerts).map_err(|error| {
            refused(format!(
                "cannot open the alerts file {}: {error}",
                self.alerts.display()
            ))
        })?;
        let ledger = Ledger::open(settings, alerts).map_err(|error| refused(error.to_string()))?;
        Ok(Server::builder(config).processor(Self::GROUP, Self::GROUP, move || ledger))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guarded, unsynced settings with state under `dir`.
    fn test_settings(dir: &Path, compact_every: u64) -> LedgerSettings {
        LedgerSettings {
            feed: "lines".into(),
            state_dir: dir.join("state"),
            alerts: None,
            alerts_sink: None,
            guard: true,
            sync: false,
            compact_every,
        }
    }

    #[test]
    fn lines_parse_strictly() {
        assert_eq!(parse_line("acc_1,-42"), Ok(("acc_1", -42)));
        assert_eq!(parse_line("A-b,9223372036854775807"), Ok(("A-b", i64::MAX)));
        assert!(parse_line("acc").is_err());
        assert!(parse_line(",5").is_err());
        assert!(parse_line("bad account,5").is_err());
        assert!(parse_line(&format!("{},1", "a".repeat(65))).is_err());
        assert!(parse_line("acc,12x").is_err());
        assert!(parse_line("acc,99999999999999999999").is_err());
    }

    #[test]
    fn a_torn_journal_record_is_ignored_and_cut_off() {
        let dir = tempfile::tempdir().expect("dir");
        let settings = test_settings(dir.path(), 3);
        let alerts = || FileSink::open(&dir.path().join("alerts.txt")).expect("alerts");
        let mut ledger = Ledger::open(settings.clone(), alerts()).expect("opened");
        for (index, line) in ["a,5", "b,-2", "a,1", "c,7", "nonsense"].iter().enumerate() {
            ledger.state.position = (index as u64 + 1) * 10;
            ledger.on_line(&Line::from(*line)).expect("handled");
        }
        let expected = ledger.state.clone();
        assert_eq!(expected.applied, 4);
        assert_eq!(expected.rejected, 1);
        drop(ledger);
        assert_eq!(
            LedgerState::load(&settings.state_dir).expect("loaded"),
            expected,
            "snapshot + journal"
        );
        let journal = LedgerState::journal_path(&settings.state_dir);
        let mut bytes = std::fs::read(&journal).expect("journal");
        assert!(!bytes.is_empty(), "records after the last snapshot");
        let whole = bytes.len();
        bytes.extend_from_slice(b"0badc0de {\"account\":nul");
        std::fs::write(&journal, &bytes).expect("torn tail");
        let reopened = Ledger::open(settings, alerts()).expect("reopened");
        assert_eq!(reopened.state, expected, "the torn record adds nothing");
        assert_eq!(
            std::fs::read(&journal).expect("journal").len(),
            whole,
            "cut off"
        );
    }

    #[test]
    fn a_failed_save_is_retried_with_its_change_and_leaves_no_torn_record_behind() {
        let dir = tempfile::tempdir().expect("dir");
        let settings = test_settings(dir.path(), 1_000);
        let alerts = FileSink::open(&dir.path().join("alerts.txt")).expect("alerts");
        let mut ledger = Ledger::open(settings.clone(), alerts.clone()).expect("opened");
        ledger.on_line(&Line::from("a,5")).expect("applied");
        // the journal cannot be written: the save fails and keeps the change
        let journal = LedgerState::journal_path(&settings.state_dir);
        let writable = std::mem::replace(
            &mut ledger.journal,
            File::open(&journal).expect("read-only"),
        );
        ledger.state.balances.insert("b".into(), 7);
        ledger.changed.insert("b".into());
        assert!(ledger.save().is_err());
        ledger.journal = writable;
        ledger.save().expect("the retry saves");
        drop(ledger);
        let loaded = LedgerState::load(&settings.state_dir).expect("loaded");
        assert_eq!(
            loaded.balances.get("b"),
            Some(&7),
            "the retried record carries the change"
        );
        assert_eq!(loaded.balances.get("a"), Some(&5));
    }

    /// Three whole records, as the ledger writes them.
    fn three_records() -> Vec<u8> {
        (1..=3u64)
            .flat_map(|index| {
                JournalRecord {
                    account: Some((format!("acc{index}"), index as i64 * 10)),
                    unsaved: Vec::new(),
                    applied: index,
                    rejected: 0,
                    lane: 0,
                    epoch: 7,
                    position: index * 8,
                    unsaved_lanes: Vec::new(),
                }
                .encode()
            })
            .collect()
    }

    #[test]
    fn positions_are_kept_per_lane_and_an_old_single_position_is_lane_zero() {
        // a record and a snapshot written before lanes: their position is lane 0's
        let old_record = br#"{"account":["a",5],"applied":1,"rejected":0,"epoch":7,"position":8}"#;
        let mut journal = format!("{:08x} ", crc32fast::hash(old_record)).into_bytes();
        journal.extend_from_slice(old_record);
        journal.push(b'\n');
        // then records of lanes 1 and 2, the second carrying lane 1's unsaved position
        for record in [
            JournalRecord {
                account: Some(("b".into(), 1)),
                unsaved: Vec::new(),
                applied: 2,
                rejected: 0,
                lane: 1,
                epoch: 11,
                position: 30,
                unsaved_lanes: Vec::new(),
            },
            JournalRecord {
                account: Some(("c".into(), 2)),
                unsaved: Vec::new(),
                applied: 4,
                rejected: 0,
                lane: 2,
                epoch: 12,
                position: 6,
                unsaved_lanes: vec![(1, 11, 40)],
            },
        ] {
            journal.extend_from_slice(&record.encode());
        }
        let (state, _) = load_journal(&journal).expect("loaded");
        assert_eq!((state.epoch, state.position), (7, 8));
        assert_eq!(
            state.position_of(0),
            Some(LanePosition {
                epoch: 7,
                position: 8
            })
        );
        assert_eq!(
            state.position_of(1),
            Some(LanePosition {
                epoch: 11,
                position: 40
            })
        );
        assert_eq!(
            state.position_of(2),
            Some(LanePosition {
                epoch: 12,
                position: 6
            })
        );
        assert_eq!(state.position_of(3), None);
        // a snapshot round-trips the lanes; one without them reads as lane 0 only
        let dir = tempfile::tempdir().expect("dir");
        state.save(dir.path(), false).expect("saved");
        assert_eq!(LedgerState::load(dir.path()).expect("loaded"), state);
        let old: LedgerState = serde_json::from_str(
            r#"{"balances":{},"applied":0,"rejected":0,"epoch":3,"position":9}"#,
        )
        .expect("old snapshot");
        assert!(old.lanes.is_empty());
        assert_eq!(old.position_of(0).map(|saved| saved.position), Some(9));
    }

    /// Loads `journal` (no snapshot) from a fresh state folder.
    fn load_journal(journal: &[u8]) -> Result<(LedgerState, u64), ProcessorError> {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(LedgerState::journal_path(dir.path()), journal).expect("journal");
        LedgerState::load_with_journal_end(dir.path())
    }

    #[test]
    fn only_a_record_cut_short_at_the_end_is_a_torn_write() {
        let whole = three_records();
        let last_start = whole[..whole.len() - 1]
            .iter()
            .rposition(|byte| *byte == b'\n')
            .expect("two newlines")
            + 1;
        let (state, end) = load_journal(&whole).expect("whole");
        assert_eq!((state.applied, end), (3, whole.len() as u64));
        // cut short anywhere, or followed by zeros (a power loss before the sync): torn
        for torn in [
            whole[..whole.len() - 1].to_vec(),
            whole[..last_start + 5].to_vec(),
            [whole.as_slice(), &[0u8; 300]].concat(),
        ] {
            let (state, end) = load_journal(&torn).expect("a torn tail is not damage");
            assert!(end as usize <= whole.len() && state.applied >= 2);
        }
        let damaged = |journal: Vec<u8>, record: &str, offset: usize| {
            let error = load_journal(&journal).expect_err("damage is refused");
            assert!(
                error
                    .message()
                    .contains(&format!("record {record} at byte offset {offset} ")),
                "{error}"
            );
        };
        // a flipped byte in the last whole record
        let mut flipped = whole.clone();
        flipped[last_start + 12] ^= 0x01;
        damaged(flipped, "3", last_start);
        // its newline turned into another byte, the record otherwise whole
        let mut no_newline = whole.clone();
        *no_newline.last_mut().expect("bytes") = b' ';
        damaged(no_newline, "3", last_start);
        // a newline made inside the last record
        let mut split = whole.clone();
        split[last_start + 20] = b'\n';
        damaged(split, "3", last_start);
        // the newline between the last two records lost: the last record is whole
        // inside the damaged one, found by its frame
        let mut merged = whole.clone();
        merged[last_start - 1] = b'x';
        let second_start = whole[..last_start - 1]
            .iter()
            .rposition(|byte| *byte == b'\n')
            .expect("a newline")
            + 1;
        let error = load_journal(&merged).expect_err("refused");
        assert!(
            error
                .message()
                .contains(&format!("record 2 at byte offset {second_start} fails its checksum and 1 whole record follows it")),
            "{error}"
        );
    }

    #[test]
    fn a_snapshot_is_checksummed_and_one_without_a_checksum_is_still_read() {
        let dir = tempfile::tempdir().expect("dir");
        let mut state = LedgerState::default();
        state.balances.insert("acc1".into(), 1234);
        state.applied = 9;
        state.save(dir.path(), false).expect("saved");
        let path = LedgerState::path(dir.path());
        let bytes = std::fs::read(&path).expect("snapshot");
        assert!(bytes.starts_with(b"{\"format\":2,\"crc32\":"), "{bytes:?}");
        let _: serde_json::Value = serde_json::from_slice(&bytes).expect("still JSON");
        assert_eq!(LedgerState::load(dir.path()).expect("loaded"), state);
        // a flipped digit keeps the JSON valid: the checksum catches it
        let mut flipped = bytes.clone();
        let digit = flipped
            .windows(4)
            .position(|window| window == b"1234")
            .expect("the balance");
        flipped[digit + 3] ^= 0x01; // 1235: a leading 0 would not be JSON
        std::fs::write(&path, &flipped).expect("damaged");
        let error = LedgerState::load(dir.path()).expect_err("refused");
        assert!(error.message().contains("fails its checksum"), "{error}");
        // a newer format is refused by name
        let newer = String::from_utf8(bytes.clone()).expect("utf-8").replacen(
            "\"format\":2",
            "\"format\":3",
            1,
        );
        std::fs::write(&path, newer).expect("newer");
        let error = LedgerState::load(dir.path()).expect_err("refused");
        assert!(error.message().contains("format 3"), "{error}");
        // format 1 (a bare state, written before snapshots had a checksum) is read
        std::fs::write(&path, serde_json::to_vec(&state).expect("json")).expect("format 1");
        assert_eq!(LedgerState::load(dir.path()).expect("format 1"), state);
    }

    #[test]
    fn the_state_saves_atomically_and_loads_back() {
        let dir = tempfile::tempdir().expect("dir");
        let mut state = LedgerState::default();
        state.balances.insert("a".into(), -3);
        state.applied = 2;
        state.position = 17;
        state.save(dir.path(), true).expect("saved");
        assert!(
            !dir.path().join("state.json.tmp").exists(),
            "the temp file was renamed"
        );
        assert_eq!(LedgerState::load(dir.path()).expect("loaded"), state);
        std::fs::write(LedgerState::path(dir.path()), b"{torn").expect("write");
        let error = LedgerState::load(dir.path()).expect_err("a torn state is refused");
        assert!(error.message().contains("from a backup"), "{error}");
    }
}
