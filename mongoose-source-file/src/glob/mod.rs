//! [`GlobFileSource`]: many files per feed, one lane and one pointer per file.
//!
//! The feed's path is a glob whose file name holds `*`, `?` or `[...]` (`logs/*.log`;
//! the folder is literal). Each matching file is read by its own [`FileEventSource`]
//! (everything the single-file source does: the pointer `<file>.readPointer`, epochs,
//! identity and fingerprint, commit after processing, the write-back at stop, following
//! a rotation), publishing through a *lane adapter* into the feed's one output, whose
//! positions are `(lane, byte offset)`. So each file commits on its own: a slow or held
//! file never holds another file's pointer back (within one subscriber queue the items
//! are still processed in publish order).
//!
//! * **Lanes** are kept in `<state folder>/<feed>.lanes` (see the lanes module; COMMITED
//!   only, other strategies number lanes in memory): a file keeps its lane while it is
//!   tracked, and a lane number is never reused. Lanes start at 1. Each file's pointer
//!   records its lane too, so a registry missing, damaged or another glob's is rebuilt
//!   from the pointers at the start, and a new file takes the lane its pointer records,
//!   or the one its consumers hold positions of under its identity (a start over),
//!   before a new number (`recover`).
//! * **Discovery**: at start, at once when inotify (Linux) reports a file created,
//!   moved or deleted in the folder, and every [`GlobSourceConfig::scan_interval`]
//!   (default 1 s; the only way elsewhere, and the fallback when the folder cannot be
//!   watched or the event queue overflowed). A new file is read from its start
//!   (COMMITED: from 0 under a new epoch; LATEST: the files present at start are read
//!   from their end, later ones from their start; the ONCE strategies read the files
//!   present at start). COMMITED: its identity (a new epoch, its file key and the
//!   fingerprint of its first bytes) is written to its pointer when it is found, so a
//!   file is known by identity even while it waits for a slot.
//! * **Not inputs**: pointer files, the registry, loss files, and the *rotations* of a
//!   tracked or matched file (`<name>.*`, `<name>-*`, or the configured `rotated`
//!   globs): a rotated file is read as its file's rotation by that file's own source,
//!   never as a new file (which would deliver its lines twice). A `rotated` glob that
//!   matches every name of the feed's own glob ([`glob_covers`]) is refused at the
//!   start: no file would ever be read.
//! * **A lane follows its file** (COMMITED). A file renamed to another name the glob
//!   matches (logrotate's `create` with `dateext`: `app.log` -> `app-20261201.log`
//!   with `*.log`), while running or while down, keeps its lane: renames are resolved
//!   before new files are taken, by the open handle's file key (or, without a slot, by
//!   its pointer: file key and leading bytes), whether or not the old name already
//!   holds a new file. The registry entry moves, then the pointer file; an open source
//!   reads on from its handle (nothing stops, nothing in flight is read twice), and a
//!   start completes a pointer move that a crash interrupted. The new file at the old
//!   name is another file, on a new lane. A file whose name is taken by another file
//!   while it is open, and that is not under another name of the glob (rotated out of
//!   it, `app.log.1`, or deleted) is read to its end on its lane, then the new file is
//!   read on the same lane under a new epoch, as a single file's source does.
//!   (Without a pointer, EARLIEST/LATEST, a renamed file is read again on a new lane.)
//! * **A file gone from the glob** (not found by a scan under any name): still open,
//!   it is read from its handle to its end and forgotten once everything read is
//!   committed (its source stopped, its pointer file and registry entry removed).
//!   Rotated away while it had no slot, it is finished where it is once it gets one.
//!   Otherwise it was gone before it could be read to its end: its lane is forgotten,
//!   and if it may have held unread lines it is a loss, counted once
//!   (`rotatedUnreadFiles`, not lossless) and appended to the loss file beside the
//!   registry (`<feed>.lanes.losses`, see [`crate::losses`]) before the lane is
//!   removed, so a kill cannot make it forgotten. It may have held unread lines when a
//!   scan saw it longer than what was committed, when it was written to (inotify)
//!   after the last scan saw it, when the folder is not watched (a scan cannot tell),
//!   or, not seen in this run (deleted while down), when its pointer held bytes. A
//!   file seen at its end with everything committed and not written to since lost
//!   nothing. A file without a slot deleted and made again (another file, or the same
//!   inode with other leading bytes) is handled the same way, and the new file is read
//!   on a new lane.
//! * **`max_open_files`** (COMMITED only; default 256): at most that many files are
//!   open. A file at its end with everything committed gives its slot to a file that
//!   waits with unread bytes (oldest waiter first); so does a file that had
//!   [`GlobSourceConfig::turns_per_slot`] turns while others wait (it stops reading
//!   until what it read is committed), so a file that never stops growing cannot keep
//!   its slot. A file that gave its slot is reopened later from its pointer through the
//!   same identity check as a restart.
//! * **Fairness**: each duty cycle gives every open file a turn of at most
//!   [`GlobSourceConfig::max_bytes_per_turn`] bytes, starting with another file each
//!   cycle.
//! * **Status**: the feed is CAUGHT_UP only when every file is; otherwise BEHIND with
//!   the file named. The files, with lane, committed offset, size and lag, are given to
//!   [`SourceOutput::report_files`] once per scan.
//!
//! The parts: `pattern` (file-name globs), `adapter` (the lane adapter, the
//! multiplexing committer, the loss records), `recover` (the registry loaded or
//! rebuilt, a new file's lane), `scan` (discovery, renames, sizes),
//! `slots` (open-file slots, parking, files gone from the glob); this module holds the
//! configuration, the source and its duty cycle.

