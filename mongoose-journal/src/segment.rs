//! One segment file: its header, its index slots and its excerpts, memory-mapped.
//!
//! Layout (little-endian):
//!
//! ```text
//! offset 0      header page (4 KiB), of which the first 64 bytes are used:
//!                 0  magic      b"MGJRNSEG"
//!                 8  version    u32 = 1
//!                12  header     u32 = 4096 (bytes before the index)
//!                16  number     u64  segment number (the file name)
//!                24  first      u64  index of the segment's first excerpt
//!                32  size       u64  the segment file's size
//!                40  slots      u64  index slots
//!                48  created    u64  creation time, Unix nanoseconds
//!                56  reserved   u32 = 0
//!                60  crc        u32  CRC-32 of bytes 0..60
//! offset 4096   index: `slots` u32 slots, one per excerpt of the segment; slot k holds
//!               the file offset of excerpt `first + k`, 0 while it is not appended,
//!               u32::MAX (END) when excerpt `first + k` is in the next segment
//! data start    (4096 + slots * 4, rounded up to 4 KiB) excerpts, 8-byte aligned:
//!                 0  len        u32  payload length
//!                 4  crc        u32  CRC-32 of the payload, seeded with the excerpt's
//!                                    index (low 32 bits)
//!                 8  payload    `len` bytes, then zero padding to 8 bytes
//! ```
//!
//! The slot is the publication mark: the appender writes the payload and the excerpt
//! header, then stores the slot with `Release`; a reader loads the slot with `Acquire`,
//! so it never sees a slot before the bytes it points to. A reader also checks the
//! offset, the length and the checksum, so a torn or damaged excerpt (a crash, a
//! damaged disk, a truncated file) stops it instead of being read as data.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::Arc;

use memmap2::{MmapOptions, MmapRaw};

use crate::config::Geometry;
use crate::error::{JournalError, Result};

pub(crate) const PAGE_BYTES: usize = 4096;
pub(crate) const HEADER_BYTES: usize = 4096;
pub(crate) const HEADER_USED_BYTES: usize = 64;
pub(crate) const EXCERPT_HEADER_BYTES: usize = 8;
pub(crate) const SEGMENT_MAGIC: [u8; 8] = *b"MGJRNSEG";
pub(crate) const SEGMENT_VERSION: u32 = 1;
pub(crate) const SLOT_EMPTY: u32 = 0;
pub(crate) const SLOT_END: u32 = u32::MAX;
const SEGMENT_SUFFIX: &str = ".segment";
const TEMPORARY_SUFFIX: &str = ".segment.tmp";

/// The file name of segment `number` in `dir`.
pub(crate) fn segment_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:020}{SEGMENT_SUFFIX}"))
}

/// The segment numbers present in `dir`, ascending.
pub(crate) fn list_segments(dir: &Path) -> Result<Vec<u64>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(JournalError::io("cannot list the journal", dir, error)),
    };
    let mut numbers = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|error| JournalError::io("cannot list", dir, error))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(number) = name.strip_suffix(SEGMENT_SUFFIX) {
            if number.len() == 20 && number.bytes().all(|byte| byte.is_ascii_digit()) {
                if let Ok(number) = number.parse() {
                    numbers.push(number);
                }
            }
        }
    }
    numbers.sort_unstable();
    Ok(numbers)
}

/// Removes segment files a crashed appender left half-created (never renamed into
/// place, so never seen by a reader).
pub(crate) fn remove_temporary_segments(dir: &Path) -> Result<()> {
    let entries = fs::read_dir(dir).map_err(|error| JournalError::io("cannot list", dir, error))?;
    for entry in entries {
        let entry = entry.map_err(|error| JournalError::io("cannot list", dir, error))?;
        if entry
            .file_name()
            .to_string_lossy()
            .ends_with(TEMPORARY_SUFFIX)
        {
            tracing::warn!(path = %entry.path().display(), "removing a half-created segment");
            fs::remove_file(entry.path())
                .map_err(|error| JournalError::io("cannot remove", entry.path(), error))?;
        }
    }
    Ok(())
}

