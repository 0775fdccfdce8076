//! [`FileEventSource`]: the source itself (its state, its start and stop, its duty
//! cycle). Its parts live beside it:
//!
//! * `open`: opening the input, the identity check of the pointer, following a
//!   rotation across a restart, reconciling with the consumers' saved positions;
//! * `read`: reading, cutting lines, publishing, and the checks at the end of the file;
//! * `backoff`: the wait between reopens of a failing input and its repeated warnings.
//!
//! The commit side is in [`crate::committer`], the positional reads in
//! [`crate::positional`], the configuration in [`crate::config`].

mod backoff;
mod open;
mod read;
mod reconcile;

use reconcile::Pointer;

pub(crate) use self::open::write_identity;

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use mongoose_core::{
    AnyCommitter, CoreError, Epoch, EventSource, FileLag, SourceOutput, SourceStart, SourceState,
    WorkDone,
};
use parking_lot::Mutex;
use tracing::{debug, info, warn};

use self::backoff::{ReopenBackoff, RepeatedWarning};
use self::open::SeenAtPath;
use self::read::OpenInput;
use crate::committer::{CommitFront, CommitShared, PointerCommitter};
use crate::config::{FileSourceConfig, FileSourceStatus};
use crate::identity::FileKey;
use crate::line::{Line, ReadBuffers};
use crate::pointer::{pointer_path_in, PointerDamage, PointerFile, PointerRecord, LAYOUT_VERSION};

/// Turns a line into the feed's item; an error filters the line (counted and logged,
/// its position committed with the items around it: never a silent loss).
///
/// It takes the [`Line`] by value: the identity mapper of a feed of `Line`s moves it
/// into the feed without touching its reference count, and a mapper that parses the
/// line drops it when done.
pub type LineMapper<T> = Box<dyn FnMut(Line) -> Result<T, String> + Send>;

/// Called between the open of the input file and the read of its identity (tests).
#[cfg(feature = "testsuite")]
type OpenHook = Box<dyn FnMut() + Send>;

