//! The replay store: an append-only file of checksummed frames, written by
//! [`ReplayStore`] and read into a [`Recording`].
//!
//! * [`recording`]: reading a store into a [`Recording`];
//! * [`sealed`]: the files beside a store that its closing frame seals.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::entry::{Entry, Provenance};
use crate::error::ReplayError;
use crate::format::{
    check_head, header, push_frame, Head, HeadError, WireDelivery, WireEntry, WireFrame,
    WireProvenance, WireSealedFile, FORMAT_VERSION, FRAME_HEAD_LEN, HEADER_LEN,
};
use crate::key::parse_stream_key;

mod recording;
mod sealed;

pub use recording::{Closing, Incomplete, RecordedStream, Recording};
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
/// One writer at a time: an open store holds the lock (`flock`, through
/// `mongoose_durable::lock`) of its file, and a second [`ReplayStore::open`] of it is
/// refused with [`ReplayError::InUse`]. Readers ([`Recording`]) take no lock.
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
#[derive(Clone, Debug, Default)]
struct Tally {
    frames: u64,
    entries: u64,
    /// CRC-32 of the frames' heads, in order (each head holds its frame's length and
    /// CRC-32, so this covers every frame byte at 8 bytes of work per frame).
    checksum: crc32fast::Hasher,
    /// Where the frames end (the closing frame's start in a closed store).
    end: usize,
}

impl PartialEq for Tally {
    fn eq(&self, other: &Self) -> bool {
        (self.frames, self.entries, self.checksum(), self.end)
            == (other.frames, other.entries, other.checksum(), other.end)
    }
}

impl Eq for Tally {}

impl Tally {
    /// The checksum of the frames' heads so far (the running state is kept).
    fn checksum(&self) -> u32 {
        self.checksum.clone().finalize()
    }

    /// The tally of no frame after a head of `head_len` bytes.
    fn new(head_len: usize) -> Self {
        Tally {
            end: head_len,
            ..Tally::default()
        }
    }

    fn add(&mut self, frame_bytes: &[u8], entry: bool) {
        self.frames += 1;
        self.entries += u64::from(entry);
        self.checksum.update(&frame_bytes[..FRAME_HEAD_LEN]);
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
        // one writer at a time: the durable layer's flock on the store's file, held
        // while the store is open (let go by the kernel if the process dies)
        if !mongoose_durable::lock::lock_waiting(&file).map_err(io)? {
            return Err(ReplayError::InUse { path });
        }
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
            tally: Tally::new(HEADER_LEN),
            reopened_closing_at: None,
        };
        let head = check_head(&bytes).map_err(|error| head_error(&path, error))?;
        // a store that holds nothing past its head is empty: written afresh (so a head
        // of an older version becomes this version's)
        let existing = match head {
            Head::Store { version, len } if bytes.len() > len || version == FORMAT_VERSION => {
                Some((version, len))
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
            Some((version, head_len)) => {
                let recording = Recording::parse(&bytes, version, head_len);
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
                checksum: self.tally.checksum(),
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

#[cfg(test)]
pub(crate) mod tests_support;
