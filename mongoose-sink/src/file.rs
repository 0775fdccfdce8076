//! The file sink: lines appended to a file in batches, each batch made durable
//! (fdatasync) before its outputs are reported published, with exactly-once lines
//! across any `kill -9`.
//!
//! Beside the file, `<file>.sinkstate` records, after each durable batch, the file's
//! durable length and the last key written per input feed and lane. Its two slots are
//! written alternately, each checksummed (CRC32) and counted, so a write cut short
//! leaves the other slot valid. At open:
//!
//! - bytes past the recorded durable length (a batch written but not recorded: its
//!   outputs were never reported published, so their inputs were not committed and
//!   come again) are cut off, with a WARN naming the bytes;
//! - an output whose key is at or before the last key recorded for its feed and lane
//!   (same epoch) is already in the file: it is reported published without being
//!   written again. So a re-delivered input adds no duplicate line.
//!
//! A file shorter than its recorded length was truncated or replaced by someone else
//! (a `copytruncate` rotation): the sink starts over at its length and forgets its
//! keys (a WARN says so; a re-delivered input may then be written twice).
//!
//! | `publish` step that fails | outcome |
//! |---|---|
//! | the write, the fdatasync or the state record, and the file is cut back to its durable length | `NotPublished`, retryable |
//! | the same, and the file cannot be cut back | `Uncertain` |
//!
//! With `sync = false` nothing is fsync'd: a `kill -9` loses nothing (the page cache
//! survives it), a power loss can.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mongoose_core::sink::{Output, OutputKey, Sink, SinkOutcome};
use serde::{Deserialize, Serialize};
use tracing::warn;

use crate::error::SinkError;

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

/// One slot of the state file.
const SLOT_BYTES: u64 = 64 * 1024;
const MAGIC: &[u8; 8] = b"MGSINK01";

/// The evidence of an output found already written.
const ALREADY_WRITTEN: &str = "already in the file (at or before its last durable key)";

/// The last key written for one input feed and lane.
#[derive(Clone, Debug, PartialEq, Eq)]
struct LastKey {
    feed: Arc<str>,
    lane: u32,
    /// (epoch, position, index).
    key: (u64, u64, u32),
}

/// The last key written per input feed and lane: (epoch, position, index).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Written {
    length: u64,
    last: Vec<(String, u32, u64, u64, u32)>,
}

/// Appends lines to a file; see the [module documentation](self).
pub struct FileSink {
    name: String,
    path: PathBuf,
    file: File,
    /// The state file; `None` for a target that is not a regular file (a device):
    /// nothing is recorded beside it, and its lines are not de-duplicated.
    state: Option<File>,
    sync: bool,
    /// The durable length.
    length: u64,
    /// The last key per (feed, lane): (epoch, position, index). Few entries (one per
    /// file of the inputs): a list, searched by the feed's pointer first.
    last: Vec<LastKey>,
    /// `last` before the batch being written (restored when it fails).
    before: Vec<LastKey>,
    /// The state record's counter (the slot is its parity).
    counter: u64,
    buffer: Vec<u8>,
    written: Vec<bool>,
}

impl std::fmt::Debug for FileSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSink")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("length", &self.length)
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

