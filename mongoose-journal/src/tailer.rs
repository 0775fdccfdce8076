//! Readers: any number, in any process, with no lock.

use std::fmt;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::MmapRaw;

use crate::error::{JournalError, Result};
use crate::segment::{self, Segment, SegmentHeader, HEADER_USED_BYTES, SLOT_EMPTY, SLOT_END};

/// One excerpt, borrowed from the mapped segment (no copy).
#[derive(Clone, Copy)]
pub struct Excerpt<'a> {
    index: u64,
    bytes: &'a [u8],
}

impl<'a> Excerpt<'a> {
    /// The excerpt's index in the journal (dense from 0).
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The excerpt's bytes, as appended.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

impl fmt::Debug for Excerpt<'_> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Excerpt")
            .field("index", &self.index)
            .field("len", &self.bytes.len())
            .finish()
    }
}

/// Excerpts read together ([`Tailer::next_batch`]): they borrow the batch, not the
/// tailer, which has moved past them (each excerpt was checked as [`Tailer::next`]
/// checks it). The batch keeps the mappings they are in alive.
#[derive(Default)]
pub struct ExcerptBatch {
    maps: Vec<Arc<MmapRaw>>,
    /// (index, mapping, payload offset, length)
    entries: Vec<(u64, usize, usize, usize)>,
}

impl ExcerptBatch {
    /// How many excerpts it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The index of its first excerpt, if any.
    pub fn first_index(&self) -> Option<u64> {
        self.entries.first().map(|entry| entry.0)
    }

    /// Its excerpts, in index order.
    pub fn iter(&self) -> impl Iterator<Item = Excerpt<'_>> + '_ {
        self.entries.iter().map(|&(index, map, start, len)| {
            // SAFETY: the tailer checked that the range is inside this mapping and holds
            // the published excerpt `index`, which no one writes again; the batch owns a
            // reference to the mapping, and the slice borrows the batch.
            let bytes =
                unsafe { std::slice::from_raw_parts(self.maps[map].as_ptr().add(start), len) };
            Excerpt { index, bytes }
        })
    }
}

impl fmt::Debug for ExcerptBatch {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("ExcerptBatch")
            .field("excerpts", &self.entries.len())
            .field("first", &self.first_index())
            .finish()
    }
}

/// A reader of a journal: yields its excerpts in index order, each once, and waits (by
/// returning `None`) at the end, at an excerpt not yet appended, and before a torn last
/// excerpt, which it never yields. A damaged excerpt with whole excerpts after it is an
/// error ([`JournalError::DamagedExcerpt`]), every time the tailer reaches it. Needs no lock: any number of tailers, in any
/// number of processes, read while the appender appends.
#[derive(Debug)]
pub struct Tailer {
    dir: PathBuf,
    segment: Option<Segment>,
    next_index: u64,
    /// Where the next excerpt must start in the current segment, when known (after a
    /// read; not after a seek).
    expected_offset: Option<usize>,
    /// The index the tailer last warned about (a damaged excerpt), to warn once.
    warned_at: Option<u64>,
    /// The excerpt a `peek` checked: its index, payload offset and length.
    located: Option<(u64, usize, usize)>,
}

impl Tailer {
    pub(crate) fn new(dir: &Path) -> Tailer {
        Tailer {
            dir: dir.to_path_buf(),
            segment: None,
            next_index: 0,
            expected_offset: None,
            warned_at: None,
            located: None,
        }
    }

