//! [`RecordingReader`]: replays a recording from a position, then follows it live.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use mongoose_core::Epoch;

use crate::catalog::{self, RecordingDescriptor};
use crate::error::{ArchiveError, Result};
use crate::segment::{
    check_segment_header, segment_path, segment_starts, Decoded, Framing, RecordKind,
    RecordingIdentity,
};

/// Which recording to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordingSelector {
    /// The recording with this id.
    Id(u64),
    /// The newest recording of this stream id.
    LatestForStream(u32),
}

/// What a [`RecordingReader`] hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayEvent<'a> {
    /// A message and the position after it (the position to commit once it is
    /// processed; reopening from it continues with the next message).
    Message {
        /// The stream position after the message.
        position: u64,
        /// The message bytes.
        payload: &'a [u8],
    },
    /// Stream bytes `[from, to)` the archive could not record: the publication had
    /// lost them (they left its retransmit buffer). A loss, reported, never silent;
    /// the position after it is `to`.
    Gap {
        /// The first lost stream position.
        from: u64,
        /// The position after the gap.
        to: u64,
    },
}

/// Reads one recording from a position: first what is recorded (replay), then what
/// the archiver appends (live), from the same files, so the hand-over from replay to
/// live has no gap and no duplicate by construction.
///
/// Positions are stream positions: the position of a message is the position after
/// it (`frame start + 4 + len`); the recording id is the epoch of these positions
/// (a recording that is replaced is a new recording with a new id). Reading never
/// waits: [`RecordingReader::poll`] returns what is there; not calling it is PAUSE
/// (the archive is the buffer).
#[derive(Debug)]
pub struct RecordingReader {
    archive: PathBuf,
    descriptor: RecordingDescriptor,
    /// The recording's identity, which each segment's header names.
    identity: RecordingIdentity,
    segment_start: u64,
    file: File,
    path: PathBuf,
    /// How the current segment's records are framed.
    framing: Framing,
    /// Where the current segment's first record starts (its header's length).
    header_len: u64,
    /// The file offset of `buf[0]`.
    buf_offset: u64,
    buf: Vec<u8>,
    consumed: usize,
    filled: usize,
    position: u64,
    seek_to: Option<u64>,
    ended: bool,
    gaps: u64,
    lost_bytes: u64,
    warned_tail: bool,
}

const READ_CHUNK: usize = 256 << 10;

impl RecordingReader {
    /// Opens a recording to read from `from` (a position a reader handed out, or the
    /// recording's start), or from its start when `from` is `None`.
    pub fn open(
        archive: &Path,
        selector: RecordingSelector,
        from: Option<u64>,
    ) -> Result<RecordingReader> {
        let state = catalog::read(archive)?;
        let descriptor = match selector {
            RecordingSelector::Id(id) => state
                .recordings
                .get(&id)
                .cloned()
                .ok_or(ArchiveError::NoSuchRecording(id))?,
            RecordingSelector::LatestForStream(stream) => state
                .latest_for_stream(stream)
                .cloned()
                .ok_or(ArchiveError::NoRecordingForStream(stream))?,
        };
        let id = descriptor.id;
        let from = from.unwrap_or(descriptor.start_position);
        let not_a_boundary = || ArchiveError::NotABoundary {
            recording: id,
            position: from,
            start: descriptor.start_position,
        };
        if from < descriptor.start_position {
            return Err(not_a_boundary());
        }
        if descriptor.stop_position.is_some_and(|stop| from > stop) {
            return Err(not_a_boundary());
        }
        let starts = segment_starts(archive, id)?;
        let segment_start = starts
            .iter()
            .rev()
            .find(|&&start| start <= from)
            .copied()
            .unwrap_or(descriptor.start_position);
        let identity = RecordingIdentity::of(&descriptor);
        let (file, path, format) = open_segment(archive, &identity, segment_start)?;
        Ok(RecordingReader {
            archive: archive.to_path_buf(),
            identity,
            segment_start,
            file,
            path,
            framing: format.framing,
            header_len: format.header_len,
            buf_offset: format.header_len,
            buf: vec![0u8; READ_CHUNK],
            consumed: 0,
            filled: 0,
            position: segment_start,
            seek_to: (from != segment_start).then_some(from),
            ended: false,
            gaps: 0,
            lost_bytes: 0,
            warned_tail: false,
            descriptor,
        })
    }

