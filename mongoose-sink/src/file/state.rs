//! The state file beside the sink's file: what it belongs to, its records (frames,
//! lanes), the log they are appended to and what reading them back replays.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use mongoose_durable::header::{Header, MAGIC};
use mongoose_durable::log::{RecordLog, FRAME_HEADER};
use mongoose_durable::DurableError;
use serde::{Deserialize, Serialize};

use super::{LEGACY_HEADER_BYTES, LEGACY_MAGIC, LEGACY_VERSION, STATE_FORMAT, STATE_VERSION};

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

/// The open state log: a record log of the durable layer.
#[derive(Debug)]
pub(super) struct StateLog {
    pub(super) log: RecordLog,
    pub(super) identity: Identity,
    /// Part of a failed append may be past the last whole record (it could not be cut
    /// back): cut back before the next append.
    pub(super) dirty: bool,
    /// The last record number used.
    pub(super) seq: u64,
    /// The number of the last record whose batch was written (the next one's base).
    pub(super) committed: u64,
    /// The last batch written.
    pub(super) last: BatchCheck,
    /// The log's length right after its snapshot (or header and identity).
    pub(super) snapshot_len: u64,
    /// No compaction before the log passes this (a compaction failed below it).
    pub(super) compact_after: u64,
    pub(super) next_slot: u32,
    pub(super) sync: bool,
}

/// The durable header of the state `state_id`: its owner is the state id, in decimal.
pub(super) fn state_header(state_id: u64) -> Header {
    Header::new(
        STATE_FORMAT,
        STATE_VERSION,
        state_id.to_string().into_bytes(),
    )
}

/// A record's payload: `value` in postcard.
pub(super) fn encode<T: Serialize>(value: &T) -> std::io::Result<Vec<u8>> {
    postcard::to_stdvec(value).map_err(|error| std::io::Error::other(error.to_string()))
}

/// The CRC32 of a record of the earlier layout (`MGSNKST2`) of the state `state_id`.
fn legacy_record_crc(state_id: u64, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&state_id.to_le_bytes());
    hasher.update(payload);
    hasher.finalize()
}

/// A state file read, not yet replayed.
#[derive(Debug)]
pub(super) struct StateRead {
    /// What it belongs to (its first record, or the earlier layout's header).
    pub(super) identity: Identity,
    /// Of the earlier layout (`MGSNKST2`): rewritten in the durable one once trusted.
    pub(super) legacy: bool,
    /// Where the records after the identity start.
    pub(super) start: usize,
    /// Those records: where each frame starts, and its payload.
    pub(super) frames: Vec<(usize, Vec<u8>)>,
    /// A torn tail (a last record cut by a crash): where it starts, how many bytes.
    pub(super) torn: Option<(u64, u64)>,
}

/// Why a state file cannot be read.
#[derive(Debug)]
pub(super) enum Unreadable {
    /// Reading it failed.
    Io(std::io::Error),
    /// It is damaged, or not a sink state: what is wrong, for a refusal.
    Refused(String),
}

/// Reads the state file at `path` (whose content is `bytes`) without changing it: the
/// durable layer's log, or the earlier layout.
pub(super) fn read_state(path: &Path, bytes: &[u8]) -> Result<StateRead, Unreadable> {
    if bytes.starts_with(LEGACY_MAGIC) {
        return read_legacy(bytes).map_err(Unreadable::Refused);
    }
    if !bytes.starts_with(&MAGIC) {
        return Err(Unreadable::Refused(if bytes.len() < MAGIC.len() {
            format!(
                "it is {} bytes long, shorter than a sink state's header",
                bytes.len()
            )
        } else {
            "it is not a sink state (no sink state header at its start)".to_owned()
        }));
    }
    let refused = |error: DurableError| {
        match error {
        DurableError::Io { source, .. } => Unreadable::Io(source),
        DurableError::DamagedHeader { reason, .. } => {
            Unreadable::Refused(format!("its header is damaged ({reason})"))
        }
        DurableError::DamagedRecord { offset, reason, .. } => Unreadable::Refused(format!(
            "the record at byte {offset} is damaged ({reason}), and valid records follow it: it is no record a crash cut short, and skipping it would lose what it holds"
        )),
        DurableError::WrongFormat { found, .. } => Unreadable::Refused(format!(
            "it is a {found} file, not a sink state"
        )),
        DurableError::WrongVersion { found, expected, .. } => Unreadable::Refused(format!(
            "it is of format version {found}, and this build reads version {expected}"
        )),
        other => Unreadable::Refused(other.to_string()),
    }
    };
    let (found, header_len) = Header::decode(path, bytes).map_err(refused)?;
    let header = Header::new(STATE_FORMAT, STATE_VERSION, found.owner.clone());
    header.check(path, &found).map_err(refused)?;
    let recovery = mongoose_durable::log::read(path, &header).map_err(refused)?;
    let mut records = recovery.records.into_iter();
    let Some(first) = records.next() else {
        return Err(Unreadable::Refused(
            "its first record (what it belongs to) is missing, cut short or damaged".to_owned(),
        ));
    };
    let identity: Identity = postcard::from_bytes(&first).map_err(|error| {
        Unreadable::Refused(format!("its first record cannot be read ({error})"))
    })?;
    if header.owner != identity.state_id.to_string().into_bytes() {
        return Err(Unreadable::Refused(format!(
            "its header names another state ({}) than its first record ({})",
            String::from_utf8_lossy(&header.owner),
            identity.state_id
        )));
    }
    let start = header_len + FRAME_HEADER + first.len();
    let mut at = start;
    let frames = records
        .map(|payload| {
            let frame = (at, payload);
            at += FRAME_HEADER + frame.1.len();
            frame
        })
        .collect();
    Ok(StateRead {
        identity,
        legacy: false,
        start,
        frames,
        torn: recovery.torn_tail.map(|torn| (torn.offset, torn.bytes_cut)),
    })
}

