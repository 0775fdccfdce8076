//! What a configuration must pass beyond its TOML types: names, ranges, paths the
//! disk can hold, feeds that do not share a file, and a record folder that holds no
//! recording yet.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use crate::error::ServerError;

use super::{FeedConfig, IdleStrategyConfig, ServerConfig, MAX_OPEN_FILES, SCAN_INTERVAL_MILLIS};

/// The longest name of a feed, group, processor or sink. Names are 1 to this many
/// characters of `[A-Za-z0-9._-]`, and not `.` or `..`: a group's name becomes a folder
/// of `record.dir`, so a name must never be able to climb out of it (issue 10, item 5).
pub const MAX_NAME_LEN: usize = 64;

/// The largest `queue_capacity` (1,048,576 items): a subscriber queue allocates all its
/// slots when it is created, one per item, for every group subscribed to the feed.
pub const MAX_QUEUE_CAPACITY: usize = 1 << 20;

/// The longest sleep of `idle_strategy = "sleeping-millis:N"` (one minute); N is at
/// least 1 (`busy-spin` or `yield` never sleep). A group's thread answers control
/// requests and its queues only between sleeps.
pub const MAX_IDLE_SLEEP_MILLIS: u64 = 60_000;

/// The longest spin of `spin_bound_millis` (one minute; 0 drops at once): a publisher
/// spins on the source's thread for this long before dropping.
pub const MAX_SPIN_BOUND_MILLIS: u64 = 60_000;

/// The longest timeout or wait of the file (one hour): `control_wait_millis`,
/// `shutdown_timeout_millis`, `shutdown_drain_timeout_millis`, `block_deadline_millis`
/// and `quiet_period_millis`. Each is at least 1 ms (the drain may be 0: no drain),
/// and the quiet period at least 1,000 ms.
pub const MAX_TIMEOUT_MILLIS: u64 = 3_600_000;

/// The largest sink `batch` (65,536 outputs): the runner and the sink allocate a batch's
/// room up front (a huge one panicked the sink's thread with "capacity overflow").
pub const MAX_SINK_BATCH: usize = 1 << 16;

/// The longest `expire_after_millis` of a sink (seven days).
pub const MAX_EXPIRE_MILLIS: u64 = 7 * 24 * 3_600_000;

/// What is wrong with `name` as the name of a feed, group, processor or sink, if
/// anything: see [`MAX_NAME_LEN`].
pub fn name_problem(name: &str) -> Option<String> {
    const RULE: &str = "a name is 1 to 64 characters of [A-Za-z0-9._-] (A-Z a-z 0-9 . _ -), other than '.' and '..' (names become parts of file paths, such as a group's folder in record.dir)";
    if name.is_empty() {
        return Some(format!("must not be empty: {RULE}"));
    }
    if name == "." || name == ".." {
        return Some(format!("'{name}' is not a name: {RULE}"));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Some(format!(
            "'{name}' holds {bad:?}, which a name cannot: {RULE}"
        ));
    }
    let length = name.chars().count();
    if length > MAX_NAME_LEN {
        return Some(format!("'{name}' is {length} characters long: {RULE}"));
    }
    None
}

/// Refuses `name` at `key` unless it follows the names rule ([`name_problem`]).
pub(crate) fn check_name(key: impl Into<String>, name: &str) -> Result<(), ServerError> {
    match name_problem(name) {
        None => Ok(()),
        Some(problem) => Err(ServerError::invalid(key, problem)),
    }
}

/// Refuses `value` at `key` outside `range`, saying which values are accepted.
pub(super) fn check_range(
    key: impl Into<String>,
    value: u64,
    range: std::ops::RangeInclusive<u64>,
    unit: &str,
) -> Result<(), ServerError> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(ServerError::invalid(
        key,
        format!(
            "{value} is out of range: give {} to {}{unit}",
            range.start(),
            range.end()
        ),
    ))
}

