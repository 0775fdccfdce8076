//! The replay store: an append-only file of checksummed frames, written by
//! [`ReplayStore`] and read into a [`Recording`].
//!
//! * [`sealed`]: the files beside a store that its closing frame seals.

use std::collections::HashMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mongoose_core::Delivery;

use crate::crc::Crc32;
use crate::entry::{Entry, Provenance};
use crate::error::ReplayError;
use crate::format::{
    check_head, decode_frame, header, push_frame, read_frame, FrameRead, Head, HeadError,
    WireDelivery, WireEntry, WireFrame, WireProvenance, WireSealedFile, CLOSING_FRAME_VERSION,
    FORMAT_VERSION, FRAME_HEAD_LEN, HEADER_LEN,
};
use crate::key::parse_stream_key;

mod sealed;

pub use sealed::SealedFile;

/// Tells the openings of stores apart, so a handle of one is refused by another.
static NEXT_OPENING: AtomicU64 = AtomicU64::new(1);

/// Names a stream of one opening of a [`ReplayStore`], returned by
/// [`ReplayStore::begin`] and [`ReplayStore::stream`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct StreamHandle {
    opening: u64,
    id: u32,
}

/// The writing side of a replay store.
///
/// Each call writes whole frames with one write to the file; an input with a delivery
/// writes its delivery frame and its own frame in that same write. By default nothing
/// is buffered between calls, so a process killed at any point leaves whole frames and
/// at most one torn frame at the end. [`ReplayStore::set_write_buffer`] keeps whole
/// appends in memory up to a size instead, written by [`ReplayStore::flush`] (one
/// write per flush, still of whole appends). [`ReplayStore::sync`] flushes and makes
/// the written frames durable; dropping the store flushes.
///
/// A recording is complete only once [`ReplayStore::close`] (or
/// [`ReplayStore::close_sealing`]) wrote its closing frame: the count of its frames and
/// entries and a checksum over them. A store dropped without it (or a process killed
/// before it) reads as incomplete, "no closing frame".
///
/// A store whose recording is incomplete (no closing frame, a torn last frame, a damaged
/// frame, or a delivery whose input was never written) or whose write failed is
/// read-only: every [`ReplayStore::begin`] and [`ReplayStore::append`] refuses with
/// [`ReplayError::ReadOnly`], and [`ReplayStore::holds_recording`] is true, so it is
/// never reused as an empty store. So is a store once closed.
///
/// One process writes a store at a time: the store does not lock its file.
#[derive(Debug)]
pub struct ReplayStore {
    path: PathBuf,
    file: File,
    opening: u64,
    keys: Vec<String>,
    by_key: HashMap<String, u32>,
    holds_recording: bool,
    read_only: Option<String>,
    /// Encoded frames not yet written: whole appends only.
    buffer: Vec<u8>,
    /// Write once this many bytes are pending (0: after every call).
    write_buffer: usize,
    /// What the closing frame will say: the frames written, their entries and checksum.
    tally: Tally,
    /// A closed store reopened to continue: where its closing frame starts, cut off
    /// before the first write (so opening alone never changes a closed store).
    reopened_closing_at: Option<u64>,
}

/// The frames of a store so far: what its closing frame says.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
struct Tally {
    frames: u64,
    entries: u64,
    /// CRC-32 of the frames' heads, in order (each head holds its frame's length and
    /// CRC-32, so this covers every frame byte at 8 bytes of work per frame).
    checksum: Crc32,
    /// Where the frames end (the closing frame's start in a closed store).
    end: usize,
}

impl Tally {
    fn new() -> Self {
        Tally {
            end: HEADER_LEN,
            ..Tally::default()
        }
    }

    fn add(&mut self, frame_bytes: &[u8], entry: bool) {
        self.frames += 1;
        self.entries += u64::from(entry);
        self.checksum.add(&frame_bytes[..FRAME_HEAD_LEN]);
        self.end += frame_bytes.len();
    }
}

