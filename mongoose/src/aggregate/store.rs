//! What the aggregate keeps in its `state_dir`, on the ledger's durable machinery: the
//! outbox (`mongoose-outbox`) of the lines applied, one record per delivery with the
//! feed's position and the delivery's outputs, and a snapshot of the whole state
//! (postcard bytes of [`AggregateState`]) that lets the outbox forget the records it
//! holds.
//!
//! A record's state bytes are the delivery's lines with their positions, not a delta
//! of the state: [`Aggregate::apply`] is deterministic and idempotent by position, so
//! applying the records after the snapshot again gives the state the process had,
//! byte for byte.
//!
//! ```text
//! snapshot (state.snapshot: a mongoose_durable::snapshot)
//!   header   format "mongoose-aggregate-snapshot", version 1, owner = the state
//!            folder's run id (16 bytes; the outbox segments' owner)
//!   through  the last outbox record the snapshot holds
//!   body     AggregateState::to_bytes (its own magic and version, then postcard)
//! record (an outbox admission's state), repeated per line of the delivery
//!   lane 4, epoch 8, offset 8, length 4 (u32 LE), the line's bytes
//! ```

use std::path::{Path, PathBuf};

use mongoose_aggregate::{Aggregate, AggregateState, Aggregator, LinePosition};
use mongoose_core::{Epoch, PositionValue};
use mongoose_durable::header::Header;

/// The snapshot's format name in its header.
const FORMAT: &str = "mongoose-aggregate-snapshot";

/// The snapshot's format version.
const VERSION: u32 = 1;

/// The snapshot file in a state folder.
pub fn snapshot_path(state_dir: &Path) -> PathBuf {
    state_dir.join("state.snapshot")
}

/// The outbox folder in a state folder.
pub fn outbox_path(state_dir: &Path) -> PathBuf {
    state_dir.join("outbox")
}

/// A snapshot read back.
#[derive(Debug)]
pub struct Snapshot {
    /// The state folder's run id (the outbox's owner).
    pub run: [u8; 16],
    /// The last outbox record it holds.
    pub seq: u64,
    /// The state.
    pub state: AggregateState,
}

/// Writes the snapshot of `state` (holding the outbox records through `seq`) for the
/// state folder of run `run`, replacing the one at `path` whole.
///
/// # Errors
/// The file cannot be written (the previous snapshot is then intact).
pub fn write_snapshot(
    path: &Path,
    run: [u8; 16],
    seq: u64,
    state: &AggregateState,
) -> Result<(), mongoose_durable::DurableError> {
    mongoose_durable::snapshot::write(
        path,
        &Header::new(FORMAT, VERSION, run.to_vec()),
        seq,
        &state.to_bytes(),
    )
}

/// Reads the snapshot at `path` (`None` when there is none).
///
/// # Errors
/// A snapshot that cannot be read, is of another format or fails its checksum: the
/// message names the file and what to do.
pub fn read_snapshot(path: &Path) -> Result<Option<Snapshot>, String> {
    let damaged = |why: &str| {
        format!(
            "{why}: the aggregate does not start, and leaves its files as they are. {}",
            recovery(path.parent().unwrap_or(path))
        )
    };
    let Some(read) = mongoose_durable::snapshot::read(path, FORMAT, VERSION)
        .map_err(|error| damaged(&format!("the aggregate snapshot: {error}")))?
    else {
        return Ok(None);
    };
    let run: [u8; 16] = read.header.owner.as_slice().try_into().map_err(|_| {
        damaged(&format!(
            "the aggregate snapshot {} names no run id of 16 bytes",
            path.display()
        ))
    })?;
    let state = AggregateState::from_bytes(&read.body).map_err(|error| {
        damaged(&format!(
            "the aggregate snapshot {}: {error}",
            path.display()
        ))
    })?;
    Ok(Some(Snapshot {
        run,
        seq: read.through,
        state,
    }))
}

