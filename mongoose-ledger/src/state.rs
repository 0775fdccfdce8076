//! The ledger's durable state: balances, counts and the saved positions, loaded from
//! its snapshot and journal and saved atomically.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::journal::{
    decode_snapshot, encode_snapshot, first_line_length, journal_damage, JournalRecord,
};
use mongoose_core::ProcessorError;
use serde::{Deserialize, Serialize};

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
    /// The last outbox record the snapshot holds: at load, only the records after it
    /// are applied.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub outbox_seq: u64,
    /// The state's identity: a run id (32 hex digits) made when the state folder was
    /// created, written in the first snapshot and carried by every outbox segment
    /// (their owner). Opening refuses an outbox written for another id (another
    /// ledger's, another run's). Empty in a state of an earlier build (it gets one at
    /// its next start).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub run: String,
}

/// A new run id: 16 bytes from the process's random hasher keys, the time and the
/// process id (unique per state folder, not secret).
pub(super) fn new_run_id() -> [u8; 16] {
    use std::hash::{BuildHasher, Hasher};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    let mut id = [0u8; 16];
    for (half, chunk) in id.chunks_mut(8).enumerate() {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(now);
        hasher.write_u32(std::process::id());
        hasher.write_usize(half);
        chunk.copy_from_slice(&hasher.finish().to_le_bytes());
    }
    id
}

/// `id` as 32 hex digits.
pub(super) fn run_hex(id: &[u8; 16]) -> String {
    id.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The id of 32 hex digits `hex`, if it is one.
pub(super) fn parse_run(hex: &str) -> Option<[u8; 16]> {
    if hex.len() != 32 || !hex.is_ascii() {
        return None;
    }
    let mut id = [0u8; 16];
    for (at, byte) in id.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[at * 2..at * 2 + 2], 16).ok()?;
    }
    Some(id)
}

fn is_zero(value: &u64) -> bool {
    *value == 0
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
    /// The state as pretty JSON with the summary first (`applied`, `rejected`, the
    /// positions, the number of `accounts`) and the `balances` last: what
    /// `--dump-state` prints, so a state of 100,000 accounts does not hide its counts
    /// at the bottom (issue 39, item 9).
    pub fn summary_first_json(&self) -> String {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        let balances = value
            .as_object_mut()
            .and_then(|object| {
                object.insert("accounts".to_owned(), self.balances.len().into());
                object.remove("balances")
            })
            .unwrap_or_default();
        let summary = serde_json::to_string_pretty(&value).unwrap_or_default();
        let balances = serde_json::to_string_pretty(&balances)
            .unwrap_or_default()
            .replace('\n', "\n  ");
        match summary.strip_suffix("\n}") {
            Some(open) => format!("{open},\n  \"balances\": {balances}\n}}"),
            // an empty object ("{}") cannot come from a state: print both anyway
            None => format!("{summary}\n{balances}"),
        }
    }

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
    pub(super) fn stored_position(&self, lane: u32) -> LanePosition {
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
    ///
    /// Reads the outbox without taking it over (a running ledger may be writing it):
    /// a group being written reads as not there yet.
    pub fn load(state_dir: &Path) -> Result<Self, ProcessorError> {
        let (mut state, _) = Self::load_with_journal_end(state_dir)?;
        let outbox = Self::outbox_path(state_dir);
        let recovery = mongoose_outbox::read(&outbox)
            .map_err(|error| ProcessorError::new(format!("{error}. {}", recovery(state_dir))))?;
        state.apply_admissions(
            recovery
                .admissions
                .iter()
                .map(|(seq, admission)| (*seq, admission.state.as_slice())),
        )?;
        Ok(state)
    }

    /// The folder of the ledger's outbox in `state_dir`.
    pub fn outbox_path(state_dir: &Path) -> PathBuf {
        state_dir.join("outbox")
    }

    /// Applies the records (each an outbox admission's state: one journal record)
    /// after the snapshot's `outbox_seq`, in order; how many.
    ///
    /// # Errors
    /// A record that is not a journal record (the outbox checked its bytes: a record
    /// of another program).
    pub(super) fn apply_admissions<'a>(
        &mut self,
        admissions: impl Iterator<Item = (u64, &'a [u8])>,
    ) -> Result<u64, ProcessorError> {
        let mut applied = 0;
        for (seq, bytes) in admissions {
            if seq <= self.outbox_seq {
                continue;
            }
            let Some(record) = JournalRecord::decode(bytes) else {
                return Err(ProcessorError::new(format!(
                    "outbox record {seq} is not a ledger journal record: the ledger does not start"
                )));
            };
            record.apply(self);
            self.outbox_seq = seq;
            applied += 1;
        }
        Ok(applied)
    }

    /// The saved state and the length of the journal's whole records (a torn last
    /// record ends before it).
    pub(super) fn load_with_journal_end(state_dir: &Path) -> Result<(Self, u64), ProcessorError> {
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
    ///
    /// A failed save leaves the last snapshot as it was and removes its temp file (a
    /// full disk keeps no half-written copy taking space).
    pub fn save(&self, state_dir: &Path, sync: bool) -> std::io::Result<()> {
        let path = Self::path(state_dir);
        let bytes = encode_snapshot(self)?;
        if sync {
            mongoose_durable::replace::replace(&path, &bytes)?;
        } else {
            mongoose_durable::replace::replace_unsynced(&path, &bytes)?;
        }
        Ok(())
    }

    /// The temp file a snapshot is written to before it is renamed over
    /// [`LedgerState::path`].
    pub fn temporary_path(state_dir: &Path) -> PathBuf {
        // `state.json.tmp`: the durable layer's name for it
        mongoose_durable::replace::temporary_path(&Self::path(state_dir))
    }
}

/// How to start over with a new state, for the error messages.
pub(super) fn recovery_start_over(state_dir: &Path) -> String {
    format!(
        "to start over, with the server stopped, move {dir} away (keep it to inspect) and remove the feed's pointer file (for a file feed, `<input file>.readPointer` beside the input), so that the input is read again from its start and every line is applied once into a new state",
        dir = state_dir.display()
    )
}

/// What an operator can do about a damaged state folder, for the error messages.
pub(super) fn recovery(state_dir: &Path) -> String {
    format!(
        "To recover, with the server stopped, either restore the state folder {dir} from a backup together with the feed's pointer file saved with it (for a file feed, `<input file>.readPointer` beside the input), or move {dir} away (keep it to inspect) and remove that pointer file, so that the input is read again from its start and every line is applied once into a new state (this needs the input to still hold every line the ledger has read; the alerts of the lines read again are written again)",
        dir = state_dir.display()
    )
}

#[cfg(test)]
mod dump_tests {
    use super::*;

    #[test]
    fn the_dump_puts_the_summary_before_the_balances() {
        let state = LedgerState {
            balances: (0..1000)
                .map(|index| (format!("acc{index:04}"), 5))
                .collect(),
            applied: 1000,
            rejected: 2,
            ..LedgerState::default()
        };
        let dump = state.summary_first_json();
        let at = |key: &str| dump.find(&format!("\"{key}\"")).expect(key);
        assert!(at("applied") < at("balances") && at("rejected") < at("balances"));
        assert!(at("accounts") < at("acc0000"));
        let parsed: serde_json::Value = serde_json::from_str(&dump).expect("JSON");
        assert_eq!(parsed["accounts"], 1000);
        assert_eq!(parsed["balances"]["acc0999"], 5);
        let back: LedgerState = serde_json::from_value(parsed).expect("a state");
        assert_eq!(
            back, state,
            "it reads back as the state (accounts is ignored)"
        );
    }
}
