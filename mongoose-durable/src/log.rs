//! A checksummed, append-only record log.
//!
//! The file is a [`Header`] (format, version, owner; checked on open) followed by
//! records, each framed (little-endian):
//!
//! ```text
//! offset  size  field
//! 0       4     payload length L (at most MAX_RECORD)
//! 4       4     CRC-32 (crc32fast) of the length field's 4 bytes, then the payload
//! 8       L     payload
//! ```
//!
//! The checksum covers the length, so that a run of zeros (a file extended by the
//! kernel whose data did not reach the disk) is no valid empty record.
//!
//! Recovery ([`RecordLog::open_or_create`]) reads the records in order. At the first
//! frame that is incomplete or whose checksum fails, it looks for any valid frame after
//! it:
//!
//! * none: the frame is a **torn tail** (the last write, cut by a crash before it was
//!   synced, so never acknowledged): it is cut from the file and reported
//!   ([`Recovery::torn_tail`]: where, how many bytes);
//! * one: the damage is **in the middle**: the file is refused with
//!   [`DurableError::DamagedRecord`] naming it and the damaged record's offset, and left
//!   as it is. A record is never skipped: what follows it may depend on it.
//!
//! A record is committed when [`RecordLog::sync`] returns after it: recovery never cuts
//! a committed record (a torn tail is always after the last sync).
//!
//! A writer that commits records in groups frames them into a buffer of its own
//! ([`begin_frame`], [`finish_frame`]: no allocation, no copy of the payload) and writes
//! the buffer at once; a reader with recovery rules of its own on top of these (the
//! outbox's watermark over its segments) reads the frames borrowed with [`read_frame`].
//! The bytes are the same either way.

use std::fs::File;
use std::path::{Path, PathBuf};

use tracing::warn;

use crate::disk::{Disk, DiskFile, RealDisk};
use crate::header::Header;
use crate::DurableError;

/// The largest record payload.
pub const MAX_RECORD: usize = 1 << 28;

/// The bytes before a record's payload.
pub const FRAME_HEADER: usize = 8;

/// A torn tail cut from a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornTail {
    /// Where the cut frame started (the log's length now).
    pub offset: u64,
    /// How many bytes were cut.
    pub bytes_cut: u64,
}

/// What opening a log found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The records' payloads, in order.
    pub records: Vec<Vec<u8>>,
    /// The torn tail cut, if there was one.
    pub torn_tail: Option<TornTail>,
}

/// An open log, appended to at its end.
#[derive(Debug)]
pub struct RecordLog<F: DiskFile = File> {
    path: PathBuf,
    file: F,
    /// The log's length, what was appended included.
    end: u64,
    /// Where the first record starts (the header's length).
    start: u64,
    /// The frame being written (kept to allocate nothing per record).
    frame: Vec<u8>,
}

