//! The state file beside the sink's file: what it belongs to, its records (frames,
//! lanes), the log they are appended to and what reading them back replays.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{HEADER_BYTES, RECORD_HEAD_BYTES, STATE_MAGIC, STATE_VERSION};

/// What a state file belongs to: written once, in its header.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Identity {
    /// The sink's name when the state was made.
    pub(super) sink: String,
    /// The output file's path when the state was made (for messages).
    pub(super) path: String,
    /// The output file's device and inode.
    pub(super) device: u64,
    pub(super) inode: u64,
    /// A random id of this state, mixed into every record's CRC.
    pub(super) state_id: u64,
    /// When it was made (milliseconds since the Unix epoch).
    pub(super) created_unix_millis: u64,
}

/// Where a batch went in the file and what its bytes are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct BatchCheck {
    /// Its first byte.
    pub(super) start: u64,
    /// The byte after its last.
    pub(super) end: u64,
    /// CRC32 of its bytes.
    pub(super) crc: u32,
}

/// One record of the state log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Frame {
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
pub(super) struct LaneRecord {
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
pub(super) struct LaneName {
    pub(super) feed: String,
    pub(super) lane: u32,
    pub(super) writer: u64,
    pub(super) epoch: u64,
}

/// A key within its lane: (position, index).
pub(super) type At = (u64, u32);

/// A lane as the replay of the state log found it: its name, last key and gaps.
pub(super) type ReplayedLane = (LaneName, At, Vec<At>);

/// One lane in memory.
#[derive(Debug)]
pub(super) struct Lane {
    pub(super) feed: Arc<str>,
    pub(super) lane: u32,
    pub(super) writer: u64,
    pub(super) epoch: u64,
    pub(super) slot: u32,
    /// Its name is in the state log (a written batch's record or the snapshot).
    pub(super) persisted: bool,
    /// The last key written.
    pub(super) last: Option<At>,
    /// Keys below `last` that are not in the file.
    pub(super) gaps: BTreeSet<At>,
    /// Keys above `last` that were refused (a failed batch) and not written since: when
    /// a later key is written they become gaps. Not recorded: after a crash they are
    /// above the recorded `last`, so not held either.
    pub(super) pending: BTreeSet<At>,
    /// The batch that last touched it (see `FileSink::batch`).
    pub(super) touched_in: u64,
}

impl Lane {
    /// True when the file holds the output `at`.
    pub(super) fn holds(&self, at: At) -> bool {
        self.last.is_some_and(|last| at <= last) && !self.gaps.contains(&at)
    }

    /// `at` (not held) is written.
    pub(super) fn note_written(&mut self, at: At) {
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
    pub(super) fn note_refused(&mut self, at: At) {
        if self.last.is_none_or(|last| at > last) {
            self.pending.insert(at);
        }
    }

    pub(super) fn record(&self, slot: u32, with_name: bool) -> Option<LaneRecord> {
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
pub(super) struct Undo {
    pub(super) lane: usize,
    pub(super) last: Option<At>,
    pub(super) gaps: BTreeSet<At>,
    pub(super) pending: BTreeSet<At>,
}

/// The open state log.
#[derive(Debug)]
pub(super) struct StateLog {
    pub(super) file: File,
    pub(super) identity: Identity,
    /// The end of the last whole record.
    pub(super) len: u64,
    /// Bytes past `len` may be there (an append that failed and was not cut back).
    pub(super) dirty: bool,
    /// The last record number used.
    pub(super) seq: u64,
    /// The number of the last record whose batch was written (the next one's base).
    pub(super) committed: u64,
    /// The last batch written.
    pub(super) last: BatchCheck,
    /// The log's length right after its snapshot (or header).
    pub(super) snapshot_len: u64,
    /// No compaction before the log passes this (a compaction failed below it).
    pub(super) compact_after: u64,
    pub(super) next_slot: u32,
    pub(super) sync: bool,
}

/// The CRC32 of a record of the state `state_id`.
fn record_crc(state_id: u64, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&state_id.to_le_bytes());
    hasher.update(payload);
    hasher.finalize()
}

/// The header bytes of `identity`.
pub(super) fn header_bytes(identity: &Identity) -> std::io::Result<Vec<u8>> {
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
pub(super) fn push_record(
    bytes: &mut Vec<u8>,
    state_id: u64,
    frame: &Frame,
) -> std::io::Result<()> {
    let payload =
        postcard::to_stdvec(frame).map_err(|error| std::io::Error::other(error.to_string()))?;
    bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&record_crc(state_id, &payload).to_le_bytes());
    bytes.extend_from_slice(&payload);
    Ok(())
}

/// What the records of a state log say, replayed.
#[derive(Debug, Default)]
pub(super) struct Replayed {
    /// The lanes of the written batches, by slot.
    pub(super) lanes: HashMap<u32, (LaneName, At, Vec<At>)>,
    /// The last record whose batch is written (as far as the records tell).
    pub(super) committed_seq: u64,
    /// The file's length after it.
    pub(super) length: u64,
    /// Its batch.
    pub(super) last: BatchCheck,
    /// The last record, when its batch is not known to be written: whether it is is
    /// for the file to say.
    pub(super) tentative: Option<(u64, BatchCheck, Vec<LaneRecord>)>,
    /// The last record number.
    pub(super) seq: u64,
    /// The end of the last whole record.
    pub(super) end: u64,
    /// A last record cut short at this offset (a crash while it was written).
    pub(super) torn_at: Option<u64>,
    /// The length of the header and snapshot.
    pub(super) snapshot_len: u64,
}

impl Replayed {
    pub(super) fn apply(&mut self, records: &[LaneRecord]) -> Result<(), String> {
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
    pub(super) fn read(bytes: &[u8], at: usize, state_id: u64) -> Result<Self, String> {
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

impl StateLog {
    /// Appends `frame` (made durable when the sink syncs); a failed append is cut back.
    pub(super) fn append(&mut self, frame: &Frame) -> std::io::Result<()> {
        self.append_with(frame, self.sync)
    }

    /// Appends `frame` without syncing it.
    pub(super) fn append_unsynced(&mut self, frame: &Frame) -> std::io::Result<()> {
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
