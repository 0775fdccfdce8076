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
//! * **Lanes** are kept in `<folder>/<feed>.lanes` (see the lanes module; COMMITED
//!   only, other strategies number lanes in memory): a file keeps its lane while it is
//!   tracked, and a lane number is never reused. Lanes start at 1.
//! * **Discovery**: at start, at once when inotify (Linux) reports a file created,
//!   moved or deleted in the folder, and every [`GlobSourceConfig::scan_interval`]
//!   (default 1 s; the only way elsewhere, and the fallback when the folder cannot be
//!   watched or the event queue overflowed). A new file is read from its start (COMMITED: no pointer yet, so from
//!   0 under a new epoch; LATEST: the files present at start are read from their end,
//!   later ones from their start; the ONCE strategies read the files present at start).
//! * **Not inputs**: pointer files, the registry, loss files, and the *rotations* of a
//!   tracked or matched file (`<name>.*`, `<name>-*`, or the configured `rotated`
//!   globs): a rotated file is read as its file's rotation by that file's own source,
//!   never as a new file (which would deliver its lines twice).
//! * **A deleted file is forgotten once fully committed**: when the scan no longer
//!   finds it and its source read its open handle to the end and committed all of it
//!   (or it has no open file), its source is stopped, its pointer file and its registry
//!   entry removed (INFO). Until then it is read from the open handle. A file deleted
//!   while the server was down is looked for among its rotations like a single file's;
//!   not found while its pointer held a position, it is reported as a possible loss.
//! * **`max_open_files`** (COMMITED only; default 256): at most that many files are
//!   open. A file at its end with everything committed gives its slot to a file that
//!   waits with unread bytes (oldest waiter first); so does a file that had
//!   [`GlobSourceConfig::turns_per_slot`] turns while others wait (it stops reading
//!   until what it read is committed), so a file that never stops growing cannot keep
//!   its slot. A file that gave its slot is reopened later from its pointer through the
//!   same identity check as a restart. (A file deleted while it had no slot is reopened
//!   to be finished: its rotation is looked for as at a restart, and if it is not found
//!   while its pointer held a position, it is reported as a possible loss.)
//! * **Renames inside the glob** (COMMITED): a file renamed to another name the glob
//!   matches (`app.log` -> `app-20261201.log` with `*.log`), while running or while
//!   down, is recognised by its pointer (file key and leading bytes) and keeps its lane:
//!   once what was read from the open handle is committed, its pointer file and its
//!   registry entry move to the new name and it is read on from the pointer, nothing
//!   read twice. (Without a pointer, EARLIEST/LATEST, a renamed file is read again on a
//!   new lane.)
//! * **Fairness**: each duty cycle gives every open file a turn of at most
//!   [`GlobSourceConfig::max_bytes_per_turn`] bytes, starting with another file each
//!   cycle.
//! * **Status**: the feed is CAUGHT_UP only when every file is; otherwise BEHIND with
//!   the file named. The files, with lane, committed offset, size and lag, are given to
//!   [`SourceOutput::report_files`] once per scan.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::{
    BatchEnd, ConsumerPosition, CoreError, Epoch, EventSource, FileLag, PublishRefused,
    SourceCommitter, SourceOutput, SourceState, TryPublish, WorkDone,
};
use parking_lot::Mutex;
use tracing::{debug, info, warn};

use crate::watch::FolderWatch;

use crate::config::{FileSourceConfig, ReadStrategy};
use crate::error::FileSourceError;
use crate::identity::key_of;
use crate::lanes::LaneRegistry;
use crate::line::Line;
use crate::pointer::{pointer_path_for, PointerRecord};
use crate::rotation;
use crate::source::{DataMapper, FileEventSource};

/// Whether `path` is a glob: its file name holds `*`, `?` or `[`.
pub fn is_glob(path: &Path) -> bool {
    path.file_name()
        .map(|name| name.to_string_lossy().contains(['*', '?', '[']))
        .unwrap_or(false)
}

