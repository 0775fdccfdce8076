//! [`IpcPublication`]: a shared-memory ring (a memory-mapped file) with one writer and
//! the archiver reading it from another process.
//!
//! Ring file layout (little-endian, 256-byte header, then `capacity` data bytes):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `MGARIPC1` |
//! | 8 | 4 | version (1) |
//! | 12 | 4 | stream id |
//! | 16 | 4 | session id |
//! | 24 | 8 | capacity (a power of two) |
//! | 64 | 8 | write position (atomic; stream bytes published) |
//! | 128 | 8 | reader position (atomic; stream bytes the archiver recorded) |
//! | 192 | 8 | closed flag (atomic; 1 once the publication is closed) |
//! | 256 | capacity | the stream bytes, at `position % capacity`, frames wrapping |
//!
//! Frames are `[len: u32][payload]`, contiguous in stream positions (a frame may wrap
//! around the end of the data area), so positions are the same as a UDP publication's.
//! The writer never overwrites bytes the reader has not recorded: a full ring answers
//! [`Offer::BackPressured`], nothing is dropped.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::MmapRaw;

use crate::error::{ArchiveError, Result};
use crate::{Offer, Publication};

const MAGIC: &[u8; 8] = b"MGARIPC1";
const VERSION: u32 = 1;
const HEADER_LEN: usize = 256;
const WRITE_POSITION: usize = 64;
const READER_POSITION: usize = 128;
const CLOSED: usize = 192;
/// The file name extension of a ring.
pub(crate) const RING_EXTENSION: &str = "ipc";
/// The default ring capacity: 16 MiB.
pub const DEFAULT_RING_CAPACITY: usize = 16 << 20;

/// A mapped ring file.
#[derive(Debug)]
pub(crate) struct Ring {
    map: MmapRaw,
    path: PathBuf,
    stream: u32,
    session: u32,
    capacity: u64,
}