/// Whether the segment at `path` is a torn creation: its header is all zeros (or the
/// file is shorter than a header and all zeros). A segment's header is synced before
/// its rename, but one an earlier release created was not: a power loss after a roll
/// and before the next sync could leave the segment's name with a zero header. None of
/// its excerpts was synced then (a sync writes the whole segment, header page
/// included), so it holds nothing acknowledged. Only the last segment can be one.
pub(crate) fn is_torn_creation(path: &Path) -> Result<bool> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(error) => return Err(JournalError::io("cannot open the segment", path, error)),
    };
    let mut bytes = [0u8; HEADER_USED_BYTES];
    let mut read = 0;
    while read < bytes.len() {
        match file.read_at(&mut bytes[read..], read as u64) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(JournalError::io("cannot read the segment", path, error)),
        }
    }
    Ok(bytes[..read].iter().all(|&byte| byte == 0))
}

/// Removes the last segments while they are torn creations ([`is_torn_creation`]),
/// with a WARN each, and syncs the directory: the appender then resumes after the
/// segment before them.
pub(crate) fn remove_torn_creations(dir: &Path) -> Result<()> {
    let mut removed = false;
    while let Some(&last) = list_segments(dir)?.last() {
        let path = segment_path(dir, last);
        if !is_torn_creation(&path)? {
            break;
        }
        let size = fs::metadata(&path)
            .map(|metadata| metadata.len())
            .unwrap_or(0);
        tracing::warn!(path = %path.display(), size,
            "removing the last segment: its header is zeros, a creation a power loss cut short (none of its excerpts was synced)");
        fs::remove_file(&path).map_err(|error| JournalError::io("cannot remove", &path, error))?;
        removed = true;
    }
    if removed {
        mongoose_durable::disk::sync_folder(dir)
            .map_err(|error| JournalError::io("cannot sync the directory", dir, error))?;
    }
    Ok(())
}

/// A segment's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    pub(crate) number: u64,
    pub(crate) first_index: u64,
    pub(crate) geometry: Geometry,
    pub(crate) created_unix_nanos: u64,
}

impl SegmentHeader {
    pub(crate) fn encode(&self) -> [u8; HEADER_USED_BYTES] {
        let mut bytes = [0u8; HEADER_USED_BYTES];
        bytes[0..8].copy_from_slice(&SEGMENT_MAGIC);
        bytes[8..12].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
        bytes[12..16].copy_from_slice(&(HEADER_BYTES as u32).to_le_bytes());
        bytes[16..24].copy_from_slice(&self.number.to_le_bytes());
        bytes[24..32].copy_from_slice(&self.first_index.to_le_bytes());
        bytes[32..40].copy_from_slice(&self.geometry.segment_bytes.to_le_bytes());
        bytes[40..48].copy_from_slice(&self.geometry.index_slots.to_le_bytes());
        bytes[48..56].copy_from_slice(&self.created_unix_nanos.to_le_bytes());
        let crc = crc32fast::hash(&bytes[0..60]);
        bytes[60..64].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    pub(crate) fn decode(bytes: &[u8; HEADER_USED_BYTES], path: &Path) -> Result<Self> {
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4"));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8"));
        if bytes[0..8] != SEGMENT_MAGIC {
            return Err(JournalError::bad_segment(path, "no segment magic"));
        }
        if u32_at(60) != crc32fast::hash(&bytes[0..60]) {
            return Err(JournalError::bad_segment(path, "header checksum mismatch"));
        }
        if u32_at(8) != SEGMENT_VERSION {
            return Err(JournalError::bad_segment(
                path,
                format!(
                    "format version {} (this build reads version {SEGMENT_VERSION}: \
                     use a matching mongoose-journal)",
                    u32_at(8)
                ),
            ));
        }
        let header = SegmentHeader {
            number: u64_at(16),
            first_index: u64_at(24),
            geometry: Geometry {
                segment_bytes: u64_at(32),
                index_slots: u64_at(40),
            },
            created_unix_nanos: u64_at(48),
        };
        let geometry = header.geometry;
        let sane = u32_at(12) as usize == HEADER_BYTES
            && geometry.index_slots >= 2
            && geometry.segment_bytes < u64::from(u32::MAX)
            && geometry.segment_bytes % PAGE_BYTES as u64 == 0
            && geometry.data_start() < geometry.segment_bytes;
        if !sane {
            return Err(JournalError::bad_segment(
                path,
                "impossible layout in header",
            ));
        }
        Ok(header)
    }
}

