//! [`FileEventSource`]: reading, publishing, identity checks and the committer.

use std::fmt;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::{
    BatchEnd, CoreError, Epoch, EventSource, Refusal, SourceOutput, SourceState, TryPublish,
    WorkDone,
};
use parking_lot::Mutex;
use tracing::{debug, info, warn};

use crate::committer::{CommitFront, CommitShared, PointerCommitter};
use crate::config::{FileSourceConfig, FileSourceStatus, ReadStrategy};
use crate::identity::{key_of, FileKey};
use crate::line::{Chunk, Line, ReadBuffers};
use crate::pointer::{
    fnv1a, pointer_path_for, PointerDamage, PointerFile, PointerRecord, LAYOUT_VERSION,
};
use crate::positional::{
    align_to_line_start, end_of_last_line, fingerprint_of, read_exact_at, starts_as_fingerprinted,
};
use crate::rotation;
use crate::split::next_line;

/// Turns a line into the feed's item; an error filters the line (counted and logged,
/// its position committed with the items around it: never a silent loss).
///
/// It takes the [`Line`] by value: the identity mapper of a feed of `Line`s moves it
/// into the feed without touching its reference count, and a mapper that parses the
/// line drops it when done.
pub type DataMapper<T> = Box<dyn FnMut(Line) -> Result<T, String> + Send>;

/// The open input file and the last chunk read from it.
#[derive(Debug)]
struct OpenInput {
    file: Arc<File>,
    key: Option<FileKey>,
    /// The file being read (the lines' [`Line::path`]).
    path: Arc<Path>,
    /// The last read: its lines not yet taken, then a partial line.
    chunk: Arc<Chunk>,
    /// The file offset of `chunk[0]`.
    chunk_offset: u64,
    /// Bytes of the chunk taken (published, filtered or held as pending).
    consumed: usize,
}

impl OpenInput {
    /// `file` (of `path`), to be read from `start_at`.
    fn new(file: Arc<File>, key: Option<FileKey>, path: Arc<Path>, start_at: u64) -> OpenInput {
        OpenInput {
            file,
            key,
            chunk: Chunk::empty(Arc::clone(&path)),
            path,
            chunk_offset: start_at,
            consumed: 0,
        }
    }

    #[inline]
    fn position(&self) -> u64 {
        self.chunk_offset + self.consumed as u64
    }

    fn read_through(&self) -> u64 {
        self.chunk_offset + self.chunk.bytes().len() as u64
    }

    /// The bytes read and not taken yet.
    #[inline]
    fn unread(&self) -> &[u8] {
        &self.chunk.bytes()[self.consumed..]
    }
}

enum EofCheck {
    Unchanged,
    Replaced(String),
    Truncated(String),
}

/// Called between the open of the input file and the read of its identity (tests).
type OpenHook = Box<dyn FnMut() + Send>;

/// The wait before the first reopen of an input that failed to open or to read (other
/// than not existing yet); it doubles with each failure in a row up to
/// [`REOPEN_BACKOFF_MAX`], and starts again once a read succeeds. Without it a path
/// that is a directory (which opens, then fails every read) was reopened in a busy
/// loop (issue 10, item 8).
const REOPEN_BACKOFF_MIN: Duration = Duration::from_millis(10);

/// The longest wait between two reopen attempts of a failing input.
const REOPEN_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// A warning that repeats (the input still cannot be opened or read) is logged the
/// first time, then as a count of the repeats at most this often.
const REPEATED_WARNING_INTERVAL: Duration = Duration::from_secs(10);

/// The wait between reopen attempts of a failing input: none until it fails, then
/// [`REOPEN_BACKOFF_MIN`] doubling up to [`REOPEN_BACKOFF_MAX`].
#[derive(Debug)]
struct ReopenBackoff {
    delay: Duration,
    next_attempt: Option<Instant>,
}

impl Default for ReopenBackoff {
    fn default() -> Self {
        ReopenBackoff {
            delay: REOPEN_BACKOFF_MIN,
            next_attempt: None,
        }
    }
}

impl ReopenBackoff {
    /// Whether an attempt may be made now.
    fn ready(&self) -> bool {
        self.next_attempt
            .is_none_or(|next_attempt| Instant::now() >= next_attempt)
    }

    /// An attempt failed: the next waits longer.
    fn failed(&mut self) {
        self.next_attempt = Some(Instant::now() + self.delay);
        self.delay = (self.delay * 2).min(REOPEN_BACKOFF_MAX);
    }

    /// The input works again.
    fn succeeded(&mut self) {
        *self = ReopenBackoff::default();
    }
}

/// A warning that may repeat every attempt: logged the first time, then counted, and
/// the count logged at most every [`REPEATED_WARNING_INTERVAL`].
#[derive(Debug, Default)]
struct RepeatedWarning {
    last_logged: Option<Instant>,
    /// Occurrences since the last one logged.
    unlogged: u64,
    /// Occurrences since the condition began.
    total: u64,
}

