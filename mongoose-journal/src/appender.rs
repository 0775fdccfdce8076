//! The journal's one writer.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::{Geometry, JournalConfig};
use crate::error::{JournalError, Result};
use crate::segment::{
    self, checksum, Segment, EXCERPT_HEADER_BYTES, HEADER_BYTES, PAGE_BYTES, SLOT_EMPTY, SLOT_END,
};
use mongoose_durable::lock::FileLock;

/// The name of the lock file an appender holds (`flock`) in the journal directory.
pub(crate) const APPENDER_LOCK: &str = "appender.lock";

/// The journal's writer: appends excerpts and gives each the next index. One appender
/// per journal at a time, across processes (an exclusive `flock` on `appender.lock` in
/// the journal directory, released when the appender is dropped or its process dies).
///
/// An append is visible to tailers in every process as soon as it returns (they read
/// the same pages), and it survives the appender's process being killed; it survives a
/// power loss only once [`Appender::sync`] returned.
#[derive(Debug)]
pub struct Appender {
    dir: PathBuf,
    geometry: Geometry,
    roll_interval: Option<Duration>,
    _lock: FileLock,
    segment: Segment,
    next_index: u64,
    /// The slot of the next excerpt in the current segment.
    slot: u64,
    /// The offset of the next excerpt in the current segment.
    write_offset: usize,
    /// The current segment has its end mark: the next append opens the next segment.
    ended: bool,
    /// Segments rolled away from since the last sync, to sync at the next one.
    unsynced_segments: Vec<File>,
    /// A segment was created since the last sync (the directory entry is not durable).
    directory_unsynced: bool,
    /// The current segment's pages are faulted in up to this offset (data) and this
    /// slot (index): see `prepare_pages`.
    data_populated_to: usize,
    slots_populated_to: u64,
}

/// How far ahead of the appends a segment's data pages are faulted in at once.
const POPULATE_DATA_BYTES: usize = 1 << 20;
/// How many index slots' pages are faulted in at once (64 KiB of slots).
const POPULATE_SLOTS: u64 = 16 * 1024;

impl Appender {
    /// Takes the appender lock of the journal in `dir` and opens its last segment for
    /// appending, cutting a torn tail (see the crate documentation).
    pub(crate) fn open(dir: &Path, config: &JournalConfig) -> Result<Appender> {
        let geometry = config.geometry()?;
        let lock_path = dir.join(APPENDER_LOCK);
        let lock = crate::lock::try_lock(&lock_path)
            .map_err(|error| JournalError::io("cannot open the lock file", &lock_path, error))?
            .ok_or(JournalError::AppenderHeld { path: lock_path })?;
        segment::remove_temporary_segments(dir)?;
        segment::remove_torn_creations(dir)?;
        let numbers = segment::list_segments(dir)?;
        let Some(&last) = numbers.last() else {
            let segment = Segment::create(dir, 0, 0, geometry, now_unix_nanos())?;
            let write_offset = segment.header.geometry.data_start() as usize;
            return Ok(Appender {
                dir: dir.to_path_buf(),
                geometry,
                roll_interval: config.roll_interval,
                _lock: lock,
                segment,
                next_index: 0,
                slot: 0,
                write_offset,
                ended: false,
                unsynced_segments: Vec::new(),
                directory_unsynced: true,
                data_populated_to: 0,
                slots_populated_to: 0,
            });
        };
        let path = segment::segment_path(dir, last);
        let segment = Segment::open(&path, true)?
            .ok_or_else(|| JournalError::bad_segment(&path, "removed while opening"))?;
        let recovered = recover(&segment)?;
        Ok(Appender {
            dir: dir.to_path_buf(),
            geometry,
            roll_interval: config.roll_interval,
            _lock: lock,
            next_index: segment.header.first_index + recovered.slot,
            slot: recovered.slot,
            write_offset: recovered.write_offset,
            ended: recovered.ended,
            segment,
            unsynced_segments: Vec::new(),
            directory_unsynced: false,
            data_populated_to: 0,
            slots_populated_to: 0,
        })
    }

    /// Appends `bytes` as one excerpt; its index.
    pub fn append(&mut self, bytes: &[u8]) -> Result<u64> {
        self.append_with(bytes.len(), |buffer| buffer.copy_from_slice(bytes))
    }