mod adapter;
mod pattern;
mod recover;
mod scan;
mod slots;

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::{
    AnyCommitter, CoreError, Epoch, EventSource, FileLag, SourceOutput, SourceStart, SourceState,
    WorkDone,
};
use parking_lot::Mutex;
use tracing::info;

pub use self::pattern::{glob_covers, glob_matches, is_glob};

use self::adapter::{Hub, HubState, LaneMultiplexer};
use crate::config::{FileSourceConfig, ReadStrategy};
use crate::error::FileSourceError;
use crate::lanes::LaneRegistry;
use crate::line::Line;
use crate::source::{FileEventSource, LineMapper};
use crate::watch::FolderWatch;

/// Builds the source of one file (its mapper is made per file).
type InnerBuilder<T> =
    Box<dyn FnMut(FileSourceConfig, Arc<dyn SourceOutput<T, u64>>) -> FileEventSource<T> + Send>;

/// The configuration of a [`GlobFileSource`].
#[derive(Clone, Debug)]
pub struct GlobSourceConfig {
    /// The source's name (its feed's).
    pub name: String,
    /// The glob: a literal folder and a file-name pattern (`logs/*.log`).
    pub pattern: PathBuf,
    /// Where each file starts (see the module documentation for files found later).
    pub strategy: ReadStrategy,
    /// Initial read buffer of each open file.
    pub read_buffer_bytes: usize,
    /// Bytes one file reads in one duty cycle at most (its turn).
    pub max_bytes_per_turn: usize,
    /// File-name globs of the files' rotations; empty: `<name>.*` and `<name>-*` per
    /// file.
    pub rotated: Vec<String>,
    /// How often the folder is scanned for new and deleted files.
    pub scan_interval: Duration,
    /// At most this many files open at once (COMMITED; other strategies open every
    /// file).
    pub max_open_files: usize,
    /// While files wait for a slot, an open file that had this many turns stops
    /// reading and gives its slot once what it read is committed, even before its end
    /// (so a file that never stops growing cannot keep its slot).
    pub turns_per_slot: u64,
    /// The folder of the glob's state (pointers, lane registry, loss files), created at
    /// start. `None`: the glob's folder, beside its files. With a folder, the state an
    /// older run left in the glob's folder is adopted (moved, or copied when that
    /// folder cannot be written) at start.
    pub state_dir: Option<PathBuf>,
}

/// The default scan interval.
pub const DEFAULT_SCAN_INTERVAL: Duration = Duration::from_secs(1);

/// The default bound on open files.
pub const DEFAULT_MAX_OPEN_FILES: usize = 256;

impl GlobSourceConfig {
    /// A configuration with the defaults: a 1 s scan, 256 open files, 64 KiB buffers
    /// and 256 KiB per file per turn.
    pub fn new(
        name: impl Into<String>,
        pattern: impl Into<PathBuf>,
        strategy: ReadStrategy,
    ) -> Self {
        GlobSourceConfig {
            name: name.into(),
            pattern: pattern.into(),
            strategy,
            read_buffer_bytes: 64 * 1024,
            max_bytes_per_turn: 256 * 1024,
            rotated: Vec::new(),
            scan_interval: DEFAULT_SCAN_INTERVAL,
            max_open_files: DEFAULT_MAX_OPEN_FILES,
            turns_per_slot: 64,
            state_dir: None,
        }
    }