/// Reads a state of the earlier layout: `MGSNKST2` | version u64 | length u32 | crc32
/// u32 | postcard(Identity), then records of length u32 | crc32 (seeded with the state
/// id) u32 | postcard(Frame). A last record cut short is torn; a whole one whose CRC
/// does not match is damage.
fn read_legacy(bytes: &[u8]) -> Result<StateRead, String> {
    let identity = legacy_identity(bytes)?;
    let start = LEGACY_HEADER_BYTES
        + u32::from_le_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]) as usize;
    let mut frames = Vec::new();
    let mut offset = start;
    let mut torn = None;
    while offset < bytes.len() {
        let rest = &bytes[offset..];
        let whole = rest.get(..FRAME_HEADER).and_then(|head| {
            let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
            let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            Some((crc, rest.get(FRAME_HEADER..FRAME_HEADER + len)?))
        });
        let Some((crc, payload)) = whole else {
            torn = Some((offset as u64, rest.len() as u64));
            break;
        };
        if legacy_record_crc(identity.state_id, payload) != crc {
            return Err(format!(
                "the record at byte {offset} is damaged (its checksum does not match)"
            ));
        }
        frames.push((offset, payload.to_vec()));
        offset += FRAME_HEADER + payload.len();
    }
    Ok(StateRead {
        identity,
        legacy: true,
        start,
        frames,
        torn,
    })
}

/// The identity in the header of a state of the earlier layout, checked.
pub(super) fn legacy_identity(bytes: &[u8]) -> Result<Identity, String> {
    let Some(head) = bytes.get(..LEGACY_HEADER_BYTES) else {
        return Err(format!(
            "it is {} bytes long, shorter than a sink state's header",
            bytes.len()
        ));
    };
    if &head[..8] != LEGACY_MAGIC {
        return Err("it is not a sink state (no sink state magic at its start)".to_owned());
    }
    let version = u64::from_le_bytes([
        head[8], head[9], head[10], head[11], head[12], head[13], head[14], head[15],
    ]);
    if version != LEGACY_VERSION {
        return Err(format!(
            "it is of format version {version}, and this build reads version {LEGACY_VERSION}"
        ));
    }
    let len = u32::from_le_bytes([head[16], head[17], head[18], head[19]]) as usize;
    let crc = u32::from_le_bytes([head[20], head[21], head[22], head[23]]);
    let Some(payload) = bytes.get(LEGACY_HEADER_BYTES..LEGACY_HEADER_BYTES + len) else {
        return Err("its header is cut short".to_owned());
    };
    if crc32fast::hash(payload) != crc {
        return Err("its header is damaged (its checksum does not match)".to_owned());
    }
    postcard::from_bytes(payload).map_err(|error| format!("its header cannot be read ({error})"))
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

    /// Replays `frames` (where each starts, its payload: the records after the
    /// identity, which start at `start`).
    pub(super) fn replay(start: usize, frames: &[(usize, Vec<u8>)]) -> Result<Self, String> {
        let mut replayed = Replayed {
            end: start as u64,
            snapshot_len: start as u64,
            ..Replayed::default()
        };
        let mut first = true;
        for (offset, payload) in frames {
            let offset = *offset;
            let frame: Frame = postcard::from_bytes(payload)
                .map_err(|error| format!("the record at byte {offset} cannot be read ({error})"))?;
            let offset = offset + FRAME_HEADER + payload.len();
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
    /// The log's length.
    pub(super) fn len(&self) -> u64 {
        self.log.len()
    }

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
            self.log.cut_back()?;
            self.dirty = false;
        }
        let payload = encode(frame)?;
        if let Err(error) = self.log.append(&payload) {
            self.dirty = self.log.cut_back().is_err();
            return Err(error.into());
        }
        if sync {
            // the record stays (a batch that fails is followed by a record of the same
            // base); its batch is not written
            self.log.sync()?;
        }
        Ok(())
    }
}
