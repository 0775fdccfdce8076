//! Reading a store: a [`Recording`] of [`RecordedStream`]s, complete only when it ends
//! with a [`Closing`] frame that matches the frames before it, otherwise with the
//! reasons it is [`Incomplete`].

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use mongoose_core::Delivery;

use super::{head_error, SealedFile, Tally};
use crate::entry::{Entry, Provenance};
use crate::error::ReplayError;
use crate::format::{
    check_head, decode_frame, read_frame, FrameRead, Head, WireFrame, WireProvenance,
    CLOSING_FRAME_VERSION,
};

/// Why a recording is incomplete.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum Incomplete {
    /// The last frame runs past the end of the file: the recording was interrupted while
    /// writing it. Nothing of it is read.
    TornFrame {
        /// Where the frame starts.
        offset: u64,
    },
    /// A frame is damaged; nothing from it on is read.
    DamagedFrame {
        /// Where the frame starts.
        offset: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A delivery frame whose input frame was never written. It adds nothing.
    OrphanDelivery {
        /// Where the delivery frame starts.
        offset: u64,
        /// The stream it belongs to.
        stream: String,
    },
    /// The frames end without the closing frame a clean close writes: the store was
    /// written by an older version (format 1 has none), or the recorder was killed (or
    /// its group died) before it closed the store, or the store was cut at a frame
    /// boundary. Every frame before `offset` is read.
    NotClosed {
        /// Where the frames end.
        offset: u64,
    },
    /// The file is empty, or shorter than the store's head: the recorder was killed
    /// while creating it, or the file was cut.
    NoHead {
        /// The file's length.
        length: u64,
    },
    /// The closing frame does not match the frames before it (their count, their
    /// entries' count or their checksum): frames were removed or changed after the
    /// recording closed. The frames are read; the recording is not complete.
    ClosingMismatch {
        /// Where the closing frame starts.
        offset: u64,
        /// What differs.
        reason: String,
    },
}

impl fmt::Display for Incomplete {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Incomplete::TornFrame { offset } => write!(
                f,
                "a torn frame at byte {offset}: the recording was interrupted while writing it"
            ),
            Incomplete::DamagedFrame { offset, reason } => {
                write!(f, "{reason} at byte {offset}: nothing from it on is read")
            }
            Incomplete::OrphanDelivery { offset, stream } => write!(
                f,
                "a delivery of stream {stream:?} at byte {offset} whose input was never written"
            ),
            Incomplete::NotClosed { offset } => write!(
                f,
                "no closing frame (written by an older version or the recorder was killed): \
                 the frames end at byte {offset}"
            ),
            Incomplete::NoHead { length } => write!(
                f,
                "the store is empty ({length} bytes, not even its head): the recorder was \
                 killed while creating it, or the file was cut"
            ),
            Incomplete::ClosingMismatch { offset, reason } => write!(
                f,
                "the closing frame at byte {offset} does not match the frames before it \
                 ({reason}): frames were removed or changed after the recording closed"
            ),
        }
    }
}

/// One processor build's recorded stream.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct RecordedStream {
    pub(super) key: String,
    provenance: Option<Provenance>,
    entries: Vec<Entry>,
}

impl RecordedStream {
    /// The stream's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The provenance recorded when it began (`None` when it was not recorded).
    pub fn provenance(&self) -> Option<&Provenance> {
        self.provenance.as_ref()
    }

    /// Its entries in order, each input with the delivery recorded with it.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }
}

/// What a store's closing frame says (see [`Recording::closing`]).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Closing {
    frames: u64,
    entries: u64,
    checksum: u32,
    sealed: Vec<SealedFile>,
}

impl Closing {
    /// The number of frames before the closing frame.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// The number of entries the store holds (its `Entry` frames).
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// The CRC-32 of the heads of the frames before the closing frame, in order (each
    /// head holds its frame's length and CRC-32, so it covers every frame byte).
    pub fn checksum(&self) -> u32 {
        self.checksum
    }

    /// The files beside the store that the recording holds, as they were at the close.
    pub fn sealed_files(&self) -> &[SealedFile] {
        &self.sealed
    }
}

