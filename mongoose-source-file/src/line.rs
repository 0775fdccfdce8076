//! [`Line`], the file feed's item: a line that borrows a shared read chunk, so
//! publishing it allocates nothing, and the read buffers it borrows from.
//!
//! The source reads into a [`BytesMut`]; each read's bytes (after the partial line
//! carried over from the read before) are split off and frozen into a [`Chunk`], and
//! every line of the chunk is an `Arc` of the chunk and a range: one atomic increment
//! when the line is published, one decrement when the consumer drops it. Once every
//! line of a chunk was dropped, the chunk and its memory are reused for a later read
//! (a few buffers and chunks are kept for that), so a steady read allocates nothing.

use std::borrow::Cow;
use std::fmt;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

/// A line read from a file, without its terminator.
///
/// It shares the read chunk it was cut from (an `Arc` and a range: cloning it or
/// publishing it allocates nothing). Its bytes are kept as they were on disk: a line
/// that is not UTF-8 is never lost, [`Line::as_bytes`] and [`Line::to_str`] are
/// lossless, [`Line::text`] replaces invalid bytes with U+FFFD.
///
/// A line kept beyond its handler (stored in a processor's state) keeps its whole
/// read chunk in memory (up to the source's read buffer, 256 KiB by default): store a
/// copy instead (`String::from(line.clone())`, `line.as_bytes().to_vec()`).
///
/// ```
/// use mongoose_source_file::Line;
///
/// let line = Line::from("café");
/// assert_eq!(line, "café");
/// assert_eq!(line.to_str(), Ok("café"));
/// assert_eq!(line.as_bytes(), "café".as_bytes());
///
/// let latin1 = Line::new("in.txt", &b"caf\xe9"[..]);
/// assert!(latin1.to_str().is_err()); // not UTF-8, and not lost:
/// assert_eq!(latin1.as_bytes(), b"caf\xe9");
/// assert_eq!(latin1.text(), "caf\u{fffd}");
/// assert_eq!(latin1.path(), std::path::Path::new("in.txt"));
/// ```
#[derive(Clone)]
pub struct Line {
    chunk: Arc<Chunk>,
    start: usize,
    end: usize,
}

/// A frozen read of an input file: the bytes, and the file they were read from.
#[derive(Debug)]
pub(crate) struct Chunk {
    path: Arc<Path>,
    bytes: Bytes,
}

impl Chunk {
    /// The chunk's bytes.
    #[inline]
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// An empty chunk of `path` (an input just opened, nothing read yet).
    pub(crate) fn empty(path: Arc<Path>) -> Arc<Chunk> {
        Arc::new(Chunk {
            path,
            bytes: Bytes::new(),
        })
    }
}

impl Line {
    /// A line of `path` holding `bytes` (its own chunk: this allocates). For lines
    /// that were not read by a source: tests, replays, conversions.
    pub fn new(path: impl AsRef<Path>, bytes: impl Into<Bytes>) -> Line {
        let bytes = bytes.into();
        let end = bytes.len();
        Line {
            chunk: Arc::new(Chunk {
                path: Arc::from(path.as_ref()),
                bytes,
            }),
            start: 0,
            end,
        }
    }

    /// The line `chunk[start..end]`.
    #[inline]
    pub(crate) fn of_chunk(chunk: &Arc<Chunk>, start: usize, end: usize) -> Line {
        debug_assert!(start <= end && end <= chunk.bytes.len());
        Line {
            chunk: Arc::clone(chunk),
            start,
            end,
        }
    }

    /// The line's bytes, without its terminator, as they were in the file.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.chunk.bytes[self.start..self.end]
    }

    /// The line as text when it is UTF-8; the error says where it is not (the bytes
    /// stay available with [`Line::as_bytes`]).
    #[inline]
    pub fn to_str(&self) -> Result<&str, std::str::Utf8Error> {
        std::str::from_utf8(self.as_bytes())
    }

    /// The line as text, with U+FFFD for bytes that are not UTF-8 (borrowed, without
    /// an allocation, when the line is UTF-8).
    #[inline]
    pub fn text(&self) -> Cow<'_, str> {
        match self.to_str() {
            Ok(text) => Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(self.as_bytes()),
        }
    }

    /// The input file the line was read from (for a rotated file finished after a
    /// restart, the rotated file's path). Empty for a line made from a string.
    pub fn path(&self) -> &Path {
        &self.chunk.path
    }

    /// The line's length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// True for an empty line.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

impl fmt::Display for Line {
    /// The text, with U+FFFD for bytes that are not UTF-8.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.text() {
            Cow::Borrowed(text) => f.write_str(text),
            Cow::Owned(text) => f.write_str(&text),
        }
    }
}

impl fmt::Debug for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_str() {
            Ok(text) => fmt::Debug::fmt(text, f),
            // the bytes as they are, escaped
            Err(_) => write!(f, "b\"{}\"", self.as_bytes().escape_ascii()),
        }
    }
}