    /// Appends an excerpt of `len` bytes that `fill` writes in place, in the mapped
    /// segment (no copy); its index. `fill` must write the whole buffer: what it holds
    /// before is unspecified (zeroes, unless an earlier `fill` panicked). The excerpt is
    /// published when `fill` returns; if `fill` panics, nothing is appended.
    pub fn append_with<F: FnOnce(&mut [u8])>(&mut self, len: usize, fill: F) -> Result<u64> {
        let footprint = EXCERPT_HEADER_BYTES.saturating_add(len.saturating_add(7) & !7);
        if self.ended || !self.fits(footprint) || self.roll_is_due() {
            if len > self.geometry.max_payload() {
                return Err(JournalError::ExcerptTooLarge {
                    len,
                    max: self.geometry.max_payload(),
                    segment_bytes: self.geometry.segment_bytes,
                });
            }
            self.roll()?;
        }
        let offset = self.write_offset;
        let index = self.next_index;
        if offset + footprint > self.data_populated_to || self.slot >= self.slots_populated_to {
            self.prepare_pages(offset + footprint);
        }
        // SAFETY: this appender holds the journal's lock, so it is the segment's only
        // writer; `fits` checked the range is inside the segment (mapped whole for
        // writing); nothing past the last published excerpt is published, so no reader
        // reads it; the slice does not outlive this block.
        let payload = unsafe {
            self.segment
                .unpublished_mut(offset + EXCERPT_HEADER_BYTES, len)
        };
        fill(payload);
        let crc = checksum(index, payload);
        // SAFETY: as above, the 8 bytes before the payload.
        let header = unsafe { self.segment.unpublished_mut(offset, EXCERPT_HEADER_BYTES) };
        header[0..4].copy_from_slice(&(len as u32).to_le_bytes());
        header[4..8].copy_from_slice(&crc.to_le_bytes());
        self.segment.set_slot(self.slot, offset as u32);
        self.slot += 1;
        self.next_index += 1;
        self.write_offset = offset + footprint;
        Ok(index)
    }

    /// The index the next append gets.
    pub fn next_index(&self) -> u64 {
        self.next_index
    }

    /// Starts writing appended excerpts back to disk without waiting
    /// (`msync(MS_ASYNC)`). Readers do not need it: they see appends at once.
    pub fn flush(&mut self) -> Result<()> {
        self.segment.flush_async()
    }

    /// Makes every excerpt appended so far durable (survives a power loss): writes the
    /// current segment back and waits (`msync(MS_SYNC)`), syncs the segments rolled away
    /// from since the last sync, and the journal directory if a segment was created.
    pub fn sync(&mut self) -> Result<()> {
        for file in self.unsynced_segments.drain(..) {
            file.sync_data()
                .map_err(|error| JournalError::io("cannot sync a segment of", &self.dir, error))?;
        }
        self.segment.sync()?;
        if self.directory_unsynced {
            File::open(&self.dir)
                .and_then(|directory| directory.sync_all())
                .map_err(|error| JournalError::io("cannot sync the directory", &self.dir, error))?;
            self.directory_unsynced = false;
        }
        Ok(())
    }

    /// Faults in, in one call each, the data pages from `data_end` on and the index
    /// pages from the current slot on, a stretch ahead: each first write to a page of a
    /// reserved segment is otherwise a page fault of its own (100-byte excerpts, median
    /// of 3 runs on a shared 2-core VM: ext4 4.3 -> 7.0 M appends/s, tmpfs 6.8 -> 8.0). Only
    /// a stretch ahead, not the whole segment, since pre-faulted pages are dirty and a
    /// sync writes them back.
    #[cold]
    fn prepare_pages(&mut self, data_end: usize) {
        if data_end > self.data_populated_to {
            let start = self.write_offset.max(self.data_populated_to);
            let end = (data_end + POPULATE_DATA_BYTES).next_multiple_of(PAGE_BYTES);
            self.segment.populate_for_writing(start, end - start);
            self.data_populated_to = end;
        }
        if self.slot >= self.slots_populated_to {
            let start = HEADER_BYTES + self.slot as usize * 4;
            self.segment
                .populate_for_writing(start, POPULATE_SLOTS as usize * 4);
            self.slots_populated_to = self.slot + POPULATE_SLOTS;
        }
    }

    fn fits(&self, footprint: usize) -> bool {
        let geometry = self.segment.header.geometry;
        // one slot stays free for the end mark
        self.slot + 1 < geometry.index_slots
            && (self.write_offset + footprint) as u64 <= geometry.segment_bytes
    }

    fn roll_is_due(&self) -> bool {
        let Some(interval) = self.roll_interval else {
            return false;
        };
        let age = now_unix_nanos().saturating_sub(self.segment.header.created_unix_nanos);
        self.slot > 0 && u128::from(age) >= interval.as_nanos()
    }