/// A file source: reads lines of a file by bytes, maps each line to an item and
/// publishes it with the byte offset after the line as its position.
///
/// With [`ReadStrategy::Committed`](crate::ReadStrategy::Committed) the offset is committed to the pointer file
/// `<input>.readPointer` only once the line was processed by every consumer (the
/// output's acknowledgement), never when read. See the crate documentation.
pub struct FileEventSource<T> {
    config: FileSourceConfig,
    mapper: LineMapper<T>,
    output: Arc<dyn SourceOutput<T, u64>>,
    shared: Arc<Mutex<CommitShared>>,
    front: Arc<CommitFront>,
    /// The read buffers and the chunks the lines borrow.
    buffers: ReadBuffers,
    /// `config.path`, shared by the lines read from it.
    path: Arc<Path>,
    input: Option<OpenInput>,
    /// A mapped line a full queue refused, and its position.
    pending: Option<(T, u64)>,
    epoch: Epoch,
    started: bool,
    ended: bool,
    /// Opened at least once since start (later opens are reopens).
    opened_since_start: bool,
    /// The reason the open file is being read to its end before a reopen.
    draining: Option<String>,
    /// Where the old file was read to, for the identity check of a reopen.
    reopen_from: Option<u64>,
    /// The key of the file last opened.
    last_key: Option<FileKey>,
    /// The open file is the pointer's file found rotated at a restart: at its end the
    /// source waits for its lines to be committed, then resets to the file at the path.
    finishing_rotated: Option<PathBuf>,
    /// A rotated file was finished: the next open is of another file (a new epoch),
    /// even if its leading bytes are the same (a fixed preamble).
    rotated_finished: bool,
    /// The reopen that follows was announced at INFO as an ordinary rotation (a rename,
    /// or a truncation after everything was read): its reset of the pointer to 0 is
    /// expected, not a warning.
    rotation_announced: bool,
    /// The open file has no epoch yet (no whole first line when it was opened from its
    /// start): its identity becomes the epoch before its first line is published.
    identity_pending: bool,
    /// The file at the path when the open file was seen replaced, opened then: read
    /// next even if another rotation renamed it away meanwhile (the old file is
    /// finished and committed first).
    next_file: Option<File>,
    /// The file at the path when a restart began finishing another file (the pointer's
    /// file rotated away, or a copy of it): what it held then must still be there when
    /// the source comes to it, else it was cut in place (copytruncate) meanwhile and
    /// those lines are only in a copy the source does not read: a possible loss.
    seen_at_path: Option<SeenAtPath>,
    paused: bool,
    reported: Option<(SourceState, Option<String>)>,
    status: FileSourceStatus,
    #[cfg(feature = "testsuite")]
    open_hook: Option<OpenHook>,
    /// The wait between reopens of an input that fails to open or to read.
    backoff: ReopenBackoff,
    /// The input cannot be opened (other than not existing yet).
    open_failures: RepeatedWarning,
    /// The input cannot be read.
    read_failures: RepeatedWarning,
    /// A file of a glob ([`crate::GlobFileSource`]): the glob decides what a file at
    /// the path that is not the open file means (the open file renamed inside the
    /// glob, or rotated out of it), and records the losses.
    glob_member: bool,
    /// (A glob's file) the path names another file than the open one: the open file
    /// is read on, nothing else is opened, until the glob follows the open file to its
    /// new name ([`FileEventSource::follow_rename`]) or confirms that it left the glob
    /// ([`FileEventSource::confirm_replacement`]).
    path_replaced: bool,
    /// Where a loss this source finds is recorded at once (a single COMMITED file:
    /// `<pointer>.losses`), so a kill cannot make it forgotten.
    loss_file: Option<PathBuf>,
    /// The read and committed offsets last reported in the feed's `files` status.
    files_reported: Option<(u64, u64)>,
    /// What wakes the source driver's thread (given before `start`).
    wakeup: Option<Arc<mongoose_core::Wakeup>>,
    /// The inotify watch that wakes it when the file changes (a single file; a glob's
    /// file is watched by its glob's folder watch).
    wake: Option<crate::wake::FileWake>,
    /// The last report of the feed's `files` status, kept so that its path is not
    /// made again at every report.
    file_lag: Option<FileLag>,
}

/// How many bytes a file source reads between two reports of its file's offsets
/// while it is behind: 16 MiB.
const FILE_LAG_REPORT_BYTES: u64 = 16 * 1024 * 1024;

