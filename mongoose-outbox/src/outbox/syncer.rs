//! The syncer thread: takes each group the writer left, writes and fdatasyncs it, and
//! reports what is durable.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::files::{create_segment_file, sync_dir};
use super::Shared;
use crate::format::{watermark, HEADER_LEN};

/// When the syncer takes a group.
#[derive(Clone, Copy, Debug)]
pub(super) struct Group {
    pub(super) records: usize,
    pub(super) bytes: usize,
    pub(super) wait: Duration,
}

/// The syncer's side: the segment being written.
#[derive(Debug)]
pub(super) struct SegmentWriter {
    pub(super) dir: PathBuf,
    pub(super) file: File,
    /// Its length on disk, as far as writes succeeded.
    pub(super) length: u64,
    pub(super) sync: bool,
    /// The owner new segments carry.
    pub(super) owner: [u8; 16],
    /// The watermark file, rewritten in place after each group.
    pub(super) watermark: File,
    /// A watermark write failed (logged once).
    pub(super) watermark_failed: bool,
}

impl SegmentWriter {
    /// Writes one group, rolling to new segments where the writer said, and syncs it.
    fn write_group(&mut self, buffer: &[u8], rolls: &[(usize, u64)]) -> io::Result<()> {
        let mut start = 0;
        for &(offset, first_seq) in rolls {
            self.write(&buffer[start..offset])?;
            if self.sync {
                self.file.sync_data()?;
            }
            self.file = create_segment_file(&self.dir, first_seq, self.owner)?;
            self.length = HEADER_LEN as u64;
            // The new name must be durable before its records count as durable.
            sync_dir(&self.dir)?;
            start = offset;
        }
        self.write(&buffer[start..])?;
        if self.sync {
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// Says in the watermark file that every record up to `seq` is durable (written in
    /// place, not synced: it only ever lags the records, and a lagging one weakens the
    /// check of a cut tail, never makes it wrong).
    fn mark_durable(&mut self, seq: u64) {
        if let Err(error) = self.watermark.write_all_at(&watermark(seq), 0) {
            if !self.watermark_failed {
                self.watermark_failed = true;
                tracing::warn!(dir = %self.dir.display(), %error, "outbox: the watermark cannot be written; a cut tail after this point is taken for a torn write");
            }
        }
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        if let Err(error) = self.file.write_all(bytes) {
            // Leave no partial record behind when the disk allows it (the next open
            // would cut it as a torn write anyway).
            let _ = self.file.set_len(self.length);
            return Err(error);
        }
        self.length += bytes.len() as u64;
        Ok(())
    }
}

/// The syncer thread: takes each group (swapping buffers under the lock), writes and
/// syncs it outside the lock, then publishes the durable sequence.
pub(super) fn run_syncer(shared: Arc<Shared>, mut writer: SegmentWriter, group: Group) {
    let mut spare_buffer = Vec::new();
    let mut spare_rolls = Vec::new();
    loop {
        let last_seq = {
            let mut pending = shared.pending.lock();
            loop {
                if pending.failed.is_some() {
                    return;
                }
                if pending.records == 0 {
                    pending.flush = false;
                    if pending.closing {
                        return;
                    }
                    shared.work.wait(&mut pending);
                    continue;
                }
                if pending.closing
                    || pending.flush
                    || pending.records >= group.records
                    || pending.buffer.len() >= group.bytes
                {
                    break;
                }
                let deadline = pending.first_at.expect("set with the first record") + group.wait;
                if Instant::now() >= deadline {
                    break;
                }
                shared.work.wait_until(&mut pending, deadline);
            }
            std::mem::swap(&mut pending.buffer, &mut spare_buffer);
            std::mem::swap(&mut pending.rolls, &mut spare_rolls);
            pending.records = 0;
            pending.first_at = None;
            pending.flush = false;
            shared.progress.notify_all();
            pending.last_seq
        };
        let written = writer.write_group(&spare_buffer, &spare_rolls);
        spare_buffer.clear();
        spare_rolls.clear();
        if let Err(error) = written {
            tracing::error!(
                dir = %writer.dir.display(),
                %error,
                durable_through = shared.durable.load(Ordering::Acquire),
                "outbox: a group could not be written; no record after the durable one counts"
            );
            let mut pending = shared.pending.lock();
            pending.failed = Some(Arc::new(error));
            shared.progress.notify_all();
            return;
        }
        // before anyone is told (an owner commits its inputs once told): the watermark
        // never lags what was reported durable
        writer.mark_durable(last_seq);
        shared.durable.store(last_seq, Ordering::Release);
        {
            let _pending = shared.pending.lock();
            shared.progress.notify_all();
        }
        if let Some(callback) = shared.on_durable.lock().as_ref() {
            callback(last_seq);
        }
    }
}