impl RepeatedWarning {
    /// Another occurrence: `Some(unlogged)` when it is to be logged now (with the
    /// number of occurrences not logged since the last one), `None` to stay quiet.
    fn occurred(&mut self) -> Option<u64> {
        self.total += 1;
        let now = Instant::now();
        let due = self
            .last_logged
            .is_none_or(|last| now.duration_since(last) >= REPEATED_WARNING_INTERVAL);
        if !due {
            self.unlogged += 1;
            return None;
        }
        self.last_logged = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }

    /// The condition is over: how many times it occurred, if it did.
    fn cleared(&mut self) -> Option<u64> {
        let total = self.total;
        *self = RepeatedWarning::default();
        (total > 0).then_some(total)
    }
}

/// A file source: reads lines of a file by bytes, maps each line to an item and
/// publishes it with the byte offset after the line as its position.
///
/// With [`ReadStrategy::Commited`] the offset is committed to the pointer file
/// `<input>.readPointer` only once the line was processed by every consumer (the
/// output's acknowledgement), never when read. See the crate documentation.
pub struct FileEventSource<T> {
    config: FileSourceConfig,
    mapper: DataMapper<T>,
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
    /// The file at the path when the open file was seen replaced, opened then: read
    /// next even if another rotation renamed it away meanwhile (the old file is
    /// finished and committed first).
    next_file: Option<File>,
    paused: bool,
    reported: Option<(SourceState, Option<String>)>,
    status: FileSourceStatus,
    open_hook: Option<OpenHook>,
    /// The wait between reopens of an input that fails to open or to read.
    backoff: ReopenBackoff,
    /// The input cannot be opened (other than not existing yet).
    open_failures: RepeatedWarning,
    /// The input cannot be read.
    read_failures: RepeatedWarning,
}

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
    /// Makes PAUSE the output's default policy (an explicit policy still wins).
    pub fn new(
        config: FileSourceConfig,
        mapper: impl FnMut(Line) -> Result<T, String> + Send + 'static,
        output: Arc<dyn SourceOutput<T, u64>>,
    ) -> Self {
        output.set_pause_by_default(true);
        let pointer_path = pointer_path_for(&config.path);
        let shared = Arc::new(Mutex::new(CommitShared {
            source_name: config.name.clone(),
            pointer_path,
            pointer: None,
            record: PointerRecord::default(),
            acknowledged: None,
            input: None,
            stopped: false,
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
            next_file: None,
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
            open_hook: None,
            backoff: ReopenBackoff::default(),
            open_failures: RepeatedWarning::default(),
            read_failures: RepeatedWarning::default(),
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

    /// Test hook: called after the input file is opened and before the opened file's
    /// identity is read, so a test can rotate the file at exactly that moment.
    #[doc(hidden)]
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

    fn set_epoch(&mut self, epoch: Epoch) {
        self.epoch = epoch;
        self.status.epoch = epoch;
        self.output.set_epoch(epoch);
    }

    /// Opens the input (identity from the opened handle) and positions the reader.
    /// Returns false when there is no input to open yet.
    fn open_input(&mut self) -> Result<bool, CoreError> {
        if !self.backoff.ready() {
            // the last attempt failed: no busy loop of reopens (issue 10, item 8)
            return Ok(false);
        }
        let path = self.config.path.clone();
        let opened = match self.next_file.take() {
            Some(file) => Ok(file),
            None => File::open(&path),
        };
        let file = match opened {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                if self.config.strategy.has_pointer()
                    && !self.opened_since_start
                    && self.follow_rotation(None)?
                {
                    return Ok(true);
                }
                self.report(
                    SourceState::Behind,
                    Some(format!(
                        "waiting for the input file {} to exist",
                        path.display()
                    )),
                );
                return Ok(false);
            }
            Err(error) => {
                self.backoff.failed();
                if let Some(unlogged) = self.open_failures.occurred() {
                    warn!(source = %self.config.name, path = %path.display(), %error,
                        failures = self.open_failures.total, unlogged,
                        "cannot open the input file; retrying with a back-off (up to 1 s; this warning is repeated at most every 10 s, with a count)");
                }
                self.report(
                    SourceState::Behind,
                    Some(format!(
                        "cannot open the input file {}: {error}",
                        path.display()
                    )),
                );
                return Ok(false);
            }
        };
        if let Some(failures) = self.open_failures.cleared() {
            info!(source = %self.config.name, path = %path.display(), failures, "the input file opens again");
        }
        if let Some(hook) = self.open_hook.as_mut() {
            hook();
        }
        // The identity is the opened file's (fstat of the handle), never the path's: a
        // rotation between the open and this read cannot label the old file with the
        // new file's key (feed-delivery-guarantees §4, delta review of PR #98 finding 1).
        let metadata = file
            .metadata()
            .map_err(|error| CoreError::io("cannot read the input file's identity", error))?;
        let key = key_of(&metadata);
        let size = metadata.len();
        let file = Arc::new(file);
        let reopen = self.opened_since_start;
        if self.config.strategy.has_pointer()
            && !reopen
            && self.follow_rotation(Some((&file, key, size)))?
        {
            return Ok(true);
        }
        let reopen_from = self.reopen_from.take();
        // the same file again (a reopen after a read error) resumes where it was
        let same_file_from =
            reopen_from.filter(|from| key.is_some() && key == self.last_key && size >= *from);
        let start_at = match (self.config.strategy, same_file_from) {
            (ReadStrategy::Commited, _) => self.adopt_pointer(&file, key, size, reopen_from)?,
            (_, Some(from)) => from,
            (ReadStrategy::Earliest | ReadStrategy::OnceEarliest, None) => {
                self.set_epoch(identity_epoch(key, &path));
                0
            }
            (ReadStrategy::Latest | ReadStrategy::OnceLatest, None) => {
                self.set_epoch(identity_epoch(key, &path));
                // the new file of a rotation is read from its start
                if reopen {
                    0
                } else if self.config.strategy == ReadStrategy::Latest {
                    end_of_last_line(&file, size)
                } else {
                    size // ONCE_LATEST: nothing to read, nothing unterminated
                }
            }
        };
        self.last_key = key;
        if reopen {
            self.status.reopens += 1;
        }
        self.opened_since_start = true;
        self.input = Some(OpenInput::new(file, key, Arc::clone(&self.path), start_at));
        self.status.read_position = start_at;
        debug!(source = %self.config.name, path = %path.display(), start_at, epoch = %self.epoch, "opened the input file");
        Ok(true)
    }

    /// The rotation globs of the input (the configured ones, or the defaults).
    fn rotation_globs(&self) -> Vec<String> {
        if self.config.rotated.is_empty() {
            rotation::default_globs(&self.config.path)
        } else {
            self.config.rotated.clone()
        }
    }

    /// At the first open after start (COMMITED): when the path does not name the
    /// pointer's file (`at_path` is the file there, if any), looks for the pointer's
    /// file among the rotation candidates, by file key and fingerprint. Found: opens it
    /// at the pointer's offset under the pointer's epoch, to be read to its end (and its
    /// lines committed) before the file at the path, and returns true. Not found while
    /// the pointer's offset is past 0 and the path's file does not continue the
    /// pointer's: the rotated file was compressed or deleted before it was read, so its
    /// tail may be lost: a WARN naming it, counted, reported to the output (the feed is
    /// not lossless). Returns false to open the path's file as usual.
    fn follow_rotation(
        &mut self,
        at_path: Option<(&File, Option<FileKey>, u64)>,
    ) -> Result<bool, CoreError> {
        let record = {
            let shared = self.shared.lock();
            match shared.pointer.as_ref() {
                Some(pointer) => pointer.read(),
                None => shared.record,
            }
        };
        if record.epoch == 0 || record.file_key == 0 {
            return Ok(false);
        }
        if let Some((file, key, _)) = at_path {
            if key.is_none() {
                return Ok(false);
            }
            if key.map(|key| key.0) == Some(record.file_key) {
                // the pointer's key at the path: the pointer's file (the usual checks:
                // an append, or a truncation), unless its leading bytes differ: an
                // inode reused by a new file after the old one was deleted
                let same_bytes =
                    record.fingerprint_length == 0 || starts_as_fingerprinted(file, &record);
                let shorter = file
                    .metadata()
                    .map(|meta| meta.len() < record.offset)
                    .unwrap_or(false);
                if same_bytes || shorter {
                    return Ok(false);
                }
            }
        }
        let name = self.config.name.clone();
        let path = self.config.path.clone();
        let globs = self.rotation_globs();
        if let Some((rotated_path, file)) = rotation::find_pointer_file(&path, &globs, &record) {
            let metadata = file
                .metadata()
                .map_err(|error| CoreError::io("cannot read the rotated file's identity", error))?;
            let key = key_of(&metadata);
            let file = Arc::new(file);
            warn!(source = %name, path = %path.display(), rotated = %rotated_path.display(),
                offset = record.offset, size = metadata.len(), epoch = record.epoch,
                "the input was rotated: finishing the pointer's file (found by file key and fingerprint) from the pointer to its end, under its epoch, before the file at the path");
            self.shared.lock().input = Some(Arc::clone(&file));
            self.front.epoch.store(record.epoch, Ordering::Release);
            self.set_epoch(Epoch(record.epoch));
            self.last_key = key;
            self.opened_since_start = true;
            let lines_path = Arc::from(rotated_path.as_path());
            self.input = Some(OpenInput::new(file, key, lines_path, record.offset));
            self.status.read_position = record.offset;
            self.status.rotated_files_finished += 1;
            let reason = format!(
                "finishing the rotated file {} before the input file {}",
                rotated_path.display(),
                path.display()
            );
            self.report(SourceState::Behind, Some(reason.clone()));
            self.draining = Some(reason);
            // a file written after the pointer's file was rotated, other than the
            // one at the path: the current file between two rotations while the
            // source was down. It cannot be proven a rotation (a copy would be read
            // twice), so it is not read: reported as a possible loss, never silent.
            let at_path_key = at_path.and_then(|(_, key, _)| key).map(|key| key.0);
            for skipped in rotation::written_after(&path, &globs, &rotated_path, at_path_key) {
                warn!(source = %name, path = %path.display(), file = %skipped.display(),
                    "the input was rotated more than once while the source was stopped: this file was written after the pointer's file and may hold lines never read (counted as a possible loss; the feed is not lossless). If it is a rotation of the input, read it with a ONCE feed; a glob feed reads every file");
                self.status.rotated_unread_files += 1;
                self.output
                    .report_rotated_unread(&skipped.display().to_string(), None);
            }
            self.finishing_rotated = Some(rotated_path);
            return Ok(true);
        }
        if record.offset == 0 && record.fingerprint_length == 0 {
            // the pointer's file held no bytes when last seen: nothing can be unread
            return Ok(false);
        }
        if let Some((file, _, size)) = at_path {
            // another key but the same leading bytes and not shorter: the pointer's
            // file copied into place (review 3, item 4), kept by the identity check
            let continues = record.fingerprint_length > 0
                && size >= record.offset
                && starts_as_fingerprinted(file, &record);
            if continues {
                return Ok(false);
            }
        }
        let compressed = rotation::compressed_candidates(&path, &globs);
        let named = if compressed.is_empty() {
            format!(
                "the input's previous file (read to byte {} under epoch {}; not found among {})",
                record.offset,
                record.epoch,
                globs.join(", ")
            )
        } else {
            compressed
                .iter()
                .map(|candidate| candidate.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        warn!(source = %name, path = %path.display(), file = %named, pointer = record.offset, epoch = record.epoch,
            "the input was rotated and the pointer's file was compressed or deleted before it was read to its end: the lines it held after the pointer (an unknown number of bytes) cannot be read and are counted as a possible loss (the feed is not lossless). Decompress it into a file that is read by a ONCE feed if they are needed");
        self.status.rotated_unread_files += 1;
        self.output.report_rotated_unread(&named, None);
        Ok(false)
    }

    /// Reconciles the pointer with what the feed's consumers saved with their state
    /// (feed-delivery-guarantees §5a: the saved position is the authority), before the
    /// first open. A trusted pointer past a consumer's saved position of the same epoch
    /// (or past 0, for a consumer whose state holds nothing of the feed) moves back to
    /// it: the lines between are re-read, and the consumers that have them skip them.
    /// A missing or damaged pointer resumes at the consumers' saved `(epoch,
    /// position)` instead of the start of the file under a new epoch (which would apply
    /// every line a second time). When the saved positions disagree on the epoch, or do
    /// not fit the input file, the start is refused with what to do.
    fn reconcile(
        &self,
        record: PointerRecord,
        trusted: bool,
        pointer_path: &Path,
    ) -> Result<PointerRecord, CoreError> {
        let name = &self.config.name;
        let saved = self.output.saved_positions();
        if saved.is_empty() {
            return Ok(record);
        }
        let refuse = |message: String| CoreError::Source {
            source_name: name.clone(),
            message,
        };
        if trusted {
            let mut resume = record.offset;
            for consumer in &saved {
                let wanted = match consumer.saved {
                    None => 0,
                    Some((epoch, position)) if epoch.get() == record.epoch => position.offset,
                    // saved under another epoch (an earlier file): it takes every
                    // line of this epoch anyway
                    Some(_) => continue,
                };
                if wanted < resume {
                    warn!(source = %name, consumer = %consumer.consumer, pointer = record.offset, resume_at = wanted,
                        "the pointer is past what this consumer's saved state holds (its state was deleted or restored from an older copy?): re-reading from there so nothing is skipped");
                    resume = wanted;
                }
            }
            return Ok(PointerRecord {
                offset: resume,
                ..record
            });
        }
        let positioned: Vec<_> = saved
            .iter()
            .filter_map(|consumer| {
                consumer
                    .saved
                    .map(|(epoch, position)| (consumer, epoch, position))
            })
            .collect();
        let Some((_, epoch, _)) = positioned.first().copied() else {
            info!(source = %name, pointer = %pointer_path.display(),
                "no usable pointer and no consumer holds a saved position: reading from the start under a new epoch");
            return Ok(record);
        };
        if let Some((other, other_epoch, _)) =
            positioned.iter().find(|(_, other, _)| *other != epoch)
        {
            return Err(refuse(format!(
                "the pointer file {} is missing or damaged, and the consumers' saved states disagree on the epoch ({} holds epoch {}, {} holds epoch {}):                  the source cannot tell where to resume. Restore the pointer file, or move the state of the consumers whose epoch is stale away so that they start over",
                pointer_path.display(),
                positioned[0].0.consumer,
                epoch,
                other.consumer,
                other_epoch,
            )));
        }
        // a consumer whose state holds nothing needs the file from its start
        let resume = if saved.iter().any(|consumer| consumer.saved.is_none()) {
            0
        } else {
            positioned
                .iter()
                .map(|(_, _, position)| position.offset)
                .min()
                .unwrap_or(0)
        };
        let fits = match File::open(&self.config.path) {
            Ok(file) => {
                let size = file.metadata().map(|meta| meta.len()).unwrap_or(0);
                let mut last = [0u8; 1];
                resume == 0
                    || (size >= resume
                        && read_exact_at(&file, &mut last, resume - 1).is_ok()
                        && (last[0] == b'\n' || last[0] == b'\r'))
            }
            Err(_) => resume == 0,
        };
        if !fits {
            return Err(refuse(format!(
                "the pointer file {} is missing or damaged, and the consumers' saved position {resume} (epoch {epoch}) is not a line end of the input file {}:                  the input is not the file their state was built from. If it was replaced on purpose, move the consumers' state away so that they start over;                  otherwise restore the input file or the pointer file",
                pointer_path.display(),
                self.config.path.display(),
            )));
        }
        warn!(source = %name, pointer = %pointer_path.display(), %epoch, resume_at = resume,
            "the pointer file is missing or damaged: resuming from the consumers' saved position, under their epoch (nothing re-applied, nothing skipped)");
        Ok(PointerRecord {
            offset: resume,
            epoch: epoch.get(),
            file_key: 0,
            layout_version: LAYOUT_VERSION,
            fingerprint_length: 0,
            fingerprint: 0,
        })
    }

    /// The identity check of a COMMITED open: keeps the pointer, or resets it to 0
    /// under a new epoch when the file was replaced or truncated. Returns where to read.
    fn adopt_pointer(
        &mut self,
        file: &Arc<File>,
        key: Option<FileKey>,
        size: u64,
        reopen_from: Option<u64>,
    ) -> Result<u64, CoreError> {
        let name = self.config.name.clone();
        let path = self.config.path.clone();
        let mut shared = self.shared.lock();
        let mut record = match shared.pointer.as_ref() {
            Some(pointer) => pointer.read(),
            None => shared.record,
        };
        let stored_key = record.file_key;
        // a mid-run reopen must not resume before what it read of the same file
        let read_through = reopen_from.unwrap_or(0).max(record.offset);
        let reset_reason = if std::mem::take(&mut self.rotated_finished) {
            Some(format!(
                "the rotated file was read to its end: {} is a new file",
                path.display()
            ))
        } else if size < read_through {
            Some(format!(
                "the input file {} was truncated: {size} bytes, shorter than the {read_through} already read",
                path.display()
            ))
        } else if record.fingerprint_length > 0 {
            let matches = starts_as_fingerprinted(file, &record);
            if !matches {
                Some(format!(
                    "the input file {} was replaced: its first {} bytes differ from those fingerprinted",
                    path.display(),
                    record.fingerprint_length
                ))
            } else {
                if let Some(key) = key {
                    if stored_key != 0 && stored_key != key.0 {
                        // an NFS remount, an overlay copy-up, a writer that renames a
                        // copy into place (review 3, item 4)
                        warn!(source = %name, path = %path.display(),
                            "the input file has a new file key but the same leading bytes and is not shorter than the pointer: keeping the pointer and epoch");
                    }
                }
                None
            }
        } else if let Some(key) = key {
            (stored_key != 0 && stored_key != key.0).then(|| {
                format!(
                    "the input file {} was replaced: another file key, and no fingerprint to match",
                    path.display()
                )
            })
        } else {
            None
        };
        let start_at;
        if let Some(reason) = reset_reason {
            let old_epoch = record.epoch;
            warn!(source = %name, %reason, "resetting the pointer to 0 under a new epoch");
            record.offset = 0;
            record.epoch = new_epoch(old_epoch);
            // forget what the old file acknowledged (review 2, finding 6)
            shared.acknowledged = None;
            self.front.reset_to(record.epoch);
            self.status.resets += 1;
            start_at = 0;
        } else {
            if record.epoch == 0 {
                // a new pointer file, or one of a layout without epochs
                record.epoch = new_epoch(0);
                if record.offset > 0 {
                    let aligned = align_to_line_start(file, record.offset, size);
                    if aligned != record.offset {
                        warn!(source = %name, from = record.offset, to = aligned,
                            "a pointer without an epoch points inside a line: resuming after the line's terminator");
                        record.offset = aligned;
                    }
                }
            }
            start_at = reopen_from.unwrap_or(0).max(record.offset);
        }
        record.file_key = key.map_or(0, |key| key.0);
        record.layout_version = LAYOUT_VERSION;
        if let Some((length, fingerprint)) = fingerprint_of(file) {
            record.fingerprint_length = length;
            record.fingerprint = fingerprint;
        }
        shared.input = Some(Arc::clone(file));
        shared.write_record(record)?;
        self.front.epoch.store(record.epoch, Ordering::Release);
        let epoch = Epoch(record.epoch);
        drop(shared);
        self.set_epoch(epoch);
        Ok(start_at)
    }

    fn close_input(&mut self) {
        if let Some(input) = self.input.take() {
            self.buffers.retire(input.chunk);
        }
        self.shared.lock().input = None;
    }

    fn on_pause(&mut self) {
        if !self.paused {
            self.paused = true;
            self.status.pauses += 1;
        }
        self.report_str(
            SourceState::Behind,
            Some("paused: a subscriber queue is full"),
        );
    }

    fn on_retry(&mut self) {
        // not a pause (not counted), but the line is not taken yet
        self.report_str(
            SourceState::Behind,
            Some("a publish nested in a commit of this feed: offering the line again"),
        );
    }

    /// Offers the pending item; true when published (or nothing was pending).
    fn publish_pending(&mut self) -> bool {
        let Some((item, position)) = self.pending.take() else {
            return true;
        };
        self.offer(item, position)
    }

    /// Publishes one item; on a pause or a retry keeps it pending. False when it must
    /// wait.
    fn offer(&mut self, item: T, position: u64) -> bool {
        match self.output.try_publish(item, position) {
            TryPublish::Published => {
                self.status.lines_published += 1;
                self.paused = false;
                true
            }
            TryPublish::Paused(item) => {
                self.pending = Some((item, position));
                self.on_pause();
                false
            }
            TryPublish::Retry(item) => {
                self.pending = Some((item, position));
                self.on_retry();
                false
            }
        }
    }

    /// Maps and publishes one line; false when it must wait (pending).
    #[inline]
    fn take_line(&mut self, line: Line, position: u64) -> bool {
        self.status.read_position = position;
        match (self.mapper)(line) {
            Ok(item) => self.offer(item, position),
            Err(reason) => {
                self.filter_line(position, &reason);
                true
            }
        }
    }

    /// Records a line the data mapper refused: counted, logged, and given to the output
    /// so its position is committed with the items around it.
    fn filter_line(&mut self, position: u64, reason: &str) {
        self.status.lines_filtered += 1;
        warn!(source = %self.config.name, position, %reason, filtered = self.status.lines_filtered,
            "the data mapper refused a line: filtered");
        self.output.filtered(position, reason);
    }

    /// Publishes the complete lines in the buffer; false when paused (or retried).
    ///
    /// The lines go out in batches ([`SourceOutput::try_publish_batch`]): the output
    /// takes its lock once per batch and pulls a line only when it can take it, so a
    /// paused feed leaves the rest in the buffer. A line the mapper refuses ends the
    /// batch, and is recorded with [`SourceOutput::filtered`] outside it: never a call
    /// nested in the output's batch, and its position stays in order between the lines
    /// before and after it.
    fn publish_buffered(&mut self) -> bool {
        loop {
            let Some(input) = self.input.as_mut() else {
                return true;
            };
            let mapper = &mut self.mapper;
            let position_before = input.position();
            let mut taken = 0u64;
            let mut refused: Option<(u64, String)> = None;
            let mut next = || {
                if refused.is_some() {
                    return None;
                }
                let span = next_line(input.unread(), false)?;
                let start = input.consumed;
                let line = Line::of_chunk(&input.chunk, start, start + span.text_len);
                input.consumed += span.consumed;
                let position = input.position();
                match mapper(line) {
                    Ok(item) => {
                        taken += 1;
                        Some((item, position))
                    }
                    Err(reason) => {
                        refused = Some((position, reason));
                        None
                    }
                }
            };
            let end = self.output.try_publish_batch(&mut next);
            let position_after = input.position();
            if position_after != position_before {
                self.status.read_position = position_after;
            }
            let returned = matches!(end, BatchEnd::Returned(..));
            let published = taken - u64::from(returned);
            if published > 0 {
                self.status.lines_published += published;
                self.paused = false;
            }
            let filtered = refused.is_some();
            if let Some((position, reason)) = refused {
                // the closure ends the batch at a refused line: nothing after it was
                // taken, so it is recorded in order before the next batch
                self.filter_line(position, &reason);
            }
            match end {
                BatchEnd::Exhausted if filtered => {}
                BatchEnd::Exhausted => {
                    // the feed had room for more: a pause episode (if any) is over
                    self.paused = false;
                    return true;
                }
                BatchEnd::Paused => {
                    self.on_pause();
                    return false;
                }
                BatchEnd::Returned(item, position, Refusal::Paused) => {
                    self.pending = Some((item, position));
                    self.on_pause();
                    return false;
                }
                BatchEnd::Returned(item, position, Refusal::Retry) => {
                    self.pending = Some((item, position));
                    self.on_retry();
                    return false;
                }
            }
        }
    }

    /// Reads and publishes until the end of the file, a pause or the cycle's budget.
    fn read_and_publish(&mut self) -> Result<usize, CoreError> {
        let published_before = self.status.lines_published;
        if !self.publish_pending() {
            return Ok(0);
        }
        let mut read_this_cycle = 0usize;
        loop {
            if !self.publish_buffered() {
                break;
            }
            if read_this_cycle >= self.config.max_bytes_per_cycle {
                self.report_str(SourceState::Behind, Some("reading"));
                break;
            }
            let Some(input) = self.input.as_mut() else {
                break;
            };
            // a new chunk: the partial line carried over (copied), then what is read
            // after it. The chunk before stays with the lines cut from it.
            let offset = input.read_through();
            let read = self
                .buffers
                .read(&input.file, offset, &input.path, input.unread());
            if read.is_ok() {
                self.backoff.succeeded();
                if let Some(failures) = self.read_failures.cleared() {
                    info!(source = %self.config.name, failures, "the input file reads again");
                }
            }
            match read {
                Ok(None) => {
                    if !self.at_end_of_file()? {
                        break;
                    }
                }
                Ok(Some((chunk, read))) => {
                    input.chunk_offset += input.consumed as u64;
                    input.consumed = 0;
                    let before = std::mem::replace(&mut input.chunk, chunk);
                    self.buffers.retire(before);
                    read_this_cycle += read;
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => {
                    self.backoff.failed();
                    if let Some(unlogged) = self.read_failures.occurred() {
                        warn!(source = %self.config.name, path = %self.config.path.display(), %error,
                            failures = self.read_failures.total, unlogged,
                            "cannot read the input file; reopening it with a back-off (up to 1 s; this warning is repeated at most every 10 s, with a count)");
                    }
                    let from = input.position();
                    self.close_input();
                    self.reopen_from = Some(from);
                    self.report(
                        SourceState::Behind,
                        Some(format!("reopening after a read error: {error}")),
                    );
                    break;
                }
            }
        }
        Ok((self.status.lines_published - published_before) as usize)
    }

    /// At the end of the open file. Returns true to read on (a rotated file being read
    /// to its end), false to end the cycle.
    fn at_end_of_file(&mut self) -> Result<bool, CoreError> {
        if self.config.strategy.is_once() {
            return Ok(self.end_once_read());
        }
        if let Some(reason) = self.draining.take() {
            let from = self.input.as_ref().map(OpenInput::position);
            if self.config.strategy.has_pointer() {
                // the old file of a rotation (found at a restart, or seen replaced
                // while running): its lines are committed under its epoch before the
                // switch, so the pointer names it until then and a crash before the
                // switch finds it again among the rotation candidates; after the
                // switch the new file's pointer forgets this epoch (issue 11, item 1)
                let (committed, epoch) = {
                    let shared = self.shared.lock();
                    (shared.record.offset, shared.record.epoch)
                };
                let position = from.unwrap_or(0);
                if epoch == self.epoch.get() && committed < position {
                    let old = match self.finishing_rotated.as_ref() {
                        Some(rotated) => format!("the rotated file {}", rotated.display()),
                        None => "the replaced file".to_owned(),
                    };
                    let waiting = format!(
                        "finishing {old}: waiting for its lines to be processed and committed ({committed} of {position} bytes)"
                    );
                    self.draining = Some(reason);
                    self.report(SourceState::Behind, Some(waiting));
                    return Ok(false);
                }
            }
            if let Some(rotated) = self.finishing_rotated.take() {
                info!(source = %self.config.name, rotated = %rotated.display(), position = from.unwrap_or(0),
                    "the rotated file was read to its end and committed: opening the file at the path under a new epoch");
                self.rotated_finished = true;
            }
            // the rotated or replaced file was read to its end: open the one at the
            // path next cycle. Its unterminated last line is not published.
            self.close_input();
            self.reopen_from = from;
            self.report(SourceState::Behind, Some(reason));
            return Ok(false);
        }
        match self.check_identity_at_eof() {
            EofCheck::Unchanged => {
                self.report(SourceState::CaughtUp, None);
                Ok(false)
            }
            EofCheck::Replaced(reason) => {
                warn!(source = %self.config.name, %reason, "reading the old file to its end, then reopening");
                // hold the new file now: a second rotation while the old one is
                // finished renames it away from the path (issue 11)
                self.next_file = File::open(&self.config.path).ok();
                self.report(SourceState::Behind, Some(reason.clone()));
                self.draining = Some(reason);
                Ok(true)
            }
            EofCheck::Truncated(reason) => {
                warn!(source = %self.config.name, %reason, "reopening the input file");
                let from = self.input.as_ref().map(OpenInput::position);
                self.close_input();
                self.reopen_from = from;
                self.report(SourceState::Behind, Some(reason));
                Ok(false)
            }
        }
    }

    /// Before CAUGHT_UP: is the path still the open file, and is it not shorter than
    /// what was read? (feed-delivery-guarantees §4, review R4)
    fn check_identity_at_eof(&self) -> EofCheck {
        let Some(input) = self.input.as_ref() else {
            return EofCheck::Unchanged;
        };
        let path = &self.config.path;
        if let Ok(open) = input.file.metadata() {
            if open.len() < input.read_through() {
                return EofCheck::Truncated(format!(
                    "the input file {} was truncated while being read: {} bytes, {} read",
                    path.display(),
                    open.len(),
                    input.read_through()
                ));
            }
        }
        match fs::metadata(path) {
            // a rotation in progress: read the open file on
            Err(_) => EofCheck::Unchanged,
            Ok(at_path) => match (input.key, key_of(&at_path)) {
                (Some(open_key), Some(path_key)) if open_key != path_key => {
                    EofCheck::Replaced(format!(
                        "the input file {} was replaced while being read",
                        path.display()
                    ))
                }
                _ => EofCheck::Unchanged,
            },
        }
    }

    /// The end of a once read: a last line ended by a lone `\r` is published, bytes
    /// after the last terminator are counted as unterminated. Returns false.
    fn end_once_read(&mut self) -> bool {
        let Some(input) = self.input.as_mut() else {
            return false;
        };
        if let Some(span) = next_line(input.unread(), true) {
            let start = input.consumed;
            let line = Line::of_chunk(&input.chunk, start, start + span.text_len);
            input.consumed += span.consumed;
            let position = input.position();
            if !self.take_line(line, position) {
                return false;
            }
            // more lines can follow only if the buffer held more; go round again
            return true;
        }
        let unterminated = input.unread().len() as u64;
        self.status.unterminated_bytes = unterminated;
        self.output.set_unterminated_bytes(unterminated);
        self.ended = true;
        let detail = (unterminated > 0).then(|| {
            format!("the last {unterminated} bytes have no line terminator and were not published")
        });
        self.close_input();
        self.report(SourceState::EndOfStream, detail);
        false
    }
}

/// A new epoch, never 0 and never `previous`. Not a file time: the clock and the
/// process's random hasher keys only make it unique.
fn new_epoch(previous: u64) -> u64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or_default();
    hasher.write_u128(now);
    hasher.write_u32(std::process::id());
    hasher.write_u64(previous);
    let mut epoch = hasher.finish() >> 1; // positive as a Java long
    if epoch == 0 || epoch == previous {
        epoch = previous.wrapping_add(1).max(1);
    }
    epoch
}

/// The epoch of a strategy without a pointer: the input file's identity.
fn identity_epoch(key: Option<FileKey>, path: &Path) -> Epoch {
    let hash = match key {
        Some(key) => key.0,
        None => fnv1a(path.as_os_str().to_string_lossy().as_bytes()),
    };
    Epoch((hash >> 1).max(1))
}

impl<T: Send + 'static> EventSource for FileEventSource<T> {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn start(&mut self) -> Result<(), CoreError> {
        // a restart begins clean: no buffer, no pending line (§4)
        self.input = None;
        self.pending = None;
        self.draining = None;
        self.reopen_from = None;
        self.finishing_rotated = None;
        self.rotated_finished = false;
        self.next_file = None;
        self.ended = false;
        self.paused = false;
        self.opened_since_start = false;
        self.reported = None;
        self.backoff = ReopenBackoff::default();
        self.open_failures = RepeatedWarning::default();
        self.read_failures = RepeatedWarning::default();
        self.output.set_pause_by_default(true);
        if self.config.strategy.has_pointer() {
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
                _ => {}
            }
            let trusted = !opened.created
                && opened.decoded.damage.is_none()
                && opened.decoded.record.layout_version == LAYOUT_VERSION
                && opened.decoded.record.epoch != 0;
            if opened.created {
                info!(source = %self.config.name, pointer = %pointer_path.display(),
                    "no pointer file: a new one was created");
            }
            // a pointer without an epoch (new, short or damaged) gets one at the
            // identity check of the first open, unless the consumers' saved state
            // says where to resume
            shared.record = self.reconcile(opened.decoded.record, trusted, &pointer_path)?;
            shared.pointer = Some(opened.file);
            if shared.record != opened.decoded.record {
                let record = shared.record;
                shared.write_record(record)?;
            }
            shared.acknowledged = None;
            shared.stopped = false;
            self.front.reset_to(shared.record.epoch);
            drop(shared);
            self.output.acknowledge_with(Box::new(PointerCommitter {
                shared: Arc::clone(&self.shared),
                front: Arc::clone(&self.front),
                pending: None,
                source_name: self.config.name.clone(),
            }));
        }
        self.started = true;
        self.report(SourceState::Behind, Some("starting".to_owned()));
        Ok(())
    }

    fn do_work(&mut self) -> Result<WorkDone, CoreError> {
        if !self.started {
            return Ok(WorkDone(0));
        }
        let mut work = self.output.poll_acknowledgements();
        self.output.flush_paused();
        if self.ended {
            return Ok(WorkDone(work));
        }
        if self.input.is_none() {
            if !self.open_input()? {
                return Ok(WorkDone(work));
            }
            work += 1;
        }
        let published = self.read_and_publish()?;
        if published > 0 {
            // commit again after a cycle that published (§4, commit lag)
            work += published + self.output.poll_acknowledgements();
        }
        Ok(WorkDone(work))
    }

    fn stop(&mut self) -> Result<(), CoreError> {
        if !self.started {
            return Ok(());
        }
        // commit what was processed (and retry a commit that failed)
        self.output.poll_acknowledgements();
        self.started = false;
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
}