    /// The next excerpt, or `None` if it is not (yet) readable: not appended yet, or
    /// a torn last excerpt (logged once as a warning; the tailer stays before it and reads
    /// it once an appender has cut it and appended again). A damaged excerpt followed by
    /// whole ones is [`JournalError::DamagedExcerpt`]: the tailer stays before it. The excerpt borrows the
    /// tailer; [`Tailer::index`] is then the index after it.
    #[inline]
    #[allow(clippy::should_implement_trait)] // a lending read: the excerpt borrows the tailer
    pub fn next(&mut self) -> Result<Option<Excerpt<'_>>> {
        let Some((start, len)) = self.locate()? else {
            return Ok(None);
        };
        self.located = None;
        let index = self.next_index;
        self.next_index += 1;
        self.expected_offset = Some((start + len).next_multiple_of(8));
        Ok(Some(self.excerpt_at(index, start, len)))
    }

    /// Reads up to `max` excerpts, as that many [`Tailer::next`] calls would, into
    /// `batch` (cleared first) and moves past them. The excerpts borrow the batch, so a
    /// source can hand them on together; to give some back (PAUSE), [`Tailer::seek`] to
    /// the first one not taken.
    pub fn next_batch(&mut self, max: usize, batch: &mut ExcerptBatch) -> Result<()> {
        batch.maps.clear();
        batch.entries.clear();
        while batch.entries.len() < max {
            let located = match self.locate() {
                Ok(located) => located,
                // the excerpts before a damaged one are given; the next call fails
                Err(_) if !batch.entries.is_empty() => break,
                Err(error) => return Err(error),
            };
            let Some((start, len)) = located else {
                break;
            };
            let segment = self.segment.as_ref().expect("the segment just located");
            let map = segment.shared_map();
            let slot = match batch.maps.last() {
                Some(last) if Arc::ptr_eq(last, map) => batch.maps.len() - 1,
                _ => {
                    batch.maps.push(Arc::clone(map));
                    batch.maps.len() - 1
                }
            };
            batch.entries.push((self.next_index, slot, start, len));
            self.located = None;
            self.next_index += 1;
            self.expected_offset = Some((start + len).next_multiple_of(8));
        }
        Ok(())
    }

    /// The next excerpt, as [`Tailer::next`] would give it, without moving past it: a
    /// source that cannot hand it on yet (PAUSE) keeps its place, and the following
    /// `peek` or `next` gives the same excerpt again (checked once).
    #[inline]
    pub fn peek(&mut self) -> Result<Option<Excerpt<'_>>> {
        let Some((start, len)) = self.locate()? else {
            return Ok(None);
        };
        Ok(Some(self.excerpt_at(self.next_index, start, len)))
    }

    /// Finds and checks excerpt `next_index`: the payload's offset and length.
    #[inline]
    fn locate(&mut self) -> Result<Option<(usize, usize)>> {
        if let Some((index, start, len)) = self.located {
            if index == self.next_index {
                return Ok(Some((start, len)));
            }
        }
        let found = loop {
            let Some(segment) = &self.segment else {
                match self.find_segment(self.next_index)? {
                    Some(found) => {
                        self.segment = Some(found);
                        self.expected_offset = None;
                        continue;
                    }
                    None => return Ok(None),
                }
            };
            let slot = self.next_index - segment.header.first_index;
            let value = segment.slot(slot);
            if value == SLOT_EMPTY {
                if !segment.is_whole() && self.remap()? {
                    continue;
                }
                return Ok(None);
            }
            if value == SLOT_END {
                if self.open_next_segment()? {
                    continue;
                }
                return Ok(None);
            }
            match segment.check_excerpt(self.next_index, value, self.expected_offset) {
                Ok(found) => break found,
                Err(problem) => {
                    if !segment.is_whole() && self.remap()? {
                        continue;
                    }
                    let segment = self.segment.as_ref().expect("the current segment");
                    if segment.whole_after(slot) {
                        // damage in the middle, unless an appender cut a torn tail and
                        // appended again meanwhile: look at the slot again
                        let again = segment.slot(slot);
                        if again == SLOT_EMPTY || again == SLOT_END {
                            continue;
                        }
                        match segment.check_excerpt(self.next_index, again, self.expected_offset) {
                            Ok(found) => break found,
                            Err(problem) => {
                                return Err(segment.damaged(self.next_index, again, problem))
                            }
                        }
                    }
                    if self.warned_at != Some(self.next_index) {
                        tracing::warn!(
                            index = self.next_index,
                            ?problem,
                            "the journal's last excerpt is torn: the tailer stops before it \
                             (an appender opening the journal cuts it)"
                        );
                        self.warned_at = Some(self.next_index);
                    }
                    return Ok(None);
                }
            }
        };
        self.located = Some((self.next_index, found.0, found.1));
        Ok(Some(found))
    }

    /// The excerpt `index` whose payload `locate` found at `start..start + len`.
    #[inline]
    fn excerpt_at(&self, index: u64, start: usize, len: usize) -> Excerpt<'_> {
        let segment = self.segment.as_ref().expect("the segment just read");
        // SAFETY: `check_excerpt` checked the range is inside the mapping and holds the
        // published excerpt `index`, which no one writes again; the slice borrows `self`,
        // so the mapping outlives it.
        let bytes = unsafe { segment.payload(start, len) };
        Excerpt { index, bytes }
    }

    /// Positions the tailer so that [`Tailer::next`] reads excerpt `index`: O(1) in its
    /// segment (the segment's index slot gives its offset), after a binary search of the
    /// segments' headers. `true` if excerpt `index` exists or is the next to be appended;
    /// `false` if `index` is beyond that: the tailer is then left at the end (see
    /// [`Tailer::index`]).
    pub fn seek(&mut self, index: u64) -> Result<bool> {
        self.located = None;
        self.warned_at = None;
        self.expected_offset = None;
        let Some(segment) = self.find_segment(index)? else {
            self.segment = None;
            self.next_index = 0;
            return Ok(index == 0);
        };
        let first = segment.header.first_index;
        let slot = index - first;
        let value = segment.slot(slot);
        if value != SLOT_EMPTY && value != SLOT_END {
            self.segment = Some(segment);
            self.next_index = index;
            return Ok(true);
        }
        let end = first_unfilled_slot(&segment, slot.min(segment.header.geometry.index_slots));
        self.segment = Some(segment);
        self.next_index = first + end;
        Ok(end == slot)
    }

    /// The index of the excerpt [`Tailer::next`] reads next.
    pub fn index(&self) -> u64 {
        self.next_index
    }

    /// The segment holding excerpt `index` (the last one whose first index is not above
    /// it), mapped; `None` if the journal has no segment yet.
    fn find_segment(&self, index: u64) -> Result<Option<Segment>> {
        let numbers = segment::list_segments(&self.dir)?;
        if numbers.is_empty() {
            return Ok(None);
        }
        let (mut low, mut high) = (0, numbers.len());
        // invariant: numbers[..low] start at or before `index`, numbers[high..] after it
        while low < high {
            let middle = (low + high) / 2;
            let path = segment::segment_path(&self.dir, numbers[middle]);
            // a torn creation holds nothing: it starts after every index (see above)
            let header = match read_header(&path) {
                Err(_) if is_torn_last(&self.dir, numbers[middle])? => None,
                header => header?,
            };
            if header.is_some_and(|header| header.first_index <= index) {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        if low == 0 {
            let first = read_header(&segment::segment_path(&self.dir, numbers[0]))?
                .map_or(0, |header| header.first_index);
            return Err(JournalError::IndexBeforeStart { index, first });
        }
        Segment::open(&segment::segment_path(&self.dir, numbers[low - 1]), false)
    }

    /// Moves on to the segment after the current one, if it exists yet.
    fn open_next_segment(&mut self) -> Result<bool> {
        let current = self.segment.as_ref().expect("a current segment");
        let number = current.header.number + 1;
        let path = segment::segment_path(&self.dir, number);
        let next = match Segment::open(&path, false) {
            Ok(Some(next)) => next,
            Ok(None) => return Ok(false),
            // a torn creation (a zero header the last segment of an earlier release
            // kept after a power loss): not there yet, until the appender makes it again
            Err(error) => {
                return if is_torn_last(&self.dir, number)? {
                    Ok(false)
                } else {
                    Err(error)
                }
            }
        };
        if next.header.first_index != self.next_index {
            return Err(JournalError::bad_segment(
                &path,
                format!(
                    "its first index is {}, the segment before ends at {}",
                    next.header.first_index, self.next_index
                ),
            ));
        }
        self.expected_offset = Some(next.header.geometry.data_start() as usize);
        self.segment = Some(next);
        Ok(true)
    }

    fn remap(&mut self) -> Result<bool> {
        match self.segment.as_mut() {
            Some(segment) => segment.remap_if_grown(),
            None => Ok(false),
        }
    }
}

/// Whether segment `number` of `dir` is the last one and a torn creation
/// ([`segment::is_torn_creation`]): read as not there yet. Asked only of a segment
/// whose header failed, off the read path.
fn is_torn_last(dir: &Path, number: u64) -> Result<bool> {
    Ok(segment::list_segments(dir)?.last() == Some(&number)
        && segment::is_torn_creation(&segment::segment_path(dir, number))?)
}

/// The first slot below `limit` that holds no excerpt (empty, or the end mark), or
/// `limit`: slots fill in order, so a binary search finds it.
pub(crate) fn first_unfilled_slot(segment: &Segment, limit: u64) -> u64 {
    let filled = |slot: u64| {
        let value = segment.slot(slot);
        value != SLOT_EMPTY && value != SLOT_END
    };
    let (mut low, mut high) = (0, limit);
    while low < high {
        let middle = low + (high - low) / 2;
        if filled(middle) {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    low
}

/// The header of the segment at `path`; `None` if it is gone.
pub(crate) fn read_header(path: &Path) -> Result<Option<SegmentHeader>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(JournalError::io("cannot open the segment", path, error)),
    };
    let mut bytes = [0u8; HEADER_USED_BYTES];
    file.read_exact_at(&mut bytes, 0)
        .map_err(|_| JournalError::bad_segment(path, "shorter than its header"))?;
    SegmentHeader::decode(&bytes, path).map(Some)
}
