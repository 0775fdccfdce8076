//! Opening an outbox: reading its segments back, cutting a torn tail, taking the
//! folder's lock and starting the syncer.

use std::collections::VecDeque;
use std::fs::{self, OpenOptions};
use std::io::{self, Seek};
use std::os::unix::fs::FileExt;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::files::{create_segment, io_error, lock_folder, sync_dir, write_header};
use super::syncer::{run_syncer, Group, SegmentWriter};
use super::{Outbox, OutboxConfig, OutboxOwner, Pending, Shared};
use crate::format::{
    segment_header, watermark, Framing, HEADER_LEN, WATERMARK_FILE, WATERMARK_LEN,
};
use crate::recovery::{scan, Recovery, SegmentMeta, Visitor};
use crate::OutboxError;
use mongoose_durable::replace::replace;

impl Outbox {
    pub(super) fn open_scanning(
        config: OutboxConfig,
        visit: Option<&mut Visitor<'_>>,
    ) -> Result<(Outbox, Recovery), OutboxError> {
        config.check()?;
        let dir = config.dir.clone();
        fs::create_dir_all(&dir).map_err(|source| OutboxError::Io {
            action: "create the folder",
            path: dir.clone(),
            source,
        })?;
        // Before reading anything: a live writer's half-written group must not be
        // mistaken for a torn write and cut.
        let lock = lock_folder(&dir)?;
        let scanned = scan(&dir, &config.owner, config.saved_through, visit)?;
        if let Some(first) = scanned.segments.first() {
            if config.follows_saved && first.first_seq > config.saved_through.saturating_add(1) {
                return Err(OutboxError::Ahead {
                    dir: dir.clone(),
                    saved_through: config.saved_through,
                    first_seq: first.first_seq,
                });
            }
        }
        let recovery = scanned.recovery;
        let owner = match config.owner {
            OutboxOwner::Is(id) => id,
            OutboxOwner::AdoptOr(id) => recovery.owner.unwrap_or(id),
            OutboxOwner::Any => recovery.owner.unwrap_or([0; 16]),
        };
        let mut segments: VecDeque<SegmentMeta> = scanned.segments.into();

        let (file, segment_len) = match scanned.tail {
            Some((path, keep)) => {
                if let Some(torn) = &recovery.torn {
                    tracing::warn!(
                        file = %torn.file.display(),
                        offset = torn.offset,
                        bytes = torn.bytes,
                        "outbox: cutting a torn write off the end of the last segment"
                    );
                }
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(|source| io_error("open", &path, source))?;
                let last = segments.back().expect("a last segment");
                let (first_seq, header_len) = (last.first_seq, last.header_len);
                let holds_records = last.last_seq >= first_seq;
                let earlier = last.framing == Framing::Earlier;
                let file = if earlier && !holds_records {
                    // A segment of the earlier layout with no record: replaced whole by
                    // one of this layout (the layer's atomic replace), so that what is
                    // appended to it is framed as its header says.
                    drop(file);
                    replace(&path, &segment_header(first_seq, owner))
                        .map_err(|source| io_error("rewrite", &path, source.into()))?;
                    let last = segments.back_mut().expect("a last segment");
                    last.header_len = HEADER_LEN as u64;
                    last.framing = Framing::Layer;
                    OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(&path)
                        .map_err(|source| io_error("open", &path, source))?
                } else if keep < header_len {
                    file.set_len(0)
                        .map_err(|source| io_error("truncate", &path, source))?;
                    write_header(file, &path, first_seq, owner)?
                } else {
                    let length = file
                        .metadata()
                        .map_err(|source| io_error("read", &path, source))?
                        .len();
                    if length != keep {
                        file.set_len(keep)
                            .map_err(|source| io_error("truncate", &path, source))?;
                    }
                    file
                };
                // What a killed process left in the page cache counts as durable once
                // it is synced.
                if config.sync {
                    file.sync_data()
                        .map_err(|source| io_error("sync", &path, source))?;
                }
                let header_len = segments.back().expect("a last segment").header_len;
                (file, keep.max(header_len))
            }
            None => {
                // a new outbox, or one whose segments are all gone (the watermark said
                // none was ever durable): it goes on after the last record known
                let first_seq = recovery.last_seq + 1;
                let file = create_segment(&dir, first_seq, owner)?;
                sync_dir(&dir).map_err(|source| io_error("sync the folder", &dir, source))?;
                segments.push_back(SegmentMeta {
                    first_seq,
                    last_seq: first_seq - 1,
                    last_admission: 0,
                    unsettled: 0,
                    header_len: HEADER_LEN as u64,
                    framing: Framing::Layer,
                });
                (file, HEADER_LEN as u64)
            }
        };
        // everything kept is durable now: the watermark says so (its first write may
        // need a block, so a full disk fails here rather than in the syncer)
        let watermark_path = dir.join(WATERMARK_FILE);
        let watermark_is_new = !watermark_path.exists();
        let watermark_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&watermark_path)
            .map_err(|source| io_error("create", &watermark_path, source))?;
        watermark_file
            .write_all_at(&watermark(recovery.last_seq), 0)
            .and_then(|()| watermark_file.set_len(WATERMARK_LEN as u64))
            .and_then(|()| {
                if config.sync {
                    watermark_file.sync_data()
                } else {
                    Ok(())
                }
            })
            .map_err(|source| io_error("write", &watermark_path, source))?;
        if watermark_is_new && config.sync {
            // its name durable now, not at the next roll
            sync_dir(&dir).map_err(|source| io_error("sync the folder", &dir, source))?;
        }
        let mut file = file;
        file.seek(io::SeekFrom::End(0))
            .map_err(|source| io_error("seek", &dir, source))?;

