//! A memory-mapped, segmented, append-only journal (chronicle-like): one appender, any
//! number of tailers in any number of processes, excerpts addressed by a dense index.
//!
//! ```
//! use mongoose_journal::{Journal, JournalConfig, TailerStore};
//!
//! # fn main() -> Result<(), mongoose_journal::JournalError> {
//! let dir = tempfile::tempdir().unwrap();
//! let journal = Journal::open(dir.path(), JournalConfig::default())?;
//!
//! let mut appender = journal.appender()?;
//! assert_eq!(appender.append(b"first")?, 0);
//! assert_eq!(appender.append_with(6, |buffer| buffer.copy_from_slice(b"second"))?, 1);
//! appender.sync()?; // durable through a power loss (without it: through a crash)
//!
//! // a named tailer resumes at its committed index
//! let mut store = TailerStore::open(dir.path(), "billing")?;
//! let mut tailer = journal.tailer();
//! tailer.seek(store.load().unwrap_or(0))?;
//! while let Some(excerpt) = tailer.next()? {
//!     println!("{}: {:?}", excerpt.index(), excerpt.bytes());
//! }
//! store.store(tailer.index())?; // after processing: the next index to read
//! assert_eq!(store.load(), Some(2));
//! assert_eq!(journal.last_index()?, Some(1));
//! # Ok(())
//! # }
//! ```
//!
//! # Format
//!
//! A journal is a directory of segment files, `00000000000000000000.segment`,
//! `00000000000000000001.segment`, ..., each of [`JournalConfig::segment_bytes`]
//! (64 MiB by default), reserved on disk when created (so a full file system is an error
//! at the roll, not a SIGBUS), and mapped shared. A segment starts with a 4 KiB header
//! page (magic `MGJRNSEG`, format version, segment number, the index of its first
//! excerpt, its size, its index size, its creation time, a CRC-32), then its index: one
//! 4-byte slot per excerpt holding the excerpt's offset in the file (0: not appended;
//! `u32::MAX`: the end mark, the excerpt is in the next segment), then the excerpts,
//! each 8-byte aligned: a 4-byte length, a 4-byte CRC-32 of the payload (seeded with
//! the excerpt's index), the payload. The appender rolls to the next segment when an
//! excerpt does not fit, when the index is full, or (optionally) when the segment is
//! older than [`JournalConfig::roll_interval`].
//!
//! **Publication.** The appender writes the payload and its header, then stores the
//! index slot with `Release`; a reader loads the slot with `Acquire`, so a reader in
//! another process never sees an excerpt before its bytes. The slot is the commit mark.
//!
//! **Seek.** Every excerpt has a slot, so seeking to an index in a segment is one load
//! (O(1)); finding the segment is a binary search of the segments' headers (their first
//! indexes).
//!
//! **Torn tail.** A reader checks each excerpt (inside the file, where the one before
//! ends, its checksum). Only an excerpt cut short at the very end is a torn write (a
//! crash in the middle of the last appends): the excerpts that fail their checks with
//! nothing whole after them in the last segment. A reader stops before a torn tail,
//! never yielding it, and goes on once an appender has replaced it; the next appender
//! to open the journal cuts it (with a warning), zeroes what a crash left after it, and
//! appends from there: the index of the first cut excerpt is given again. An excerpt
//! that fails with a whole excerpt (or an end mark, or a next segment) after it is
//! damage, not a torn write: a reader that reaches it fails with
//! [`JournalError::DamagedExcerpt`] (naming the segment and offset) every time, and an
//! appender that would cut it refuses to open, changing nothing. An appender killed with
//! SIGKILL loses nothing it appended (the pages are in the page cache); a power loss
//! loses what was appended since the last [`Appender::sync`].
//!
//! **Identity.** A journal is created with an identity (a random number in the file
//! `identity` of its directory, [`Journal::identity`]); a [`TailerStore`] records the
//! identity its committed index belongs to, so a journal removed and made again at the
//! same path (whose indexes start again at 0) is never read from another journal's
//! committed index.
//!
//! **Reading.** [`Tailer::next`] gives the next excerpt and moves past it;
//! [`Tailer::peek`] gives it without moving (a source that cannot hand it on yet keeps
//! its place); [`Tailer::index`] is the index after the last excerpt taken, the position
//! a source commits (to a [`TailerStore`]) once that excerpt is processed. A reader at
//! the end gets `None` and asks again later: it does not block.
//!
//! **Costs.** Every read checks a CRC-32 (about half of a tailer's time with 100-byte
//! excerpts). The appender faults pages in a stretch ahead of its appends
//! (`MADV_POPULATE_WRITE`, 1 MiB of data and 64 KiB of slots at a time) rather than
//! taking a page fault per 4 KiB; opening an appender reads the rest of the last segment
//! once (to find and clear what a crash left).
//!
//! **Limits.** An appender reads only the last segment when it opens: a damaged
//! excerpt in an earlier segment is found by readers (and [`Journal::dump`]), not by the
//! appender, which appends after the end and changes nothing there. Truncating or
//! removing a segment file while a process maps it makes that process fail with SIGBUS,
//! as with any memory-mapped file. Retention (deleting old segments) is not part of this
//! crate.
//!
//! A [`TailerStore`] keeps a named tailer's committed index in a small file of two
//! checksummed slots, written alternately and synced, so a torn write keeps the previous
//! index.

