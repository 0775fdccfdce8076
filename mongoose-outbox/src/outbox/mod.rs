//! The outbox: the writer's side (admit, record outcomes, compact) and the syncer
//! thread (write and fdatasync each group, report what is durable).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::fs;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use mongoose_core::sink::OutputKey;
use parking_lot::{Condvar, Mutex};

use crate::format::{
    encode_record, segment_file_name, EncodeError, Framing, HEADER_LEN, KIND_ADMISSION,
    KIND_OUTCOMES, MAX_PAYLOAD_LEN,
};
use crate::recovery::{AdmissionView, Recovery, SegmentMeta};
use crate::{Admission, AdmissionRef, OutboxError, Outcome};

mod files;
mod gated;
mod open;
mod syncer;

use self::files::{io_error, sync_dir};

/// Whose outbox it is: the identity every segment it writes carries in its header, and
/// what opening checks ([`OutboxConfig::owner`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutboxOwner {
    /// No check: segments keep the owner they were written for (new ones get the
    /// owner the others have, or none).
    #[default]
    Any,
    /// Every segment must have been written for this owner (a segment of format
    /// version 1, written before owners, has none and is accepted):
    /// [`OutboxError::Foreign`] otherwise. New segments carry it.
    Is([u8; 16]),
    /// The owner the segments were written for (they must agree), or this one when none
    /// names an owner (a new outbox). [`Recovery::owner`] says which was found.
    AdoptOr([u8; 16]),
}

/// How an outbox is laid out and how it groups its fsyncs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxConfig {
    /// The folder of its segments (created when missing). One outbox per folder.
    pub dir: PathBuf,
    /// A group is written and synced as soon as this many records are pending
    /// (default 1024) ...
    pub group_records: usize,
    /// ... or once its first record has waited this long, in microseconds (default
    /// 2000). While the syncer is busy with a group, records keep coming and the next
    /// group takes all of them: groups grow when the disk is slow.
    pub group_micros: u64,
    /// The writer waits while this many bytes are pending and the syncer is busy
    /// (default 16 MiB): the bound on memory, and how the disk sets the pace.
    pub max_pending_bytes: usize,
    /// A segment is closed and a new one started once it would grow past this many
    /// bytes (default 64 MiB; a record larger than it gets a segment of its own).
    pub segment_bytes: u64,
    /// fdatasync each group before it counts as durable (default true). Without it a
    /// group counts as durable once written: it survives a killed process, not a
    /// power loss.
    pub sync: bool,
    /// Whose outbox it is (default [`OutboxOwner::Any`]).
    pub owner: OutboxOwner,
    /// The last sequence the owner holds saved elsewhere (its snapshot; default 0):
    /// the outbox must reach it, or opening refuses with [`OutboxError::Behind`] (its
    /// newer segments were deleted, or the folder was replaced by an older copy).
    pub saved_through: u64,
    /// The owner's saved state must be followed by the outbox's records (default
    /// false): opening refuses with [`OutboxError::Ahead`] when the records the outbox
    /// keeps begin after `saved_through + 1`. The saved state is then older than the
    /// outbox (an older copy put back after a newer snapshot let the outbox drop the
    /// records between), and replaying the rest would skip those records.
    pub follows_saved: bool,
}

impl OutboxConfig {
    /// The defaults, in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        OutboxConfig {
            dir: dir.into(),
            group_records: 1024,
            group_micros: 2000,
            max_pending_bytes: 16 << 20,
            segment_bytes: 64 << 20,
            sync: true,
            owner: OutboxOwner::Any,
            saved_through: 0,
            follows_saved: false,
        }
    }

    fn check(&self) -> Result<(), OutboxError> {
        if self.group_records == 0 {
            return Err(OutboxError::Config(
                "group_records is 0: set it to 1 or more (1024 is the default)".into(),
            ));
        }
        if self.max_pending_bytes == 0 {
            return Err(OutboxError::Config(
                "max_pending_bytes is 0: set it to 1 or more (16 MiB is the default)".into(),
            ));
        }
        if self.segment_bytes < 4096 {
            return Err(OutboxError::Config(format!(
                "segment_bytes is {}: set it to 4096 or more (64 MiB is the default)",
                self.segment_bytes
            )));
        }
        Ok(())
    }
}