        tracing::info!(
            dir = %dir.display(),
            segments = segments.len(),
            admissions = recovery.admissions.len(),
            unsettled = scanned.unsettled_keys.len(),
            last_seq = recovery.last_seq,
            "outbox: opened"
        );
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            work: Condvar::new(),
            progress: Condvar::new(),
            durable: AtomicU64::new(recovery.last_seq),
            on_durable: Mutex::new(None),
        });
        let syncer = SegmentWriter {
            dir: dir.clone(),
            file,
            length: segment_len,
            sync: config.sync,
            owner,
            watermark: watermark_file,
            watermark_failed: false,
        };
        let thread_shared = Arc::clone(&shared);
        let group = Group {
            records: config.group_records,
            bytes: config.max_pending_bytes,
            wait: Duration::from_micros(config.group_micros),
        };
        let handle = std::thread::Builder::new()
            .name("outbox-syncer".into())
            .spawn(move || {
                let shared = Arc::clone(&thread_shared);
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_syncer(thread_shared, syncer, group)
                }));
                if run.is_err() {
                    // A panic (in the on_durable callback, say) must not leave the
                    // writer waiting for a syncer that is gone: it fails the outbox.
                    tracing::error!(
                        "outbox: the syncer thread panicked; the outbox takes no more records"
                    );
                    let mut pending = shared.pending.lock();
                    pending.failed.get_or_insert_with(|| {
                        Arc::new(io::Error::other("the outbox's syncer thread panicked"))
                    });
                    shared.progress.notify_all();
                }
            })
            .map_err(|source| io_error("start the syncer thread for", &dir, source))?;
        // A last segment of the earlier layout that holds records is never appended
        // to: the next record starts a segment of this layout.
        let roll_requested = segments.back().expect("a last segment").framing == Framing::Earlier;
        let outbox = Outbox {
            _lock: lock,
            shared,
            syncer: Some(handle),
            next_seq: recovery.last_seq + 1,
            segment_len,
            segments,
            unsettled: scanned.unsettled_keys.into_iter().collect(),
            config,
            owner,
            roll_requested,
            appended_bytes: 0,
        };
        Ok((outbox, recovery))
    }
}
