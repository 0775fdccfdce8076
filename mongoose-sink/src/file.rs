//! The file sink: lines appended to a file in batches, each batch made durable
//! (fdatasync) before its outputs are reported published, with exactly-once lines
//! across any `kill -9`, and a state that is checked against the file before it is
//! trusted.
//!
//! # What the sink knows, and where it keeps it
//!
//! Beside the file, `<file>.sinkstate` is a log ([`state`](#the-state-file)): a header
//! that says which file and which sink it belongs to, then one record per batch,
//! written and made durable *before* the batch's bytes. A record holds where the batch
//! goes in the file (its first and last byte and a CRC32 of its bytes) and, for each
//! writer's input lane it touched, exactly which keys the file holds: the last key
//! written, and the keys below it that are not in the file (an output refused by a full
//! disk and overtaken by later ones while it waits for its retry). So "is this output
//! in the file" has an exact answer: an output is dropped as already written only when
//! its key is at or before its lane's last key and not one of those gaps.
//!
//! A lane is a (feed, lane, writer, epoch) of the inputs: outputs of two processors
//! writing into one sink never share keys ([`OutputKey::writer`]), and a re-created
//! input (another epoch) starts a lane of its own. There is no bound on the number of
//! lanes: a record holds only the lanes its batch touched, and the log is compacted into
//! one snapshot record (written beside it and renamed into place) as it grows.
//!
//! # At open
//!
//! The state is checked before anything is trusted; every mismatch is a refusal that
//! names the file, says what is wrong and what to do ([`SinkError::State`]), and
//! changes nothing:
//!
//! | found | what the sink does |
//! |---|---|
//! | no file, or an empty one, and no state | starts the file |
//! | the last record's batch only partly in the file (a crash between the record and the end of its bytes) | cuts the partial batch off (its outputs were never reported published) |
//! | the file as the records say, its last batch's bytes matching their CRC | goes on |
//! | a record damaged (CRC), a header damaged, records that do not follow each other | refuses |
//! | the file longer than the records say (an older copy of the state, a cut one, something else wrote to it) | refuses |
//! | the file shorter than the records say (truncated, replaced) | refuses |
//! | the last batch's bytes differ from its CRC | refuses |
//! | a state of another file (device and inode), whose records do not match this file | refuses |
//! | a non-empty file with no state | refuses (which outputs it holds is unknown) |
//! | the state of the older format (`MGSINK01`) that matches the file's length | takes the file as it is, with a WARN (keys of the older format are not kept) |
//!
//! Output that was reported published is never cut: only bytes past the last record's
//! start that do not complete its batch are, and those were never reported.
//!
//! The output file is locked (`flock`) while the sink is open: a second file sink on the
//! same file (another `[[sinks]]` entry, a ledger's alerts file, another process) is
//! refused ([`SinkError::InUse`]).
//!
//! | `publish` step that fails | outcome |
//! |---|---|
//! | the state record, or the write or fdatasync of the bytes, and the file is cut back to its durable length | `NotPublished`, retryable |
//! | the same, and the file cannot be cut back | `Uncertain` (the next batch cuts it back first) |
//!
//! With `sync = false` nothing is fsync'd: a `kill -9` loses nothing (the page cache
//! survives it), a power loss can.
//!
//! # The state file
//!
//! ```text
//! header  magic "MGSNKST2" | version u64 LE (2) | length u32 LE | crc32 u32 LE | postcard(Identity)
//! record  length u32 LE | crc32 u32 LE | postcard(Frame)
//! ```
//!
//! A record's CRC32 covers the state's random id (in the header) then the record, so a
//! record of another state file is taken for damage. A last record cut short is a
//! write a crash interrupted (its batch's bytes were not written yet: they follow the
//! record) and is ignored; a whole record whose CRC does not match is damage.

use std::collections::{BTreeSet, HashMap};
use std::fs::{File, OpenOptions};
use std::hash::BuildHasher;
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mongoose_core::sink::{Output, OutputKey, Sink, SinkOutcome};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::error::SinkError;
use crate::writer::NO_INPUT;

/// A file sink's settings (`[[sinks]] kind = "file"`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSinkConfig {
    /// The file lines are appended to (created when absent).
    pub path: PathBuf,
    /// fdatasync each batch and its state record before reporting it published
    /// (default true).
    #[serde(default = "yes")]
    pub sync: bool,
}

fn yes() -> bool {
    true
}

/// The state file's magic.
const STATE_MAGIC: &[u8; 8] = b"MGSNKST2";
/// The state file's format version.
const STATE_VERSION: u64 = 2;
/// The bytes of the header before its identity.
const HEADER_BYTES: usize = 24;
/// The bytes of a record's length and CRC.
const RECORD_HEAD_BYTES: usize = 8;
/// The magic of the format before this one (two 64 KiB slots).
const OLD_MAGIC: &[u8; 8] = b"MGSINK01";
const OLD_SLOT_BYTES: usize = 64 * 1024;
/// The log is compacted once it is longer than this and twice its last snapshot.
const COMPACT_AFTER_BYTES: u64 = 48 * 1024;

/// The evidence of an output found already written.
const ALREADY_WRITTEN: &str = "already in the file (its key is recorded as written)";

/// What a state file belongs to: written once, in its header.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Identity {
    /// The sink's name when the state was made.
    sink: String,
    /// The output file's path when the state was made (for messages).
    path: String,
    /// The output file's device and inode.
    device: u64,
    inode: u64,
    /// A random id of this state, mixed into every record's CRC.
    state_id: u64,
    /// When it was made (milliseconds since the Unix epoch).
    created_unix_millis: u64,
}

/// Where a batch went in the file and what its bytes are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct BatchCheck {
    /// Its first byte.
    start: u64,
    /// The byte after its last.
    end: u64,
    /// CRC32 of its bytes.
    crc: u32,
}