/// What the writer hands the syncer, under a short lock.
#[derive(Debug, Default)]
struct Pending {
    /// Encoded records not yet taken by the syncer.
    buffer: Vec<u8>,
    /// How many records `buffer` holds.
    records: usize,
    /// The sequence of the last record in `buffer`.
    last_seq: u64,
    /// Where in `buffer` a new segment starts, and its first sequence.
    rolls: Vec<(usize, u64)>,
    /// When the first record of `buffer` came.
    first_at: Option<Instant>,
    /// The writer asked for the group now (sync, close).
    flush: bool,
    /// The writer is closing the outbox.
    closing: bool,
    /// The first write error; the outbox takes no more records after it.
    failed: Option<Arc<io::Error>>,
}

/// A callback told of each new durable sequence.
type DurableCallback = Box<dyn Fn(u64) + Send>;

/// What the writer and the syncer share.
struct Shared {
    pending: Mutex<Pending>,
    /// The syncer waits on it for a group.
    work: Condvar,
    /// The writer waits on it for room (backpressure) or for durability (sync).
    progress: Condvar,
    /// Every record up to this sequence is durable.
    durable: AtomicU64,
    on_durable: Mutex<Option<DurableCallback>>,
}

/// A durable outbox: one writer (the processor's group thread) admits records, a
/// syncer thread writes and fdatasyncs them in groups and reports the highest durable
/// sequence. See the crate docs.
pub struct Outbox {
    /// The folder's LOCK file, flock'ed while the outbox is open (the kernel lets go
    /// when the process dies).
    _lock: mongoose_durable::lock::FileLock,
    shared: Arc<Shared>,
    syncer: Option<JoinHandle<()>>,
    config: OutboxConfig,
    /// The sequence the next record gets.
    next_seq: u64,
    /// The length of the last segment, counting what is pending.
    segment_len: u64,
    /// Oldest first; the last is the one being written.
    segments: VecDeque<SegmentMeta>,
    /// Every admitted output without a terminal outcome and its segment's first
    /// sequence (foldhash: one insert per output is on the writer's hot path).
    unsettled: HashMap<OutputKey, u64, foldhash::fast::RandomState>,
    /// The owner new segments carry.
    owner: [u8; 16],
    /// [`Outbox::roll`] asked for a new segment at the next record.
    roll_requested: bool,
    /// The bytes of the records encoded since the outbox opened.
    appended_bytes: u64,
}

impl fmt::Debug for Outbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outbox")
            .field("dir", &self.config.dir)
            .field("next_seq", &self.next_seq)
            .field("durable", &self.durable())
            .field("segments", &self.segments.len())
            .field("unsettled", &self.unsettled.len())
            .finish()
    }
}

impl Outbox {
    /// Opens (or creates) the outbox in `config.dir`: reads every segment back, cuts a
    /// torn write off the end of the last one (a WARN names the file, the offset and
    /// the bytes), syncs what is there and starts the syncer. Damage anywhere else is
    /// [`OutboxError::Damaged`] and changes nothing on disk.
    pub fn open(config: OutboxConfig) -> Result<(Outbox, Recovery), OutboxError> {
        Self::open_scanning(config, None)
    }

    /// [`open`](Self::open), handing each admission to `visit`, in order, borrowed from
    /// the segment's bytes, instead of keeping it: [`Recovery::admissions`] and
    /// [`Recovery::outcomes`] stay empty, and nothing is copied but the unsettled
    /// outputs. For an owner that replays many records at each start.
    ///
    /// # Errors
    /// As [`open`](Self::open); [`OutboxError::Refused`] when `visit` refuses a record.
    pub fn open_with(
        config: OutboxConfig,
        mut visit: impl FnMut(u64, &AdmissionView<'_>) -> Result<(), String>,
    ) -> Result<(Outbox, Recovery), OutboxError> {
        Self::open_scanning(config, Some(&mut visit))
    }

    /// Admits one record: the processor's state change, its source positions and its
    /// outputs, as one checksummed record (the point of no return once durable). Cheap:
    /// it encodes into a buffer the syncer writes; it waits only while
    /// `max_pending_bytes` are pending (the disk is slower than the writer). The
    /// record's sequence;
    /// durable once [`durable`](Self::durable) reaches it.
    ///
    /// A failed write (a full disk) is returned here, now or on the next call, and
    /// nothing after [`durable`](Self::durable) counts as durable.
    pub fn admit(&mut self, admission: &Admission) -> Result<u64, OutboxError> {
        let seq = self.append(KIND_ADMISSION, admission)?;
        self.count_admitted(seq, admission.outputs.iter().map(|output| &output.key));
        Ok(seq)
    }

    /// [`admit`](Self::admit) from borrowed parts, without building an owned
    /// [`Admission`]: the same record on disk (it reads back as an [`Admission`]).
    pub fn admit_ref(&mut self, admission: &AdmissionRef<'_>) -> Result<u64, OutboxError> {
        let seq = self.append(KIND_ADMISSION, admission)?;
        self.count_admitted(seq, admission.outputs.iter().map(|output| output.key));
        Ok(seq)
    }

    /// Notes admission `seq` and its outputs (unsettled) in the last segment.
    fn count_admitted<'k>(&mut self, seq: u64, keys: impl Iterator<Item = &'k OutputKey>) {
        let segment = self.segments.back_mut().expect("a last segment");
        segment.last_admission = seq;
        let first_seq = segment.first_seq;
        for key in keys {
            if let Some(earlier) = self.unsettled.insert(key.clone(), first_seq) {
                self.uncount(earlier);
            }
            self.segments.back_mut().expect("a last segment").unsettled += 1;
        }
    }