/// A store's recording as read: its streams and whether it is complete.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Recording {
    pub(super) streams: Vec<RecordedStream>,
    by_key: HashMap<String, usize>,
    incomplete: Vec<Incomplete>,
    pub(super) holds_recording: bool,
    pub(super) closing: Option<Closing>,
    /// The frames read before the closing frame (or before where reading stopped).
    pub(super) tally: Tally,
}

struct PendingDelivery {
    offset: usize,
    stream: u32,
    delivery: Delivery,
}

impl Recording {
    /// Reads the store at `path`. Never creates or changes the file.
    pub fn read(path: impl AsRef<Path>) -> Result<Recording, ReplayError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| ReplayError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Recording::from_bytes_of(path, &bytes)
    }

    /// Reads a store's bytes. Any bytes give a result or an error, never a panic.
    pub fn from_bytes(bytes: &[u8]) -> Result<Recording, ReplayError> {
        Recording::from_bytes_of(Path::new("(bytes in memory)"), bytes)
    }

    fn from_bytes_of(path: &Path, bytes: &[u8]) -> Result<Recording, ReplayError> {
        match check_head(bytes).map_err(|error| head_error(path, error))? {
            Head::Empty => Ok(Recording {
                incomplete: vec![Incomplete::NoHead {
                    length: bytes.len() as u64,
                }],
                ..Recording::default()
            }),
            Head::Store { version, len } => Ok(Recording::parse(bytes, version, len)),
        }
    }

    /// Parses the frames after a checked head of format `version`, `head_len` bytes.
    pub(super) fn parse(bytes: &[u8], version: u32, head_len: usize) -> Recording {
        let mut recording = Recording {
            holds_recording: bytes.len() > head_len,
            tally: Tally::new(head_len),
            ..Recording::default()
        };
        // where the frames ended without a closing frame (None: reading stopped at a
        // damaged frame, or at the closing frame)
        let mut unclosed_end = None;
        let mut feeds: Vec<Arc<str>> = Vec::new();
        let mut pending: Option<PendingDelivery> = None;
        let mut offset = head_len;
        loop {
            let (body, next) = match read_frame(bytes, offset) {
                FrameRead::Frame { body, next } => (body, next),
                FrameRead::End => {
                    unclosed_end = Some(offset);
                    break;
                }
                FrameRead::Torn => {
                    recording.incomplete.push(Incomplete::TornFrame {
                        offset: offset as u64,
                    });
                    unclosed_end = Some(offset);
                    break;
                }
                FrameRead::Damaged(reason) => {
                    recording.damaged(offset, reason);
                    break;
                }
            };
            let frame = match decode_frame(body) {
                Ok(frame) => frame,
                Err(reason) => {
                    recording.damaged(offset, reason);
                    break;
                }
            };
            let is_entry = matches!(frame, WireFrame::Entry { .. });
            match frame {
                WireFrame::Stream {
                    id,
                    key,
                    provenance,
                } => {
                    recording.orphan(pending.take());
                    if id as usize != recording.streams.len() {
                        recording.damaged(offset, "a stream begun out of order");
                        break;
                    }
                    if recording.by_key.contains_key(&*key) {
                        recording.damaged(offset, "a stream begun twice");
                        break;
                    }
                    let key = key.into_owned();
                    recording
                        .by_key
                        .insert(key.clone(), recording.streams.len());
                    recording.streams.push(RecordedStream {
                        key,
                        provenance: provenance.map(WireProvenance::into_provenance),
                        entries: Vec::new(),
                    });
                }
                WireFrame::Delivery { stream, delivery } => {
                    if stream as usize >= recording.streams.len() {
                        recording.damaged(offset, "a delivery of a stream never begun");
                        break;
                    }
                    // a delivery still pending here was not followed by its input
                    recording.orphan(pending.take());
                    pending = Some(PendingDelivery {
                        offset,
                        stream,
                        delivery: delivery.into_delivery(&mut feeds),
                    });
                }
                WireFrame::Entry { stream, entry } => {
                    if stream as usize >= recording.streams.len() {
                        recording.damaged(offset, "an entry of a stream never begun");
                        break;
                    }
                    let delivery = match pending.take() {
                        Some(found) if found.stream == stream && entry.delivered() => {
                            Some(found.delivery)
                        }
                        other => {
                            recording.orphan(other);
                            None
                        }
                    };
                    if entry.delivered() && delivery.is_none() {
                        recording
                            .damaged(offset, "an input whose delivery frame does not precede it");
                        break;
                    }
                    recording.streams[stream as usize]
                        .entries
                        .push(entry.into_entry(delivery));
                }
                WireFrame::Close {
                    frames,
                    entries,
                    checksum,
                    sealed,
                } => {
                    recording.orphan(pending.take());
                    if version < CLOSING_FRAME_VERSION {
                        recording.damaged(offset, "a closing frame in a store of format version 1");
                        break;
                    }
                    let tally = recording.tally.clone();
                    let mut differs = Vec::new();
                    if frames != tally.frames {
                        differs.push(format!(
                            "it counts {frames} frames, the store holds {}",
                            tally.frames
                        ));
                    }
                    if entries != tally.entries {
                        differs.push(format!(
                            "it counts {entries} entries, the store holds {}",
                            tally.entries
                        ));
                    }
                    let found = tally.checksum();
                    if checksum != found {
                        differs.push(format!(
                            "its checksum is {checksum:08x}, the frames' is {found:08x}"
                        ));
                    }
                    if !differs.is_empty() {
                        recording.incomplete.push(Incomplete::ClosingMismatch {
                            offset: offset as u64,
                            reason: differs.join("; "),
                        });
                        break;
                    }
                    if read_frame(bytes, next) != FrameRead::End {
                        recording.damaged(next, "a frame after the closing frame");
                        break;
                    }
                    recording.closing = Some(Closing {
                        frames,
                        entries,
                        checksum,
                        sealed: sealed
                            .into_iter()
                            .map(|file| SealedFile {
                                name: file.name.into_owned(),
                                length: file.length,
                                checksum: file.checksum,
                            })
                            .collect(),
                    });
                    break;
                }
            }
            recording.tally.add(&bytes[offset..next], is_entry);
            offset = next;
        }
        recording.orphan(pending);
        if let Some(end) = unclosed_end {
            recording
                .incomplete
                .push(Incomplete::NotClosed { offset: end as u64 });
        }
        recording
    }

    fn damaged(&mut self, offset: usize, reason: &'static str) {
        self.incomplete.push(Incomplete::DamagedFrame {
            offset: offset as u64,
            reason,
        });
    }

    fn orphan(&mut self, pending: Option<PendingDelivery>) {
        if let Some(orphan) = pending {
            self.incomplete.push(Incomplete::OrphanDelivery {
                offset: orphan.offset as u64,
                stream: self.streams[orphan.stream as usize].key.clone(),
            });
        }
    }

    pub(super) fn incomplete_summary(&self) -> String {
        self.incomplete
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// True when the store ends with its closing frame, the closing frame matches the
    /// frames before it, every frame was whole and every delivery reached its input.
    pub fn complete(&self) -> bool {
        self.incomplete.is_empty()
    }

    /// What the store's closing frame says, or `None` when it has none (see
    /// [`Incomplete::NotClosed`]) or it does not match the frames.
    pub fn closing(&self) -> Option<&Closing> {
        self.closing.as_ref()
    }

    /// Why the recording is incomplete (empty when it is complete).
    pub fn incomplete(&self) -> &[Incomplete] {
        &self.incomplete
    }

    /// True when the store held anything past its head.
    pub fn holds_recording(&self) -> bool {
        self.holds_recording
    }

    /// The streams, in the order they began.
    pub fn streams(&self) -> &[RecordedStream] {
        &self.streams
    }

    /// The stream recorded under `key`, or `None` when none was.
    pub fn stream(&self, key: &str) -> Option<&RecordedStream> {
        self.by_key.get(key).map(|&index| &self.streams[index])
    }
}