    /// The recording id.
    pub fn recording_id(&self) -> u64 {
        self.descriptor.id
    }

    /// The epoch of the positions: the recording id.
    pub fn epoch(&self) -> Epoch {
        Epoch(self.descriptor.id)
    }

    /// The recording's catalog entry as it was when the reader opened it.
    pub fn descriptor(&self) -> &RecordingDescriptor {
        &self.descriptor
    }

    /// The position after the last event handed out (where a reopen continues).
    pub fn position(&self) -> u64 {
        self.seek_to.unwrap_or(self.position)
    }

    /// Whether the recording stopped and everything in it was read.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// Gaps handed out so far.
    pub fn gaps(&self) -> u64 {
        self.gaps
    }

    /// Stream bytes lost in the gaps handed out so far.
    pub fn lost_bytes(&self) -> u64 {
        self.lost_bytes
    }

    /// Hands out up to `limit` events to `handler`, in order; returns how many. Zero
    /// means nothing new is recorded yet (or the recording ended: see
    /// [`RecordingReader::is_ended`]).
    pub fn poll(
        &mut self,
        limit: usize,
        mut handler: impl FnMut(ReplayEvent<'_>),
    ) -> Result<usize> {
        let mut events = 0;
        let mut refilled = false;
        while events < limit && !self.ended {
            match self.framing.decode(&self.buf[self.consumed..self.filled]) {
                Decoded::Record(record) => {
                    refilled = false;
                    let stored = record.stored_len();
                    if let Some(target) = self.seek_to {
                        if record.position < target && record.kind != RecordKind::Stop {
                            self.position = record.end();
                            self.consumed += stored;
                            continue;
                        }
                        if record.position > target
                            || (record.position < target && record.kind == RecordKind::Stop)
                        {
                            return Err(ArchiveError::NotABoundary {
                                recording: self.descriptor.id,
                                position: target,
                                start: self.descriptor.start_position,
                            });
                        }
                        self.seek_to = None;
                    }
                    if record.position != self.position {
                        return Err(ArchiveError::Corrupt {
                            recording: self.descriptor.id,
                            position: self.position,
                            path: self.path.clone(),
                            detail: format!(
                                "the next record starts at {} instead",
                                record.position
                            ),
                        });
                    }
                    let end = record.end();
                    match record.kind {
                        RecordKind::Message => handler(ReplayEvent::Message {
                            position: end,
                            payload: record.payload,
                        }),
                        RecordKind::Gap => {
                            self.gaps += 1;
                            self.lost_bytes += end - record.position;
                            tracing::warn!(
                                recording = self.descriptor.id,
                                from = record.position,
                                to = end,
                                "the recording has a gap: these stream bytes were lost"
                            );
                            handler(ReplayEvent::Gap {
                                from: record.position,
                                to: end,
                            })
                        }
                        RecordKind::Stop => self.ended = true,
                    }
                    self.position = end;
                    self.consumed += stored;
                    if record.kind != RecordKind::Stop {
                        events += 1;
                    }
                }
                Decoded::Incomplete { needed } => {
                    if refilled {
                        if self.consumed == self.filled && self.next_segment()? {
                            refilled = false;
                            continue;
                        }
                        break;
                    }
                    self.refill(needed)?;
                    refilled = true;
                }
                Decoded::Invalid(detail) => {
                    if !refilled {
                        self.refill(None)?;
                        refilled = true;
                        continue;
                    }
                    // damaged bytes at the tail of the newest segment: a torn write the
                    // archiver cuts when it starts again; in an older segment: damage
                    let next = segment_path(&self.archive, self.descriptor.id, self.segment_start);
                    let newest = segment_starts(&self.archive, self.descriptor.id)?
                        .last()
                        .is_none_or(|&last| last == self.segment_start);
                    if newest {
                        if !self.warned_tail {
                            self.warned_tail = true;
                            tracing::warn!(recording = self.descriptor.id, position = self.position, %detail, "a damaged record at the tail of the recording; waiting for the archiver to cut it");
                        }
                        break;
                    }
                    return Err(ArchiveError::Corrupt {
                        recording: self.descriptor.id,
                        position: self.position,
                        path: next,
                        detail,
                    });
                }
            }
        }
        Ok(events)
    }

    /// Reads again from the first unconsumed byte (dropping a partial record, which a
    /// restarted archiver may have cut and rewritten).
    fn refill(&mut self, needed: Option<usize>) -> Result<()> {
        self.buf_offset += self.consumed as u64;
        self.consumed = 0;
        self.filled = 0;
        if let Some(needed) = needed {
            if needed > self.buf.len() {
                self.buf.resize(needed.next_power_of_two(), 0);
            }
        }
        loop {
            let read = self
                .file
                .read_at(
                    &mut self.buf[self.filled..],
                    self.buf_offset + self.filled as u64,
                )
                .map_err(ArchiveError::io("read a segment", &self.path))?;
            if read == 0 {
                return Ok(());
            }
            self.filled += read;
            if self.filled == self.buf.len() {
                return Ok(());
            }
        }
    }

    /// At the end of a segment: moves to the next one when the archiver created it.
    fn next_segment(&mut self) -> Result<bool> {
        if self.position == self.segment_start {
            return self.follow_replaced_segment();
        }
        let path = segment_path(&self.archive, self.descriptor.id, self.position);
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(error) => return Err(ArchiveError::io("open a segment", &path)(error)),
        };
        // the previous segment is complete once the next exists: read its last bytes
        self.refill(None)?;
        if self.filled > 0 {
            return Ok(true);
        }
        let format = check_segment_header(&file, &path, &self.identity, self.position)?;
        self.switch_to(file, path, format.framing, format.header_len);
        Ok(true)
    }