impl ServerConfig {
    /// Everything the file alone (and the disk it names) shows to be wrong: names,
    /// ranges, paths, duplicates. [`crate::ServerBuilder::check`] runs it again with
    /// what only the builder knows (processor kinds, processors added by code).
    pub(crate) fn validate(&self) -> Result<(), ServerError> {
        self.validate_paths()?;
        self.validate_ranges()?;
        let mut feeds = BTreeSet::new();
        for (index, feed) in self.feeds.iter().enumerate() {
            check_name(format!("feeds[{index}].name"), &feed.name)?;
            if !feeds.insert(feed.name.as_str()) {
                return Err(ServerError::invalid(
                    format!("feeds[{index}].name"),
                    format!(
                        "a feed named '{}' is already configured: feed names must be unique",
                        feed.name
                    ),
                ));
            }
            if let Some(capacity) = feed.queue_capacity {
                // a huge capacity panicked with "capacity overflow" at start (issue 10,
                // item 6)
                check_range(
                    format!("feeds[{index}].queue_capacity"),
                    capacity as u64,
                    1..=MAX_QUEUE_CAPACITY as u64,
                    " items",
                )?;
            }
            self.feed_overload(index)?;
            self.feed_overrides(index)?;
            self.validate_source(index)?;
            if feed.is_file() {
                self.validate_glob(index)?;
            }
        }
        let cores = available_cores();
        let mut groups = BTreeSet::new();
        for (index, group) in self.groups.iter().enumerate() {
            check_name(format!("groups[{index}].name"), &group.name)?;
            if !groups.insert(group.name.as_str()) {
                return Err(ServerError::invalid(
                    format!("groups[{index}].name"),
                    format!(
                        "a group named '{}' is already configured: group names must be unique",
                        group.name
                    ),
                ));
            }
            if let IdleStrategyConfig::SleepingMillis(millis) = group.idle_strategy {
                check_range(
                    format!("groups[{index}].idle_strategy"),
                    millis,
                    1..=MAX_IDLE_SLEEP_MILLIS,
                    " ms (sleeping-millis:N)",
                )?;
            }
            if let Some(core) = group.core {
                // pinning to a core that does not exist aborted the process (exit 134)
                if !cores.contains(&core) {
                    return Err(ServerError::invalid(
                        format!("groups[{index}].core"),
                        format!(
                            "core {core} does not exist or this process may not run on it: the cores it may use are {cores:?}; \
                             give one of them, or remove core"
                        ),
                    ));
                }
            }
            let mut names = BTreeSet::new();
            for (position, processor) in group.processors.iter().enumerate() {
                check_name(
                    format!("groups[{index}].processors[{position}].name"),
                    &processor.name,
                )?;
                if !names.insert(processor.name.as_str()) {
                    return Err(ServerError::invalid(
                        format!("groups[{index}].processors[{position}].name"),
                        format!(
                            "duplicate processor name '{}' in group '{}': a name is unique within its group",
                            processor.name, group.name
                        ),
                    ));
                }
            }
        }
        let mut sinks = BTreeSet::new();
        for (index, sink) in self.sinks.iter().enumerate() {
            check_name(format!("sinks[{index}].name"), &sink.name)?;
            sink.check_kind_settings(index, self.plugin_dir.is_some())?;
            sink.check_values(index)?;
            if !sinks.insert(sink.name.as_str()) {
                return Err(ServerError::invalid(
                    format!("sinks[{index}].name"),
                    format!(
                        "a sink named '{}' is already configured: sink names must be unique",
                        sink.name
                    ),
                ));
            }
        }
        self.refuse_feeds_sharing_a_file()?;
        self.refuse_feedback_loops()?;
        self.refuse_file_sinks_sharing_a_file()?;
        if let Some(admin) = &self.admin {
            admin.validate()?;
        }
        Ok(())
    }

    /// The top-level timeouts: at least 1 ms, at most [`MAX_TIMEOUT_MILLIS`] (a zero
    /// shutdown deadline was accepted and every stop was incomplete; a huge one
    /// overflowed the deadline arithmetic).
    fn validate_ranges(&self) -> Result<(), ServerError> {
        check_range(
            "control_wait_millis",
            self.control_wait_millis,
            1..=MAX_TIMEOUT_MILLIS,
            " ms",
        )?;
        check_range(
            "shutdown_timeout_millis",
            self.shutdown_timeout_millis,
            1..=MAX_TIMEOUT_MILLIS,
            " ms",
        )?;
        check_range(
            "stalled_exit_millis",
            self.stalled_exit_millis,
            1..=MAX_TIMEOUT_MILLIS,
            " ms",
        )?;
        check_range(
            "audit.open_timeout_millis",
            self.audit.open_timeout_millis,
            1..=MAX_TIMEOUT_MILLIS,
            " ms",
        )?;
        if self.shutdown_drain_timeout_millis > self.shutdown_timeout_millis {
            return Err(ServerError::invalid(
                "shutdown_drain_timeout_millis",
                "must not exceed shutdown_timeout_millis (the drain runs within the shutdown deadline)",
            ));
        }
        Ok(())
    }
}