#![warn(
    missing_docs,
    unreachable_pub,
    missing_debug_implementations,
    rust_2018_idioms
)]

mod appender;
mod config;
mod dump;
mod error;
mod identity;
mod lock;
mod segment;
mod tailer;
mod tailer_store;

use std::fs;
use std::path::{Path, PathBuf};

pub use appender::Appender;
pub use config::JournalConfig;
pub use dump::{Dump, DumpEntry};
pub use error::{JournalError, Result};
pub use tailer::{Excerpt, ExcerptBatch, Tailer};
pub use tailer_store::TailerStore;

/// A journal: a directory of segment files and its identity. Opening one does not lock
/// or change anything (but for making a new journal's directory and identity);
/// [`Journal::appender`] does, [`Journal::tailer`] never does.
#[derive(Debug, Clone)]
pub struct Journal {
    dir: PathBuf,
    config: JournalConfig,
    identity: u64,
}

impl Journal {
    /// Opens the journal in `dir`, creating the directory and the journal's identity if
    /// needed (see [`Journal::identity`]). Checks the configuration and the header of the
    /// last segment.
    pub fn open(dir: impl AsRef<Path>, config: JournalConfig) -> Result<Journal> {
        let dir = dir.as_ref().to_path_buf();
        config.geometry()?;
        fs::create_dir_all(&dir).map_err(|error| {
            JournalError::io("cannot create the journal directory", &dir, error)
        })?;
        if let Some(&last) = segment::list_segments(&dir)?.last() {
            let path = segment::segment_path(&dir, last);
            if segment::is_torn_creation(&path)? {
                tracing::warn!(path = %path.display(),
                    "the last segment's header is zeros: a creation a power loss cut short; the next appender removes it");
            } else {
                tailer::read_header(&path)?;
            }
        }
        let identity = identity::load_or_create(&dir)?;
        Ok(Journal {
            dir,
            config,
            identity,
        })
    }

    /// The journal's identity: a random number (never 0) written once, when the journal
    /// is created (file `identity` in its directory). A journal removed and made again at
    /// the same path has another one: its excerpt indexes start again at 0, so a
    /// committed index or a saved position of the old journal must not be applied to it
    /// (a [`TailerStore`] records the identity its index belongs to).
    pub fn identity(&self) -> u64 {
        self.identity
    }

    /// Takes the journal's one appender (refused with [`JournalError::AppenderHeld`] while
    /// another exists, in this process or another one), cutting a torn tail first.
    pub fn appender(&self) -> Result<Appender> {
        Appender::open(&self.dir, &self.config)
    }

    /// A tailer at index 0 (use [`Tailer::seek`] to start elsewhere).
    pub fn tailer(&self) -> Tailer {
        Tailer::new(&self.dir)
    }

    /// The index of the last excerpt appended (published), or `None` if there is none.
    /// It reads the files, so it sees other processes' appends. A damaged last excerpt
    /// is counted until an appender cuts it.
    pub fn last_index(&self) -> Result<Option<u64>> {
        let mut numbers = segment::list_segments(&self.dir)?;
        if let Some(&last) = numbers.last() {
            if segment::is_torn_creation(&segment::segment_path(&self.dir, last))? {
                // a torn creation holds nothing (the next appender removes it)
                numbers.pop();
            }
        }
        let Some(&last) = numbers.last() else {
            return Ok(None);
        };
        let path = segment::segment_path(&self.dir, last);
        let Some(segment) = segment::Segment::open(&path, false)? else {
            return Err(JournalError::bad_segment(&path, "removed while reading it"));
        };
        let filled = tailer::first_unfilled_slot(&segment, segment.header.geometry.index_slots);
        Ok((segment.header.first_index + filled).checked_sub(1))
    }

    /// The journal's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The numbers of the journal's segments, ascending.
    pub fn segment_numbers(&self) -> Result<Vec<u64>> {
        segment::list_segments(&self.dir)
    }

    /// The file of segment `number`.
    pub fn segment_path(&self, number: u64) -> PathBuf {
        segment::segment_path(&self.dir, number)
    }

    /// Every excerpt the segments index, whole or not, with its place and whether it is
    /// whole: for operators' tools and diagnosis.
    pub fn dump(&self) -> Result<Dump> {
        Dump::new(self.dir.clone())
    }
}