impl Ring {
    fn atomic(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset % 8 == 0 && offset + 8 <= HEADER_LEN);
        // SAFETY: the mapping is at least HEADER_LEN bytes long (checked at open and
        // create), page-aligned, so `offset` (a multiple of 8 below HEADER_LEN) is an
        // aligned, in-bounds u64 that lives as long as `self.map`. The field is only
        // ever accessed atomically, by this process and the other one.
        unsafe { &*(self.map.as_mut_ptr().add(offset) as *const AtomicU64) }
    }

    fn data(&self) -> *mut u8 {
        // SAFETY: HEADER_LEN is within the mapping (checked at open and create).
        unsafe { self.map.as_mut_ptr().add(HEADER_LEN) }
    }

    fn copy_in(&self, position: u64, bytes: &[u8]) {
        let capacity = self.capacity as usize;
        let at = (position & (self.capacity - 1)) as usize;
        let first = bytes.len().min(capacity - at);
        // SAFETY: `at + first <= capacity` and `bytes.len() - first <= capacity`, so
        // both copies stay within the data area. The writer only writes bytes between
        // the reader position + capacity and the write position, which the reader does
        // not read until the write position is published (Release/Acquire).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.data().add(at), first);
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr().add(first),
                self.data(),
                bytes.len() - first,
            );
        }
    }

    fn copy_out(&self, position: u64, out: &mut [u8]) {
        let capacity = self.capacity as usize;
        let at = (position & (self.capacity - 1)) as usize;
        let first = out.len().min(capacity - at);
        // SAFETY: as in `copy_in`, both copies stay within the data area; the bytes
        // were published (the write position was loaded with Acquire past them) and
        // the writer does not overwrite them before the reader position passes them.
        unsafe {
            std::ptr::copy_nonoverlapping(self.data().add(at), out.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(
                self.data(),
                out.as_mut_ptr().add(first),
                out.len() - first,
            );
        }
    }

    /// Opens an existing ring (the archiver's side).
    pub(crate) fn open(path: &Path) -> Result<Ring> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(ArchiveError::io("open the IPC ring", path))?;
        let len = file
            .metadata()
            .map_err(ArchiveError::io("read the size of the IPC ring", path))?
            .len();
        let bad = |detail: String| ArchiveError::BadFormat {
            path: path.to_path_buf(),
            what: "mongoose-archive IPC ring",
            detail,
        };
        if len < HEADER_LEN as u64 {
            return Err(bad(format!("{len} bytes, shorter than the header")));
        }
        let map = MmapRaw::map_raw(&file).map_err(ArchiveError::io("map the IPC ring", path))?;
        let mut header = [0u8; 32];
        // SAFETY: the mapping is at least HEADER_LEN >= 32 bytes long; the first 32
        // bytes are written once, before the file is renamed into place.
        unsafe { std::ptr::copy_nonoverlapping(map.as_ptr(), header.as_mut_ptr(), 32) };
        if &header[0..8] != MAGIC {
            return Err(bad("wrong magic".into()));
        }
        let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(bad(format!("version {version}, expected {VERSION}")));
        }
        let stream = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
        let session = u32::from_le_bytes(header[16..20].try_into().expect("4 bytes"));
        let capacity = u64::from_le_bytes(header[24..32].try_into().expect("8 bytes"));
        if !capacity.is_power_of_two() || len != HEADER_LEN as u64 + capacity {
            return Err(bad(format!(
                "capacity {capacity} does not match the file size {len}"
            )));
        }
        Ok(Ring {
            map,
            path: path.to_path_buf(),
            stream,
            session,
            capacity,
        })
    }

    pub(crate) fn stream(&self) -> u32 {
        self.stream
    }

    pub(crate) fn session(&self) -> u32 {
        self.session
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    pub(crate) fn write_position(&self) -> u64 {
        self.atomic(WRITE_POSITION).load(Ordering::Acquire)
    }

    pub(crate) fn reader_position(&self) -> u64 {
        self.atomic(READER_POSITION).load(Ordering::Acquire)
    }

    /// Lets the writer reuse the bytes before `position`.
    pub(crate) fn set_reader_position(&self, position: u64) {
        self.atomic(READER_POSITION)
            .store(position, Ordering::Release);
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.atomic(CLOSED).load(Ordering::Acquire) == 1
    }

    /// Reads the frames from `*position` up to the write position (at most `limit`
    /// frames), calling `handler(frame_start, payload)` for each and advancing
    /// `*position`. The caller sets the reader position once it recorded them.
    pub(crate) fn read_frames(
        &self,
        position: &mut u64,
        limit: usize,
        scratch: &mut Vec<u8>,
        mut handler: impl FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<usize> {
        let end = self.write_position();
        let mut frames = 0;
        while *position < end && frames < limit {
            let mut len = [0u8; 4];
            self.copy_out(*position, &mut len);
            let len = u32::from_le_bytes(len) as usize;
            if *position + 4 + len as u64 > end || len as u64 + 4 > self.capacity {
                return Err(ArchiveError::BadFormat {
                    path: self.path.clone(),
                    what: "mongoose-archive IPC ring",
                    detail: format!(
                        "a frame of {len} bytes at position {} runs past the written end {end}",
                        *position
                    ),
                });
            }
            scratch.resize(len, 0);
            self.copy_out(*position + 4, scratch);
            handler(*position, scratch)?;
            *position += 4 + len as u64;
            frames += 1;
        }
        Ok(frames)
    }
}

/// A publication over a shared-memory ring, for a publisher and an archiver on the
/// same machine.
///
/// [`IpcPublication::create`] makes the ring file `<dir>/<stream>-<session>.ipc`; an
/// archiver whose [`crate::ArchiverConfig::ipc_dir`] is `dir` finds it, records it,
/// and removes it once the publication is closed and fully recorded. Positions are the
/// same as a [`crate::UdpPublication`]'s: the byte position of the frame in the stream.
#[derive(Debug)]
pub struct IpcPublication {
    ring: Ring,
    position: u64,
    closed: bool,
}

impl IpcPublication {
    /// Creates the ring file with [`DEFAULT_RING_CAPACITY`].
    pub fn create(dir: &Path, stream: u32, session: u32) -> Result<IpcPublication> {
        IpcPublication::create_with_capacity(dir, stream, session, DEFAULT_RING_CAPACITY)
    }

    /// The path of the ring of `(stream, session)` in `dir`.
    pub fn ring_path(dir: &Path, stream: u32, session: u32) -> PathBuf {
        dir.join(format!("{stream}-{session}.{RING_EXTENSION}"))
    }

    /// Creates the ring file with a capacity (a power of two, at least 4 KiB), and `dir`
    /// if it is missing. Fails if a ring of the same `(stream, session)` is still there
    /// (not yet recorded).
    pub fn create_with_capacity(
        dir: &Path,
        stream: u32,
        session: u32,
        capacity: usize,
    ) -> Result<IpcPublication> {
        if !capacity.is_power_of_two() || capacity < 4096 {
            return Err(ArchiveError::Config(format!(
                "the ring capacity {capacity} must be a power of two of at least 4096"
            )));
        }
        let path = IpcPublication::ring_path(dir, stream, session);
        if path.exists() {
            return Err(ArchiveError::Config(format!(
                "the ring {} exists: the archiver has not recorded that publication yet; \
                 use another session id or let the archiver finish",
                path.display()
            )));
        }
        // the publisher may start before the archiver that would create the directory
        fs::create_dir_all(dir).map_err(ArchiveError::io("create the IPC directory", dir))?;
        let temporary = dir.join(format!(".{stream}-{session}.{RING_EXTENSION}.new"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temporary)
            .map_err(ArchiveError::io("create the IPC ring", &temporary))?;
        file.set_len((HEADER_LEN + capacity) as u64)
            .map_err(ArchiveError::io("size the IPC ring", &temporary))?;
        let map =
            MmapRaw::map_raw(&file).map_err(ArchiveError::io("map the IPC ring", &temporary))?;
        let mut header = [0u8; 32];
        header[0..8].copy_from_slice(MAGIC);
        header[8..12].copy_from_slice(&VERSION.to_le_bytes());
        header[12..16].copy_from_slice(&stream.to_le_bytes());
        header[16..20].copy_from_slice(&session.to_le_bytes());
        header[24..32].copy_from_slice(&(capacity as u64).to_le_bytes());
        // SAFETY: the mapping is HEADER_LEN + capacity bytes long and nobody else has
        // the file yet (it is renamed into place below).
        unsafe { std::ptr::copy_nonoverlapping(header.as_ptr(), map.as_mut_ptr(), 32) };
        fs::rename(&temporary, &path).map_err(ArchiveError::io("publish the IPC ring", &path))?;
        Ok(IpcPublication {
            ring: Ring {
                map,
                path,
                stream,
                session,
                capacity: capacity as u64,
            },
            position: 0,
            closed: false,
        })
    }

    /// The ring file.
    pub fn path(&self) -> &Path {
        self.ring.path()
    }

    /// The position the archiver has recorded.
    pub fn archiver_position(&self) -> u64 {
        self.ring.reader_position()
    }
}

impl Publication for IpcPublication {
    fn offer(&mut self, message: &[u8]) -> Result<Offer> {
        let frame = 4 + message.len() as u64;
        if frame > self.ring.capacity {
            return Err(ArchiveError::MessageTooLarge {
                len: message.len(),
                max: self.ring.capacity as usize - 4,
            });
        }
        if self.closed {
            return Err(ArchiveError::Config(
                "offer on a closed IPC publication".into(),
            ));
        }
        if self.position + frame - self.ring.reader_position() > self.ring.capacity {
            return Ok(Offer::BackPressured);
        }
        self.ring
            .copy_in(self.position, &(message.len() as u32).to_le_bytes());
        self.ring.copy_in(self.position + 4, message);
        self.position += frame;
        self.ring
            .atomic(WRITE_POSITION)
            .store(self.position, Ordering::Release);
        Ok(Offer::Accepted {
            position: self.position,
        })
    }

    fn position(&self) -> u64 {
        self.position
    }

    fn stream_id(&self) -> u32 {
        self.ring.stream
    }

    fn session_id(&self) -> u32 {
        self.ring.session
    }

    /// Marks the ring closed. Returns whether the archiver has already recorded
    /// everything (it removes the ring file once it has).
    fn close(&mut self) -> Result<bool> {
        self.closed = true;
        self.ring.atomic(CLOSED).store(1, Ordering::Release);
        Ok(self.ring.reader_position() == self.position)
    }
}