/// Whether `name` matches the file-name glob `pattern`: `*` any run, `?` one
/// character, `[abc]`, `[a-z]`, `[!a-z]` (or `[^a-z]`) one character of (or not of)
/// the set.
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    let (mut p, mut n) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        let step = match pattern.get(p) {
            Some('*') => {
                star = Some((p, n));
                p += 1;
                continue;
            }
            Some('?') => Some(p + 1),
            Some('[') => match_class(&pattern, p, name[n]),
            Some(literal) if *literal == name[n] => Some(p + 1),
            _ => None,
        };
        match step {
            Some(next) => {
                p = next;
                n += 1;
            }
            None => match star {
                Some((star_p, star_n)) => {
                    p = star_p + 1;
                    n = star_n + 1;
                    star = Some((star_p, star_n + 1));
                }
                None => return false,
            },
        }
    }
    while pattern.get(p) == Some(&'*') {
        p += 1;
    }
    p == pattern.len()
}

/// Matches `c` against the class starting at `pattern[open] == '['`: the index after
/// the class when it matches. An unclosed `[` is a literal.
fn match_class(pattern: &[char], open: usize, c: char) -> Option<usize> {
    let mut i = open + 1;
    let negated = matches!(pattern.get(i), Some('!') | Some('^'));
    if negated {
        i += 1;
    }
    let first = i;
    let mut matched = false;
    while i < pattern.len() && (pattern[i] != ']' || i == first) {
        if i + 2 < pattern.len() && pattern[i + 1] == '-' && pattern[i + 2] != ']' {
            if pattern[i] <= c && c <= pattern[i + 2] {
                matched = true;
            }
            i += 3;
        } else {
            if pattern[i] == c {
                matched = true;
            }
            i += 1;
        }
    }
    if i >= pattern.len() {
        // no closing bracket: a literal '['
        return (c == '[').then_some(open + 1);
    }
    (matched != negated).then_some(i + 1)
}

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

    /// The lane registry file: `<folder>/<feed>.lanes`.
    pub fn registry_path(&self) -> PathBuf {
        let name: String = self
            .name
            .chars()
            .map(|c| if c == '/' || c == '\\' { '_' } else { c })
            .collect();
        self.folder().join(format!("{name}.lanes"))
    }
}

/// Builds the source of one file (its mapper is made per file).
type InnerBuilder<T> =
    Box<dyn FnMut(FileSourceConfig, Arc<dyn SourceOutput<T, u64>>) -> FileEventSource<T> + Send>;

/// A lane's committer, and whether it got acknowledgements since its last commit.
struct LaneCommitter {
    committer: Box<dyn SourceCommitter<u64>>,
    dirty: bool,
}

type Committers = Arc<Mutex<BTreeMap<u32, LaneCommitter>>>;

/// The one committer a glob source registers with its output: routes each
/// acknowledgement to its lane's committer and commits every lane that got some.
struct LaneMultiplexer {
    committers: Committers,
}

impl SourceCommitter<(u32, u64)> for LaneMultiplexer {
    fn acknowledged(&mut self, sequence: u64, epoch: Epoch, position: (u32, u64)) {
        let (lane, offset) = position;
        match self.committers.lock().get_mut(&lane) {
            Some(lane_committer) => {
                lane_committer
                    .committer
                    .acknowledged(sequence, epoch, offset);
                lane_committer.dirty = true;
            }
            None => {
                debug!(
                    lane,
                    offset, "an acknowledgement of a forgotten lane: ignored"
                )
            }
        }
    }