impl<T> fmt::Debug for FileEventSource<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileEventSource")
            .field("config", &self.config)
            .field("epoch", &self.epoch)
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> FileEventSource<T> {
    /// A source reading `config.path` into `output`, mapping each line with `mapper`.
    /// Its start makes PAUSE the feed's default policy (an explicit policy still wins).
    pub fn new(
        config: FileSourceConfig,
        mapper: impl FnMut(Line) -> Result<T, String> + Send + 'static,
        output: Arc<dyn SourceOutput<T, u64>>,
    ) -> Self {
        let pointer_path = pointer_path_in(config.state_dir.as_deref(), &config.path);
        let loss_file = config
            .strategy
            .has_pointer()
            .then(|| crate::losses::loss_path(&pointer_path));
        let shared = Arc::new(Mutex::new(CommitShared {
            source_name: config.name.clone(),
            pointer_path,
            pointer: None,
            record: PointerRecord::default(),
            acknowledged: None,
            input: None,
            stopped: false,
            lane: None,
        }));
        FileEventSource {
            buffers: ReadBuffers::new(config.read_buffer_bytes),
            path: Arc::from(config.path.as_path()),
            config,
            mapper: Box::new(mapper),
            output,
            shared,
            front: Arc::new(CommitFront::default()),
            input: None,
            pending: None,
            epoch: Epoch::NONE,
            started: false,
            ended: false,
            opened_since_start: false,
            draining: None,
            reopen_from: None,
            last_key: None,
            finishing_rotated: None,
            rotated_finished: false,
            rotation_announced: false,
            identity_pending: false,
            next_file: None,
            seen_at_path: None,
            paused: false,
            reported: None,
            status: FileSourceStatus {
                state: SourceState::Starting,
                detail: None,
                epoch: Epoch::NONE,
                read_position: 0,
                committed_position: 0,
                lines_published: 0,
                lines_filtered: 0,
                pauses: 0,
                unterminated_bytes: 0,
                reopens: 0,
                resets: 0,
                ignored_old_acknowledgements: 0,
                rotated_files_finished: 0,
                rotated_unread_files: 0,
            },
            #[cfg(feature = "testsuite")]
            open_hook: None,
            backoff: ReopenBackoff::default(),
            open_failures: RepeatedWarning::default(),
            read_failures: RepeatedWarning::default(),
            glob_member: false,
            path_replaced: false,
            loss_file,
            files_reported: None,
            wakeup: None,
            wake: None,
            file_lag: None,
        }
    }

    /// A source of lines: `FileEventSource::<Line>::of_lines` publishes each [`Line`]
    /// as it is (no allocation per line); a feed of `String`s gets a lossy copy of
    /// each (U+FFFD for bytes that are not UTF-8).
    pub fn of_lines(config: FileSourceConfig, output: Arc<dyn SourceOutput<T, u64>>) -> Self
    where
        T: From<Line>,
    {
        Self::new(config, |line| Ok(T::from(line)), output)
    }

    /// The configuration.
    pub fn config(&self) -> &FileSourceConfig {
        &self.config
    }

    /// The pointer file's path (used only by COMMITED).
    pub fn pointer_path(&self) -> PathBuf {
        self.shared.lock().pointer_path.clone()
    }

    /// The epoch of the positions published now.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The state last reported.
    pub fn state(&self) -> SourceState {
        self.status.state
    }

    /// The offset committed in the pointer file (COMMITED), or 0.
    pub fn committed_position(&self) -> u64 {
        self.shared.lock().record.offset
    }

    /// A snapshot of the source's progress.
    pub fn status(&self) -> FileSourceStatus {
        let mut status = self.status.clone();
        let shared = self.shared.lock();
        status.committed_position = shared.record.offset;
        status.ignored_old_acknowledgements = self.front.ignored.load(Ordering::Relaxed);
        status.epoch = self.epoch;
        status
    }

    /// Test hook (feature `testsuite`, for this crate's tests): called after the input
    /// file is opened and before the opened file's identity is read, so a test can
    /// rotate the file at exactly that moment.
    #[cfg(feature = "testsuite")]
    pub fn set_open_hook(&mut self, hook: impl FnMut() + Send + 'static) {
        self.open_hook = Some(Box::new(hook));
    }

    fn report(&mut self, state: SourceState, detail: Option<String>) {
        self.report_str(state, detail.as_deref());
    }

    /// Reports a state: nothing when it is the one last reported (no allocation: a
    /// pause per queue-full of lines reports the same state each time).
    fn report_str(&mut self, state: SourceState, detail: Option<&str>) {
        let changed = match &self.reported {
            Some((last_state, last_detail)) => {
                *last_state != state || last_detail.as_deref() != detail
            }
            None => true,
        };
        if !changed {
            return;
        }
        if let (SourceState::Behind, Some(reason)) = (state, detail) {
            info!(source = %self.config.name, state = state.as_str(), reason, "file source state");
        } else {
            debug!(source = %self.config.name, state = state.as_str(), "file source state");
        }
        self.output.report_state(state, detail);
        self.status.state = state;
        self.status.detail = detail.map(str::to_owned);
        self.reported = Some((state, detail.map(str::to_owned)));
    }

    /// Reports a rotated (or replaced) input that was not, or may not have been, read to
    /// its end: counted, given to the output (the feed is not lossless), and recorded
    /// in the loss file at once (a glob records its files' losses itself).
    fn report_unread(&mut self, file: &str, what: &str) {
        self.status.rotated_unread_files += 1;
        self.output.report_rotated_unread(file, None);
        if let Some(loss_file) = self.loss_file.as_ref() {
            let record = crate::losses::LossRecord::now(&self.config.name, what.to_owned());
            if let Err(error) = crate::losses::append(loss_file, &record) {
                warn!(source = %self.config.name, file = %loss_file.display(), %error,
                    "cannot record the loss beside the pointer: a restart before this run ends will not report it");
            }
        }
    }

    /// Reports the open file's committed offset, size and lag in the feed's `files`
    /// status (what the progress lines, `mongoose_feed_lag_bytes` and `mongoose top`
    /// show as bytes). The committed offset is the pointer's (what a restart resumes
    /// from), not the offset read: lines read and not yet processed are still behind
    /// (issue 36, item 3); a strategy without a pointer reports what it read.
    ///
    /// Reported when the source catches up after reading (the size grew), when
    /// everything read is committed, and every [`FILE_LAG_REPORT_BYTES`] either offset
    /// moves in between. A commit short of what was read is not reported on its own,
    /// so the lag shown may be larger than the lag, never smaller, until everything
    /// read is committed. Never per line, nor per commit: a report allocates.
    fn report_file_lag(&mut self) {
        let Some(input) = self.input.as_ref() else {
            return;
        };
        let read = input.position();
        let committed = if self.config.strategy.has_pointer() {
            self.shared.lock().record.offset
        } else {
            read
        };
        let due = match self.files_reported {
            None => true,
            Some(reported) if reported == (read, committed) => false,
            Some((read_then, committed_then)) => {
                (self.status.state == SourceState::CaughtUp && read != read_then)
                    || (committed != committed_then && committed == read)
                    || read.abs_diff(read_then) >= FILE_LAG_REPORT_BYTES
                    || committed.abs_diff(committed_then) >= FILE_LAG_REPORT_BYTES
            }
        };
        if !due {
            return;
        }
        let Ok(metadata) = input.file.metadata() else {
            return;
        };
        self.files_reported = Some((read, committed));
        let size = metadata.len();
        let lag = match self.file_lag.as_mut() {
            Some(lag) if Path::new(&lag.path) == &*self.path => lag,
            _ => self.file_lag.insert(FileLag {
                lane: 0,
                path: self.path.display().to_string(),
                committed: 0,
                size: 0,
                lag: 0,
            }),
        };
        lag.committed = committed;
        lag.size = size;
        lag.lag = size.saturating_sub(committed);
        self.output.report_files(std::slice::from_ref(lag));
    }

    /// The size of the open file when its lag was last reported (`None`: never).
    pub(super) fn last_seen_size(&self) -> Option<u64> {
        self.file_lag
            .as_ref()
            .filter(|lag| Path::new(&lag.path) == &*self.path)
            .map(|lag| lag.size)
    }

    fn set_epoch(&mut self, epoch: Epoch) {
        self.epoch = epoch;
        self.status.epoch = epoch;
        self.output.set_epoch(epoch);
    }
}