    /// Records terminal outcomes of admitted outputs (group-committed like
    /// admissions): they are no longer [`Recovery::unsettled`] after a restart, and
    /// their segments may be compacted. The record's sequence.
    pub fn record_outcomes(
        &mut self,
        outcomes: &[(OutputKey, Outcome)],
    ) -> Result<u64, OutboxError> {
        let seq = self.append(KIND_OUTCOMES, outcomes)?;
        for (key, _) in outcomes {
            if let Some(segment) = self.unsettled.remove(key) {
                self.uncount(segment);
            }
        }
        Ok(seq)
    }

    /// Every record up to this sequence is durable (0: none yet).
    pub fn durable(&self) -> u64 {
        self.shared.durable.load(Ordering::Acquire)
    }

    /// The sequence of the last record admitted or recorded (0: none yet).
    pub fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// The bytes of the records admitted or recorded since the outbox opened, as they
    /// are written to the segments (with [`Recovery::since_saved`] at open: what a
    /// restart would read back).
    pub fn appended_bytes(&self) -> u64 {
        self.appended_bytes
    }

    /// The owner the segments it writes carry (all zeros: none).
    pub fn owner(&self) -> [u8; 16] {
        self.owner
    }

    /// Starts a new segment at the next record (when the current one holds any), so
    /// that [`compact`](Self::compact) can remove the current one once its admissions
    /// are saved elsewhere and its outputs settled: call it after a snapshot.
    pub fn roll(&mut self) {
        self.roll_requested = true;
    }

    /// Calls `callback` from the syncer thread with the highest durable sequence after
    /// each group is synced (written, when `sync` is off). It must be quick: the next
    /// group waits for it. Replaces an earlier callback.
    pub fn on_durable(&self, callback: Box<dyn Fn(u64) + Send>) {
        *self.shared.on_durable.lock() = Some(callback);
    }

    /// Writes and syncs what is pending now and waits until it is durable: the
    /// highest durable sequence.
    pub fn sync(&mut self) -> Result<u64, OutboxError> {
        let target = self.last_seq();
        let mut pending = self.shared.pending.lock();
        pending.flush = true;
        self.shared.work.notify_one();
        loop {
            if let Some(error) = &pending.failed {
                return Err(self.write_error(error));
            }
            if self.durable() >= target {
                return Ok(self.durable());
            }
            self.shared.progress.wait(&mut pending);
        }
    }

    /// Removes the oldest segments, in order, while all of a segment's admissions are
    /// at or before `through_seq`, all its outputs have terminal outcomes and all its
    /// records are durable; never the segment being written. Call it after the state
    /// the admissions carry is saved elsewhere (a snapshot). How many were removed.
    pub fn compact(&mut self, through_seq: u64) -> Result<usize, OutboxError> {
        let durable = self.durable();
        let mut removed = 0;
        while self.segments.len() > 1 {
            let oldest = &self.segments[0];
            // the next segment's file exists for good once its first record is durable
            // (it is created and the folder synced before that record counts): never
            // remove the oldest before, or a crash could leave no segment at all
            if oldest.last_admission > through_seq
                || oldest.unsettled > 0
                || oldest.last_seq > durable
                || self.segments[1].first_seq > durable
            {
                break;
            }
            let path = self.config.dir.join(segment_file_name(oldest.first_seq));
            fs::remove_file(&path).map_err(|source| io_error("remove", &path, source))?;
            // One removal at a time reaches the disk, oldest first, so a crash never
            // leaves a gap between the kept segments.
            sync_dir(&self.config.dir)
                .map_err(|source| io_error("sync the folder", &self.config.dir, source))?;
            tracing::debug!(file = %path.display(), "outbox: compacted a segment");
            self.segments.pop_front();
            removed += 1;
        }
        Ok(removed)
    }