/// Why an excerpt is not readable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExcerptProblem {
    /// Its offset or length points outside the segment's data (a torn or damaged slot,
    /// or a truncated file).
    OutOfBounds,
    /// Its offset is not where the excerpt before it ends.
    Misplaced,
    /// Its payload does not match its checksum.
    ChecksumMismatch,
}

impl ExcerptProblem {
    /// The problem in words, for an error message.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            ExcerptProblem::OutOfBounds => "its offset or length is outside the segment",
            ExcerptProblem::Misplaced => "it does not start where the excerpt before it ends",
            ExcerptProblem::ChecksumMismatch => "its checksum does not match its bytes",
        }
    }
}

/// A memory-mapped segment file, for reading or (the appender's) writing.
#[derive(Debug)]
pub(crate) struct Segment {
    pub(crate) path: PathBuf,
    pub(crate) header: SegmentHeader,
    pub(crate) file: File,
    /// Shared with the excerpt batches handed out from it, which keep an older mapping
    /// alive after a remap.
    map: Arc<MmapRaw>,
    /// How many bytes are mapped: the file's size when it was mapped, at most the
    /// segment's size (a truncated file maps less).
    mapped_len: usize,
    writable: bool,
}

impl Segment {
    /// Creates segment `number` in `dir` (under a temporary name, with its space
    /// reserved and its header written and synced, then renamed into place and the
    /// folder synced, so a reader never sees a half-made segment, nor a power loss a
    /// named one without its header) and maps it for writing.
    pub(crate) fn create(
        dir: &Path,
        number: u64,
        first_index: u64,
        geometry: Geometry,
        created_unix_nanos: u64,
    ) -> Result<Segment> {
        let path = segment_path(dir, number);
        let temporary = dir.join(format!("{number:020}{TEMPORARY_SUFFIX}"));
        let _ = fs::remove_file(&temporary);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&temporary)
            .map_err(|error| JournalError::io("cannot create the segment", &temporary, error))?;
        let header = SegmentHeader {
            number,
            first_index,
            geometry,
            created_unix_nanos,
        };
        let prepared = reserve(&file, geometry.segment_bytes)
            .map_err(|error| JournalError::io("cannot reserve space for", &temporary, error))
            .and_then(|()| {
                file.write_all_at(&header.encode(), 0).map_err(|error| {
                    JournalError::io("cannot write the header of", &temporary, error)
                })
            })
            .and_then(|()| {
                // the header reaches the disk before the name does (a zero header under
                // the segment's name would be a torn creation: see is_torn_creation)
                file.sync_all().map_err(|error| {
                    JournalError::io("cannot sync the header of", &temporary, error)
                })
            })
            .and_then(|()| {
                fs::rename(&temporary, &path)
                    .map_err(|error| JournalError::io("cannot rename into place", &path, error))
            })
            .and_then(|()| {
                mongoose_durable::disk::sync_folder(dir)
                    .map_err(|error| JournalError::io("cannot sync the directory", dir, error))
            });
        if let Err(error) = prepared {
            // a half-made segment must not keep the space it took
            let _ = fs::remove_file(&temporary);
            return Err(error);
        }
        let map = map(&file, geometry.segment_bytes as usize, true, &path)?;
        Ok(Segment {
            path,
            header,
            file,
            map: Arc::new(map),
            mapped_len: geometry.segment_bytes as usize,
            writable: true,
        })
    }

    /// Opens and maps an existing segment; `None` if there is no such file.
    pub(crate) fn open(path: &Path, writable: bool) -> Result<Option<Segment>> {
        let file = match OpenOptions::new().read(true).write(writable).open(path) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(JournalError::io("cannot open the segment", path, error)),
        };
        let mut bytes = [0u8; HEADER_USED_BYTES];
        file.read_exact_at(&mut bytes, 0)
            .map_err(|_| JournalError::bad_segment(path, "shorter than its header"))?;
        let header = SegmentHeader::decode(&bytes, path)?;
        let mut segment_len = file_len(&file, path)?;
        if writable && segment_len < header.geometry.segment_bytes {
            tracing::warn!(
                path = %path.display(),
                size = segment_len,
                expected = header.geometry.segment_bytes,
                "the segment file is shorter than its header says (truncated); extending it"
            );
            reserve(&file, header.geometry.segment_bytes)
                .map_err(|error| JournalError::io("cannot extend the segment", path, error))?;
            segment_len = header.geometry.segment_bytes;
        }
        let mapped_len = segment_len.min(header.geometry.segment_bytes) as usize;
        let map = map(&file, mapped_len, writable, path)?;
        Ok(Some(Segment {
            path: path.to_path_buf(),
            header,
            file,
            map: Arc::new(map),
            mapped_len,
            writable,
        }))
    }

    /// Maps the file again if it grew since it was mapped (a truncated segment that an
    /// appender extended); whether it did.
    pub(crate) fn remap_if_grown(&mut self) -> Result<bool> {
        let full = self.header.geometry.segment_bytes as usize;
        if self.mapped_len >= full {
            return Ok(false);
        }
        let len = (file_len(&self.file, &self.path)? as usize).min(full);
        if len <= self.mapped_len {
            return Ok(false);
        }
        self.map = Arc::new(map(&self.file, len, self.writable, &self.path)?);
        self.mapped_len = len;
        Ok(true)
    }

    /// Whether the whole segment is mapped (its file is not truncated).
    pub(crate) fn is_whole(&self) -> bool {
        self.mapped_len as u64 >= self.header.geometry.segment_bytes
    }

    /// The index slot `slot`, loaded with acquire ordering: `SLOT_EMPTY`, `SLOT_END` or the
    /// offset of the excerpt. A slot beyond the index, or beyond a truncated file, reads
    /// as empty.
    #[inline]
    pub(crate) fn slot(&self, slot: u64) -> u32 {
        if slot >= self.header.geometry.index_slots {
            return SLOT_EMPTY;
        }
        let at = HEADER_BYTES + slot as usize * 4;
        if at + 4 > self.mapped_len {
            return SLOT_EMPTY;
        }
        // SAFETY: `at + 4 <= mapped_len`, so the 4 bytes are inside the mapping, which
        // lives as long as `self`; `at` is a multiple of 4 from a page-aligned base, so
        // the pointer is aligned for a u32. Other processes write this word only with
        // atomic stores (or not at all), so an atomic view of it is sound. A reader's
        // mapping is read-only: the load is `Relaxed` (the atomic load the standard
        // library allows on read-only memory) and the fence after it gives it `Acquire`.
        let word = unsafe { AtomicU32::from_ptr(self.map.as_mut_ptr().add(at).cast::<u32>()) };
        let value = word.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        value
    }

    /// Stores index slot `slot` with `Release`: everything written before (the excerpt)
    /// is visible to a reader that loads the slot.
    #[inline]
    pub(crate) fn set_slot(&self, slot: u64, value: u32) {
        assert!(self.writable && slot < self.header.geometry.index_slots);
        let at = HEADER_BYTES + slot as usize * 4;
        assert!(at + 4 <= self.mapped_len);
        // SAFETY: as in `slot`: inside the mapping, aligned, and only accessed atomically.
        let word = unsafe { AtomicU32::from_ptr(self.map.as_mut_ptr().add(at).cast::<u32>()) };
        word.store(value, Ordering::Release);
    }

    /// Checks the excerpt with index `index` at `offset` (from its slot): within the
    /// data, where the excerpt before ends (`expected`, when known), and matching its
    /// checksum. Gives the payload's offset and length.
    #[inline]
    pub(crate) fn check_excerpt(
        &self,
        index: u64,
        offset: u32,
        expected: Option<usize>,
    ) -> std::result::Result<(usize, usize), ExcerptProblem> {
        let offset = offset as usize;
        let data_end = self.mapped_len;
        if offset % 8 != 0
            || (offset as u64) < self.header.geometry.data_start()
            || offset + EXCERPT_HEADER_BYTES > data_end
        {
            return Err(ExcerptProblem::OutOfBounds);
        }
        if expected.is_some_and(|expected| expected != offset) {
            return Err(ExcerptProblem::Misplaced);
        }
        // SAFETY: `offset + 8 <= mapped_len` and `offset` is 8-aligned: both words are in
        // the mapping. The appender wrote them before it published the slot this offset
        // came from (loaded with Acquire), and does not write them again.
        let (len, crc) = unsafe {
            let base = self.map.as_ptr().add(offset);
            (
                u32::from_le(base.cast::<u32>().read()),
                u32::from_le(base.add(4).cast::<u32>().read()),
            )
        };
        let payload_start = offset + EXCERPT_HEADER_BYTES;
        let len = len as usize;
        if len > data_end - payload_start {
            return Err(ExcerptProblem::OutOfBounds);
        }
        // SAFETY: the range was checked just above to be inside the mapping.
        let payload = unsafe { self.payload(payload_start, len) };
        if checksum(index, payload) != crc {
            return Err(ExcerptProblem::ChecksumMismatch);
        }
        Ok((payload_start, len))
    }

    /// Whether anything whole follows the excerpt in `slot`, which failed its checks: a
    /// whole excerpt in a later slot, an end mark, or a next segment. Then the excerpt is
    /// damage in the middle of the journal; otherwise it is a torn tail (a crash in the
    /// middle of the last appends), which only an appender may cut.
    pub(crate) fn whole_after(&self, slot: u64) -> bool {
        let mut next = slot + 1;
        while next < self.header.geometry.index_slots {
            let value = self.slot(next);
            if value == SLOT_EMPTY {
                break;
            }
            if value == SLOT_END
                || self
                    .check_excerpt(self.header.first_index + next, value, None)
                    .is_ok()
            {
                return true;
            }
            next += 1;
        }
        self.path.parent().is_some_and(|dir| {
            segment_path(dir, self.header.number + 1)
                .try_exists()
                .unwrap_or(true)
        })
    }

    /// The error of a damaged excerpt in the middle of the journal: excerpt `index`, at
    /// `offset` (from its slot), with `problem`.
    pub(crate) fn damaged(&self, index: u64, offset: u32, problem: ExcerptProblem) -> JournalError {
        JournalError::DamagedExcerpt {
            segment: self.path.clone(),
            index,
            offset: u64::from(offset),
            reason: problem.describe().to_owned(),
        }
    }

    /// The length an excerpt header at `offset` gives, if the header is inside the
    /// mapped data (for a dump of a damaged excerpt).
    pub(crate) fn raw_len(&self, offset: u32) -> Option<u32> {
        let offset = offset as usize;
        if offset % 8 != 0
            || (offset as u64) < self.header.geometry.data_start()
            || offset + EXCERPT_HEADER_BYTES > self.mapped_len
        {
            return None;
        }
        // SAFETY: the 4 aligned bytes at `offset` are inside the mapping (checked above);
        // a racing write can only give a wrong length, which the caller reports as such.
        Some(u32::from_le(unsafe {
            self.map.as_ptr().add(offset).cast::<u32>().read_volatile()
        }))
    }

    /// The mapped bytes `start..start + len`.
    ///
    /// # Safety
    /// The range must be inside the mapping and hold a published excerpt's payload (no
    /// one writes it while the returned slice lives).
    #[inline]
    pub(crate) unsafe fn payload(&self, start: usize, len: usize) -> &[u8] {
        debug_assert!(start + len <= self.mapped_len);
        // SAFETY: the caller promises the range is mapped and not written meanwhile.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(start), len) }
    }

    /// The mapping, shared (an excerpt batch keeps it alive).
    pub(crate) fn shared_map(&self) -> &Arc<MmapRaw> {
        &self.map
    }

    /// The mapped bytes `start..start + len`, for the appender to write an excerpt
    /// before it publishes it.
    ///
    /// # Safety
    /// The caller is the segment's only writer (it holds the appender lock), the range is
    /// inside the mapping and unpublished (no reader reads it), and no other slice of it
    /// lives.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn unpublished_mut(&self, start: usize, len: usize) -> &mut [u8] {
        debug_assert!(self.writable && start + len <= self.mapped_len);
        // SAFETY: the caller promises exclusive access to a mapped, unpublished range.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(start), len) }
    }

    /// Faults in the pages of `start..start + len` for writing in one call
    /// (`MADV_POPULATE_WRITE`), rather than one page fault per 4 KiB of appends. An old
    /// kernel without it just takes the faults.
    pub(crate) fn populate_for_writing(&self, start: usize, len: usize) {
        let len = len.min(self.mapped_len.saturating_sub(start));
        if len == 0 {
            return;
        }
        if let Err(error) = self
            .map
            .advise_range(memmap2::Advice::PopulateWrite, start, len)
        {
            tracing::debug!(%error, "cannot pre-fault the segment's pages");
        }
    }

    /// Writes the mapped pages back and waits (`msync(MS_SYNC)`).
    pub(crate) fn sync(&self) -> Result<()> {
        self.map
            .flush()
            .map_err(|error| JournalError::io("cannot sync the segment", &self.path, error))
    }

    /// Starts writing the mapped pages back without waiting (`msync(MS_ASYNC)`).
    pub(crate) fn flush_async(&self) -> Result<()> {
        self.map
            .flush_async()
            .map_err(|error| JournalError::io("cannot flush the segment", &self.path, error))
    }
}