impl FileSink {
    /// Opens the sink `name` on `config.path`, cutting off what was written past its
    /// recorded durable length (see the [module documentation](self)).
    ///
    /// # Errors
    /// The file or its state file cannot be opened, read or cut.
    pub fn open(name: &str, config: &FileSinkConfig) -> Result<Self, SinkError> {
        let path = config.path.clone();
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(false)
            .open(&path)
            .map_err(io(name, format!("opening {}", path.display())))?;
        let regular = file
            .metadata()
            .map_err(io(name, format!("reading {}", path.display())))?
            .is_file();
        let state_file = state_path(&path);
        let (state, counter, recorded) = if regular {
            let mut state = OpenOptions::new()
                .create(true)
                .read(true)
                .write(true)
                .truncate(false)
                .open(&state_file)
                .map_err(io(name, format!("opening {}", state_file.display())))?;
            let (counter, recorded) = read_state(&mut state)
                .map_err(io(name, format!("reading {}", state_file.display())))?;
            (Some(state), counter, recorded)
        } else {
            warn!(sink = name, file = %path.display(),
                "the file sink's target is not a regular file (a device): no state is recorded beside it, so its lines are not de-duplicated after a crash");
            (None, 0, None)
        };
        let actual = file
            .metadata()
            .map_err(io(name, format!("reading the size of {}", path.display())))?
            .len();
        let mut sink = FileSink {
            name: name.to_owned(),
            path: path.clone(),
            file,
            state,
            sync: config.sync,
            length: actual,
            last: Vec::new(),
            before: Vec::new(),
            counter,
            buffer: Vec::new(),
            written: Vec::new(),
        };
        match recorded {
            Some(written) if written.length <= actual => {
                if actual > written.length {
                    warn!(sink = name, file = %path.display(), bytes = actual - written.length, durable_length = written.length,
                        "cutting off what was written after the last durable batch: its outputs were never reported published and come again");
                    sink.file.set_len(written.length).map_err(io(
                        name,
                        format!(
                            "cutting {} back to {} bytes",
                            path.display(),
                            written.length
                        ),
                    ))?;
                    sink.file
                        .sync_all()
                        .map_err(io(name, format!("syncing {}", path.display())))?;
                }
                sink.length = written.length;
                for (feed, lane, epoch, position, index) in written.last {
                    sink.last.push(LastKey {
                        feed: Arc::from(feed.as_str()),
                        lane,
                        key: (epoch, position, index),
                    });
                }
            }
            Some(written) => {
                warn!(sink = name, file = %path.display(), size = actual, durable_length = written.length,
                    "the file is shorter than the sink wrote (truncated or replaced by someone else): starting at its size; a re-delivered input may be written again");
            }
            None if !regular => {}
            None => {
                if actual > 0 {
                    warn!(sink = name, file = %path.display(), size = actual,
                        "the file has no sink state (written by something else, or by an older build): appending after it; a re-delivered input may be written again");
                }
                // recorded before the first batch, so a batch written and not recorded
                // (a crash before its state record) is cut off at the next start
                sink.write_state(actual)
                    .map_err(io(name, format!("writing {}", state_file.display())))?;
            }
        }
        Ok(sink)
    }

    /// The durable length.
    pub fn durable_length(&self) -> u64 {
        self.length
    }

    /// The entry of `key`'s feed and lane in `last`.
    fn last_of(&self, key: &OutputKey) -> Option<usize> {
        self.last.iter().position(|last| {
            last.lane == key.lane && (Arc::ptr_eq(&last.feed, &key.feed) || last.feed == key.feed)
        })
    }

    /// True when `key` is at or before the last key written for its feed and lane.
    fn already_written(&self, key: &OutputKey) -> bool {
        match self.last_of(key).map(|at| self.last[at].key) {
            Some((epoch, position, index)) => {
                epoch == key.epoch.0 && (key.position, key.index) <= (position, index)
            }
            None => false,
        }
    }

    /// Records `key` as the last written of its feed and lane.
    fn note_written(&mut self, key: &OutputKey) {
        let value = (key.epoch.0, key.position, key.index);
        match self.last_of(key) {
            Some(at) => self.last[at].key = value,
            None => self.last.push(LastKey {
                feed: Arc::clone(&key.feed),
                lane: key.lane,
                key: value,
            }),
        }
    }