    /// In a segment of the earlier layout that holds no record: the archiver continues
    /// the recording in a new segment of the same name (it never appends to the earlier
    /// layout), replacing it whole; follows it when it did.
    fn follow_replaced_segment(&mut self) -> Result<bool> {
        if self.framing != Framing::Earlier || self.buf_offset != self.header_len {
            return Ok(false);
        }
        use std::os::unix::fs::MetadataExt;
        let path = segment_path(&self.archive, self.descriptor.id, self.segment_start);
        let (now, open) = match (std::fs::metadata(&path), self.file.metadata()) {
            (Ok(now), Ok(open)) => (now, open),
            _ => return Ok(false),
        };
        if (now.dev(), now.ino()) == (open.dev(), open.ino()) {
            return Ok(false);
        }
        let file = File::open(&path).map_err(ArchiveError::io("open a segment", &path))?;
        let format = check_segment_header(&file, &path, &self.identity, self.segment_start)?;
        self.switch_to(file, path, format.framing, format.header_len);
        Ok(true)
    }

    /// Reads from the start of the segment `file` from now on.
    fn switch_to(&mut self, file: File, path: PathBuf, framing: Framing, header_len: u64) {
        self.file = file;
        self.path = path;
        self.segment_start = self.position;
        self.framing = framing;
        self.header_len = header_len;
        self.buf_offset = header_len;
        self.consumed = 0;
        self.filled = 0;
    }
}

fn open_segment(
    archive: &Path,
    identity: &RecordingIdentity,
    start: u64,
) -> Result<(File, PathBuf, crate::segment::SegmentFormat)> {
    let path = segment_path(archive, identity.id, start);
    let file = File::open(&path).map_err(ArchiveError::io("open a segment", &path))?;
    let format = check_segment_header(&file, &path, identity, start)?;
    Ok((file, path, format))
}

/// The recordings of an archive, by id.
pub fn list(archive: &Path) -> Result<Vec<RecordingDescriptor>> {
    Ok(catalog::read(archive)?.recordings.into_values().collect())
}

/// One recording's catalog entry (gaps, torn tails cut, start and stop).
pub fn describe(archive: &Path, id: u64) -> Result<RecordingDescriptor> {
    catalog::read(archive)?
        .recordings
        .remove(&id)
        .ok_or(ArchiveError::NoSuchRecording(id))
}