/// One record of the state log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Frame {
    /// Written (and made durable) before a batch's bytes: where they go and the lanes
    /// the batch touched, as they are once it is written. `base` is the record this one
    /// follows: the last one whose batch was written (a record whose batch failed is
    /// followed by one with the same base).
    Batch {
        seq: u64,
        base: u64,
        check: BatchCheck,
        lanes: Vec<LaneRecord>,
    },
    /// Written (not synced) once a batch's bytes are written and synced: the batch
    /// of record `seq` is in the file. Without it, whether the last batch was written
    /// is for the file to say (its length and the batch's CRC).
    Written { seq: u64 },
    /// The whole state (the first record of a compacted log).
    Snapshot {
        seq: u64,
        length: u64,
        last: BatchCheck,
        lanes: Vec<LaneRecord>,
    },
}

/// One lane as a record holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct LaneRecord {
    /// Its number in this log.
    slot: u32,
    /// What it is: given the first time the log holds it.
    name: Option<LaneName>,
    /// The last key written: (position, index).
    last: (u64, u32),
    /// Keys below `last` that are not in the file.
    gaps: Vec<(u64, u32)>,
}

/// What a lane is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
struct LaneName {
    feed: String,
    lane: u32,
    writer: u64,
    epoch: u64,
}

/// A key within its lane: (position, index).
type At = (u64, u32);

/// One lane in memory.
#[derive(Debug)]
struct Lane {
    feed: Arc<str>,
    lane: u32,
    writer: u64,
    epoch: u64,
    slot: u32,
    /// Its name is in the state log (a written batch's record or the snapshot).
    persisted: bool,
    /// The last key written.
    last: Option<At>,
    /// Keys below `last` that are not in the file.
    gaps: BTreeSet<At>,
    /// Keys above `last` that were refused (a failed batch) and not written since: when
    /// a later key is written they become gaps. Not recorded: after a crash they are
    /// above the recorded `last`, so not held either.
    pending: BTreeSet<At>,
    /// The batch that last touched it (see `FileSink::batch`).
    touched_in: u64,
}

impl Lane {
    /// True when the file holds the output `at`.
    fn holds(&self, at: At) -> bool {
        self.last.is_some_and(|last| at <= last) && !self.gaps.contains(&at)
    }

    /// `at` (not held) is written.
    fn note_written(&mut self, at: At) {
        if self.gaps.remove(&at) {
            return;
        }
        if !self.pending.is_empty() {
            // refused keys below `at` are passed: the file does not hold them
            let above = self.pending.split_off(&at);
            let passed = std::mem::replace(&mut self.pending, above);
            self.gaps.extend(passed);
            self.pending.remove(&at);
        }
        self.last = Some(at);
    }

    /// `at` was refused (its batch failed).
    fn note_refused(&mut self, at: At) {
        if self.last.is_none_or(|last| at > last) {
            self.pending.insert(at);
        }
    }

    fn record(&self, slot: u32, with_name: bool) -> Option<LaneRecord> {
        Some(LaneRecord {
            slot,
            name: with_name.then(|| LaneName {
                feed: self.feed.to_string(),
                lane: self.lane,
                writer: self.writer,
                epoch: self.epoch,
            }),
            last: self.last?,
            gaps: self.gaps.iter().copied().collect(),
        })
    }
}

/// A lane's state before the batch being written touched it.
#[derive(Debug)]
struct Undo {
    lane: usize,
    last: Option<At>,
    gaps: BTreeSet<At>,
    pending: BTreeSet<At>,
}

/// The open state log.
#[derive(Debug)]
struct StateLog {
    file: File,
    identity: Identity,
    /// The end of the last whole record.
    len: u64,
    /// Bytes past `len` may be there (an append that failed and was not cut back).
    dirty: bool,
    /// The last record number used.
    seq: u64,
    /// The number of the last record whose batch was written (the next one's base).
    committed: u64,
    /// The last batch written.
    last: BatchCheck,
    /// The log's length right after its snapshot (or header).
    snapshot_len: u64,
    /// No compaction before the log passes this (a compaction failed below it).
    compact_after: u64,
    next_slot: u32,
    sync: bool,
}

/// Appends lines to a file; see the [module documentation](self).
pub struct FileSink {
    name: String,
    path: PathBuf,
    file: File,
    /// The state log; `None` for a target that is not a regular file (a device):
    /// nothing is recorded beside it, and its lines are not de-duplicated.
    state: Option<StateLog>,
    sync: bool,
    /// The durable length.
    length: u64,
    /// The file may hold bytes past `length` (a failed batch not cut back).
    data_dirty: bool,
    lanes: Vec<Lane>,
    /// Lanes by (lane, writer, epoch); the feed is compared in the list.
    index: HashMap<(u32, u64, u64), Vec<usize>>,
    /// The lane of the last output (outputs come in runs of one lane).
    last_lane: usize,
    /// The number of the batch being written.
    batch: u64,
    touched: Vec<usize>,
    undo: Vec<Undo>,
    buffer: Vec<u8>,
    /// Per output of the batch: its lane and key (`None`: not tracked, made outside a
    /// delivery or into a device), and whether it is written (false: already held).
    plan: Vec<(Option<(usize, At)>, bool)>,
    /// Per output of a failed batch: whether the file holds it.
    held: Vec<bool>,
}

impl std::fmt::Debug for FileSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSink")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("length", &self.length)
            .field("lanes", &self.lanes.len())
            .finish_non_exhaustive()
    }
}

/// The state file of the sink writing `path`.
pub fn state_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".sinkstate");
    PathBuf::from(name)
}