impl ReplayStore {
    /// Opens the store at `path` to append to it, creating it (with its head) when the
    /// file does not exist, is empty, or holds only part of a head (its creation was
    /// interrupted).
    ///
    /// Refuses a file that is not a store and a store of a newer format version. An
    /// incomplete recording (one without its closing frame among them) opens read-only
    /// (see [`ReplayStore::read_only_reason`]). A closed recording opens to continue:
    /// its closing frame is cut off at the first write, and [`ReplayStore::close`]
    /// writes a new one over every frame.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ReplayError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| ReplayError::Io {
            path: path.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let mut store = ReplayStore {
            path: path.clone(),
            file,
            opening: NEXT_OPENING.fetch_add(1, Ordering::Relaxed),
            keys: Vec::new(),
            by_key: HashMap::new(),
            holds_recording: false,
            read_only: None,
            buffer: Vec::with_capacity(256),
            write_buffer: 0,
            tally: Tally::new(),
            reopened_closing_at: None,
        };
        let head = check_head(&bytes).map_err(|error| head_error(&path, error))?;
        // a store that holds nothing past its head is empty: written afresh (so a head
        // of an older version becomes this version's)
        let existing = match head {
            Head::Store { version } if bytes.len() > HEADER_LEN || version == FORMAT_VERSION => {
                Some(version)
            }
            _ => None,
        };
        match existing {
            None => {
                if !bytes.is_empty() {
                    store.file.set_len(0).map_err(io)?;
                }
                store.file.write_all(&header()).map_err(io)?;
                store.file.sync_data().map_err(io)?;
            }
            Some(version) => {
                let recording = Recording::parse(&bytes, version);
                for (id, stream) in recording.streams.iter().enumerate() {
                    store.keys.push(stream.key.clone());
                    // ids are checked sequential and keys unique while parsing
                    store.by_key.insert(stream.key.clone(), id as u32);
                }
                store.holds_recording = recording.holds_recording;
                store.tally = recording.tally.clone();
                if recording.closing.is_some() && recording.complete() {
                    store.reopened_closing_at = Some(recording.tally.end as u64);
                }
                if !recording.complete() && recording.holds_recording {
                    store.read_only = Some(format!(
                        "its recording is incomplete ({})",
                        recording.incomplete_summary()
                    ));
                    tracing::warn!(
                        path = %path.display(),
                        reason = store.read_only.as_deref().unwrap_or_default(),
                        "replay store opened read-only"
                    );
                }
            }
        }
        Ok(store)
    }

    /// Opens the store at `path` for RECORD: as [`ReplayStore::open`], but refuses a
    /// store that already holds a recording ([`ReplayError::AlreadyHoldsRecording`]),
    /// complete or not.
    pub fn open_for_record(path: impl AsRef<Path>) -> Result<Self, ReplayError> {
        let store = ReplayStore::open(path)?;
        if store.holds_recording {
            return Err(ReplayError::AlreadyHoldsRecording {
                path: store.path.clone(),
            });
        }
        Ok(store)
    }

    /// Keeps appended frames in memory until `bytes` of them are pending (0, the
    /// default: write at every call), then writes them in one write. Only whole calls
    /// are buffered, so a write never splits a delivery frame from its input.
    ///
    /// Entries still in memory when the process dies are lost: the recording then ends
    /// earlier, never torn inside an append. A recorder that buffers calls
    /// [`ReplayStore::flush`] before the inputs it recorded can be acknowledged to their
    /// feed, so a recording never lacks an input whose processing was committed.
    pub fn set_write_buffer(&mut self, bytes: usize) -> Result<(), ReplayError> {
        self.write_buffer = bytes;
        if self.buffer.len() >= bytes {
            self.flush()?;
        }
        Ok(())
    }

    /// The store's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True once the store holds anything past its head (a frame, even a torn one).
    pub fn holds_recording(&self) -> bool {
        self.holds_recording
    }

    /// Why the store refuses to be appended to, or `None` when it accepts appends.
    pub fn read_only_reason(&self) -> Option<&str> {
        self.read_only.as_deref()
    }

    /// The handle of a stream already in the store (to continue a complete recording).
    pub fn stream(&self, key: &str) -> Option<StreamHandle> {
        self.by_key.get(key).map(|&id| StreamHandle {
            opening: self.opening,
            id,
        })
    }

    /// Begins the stream `key` (a key of [`crate::stream_key`]), with the provenance of
    /// the build that records it (`None` when provenance is not recorded).
    pub fn begin(
        &mut self,
        key: &str,
        provenance: Option<&Provenance>,
    ) -> Result<StreamHandle, ReplayError> {
        self.check_writable()?;
        parse_stream_key(key)?;
        if self.by_key.contains_key(key) {
            return Err(ReplayError::StreamAlreadyBegun {
                path: self.path.clone(),
                key: key.to_owned(),
            });
        }
        let id = u32::try_from(self.keys.len()).map_err(|_| ReplayError::ReadOnly {
            path: self.path.clone(),
            reason: "it holds the largest number of streams a store can hold".to_owned(),
        })?;
        let start = self.buffer.len();
        push_frame(
            &mut self.buffer,
            &WireFrame::Stream {
                id,
                key: key.into(),
                provenance: provenance.map(WireProvenance::of),
            },
        )?;
        self.tally.add(&self.buffer[start..], false);
        self.holds_recording = true;
        self.keys.push(key.to_owned());
        self.by_key.insert(key.to_owned(), id);
        self.flush_when_due()?;
        Ok(StreamHandle {
            opening: self.opening,
            id,
        })
    }

    /// Appends `entry` to `stream`. An input with a delivery writes a delivery frame
    /// just before the input's frame, in the same write.
    pub fn append(&mut self, stream: StreamHandle, entry: &Entry) -> Result<(), ReplayError> {
        self.check_writable()?;
        if stream.opening != self.opening || stream.id as usize >= self.keys.len() {
            return Err(ReplayError::UnknownStream {
                path: self.path.clone(),
                handle: stream.id,
            });
        }
        let start = self.buffer.len();
        if let Some(delivery) = entry.delivery() {
            push_frame(
                &mut self.buffer,
                &WireFrame::Delivery {
                    stream: stream.id,
                    delivery: WireDelivery::of(delivery),
                },
            )?;
        }
        let entry_start = self.buffer.len();
        let pushed = push_frame(
            &mut self.buffer,
            &WireFrame::Entry {
                stream: stream.id,
                entry: WireEntry::of(entry),
            },
        );
        if let Err(error) = pushed {
            // never leave a delivery frame without its input
            self.buffer.truncate(start);
            return Err(error);
        }
        if entry_start > start {
            self.tally.add(&self.buffer[start..entry_start], false);
        }
        self.tally.add(&self.buffer[entry_start..], true);
        self.holds_recording = true;
        self.flush_when_due()
    }

    /// Closes the recording: writes the frames kept in memory, then the closing frame
    /// (the count of frames and entries and a CRC-32 over the frames' heads, which covers
    /// every frame), and makes them durable. Only a closed store reads as complete. The store is read-only after.
    pub fn close(&mut self) -> Result<(), ReplayError> {
        self.close_sealing(&[])
    }

    /// [`ReplayStore::close`], sealing `files` too: the files beside the store that the
    /// recording holds (their names, lengths and checksums, taken by the caller when
    /// each was written in full and made durable), so a reader can tell one cut,
    /// changed or removed later ([`SealedFile::verify_in`]).
    pub fn close_sealing(&mut self, files: &[SealedFile]) -> Result<(), ReplayError> {
        self.check_writable()?;
        self.flush()?;
        let sealed = files
            .iter()
            .map(|file| WireSealedFile {
                name: file.name.as_str().into(),
                length: file.length,
                checksum: file.checksum,
            })
            .collect();
        push_frame(
            &mut self.buffer,
            &WireFrame::Close {
                frames: self.tally.frames,
                entries: self.tally.entries,
                checksum: self.tally.checksum.finish(),
                sealed,
            },
        )?;
        self.sync()?;
        self.holds_recording = true;
        self.read_only = Some(
            "it is closed (its closing frame is written): reopen it with ReplayStore::open to \
             append more"
                .to_owned(),
        );
        Ok(())
    }

    /// Writes the frames kept in memory (see [`ReplayStore::set_write_buffer`]).
    pub fn flush(&mut self) -> Result<(), ReplayError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        if let Some(closing) = self.reopened_closing_at.take() {
            // continuing a closed recording: its old closing frame no longer covers it
            if let Err(source) = self.file.set_len(closing) {
                self.buffer.clear();
                self.read_only = Some(format!(
                    "its old closing frame could not be cut off ({source})"
                ));
                return Err(ReplayError::Io {
                    path: self.path.clone(),
                    source,
                });
            }
        }
        let written = self.file.write_all(&self.buffer);
        self.buffer.clear();
        if let Err(source) = written {
            self.read_only = Some(format!(
                "a write failed ({source}), so it may end in a torn frame"
            ));
            return Err(ReplayError::Io {
                path: self.path.clone(),
                source,
            });
        }
        Ok(())
    }

    fn flush_when_due(&mut self) -> Result<(), ReplayError> {
        if self.buffer.len() >= self.write_buffer {
            return self.flush();
        }
        Ok(())
    }

    /// Writes the frames kept in memory and makes every frame durable (fsync of the
    /// file's data).
    pub fn sync(&mut self) -> Result<(), ReplayError> {
        self.flush()?;
        self.file.sync_data().map_err(|source| ReplayError::Io {
            path: self.path.clone(),
            source,
        })
    }

    /// Writes the frames kept in memory, then reads the store's recording.
    pub fn read(&mut self) -> Result<Recording, ReplayError> {
        self.flush()?;
        Recording::read(&self.path)
    }

    fn check_writable(&self) -> Result<(), ReplayError> {
        match &self.read_only {
            None => Ok(()),
            Some(reason) => Err(ReplayError::ReadOnly {
                path: self.path.clone(),
                reason: reason.clone(),
            }),
        }
    }
}

