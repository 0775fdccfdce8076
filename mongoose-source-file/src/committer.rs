//! The commit side of a COMMITED source: the commit state it shares with its
//! committer ([`CommitShared`], under one lock), what the committer reads without that
//! lock ([`CommitFront`]), and the committer it registers with its output
//! ([`PointerCommitter`]).

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mongoose_core::{CoreError, Epoch, SourceCommitter};
use parking_lot::Mutex;
use tracing::debug;

use crate::pointer::{PointerFile, PointerRecord, MAX_FINGERPRINT_BYTES};
use crate::positional::grown_fingerprint;

/// The commit state shared by the source and its committer, under the lock that
/// `stop` also takes.
#[derive(Debug)]
pub(crate) struct CommitShared {
    pub(crate) source_name: String,
    pub(crate) pointer_path: PathBuf,
    pub(crate) pointer: Option<PointerFile>,
    /// What the pointer file holds.
    pub(crate) record: PointerRecord,
    /// The highest acknowledged offset of the current epoch not yet committed. Kept
    /// until a write of it succeeds, so a failed commit is retried (issue 9, item 8).
    pub(crate) acknowledged: Option<u64>,
    /// The open input (for fingerprint growth: always the file being read).
    pub(crate) input: Option<Arc<File>>,
    pub(crate) stopped: bool,
    /// (A glob's file) its lane: written into every record this source writes, so
    /// that the glob can rebuild its lane registry from the pointers.
    pub(crate) lane: Option<u32>,
}

impl CommitShared {
    pub(crate) fn io_error(&self, what: &str, error: io::Error) -> CoreError {
        CoreError::io(
            format!(
                "source '{}': {what} pointer file {}",
                self.source_name,
                self.pointer_path.display()
            ),
            error,
        )
    }

    /// `record` with this source's lane, if it has one (a glob's file).
    pub(crate) fn stamped(&self, record: PointerRecord) -> PointerRecord {
        match self.lane {
            Some(lane) => PointerRecord { lane, ..record },
            None => record,
        }
    }

    /// Writes the whole record (with this source's lane, if it has one).
    pub(crate) fn write_record(&mut self, record: PointerRecord) -> Result<(), CoreError> {
        let record = self.stamped(record);
        match self.pointer.as_mut() {
            Some(pointer) => pointer
                .write(&record)
                .map_err(|error| self.io_error("cannot write", error))?,
            None => {
                // after stop: re-map for this write only, and make it durable as the
                // stop's own write is (issue 9, item 10)
                let mut opened = PointerFile::open(&self.pointer_path)
                    .map_err(|error| self.io_error("cannot re-map", error))?;
                opened
                    .file
                    .write_durable(&record)
                    .map_err(|error| self.io_error("cannot write", error))?;
            }
        }
        self.record = record;
        Ok(())
    }

    /// Commits the acknowledged offset: forward only, growing the fingerprint of the
    /// open file while it covers less than 4 KB. On an error the offset stays
    /// acknowledged, and the next commit writes it.
    fn commit(&mut self) -> Result<(), CoreError> {
        let Some(offset) = self.acknowledged else {
            return Ok(());
        };
        if offset <= self.record.offset {
            self.acknowledged = None;
            return Ok(());
        }
        if self.pointer.is_none() && !self.stopped {
            // not started: nothing mapped to write to
            return Ok(());
        }
        let mut record = self.record;
        record.offset = offset;
        if record.fingerprint_length < MAX_FINGERPRINT_BYTES {
            if let Some(input) = self.input.as_ref() {
                // the file being read, by positional reads of its handle, never the
                // path (the path may already name a replacement)
                // grown only over the same leading bytes: a file rewritten in place
                // keeps the old fingerprint, and its next open sees the change
                if let Some((length, fingerprint)) = grown_fingerprint(input, &record) {
                    record.fingerprint_length = length;
                    record.fingerprint = fingerprint;
                }
            }
        }
        // the whole record with its check, even when only the offset moved (a copy
        // whose check holds is never written in parts)
        self.write_record(record)?;
        self.acknowledged = None;
        Ok(())
    }
}

/// What the committer reads on every acknowledgement without taking the commit lock.
#[derive(Debug, Default)]
pub(crate) struct CommitFront {
    /// The epoch of the pointer now.
    pub(crate) epoch: AtomicU64,
    /// Bumped at each reset: an acknowledgement taken before it is forgotten.
    pub(crate) generation: AtomicU64,
    /// Acknowledgements of an old epoch ignored.
    pub(crate) ignored: AtomicU64,
}

impl CommitFront {
    /// A new epoch after a reset: what was acknowledged before is forgotten.
    pub(crate) fn reset_to(&self, epoch: u64) {
        self.epoch.store(epoch, Ordering::Release);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// The committer a COMMITED source registers with its output.
pub(crate) struct PointerCommitter {
    pub(crate) shared: Arc<Mutex<CommitShared>>,
    pub(crate) front: Arc<CommitFront>,
    /// The highest acknowledged offset since the last commit, with the reset
    /// generation it was acknowledged in.
    pub(crate) pending: Option<(u64, u64)>,
    pub(crate) source_name: String,
}

impl SourceCommitter<u64> for PointerCommitter {
    fn acknowledged(&mut self, sequence: u64, epoch: Epoch, position: u64) {
        if epoch.get() != self.front.epoch.load(Ordering::Acquire) {
            // an item of the old file: never committed into the new file's pointer
            // (book: guarantees/epochs-and-identity.md)
            self.front.ignored.fetch_add(1, Ordering::Relaxed);
            debug!(
                source = %self.source_name, sequence, %epoch, position,
                "ignoring an acknowledgement of an old epoch"
            );
            return;
        }
        let generation = self.front.generation.load(Ordering::Acquire);
        self.pending = match self.pending {
            Some((at_generation, offset)) if at_generation == generation => {
                Some((generation, offset.max(position)))
            }
            _ => Some((generation, position)),
        };
    }

    fn commit(&mut self) -> Result<(), CoreError> {
        let mut shared = self.shared.lock();
        if let Some((generation, offset)) = self.pending.take() {
            if generation == self.front.generation.load(Ordering::Acquire) {
                shared.acknowledged = Some(shared.acknowledged.map_or(offset, |at| at.max(offset)));
            } else {
                // acknowledged before a reset: an offset of the old file
                // (book: guarantees/epochs-and-identity.md)
                debug!(source = %self.source_name, offset, "forgetting an acknowledgement made before a reset");
            }
        }
        // what an earlier commit failed to write is still acknowledged: written now
        // (issue 9, item 8)
        shared.commit()
    }

    fn commits_after_stop(&self) -> bool {
        true
    }
}