impl RecordLog<File> {
    /// Opens the log at `path` with its records, cutting a torn tail (and removing the
    /// temporary file a creation cut short left); creates it with `header` when it is
    /// not there.
    ///
    /// # Errors
    /// [`DurableError::DamagedHeader`], [`DurableError::WrongFormat`],
    /// [`DurableError::WrongVersion`], [`DurableError::WrongOwner`] when the header is
    /// not `header`; [`DurableError::DamagedRecord`] for damage in the middle;
    /// [`DurableError::Io`].
    pub fn open_or_create(
        path: &Path,
        header: &Header,
    ) -> Result<(RecordLog<File>, Recovery), DurableError> {
        crate::replace::remove_leftover(path)?;
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let log = RecordLog::create_on(&mut RealDisk, path, header)?;
                return Ok((log, Recovery::default()));
            }
            Err(error) => return Err(DurableError::io("read", path)(error)),
        };
        let scanned = scan(path, &bytes, header)?;
        if let Some(torn) = scanned.torn_tail {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(DurableError::io("open to cut a torn tail", path))?;
            file.set_len(torn.offset)
                .and_then(|()| file.sync_all())
                .map_err(DurableError::io("cut a torn tail from", path))?;
            warn!(file = %path.display(), offset = torn.offset, bytes_cut = torn.bytes_cut,
                records = scanned.records.len(),
                "cut the torn tail of a log: the last write before a crash, never synced nor acknowledged");
        }
        let end = scanned.end;
        let start = scanned.start;
        let file = RealDisk
            .open_append(path)
            .map_err(DurableError::io("open for appending", path))?;
        let log = RecordLog {
            path: path.to_path_buf(),
            file,
            end,
            start,
            frame: Vec::new(),
        };
        Ok((
            log,
            Recovery {
                records: scanned.records,
                torn_tail: scanned.torn_tail,
            },
        ))
    }

    /// Writes the whole log at `path` at once, `header` then each of `records` framed
    /// ([`encode`]), replacing any file there through the atomic replace, and opens it
    /// for appending after them: for a log compacted into fewer records. With `synced`
    /// false the replace skips its syncs ([`replace_unsynced`](crate::replace::replace_unsynced):
    /// for a format its owner configured not to sync).
    ///
    /// # Errors
    /// As [`encode`] and [`replace`](crate::replace::replace); the file at `path` then
    /// holds its old content.
    pub fn rewrite<'a>(
        path: &Path,
        header: &Header,
        records: impl IntoIterator<Item = &'a [u8]>,
        synced: bool,
    ) -> Result<RecordLog<File>, DurableError> {
        let start = header.encode()?.len() as u64;
        let bytes = encode(header, records)?;
        if synced {
            crate::replace::replace(path, &bytes)?;
        } else {
            crate::replace::replace_unsynced(path, &bytes)?;
        }
        let file = RealDisk
            .open_append(path)
            .map_err(DurableError::io("open for appending", path))?;
        Ok(RecordLog {
            path: path.to_path_buf(),
            file,
            end: bytes.len() as u64,
            start,
            frame: Vec::new(),
        })
    }

    /// Cuts the log back to the end of its last whole record, after an
    /// [`append`](RecordLog::append) that failed and may have left part of its frame
    /// (a full disk): the next append then follows the last whole record. Not synced: a
    /// part left by a crash instead is a torn tail, cut at the next open.
    ///
    /// # Errors
    /// [`DurableError::Io`]: the part is still there; call this again before the next
    /// append, or reopen the log.
    pub fn cut_back(&mut self) -> Result<(), DurableError> {
        self.file.set_len(self.end).map_err(DurableError::io(
            "cut back a failed append from",
            &self.path,
        ))
    }
}

impl<F: DiskFile> RecordLog<F> {
    /// Creates the log at `path` on `disk` holding only `header` (atomically: through
    /// [`replace`](crate::replace), so a crash leaves no log or an empty one, never a
    /// torn header), replacing any file there.
    ///
    /// # Errors
    /// [`DurableError::Io`]; [`DurableError::TooLarge`] for a header too large.
    pub fn create_on<D: Disk<File = F>>(
        disk: &mut D,
        path: &Path,
        header: &Header,
    ) -> Result<RecordLog<F>, DurableError> {
        let bytes = header.encode()?;
        crate::replace::replace_on(disk, path, &bytes)?;
        let file = disk
            .open_append(path)
            .map_err(DurableError::io("open for appending", path))?;
        Ok(RecordLog {
            path: path.to_path_buf(),
            file,
            end: bytes.len() as u64,
            start: bytes.len() as u64,
            frame: Vec::new(),
        })
    }

    /// Appends `record` (one write; not durable until [`RecordLog::sync`]).
    ///
    /// # Errors
    /// [`DurableError::TooLarge`] over [`MAX_RECORD`]; [`DurableError::Io`] (the log
    /// may then hold part of the record: [`RecordLog::cut_back`], or reopen it to cut
    /// it).
    pub fn append(&mut self, record: &[u8]) -> Result<(), DurableError> {
        if record.len() > MAX_RECORD {
            return Err(DurableError::TooLarge {
                what: "a record",
                len: record.len(),
                max: MAX_RECORD,
                context: "log",
            });
        }
        self.frame.clear();
        push_frame(&mut self.frame, record);
        self.file
            .write_all(&self.frame)
            .map_err(DurableError::io("append to", &self.path))?;
        self.end += self.frame.len() as u64;
        Ok(())
    }

    /// Makes every record appended so far durable: they are committed when this
    /// returns.
    ///
    /// # Errors
    /// [`DurableError::Io`]: nothing since the last sync may be counted durable.
    pub fn sync(&mut self) -> Result<(), DurableError> {
        self.file
            .sync()
            .map_err(DurableError::io("sync", &self.path))
    }

    /// The log's length in bytes, what was appended included.
    pub fn len(&self) -> u64 {
        self.end
    }