fn io(sink: &str, action: String) -> impl FnOnce(std::io::Error) -> SinkError + '_ {
    move |source| SinkError::Io {
        sink: sink.to_owned(),
        action,
        source,
    }
}

/// The CRC32 of a record of the state `state_id`.
fn record_crc(state_id: u64, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&state_id.to_le_bytes());
    hasher.update(payload);
    hasher.finalize()
}

/// The header bytes of `identity`.
fn header_bytes(identity: &Identity) -> std::io::Result<Vec<u8>> {
    let payload =
        postcard::to_stdvec(identity).map_err(|error| std::io::Error::other(error.to_string()))?;
    let mut bytes = Vec::with_capacity(HEADER_BYTES + payload.len());
    bytes.extend_from_slice(STATE_MAGIC);
    bytes.extend_from_slice(&STATE_VERSION.to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    bytes.extend_from_slice(&payload);
    Ok(bytes)
}

/// Appends the record of `frame` (for state `state_id`) to `bytes`.
fn push_record(bytes: &mut Vec<u8>, state_id: u64, frame: &Frame) -> std::io::Result<()> {
    let payload =
        postcard::to_stdvec(frame).map_err(|error| std::io::Error::other(error.to_string()))?;
    bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&record_crc(state_id, &payload).to_le_bytes());
    bytes.extend_from_slice(&payload);
    Ok(())
}

/// Syncs the folder holding `path` (a rename into it is durable then).
fn sync_parent(path: &Path) -> std::io::Result<()> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}

/// Writes `bytes` as the whole of `path`, atomically (a file beside it renamed into
/// place), and opens it for reading and writing.
fn replace_file(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<File> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    let written = (|| {
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&temporary)?;
        file.write_all(bytes)?;
        if sync {
            file.sync_all()?;
        }
        std::fs::rename(&temporary, path)?;
        if sync {
            sync_parent(path)?;
        }
        Ok(())
    })();
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(error);
    }
    OpenOptions::new().read(true).write(true).open(path)
}

/// A random id for a new state.
fn new_state_id() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    std::hash::RandomState::new()
        .hash_one((now.as_nanos(), std::process::id()))
        .max(1)
}

fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

/// What the records of a state log say, replayed.
#[derive(Debug, Default)]
struct Replayed {
    /// The lanes of the written batches, by slot.
    lanes: HashMap<u32, (LaneName, At, Vec<At>)>,
    /// The last record whose batch is written (as far as the records tell).
    committed_seq: u64,
    /// The file's length after it.
    length: u64,
    /// Its batch.
    last: BatchCheck,
    /// The last record, when its batch is not known to be written: whether it is is
    /// for the file to say.
    tentative: Option<(u64, BatchCheck, Vec<LaneRecord>)>,
    /// The last record number.
    seq: u64,
    /// The end of the last whole record.
    end: u64,
    /// A last record cut short at this offset (a crash while it was written).
    torn_at: Option<u64>,
    /// The length of the header and snapshot.
    snapshot_len: u64,
}

impl Replayed {
    fn apply(&mut self, records: &[LaneRecord]) -> Result<(), String> {
        for record in records {
            let name = match (&record.name, self.lanes.get(&record.slot)) {
                (Some(name), Some((known, _, _))) if name != known => {
                    return Err(format!(
                        "lane {} is named twice ({known:?}, then {name:?})",
                        record.slot
                    ))
                }
                (Some(name), _) => name.clone(),
                (None, Some((known, _, _))) => known.clone(),
                (None, None) => {
                    return Err(format!("lane {} is used before it is named", record.slot))
                }
            };
            self.lanes
                .insert(record.slot, (name, record.last, record.gaps.clone()));
        }
        Ok(())
    }

    /// Reads the records after the header (`bytes` is the whole state file).
    fn read(bytes: &[u8], at: usize, state_id: u64) -> Result<Self, String> {
        let mut replayed = Replayed {
            end: at as u64,
            snapshot_len: at as u64,
            ..Replayed::default()
        };
        let mut offset = at;
        let mut first = true;
        while offset < bytes.len() {
            let rest = &bytes[offset..];
            let Some(head) = rest.get(..RECORD_HEAD_BYTES) else {
                replayed.torn_at = Some(offset as u64);
                break;
            };
            let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
            let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            let Some(payload) = rest.get(RECORD_HEAD_BYTES..RECORD_HEAD_BYTES + len) else {
                replayed.torn_at = Some(offset as u64);
                break;
            };
            if record_crc(state_id, payload) != crc {
                return Err(format!(
                    "the record at byte {offset} is damaged (its checksum does not match)"
                ));
            }
            let frame: Frame = postcard::from_bytes(payload)
                .map_err(|error| format!("the record at byte {offset} cannot be read ({error})"))?;
            offset += RECORD_HEAD_BYTES + len;
            match frame {
                Frame::Snapshot {
                    seq,
                    length,
                    last,
                    lanes,
                } => {
                    if !first {
                        return Err(format!(
                            "a snapshot record after others, at byte {}",
                            replayed.end
                        ));
                    }
                    replayed.apply(&lanes)?;
                    replayed.committed_seq = seq;
                    replayed.seq = seq;
                    replayed.length = length;
                    replayed.last = last;
                    replayed.snapshot_len = offset as u64;
                }
                Frame::Written { seq } => match replayed.tentative.take() {
                    Some((tentative, check, records)) if tentative == seq => {
                        replayed.apply(&records)?;
                        replayed.committed_seq = seq;
                        replayed.length = check.end;
                        replayed.last = check;
                    }
                    _ => {
                        return Err(format!(
                            "the record at byte {} says batch {seq} was written, and it is not the last batch recorded",
                            replayed.end
                        ))
                    }
                },
                Frame::Batch {
                    seq,
                    base,
                    check,
                    lanes,
                } => {
                    if seq <= replayed.seq {
                        return Err(format!(
                            "the record at byte {} is numbered {seq}, after {}",
                            replayed.end, replayed.seq
                        ));
                    }
                    match replayed.tentative.take() {
                        Some((tentative, tentative_check, records)) if base == tentative => {
                            // the record before was followed: its batch was written
                            replayed.apply(&records)?;
                            replayed.committed_seq = tentative;
                            replayed.length = tentative_check.end;
                            replayed.last = tentative_check;
                        }
                        // the record before it was of a batch that failed
                        Some(_) | None if base == replayed.committed_seq => {}
                        _ => {
                            return Err(format!(
                                "the record at byte {} follows record {base}, which is not the last one written",
                                replayed.end
                            ))
                        }
                    }
                    if check.start != replayed.length || check.end < check.start {
                        return Err(format!(
                            "the record at byte {} puts its batch at bytes {}..{}, and the file before it ends at {}",
                            replayed.end, check.start, check.end, replayed.length
                        ));
                    }
                    replayed.seq = seq;
                    replayed.tentative = Some((seq, check, lanes));
                }
            }
            first = false;
            replayed.end = offset as u64;
        }
        Ok(replayed)
    }
}