impl ServerConfig {
    /// Refuses a `record.dir` whose folder of a group already holds a recording (its
    /// store is longer than a bare head): the recorder refuses it at start, which the
    /// run reported as a config error with exit 1. Only the file's length is looked
    /// at (a recording may be large). For a run that records: the server's build
    /// calls it, a replay (which records nothing) does not. Call it on a validated
    /// configuration: its group names never climb out of `record.dir`.
    pub(crate) fn refuse_recording_over_a_recording(&self) -> Result<(), ServerError> {
        let Some(record) = &self.record else {
            return Ok(());
        };
        let dir = self.resolve(&record.dir);
        for group in &self.groups {
            let store = dir.join(&group.name).join(mongoose_replay::RECORDING_FILE);
            let holds = std::fs::metadata(&store)
                .is_ok_and(|meta| meta.len() > mongoose_replay::HEADER_LEN as u64);
            if holds {
                return Err(ServerError::invalid(
                    "record.dir",
                    format!(
                        "{} already holds a recording (of group '{}'): RECORD never writes over one; \
                         move it away, or give a record.dir without one",
                        store.display(),
                        group.name
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The cores this process may run on: its main thread's CPU affinity on Linux (so a
/// configuration checked on a thread already pinned to one core is not refused the
/// others), else the calling thread's, else every core up to the machine's
/// parallelism.
pub(super) fn available_cores() -> Vec<usize> {
    if let Some(cores) = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| cpus_allowed_list(&status))
    {
        return cores;
    }
    match core_affinity::get_core_ids() {
        Some(ids) if !ids.is_empty() => ids.into_iter().map(|id| id.id).collect(),
        _ => (0..std::thread::available_parallelism().map_or(1, |count| count.get())).collect(),
    }
}

/// The cores of the `Cpus_allowed_list:` line of a `/proc/<pid>/status` text
/// (`0-3,8,10-11`), if it has a well-formed one.
pub(super) fn cpus_allowed_list(status: &str) -> Option<Vec<usize>> {
    let list = status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))?
        .trim();
    let mut cores = Vec::new();
    for part in list.split(',') {
        let (first, last): (usize, usize) = match part.split_once('-') {
            Some((first, last)) => (first.parse().ok()?, last.parse().ok()?),
            None => {
                let core = part.parse().ok()?;
                (core, core)
            }
        };
        if first > last || last - first > 1 << 16 {
            return None;
        }
        cores.extend(first..=last);
    }
    (!cores.is_empty()).then_some(cores)
}

impl ServerConfig {
    /// The feeds that read files (`source = "file"`), with their indexes.
    fn file_feeds(&self) -> impl Iterator<Item = (usize, &FeedConfig)> {
        self.feeds
            .iter()
            .enumerate()
            .filter(|(_, feed)| feed.is_file())
    }

    /// A file feed has a path and no plugin keys; a plugin feed has no file keys.
    /// Whether a plugin declares its kind is checked when the plugins are loaded
    /// ([`crate::ServerBuilder::check`]).
    fn validate_source(&self, index: usize) -> Result<(), ServerError> {
        let feed = &self.feeds[index];
        let at = |key: &str| format!("feeds[{index}].{key}");
        match feed.plugin_kind() {
            None => {
                if !feed.settings.is_empty() || feed.codec.is_some() {
                    let key = if feed.codec.is_some() {
                        "codec"
                    } else {
                        "settings"
                    };
                    return Err(ServerError::invalid(
                        at(key),
                        format!(
                            "`{key}` is a setting of a plugin feed, not of a file feed: remove it"
                        ),
                    ));
                }
            }
            Some(kind) => {
                if self.plugin_dir.is_none() {
                    return Err(ServerError::invalid(
                        at("source"),
                        format!(
                            "'{kind}' is not a built-in source kind (file) and no plugin_dir is set: set plugin_dir \
                             to the folder holding the plugin that declares it (cargo xtask plugins --out DIR builds them)"
                        ),
                    ));
                }
                if let Some(problem) = name_problem(kind) {
                    return Err(ServerError::invalid(at("source"), problem));
                }
                let file_keys = [
                    ("path", !feed.path.as_os_str().is_empty()),
                    ("rotated", feed.rotated.is_some()),
                    ("scan_interval_millis", feed.scan_interval_millis.is_some()),
                    ("max_open_files", feed.max_open_files.is_some()),
                ];
                if let Some((key, _)) = file_keys.iter().find(|(_, set)| *set) {
                    return Err(ServerError::invalid(
                        at(key),
                        format!(
                            "`{key}` is a setting of a file feed; feed '{}' reads the plugin source '{kind}':                              put what the plugin needs in its [feeds.settings] table",
                            feed.name
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Refuses a path no file can have (a NUL byte): the source or sink would fail to
    /// open it at run time (issue 9, item 11: the run never ended).
    fn validate_paths(&self) -> Result<(), ServerError> {
        let mut paths: Vec<(String, &Path)> = Vec::new();
        for (index, feed) in self.file_feeds() {
            paths.push((format!("feeds[{index}].path"), &feed.path));
        }
        for (index, sink) in self.sinks.iter().enumerate() {
            if let Some(path) = &sink.path {
                paths.push((format!("sinks[{index}].path"), path));
            }
        }
        if let Some(record) = &self.record {
            paths.push(("record.dir".to_owned(), &record.dir));
        }
        if let Some(dir) = &self.plugin_dir {
            paths.push(("plugin_dir".to_owned(), dir));
        }
        paths.push(("audit.capture_dir".to_owned(), &self.audit.capture_dir));
        for (key, path) in paths {
            if path.as_os_str().as_encoded_bytes().contains(&0) {
                return Err(ServerError::invalid(
                    key,
                    format!(
                        "the path {path:?} holds a NUL byte (\\0), which no file name can hold: fix the path"
                    ),
                ));
            }
            if path.as_os_str().is_empty() {
                return Err(ServerError::invalid(
                    key,
                    "must not be empty: give a file path",
                ));
            }
        }
        // a feed on a directory read it in a busy loop, 693,248 WARN lines in five
        // seconds (issue 10, item 8); a sink on one can never be written
        let files = self
            .file_feeds()
            .map(|(index, feed)| (format!("feeds[{index}].path"), &feed.path))
            .chain(self.sinks.iter().enumerate().filter_map(|(index, sink)| {
                sink.path
                    .as_ref()
                    .map(|path| (format!("sinks[{index}].path"), path))
            }));
        for (key, path) in files {
            let resolved = self.resolve(path);
            if resolved.is_dir() {
                return Err(ServerError::invalid(
                    key,
                    format!(
                        "{} is a directory: give the path of a file (it need not exist yet)",
                        resolved.display()
                    ),
                ));
            }
        }
        if let Some(record) = &self.record {
            let resolved = self.resolve(&record.dir);
            if resolved.exists() && !resolved.is_dir() {
                return Err(ServerError::invalid(
                    "record.dir",
                    format!(
                        "{} exists and is not a directory: give a folder (it need not exist yet)",
                        resolved.display()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The glob keys of feed `index`: only on a glob path, in range, and wildcards only
    /// in the file name.
    fn validate_glob(&self, index: usize) -> Result<(), ServerError> {
        let feed = &self.feeds[index];
        if !feed.is_glob() {
            for (key, set) in [
                ("scan_interval_millis", feed.scan_interval_millis.is_some()),
                ("max_open_files", feed.max_open_files.is_some()),
            ] {
                if set {
                    return Err(ServerError::invalid(
                        format!("feeds[{index}].{key}"),
                        format!(
                            "only a feed whose path is a glob (a file name with '*', '?' or '[', e.g. logs/*.log) takes {key}: \
                             remove it, or give a glob path"
                        ),
                    ));
                }
            }
            return Ok(());
        }
        if let Some(parent) = feed.path.parent() {
            if parent.to_string_lossy().contains(['*', '?', '[']) {
                return Err(ServerError::invalid(
                    format!("feeds[{index}].path"),
                    format!(
                        "the glob {} has wildcards in its folder: only the file name may hold '*', '?' or '[' (e.g. logs/*.log)",
                        feed.path.display()
                    ),
                ));
            }
        }
        if let Some(rotated) = feed.rotated.as_deref() {
            let pattern = feed
                .path
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default();
            if mongoose_source_file::glob_covers(rotated, &pattern) {
                return Err(ServerError::invalid(
                    format!("feeds[{index}].rotated"),
                    format!(
                        "the rotated glob '{rotated}' matches every file of the feed's glob '{pattern}': each would be taken for \
                         a rotation and none read. Give the pattern of the rotated names only (e.g. '{pattern}.[0-9]', or \
                         'app-*.log' for dateext names), or remove `rotated` (the default is <name>.* and <name>-* per file)"
                    ),
                ));
            }
        }
        if let Some(millis) = feed.scan_interval_millis {
            check_range(
                format!("feeds[{index}].scan_interval_millis"),
                millis,
                SCAN_INTERVAL_MILLIS,
                " ms",
            )?;
        }
        if let Some(files) = feed.max_open_files {
            check_range(
                format!("feeds[{index}].max_open_files"),
                files as u64,
                1..=MAX_OPEN_FILES as u64,
                " files",
            )?;
        }
        Ok(())
    }

    /// Refuses two feeds on one input file, however their paths are spelled: they would
    /// share the file's pointer (`<input>.readPointer`), and after a kill -9 lines were
    /// both lost and duplicated (issue 9, item 5).
    fn refuse_feeds_sharing_a_file(&self) -> Result<(), ServerError> {
        let mut seen: BTreeMap<PathBuf, usize> = BTreeMap::new();
        for (index, feed) in self.file_feeds() {
            let file = file_identity(&self.resolve(&feed.path));
            if let Some(&first) = seen.get(&file) {
                let other = &self.feeds[first];
                return Err(ServerError::invalid(
                    format!("feeds[{index}].path"),
                    format!(
                        "feeds '{}' (path \"{}\") and '{}' (path \"{}\") both read {}: two feeds on one file \
                         would share its pointer file and lose and duplicate lines after a crash; \
                         keep one feed and subscribe every group that needs the lines to it",
                        other.name,
                        other.path.display(),
                        feed.name,
                        feed.path.display(),
                        file.display()
                    ),
                ));
            }
            seen.insert(file, index);
        }
        // two glob feeds in one folder whose globs may match one file: both would use
        // its pointer (globs are compared by their literal prefix and suffix: disjoint
        // only when one of them tells every name apart)
        let globs: Vec<(usize, &FeedConfig, PathBuf)> = self
            .feeds
            .iter()
            .enumerate()
            .filter(|(_, feed)| feed.is_glob())
            .map(|(index, feed)| (index, feed, self.resolve(&feed.path)))
            .collect();
        for (later, (index, feed, path)) in globs.iter().enumerate() {
            for (_, other, other_path) in &globs[..later] {
                let (Some(folder), Some(pattern)) = (path.parent(), path.file_name()) else {
                    continue;
                };
                let (Some(other_folder), Some(other_pattern)) =
                    (other_path.parent(), other_path.file_name())
                else {
                    continue;
                };
                if file_identity(folder) == file_identity(other_folder)
                    && !globs_disjoint(&pattern.to_string_lossy(), &other_pattern.to_string_lossy())
                {
                    return Err(ServerError::invalid(
                        format!("feeds[{index}].path"),
                        format!(
                            "the globs of feeds '{}' (path \"{}\") and '{}' (path \"{}\") may match the same file: \
                             two feeds on one file would share its pointer file and lose and duplicate lines after a crash; \
                             give them different folders, or globs with distinct literal extensions or prefixes (*.log and *.csv)",
                            other.name,
                            other.path.display(),
                            feed.name,
                            feed.path.display()
                        ),
                    ));
                }
            }
        }
        // a single-file feed on a file a glob feed matches: both would use its pointer
        for (glob_index, glob) in self
            .feeds
            .iter()
            .enumerate()
            .filter(|(_, feed)| feed.is_glob())
        {
            let resolved = self.resolve(&glob.path);
            let (Some(folder), Some(pattern)) = (resolved.parent(), resolved.file_name()) else {
                continue;
            };
            let folder = file_identity(folder);
            let pattern = pattern.to_string_lossy();
            for (index, feed) in self.file_feeds() {
                if index == glob_index || feed.is_glob() {
                    continue;
                }
                let resolved = self.resolve(&feed.path);
                let (Some(feed_folder), Some(name)) = (resolved.parent(), resolved.file_name())
                else {
                    continue;
                };
                if file_identity(feed_folder) == folder
                    && mongoose_source_file::glob_matches(&pattern, &name.to_string_lossy())
                {
                    return Err(ServerError::invalid(
                        format!("feeds[{index}].path"),
                        format!(
                            "the glob of feed '{}' (path \"{}\") matches the file of feed '{}' (path \"{}\"): \
                             two feeds on one file would share its pointer file and lose and duplicate lines after a crash; \
                             narrow the glob, or keep one feed",
                            glob.name,
                            glob.path.display(),
                            feed.name,
                            feed.path.display()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl ServerConfig {
    /// Refuses a sink that writes what a feed reads: a file sink on a feed's input (or
    /// on a file a glob feed matches, its state file included), or a plugin sink and a
    /// plugin feed with one `settings.path`. Each output would come back as an input,
    /// for ever (a forward of 2 KB grew its file to 78 MB in 20 s).
    fn refuse_feedback_loops(&self) -> Result<(), ServerError> {
        let refuse = |index: usize, key: &str, feed: &FeedConfig, why: String| {
            Err(ServerError::invalid(
                format!("sinks[{index}].{key}"),
                format!(
                    "{why}: every output would be read back by feed '{}' and written again, for ever (a feedback loop); \
                     write the sink's file outside what the feed reads",
                    feed.name
                ),
            ))
        };
        for (index, sink) in self.sinks.iter().enumerate() {
            if let Some(path) = &sink.path {
                let output = self.resolve(path);
                let state = mongoose_sink::file::state_path(&output);
                for (_, feed) in self.file_feeds() {
                    let input = self.resolve(&feed.path);
                    if !feed.is_glob() {
                        if file_identity(&input) == file_identity(&output) {
                            return refuse(
                                index,
                                "path",
                                feed,
                                format!(
                                    "{} is the input of feed '{}'",
                                    output.display(),
                                    feed.name
                                ),
                            );
                        }
                        continue;
                    }
                    let (Some(folder), Some(pattern)) = (input.parent(), input.file_name()) else {
                        continue;
                    };
                    let pattern = pattern.to_string_lossy();
                    for written in [&output, &state] {
                        let (Some(written_folder), Some(name)) =
                            (written.parent(), written.file_name())
                        else {
                            continue;
                        };
                        if file_identity(written_folder) == file_identity(folder)
                            && mongoose_source_file::glob_matches(&pattern, &name.to_string_lossy())
                        {
                            return refuse(
                                index,
                                "path",
                                feed,
                                format!(
                                    "the glob {} of feed '{}' matches the sink's file {}",
                                    feed.path.display(),
                                    feed.name,
                                    written.display()
                                ),
                            );
                        }
                    }
                }
            }
            // a plugin sink and a plugin feed on one path (a journal sink into the
            // journal a feed tails)
            let Some(sink_path) = sink
                .settings
                .as_ref()
                .and_then(|settings| settings.get("path"))
                .and_then(|path| path.as_str())
            else {
                continue;
            };
            let sink_path = file_identity(&self.resolve(Path::new(sink_path)));
            for feed in &self.feeds {
                let feed_path = feed.settings.get("path").and_then(|path| path.as_str());
                if feed_path
                    .is_some_and(|path| file_identity(&self.resolve(Path::new(path))) == sink_path)
                {
                    return refuse(
                        index,
                        "settings.path",
                        feed,
                        format!(
                            "{} is also the path of feed '{}'",
                            sink_path.display(),
                            feed.name
                        ),
                    );
                }
            }
        }
        Ok(())
    }

    /// The file sink (`kind = "file"`) that writes the file `path` names (resolved
    /// against the config file's folder, however it is spelled), if any: a ledger's own
    /// alerts file must not be one (two writers into one file overwrite each other's
    /// lines).
    pub fn file_sink_writing(&self, path: &Path) -> Option<&super::SinkConfig> {
        let file = file_identity(&self.resolve(path));
        self.sinks.iter().find(|sink| {
            sink.kind == "file"
                && sink
                    .path
                    .as_ref()
                    .is_some_and(|own| file_identity(&self.resolve(own)) == file)
        })
    }

    /// Refuses two file sinks on one file, however their paths are spelled: each keeps
    /// its own state of what the file holds, and they overwrite each other's lines
    /// (issue 24, item 3: 200,000 of 400,000 lines overwritten).
    fn refuse_file_sinks_sharing_a_file(&self) -> Result<(), ServerError> {
        let mut seen: BTreeMap<PathBuf, usize> = BTreeMap::new();
        for (index, sink) in self.sinks.iter().enumerate() {
            let Some(path) = sink.path.as_ref().filter(|_| sink.kind == "file") else {
                continue;
            };
            let file = file_identity(&self.resolve(path));
            if file.starts_with("/dev") {
                // a device (/dev/null, /dev/stdout) keeps no state: several sinks may
                continue;
            }
            if let Some(&first) = seen.get(&file) {
                let other = &self.sinks[first];
                return Err(ServerError::invalid(
                    format!("sinks[{index}].path"),
                    format!(
                        "file sinks '{}' (path \"{}\") and '{}' (path \"{}\") write the same file, {}: \
                         two file sinks on one file overwrite each other's lines; give each sink a file of its own, \
                         or let the processors write into one sink (its outputs are keyed by processor)",
                        other.name,
                        other.path.as_deref().unwrap_or(Path::new("")).display(),
                        sink.name,
                        path.display(),
                        file.display()
                    ),
                ));
            }
            seen.insert(file, index);
        }
        Ok(())
    }
}

/// Whether no file name can match both globs: their literal prefixes (before the first
/// wildcard) differ with neither starting the other, or their literal suffixes (after
/// the last wildcard) differ with neither ending the other. A sufficient test, not an
/// exact one: globs it cannot tell apart are taken to overlap.
pub(super) fn globs_disjoint(a: &str, b: &str) -> bool {
    let wildcard = |c: char| matches!(c, '*' | '?' | '[' | ']');
    let prefix = |glob: &str| glob.find(wildcard).map_or(glob.len(), |at| at);
    let suffix = |glob: &str| glob.rfind(wildcard).map_or(0, |at| at + 1);
    let (pa, pb) = (&a[..prefix(a)], &b[..prefix(b)]);
    let (sa, sb) = (&a[suffix(a)..], &b[suffix(b)..]);
    !(pa.starts_with(pb) || pb.starts_with(pa)) || !(sa.ends_with(sb) || sb.ends_with(sa))
}

/// The file a path names, to compare two feeds' inputs: the longest prefix of the
/// path that exists is resolved by the file system (symlinks, `..`), the rest (which
/// does not exist yet) lexically.
fn file_identity(path: &Path) -> PathBuf {
    let components: Vec<Component<'_>> = path.components().collect();
    for split in (1..=components.len()).rev() {
        let prefix: PathBuf = components[..split].iter().collect();
        if let Ok(real) = std::fs::canonicalize(&prefix) {
            return lexical_join(real, &components[split..]);
        }
    }
    lexical_join(PathBuf::new(), &components)
}

fn lexical_join(mut base: PathBuf, components: &[Component<'_>]) -> PathBuf {
    for component in components {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                let climbs = matches!(
                    base.components().next_back(),
                    None | Some(Component::ParentDir)
                );
                if climbs {
                    base.push("..");
                } else {
                    base.pop();
                }
            }
            other => base.push(other.as_os_str()),
        }
    }
    base
}

impl crate::config::SinkConfig {
    /// The sink kinds built in: `file`, `stdout`, `tcp`, `http`.
    pub const BUILT_IN: [&'static str; 4] = ["file", "stdout", "tcp", "http"];

    /// Whether its kind is built in (else a plugin declares it).
    pub fn is_built_in(&self) -> bool {
        Self::BUILT_IN.contains(&self.kind.as_str())
    }

    /// Refuses an unknown kind, a missing setting of the kind, and a setting of
    /// another kind (it would be ignored).
    fn check_kind_settings(&self, index: usize, plugins: bool) -> Result<(), ServerError> {
        let at = |key: &str| format!("sinks[{index}].{key}");
        let given: [(&str, bool); 8] = [
            ("path", self.path.is_some()),
            ("sync", self.sync.is_some()),
            ("address", self.address.is_some()),
            ("url", self.url.is_some()),
            ("headers", self.headers.is_some()),
            (
                "connect_timeout_millis",
                self.connect_timeout_millis.is_some(),
            ),
            (
                "response_timeout_millis",
                self.response_timeout_millis.is_some(),
            ),
            ("write_timeout_millis", self.write_timeout_millis.is_some()),
        ];
        let (required, allowed): (&[&str], &[&str]) = match self.kind.as_str() {
            "file" => (&["path"], &["path", "sync"]),
            "stdout" => (&[], &[]),
            "tcp" => (
                &["address"],
                &["address", "connect_timeout_millis", "write_timeout_millis"],
            ),
            "http" => (
                &["url"],
                &[
                    "url",
                    "headers",
                    "connect_timeout_millis",
                    "response_timeout_millis",
                ],
            ),
            // a plugin's sink kind (checked against the loaded plugins when the server
            // is built): its settings are in its `settings` table
            other => {
                if !plugins {
                    return Err(ServerError::invalid(
                        at("kind"),
                        format!(
                            "unknown sink kind '{other}': expected \"file\", \"stdout\", \"tcp\" or \"http\", \
                             or a plugin's sink kind (set plugin_dir to the folder of the plugin that declares it)"
                        ),
                    ));
                }
                if let Some(problem) = name_problem(other) {
                    return Err(ServerError::invalid(at("kind"), problem));
                }
                (&[], &[])
            }
        };
        if self.settings.is_some() && self.is_built_in() {
            return Err(ServerError::invalid(
                at("settings"),
                format!(
                    "a {} sink has no `settings` table (that is for a plugin's sink kind): put its keys in the sink's table",
                    self.kind
                ),
            ));
        }
        for key in required {
            if !given.iter().any(|(name, set)| name == key && *set) {
                return Err(ServerError::invalid(
                    at(key),
                    format!("a {} sink needs `{key}`", self.kind),
                ));
            }
        }
        for (key, set) in given {
            if set && !allowed.contains(&key) {
                return Err(ServerError::invalid(
                    at(key),
                    format!(
                        "`{key}` is not a setting of a {} sink (its settings: {})",
                        self.kind,
                        if allowed.is_empty() {
                            "none".to_owned()
                        } else {
                            allowed.join(", ")
                        }
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Refuses values that would panic the sink's thread, wait for ever or never reach
    /// anything: sizes and times out of range, a maximum backoff below the initial one,
    /// a port outside 1 to 65535.
    fn check_values(&self, index: usize) -> Result<(), ServerError> {
        let at = |key: &str| format!("sinks[{index}].{key}");
        if let Some(batch) = self.batch {
            check_range(
                at("batch"),
                batch as u64,
                1..=MAX_SINK_BATCH as u64,
                " outputs",
            )?;
        }
        if let Some(capacity) = self.queue_capacity {
            check_range(
                at("queue_capacity"),
                capacity as u64,
                1..=MAX_QUEUE_CAPACITY as u64,
                " outputs",
            )?;
        }
        let times = [
            (
                "connect_timeout_millis",
                self.connect_timeout_millis,
                MAX_TIMEOUT_MILLIS,
            ),
            (
                "response_timeout_millis",
                self.response_timeout_millis,
                MAX_TIMEOUT_MILLIS,
            ),
            (
                "write_timeout_millis",
                self.write_timeout_millis,
                MAX_TIMEOUT_MILLIS,
            ),
            (
                "initial_backoff_millis",
                self.initial_backoff_millis,
                MAX_TIMEOUT_MILLIS,
            ),
            (
                "max_backoff_millis",
                self.max_backoff_millis,
                MAX_TIMEOUT_MILLIS,
            ),
            (
                "expire_after_millis",
                self.expire_after_millis,
                MAX_EXPIRE_MILLIS,
            ),
        ];
        for (key, value, max) in times {
            if let Some(value) = value {
                check_range(at(key), value, 1..=max, " ms")?;
            }
        }
        let defaults = mongoose_core::sink::RetryBudget::default();
        let initial = self
            .initial_backoff_millis
            .unwrap_or(defaults.initial_backoff.as_millis() as u64);
        let max = self
            .max_backoff_millis
            .unwrap_or(defaults.max_backoff.as_millis() as u64);
        if max < initial {
            return Err(ServerError::invalid(
                at(if self.max_backoff_millis.is_some() {
                    "max_backoff_millis"
                } else {
                    "initial_backoff_millis"
                }),
                format!(
                    "the maximum backoff ({max} ms) is below the initial one ({initial} ms): the backoff doubles from the initial one up to the maximum, so give a maximum at least as large"
                ),
            ));
        }
        if let Some(address) = &self.address {
            check_host_port(at("address"), address)?;
        }
        if let Some(url) = &self.url {
            check_url_port(at("url"), url)?;
        }
        Ok(())
    }
}

/// Refuses `host:port` at `key` without a port of 1 to 65535.
fn check_host_port(key: String, address: &str) -> Result<(), ServerError> {
    let port = address
        .rsplit_once(':')
        .map(|(_, port)| port)
        .filter(|port| !port.contains(']'));
    match port.map(str::parse::<u32>) {
        Some(Ok(port)) if (1..=65_535).contains(&port) => Ok(()),
        Some(Ok(port)) => Err(ServerError::invalid(
            key,
            format!("port {port} of '{address}' is out of range: give 1 to 65535"),
        )),
        _ => Err(ServerError::invalid(
            key,
            format!("'{address}' has no port: expected host:port, e.g. 127.0.0.1:5140"),
        )),
    }
}

/// Refuses a URL at `key` whose port (if it gives one) is outside 1 to 65535.
fn check_url_port(key: String, url: &str) -> Result<(), ServerError> {
    let Some((_, rest)) = url.split_once("://") else {
        return Ok(()); // the sink says what a URL needs when it is made
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let port = match host_port.rsplit_once(':') {
        Some((_, port)) if !port.contains(']') => port,
        _ => return Ok(()),
    };
    match port.parse::<u32>() {
        Ok(number) if (1..=65_535).contains(&number) => Ok(()),
        _ => Err(ServerError::invalid(
            key,
            format!("port '{port}' of {url} is not a port: give 1 to 65535"),
        )),
    }
}