    /// Whether the log holds no record (only its header).
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Appends `record`'s frame (length, checksum, payload) to `buffer`.
fn push_frame(buffer: &mut Vec<u8>, record: &[u8]) {
    let start = begin_frame(buffer);
    buffer.extend_from_slice(record);
    seal_frame(buffer, start.0);
}

/// Where a frame being built at the end of a caller's buffer starts ([`begin_frame`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameStart(usize);

/// Starts a record's frame at the end of `buffer`, for a writer that frames many
/// records into one buffer of its own and writes them with one `write` (a group
/// commit): the caller appends the payload to `buffer` (a serializer writes it there
/// directly), then [`finish_frame`] fills in the length and the checksum. Nothing is
/// allocated per record and the payload is never copied. The bytes are those
/// [`RecordLog::append`] writes, read back by [`RecordLog::open_or_create`], [`read`]
/// and [`read_frame`].
#[inline]
pub fn begin_frame(buffer: &mut Vec<u8>) -> FrameStart {
    let start = buffer.len();
    buffer.extend_from_slice(&[0u8; FRAME_HEADER]);
    FrameStart(start)
}

/// Ends the frame [`begin_frame`] started at `start`: everything appended to `buffer`
/// since is its payload. Returns the frame's length (its 8 bytes of length and
/// checksum included).
///
/// # Errors
/// [`DurableError::TooLarge`] when the payload is over [`MAX_RECORD`]: `buffer` is then
/// cut back to where the frame started.
#[inline]
pub fn finish_frame(buffer: &mut Vec<u8>, start: FrameStart) -> Result<usize, DurableError> {
    let payload_len = buffer.len() - start.0 - FRAME_HEADER;
    if payload_len > MAX_RECORD {
        buffer.truncate(start.0);
        return Err(DurableError::TooLarge {
            what: "a record",
            len: payload_len,
            max: MAX_RECORD,
            context: "log",
        });
    }
    seal_frame(buffer, start.0);
    Ok(FRAME_HEADER + payload_len)
}

/// A new CRC-32 hasher, cloned from one made once: [`crc32fast::Hasher::new`] asks the
/// CPU for its features each time, a cost the group-committing writers pay per record.
#[inline]
fn hasher() -> crc32fast::Hasher {
    static PROTOTYPE: std::sync::OnceLock<crc32fast::Hasher> = std::sync::OnceLock::new();
    PROTOTYPE.get_or_init(crc32fast::Hasher::new).clone()
}

/// Fills in the length and checksum of the frame at `start`, whose payload runs to the
/// end of `buffer` (at most [`MAX_RECORD`] bytes).
#[inline]
fn seal_frame(buffer: &mut [u8], start: usize) {
    let len = ((buffer.len() - start - FRAME_HEADER) as u32).to_le_bytes();
    // The length is put in the checksum's place first, just before the payload, so the
    // checksum (of the length, then the payload) is taken over one run of bytes.
    buffer[start + 4..start + FRAME_HEADER].copy_from_slice(&len);
    let mut crc = hasher();
    crc.update(&buffer[start + 4..]);
    buffer[start..start + 4].copy_from_slice(&len);
    buffer[start + 4..start + FRAME_HEADER].copy_from_slice(&crc.finalize().to_le_bytes());
}

/// A whole frame whose checksum holds, borrowed from a log's bytes ([`read_frame`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameView<'a> {
    /// The record's payload.
    pub payload: &'a [u8],
    /// Where the next frame starts.
    pub next: usize,
}

/// Why there is no whole frame at an offset ([`read_frame`]). Which of the two it is
/// does not decide between a torn tail and damage: that is decided by what follows
/// (see the module's documentation); a caller with a stricter rule of its own (a bad
/// frame that is not all zeros is never a torn tail, say) can tell them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameFault {
    /// The frame runs past the end of the bytes.
    CutShort(&'static str),
    /// The frame is all there but wrong: a length over [`MAX_RECORD`], or a checksum
    /// that does not match.
    Bad(&'static str),
}

impl FrameFault {
    /// What is wrong, in words.
    pub fn reason(&self) -> &'static str {
        match self {
            FrameFault::CutShort(reason) | FrameFault::Bad(reason) => reason,
        }
    }
}