/// A refusal of `state` for the sink `sink` writing `path`.
fn refuse(sink: &str, state: &Path, problem: String, fix: String) -> SinkError {
    SinkError::State {
        sink: sink.to_owned(),
        state: state.display().to_string(),
        problem,
        fix,
    }
}

/// What to do when the state cannot be trusted: restore it, or start a new file.
fn restore_or_move(path: &Path, state: &Path) -> String {
    format!(
        "restore {state} as it was with this file, or start a new output file: move {path} and {state} away (the inputs not committed yet are then written to the new file; those written since the last commit are in both)",
        path = path.display(),
        state = state.display()
    )
}

/// CRC32 of the bytes `check` covers in `file`.
fn crc_of(file: &File, check: &BatchCheck) -> std::io::Result<u32> {
    let mut hasher = crc32fast::Hasher::new();
    let mut buffer = vec![0u8; 1 << 16];
    let mut at = check.start;
    while at < check.end {
        let want = ((check.end - at) as usize).min(buffer.len());
        let read = file.read_at(&mut buffer[..want], at)?;
        if read == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the file ended",
            ));
        }
        hasher.update(&buffer[..read]);
        at += read as u64;
    }
    Ok(hasher.finalize())
}

/// The newest valid slot of a state of the older format: the durable length it
/// records.
fn old_format_length(bytes: &[u8]) -> Option<u64> {
    let mut best: Option<(u64, u64)> = None;
    for slot in 0..2usize {
        let start = slot * OLD_SLOT_BYTES;
        let Some(head) = bytes.get(start..start + 24) else {
            continue;
        };
        if &head[..8] != OLD_MAGIC {
            continue;
        }
        let counter = u64::from_le_bytes(head[8..16].try_into().ok()?);
        let len = u32::from_le_bytes(head[16..20].try_into().ok()?) as usize;
        let crc = u32::from_le_bytes(head[20..24].try_into().ok()?);
        let Some(payload) = bytes.get(start + 24..start + 24 + len) else {
            continue;
        };
        if crc32fast::hash(payload) != crc {
            continue;
        }
        // its record starts with the durable length (a postcard varint)
        let Ok((length, _)) = postcard::take_from_bytes::<u64>(payload) else {
            continue;
        };
        if best.is_none_or(|(known, _)| counter > known) {
            best = Some((counter, length));
        }
    }
    best.map(|(_, length)| length)
}