    fn commit(&mut self) -> Result<(), CoreError> {
        let mut first_error = None;
        for lane_committer in self.committers.lock().values_mut() {
            if !lane_committer.dirty {
                continue;
            }
            match lane_committer.committer.commit() {
                // a failed commit stays dirty: retried on the next poll
                Ok(()) => lane_committer.dirty = false,
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn commits_after_stop(&self) -> bool {
        true
    }
}

/// What the lane adapters of one glob source share (all on the source's thread).
struct Hub<T> {
    output: Arc<dyn SourceOutput<T, (u32, u64)>>,
    state: Mutex<HubState>,
    committers: Committers,
}

#[derive(Default)]
struct HubState {
    lanes: BTreeMap<u32, LaneState>,
    /// The lane and epoch the output's epoch was last set for.
    selected: Option<(u32, Epoch)>,
    /// What the consumers saved, as reported at the glob source's start.
    saved: Vec<ConsumerPosition>,
    /// Lanes whose source started once in this run: a later start (a file reopened
    /// after giving its slot) does not reconcile again with positions saved at start.
    reconciled: BTreeSet<u32>,
}

#[derive(Clone, Debug)]
struct LaneState {
    epoch: Epoch,
    state: SourceState,
    detail: Option<String>,
    unterminated: u64,
}

impl Default for LaneState {
    fn default() -> Self {
        LaneState {
            epoch: Epoch::NONE,
            state: SourceState::Starting,
            detail: None,
            unterminated: 0,
        }
    }
}

impl<T> Hub<T> {
    /// Sets the output's epoch to the lane's before publishing the lane's items.
    fn select(&self, lane: u32) {
        let mut state = self.state.lock();
        let epoch = state
            .lanes
            .get(&lane)
            .map_or(Epoch::NONE, |lane| lane.epoch);
        if state.selected != Some((lane, epoch)) {
            state.selected = Some((lane, epoch));
            self.output.set_epoch(epoch);
        }
    }
}

/// One file's view of the feed's output: positions `offset` become `(lane, offset)`.
struct LaneOutput<T> {
    lane: u32,
    hub: Arc<Hub<T>>,
}

impl<T: Send + 'static> SourceOutput<T, u64> for LaneOutput<T> {
    fn try_publish(&self, item: T, position: u64) -> TryPublish<T> {
        self.hub.select(self.lane);
        self.hub.output.try_publish(item, (self.lane, position))
    }

    fn try_publish_batch(&self, next: &mut dyn FnMut() -> Option<(T, u64)>) -> BatchEnd<T, u64> {
        self.hub.select(self.lane);
        let lane = self.lane;
        let mut laned = || next().map(|(item, offset)| (item, (lane, offset)));
        match self.hub.output.try_publish_batch(&mut laned) {
            BatchEnd::Exhausted => BatchEnd::Exhausted,
            BatchEnd::Paused => BatchEnd::Paused,
            BatchEnd::Returned(item, (_, offset), refusal) => {
                BatchEnd::Returned(item, offset, refusal)
            }
        }
    }

    fn publish(&self, item: T) -> Result<(), PublishRefused> {
        self.hub.output.publish(item)
    }

    fn cache(&self, item: T, position: u64) {
        self.hub.select(self.lane);
        self.hub.output.cache(item, (self.lane, position));
    }

    fn filtered(&self, position: u64, reason: &str) {
        self.hub.select(self.lane);
        self.hub.output.filtered((self.lane, position), reason);
    }

    fn poll_acknowledgements(&self) -> usize {
        self.hub.output.poll_acknowledgements()
    }

    fn flush_paused(&self) -> bool {
        self.hub.output.flush_paused()
    }

    fn acknowledge_with(&self, committer: Box<dyn SourceCommitter<u64>>) {
        self.hub.committers.lock().insert(
            self.lane,
            LaneCommitter {
                committer,
                dirty: false,
            },
        );
    }

    fn set_epoch(&self, epoch: Epoch) {
        let mut state = self.hub.state.lock();
        state.lanes.entry(self.lane).or_default().epoch = epoch;
    }

    fn set_pause_by_default(&self, pause: bool) {
        self.hub.output.set_pause_by_default(pause);
    }

    fn report_state(&self, source_state: SourceState, detail: Option<&str>) {
        let mut state = self.hub.state.lock();
        let lane = state.lanes.entry(self.lane).or_default();
        lane.state = source_state;
        lane.detail = detail.map(str::to_owned);
    }

    fn set_unterminated_bytes(&self, bytes: u64) {
        let mut state = self.hub.state.lock();
        state.lanes.entry(self.lane).or_default().unterminated = bytes;
    }

    fn report_rotated_unread(&self, file: &str, bytes: Option<u64>) {
        self.hub.output.report_rotated_unread(file, bytes);
    }

    fn saved_positions(&self) -> Vec<ConsumerPosition> {
        let mut state = self.hub.state.lock();
        if !state.reconciled.insert(self.lane) {
            return Vec::new();
        }
        // per consumer: its saved position of this lane, or none (a consumer whose
        // state holds nothing of this file needs it from its start)
        let mut by_consumer: BTreeMap<&str, Option<_>> = BTreeMap::new();
        for saved in &state.saved {
            let entry = by_consumer.entry(saved.consumer.as_str()).or_insert(None);
            if let Some((epoch, position)) = saved.saved {
                if position.lane == self.lane {
                    *entry = Some((epoch, position));
                }
            }
        }
        by_consumer
            .into_iter()
            .map(|(consumer, saved)| ConsumerPosition {
                consumer: consumer.to_owned(),
                saved,
            })
            .collect()
    }
}

/// One file of the glob.
struct Tracked<T> {
    lane: u32,
    path: PathBuf,
    name: String,
    /// Its source; `None` while it gave its open-file slot to another file.
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
    /// The file was renamed to this other name the glob matches: the lane moves to it
    /// once what was read from the open handle is committed.
    renamed_to: Option<String>,
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
        mut mappers: impl FnMut(&Path) -> DataMapper<T> + Send + 'static,
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
        output.set_pause_by_default(true);
        let hub = Arc::new(Hub {
            output: Arc::clone(&output),
            state: Mutex::new(HubState::default()),
            committers: Arc::default(),
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

    /// Whether `name` is the glob's own file or a pointer/registry/loss file.
    fn is_bookkeeping(&self, name: &str) -> bool {
        let registry = self
            .registry
            .path()
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        name.ends_with(".readPointer")
            || name.ends_with(".losses")
            || name.ends_with(".lanes")
            || name.ends_with(".lanes.tmp")
            || name == registry
    }

    /// The file names in the folder that are inputs: matching the glob, not
    /// bookkeeping, not the rotation of another tracked or matching file.
    fn scan_folder(&self) -> Result<Vec<String>, CoreError> {
        let folder = self.config.folder();
        let entries = match fs::read_dir(&folder) {
            Ok(entries) => entries,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => {
                return Err(CoreError::io(
                    format!(
                        "source '{}': cannot list the folder {} of the glob",
                        self.config.name,
                        folder.display()
                    ),
                    error,
                ))
            }
        };
        let pattern = self.config.file_pattern();
        let mut matched: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|entry| {
                entry
                    .metadata()
                    .is_ok_and(|metadata| metadata.is_file())
            })
            .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
            .filter(|name| glob_matches(&pattern, name) && !self.is_bookkeeping(name))
            .filter(|name| {
                if name.contains('\n') {
                    warn!(source = %self.config.name, file = %name.escape_debug(), "a file name with a line break is not read");
                    false
                } else {
                    true
                }
            })
            .collect();
        matched.sort();
        let mut owners: BTreeSet<String> = matched.iter().cloned().collect();
        owners.extend(self.files.values().map(|file| file.name.clone()));
        matched.retain(|name| !self.is_rotation(name, &owners));
        Ok(matched)
    }

    /// Whether `name` is the rotation of another of `owners`.
    fn is_rotation(&self, name: &str, owners: &BTreeSet<String>) -> bool {
        if self
            .config
            .rotated
            .iter()
            .any(|glob| glob_matches(glob, name))
        {
            return true;
        }
        owners.iter().any(|owner| {
            owner != name
                && rotation::default_globs(Path::new(owner))
                    .iter()
                    .any(|glob| glob_matches(glob, name))
        })
    }

    /// Starts a source for a file on its lane. Returns it started.
    fn start_file(
        &mut self,
        lane: u32,
        path: &Path,
        strategy: ReadStrategy,
    ) -> Result<FileEventSource<T>, CoreError> {
        let name = path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut file_config =
            FileSourceConfig::new(format!("{}:{name}", self.config.name), path, strategy);
        file_config.read_buffer_bytes = self.config.read_buffer_bytes;
        file_config.max_bytes_per_cycle = self.config.max_bytes_per_turn;
        file_config.rotated = self.config.rotated.clone();
        self.hub.state.lock().lanes.entry(lane).or_default();
        let lane_output: Arc<dyn SourceOutput<T, u64>> = Arc::new(LaneOutput {
            lane,
            hub: Arc::clone(&self.hub),
        });
        let mut source = (self.build)(file_config, lane_output);
        source.start()?;
        Ok(source)
    }

    /// Tracks a file on `lane`: opened now when a slot is free, else waiting.
    fn track(
        &mut self,
        lane: u32,
        name: &str,
        strategy: ReadStrategy,
        matched: bool,
    ) -> Result<(), CoreError> {
        let path = self.config.folder().join(name);
        let slot_free = !self.has_pointer() || self.open_files() < self.config.max_open_files;
        let source = if slot_free {
            Some(self.start_file(lane, &path, strategy)?)
        } else {
            self.waiting.push_back(lane);
            None
        };
        self.files.insert(
            lane,
            Tracked {
                lane,
                path,
                name: name.to_owned(),
                source,
                strategy,
                matched,
                cycles: 0,
                committed: 0,
                size: 0,
                parked_size: None,
                deleted_tail: None,
                renamed_to: None,
            },
        );
        Ok(())
    }

    /// Scans the folder: new files are tracked, files no longer found are marked.
    fn scan(&mut self) -> Result<(), CoreError> {
        let first = self.scans == 0;
        self.scans += 1;
        if !first && self.config.strategy.is_once() {
            return Ok(());
        }
        let found = self.scan_folder()?;
        let found_set: BTreeSet<&str> = found.iter().map(String::as_str).collect();
        for file in self.files.values_mut() {
            file.matched = found_set.contains(file.name.as_str());
        }
        let strategy = match self.config.strategy {
            // files found after the start are read from their start
            ReadStrategy::Latest if !first => ReadStrategy::Earliest,
            other => other,
        };
        for name in &found {
            if self.files.values().any(|file| &file.name == name) {
                continue;
            }
            if let Some(lane) = self.renamed_from(name) {
                self.renamed(lane, name)?;
                continue;
            }
            let lane = self.registry.assign(name)?;
            info!(source = %self.config.name, file = %name, lane, "a file matching the glob: reading it on its own lane");
            self.track(lane, name, strategy, true)?;
        }
        self.refresh_sizes();
        Ok(())
    }

    /// The lane of a tracked file whose name is gone and whose pointer describes the
    /// file now named `name` (file key, leading bytes, not shorter than the pointer):
    /// the same file renamed inside the glob. COMMITED only (the others have no
    /// pointer to tell).
    fn renamed_from(&self, name: &str) -> Option<u32> {
        if !self.has_pointer() {
            return None;
        }
        let path = self.config.folder().join(name);
        let file = fs::File::open(&path).ok()?;
        let key = key_of(&file.metadata().ok()?)?;
        self.files
            .values()
            .filter(|tracked| fs::symlink_metadata(&tracked.path).is_err())
            .find(|tracked| {
                let Ok(bytes) = fs::read(pointer_path_for(&tracked.path)) else {
                    return false;
                };
                let record = PointerRecord::decode(&bytes).record;
                record.epoch != 0
                    && record.file_key == key.0
                    && rotation::is_pointer_file(&file, &record)
            })
            .map(|tracked| tracked.lane)
    }

    /// `lane`'s file is now named `name`: moved at once when its source read nothing
    /// yet in this run (a rename while down) or gave its slot; else once what it read
    /// from its open handle is committed ([`GlobFileSource::settle`]).
    fn renamed(&mut self, lane: u32, name: &str) -> Result<(), CoreError> {
        let Some(file) = self.files.get_mut(&lane) else {
            return Ok(());
        };
        if file.source.is_none() || file.cycles == 0 {
            return self.move_lane(lane, name);
        }
        if file.renamed_to.as_deref() != Some(name) {
            info!(source = %self.config.name, file = %file.path.display(), renamed = %name, lane,
                "the file was renamed inside the glob: the same file, kept on its lane (finishing what was read from the open handle first)");
            file.renamed_to = Some(name.to_owned());
        }
        Ok(())
    }

    /// Moves `lane` to the file's new name: its source stopped, its pointer file
    /// renamed (first: a crash before the registry write leaves the pointer with the
    /// file, never a registry entry without its pointer, which would read the file
    /// again from its start), the registry entry renamed, and the source started on
    /// the new name, where the pointer resumes it.
    fn move_lane(&mut self, lane: u32, name: &str) -> Result<(), CoreError> {
        let folder = self.config.folder();
        let Some(file) = self.files.get_mut(&lane) else {
            return Ok(());
        };
        let had_slot = file.source.is_some();
        if let Some(mut source) = file.source.take() {
            source.stop()?;
        }
        let new_path = folder.join(name);
        let (old_pointer, new_pointer) =
            (pointer_path_for(&file.path), pointer_path_for(&new_path));
        match fs::rename(&old_pointer, &new_pointer) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => {
                return Err(CoreError::io(
                    format!(
                        "cannot move the pointer file {} to {} after a rename inside the glob",
                        old_pointer.display(),
                        new_pointer.display()
                    ),
                    error,
                ))
            }
        }
        let old_name = std::mem::replace(&mut file.name, name.to_owned());
        self.registry.rename(&old_name, name)?;
        info!(source = %self.config.name, from = %file.path.display(), to = %new_path.display(), lane,
            "a file renamed inside the glob keeps its lane and its pointer");
        file.path = new_path;
        file.matched = true;
        file.renamed_to = None;
        file.cycles = 0;
        file.parked_size = None;
        file.deleted_tail = None;
        self.waiting.retain(|waiting| *waiting != lane);
        if had_slot {
            self.unpark(lane)?;
        } else {
            self.waiting.push_back(lane);
        }
        Ok(())
    }

    /// The committed offset and size of every file, for the status.
    fn refresh_sizes(&mut self) {
        for file in self.files.values_mut() {
            if let Some(source) = file.source.as_ref() {
                let status = source.status();
                file.committed = if file.strategy.has_pointer() {
                    status.committed_position
                } else {
                    status.read_position
                };
            }
            if let Ok(metadata) = fs::metadata(&file.path) {
                file.size = metadata.len();
            } else if let Some(unread) = file
                .source
                .as_ref()
                .and_then(FileEventSource::open_file_unread_bytes)
            {
                let read = file.source.as_ref().map_or(0, |s| s.status().read_position);
                file.size = read + unread;
            }
        }
    }

    /// Forgets deleted files that are fully committed, and gives slots to waiting
    /// files.
    fn settle(&mut self) -> Result<(), CoreError> {
        let moving: Vec<(u32, String)> = self
            .files
            .values()
            .filter_map(|file| {
                let name = file.renamed_to.clone()?;
                let source = file.source.as_ref()?;
                parkable(source, false).then_some((file.lane, name))
            })
            .collect();
        for (lane, name) in moving {
            self.move_lane(lane, &name)?;
        }
        let gone: Vec<u32> = self
            .files
            .values_mut()
            .filter(|file| !file.matched && file.renamed_to.is_none())
            .filter_map(|file| forgettable(file).then_some(file.lane))
            .collect();
        for lane in gone {
            self.forget(lane)?;
        }
        if !self.has_pointer() {
            return Ok(());
        }
        // parked files that changed want a slot again
        for file in self.files.values() {
            if file.source.is_none()
                && !self.waiting.contains(&file.lane)
                && (file.parked_size.is_none_or(|size| size != file.size) || !file.matched)
            {
                self.waiting.push_back(file.lane);
            }
        }
        while let Some(&lane) = self.waiting.front() {
            if self.open_files() >= self.config.max_open_files && !self.park_one()? {
                break;
            }
            self.waiting.pop_front();
            self.unpark(lane)?;
        }
        Ok(())
    }

    /// Closes one open file with everything it read committed: at its end, or after
    /// its [`GlobSourceConfig::turns_per_slot`] turns (the one open the longest).
    /// False when none can give its slot now.
    fn park_one(&mut self) -> Result<bool, CoreError> {
        let turns = self.config.turns_per_slot;
        let candidate = self
            .files
            .values()
            .filter(|file| {
                file.source
                    .as_ref()
                    .is_some_and(|source| parkable(source, file.cycles >= turns))
            })
            .max_by_key(|file| file.cycles)
            .map(|file| file.lane);
        let Some(lane) = candidate else {
            return Ok(false);
        };
        let Some(file) = self.files.get_mut(&lane) else {
            return Ok(false);
        };
        if let Some(mut source) = file.source.take() {
            let status = source.status();
            source.stop()?;
            file.committed = status.committed_position;
            file.size = fs::metadata(&file.path).map_or(status.read_position, |m| m.len());
            // before its end (its turns were over): it waits for a slot again at once
            file.parked_size = (status.state == SourceState::CaughtUp).then_some(file.size);
            debug!(source = %self.config.name, file = %file.path.display(), lane, "gave its open-file slot to a waiting file");
        }
        Ok(true)
    }

    fn unpark(&mut self, lane: u32) -> Result<(), CoreError> {
        let Some((path, strategy)) = self
            .files
            .get(&lane)
            .filter(|file| file.source.is_none())
            .map(|file| (file.path.clone(), file.strategy))
        else {
            return Ok(());
        };
        let source = self.start_file(lane, &path, strategy)?;
        if let Some(file) = self.files.get_mut(&lane) {
            file.source = Some(source);
            file.cycles = 0;
            file.parked_size = None;
        }
        Ok(())
    }

    /// Stops a deleted file's source, removes its pointer file and its lane.
    fn forget(&mut self, lane: u32) -> Result<(), CoreError> {
        let Some(mut file) = self.files.remove(&lane) else {
            return Ok(());
        };
        if let Some(mut source) = file.source.take() {
            source.stop()?;
        }
        self.waiting.retain(|waiting| *waiting != lane);
        self.hub.committers.lock().remove(&lane);
        self.hub.state.lock().lanes.remove(&lane);
        if self.has_pointer() {
            // the pointer first: a crash before the registry write leaves a lane whose
            // file and pointer are gone, forgotten again at the next start
            let pointer = pointer_path_for(&file.path);
            match fs::remove_file(&pointer) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => {
                    return Err(CoreError::io(
                        format!("cannot remove the pointer file {}", pointer.display()),
                        error,
                    ))
                }
            }
        }
        self.registry.forget(&file.name)?;
        if let Some(tail) = file.deleted_tail.filter(|tail| *tail > 0) {
            warn!(source = %self.config.name, file = %file.path.display(), lane, bytes = tail,
                "the deleted file ended with bytes after its last line terminator: they were not published");
        }
        info!(source = %self.config.name, file = %file.path.display(), lane,
            "the file was deleted and everything read from it is committed: forgotten (its pointer and lane removed)");
        Ok(())
    }

    /// Without a registry, files that have pointers would get new lanes: a consumer
    /// that saved positions per lane would not know their lines and apply them again.
    /// Refused when a consumer holds positions of lanes; a warning otherwise.
    fn refuse_new_lanes_for_saved_ones(&self) -> Result<(), CoreError> {
        if self.registry.existed() {
            return Ok(());
        }
        let folder = self.config.folder();
        let pattern = self.config.file_pattern();
        let Ok(entries) = fs::read_dir(&folder) else {
            return Ok(());
        };
        let with_pointers: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
            .filter_map(|name| name.strip_suffix(".readPointer").map(str::to_owned))
            .filter(|name| glob_matches(&pattern, name))
            .collect();
        if with_pointers.is_empty() {
            return Ok(());
        }
        let lanes_saved = self.hub.state.lock().saved.iter().any(|consumer| {
            consumer
                .saved
                .is_some_and(|(_, position)| position.lane > 0)
        });
        let message = format!(
            "the lane registry {} is missing but {} files of the glob have pointer files ({}): they would be read on new lanes",
            self.registry.path().display(),
            with_pointers.len(),
            with_pointers.join(", ")
        );
        if lanes_saved {
            return Err(CoreError::Source {
                source_name: self.config.name.clone(),
                message: format!(
                    "{message}, and the feed's consumers hold saved positions of lanes, which would not match: their lines would be applied again. Restore the registry from a backup (it belongs with the pointers); or, to start over, move the pointer files and the consumers' saved state away"
                ),
            });
        }
        warn!(source = %self.config.name, "{message}: each resumes from its pointer");
        Ok(())
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

/// Whether a deleted file's source read its handle to the end and committed all of it
/// (or never had the file open in this run).
fn forgettable<T: Send + 'static>(file: &mut Tracked<T>) -> bool {
    if fs::symlink_metadata(&file.path).is_ok() {
        // the path names a file again (not matched: a rotation, or not a file)
        return false;
    }
    let Some(source) = file.source.as_ref() else {
        // parked: reopened to finish it (settle gives it a slot)
        return false;
    };
    if file.cycles == 0 || source.has_pending_line() {
        return false;
    }
    let status = source.status();
    let committed =
        !file.strategy.has_pointer() || status.committed_position == status.read_position;
    match source.open_file_unread_bytes() {
        None => true,
        Some(unread) => {
            if status.state != SourceState::CaughtUp || !committed {
                file.deleted_tail = None;
                return false;
            }
            if unread == 0 {
                return true;
            }
            // an unterminated last line: forgotten once it stopped growing
            let stable = file.deleted_tail == Some(unread);
            file.deleted_tail = Some(unread);
            stable
        }
    }
}

/// Whether an open file can give its slot: everything it read committed, nothing
/// pending, and at its end (or its turns are over).
fn parkable<T: Send + 'static>(source: &FileEventSource<T>, turns_over: bool) -> bool {
    let status = source.status();
    (turns_over || status.state == SourceState::CaughtUp)
        && status.committed_position == status.read_position
        && !source.has_pending_line()
}

impl<T: Send + 'static> EventSource for GlobFileSource<T> {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn start(&mut self) -> Result<(), CoreError> {
        if is_glob(&self.config.folder()) {
            return Err(
                FileSourceError::WildcardFolder(self.config.pattern.display().to_string()).into(),
            );
        }
        self.output.set_pause_by_default(true);
        // watched before the first scan: a file created between the two is not missed
        self.watch = FolderWatch::new(&self.config.name, &self.config.folder());
        self.hub.state.lock().saved = self.output.saved_positions();
        if self.has_pointer() {
            self.registry = LaneRegistry::load(self.config.registry_path())?;
            self.output.acknowledge_with(Box::new(LaneMultiplexer {
                committers: Arc::clone(&self.hub.committers),
            }));
            self.refuse_new_lanes_for_saved_ones()?;
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
            for (name, lane) in entries {
                self.track(lane, &name, self.config.strategy, false)?;
            }
        }
        self.started = true;
        self.scans = 0;
        self.scan()?;
        self.next_scan = Some(Instant::now() + self.config.scan_interval);
        self.report_aggregate();
        Ok(())
    }

    fn do_work(&mut self) -> Result<WorkDone, CoreError> {
        if !self.started {
            return Ok(WorkDone(0));
        }
        let mut work = 0usize;
        let now = Instant::now();
        if self.next_scan.is_none_or(|at| now >= at) || self.watch.changed() {
            self.scan()?;
            self.settle()?;
            self.output.report_files(&self.files());
            self.next_scan = Some(now + self.config.scan_interval);
        } else if !self.waiting.is_empty() {
            self.settle()?;
        }
        let open: Vec<u32> = self
            .files
            .values()
            .filter(|file| file.source.is_some())
            .map(|file| file.lane)
            .collect();
        if open.is_empty() {
            work += self.output.poll_acknowledgements();
            self.output.flush_paused();
        } else {
            let first = self.turn % open.len();
            self.turn = self.turn.wrapping_add(1);
            // with files waiting for a slot, a file that had its turns reads no more
            // (a line it holds is still offered): once what it read is committed, it
            // gives its slot
            let yielding = !self.waiting.is_empty();
            let mut skipped = false;
            for index in 0..open.len() {
                let lane = open[(first + index) % open.len()];
                if let Some(file) = self.files.get_mut(&lane) {
                    if let Some(source) = file.source.as_mut() {
                        if yielding
                            && file.cycles >= self.config.turns_per_slot
                            && !source.has_pending_line()
                        {
                            skipped = true;
                            continue;
                        }
                        work += source.do_work()?.0;
                        file.cycles += 1;
                    }
                }
            }
            if skipped {
                // commit what the skipped files' consumers processed
                work += self.output.poll_acknowledgements();
            }
        }
        self.report_aggregate();
        Ok(WorkDone(work))
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
        self.output.poll_acknowledgements();
        first_error.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_like_a_shell() {
        assert!(glob_matches("*.log", "a.log"));
        assert!(!glob_matches("*.log", "a.log.1"));
        assert!(glob_matches("app-?.log", "app-1.log"));
        assert!(glob_matches("app-[0-9].log", "app-7.log"));
        assert!(!glob_matches("app-[0-9].log", "app-x.log"));
        assert!(glob_matches("app-[!0-9].log", "app-x.log"));
        assert!(glob_matches("[ab]*", "b.txt"));
        assert!(!glob_matches("[ab]*", "c.txt"));
        assert!(glob_matches("a[", "a["));
        assert!(is_glob(Path::new("logs/*.log")));
        assert!(is_glob(Path::new("logs/app-[12].log")));
        assert!(!is_glob(Path::new("logs/app.log")));
    }
}
