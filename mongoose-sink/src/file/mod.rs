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
//! writing into one sink never share keys
//! ([`OutputKey::writer`](mongoose_core::sink::OutputKey::writer)), and a re-created
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
//! | the last record cut short or failing its CRC (a torn tail) | cuts it (WARN), then checks the file as for any state |
//! | a record damaged (CRC) with valid records after it, a header damaged, records that do not follow each other | refuses |
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
//! A record log of the durable layer ([`mongoose_durable::log`]):
//!
//! ```text
//! header  the durable header: format "mongoose-sink-state", version 3, owner the state id (decimal)
//! record  length u32 LE | crc32 u32 LE (of the length and the payload) | payload
//! ```
//!
//! The first record is postcard(Identity), whose state id the header's owner repeats;
//! every record after it is postcard(Frame). A last record cut short or failing its
//! CRC is a torn tail (a write a crash interrupted; the batch's bytes follow its record
//! and were not written yet): it is cut, with a WARN, and the file decides what was
//! written. A record that fails its CRC with valid records after it is damage in the
//! middle: refused, naming the byte. The layout before this one (`MGSNKST2`: its own
//! header, records whose CRC mixed in the state id) is still read, and rewritten in this
//! one at the open.

use std::collections::HashMap;
use std::fs::File;
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::SinkError;

mod open;
mod state;
mod stdout;
mod write;

use self::state::{At, Lane, StateLog, Undo};
pub use self::stdout::StdoutSink;

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
    /// Where the sink keeps its state (what it wrote, per lane): absent, beside the
    /// file as `<file>.sinkstate` ([`state_path`]). With a path, a state an older run
    /// left beside the file is adopted (moved; the given one wins when both exist).
    #[serde(skip)]
    pub state_file: Option<PathBuf>,
}

fn yes() -> bool {
    true
}

/// The state log's format name in its durable header.
const STATE_FORMAT: &str = "mongoose-sink-state";
/// The state log's format version (1 was `MGSINK01`'s two slots, 2 the `MGSNKST2`
/// framing, 3 the durable layer's record log).
const STATE_VERSION: u32 = 3;
/// The magic of the layout before the durable layer's (`MGSNKST2`): read, and
/// rewritten in the durable layout once trusted.
const LEGACY_MAGIC: &[u8; 8] = b"MGSNKST2";
/// That layout's version.
const LEGACY_VERSION: u64 = 2;
/// The bytes of that layout's header before its identity.
const LEGACY_HEADER_BYTES: usize = 24;
/// The magic of the format before this one (two 64 KiB slots).
const OLD_MAGIC: &[u8; 8] = b"MGSINK01";
const OLD_SLOT_BYTES: usize = 64 * 1024;
/// The log is compacted once it is longer than this and twice its last snapshot.
const COMPACT_AFTER_BYTES: u64 = 48 * 1024;

/// The evidence of an output found already written.
const ALREADY_WRITTEN: &str = "already in the file (its key is recorded as written)";

/// Appends lines to a file; see the [module documentation](self).
pub struct FileSink {
    name: String,
    path: PathBuf,
    /// Its state file (`<file>.sinkstate`, or the configured one).
    state_file: PathBuf,
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

/// The output file a state file (`.sinkstate`) was made for, as its header records
/// it: `(device, inode)`. `None` when the state cannot be read, is of an older format
/// or its header is damaged. For a server that looks for the state of an output kept
/// under another name (a state folder keyed on another spelling of its path); the
/// sink's own open checks much more before it trusts a state.
pub fn state_target(state_file: &Path) -> Option<(u64, u64)> {
    let bytes = std::fs::read(state_file).ok()?;
    let identity = self::state::read_state(state_file, &bytes).ok()?.identity;
    Some((identity.device, identity.inode))
}

fn io(sink: &str, action: String) -> impl FnOnce(std::io::Error) -> SinkError + '_ {
    move |source| SinkError::Io {
        sink: sink.to_owned(),
        action,
        source,
    }
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

impl FileSink {
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
        self.state.as_ref().map_or(0, StateLog::len)
    }
}