impl FileSink {
    /// Opens the sink `name` on `config.path`, checking its state against the file
    /// (see the [module documentation](self)).
    ///
    /// # Errors
    /// [`SinkError::State`]: the state does not match the file (damaged, older,
    /// another file's, missing beside a non-empty file): nothing was changed.
    /// [`SinkError::InUse`]: another sink writes the file. [`SinkError::Io`]: the file
    /// or its state cannot be opened, read or written.
    pub fn open(name: &str, config: &FileSinkConfig) -> Result<Self, SinkError> {
        let path = config.path.clone();
        let existed = std::fs::symlink_metadata(&path).is_ok();
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(false)
            .open(&path)
            .map_err(io(name, format!("opening {}", path.display())))?;
        let meta = file
            .metadata()
            .map_err(io(name, format!("reading {}", path.display())))?;
        let mut sink = FileSink {
            name: name.to_owned(),
            path: path.clone(),
            file,
            state: None,
            sync: config.sync,
            length: meta.len(),
            data_dirty: false,
            lanes: Vec::new(),
            index: HashMap::new(),
            last_lane: usize::MAX,
            batch: 0,
            touched: Vec::new(),
            undo: Vec::new(),
            buffer: Vec::new(),
            plan: Vec::new(),
            held: Vec::new(),
        };
        if !meta.is_file() {
            warn!(sink = name, file = %path.display(),
                "the file sink's target is not a regular file (a device): no state is recorded beside it, so its lines are not de-duplicated after a crash");
            return Ok(sink);
        }
        match sink.file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(SinkError::InUse {
                    sink: name.to_owned(),
                    path: path.display().to_string(),
                })
            }
            Err(std::fs::TryLockError::Error(error)) => {
                return Err(io(name, format!("locking {}", path.display()))(error))
            }
        }
        if let Err(error) = sink.open_state(meta.len(), meta.dev(), meta.ino()) {
            if !existed {
                // a refused start leaves no file it made behind
                let _ = std::fs::remove_file(&path);
            }
            return Err(error);
        }
        Ok(sink)
    }

    /// Reads and checks the state beside the file (`actual` bytes long, on `device`
    /// and `inode`), cutting off a batch a crash left partly written.
    fn open_state(&mut self, actual: u64, device: u64, inode: u64) -> Result<(), SinkError> {
        let name = self.name.clone();
        let path = self.path.clone();
        let state_file = state_path(&path);
        let mut temporary = state_file.as_os_str().to_owned();
        temporary.push(".tmp");
        // a compaction a crash interrupted: the state itself is still whole
        let _ = std::fs::remove_file(PathBuf::from(temporary));
        let bytes = match std::fs::read(&state_file) {
            Ok(bytes) => Some(bytes),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
            Err(error) => {
                return Err(io(&name, format!("reading {}", state_file.display()))(
                    error,
                ))
            }
        };
        let fresh = |sink: &mut FileSink, length: u64| -> Result<(), SinkError> {
            let identity = Identity {
                sink: sink.name.clone(),
                path: path.display().to_string(),
                device,
                inode,
                state_id: new_state_id(),
                created_unix_millis: unix_millis(),
            };
            sink.length = length;
            sink.write_snapshot(identity, 0, BatchCheck::default())
                .map_err(io(&name, format!("writing {}", state_file.display())))
        };
        let Some(bytes) = bytes else {
            if actual > 0 {
                return Err(refuse(
                    &name,
                    &state_file,
                    format!(
                        "{} holds {actual} bytes and has no sink state beside it, so which outputs it holds is unknown (a re-delivered input would be written twice)",
                        path.display()
                    ),
                    format!(
                        "if this sink wrote the file, restore {state} as it was with it; to start a new output file, move {path} away",
                        path = path.display(),
                        state = state_file.display()
                    ),
                ));
            }
            return fresh(self, 0);
        };
        if bytes.is_empty() && actual == 0 {
            return fresh(self, 0);
        }
        if bytes.starts_with(OLD_MAGIC) {
            return match old_format_length(&bytes) {
                Some(length) if length == actual => {
                    warn!(sink = %name, file = %path.display(), length,
                        "the sink state is of an older format: taking the file as it is (an input re-delivered from before the last commit may be written again once)");
                    fresh(self, actual)
                }
                recorded => Err(refuse(
                    &name,
                    &state_file,
                    match recorded {
                        Some(length) => format!(
                            "it is of an older format and records {length} bytes written, and {} holds {actual}",
                            path.display()
                        ),
                        None => "it is of an older format and damaged".to_owned(),
                    },
                    restore_or_move(&path, &state_file),
                )),
            };
        }
        let identity = Self::read_header(&bytes).map_err(|problem| {
            refuse(
                &name,
                &state_file,
                problem,
                restore_or_move(&path, &state_file),
            )
        })?;
        let header_len = HEADER_BYTES
            + (u32::from_le_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]) as usize);
        let mut replayed =
            Replayed::read(&bytes, header_len, identity.state_id).map_err(|problem| {
                refuse(
                    &name,
                    &state_file,
                    problem,
                    restore_or_move(&path, &state_file),
                )
            })?;
        let same_file = identity.device == device && identity.inode == inode;
        // the file decides whether the last record's batch was written
        let mut cut_to = None;
        if let Some((seq, check, records)) = replayed.tentative.take() {
            if actual < check.start {
                // shorter than what was written before: see below
            } else if actual < check.end {
                // a crash between the record and the end of its bytes: never reported
                cut_to = Some(check.start);
            } else {
                let crc = crc_of(&self.file, &check)
                    .map_err(io(&name, format!("reading {}", path.display())))?;
                if crc == check.crc {
                    replayed.apply(&records).map_err(|problem| {
                        refuse(
                            &name,
                            &state_file,
                            problem,
                            restore_or_move(&path, &state_file),
                        )
                    })?;
                    replayed.committed_seq = seq;
                    replayed.length = check.end;
                    replayed.last = check;
                } else if same_file && actual == check.end {
                    return Err(refuse(
                        &name,
                        &state_file,
                        format!(
                            "the last batch it records (bytes {}..{} of {}) differs from what the file holds there: the file was changed by something else",
                            check.start,
                            check.end,
                            path.display()
                        ),
                        restore_or_move(&path, &state_file),
                    ));
                }
            }
        } else if replayed.last.end == replayed.length
            && replayed.length > 0
            && actual >= replayed.length
        {
            let crc = crc_of(&self.file, &replayed.last)
                .map_err(io(&name, format!("reading {}", path.display())))?;
            if crc != replayed.last.crc && same_file {
                return Err(refuse(
                    &name,
                    &state_file,
                    format!(
                        "the last batch it records (bytes {}..{} of {}) differs from what the file holds there: the file was changed by something else",
                        replayed.last.start,
                        replayed.last.end,
                        path.display()
                    ),
                    restore_or_move(&path, &state_file),
                ));
            }
        }
        let expected = cut_to.unwrap_or(actual);
        if !same_file {
            let matches = cut_to.is_none()
                && expected == replayed.length
                && (replayed.length == 0
                    || (replayed.last.end == replayed.length
                        && crc_of(&self.file, &replayed.last).ok() == Some(replayed.last.crc)));
            if !matches {
                return Err(refuse(
                    &name,
                    &state_file,
                    format!(
                        "it belongs to another file (device {}, inode {}: {} bytes written by sink '{}'), not {} (device {device}, inode {inode}, {actual} bytes): it was copied from elsewhere, or the file was replaced",
                        identity.device,
                        identity.inode,
                        replayed.length,
                        identity.sink,
                        path.display()
                    ),
                    restore_or_move(&path, &state_file),
                ));
            }
        }
        if expected > replayed.length {
            return Err(refuse(
                &name,
                &state_file,
                format!(
                    "{} holds {actual} bytes, and its state records only {} written by this sink: the state is older than the file (restored from a copy, cut, or another run's), or something else wrote to the file",
                    path.display(),
                    replayed.length
                ),
                restore_or_move(&path, &state_file),
            ));
        }
        if expected < replayed.length {
            return Err(refuse(
                &name,
                &state_file,
                format!(
                    "{} holds {actual} bytes, fewer than the {} its state records as written and reported published: the file was truncated, replaced or rotated away",
                    path.display(),
                    replayed.length
                ),
                format!(
                    "put the file back; to start it afresh instead, move {state} away too (outputs of inputs not committed yet may then be written again)",
                    state = state_file.display()
                ),
            ));
        }
        if let Some(start) = cut_to {
            warn!(sink = %name, file = %path.display(), bytes = actual - start, durable_length = start,
                "cutting off a batch a crash left partly written: its outputs were never reported published and come again");
            self.file.set_len(start).map_err(io(
                &name,
                format!("cutting {} back to {start} bytes", path.display()),
            ))?;
            self.file
                .sync_all()
                .map_err(io(&name, format!("syncing {}", path.display())))?;
        }
        if let Some(torn) = replayed.torn_at {
            info!(sink = %name, state = %state_file.display(), at = torn,
                "the last record of the sink state was cut short by a crash (its batch was not written): ignored");
        }
        self.length = replayed.length;
        let mut slots: Vec<(u32, (LaneName, At, Vec<At>))> = replayed.lanes.into_iter().collect();
        slots.sort_unstable_by_key(|(slot, _)| *slot);
        let next_slot = slots.last().map_or(0, |(slot, _)| slot + 1);
        for (slot, (name, last, gaps)) in slots {
            let at = self.add_lane(
                &Arc::from(name.feed.as_str()),
                name.lane,
                name.writer,
                name.epoch,
            );
            let lane = &mut self.lanes[at];
            lane.slot = slot;
            lane.persisted = true;
            lane.last = Some(last);
            lane.gaps = gaps.into_iter().collect();
        }
        let state = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&state_file)
            .map_err(io(&name, format!("opening {}", state_file.display())))?;
        let mut log = StateLog {
            file: state,
            identity: identity.clone(),
            len: replayed.end,
            dirty: replayed.torn_at.is_some(),
            seq: replayed.seq,
            committed: replayed.committed_seq,
            last: replayed.last,
            snapshot_len: replayed.snapshot_len,
            compact_after: 0,
            next_slot,
            sync: self.sync,
        };
        if log.dirty {
            log.file
                .set_len(log.len)
                .map_err(io(&name, format!("cutting {}", state_file.display())))?;
            log.dirty = false;
        }
        self.state = Some(log);
        if !same_file {
            info!(sink = %name, file = %path.display(),
                "the file was moved or copied with its state (another device or inode, the same bytes): recording it as this file");
            let identity = Identity {
                device,
                inode,
                path: path.display().to_string(),
                ..identity
            };
            let (seq, last) = self
                .state
                .as_ref()
                .map_or((0, BatchCheck::default()), |state| {
                    (state.committed, state.last)
                });
            self.write_snapshot(identity, seq, last)
                .map_err(io(&name, format!("writing {}", state_file.display())))?;
        } else if identity.sink != self.name {
            warn!(sink = %name, state = %state_file.display(), was = %identity.sink,
                "the sink state was written by a sink of another name (renamed in the configuration?): going on with it");
        }
        Ok(())
    }

    /// The identity in the header of `bytes`, checked.
    fn read_header(bytes: &[u8]) -> Result<Identity, String> {
        let Some(head) = bytes.get(..HEADER_BYTES) else {
            return Err(format!(
                "it is {} bytes long, shorter than a sink state's header",
                bytes.len()
            ));
        };
        if &head[..8] != STATE_MAGIC {
            return Err("it is not a sink state (no sink state magic at its start)".to_owned());
        }
        let version = u64::from_le_bytes([
            head[8], head[9], head[10], head[11], head[12], head[13], head[14], head[15],
        ]);
        if version != STATE_VERSION {
            return Err(format!(
                "it is of format version {version}, and this build reads version {STATE_VERSION}"
            ));
        }
        let len = u32::from_le_bytes([head[16], head[17], head[18], head[19]]) as usize;
        let crc = u32::from_le_bytes([head[20], head[21], head[22], head[23]]);
        let Some(payload) = bytes.get(HEADER_BYTES..HEADER_BYTES + len) else {
            return Err("its header is cut short".to_owned());
        };
        if crc32fast::hash(payload) != crc {
            return Err("its header is damaged (its checksum does not match)".to_owned());
        }
        postcard::from_bytes(payload)
            .map_err(|error| format!("its header cannot be read ({error})"))
    }

    /// Replaces the state log by one snapshot of the lanes (a new log, renamed into
    /// place): at the first open, at compaction, and after the file moved. The lanes
    /// are numbered anew, and changed only once the new log is in place.
    fn write_snapshot(
        &mut self,
        identity: Identity,
        seq: u64,
        last: BatchCheck,
    ) -> std::io::Result<()> {
        let mut bytes = header_bytes(&identity)?;
        let header_len = bytes.len() as u64;
        let mut records = Vec::new();
        let mut slots = Vec::with_capacity(self.lanes.len());
        for lane in &self.lanes {
            let slot = records.len() as u32;
            match lane.record(slot, true) {
                Some(record) => {
                    records.push(record);
                    slots.push(Some(slot));
                }
                None => slots.push(None),
            }
        }
        if seq > 0 || !records.is_empty() || self.length > 0 {
            push_record(
                &mut bytes,
                identity.state_id,
                &Frame::Snapshot {
                    seq,
                    length: self.length,
                    last,
                    lanes: records,
                },
            )?;
        }
        let file = replace_file(&state_path(&self.path), &bytes, self.sync)?;
        let mut next_slot = slots.iter().flatten().count() as u32;
        for (lane, slot) in self.lanes.iter_mut().zip(slots) {
            lane.persisted = slot.is_some();
            lane.slot = slot.unwrap_or_else(|| {
                next_slot += 1;
                next_slot - 1
            });
        }
        let len = bytes.len() as u64;
        self.state = Some(StateLog {
            file,
            identity,
            len,
            dirty: false,
            seq,
            committed: seq,
            last,
            snapshot_len: len.max(header_len),
            compact_after: 0,
            next_slot,
            sync: self.sync,
        });
        Ok(())
    }

    /// The durable length.
    pub fn durable_length(&self) -> u64 {
        self.length
    }

    /// How many input lanes (feed, lane, writer, epoch) the sink knows.
    pub fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// The length of the state log.
    pub fn state_length(&self) -> u64 {
        self.state.as_ref().map_or(0, |state| state.len)
    }

    fn add_lane(&mut self, feed: &Arc<str>, lane: u32, writer: u64, epoch: u64) -> usize {
        let at = self.lanes.len();
        let slot = self.state.as_mut().map_or(at as u32, |state| {
            state.next_slot += 1;
            state.next_slot - 1
        });
        self.lanes.push(Lane {
            feed: Arc::clone(feed),
            lane,
            writer,
            epoch,
            slot,
            persisted: false,
            last: None,
            gaps: BTreeSet::new(),
            pending: BTreeSet::new(),
            touched_in: 0,
        });
        self.index
            .entry((lane, writer, epoch))
            .or_default()
            .push(at);
        at
    }

    /// The lane of `key`, made the first time it is seen.
    fn lane_of(&mut self, key: &OutputKey) -> usize {
        let same = |lane: &Lane| {
            lane.lane == key.lane
                && lane.writer == key.writer
                && lane.epoch == key.epoch.0
                && (Arc::ptr_eq(&lane.feed, &key.feed) || lane.feed == key.feed)
        };
        if let Some(lane) = self.lanes.get(self.last_lane) {
            if same(lane) {
                return self.last_lane;
            }
        }
        let found = self
            .index
            .get(&(key.lane, key.writer, key.epoch.0))
            .and_then(|candidates| candidates.iter().copied().find(|at| same(&self.lanes[*at])));
        let at = match found {
            Some(at) => at,
            None => self.add_lane(&key.feed, key.lane, key.writer, key.epoch.0),
        };
        self.last_lane = at;
        at
    }

    /// True when the file holds the output `key` (a tracked key only).
    fn holds(&self, key: &OutputKey) -> bool {
        let same = |lane: &Lane| {
            lane.lane == key.lane
                && lane.writer == key.writer
                && lane.epoch == key.epoch.0
                && (Arc::ptr_eq(&lane.feed, &key.feed) || lane.feed == key.feed)
        };
        self.index
            .get(&(key.lane, key.writer, key.epoch.0))
            .and_then(|candidates| candidates.iter().find(|at| same(&self.lanes[**at])))
            .is_some_and(|at| self.lanes[*at].holds((key.position, key.index)))
    }

    /// Marks lane `at` touched by the batch being written, keeping its state before.
    fn touch(&mut self, at: usize) {
        let lane = &mut self.lanes[at];
        if lane.touched_in == self.batch {
            return;
        }
        lane.touched_in = self.batch;
        self.undo.push(Undo {
            lane: at,
            last: lane.last,
            gaps: lane.gaps.clone(),
            pending: lane.pending.clone(),
        });
        self.touched.push(at);
    }

    /// Cuts the file back to its durable length after a failed batch.
    fn cut_back(&mut self) -> bool {
        let cut = self.file.set_len(self.length).is_ok();
        self.data_dirty = !cut;
        cut
    }

    /// Writes the planned batch: its record, then its bytes.
    fn write_batch(&mut self, check: BatchCheck) -> std::io::Result<()> {
        if self.data_dirty {
            self.file.set_len(self.length)?;
            self.data_dirty = false;
        }
        if let Some(state) = &mut self.state {
            let records: Vec<LaneRecord> = self
                .touched
                .iter()
                .filter_map(|at| {
                    let lane = &self.lanes[*at];
                    lane.record(lane.slot, !lane.persisted)
                })
                .collect();
            state.seq += 1;
            let frame = Frame::Batch {
                seq: state.seq,
                base: state.committed,
                check,
                lanes: records,
            };
            state.append(&frame)?;
            self.file.write_all_at(&self.buffer, check.start)?;
        } else {
            self.file.write_all(&self.buffer)?;
        }
        if self.sync {
            self.file.sync_data()?;
        }
        if let Some(state) = &mut self.state {
            // not synced: only a batch cut short later needs it (a kill keeps it; after a
            // power loss the synced bytes and their CRC say the same)
            if let Err(error) = state.append_unsynced(&Frame::Written { seq: state.seq }) {
                warn!(sink = %self.name, error = %error,
                    "cannot record that a batch was written (it is: its record and bytes are durable)");
            }
        }
        Ok(())
    }

    /// Compacts the state log when it grew long enough (a failure leaves it as it is).
    fn maybe_compact(&mut self) {
        let Some(state) = &self.state else {
            return;
        };
        if state.len <= COMPACT_AFTER_BYTES
            || state.len <= 2 * state.snapshot_len
            || state.len <= state.compact_after
        {
            return;
        }
        let (identity, seq, last, len) = (
            state.identity.clone(),
            state.committed,
            state.last,
            state.len,
        );
        let previous = self.state.take();
        if let Err(error) = self.write_snapshot(identity, seq, last) {
            warn!(sink = %self.name, error = %error,
                "cannot compact the sink state (the log goes on growing; tried again later)");
            self.state = previous;
            if let Some(state) = &mut self.state {
                state.compact_after = len + COMPACT_AFTER_BYTES;
            }
        }
    }
}