/// The checksum of the excerpt with index `index`: CRC-32 of the payload, seeded with
/// the index's low 32 bits (so an excerpt left from an older write at the same place
/// under another index does not pass).
#[inline]
pub(crate) fn checksum(index: u64, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial(index as u32);
    hasher.update(payload);
    hasher.finalize()
}

fn file_len(file: &File, path: &Path) -> Result<u64> {
    file.metadata()
        .map(|metadata| metadata.len())
        .map_err(|error| JournalError::io("cannot stat the segment", path, error))
}

/// Reserves `len` bytes of disk for `file` (`posix_fallocate`), so that a full file
/// system fails here, with an error, rather than as a SIGBUS on a write to the mapping.
fn reserve(file: &File, len: u64) -> io::Result<()> {
    // SAFETY: `posix_fallocate` on a file descriptor we own; no memory is shared.
    let result = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
    match result {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => file.set_len(len),
        code => Err(io::Error::from_raw_os_error(code)),
    }
}

fn map(file: &File, len: usize, writable: bool, path: &Path) -> Result<MmapRaw> {
    let mut options = MmapOptions::new();
    options.len(len);
    let mapped = if writable {
        options.map_raw(file)
    } else {
        options.map_raw_read_only(file)
    };
    mapped.map_err(|error| JournalError::io("cannot map the segment", path, error))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> SegmentHeader {
        SegmentHeader {
            number: 3,
            first_index: 0x0102_0304_0506_0708,
            geometry: Geometry {
                segment_bytes: 64 * 1024,
                index_slots: 1024,
            },
            created_unix_nanos: 42,
        }
    }

    #[test]
    fn the_segment_header_layout_is_fixed() {
        let bytes = header().encode();
        assert_eq!(&bytes[0..8], b"MGJRNSEG");
        assert_eq!(bytes[8..12], 1u32.to_le_bytes());
        assert_eq!(bytes[12..16], 4096u32.to_le_bytes());
        assert_eq!(bytes[16..24], 3u64.to_le_bytes());
        assert_eq!(bytes[24..32], 0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(bytes[32..40], (64u64 * 1024).to_le_bytes());
        assert_eq!(bytes[40..48], 1024u64.to_le_bytes());
        assert_eq!(bytes[48..56], 42u64.to_le_bytes());
        assert_eq!(bytes[56..60], [0; 4]);
        assert_eq!(bytes[60..64], crc32fast::hash(&bytes[0..60]).to_le_bytes());
        assert_eq!(
            SegmentHeader::decode(&bytes, Path::new("s")).expect("decode"),
            header()
        );
        // 4 KiB header page, 1024 slots of 4 bytes, then data on a page boundary
        assert_eq!(header().geometry.data_start(), 4096 + 4096);
        assert_eq!(EXCERPT_HEADER_BYTES, 8);
    }

    #[test]
    fn a_foreign_or_damaged_or_newer_header_is_refused_with_its_reason() {
        let mut foreign = header().encode();
        foreign[0] = b'X';
        let error = SegmentHeader::decode(&foreign, Path::new("s")).expect_err("magic");
        assert!(error.to_string().contains("no segment magic"), "{error}");

        let mut damaged = header().encode();
        damaged[30] ^= 1;
        let error = SegmentHeader::decode(&damaged, Path::new("s")).expect_err("crc");
        assert!(error.to_string().contains("checksum"), "{error}");

        let mut newer = header().encode();
        newer[8..12].copy_from_slice(&2u32.to_le_bytes());
        let crc = crc32fast::hash(&newer[0..60]);
        newer[60..64].copy_from_slice(&crc.to_le_bytes());
        let error = SegmentHeader::decode(&newer, Path::new("s")).expect_err("version");
        assert!(error.to_string().contains("format version 2"), "{error}");
    }

    #[test]
    fn the_checksum_depends_on_the_index() {
        assert_ne!(checksum(1, b"same"), checksum(2, b"same"));
        assert_eq!(checksum(7, b"same"), checksum(7, b"same"));
    }
}