    /// Writes and syncs what is pending, stops the syncer, and says whether every
    /// record became durable.
    pub fn close(mut self) -> Result<(), OutboxError> {
        self.shut_down()
    }

    fn shut_down(&mut self) -> Result<(), OutboxError> {
        let Some(handle) = self.syncer.take() else {
            return Ok(());
        };
        {
            let mut pending = self.shared.pending.lock();
            pending.closing = true;
            self.shared.work.notify_one();
        }
        if handle.join().is_err() {
            tracing::error!(dir = %self.config.dir.display(), "outbox: the syncer thread panicked");
        }
        let pending = self.shared.pending.lock();
        match &pending.failed {
            Some(error) => Err(self.write_error(error)),
            None => Ok(()),
        }
    }

    /// Encodes one record into the pending group; its sequence.
    fn append<T: serde::Serialize + ?Sized>(
        &mut self,
        kind: u8,
        body: &T,
    ) -> Result<u64, OutboxError> {
        let seq = self.next_seq;
        let shared = Arc::clone(&self.shared);
        let mut pending = shared.pending.lock();
        while pending.buffer.len() >= self.config.max_pending_bytes {
            if let Some(error) = &pending.failed {
                return Err(self.write_error(error));
            }
            shared.work.notify_one();
            shared.progress.wait(&mut pending);
        }
        if let Some(error) = &pending.failed {
            return Err(self.write_error(error));
        }
        let start = pending.buffer.len();
        encode_record(&mut pending.buffer, kind, seq, body).map_err(|error| match error {
            EncodeError::Postcard(error) => OutboxError::Encode(error.to_string()),
            EncodeError::TooLarge(bytes) => OutboxError::Encode(format!(
                "the record would be {bytes} bytes, more than the {MAX_PAYLOAD_LEN} a record may hold: split it"
            )),
        })?;
        let record_len = (pending.buffer.len() - start) as u64;
        let header_len = self.segments.back().expect("a last segment").header_len;
        let holds_records = self.segment_len > header_len;
        if !holds_records {
            self.roll_requested = false;
        }
        if holds_records
            && (self.roll_requested || self.segment_len + record_len > self.config.segment_bytes)
        {
            self.roll_requested = false;
            pending.rolls.push((start, seq));
            self.segments.push_back(SegmentMeta {
                first_seq: seq,
                last_seq: seq - 1,
                last_admission: 0,
                unsettled: 0,
                header_len: HEADER_LEN as u64,
                framing: Framing::Layer,
            });
            self.segment_len = HEADER_LEN as u64;
        }
        self.segment_len += record_len;
        self.appended_bytes += record_len;
        self.segments.back_mut().expect("a last segment").last_seq = seq;
        pending.records += 1;
        pending.last_seq = seq;
        if pending.records == 1 {
            pending.first_at = Some(Instant::now());
            shared.work.notify_one();
        } else if pending.records == self.config.group_records
            || pending.buffer.len() >= self.config.max_pending_bytes
        {
            shared.work.notify_one();
        }
        drop(pending);
        self.next_seq += 1;
        Ok(seq)
    }

    /// One fewer unsettled output in the segment that starts at `first_seq`.
    fn uncount(&mut self, first_seq: u64) {
        if let Ok(index) = self
            .segments
            .binary_search_by_key(&first_seq, |segment| segment.first_seq)
        {
            self.segments[index].unsettled -= 1;
        }
    }

    fn write_error(&self, error: &Arc<io::Error>) -> OutboxError {
        OutboxError::Write {
            dir: self.config.dir.clone(),
            durable_through: self.durable(),
            source: Arc::clone(error),
        }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        if let Err(error) = self.shut_down() {
            tracing::error!(%error, "outbox: records were not all made durable when it was dropped");
        }
    }
}