impl StateLog {
    /// Appends `frame` (made durable when the sink syncs); a failed append is cut back.
    fn append(&mut self, frame: &Frame) -> std::io::Result<()> {
        self.append_with(frame, self.sync)
    }

    /// Appends `frame` without syncing it.
    fn append_unsynced(&mut self, frame: &Frame) -> std::io::Result<()> {
        self.append_with(frame, false)
    }

    fn append_with(&mut self, frame: &Frame, sync: bool) -> std::io::Result<()> {
        if self.dirty {
            self.file.set_len(self.len)?;
            self.dirty = false;
        }
        let mut bytes = Vec::new();
        push_record(&mut bytes, self.identity.state_id, frame)?;
        let written = self.file.write_all_at(&bytes, self.len).and_then(|()| {
            if sync {
                self.file.sync_data()
            } else {
                Ok(())
            }
        });
        if let Err(error) = written {
            self.dirty = self.file.set_len(self.len).is_err();
            return Err(error);
        }
        self.len += bytes.len() as u64;
        Ok(())
    }
}

impl Sink for FileSink {
    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
        self.buffer.clear();
        self.plan.clear();
        self.touched.clear();
        self.undo.clear();
        self.batch += 1;
        let tracked = self.state.is_some();
        for output in outputs {
            let key = &output.key;
            if !tracked || &*key.feed == NO_INPUT {
                // made outside a delivery: no input of it comes again, never a duplicate
                self.plan.push((None, true));
            } else {
                let at = self.lane_of(key);
                let position = (key.position, key.index);
                if self.lanes[at].holds(position) {
                    self.plan.push((Some((at, position)), false));
                    continue;
                }
                self.touch(at);
                self.lanes[at].note_written(position);
                self.plan.push((Some((at, position)), true));
            }
            self.buffer.extend_from_slice(&output.payload);
            self.buffer.push(b'\n');
        }
        if self.buffer.is_empty() && self.touched.is_empty() {
            outcomes.extend(self.plan.iter().map(|_| SinkOutcome::Published {
                evidence: ALREADY_WRITTEN.to_owned(),
            }));
            return;
        }
        let check = BatchCheck {
            start: self.length,
            end: self.length + self.buffer.len() as u64,
            crc: crc32fast::hash(&self.buffer),
        };
        match self.write_batch(check) {
            Ok(()) => {
                self.length = check.end;
                if let Some(state) = &mut self.state {
                    state.committed = state.seq;
                    state.last = check;
                }
                for at in &self.touched {
                    let lane = &mut self.lanes[*at];
                    lane.persisted |= lane.last.is_some();
                }
                // one text per batch, copied per output
                let durable = format!("durable through byte {}", check.end);
                for (_, written) in &self.plan {
                    outcomes.push(SinkOutcome::Published {
                        evidence: if *written {
                            durable.clone()
                        } else {
                            ALREADY_WRITTEN.to_owned()
                        },
                    });
                }
                self.maybe_compact();
            }
            Err(error) => {
                for undo in self.undo.drain(..) {
                    let lane = &mut self.lanes[undo.lane];
                    lane.last = undo.last;
                    lane.gaps = undo.gaps;
                    lane.pending = undo.pending;
                }
                // an output found written may have been written by this very batch (the
                // same key twice in it): held only if its lane still holds it
                let mut held = std::mem::take(&mut self.held);
                held.clear();
                for (tracked, written) in &self.plan {
                    held.push(match tracked {
                        Some((at, position)) => {
                            let holds = !*written && self.lanes[*at].holds(*position);
                            if !holds {
                                self.lanes[*at].note_refused(*position);
                            }
                            holds
                        }
                        None => !*written,
                    });
                }
                let cut = self.cut_back();
                for holds in &held {
                    outcomes.push(if *holds {
                        SinkOutcome::Published {
                            evidence: ALREADY_WRITTEN.to_owned(),
                        }
                    } else if cut {
                        SinkOutcome::NotPublished {
                            evidence: format!(
                                "writing {} failed ({error}); cut back to its durable {} bytes",
                                self.path.display(),
                                self.length
                            ),
                            retryable: true,
                        }
                    } else {
                        SinkOutcome::Uncertain {
                            evidence: format!(
                                "writing {} failed ({error}) and it could not be cut back to its durable {} bytes (cut back before the next batch)",
                                self.path.display(),
                                self.length
                            ),
                        }
                    });
                }
                self.held = held;
            }
        }
    }

    fn verify(&mut self, key: &OutputKey) -> Option<SinkOutcome> {
        (self.state.is_some() && &*key.feed != NO_INPUT && self.holds(key)).then(|| {
            SinkOutcome::Published {
                evidence: ALREADY_WRITTEN.to_owned(),
            }
        })
    }
}

/// Writes lines to the process's standard output, flushed per batch: published once
/// written (a pipe's reader is not asked).
#[derive(Debug, Default)]
pub struct StdoutSink {
    buffer: Vec<u8>,
}

impl Sink for StdoutSink {
    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
        self.buffer.clear();
        for output in outputs {
            self.buffer.extend_from_slice(&output.payload);
            self.buffer.push(b'\n');
        }
        let mut stdout = std::io::stdout().lock();
        let result = stdout.write_all(&self.buffer).and_then(|()| stdout.flush());
        for _ in outputs {
            outcomes.push(match &result {
                Ok(()) => SinkOutcome::Published {
                    evidence: "written to standard output".to_owned(),
                },
                Err(error) => SinkOutcome::Uncertain {
                    evidence: format!("writing to standard output failed part way ({error})"),
                },
            });
        }
    }
}