    fn write_state(&mut self, length: u64) -> std::io::Result<()> {
        let written = Written {
            length,
            last: self
                .last
                .iter()
                .map(|last| {
                    let (epoch, position, index) = last.key;
                    (last.feed.to_string(), last.lane, epoch, position, index)
                })
                .collect(),
        };
        let payload = postcard::to_stdvec(&written)
            .map_err(|error| std::io::Error::other(error.to_string()))?;
        let counter = self.counter + 1;
        let mut slot = Vec::with_capacity(payload.len() + 24);
        slot.extend_from_slice(MAGIC);
        slot.extend_from_slice(&counter.to_le_bytes());
        slot.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        slot.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        slot.extend_from_slice(&payload);
        if slot.len() as u64 > SLOT_BYTES {
            return Err(std::io::Error::other(format!(
                "the sink state ({} bytes: {} feeds and lanes) does not fit its {SLOT_BYTES}-byte slot",
                slot.len(),
                self.last.len()
            )));
        }
        let Some(state) = &self.state else {
            return Ok(());
        };
        state.write_all_at(&slot, (counter % 2) * SLOT_BYTES)?;
        if self.sync {
            state.sync_data()?;
        }
        self.counter = counter;
        Ok(())
    }

    /// Cuts the file back to its durable length after a failed batch.
    fn cut_back(&mut self) -> bool {
        self.file.set_len(self.length).is_ok()
            && self.file.seek(SeekFrom::Start(self.length)).is_ok()
    }
}

/// The newest valid slot of the state file: its counter and record.
fn read_state(state: &mut File) -> std::io::Result<(u64, Option<Written>)> {
    let mut bytes = Vec::new();
    state.seek(SeekFrom::Start(0))?;
    state.read_to_end(&mut bytes)?;
    let mut best: Option<(u64, Written)> = None;
    for slot in 0..2u64 {
        let start = (slot * SLOT_BYTES) as usize;
        let Some(head) = bytes.get(start..start + 24) else {
            continue;
        };
        if &head[..8] != MAGIC {
            continue;
        }
        let counter = u64::from_le_bytes(head[8..16].try_into().unwrap_or_default());
        let len = u32::from_le_bytes(head[16..20].try_into().unwrap_or_default()) as usize;
        let crc = u32::from_le_bytes(head[20..24].try_into().unwrap_or_default());
        let Some(payload) = bytes.get(start + 24..start + 24 + len) else {
            continue;
        };
        if crc32fast::hash(payload) != crc {
            continue;
        }
        let Ok(written) = postcard::from_bytes::<Written>(payload) else {
            continue;
        };
        if best.as_ref().is_none_or(|(known, _)| counter > *known) {
            best = Some((counter, written));
        }
    }
    Ok(match best {
        Some((counter, written)) => (counter, Some(written)),
        None => (0, None),
    })
}

impl Sink for FileSink {
    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
        self.buffer.clear();
        self.written.clear();
        self.before.clone_from(&self.last);
        for output in outputs {
            if self.already_written(&output.key) {
                self.written.push(false);
                continue;
            }
            self.written.push(true);
            self.buffer.extend_from_slice(&output.payload);
            self.buffer.push(b'\n');
            self.note_written(&output.key);
        }
        let length = self.length + self.buffer.len() as u64;
        let result = (|| -> std::io::Result<()> {
            if !self.buffer.is_empty() {
                if self.state.is_some() {
                    // a regular file: after its durable length (a device has none)
                    self.file.seek(SeekFrom::Start(self.length))?;
                }
                self.file.write_all(&self.buffer)?;
                if self.sync {
                    self.file.sync_data()?;
                }
            }
            self.write_state(length)
        })();
        match result {
            Ok(()) => {
                self.length = length;
                // one text per batch, copied per output
                let durable = format!("durable through byte {length}");
                for written in &self.written {
                    outcomes.push(SinkOutcome::Published {
                        evidence: if *written {
                            durable.clone()
                        } else {
                            ALREADY_WRITTEN.to_owned()
                        },
                    });
                }
            }
            Err(error) => {
                std::mem::swap(&mut self.last, &mut self.before);
                let cut = self.cut_back();
                for _ in outputs {
                    outcomes.push(if cut {
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
                                "writing {} failed ({error}) and it could not be cut back to its durable {} bytes",
                                self.path.display(),
                                self.length
                            ),
                        }
                    });
                }
            }
        }
    }

    fn verify(&mut self, key: &OutputKey) -> Option<SinkOutcome> {
        self.already_written(key).then(|| SinkOutcome::Published {
            evidence: ALREADY_WRITTEN.to_owned(),
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