impl Drop for ReplayStore {
    /// Writes the frames kept in memory; never the closing frame (a store dropped
    /// without [`ReplayStore::close`] reads as incomplete).
    fn drop(&mut self) {
        if let Err(error) = self.flush() {
            tracing::error!(%error, "replay store: frames kept in memory could not be written");
        }
    }
}

fn head_error(path: &Path, error: HeadError) -> ReplayError {
    match error {
        HeadError::NotAStore(reason) => ReplayError::NotAStore {
            path: path.to_path_buf(),
            reason,
        },
        HeadError::Newer(found) => ReplayError::NewerFormat {
            path: path.to_path_buf(),
            found,
            supported: FORMAT_VERSION,
        },
    }
}

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
    key: String,
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
    streams: Vec<RecordedStream>,
    by_key: HashMap<String, usize>,
    incomplete: Vec<Incomplete>,
    holds_recording: bool,
    closing: Option<Closing>,
    /// The frames read before the closing frame (or before where reading stopped).
    tally: Tally,
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
            Head::Store { version } => Ok(Recording::parse(bytes, version)),
        }
    }

    /// Parses the frames after a checked head of format `version`.
    fn parse(bytes: &[u8], version: u32) -> Recording {
        let mut recording = Recording {
            holds_recording: bytes.len() > HEADER_LEN,
            tally: Tally::new(),
            ..Recording::default()
        };
        // where the frames ended without a closing frame (None: reading stopped at a
        // damaged frame, or at the closing frame)
        let mut unclosed_end = None;
        let mut feeds: Vec<Arc<str>> = Vec::new();
        let mut pending: Option<PendingDelivery> = None;
        let mut offset = HEADER_LEN;
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
                    let found = tally.checksum.finish();
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

    fn incomplete_summary(&self) -> String {
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

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    /// One entry of every kind; the inputs carry `delivery`.
    pub(crate) fn every_kind(delivery: Option<Delivery>) -> Vec<Entry> {
        vec![
            Entry::Indexed {
                feed: "prices".into(),
                sequence: 7,
                route: "onPrice".into(),
                delivery: delivery.clone(),
                clock: vec![1_000, 1_001],
            },
            Entry::Inline {
                payload: b"line a".to_vec(),
                route: "onLine".into(),
                delivery,
                clock: vec![-5],
            },
            Entry::TimerFired {
                schedule: 3,
                clock: vec![2_000],
            },
            Entry::AdminInvoked {
                command: "reset".into(),
                args: vec!["all".into(), "now".into()],
                clock: vec![],
            },
            Entry::ServiceChanged {
                service: "cache".into(),
                version: 4,
                delivered: true,
                clock: vec![3_000],
            },
            Entry::ControlCall {
                call: "stopService".into(),
                args: vec!["cache".into()],
                outcome: crate::ControlOutcome::Failed("no such service".into()),
            },
            Entry::ControlCall {
                call: "startService".into(),
                args: vec![],
                outcome: crate::ControlOutcome::Ok,
            },
            Entry::Dropped {
                feed: "prices".into(),
                sequence: 8,
            },
            Entry::Failed {
                reason: "handler panicked".into(),
            },
            Entry::Stopped { clock: vec![4_000] },
        ]
    }
}