impl PartialEq for Line {
    /// Lines are equal when their bytes are (wherever they were read from).
    fn eq(&self, other: &Line) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Line {}

impl std::hash::Hash for Line {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl PartialEq<str> for Line {
    fn eq(&self, other: &str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<&str> for Line {
    fn eq(&self, other: &&str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<String> for Line {
    fn eq(&self, other: &String) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<Line> for str {
    fn eq(&self, other: &Line) -> bool {
        other == self
    }
}

impl PartialEq<Line> for &str {
    fn eq(&self, other: &Line) -> bool {
        other == *self
    }
}

impl AsRef<[u8]> for Line {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl From<Line> for String {
    /// The text, with U+FFFD for bytes that are not UTF-8 (allocates).
    fn from(line: Line) -> String {
        line.text().into_owned()
    }
}

impl From<&str> for Line {
    /// A line holding `text`, of no file (its path is empty). Allocates.
    fn from(text: &str) -> Line {
        Line::new("", Bytes::copy_from_slice(text.as_bytes()))
    }
}

impl From<String> for Line {
    /// A line holding `text`, of no file (its path is empty).
    fn from(text: String) -> Line {
        Line::new("", text)
    }
}

/// Read buffers kept for reuse at most (each holds the source's read buffer size).
const SPARE_BUFFERS: usize = 4;

/// Chunks kept for reuse at most.
const SPARE_CHUNKS: usize = 16;

/// The read after the end of the file was reached: small, so polling a file that
/// does not grow zeroes 4 KiB a cycle, not a whole read buffer. Each read that fills
/// what it asked for doubles the next, up to the read buffer's size.
const READ_AFTER_END: usize = 4 * 1024;

/// The source's read side: the buffer the next read goes into, and the buffers and
/// chunks of earlier reads, reused once every line cut from them was dropped.
#[derive(Debug)]
pub(crate) struct ReadBuffers {
    /// Empty, with the capacity the next read writes into.
    buf: BytesMut,
    spare_buffers: Vec<BytesMut>,
    spare_chunks: Vec<Arc<Chunk>>,
    /// The read size: the configured buffer size.
    read_bytes: usize,
    /// The next read's size: [`READ_AFTER_END`] after the end of the file was reached,
    /// doubling up to `read_bytes` while reads fill what they ask for.
    next_read: usize,
    /// `buf` was allocated (the initial one has no memory to keep).
    allocated: bool,
}

impl ReadBuffers {
    /// Read buffers reading `read_bytes` at a time (at least 64).
    pub(crate) fn new(read_bytes: usize) -> ReadBuffers {
        ReadBuffers {
            buf: BytesMut::new(),
            spare_buffers: Vec::new(),
            spare_chunks: Vec::new(),
            read_bytes: read_bytes.max(64),
            next_read: read_bytes.max(64),
            allocated: false,
        }
    }

    /// Reads from `file` at `offset` into a new chunk of `path` that begins with
    /// `carried` (the partial line of the chunk before). Returns the chunk and the
    /// bytes read, or `None` when nothing was read (the end of the file: `carried` is
    /// not copied).
    pub(crate) fn read(
        &mut self,
        file: &File,
        offset: u64,
        path: &Arc<Path>,
        carried: &[u8],
    ) -> io::Result<Option<(Arc<Chunk>, usize)>> {
        // a line longer than the read size: read as much again as it has, so its
        // carried bytes are copied a logarithmic number of times
        let wanted = self.next_read.max(carried.len());
        self.make_room(carried.len() + wanted.div_ceil(2));
        let room = (self.buf.capacity() - carried.len()).min(wanted);
        self.buf.extend_from_slice(carried);
        let read = match read_into_spare(file, &mut self.buf, room, offset) {
            Ok(read) => read,
            Err(error) => {
                self.buf.clear();
                return Err(error);
            }
        };
        self.next_read = if read < room {
            // the end of the file (for now)
            READ_AFTER_END.min(self.read_bytes)
        } else {
            (self.next_read * 2).min(self.read_bytes)
        };
        if read == 0 {
            self.buf.clear();
            return Ok(None);
        }
        let bytes = self.buf.split().freeze();
        Ok(Some((self.chunk(path, bytes), read)))
    }

    /// Gives back a chunk the source no longer reads from; it is reused once the
    /// lines cut from it are dropped.
    pub(crate) fn retire(&mut self, chunk: Arc<Chunk>) {
        if self.spare_chunks.len() < SPARE_CHUNKS {
            self.spare_chunks.push(chunk);
        }
    }

    /// A chunk of `bytes`: a spare one whose lines were all dropped, or a new one.
    fn chunk(&mut self, path: &Arc<Path>, bytes: Bytes) -> Arc<Chunk> {
        for spare in 0..self.spare_chunks.len() {
            if let Some(chunk) = Arc::get_mut(&mut self.spare_chunks[spare]) {
                chunk.bytes = bytes;
                if !Arc::ptr_eq(&chunk.path, path) {
                    chunk.path = Arc::clone(path);
                }
                return self.spare_chunks.swap_remove(spare);
            }
        }
        Arc::new(Chunk {
            path: Arc::clone(path),
            bytes,
        })
    }

    /// Makes `self.buf` (empty) able to take `needed` bytes: its own memory again if
    /// every chunk cut from it was dropped, a spare buffer's, or a new allocation.
    fn make_room(&mut self, needed: usize) {
        self.buf.clear();
        if self.buf.capacity() >= needed {
            return;
        }
        // release the bytes of the chunks nobody reads any more, so their buffers
        // can be reclaimed
        for chunk in self.spare_chunks.iter_mut() {
            if let Some(chunk) = Arc::get_mut(chunk) {
                chunk.bytes = Bytes::new();
            }
        }
        let full = needed.max(self.read_bytes);
        if self.buf.try_reclaim(full) {
            return;
        }
        for spare in 0..self.spare_buffers.len() {
            if self.spare_buffers[spare].try_reclaim(full) {
                let reclaimed = self.spare_buffers.swap_remove(spare);
                let exhausted = std::mem::replace(&mut self.buf, reclaimed);
                self.keep_spare(exhausted);
                return;
            }
        }
        let exhausted = std::mem::replace(&mut self.buf, BytesMut::with_capacity(full));
        self.keep_spare(exhausted);
    }

    fn keep_spare(&mut self, buffer: BytesMut) {
        if !std::mem::replace(&mut self.allocated, true) {
            return; // the first buffer replaces the initial one, which has no memory
        }
        if self.spare_buffers.len() >= SPARE_BUFFERS {
            // the oldest goes: its memory is freed when its last line is dropped
            self.spare_buffers.remove(0);
        }
        self.spare_buffers.push(buffer);
    }
}

/// Reads from `file` at `offset` into the first `room` bytes of `buf`'s spare
/// capacity (which holds them), appending what was read; returns its length.
///
/// Without zeroing the spare capacity first: a `pread` into it, then the length set to
/// what the kernel wrote. Zeroing it cost a `memset` of every read (and of every poll
/// of a file that does not grow).
#[cfg(unix)]
#[allow(unsafe_code)] // a read into uninitialised memory, the zero-copy read path
fn read_into_spare(file: &File, buf: &mut BytesMut, room: usize, offset: u64) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    let offset = libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a file offset past i64"))?;
    let spare = buf.spare_capacity_mut();
    let room = room.min(spare.len());
    let target = spare.as_mut_ptr().cast::<libc::c_void>();
    // SAFETY: `target` points to `room` bytes of `buf`'s spare capacity, valid for
    // writes and not aliased while the call runs (`buf` is borrowed mutably); pread
    // writes at most `room` bytes there and reads none of them. The descriptor is
    // `file`'s, open for the duration of the call.
    let read = unsafe { libc::pread(file.as_raw_fd(), target, room, offset) };
    if read < 0 {
        return Err(io::Error::last_os_error());
    }
    let read = read as usize;
    debug_assert!(read <= room);
    // SAFETY: pread initialised the first `read` (<= `room` <= spare capacity) bytes
    // after the buffer's length.
    unsafe { buf.set_len(buf.len() + read) };
    Ok(read)
}

/// Reads from `file` at `offset` into `room` zeroed bytes appended to `buf`, keeping
/// what was read; returns its length.
#[cfg(not(unix))]
fn read_into_spare(file: &File, buf: &mut BytesMut, room: usize, offset: u64) -> io::Result<usize> {
    let start = buf.len();
    buf.resize(start + room, 0);
    let read = crate::positional::read_at(file, &mut buf[start..], offset);
    buf.truncate(start + *read.as_ref().unwrap_or(&0));
    read
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_compares_displays_and_converts_by_its_bytes() {
        let line = Line::new("a.log", &b"x,1"[..]);
        assert_eq!(line, "x,1");
        assert_eq!("x,1", line);
        assert_eq!(line.to_string(), "x,1");
        assert_eq!(format!("{line:?}"), "\"x,1\"");
        assert_eq!(String::from(line.clone()), "x,1");
        assert_eq!(line.path(), Path::new("a.log"));
        let bad = Line::new("a.log", &b"\xff"[..]);
        assert_eq!(format!("{bad:?}"), "b\"\\xff\"");
        assert_eq!(bad.to_string(), "\u{fffd}");
    }

    #[test]
    fn lines_are_send_and_sync() {
        fn shared<T: Send + Sync + 'static>() {}
        shared::<Line>();
    }
}