    /// Ends the current segment and opens the next. The end mark goes first: a reader
    /// that sees it and does not find the next segment yet waits for it; a crash between
    /// the two is repaired by the next appender, which creates the next segment.
    fn roll(&mut self) -> Result<()> {
        if !self.ended {
            self.segment.set_slot(self.slot, SLOT_END);
            self.ended = true;
        }
        let number = self.segment.header.number + 1;
        let next = Segment::create(
            &self.dir,
            number,
            self.next_index,
            self.geometry,
            now_unix_nanos(),
        )?;
        tracing::debug!(
            segment = number,
            first_index = self.next_index,
            "rolled the journal"
        );
        if let Err(error) = self.segment.flush_async() {
            tracing::warn!(%error, "cannot start writing back a finished segment");
        }
        let finished = std::mem::replace(&mut self.segment, next);
        self.unsynced_segments.push(finished.file);
        self.directory_unsynced = true;
        self.slot = 0;
        self.write_offset = self.segment.header.geometry.data_start() as usize;
        self.ended = false;
        self.data_populated_to = 0;
        self.slots_populated_to = 0;
        Ok(())
    }
}

/// Where the last segment's whole excerpts end, as the appender resumes from.
struct Recovered {
    slot: u64,
    write_offset: usize,
    ended: bool,
}

/// Walks the last segment's excerpts from its start, checking each, and cuts what follows
/// the last whole one: a torn tail (a crash in the middle of the last appends: the
/// excerpts that fail their checks, with nothing whole after them), and anything a crash
/// left past it (slots and data are zeroed, so a later excerpt can never meet stale
/// bytes). An excerpt that fails with a whole excerpt after it is damage, not a torn
/// write: refused, and nothing is changed.
fn recover(segment: &Segment) -> Result<Recovered> {
    let header = segment.header;
    let geometry = header.geometry;
    let mut slot = 0;
    let mut write_offset = geometry.data_start() as usize;
    let mut ended = false;
    while slot < geometry.index_slots {
        let value = segment.slot(slot);
        if value == SLOT_EMPTY {
            break;
        }
        if value == SLOT_END {
            ended = true;
            break;
        }
        let index = header.first_index + slot;
        match segment.check_excerpt(index, value, Some(write_offset)) {
            Ok((start, len)) => {
                write_offset = (start + len).next_multiple_of(8);
                slot += 1;
            }
            Err(problem) => {
                if segment.whole_after(slot) {
                    return Err(segment.damaged(index, value, problem));
                }
                tracing::warn!(
                    segment = %segment.path.display(),
                    index,
                    ?problem,
                    "the journal has a torn tail: excerpt {index} and anything \
                     after it are cut; appending resumes at {index}"
                );
                break;
            }
        }
    }
    let first_cut_slot = if ended { slot + 1 } else { slot };
    let mut cut_slots = 0u64;
    for stale in first_cut_slot..geometry.index_slots {
        if segment.slot(stale) != SLOT_EMPTY {
            segment.set_slot(stale, SLOT_EMPTY);
            cut_slots += 1;
        }
    }
    let zeroed_bytes = zero_nonzero_pages(segment, write_offset);
    if cut_slots > 0 || zeroed_bytes > 0 {
        tracing::warn!(
            segment = %segment.path.display(),
            cut_slots,
            zeroed_bytes,
            "cleared what an interrupted append left after the last whole excerpt"
        );
    }
    Ok(Recovered {
        slot,
        write_offset,
        ended,
    })
}

/// Zeroes the non-zero bytes of the segment from `from` to its end (reading holes and
/// zero pages costs no disk); how many bytes it zeroed.
fn zero_nonzero_pages(segment: &Segment, from: usize) -> usize {
    let end = segment.header.geometry.segment_bytes as usize;
    let mut zeroed = 0;
    let mut start = from;
    while start < end {
        let chunk_end = (start / PAGE_BYTES + 1) * PAGE_BYTES;
        let chunk_end = chunk_end.min(end);
        // SAFETY: the appender holds the lock; the range is past every published excerpt
        // (readers do not read it) and inside the whole-mapped segment.
        let chunk = unsafe { segment.unpublished_mut(start, chunk_end - start) };
        if chunk.iter().any(|&byte| byte != 0) {
            chunk.fill(0);
            zeroed += chunk.len();
        }
        start = chunk_end;
    }
    zeroed
}

/// Now, in nanoseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| since.as_nanos() as u64)
        .unwrap_or(0)
}