impl<T: Send + 'static> EventSource for FileEventSource<T> {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn start(&mut self) -> Result<SourceStart, CoreError> {
        // a restart begins clean: no buffer, no pending line (book: guarantees/epochs-and-identity.md)
        self.input = None;
        self.pending = None;
        self.draining = None;
        self.reopen_from = None;
        self.finishing_rotated = None;
        self.rotated_finished = false;
        self.rotation_announced = false;
        self.next_file = None;
        self.seen_at_path = None;
        self.ended = false;
        self.paused = false;
        if let (Some(wakeup), false) = (self.wakeup.as_ref(), self.glob_member) {
            // watched before the first open: a change in between is not missed
            self.wake = crate::wake::FileWake::new(
                &self.config.name,
                &self.config.path,
                Arc::clone(wakeup),
            );
        }
        self.opened_since_start = false;
        self.path_replaced = false;
        self.reported = None;
        self.backoff = ReopenBackoff::default();
        self.open_failures = RepeatedWarning::default();
        self.read_failures = RepeatedWarning::default();
        let mut committer = None;
        if self.config.strategy.has_pointer() {
            self.adopt_pointer_beside_the_input()?;
            let mut shared = self.shared.lock();
            let pointer_path = shared.pointer_path.clone();
            let opened = PointerFile::open(&pointer_path)
                .map_err(|error| shared.io_error("cannot open", error))?;
            match opened.decoded.damage {
                Some(PointerDamage::Empty) | Some(PointerDamage::TooShortForAnOffset(_))
                    if !opened.created =>
                {
                    warn!(source = %self.config.name, pointer = %pointer_path.display(), damage = ?opened.decoded.damage,
                        "the pointer file is too short to hold an offset: reading from the start; it was extended");
                }
                Some(PointerDamage::Short(length)) => {
                    warn!(source = %self.config.name, pointer = %pointer_path.display(), length,
                        "the pointer file is shorter than 1,024 bytes: keeping its offset; it was extended");
                }
                Some(damage @ PointerDamage::BadFingerprintLength(_))
                | Some(damage @ PointerDamage::NegativeOffset(_)) => {
                    warn!(source = %self.config.name, pointer = %pointer_path.display(), ?damage,
                        "the pointer file is damaged: repaired");
                }
                Some(PointerDamage::Checksum) => {
                    warn!(source = %self.config.name, pointer = %pointer_path.display(),
                        "the pointer file's bytes fail their check in both copies (a damaged disk block or a stray write): its record is not trusted");
                }
                _ if opened.decoded.mirrored => {
                    warn!(source = %self.config.name, pointer = %pointer_path.display(), offset = opened.decoded.record.offset,
                        "the pointer file's first copy fails its check (a write torn by a crash, or a changed byte): its mirror copy, whole, is read and written back");
                }
                _ => {}
            }
            // whole, of this layout, with an epoch, or naming a file whose epoch is not
            // taken yet (no whole first line when it was opened)
            let trusted = !opened.created
                && opened.decoded.damage.is_none()
                && opened.decoded.record.layout_version == LAYOUT_VERSION
                && (opened.decoded.record.epoch != 0 || opened.decoded.record.file_key != 0);
            // a pointer of a layout without epochs (its offset only), whole: its offset is
            // kept and the epoch is taken at the first open (book:
            // guarantees/epochs-and-identity.md)
            let legacy = !opened.created
                && matches!(opened.decoded.damage, None | Some(PointerDamage::Short(_)))
                && opened.decoded.record.epoch == 0
                && opened.decoded.record.offset > 0;
            if opened.created {
                info!(source = %self.config.name, pointer = %pointer_path.display(),
                    "no pointer file: a new one was created");
            }
            // a pointer without an epoch (new, short or damaged) gets one at the
            // identity check of the first open, unless the consumers' saved state
            // says where to resume
            let reconciled = self.reconcile(
                opened.decoded.record,
                if trusted {
                    Pointer::Trusted
                } else if legacy {
                    Pointer::Legacy
                } else if opened.created {
                    Pointer::New
                } else {
                    Pointer::Lost
                },
                &pointer_path,
            )?;
            // a glob's file: its lane in the pointer (one written before the field, or
            // whose lane bytes were damaged, gets it now)
            shared.record = shared.stamped(reconciled);
            shared.pointer = Some(opened.file);
            if shared.record != opened.decoded.record || opened.decoded.mirrored {
                let record = shared.record;
                shared.write_record(record)?;
            }
            shared.acknowledged = None;
            shared.stopped = false;
            self.front.reset_to(shared.record.epoch);
            drop(shared);
            committer = Some(AnyCommitter::new(PointerCommitter {
                shared: Arc::clone(&self.shared),
                front: Arc::clone(&self.front),
                pending: None,
                source_name: self.config.name.clone(),
            }));
        }
        self.started = true;
        self.report(SourceState::Behind, Some("starting".to_owned()));
        Ok(SourceStart {
            // the pointer's (or the consumers' saved) epoch; a file found replaced at
            // its first open starts a new one then (`SourceOutput::set_epoch`)
            epoch: self.epoch,
            pause_by_default: true,
            committer,
        })
    }

    fn do_work(&mut self) -> Result<WorkDone, CoreError> {
        if !self.started {
            return Ok(WorkDone(0));
        }
        // the source driver polls the acknowledgements and replays paused items around
        // this cycle (and commits again after a cycle that published, book: guarantees/commit-after-processing.md commit lag)
        if self.ended {
            return Ok(WorkDone(0));
        }
        let mut work = 0;
        if self.input.is_none() {
            if !self.open_input()? {
                return Ok(WorkDone(0));
            }
            work += 1;
        }
        work += self.read_and_publish()?;
        if !self.glob_member {
            self.report_file_lag();
        }
        Ok(WorkDone(work))
    }

    fn set_wakeup(&mut self, wakeup: Arc<mongoose_core::Wakeup>) {
        self.wakeup = Some(wakeup);
    }

    fn quiet_for(&self) -> Option<std::time::Duration> {
        self.is_idle_at_the_end()
            .then_some(crate::wake::SAFETY_LOOK)
    }

    fn stop(&mut self) -> Result<(), CoreError> {
        if !self.started {
            return Ok(());
        }
        // what was processed is committed by the source driver before this stop (and a
        // commit that failed retried), once more after it
        self.started = false;
        self.wake = None;
        self.pending = None;
        self.input = None;
        let mut shared = self.shared.lock();
        // the final commit of a clean stop is written back before the pointer is
        // unmapped: a power loss after a clean exit cannot take it back (issue 9, item
        // 10). A commit made later re-maps and writes durably too.
        let flushed = shared
            .pointer
            .as_ref()
            .map_or(Ok(()), PointerFile::flush_durable);
        // unmap under the lock a late commit takes; it re-maps for its write
        shared.pointer = None;
        shared.input = None;
        shared.stopped = true;
        if let Err(error) = flushed {
            warn!(source = %self.config.name, %error,
                "the pointer file could not be written back at stop: after a power loss the lines after an earlier commit are delivered again");
            return Err(shared.io_error("cannot write back (msync) the", error));
        }
        Ok(())
    }
}