    /// The folder the glob scans.
    pub fn folder(&self) -> PathBuf {
        match self.pattern.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// The file-name pattern.
    pub fn file_pattern(&self) -> String {
        self.pattern
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// The folder holding the glob's pointers, lane registry and loss files: its
    /// [`GlobSourceConfig::state_dir`], else the glob's folder.
    pub fn state_folder(&self) -> PathBuf {
        self.state_dir.clone().unwrap_or_else(|| self.folder())
    }

    /// The pointer file of the glob's file `path`.
    pub fn pointer_path(&self, path: &Path) -> PathBuf {
        crate::pointer::pointer_path_in(self.state_dir.as_deref(), path)
    }

    /// The lane registry file: `<state folder>/<feed>.lanes`.
    pub fn registry_path(&self) -> PathBuf {
        let name: String = self
            .name
            .chars()
            .map(|c| if c == '/' || c == '\\' { '_' } else { c })
            .collect();
        self.state_folder().join(format!("{name}.lanes"))
    }
}

/// One file of the glob.
struct Tracked<T> {
    lane: u32,
    path: PathBuf,
    name: String,
    /// Its source; `None` while it waits for an open-file slot (or gave its slot).
    source: Option<FileEventSource<T>>,
    strategy: ReadStrategy,
    /// Found by the last scan.
    matched: bool,
    /// Duty cycles of its source since its start.
    cycles: u64,
    /// Committed (or read) offset and size, as last seen.
    committed: u64,
    size: u64,
    /// Parked at its end: its size when it gave its slot (it wants one again when the
    /// size changes). A file parked before its end wants one again at once.
    parked_size: Option<u64>,
    /// A deleted file's unterminated tail as seen at the last scan: forgotten when it
    /// did not change for a whole scan interval.
    deleted_tail: Option<u64>,
    /// What the lane's pointer held when it was last seen without an open handle
    /// (COMMITED: found, loaded at the start, or parked): how a scan tells the lane's
    /// file from another one at its path.
    record: Option<crate::pointer::PointerRecord>,
    /// The size of the lane's own file as last seen in this run (by a scan, or from
    /// the open handle); `None` before.
    seen_size: Option<u64>,
    /// Written to (inotify) since `seen_size` was taken.
    written: bool,
    /// (No slot) the path names another file than the lane's now, as last seen by a
    /// scan (another file key, shorter than the pointer, or other leading bytes).
    replaced: bool,
}

impl<T> Tracked<T> {
    /// The file key of the lane's file when it has no open handle.
    fn key(&self) -> Option<u64> {
        self.record
            .map(|record| record.file_key)
            .filter(|key| *key != 0)
    }
}

/// A source of many files: a glob, one [`FileEventSource`] and one lane per file. See
/// the module documentation.
pub struct GlobFileSource<T> {
    config: GlobSourceConfig,
    build: InnerBuilder<T>,
    output: Arc<dyn SourceOutput<T, (u32, u64)>>,
    hub: Arc<Hub<T>>,
    registry: LaneRegistry,
    files: BTreeMap<u32, Tracked<T>>,
    /// Parked files waiting for a slot, oldest first.
    waiting: VecDeque<u32>,
    next_scan: Option<Instant>,
    /// inotify on the folder (Linux): a change scans at once instead of at the next
    /// `scan_interval`.
    watch: FolderWatch,
    /// What wakes the source driver's thread (given before `start`): the folder's watch
    /// wakes it on a change.
    wakeup: Option<Arc<mongoose_core::Wakeup>>,
    scans: u64,
    turn: usize,
    started: bool,
    reported: Option<(SourceState, Option<String>)>,
    unterminated: u64,
}

impl<T> std::fmt::Debug for GlobFileSource<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlobFileSource")
            .field("config", &self.config)
            .field("files", &self.files.len())
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> GlobFileSource<T> {
    /// A source of the files matching `config.pattern`, each line mapped by a mapper
    /// `mappers` makes for its file (called with the file's path).
    pub fn new(
        config: GlobSourceConfig,
        mut mappers: impl FnMut(&Path) -> LineMapper<T> + Send + 'static,
        output: Arc<dyn SourceOutput<T, (u32, u64)>>,
    ) -> Self {
        Self::with_builder(
            config,
            Box::new(move |file_config, lane_output| {
                let mapper = mappers(&file_config.path);
                FileEventSource::new(file_config, mapper, lane_output)
            }),
            output,
        )
    }

    /// A source of lines (the identity mapper of [`FileEventSource::of_lines`]).
    pub fn of_lines(config: GlobSourceConfig, output: Arc<dyn SourceOutput<T, (u32, u64)>>) -> Self
    where
        T: From<Line>,
    {
        Self::with_builder(
            config,
            Box::new(|file_config, lane_output| {
                FileEventSource::of_lines(file_config, lane_output)
            }),
            output,
        )
    }

    fn with_builder(
        config: GlobSourceConfig,
        build: InnerBuilder<T>,
        output: Arc<dyn SourceOutput<T, (u32, u64)>>,
    ) -> Self {
        let hub = Arc::new(Hub {
            output: Arc::clone(&output),
            state: Mutex::new(HubState::default()),
            committers: Arc::default(),
            feed: config.name.clone(),
            loss_file: config
                .strategy
                .has_pointer()
                .then(|| crate::losses::loss_path(&config.registry_path())),
        });
        let registry = LaneRegistry::in_memory(config.registry_path());
        GlobFileSource {
            config,
            build,
            output,
            hub,
            registry,
            files: BTreeMap::new(),
            waiting: VecDeque::new(),
            next_scan: None,
            watch: FolderWatch::none(),
            wakeup: None,
            scans: 0,
            turn: 0,
            started: false,
            reported: None,
            unterminated: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &GlobSourceConfig {
        &self.config
    }

    /// The lane of a tracked file.
    pub fn lane_of(&self, path: &Path) -> Option<u32> {
        self.files
            .values()
            .find(|file| file.path == path)
            .map(|file| file.lane)
    }

    /// The committed offset (COMMITED) of a tracked file.
    pub fn committed_of(&self, path: &Path) -> Option<u64> {
        let file = self.files.values().find(|file| file.path == path)?;
        Some(match file.source.as_ref() {
            Some(source) => source.committed_position(),
            None => file.committed,
        })
    }

    /// Files with an open source now.
    pub fn open_files(&self) -> usize {
        self.files
            .values()
            .filter(|file| file.source.is_some())
            .count()
    }

    /// The tracked files, with lane, committed offset, size and lag.
    pub fn files(&self) -> Vec<FileLag> {
        self.files
            .values()
            .map(|file| FileLag {
                lane: file.lane,
                path: file.path.display().to_string(),
                committed: file.committed,
                size: file.size,
                lag: file.size.saturating_sub(file.committed),
            })
            .collect()
    }

    fn has_pointer(&self) -> bool {
        self.config.strategy.has_pointer()
    }

    /// The feed's state: CAUGHT_UP when every file is, else BEHIND naming a file.
    fn report_aggregate(&mut self) {
        let (state, detail, unterminated) = {
            let hub = self.hub.state.lock();
            let mut unterminated = 0u64;
            let mut behind: Vec<(u32, Option<String>)> = Vec::new();
            let mut all_ended = true;
            for (lane, lane_state) in &hub.lanes {
                unterminated += lane_state.unterminated;
                match lane_state.state {
                    SourceState::CaughtUp => all_ended = false,
                    SourceState::EndOfStream => {}
                    SourceState::Behind | SourceState::Starting => {
                        all_ended = false;
                        behind.push((*lane, lane_state.detail.clone()));
                    }
                }
            }
            let waiting = self.waiting.len();
            let name_of = |lane: u32| {
                self.files.get(&lane).map_or_else(
                    || format!("lane {lane}"),
                    |file| file.path.display().to_string(),
                )
            };
            if let Some((lane, detail)) = behind.first() {
                let more = behind.len() - 1 + waiting;
                let mut text = format!(
                    "{}: {}",
                    name_of(*lane),
                    detail.as_deref().unwrap_or("starting")
                );
                if more > 0 {
                    text.push_str(&format!(" (and {more} more files behind)"));
                }
                (SourceState::Behind, Some(text), unterminated)
            } else if waiting > 0 {
                (
                    SourceState::Behind,
                    Some(format!(
                        "{waiting} files wait for an open-file slot (max_open_files {})",
                        self.config.max_open_files
                    )),
                    unterminated,
                )
            } else if self.config.strategy.is_once() && all_ended {
                (SourceState::EndOfStream, None, unterminated)
            } else {
                (SourceState::CaughtUp, None, unterminated)
            }
        };
        if unterminated != self.unterminated {
            self.unterminated = unterminated;
            self.output.set_unterminated_bytes(unterminated);
        }
        let changed = self
            .reported
            .as_ref()
            .is_none_or(|(last, last_detail)| *last != state || *last_detail != detail);
        if changed {
            self.output.report_state(state, detail.as_deref());
            self.reported = Some((state, detail));
        }
    }
}

impl<T: Send + 'static> EventSource for GlobFileSource<T> {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn start(&mut self) -> Result<SourceStart, CoreError> {
        if is_glob(&self.config.folder()) {
            return Err(
                FileSourceError::WildcardFolder(self.config.pattern.display().to_string()).into(),
            );
        }
        let pattern = self.config.file_pattern();
        if let Some(rotated) = self
            .config
            .rotated
            .iter()
            .find(|rotated| glob_covers(rotated, &pattern))
        {
            return Err(FileSourceError::RotatedCoversGlob {
                rotated: rotated.clone(),
                pattern,
            }
            .into());
        }
        let mut committer = None;
        // watched before the first scan: a file created between the two is not missed
        self.watch = FolderWatch::new(
            &self.config.name,
            &self.config.folder(),
            self.wakeup.clone(),
        );
        {
            let mut state = self.hub.state.lock();
            state.positions = self.output.consumer_positions();
        }
        if self.has_pointer() {
            self.adopt_state_beside_the_files()?;
            // the registry, or rebuilt from the lanes the pointers record
            self.load_lanes()?;
            committer = Some(AnyCommitter::new(LaneMultiplexer {
                committers: Arc::clone(&self.hub.committers),
            }));
            // every file of the registry is tracked again, on its lane: one not found
            // now is looked for among its rotations by its own source (and forgotten
            // once nothing of it is left to commit). An entry the glob no longer
            // matches (the glob was changed) keeps its lane, unread.
            let pattern = self.config.file_pattern();
            let entries: Vec<(String, u32)> = self
                .registry
                .entries()
                .filter(|(name, _)| glob_matches(&pattern, name))
                .map(|(name, lane)| (name.to_owned(), lane))
                .collect();
            self.complete_moves()?;
            for (name, lane) in entries {
                let path = self.config.folder().join(&name);
                let pointer = self.config.pointer_path(&path);
                if !exists(&path) && pointer_holds_nothing(&pointer) {
                    // forgetting a file gone from the glob removes its pointer, then
                    // its lane (a loss it held was recorded before): a kill between
                    // the two leaves this lane. Its source would make a new pointer
                    // for a file that is not there, and refuse the consumers' saved
                    // position of the lane (seed 1796193559034); a start refused so
                    // before this fix left the blank pointer it made
                    remove_blank_pointer(&pointer)?;
                    self.registry.forget(&name)?;
                    info!(source = %self.config.name, file = %path.display(), lane,
                        "a lane whose file and pointer are gone (a run stopped while forgetting it): forgotten");
                    continue;
                }
                let record = std::fs::read(pointer)
                    .ok()
                    .map(|bytes| crate::pointer::PointerRecord::decode(&bytes).record)
                    .filter(|record| record.epoch != 0);
                self.track(lane, &name, self.config.strategy, false, record)?;
            }
        }
        self.started = true;
        self.scans = 0;
        self.scan()?;
        self.next_scan = Some(Instant::now() + self.config.scan_interval);
        self.report_aggregate();
        // the feed's epoch is the publishing lane's, set as each lane publishes: the
        // driver sets `Epoch::NONE` now, so the next publish selects its lane's again
        self.hub.state.lock().selected = None;
        Ok(SourceStart {
            epoch: Epoch::NONE,
            pause_by_default: true,
            committer,
        })
    }

    fn do_work(&mut self) -> Result<WorkDone, CoreError> {
        if !self.started {
            return Ok(WorkDone(0));
        }
        let mut work = 0usize;
        let now = Instant::now();
        let changes = self.watch.poll();
        // a file without an open handle written to: a scan gives it a slot now
        let closed_written = self.note_written(&changes);
        if self.next_scan.is_none_or(|at| now >= at) || changes.entries || closed_written {
            self.scan()?;
            self.settle()?;
            self.output.report_files(&self.files());
            self.next_scan = Some(now + self.scan_every());
        } else if !self.waiting.is_empty() {
            self.settle()?;
        }
        let open: Vec<u32> = self
            .files
            .values()
            .filter(|file| file.source.is_some())
            .map(|file| file.lane)
            .collect();
        // the source driver polls the feed's acknowledgements and replays its paused
        // items for every lane at once around this cycle (the lane adapters do
        // neither); it polls before the cycle, so what settle() and a slot hand-over
        // wait for (commits) progresses between cycles
        if !open.is_empty() {
            let first = self.turn % open.len();
            self.turn = self.turn.wrapping_add(1);
            // with files waiting for a slot, a file that had its turns reads no more
            // (a line it holds is still offered): once what it read is committed, it
            // gives its slot
            let yielding = !self.waiting.is_empty();
            let mut read = 0usize;
            for index in 0..open.len() {
                let lane = open[(first + index) % open.len()];
                if let Some(file) = self.files.get_mut(&lane) {
                    if let Some(source) = file.source.as_mut() {
                        if yielding
                            && file.cycles >= self.config.turns_per_slot
                            && !source.has_pending_line()
                        {
                            continue;
                        }
                        read += source.do_work()?.0;
                        file.cycles += 1;
                    }
                }
            }
            work += read;
        }
        // a file whose path names another file now: where did the open file go? A
        // scan now says (renamed inside the glob: followed); if it is not in the glob
        // any more, its source reads it to its end and goes on with the new file
        if self.files.values().any(|file| {
            file.source
                .as_ref()
                .is_some_and(FileEventSource::path_replaced)
        }) {
            self.scan()?;
            for file in self.files.values_mut() {
                if let Some(source) = file.source.as_mut() {
                    source.confirm_replacement();
                }
            }
            self.settle()?;
        }
        self.report_aggregate();
        Ok(WorkDone(work))
    }

    fn set_wakeup(&mut self, wakeup: Arc<mongoose_core::Wakeup>) {
        self.wakeup = Some(wakeup);
    }

    /// Until the next scan, when the folder's watch wakes the thread on a change and
    /// every open file is read to its end with nothing waiting (no file waits for a
    /// slot, none holds a line a full queue refused, none is being rotated).
    fn quiet_for(&self) -> Option<Duration> {
        let waits = !self.started
            || !self.watch.is_active()
            || !self.waiting.is_empty()
            || self.files.values().any(|file| {
                file.source
                    .as_ref()
                    .is_some_and(|source| !source.read_to_the_end())
            });
        if waits {
            return None;
        }
        let until_scan = self.next_scan.map_or(Duration::ZERO, |at| {
            at.saturating_duration_since(Instant::now())
        });
        Some(until_scan.min(crate::wake::SAFETY_LOOK))
    }

    fn stop(&mut self) -> Result<(), CoreError> {
        if !self.started {
            return Ok(());
        }
        self.started = false;
        self.watch = FolderWatch::none();
        let mut first_error = None;
        for file in self.files.values_mut() {
            if let Some(source) = file.source.as_mut() {
                if let Err(error) = source.stop() {
                    first_error.get_or_insert(error);
                }
            }
        }
        // the source driver commits what was processed before and after this stop
        first_error.map_or(Ok(()), Err)
    }
}

/// Whether something is at `path` (a dangling link counts: it is not gone).
fn exists(path: &Path) -> bool {
    !matches!(std::fs::symlink_metadata(path), Err(error) if error.kind() == std::io::ErrorKind::NotFound)
}

/// Whether the pointer file at `pointer` is absent, or blank: the zeroes of a pointer
/// a source made and never wrote (a damaged pointer is neither).
fn pointer_holds_nothing(pointer: &Path) -> bool {
    match std::fs::read(pointer) {
        Ok(bytes) => {
            bytes.len() == crate::pointer::POINTER_FILE_SIZE && bytes.iter().all(|byte| *byte == 0)
        }
        Err(error) => error.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Removes the blank pointer file at `pointer`, if there is one.
fn remove_blank_pointer(pointer: &Path) -> Result<(), CoreError> {
    match std::fs::remove_file(pointer) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(CoreError::io(
            format!("cannot remove the pointer file {}", pointer.display()),
            error,
        )),
        _ => Ok(()),
    }
}