/// Appends one line at `at` to a record.
pub fn encode_line(record: &mut Vec<u8>, at: LinePosition, line: &[u8]) {
    record.extend_from_slice(&at.position.lane.to_le_bytes());
    record.extend_from_slice(&at.epoch.0.to_le_bytes());
    record.extend_from_slice(&at.position.offset.to_le_bytes());
    record.extend_from_slice(&(line.len() as u32).to_le_bytes());
    record.extend_from_slice(line);
}

/// Applies the lines of a record to `aggregate` (the outputs were admitted with the
/// record: what was not published is published again from the outbox). False for
/// bytes that are not a record.
pub fn replay_record(aggregate: &mut Aggregate, mut record: &[u8]) -> bool {
    while !record.is_empty() {
        if record.len() < 24 {
            return false;
        }
        let lane = u32::from_le_bytes(record[..4].try_into().unwrap_or_default());
        let epoch = u64::from_le_bytes(record[4..12].try_into().unwrap_or_default());
        let offset = u64::from_le_bytes(record[12..20].try_into().unwrap_or_default());
        let length = u32::from_le_bytes(record[20..24].try_into().unwrap_or_default()) as usize;
        let Some(line) = record.get(24..24 + length) else {
            return false;
        };
        let at = LinePosition {
            epoch: Epoch(epoch),
            position: PositionValue { lane, offset },
        };
        aggregate.apply(at, line);
        record = &record[24 + length..];
    }
    true
}

/// The aggregate's saved state in `state_dir`, read without taking the folder over (a
/// running server may be writing it): the snapshot, then the outbox's records after
/// it. For tests and tools.
///
/// # Errors
/// A damaged snapshot or outbox, or a state of another config.
pub fn load(state_dir: &Path, aggregator: Aggregator) -> Result<Aggregate, String> {
    let (mut aggregate, seq) = match read_snapshot(&snapshot_path(state_dir))? {
        Some(snapshot) => (
            Aggregate::restore(aggregator, snapshot.state).map_err(|error| error.to_string())?,
            snapshot.seq,
        ),
        None => (Aggregate::new(aggregator), 0),
    };
    let outbox = outbox_path(state_dir);
    if outbox.exists() {
        let recovery = mongoose_outbox::read(&outbox).map_err(|error| error.to_string())?;
        for (record, admission) in &recovery.admissions {
            if *record > seq && !replay_record(&mut aggregate, &admission.state) {
                return Err(format!("outbox record {record} is not an aggregate record"));
            }
        }
    }
    Ok(aggregate)
}

/// A new run id: 16 bytes from the process's random hasher keys, the time and the
/// process id (unique per state folder, not secret).
pub fn new_run_id() -> [u8; 16] {
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

/// What an operator can do about a damaged state folder.
pub fn recovery(state_dir: &Path) -> String {
    format!(
        "To recover, with the server stopped, either restore the state folder {dir} from a backup together with the feed's pointer file saved with it, or move {dir} away (keep it to inspect) and remove that pointer file, so that the input is read again from its start and every line is applied once into a new state",
        dir = state_dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_reads_back_and_a_changed_byte_is_refused() {
        let dir = tempfile::tempdir().expect("a folder");
        let path = snapshot_path(dir.path());
        let state = AggregateState {
            aggregates: "count".to_owned(),
            ..AggregateState::default()
        };
        write_snapshot(&path, [7; 16], 42, &state).expect("written");
        let bytes = std::fs::read(&path).expect("read");
        let read = read_snapshot(&path).expect("readable").expect("there");
        assert_eq!((read.run, read.seq, read.state), ([7; 16], 42, state));
        let mut changed = bytes.clone();
        let last = changed.len() - 1;
        changed[last] ^= 1;
        std::fs::write(&path, &changed).expect("written");
        let error = read_snapshot(&path).expect_err("refused");
        assert!(error.contains("checksum"), "{error}");
    }
}