/// What a many-file source ([`crate::GlobFileSource`]) asks of each file's source.
impl<T: Send + 'static> FileEventSource<T> {
    /// Bytes of the open file after the last line taken (not read yet, or an
    /// unterminated last line), by `fstat` of the open handle; `None` when no file is
    /// open.
    pub fn open_file_unread_bytes(&self) -> Option<u64> {
        let input = self.input.as_ref()?;
        let size = input.file.metadata().ok()?.len();
        Some(size.saturating_sub(input.position()))
    }

    /// Whether a line a full queue refused waits to be offered again.
    pub fn has_pending_line(&self) -> bool {
        self.pending.is_some()
    }

    /// Makes this source a file of a glob, read on `lane`: see `glob_member`. Every
    /// pointer record it writes holds the lane.
    pub(crate) fn set_glob_member(&mut self, lane: u32) {
        self.glob_member = true;
        self.loss_file = None;
        self.shared.lock().lane = Some(lane);
    }

    /// What the pointer file holds (COMMITED).
    pub(crate) fn pointer_record(&self) -> PointerRecord {
        self.shared.lock().record
    }

    /// The key of the open file (from its handle), if one is open.
    pub(crate) fn open_file_key(&self) -> Option<FileKey> {
        self.input.as_ref().and_then(OpenInput::key)
    }

    /// Whether the open file is the pointer's file found rotated at the start (it is
    /// being finished under another name than the path).
    pub(crate) fn finishing_rotated(&self) -> bool {
        self.finishing_rotated.is_some()
    }

    /// (A glob's file) the path names another file than the open one, and the glob
    /// has not said yet what that means.
    pub(crate) fn path_replaced(&self) -> bool {
        self.path_replaced
    }

    /// (A glob's file) the open file is not under another name of the glob: it was
    /// rotated out of it or deleted. It is read to its end (its lines committed under
    /// its epoch), then the file at the path is opened under a new epoch, as a single
    /// file's source does at once.
    pub(crate) fn confirm_replacement(&mut self) {
        if !std::mem::take(&mut self.path_replaced) {
            return;
        }
        let reason = format!(
            "the input file {} was replaced while being read",
            self.config.path.display()
        );
        let line =
            crate::rotation::renamed_line(&self.config.path, self.open_file_key().map(|key| key.0));
        info!(source = %self.config.name, "{line}");
        self.rotation_announced = true;
        // hold the new file now: a second rotation while the old one is finished
        // renames it away from the path (issue 11)
        self.next_file = File::open(&self.config.path).ok();
        self.report(SourceState::Behind, Some(reason.clone()));
        self.draining = Some(reason);
    }

    /// With a state folder: creates it, and adopts the pointer (and its loss files) an
    /// older run left beside the input (moved, or copied when the input's folder cannot
    /// be written; the state folder's copy wins when both exist).
    fn adopt_pointer_beside_the_input(&self) -> Result<(), CoreError> {
        let Some(state_dir) = self.config.state_dir.as_deref() else {
            return Ok(());
        };
        if self.glob_member {
            // its glob adopted the state of its folder at the glob's start
            return Ok(());
        }
        let name = &self.config.name;
        std::fs::create_dir_all(state_dir).map_err(|error| {
            CoreError::io(
                format!(
                    "source '{name}': cannot create its state folder {}",
                    state_dir.display()
                ),
                error,
            )
        })?;
        let old = crate::pointer::pointer_path_for(&self.config.path);
        let new = self.shared.lock().pointer_path.clone();
        crate::adopt::adopt_with_losses(name, &old, &new).map_err(|error| {
            CoreError::io(
                format!(
                    "source '{name}': cannot adopt the pointer {} into the data folder {}",
                    old.display(),
                    state_dir.display()
                ),
                error,
            )
        })?;
        Ok(())
    }

    /// (A glob's file) the file was renamed inside the glob to `new_path`: the source
    /// reads on from its open handle (or reopens the file under its new name), and its
    /// pointer file moves with it, without a stop: nothing in flight is read twice.
    /// The mapped pointer follows the rename (the same inode), so a commit made now or
    /// later writes the moved file.
    pub(crate) fn follow_rename(&mut self, new_path: &Path) -> Result<(), CoreError> {
        let new_pointer = pointer_path_in(self.config.state_dir.as_deref(), new_path);
        {
            let mut shared = self.shared.lock();
            if self.config.strategy.has_pointer() && shared.pointer_path != new_pointer {
                match crate::pointer::rename_pointer(&shared.pointer_path, &new_pointer) {
                    Ok(_) => {}
                    Err(error) => {
                        return Err(CoreError::io(
                            format!(
                            "cannot move the pointer file {} to {} after a rename inside the glob",
                            shared.pointer_path.display(),
                            new_pointer.display()
                        ),
                            error,
                        ))
                    }
                }
            }
            shared.pointer_path = new_pointer;
            // the pointer is this path's now: a restart does not take it for another
            // input's
            if shared.pointer.is_some() && shared.record.epoch != 0 {
                let record = PointerRecord {
                    owner: crate::pointer::owner_of(new_path),
                    ..shared.record
                };
                shared.write_record(record)?;
            }
        }
        self.config.path = new_path.to_path_buf();
        self.path = Arc::from(new_path);
        if let Some(input) = self.input.as_mut() {
            input.set_path(Arc::clone(&self.path));
        }
        // the open file (or the pointer's, to be reopened) is the one at the path now:
        // whatever the old path named instead is another file, not this lane's, and a
        // rotated file being finished is finished under its new name, not reset after
        self.path_replaced = false;
        self.next_file = None;
        self.seen_at_path = None;
        self.finishing_rotated = None;
        if self.draining.take().is_some() {
            self.report(SourceState::Behind, Some("reading".to_owned()));
        }
        Ok(())
    }
}