/// Reads the frame at `at` of `bytes` (a log's content, its header included, or any
/// run of frames), borrowing its payload: for a reader that keeps its own recovery
/// rules on top of the layer's frames (the outbox's watermark and segments), or that
/// must not copy every record.
///
/// # Errors
/// [`FrameFault`] when no whole, intact frame starts at `at`.
pub fn read_frame(bytes: &[u8], at: usize) -> Result<FrameView<'_>, FrameFault> {
    let rest = bytes.get(at..).unwrap_or_default();
    if rest.len() < FRAME_HEADER {
        return Err(FrameFault::CutShort("a record header cut short"));
    }
    let len_bytes = [rest[0], rest[1], rest[2], rest[3]];
    let len = u32::from_le_bytes(len_bytes) as usize;
    if len > MAX_RECORD {
        return Err(FrameFault::Bad("a record length over the limit"));
    }
    if len > rest.len() - FRAME_HEADER {
        return Err(FrameFault::CutShort(
            "a record longer than the rest of the file",
        ));
    }
    let payload = &rest[FRAME_HEADER..FRAME_HEADER + len];
    let mut crc = crc32fast::Hasher::new();
    crc.update(&len_bytes);
    crc.update(payload);
    if crc.finalize() != u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]) {
        return Err(FrameFault::Bad("a checksum that does not match"));
    }
    Ok(FrameView {
        payload,
        next: at + FRAME_HEADER + len,
    })
}

/// The bytes of a whole log: `header`, then each of `records` framed. For a log
/// rewritten at once through [`replace`](crate::replace) (what stays of it after some
/// records were taken out), read back by [`read`] and [`RecordLog::open_or_create`].
///
/// # Errors
/// [`DurableError::TooLarge`] for a header too large or a record over [`MAX_RECORD`].
pub fn encode<'a>(
    header: &Header,
    records: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<u8>, DurableError> {
    let mut bytes = header.encode()?;
    for record in records {
        if record.len() > MAX_RECORD {
            return Err(DurableError::TooLarge {
                what: "a record",
                len: record.len(),
                max: MAX_RECORD,
                context: "log",
            });
        }
        push_frame(&mut bytes, record);
    }
    Ok(bytes)
}

/// Reads the log at `path` without changing it: its records, and the torn tail an open
/// would cut.
///
/// # Errors
/// As [`RecordLog::open_or_create`]; a missing file is [`DurableError::Io`]
/// (`NotFound`).
pub fn read(path: &Path, header: &Header) -> Result<Recovery, DurableError> {
    let bytes = std::fs::read(path).map_err(DurableError::io("read", path))?;
    let scanned = scan(path, &bytes, header)?;
    Ok(Recovery {
        records: scanned.records,
        torn_tail: scanned.torn_tail,
    })
}

/// A log read through.
struct Scanned {
    /// Where the first record starts.
    start: u64,
    records: Vec<Vec<u8>>,
    /// Where the valid records end.
    end: u64,
    torn_tail: Option<TornTail>,
}

/// Reads `bytes` (the content of `path`): header, records, and what follows the last
/// valid one.
fn scan(path: &Path, bytes: &[u8], header: &Header) -> Result<Scanned, DurableError> {
    let start = header.verify(path, bytes)?;
    let mut at = start;
    let mut records = Vec::new();
    while at < bytes.len() {
        match frame_at(bytes, at) {
            Ok(end) => {
                records.push(bytes[at + FRAME_HEADER..end].to_vec());
                at = end;
            }
            Err(reason) => {
                if (at + 1..bytes.len()).any(|later| frame_at(bytes, later).is_ok()) {
                    return Err(DurableError::DamagedRecord {
                        path: path.to_path_buf(),
                        offset: at as u64,
                        reason,
                    });
                }
                return Ok(Scanned {
                    start: start as u64,
                    records,
                    end: at as u64,
                    torn_tail: Some(TornTail {
                        offset: at as u64,
                        bytes_cut: (bytes.len() - at) as u64,
                    }),
                });
            }
        }
    }
    Ok(Scanned {
        start: start as u64,
        records,
        end: at as u64,
        torn_tail: None,
    })
}

/// The end of the valid frame at `at`, or what is wrong with it.
fn frame_at(bytes: &[u8], at: usize) -> Result<usize, &'static str> {
    read_frame(bytes, at)
        .map(|frame| frame.next)
        .map_err(|fault| fault.reason())
}
