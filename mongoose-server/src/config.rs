//! The server's configuration file (TOML): feeds, processor groups, sinks, the admin
//! address and the control-plane keys. Unknown keys and bad values fail at load with
//! the key path and what is expected.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use mongoose_core::{OverloadPolicy, OverloadSettings};
use mongoose_source_file::ReadStrategy;
use serde::Deserialize;

use crate::error::ServerError;

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
fn check_range(
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

/// What the void add does with a reply that is not APPLIED.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AddFailurePolicy {
    /// Log and return (default).
    #[default]
    Report,
    /// Return an error naming the outcome.
    Throw,
}

/// The source of a feed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceKind {
    /// A tailed or once-read file of lines.
    File,
}

/// An overload block: a policy and its bounds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverloadConfig {
    /// DROP_AFTER_SPIN, BLOCK_WITH_DEADLINE or PAUSE.
    pub policy: Option<OverloadPolicy>,
    /// How long a drop spins before dropping (default 10).
    pub spin_bound_millis: Option<u64>,
    /// BLOCK_WITH_DEADLINE only.
    pub block_deadline_millis: Option<u64>,
    /// DROP_AFTER_SPIN health recovery (default 60000, at least 1000).
    pub quiet_period_millis: Option<u64>,
    /// With BLOCK_WITH_DEADLINE (or PAUSE): when the queue latches (it lost or refused
    /// an item), run the server's kill switch once per latch, which ends the run with
    /// exit 1 (or the hook given to [`crate::ServerBuilder::overload_kill_switch`]).
    /// Refused with DROP_AFTER_SPIN or without a policy: such a queue never latches.
    #[serde(default)]
    pub kill_switch: bool,
    /// Per-group overrides.
    #[serde(default)]
    pub subscribers: BTreeMap<String, OverloadConfig>,
}

impl OverloadConfig {
    fn settings(&self, path: &str) -> Result<Option<OverloadSettings>, ServerError> {
        // a huge bound overflowed the publisher's deadline arithmetic (issue 10, item 6)
        if let Some(millis) = self.spin_bound_millis {
            check_range(
                format!("{path}.spin_bound_millis"),
                millis,
                0..=MAX_SPIN_BOUND_MILLIS,
                " ms",
            )?;
        }
        if let Some(millis) = self.block_deadline_millis {
            check_range(
                format!("{path}.block_deadline_millis"),
                millis,
                1..=MAX_TIMEOUT_MILLIS,
                " ms",
            )?;
        }
        if let Some(millis) = self.quiet_period_millis {
            check_range(
                format!("{path}.quiet_period_millis"),
                millis,
                1_000..=MAX_TIMEOUT_MILLIS,
                " ms",
            )?;
        }
        if self.kill_switch && !self.policy.is_some_and(OverloadPolicy::never_drops) {
            // a DROP_AFTER_SPIN queue drops without latching, and a block without a
            // policy has no settings to carry the switch: it could never run (issue 9,
            // item 12)
            return Err(ServerError::invalid(
                format!("{path}.kill_switch"),
                "the kill switch runs when a queue latches, and only a BLOCK_WITH_DEADLINE or PAUSE queue \
                 latches (on a loss): set policy = \"BLOCK_WITH_DEADLINE\" (with block_deadline_millis) \
                 in this block, or remove kill_switch",
            ));
        }
        let Some(policy) = self.policy else {
            if self.block_deadline_millis.is_some() {
                return Err(ServerError::invalid(
                    format!("{path}.block_deadline_millis"),
                    "a block deadline needs policy = \"BLOCK_WITH_DEADLINE\"",
                ));
            }
            return Ok(None);
        };
        let mut settings = match policy {
            OverloadPolicy::DropAfterSpin => OverloadSettings::drop_after_spin(),
            OverloadPolicy::Pause => OverloadSettings::pause(),
            OverloadPolicy::BlockWithDeadline => OverloadSettings {
                policy,
                ..OverloadSettings::drop_after_spin()
            },
        };
        if let Some(millis) = self.spin_bound_millis {
            settings.spin_bound = Duration::from_millis(millis);
        }
        settings.block_deadline = self.block_deadline_millis.map(Duration::from_millis);
        if let Some(millis) = self.quiet_period_millis {
            settings.quiet_period = Duration::from_millis(millis);
        }
        settings.kill_switch = self.kill_switch;
        settings
            .validate()
            .map_err(|error| ServerError::invalid(path.to_owned(), error.to_string()))?;
        Ok(Some(settings))
    }
}

/// One feed.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedConfig {
    /// The feed's name, unique.
    pub name: String,
    /// The source kind.
    pub source: SourceKind,
    /// The input file (relative to the config file's folder).
    pub path: PathBuf,
    /// The read strategy (default COMMITED).
    #[serde(default = "default_read_strategy")]
    pub read_strategy: ReadStrategy,
    /// Each subscriber queue's capacity (default 1024, at most [`MAX_QUEUE_CAPACITY`]).
    pub queue_capacity: Option<usize>,
    /// The overload block; a file feed without one pauses.
    #[serde(default)]
    pub overload: OverloadConfig,
    /// Deliver feed status events in band.
    #[serde(default)]
    pub status_events: bool,
    /// A file-name glob (`*`, `?`) of the input's rotations, in the input's folder
    /// (default `<name>.*` and `<name>-*`): at a restart the pointer's file is looked
    /// for among them when the path names another file.
    #[serde(default)]
    pub rotated: Option<String>,
    /// For a glob `path` (`logs/*.log`): how often, in milliseconds, the folder is
    /// scanned for new and deleted files (default 1000, 10 to 3,600,000). On Linux
    /// inotify triggers a scan at once; the periodic scan is the fallback.
    #[serde(default)]
    pub scan_interval_millis: Option<u64>,
    /// For a glob `path`: at most this many files open at once (default 256, 1 to
    /// 65,536; COMMITED only).
    #[serde(default)]
    pub max_open_files: Option<usize>,
}

impl FeedConfig {
    /// Whether the feed's path is a glob: one feed over every matching file, each on
    /// its own lane.
    pub fn is_glob(&self) -> bool {
        mongoose_source_file::is_glob(&self.path)
    }
}

/// The shortest and longest glob scan intervals.
pub const SCAN_INTERVAL_MILLIS: std::ops::RangeInclusive<u64> = 10..=3_600_000;

/// The largest `max_open_files`.
pub const MAX_OPEN_FILES: usize = 65_536;

fn default_read_strategy() -> ReadStrategy {
    ReadStrategy::Committed
}

/// How a group's thread idles when it has nothing to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IdleStrategyConfig {
    /// Spin.
    BusySpin,
    /// Yield the thread.
    Yield,
    /// Sleep this many milliseconds (1 to [`MAX_IDLE_SLEEP_MILLIS`]).
    SleepingMillis(u64),
    /// Spin, then yield, then park with growing waits (the default).
    #[default]
    Backoff,
}

impl<'de> Deserialize<'de> for IdleStrategyConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_idle(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown idle strategy '{text}': expected \"busy-spin\", \"yield\", \"backoff\" or \"sleeping-millis:N\" (N from 1 to {MAX_IDLE_SLEEP_MILLIS})"
            ))
        })
    }
}

fn parse_idle(text: &str) -> Option<IdleStrategyConfig> {
    match text {
        "busy-spin" => Some(IdleStrategyConfig::BusySpin),
        "yield" => Some(IdleStrategyConfig::Yield),
        "backoff" => Some(IdleStrategyConfig::Backoff),
        other => other
            .strip_prefix("sleeping-millis:")
            .and_then(|millis| millis.parse().ok())
            .map(IdleStrategyConfig::SleepingMillis),
    }
}

/// A processor by registered kind, with its settings.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessorConfig {
    /// The processor's name, unique in its group.
    pub name: String,
    /// The registered processor kind that builds it.
    pub kind: String,
    /// Settings given to the kind's factory. A string `feed` key names the feed the
    /// processor subscribes to (the ledger's does): the build refuses one the server
    /// does not have.
    #[serde(default)]
    pub settings: toml::Table,
}

/// A processor group.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    /// The group's name, unique.
    pub name: String,
    /// How the group's thread idles.
    #[serde(default)]
    pub idle_strategy: IdleStrategyConfig,
    /// Pin the group's thread to this core: one this process may run on (its CPU
    /// affinity, usually every online core: 0 to the number of cores - 1).
    pub core: Option<usize>,
    /// The group's processors.
    #[serde(default)]
    pub processors: Vec<ProcessorConfig>,
}

/// A sink processors write to.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    /// The sink's name.
    pub name: String,
    /// The sink kind: `file` (lines appended, unbuffered).
    pub kind: String,
    /// The output file.
    pub path: PathBuf,
}

/// RECORD mode: the inputs of the named processors (all when empty) are recorded into
/// `dir/<group>/` for `mongoose replay`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordSection {
    /// The recording folder (one sub-folder per group; refused if it holds a recording).
    pub dir: PathBuf,
    /// The processors recorded, by name; empty records every processor.
    #[serde(default)]
    pub processors: Vec<String>,
}

/// The admin API (see [`crate::admin`] for its routes and limits).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Where to listen (default 127.0.0.1:8089). An address that is not loopback needs
    /// `token_file`.
    #[serde(default = "default_admin_address")]
    pub address: String,
    /// A file holding the bearer token (relative to the config file's folder; trimmed;
    /// not empty, not readable by others). With it, every route but `GET /status` and
    /// `GET /metrics` on loopback needs `Authorization: Bearer <token>`.
    pub token_file: Option<PathBuf>,
    /// The folder audit exports are written below (relative to the config file's
    /// folder; default `exports`).
    pub export_root: Option<PathBuf>,
}

impl AdminConfig {
    /// Whether the address is a loopback one (127.0.0.0/8, ::1); false when it does
    /// not parse.
    pub fn is_loopback(&self) -> bool {
        self.address
            .parse::<std::net::SocketAddr>()
            .is_ok_and(|address| address.ip().to_canonical().is_loopback())
    }

    fn validate(&self) -> Result<(), ServerError> {
        if self.address.parse::<std::net::SocketAddr>().is_err() {
            return Err(ServerError::invalid(
                "admin.address",
                format!(
                    "'{}' is not an address: expected host:port, e.g. 127.0.0.1:8089",
                    self.address
                ),
            ));
        }
        if !self.is_loopback() && self.token_file.is_none() {
            return Err(ServerError::invalid(
                "admin.address",
                format!(
                    "'{}' is not a loopback address, so the admin API (which can stop processors, run their commands, export files and release held items) needs a bearer token: put a random token in a file only the server's user can read (e.g. `openssl rand -hex 32 > admin.token && chmod 600 admin.token`) and set token_file = \"admin.token\" in [admin], or listen on 127.0.0.1",
                    self.address
                ),
            ));
        }
        if self
            .export_root
            .as_ref()
            .is_some_and(|root| root.as_os_str().is_empty())
        {
            return Err(ServerError::invalid(
                "admin.export_root",
                "must not be empty: name a folder (default \"exports\")",
            ));
        }
        Ok(())
    }
}

fn default_admin_address() -> String {
    "127.0.0.1:8089".to_owned()
}

/// The whole configuration file.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// How long void control calls wait off agent threads (default 10000; 1 to
    /// [`MAX_TIMEOUT_MILLIS`]).
    #[serde(default = "default_control_wait")]
    pub control_wait_millis: u64,
    /// The end-to-end deadline of shutdown (default 30000; 1 to [`MAX_TIMEOUT_MILLIS`]).
    #[serde(default = "default_shutdown_timeout")]
    pub shutdown_timeout_millis: u64,
    /// The drain phase of shutdown (default 2000; 0, no drain, to
    /// `shutdown_timeout_millis`).
    #[serde(default = "default_drain_timeout")]
    pub shutdown_drain_timeout_millis: u64,
    /// REPORT (default) or THROW.
    #[serde(default)]
    pub add_failure_policy: AddFailurePolicy,
    /// Connector plugins to load at start.
    pub plugin_dir: Option<PathBuf>,
    /// The admin API; none when absent.
    pub admin: Option<AdminConfig>,
    /// RECORD mode; none when absent.
    pub record: Option<RecordSection>,
    /// The feeds.
    #[serde(default)]
    pub feeds: Vec<FeedConfig>,
    /// The processor groups.
    #[serde(default)]
    pub groups: Vec<GroupConfig>,
    /// The sinks.
    #[serde(default)]
    pub sinks: Vec<SinkConfig>,
    /// The folder relative paths are resolved against (the config file's).
    #[serde(skip)]
    pub base_dir: PathBuf,
}

impl Default for ServerConfig {
    /// What an empty configuration file gives (base folder: the current one): for a
    /// configuration built as a value, whose paths need not be UTF-8 as a TOML file's do.
    fn default() -> Self {
        ServerConfig {
            control_wait_millis: default_control_wait(),
            shutdown_timeout_millis: default_shutdown_timeout(),
            shutdown_drain_timeout_millis: default_drain_timeout(),
            add_failure_policy: AddFailurePolicy::default(),
            plugin_dir: None,
            admin: None,
            record: None,
            feeds: Vec::new(),
            groups: Vec::new(),
            sinks: Vec::new(),
            base_dir: PathBuf::new(),
        }
    }
}

fn default_control_wait() -> u64 {
    10_000
}
fn default_shutdown_timeout() -> u64 {
    30_000
}
fn default_drain_timeout() -> u64 {
    2_000
}

impl ServerConfig {
    /// Parses and validates a configuration text; relative paths resolve against
    /// `base_dir`.
    pub fn parse(text: &str, base_dir: &Path) -> Result<Self, ServerError> {
        let deserializer = toml::Deserializer::new(text);
        let mut config: ServerConfig =
            serde_path_to_error::deserialize(deserializer).map_err(|error| {
                let path = error.path().to_string();
                let error = error.into_inner();
                let mut message = error.message().trim().to_owned();
                if message.is_empty() {
                    // the parser says nothing about a value cut short at the end of
                    // the text (found by the config_loader fuzz target)
                    message = "not valid TOML: a value is missing or cut short".to_owned();
                }
                if let Some(span) = error.span() {
                    let (line, column) = line_and_column(text, span.start);
                    message = format!("{message} (line {line}, column {column})");
                }
                ServerError::Config { path, message }
            })?;
        config.base_dir = base_dir.to_path_buf();
        config.validate()?;
        Ok(config)
    }

    /// Reads, parses and validates a configuration file.
    pub fn load(path: &Path) -> Result<Self, ServerError> {
        let text = std::fs::read_to_string(path).map_err(|error| ServerError::Io {
            context: format!("cannot read the config file {}", path.display()),
            error,
        })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Self::parse(&text, &base)
    }

    /// Checks a configuration built as a value as [`ServerConfig::parse`] checks a file.
    pub fn validated(self) -> Result<Self, ServerError> {
        self.validate()?;
        Ok(self)
    }

    /// Resolves a path of the file against its folder.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.base_dir.join(path)
        }
    }

    /// The feed's default overload settings, if it configures a policy.
    pub fn feed_overload(&self, index: usize) -> Result<Option<OverloadSettings>, ServerError> {
        self.feeds[index]
            .overload
            .settings(&format!("feeds[{index}].overload"))
    }

    /// The feed's per-group overrides.
    pub fn feed_overrides(
        &self,
        index: usize,
    ) -> Result<Vec<(String, OverloadSettings)>, ServerError> {
        let mut overrides = Vec::new();
        for (group, block) in &self.feeds[index].overload.subscribers {
            let path = format!("feeds[{index}].overload.subscribers.{group}");
            if !block.subscribers.is_empty() {
                return Err(ServerError::invalid(
                    path,
                    "an override cannot have overrides of its own",
                ));
            }
            match block.settings(&path)? {
                Some(settings) => overrides.push((group.clone(), settings)),
                None => return Err(ServerError::invalid(path, "an override needs a policy")),
            }
        }
        Ok(overrides)
    }

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
            self.validate_glob(index)?;
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
            if sink.kind != "file" {
                return Err(ServerError::invalid(
                    format!("sinks[{index}].kind"),
                    format!("unknown sink kind '{}': expected \"file\"", sink.kind),
                ));
            }
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
fn available_cores() -> Vec<usize> {
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
fn cpus_allowed_list(status: &str) -> Option<Vec<usize>> {
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
    /// Refuses a path no file can have (a NUL byte): the source or sink would fail to
    /// open it at run time (issue 9, item 11: the run never ended).
    fn validate_paths(&self) -> Result<(), ServerError> {
        let mut paths: Vec<(String, &Path)> = Vec::new();
        for (index, feed) in self.feeds.iter().enumerate() {
            paths.push((format!("feeds[{index}].path"), &feed.path));
        }
        for (index, sink) in self.sinks.iter().enumerate() {
            paths.push((format!("sinks[{index}].path"), &sink.path));
        }
        if let Some(record) = &self.record {
            paths.push(("record.dir".to_owned(), &record.dir));
        }
        if let Some(dir) = &self.plugin_dir {
            paths.push(("plugin_dir".to_owned(), dir));
        }
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
            .feeds
            .iter()
            .enumerate()
            .map(|(index, feed)| (format!("feeds[{index}].path"), &feed.path))
            .chain(
                self.sinks
                    .iter()
                    .enumerate()
                    .map(|(index, sink)| (format!("sinks[{index}].path"), &sink.path)),
            );
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
        for (index, feed) in self.feeds.iter().enumerate() {
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
            for (index, feed) in self.feeds.iter().enumerate() {
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

/// Whether no file name can match both globs: their literal prefixes (before the first
/// wildcard) differ with neither starting the other, or their literal suffixes (after
/// the last wildcard) differ with neither ending the other. A sufficient test, not an
/// exact one: globs it cannot tell apart are taken to overlap.
fn globs_disjoint(a: &str, b: &str) -> bool {
    let wildcard = |c: char| matches!(c, '*' | '?' | '[' | ']');
    let prefix = |glob: &str| glob.find(wildcard).map_or(glob.len(), |at| at);
    let suffix = |glob: &str| glob.rfind(wildcard).map_or(0, |at| at + 1);
    let (pa, pb) = (&a[..prefix(a)], &b[..prefix(b)]);
    let (sa, sb) = (&a[suffix(a)..], &b[suffix(b)..]);
    !(pa.starts_with(pb) || pb.starts_with(pa)) || !(sa.ends_with(sb) || sb.ends_with(sa))
}

/// The 1-based line and column (in characters) of the byte offset `at` of `text`.
fn line_and_column(text: &str, at: usize) -> (usize, usize) {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    (line, before[line_start..].chars().count() + 1)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ServerConfig, ServerError> {
        ServerConfig::parse(text, Path::new("/etc/mongoose"))
    }

    const GOOD: &str = r#"
control_wait_millis = 5000
[admin]
address = "127.0.0.1:9000"
[[feeds]]
name = "lines"
source = "file"
path = "input.txt"
[feeds.overload]
policy = "PAUSE"
[feeds.overload.subscribers.audit]
policy = "DROP_AFTER_SPIN"
[[groups]]
name = "ledger"
idle_strategy = "sleeping-millis:1"
[[groups.processors]]
name = "ledger"
kind = "ledger"
settings = { state_dir = "state" }
"#;

    #[test]
    fn a_feed_takes_a_rotated_glob() {
        let config = parse(&GOOD.replace(
            "path = \"input.txt\"\n",
            "path = \"input.txt\"\nrotated = \"input-*.txt\"\n",
        ))
        .expect("valid");
        assert_eq!(config.feeds[0].rotated.as_deref(), Some("input-*.txt"));
        assert_eq!(parse(GOOD).expect("valid").feeds[0].rotated, None);
    }

    #[test]
    fn globs_are_disjoint_only_when_a_literal_prefix_or_suffix_tells_them_apart() {
        assert!(globs_disjoint("*.log", "*.csv"));
        assert!(globs_disjoint("app-*", "web-*"));
        assert!(!globs_disjoint("*.log", "app*"));
        assert!(!globs_disjoint("*.log", "*.log"));
        assert!(!globs_disjoint("*.log", "*-1.log"));
        assert!(!globs_disjoint("a*", "ab*"));
        assert!(globs_disjoint("[ab].log", "[ab].csv"));
    }

    #[test]
    fn a_glob_feed_takes_a_scan_interval_and_max_open_files_in_range() {
        let glob = |extra: &str| {
            parse(&GOOD.replace(
                "path = \"input.txt\"\n",
                &format!("path = \"logs/*.log\"\n{extra}"),
            ))
        };
        let config = glob("scan_interval_millis = 250\nmax_open_files = 8\n").expect("valid");
        assert!(config.feeds[0].is_glob());
        assert_eq!(config.feeds[0].scan_interval_millis, Some(250));
        assert_eq!(config.feeds[0].max_open_files, Some(8));
        let error = glob("scan_interval_millis = 1\n").expect_err("too short");
        assert!(
            error.to_string().contains("feeds[0].scan_interval_millis"),
            "{error}"
        );
        let error = glob("max_open_files = 0\n").expect_err("none");
        assert!(
            error.to_string().contains("feeds[0].max_open_files"),
            "{error}"
        );
        let error = parse(&GOOD.replace(
            "path = \"input.txt\"\n",
            "path = \"input.txt\"\nmax_open_files = 4\n",
        ))
        .expect_err("not a glob");
        assert!(
            error
                .to_string()
                .contains("only a feed whose path is a glob"),
            "{error}"
        );
        let error = parse(&GOOD.replace("path = \"input.txt\"\n", "path = \"logs-*/*.log\"\n"))
            .expect_err("a wildcard folder");
        assert!(error.to_string().contains("only the file name"), "{error}");
    }

    #[test]
    fn a_good_config_loads_with_defaults() {
        let config = parse(GOOD).expect("valid");
        assert_eq!(config.control_wait_millis, 5000);
        assert_eq!(config.shutdown_timeout_millis, 30_000);
        assert_eq!(config.feeds[0].read_strategy, ReadStrategy::Committed);
        assert_eq!(
            config.groups[0].idle_strategy,
            IdleStrategyConfig::SleepingMillis(1)
        );
        assert_eq!(
            config.resolve(Path::new("input.txt")),
            PathBuf::from("/etc/mongoose/input.txt")
        );
        let overrides = config.feed_overrides(0).expect("valid overrides");
        assert_eq!(overrides[0].0, "audit");
        assert_eq!(overrides[0].1.policy, OverloadPolicy::DropAfterSpin);
    }

    #[test]
    fn the_default_config_is_an_empty_file() {
        let empty = ServerConfig::parse("", Path::new("")).expect("valid");
        assert_eq!(empty, ServerConfig::default());
    }

    #[test]
    fn an_unknown_key_names_its_path_and_the_expected_keys() {
        let error = parse(&GOOD.replace("policy = \"PAUSE\"", "polcy = \"PAUSE\""))
            .expect_err("unknown key");
        let message = error.to_string();
        assert!(message.contains("feeds[0].overload"), "{message}");
        assert!(message.contains("unknown field `polcy`"), "{message}");
        assert!(
            message.contains("policy"),
            "the expected keys are listed: {message}"
        );
    }

    #[test]
    fn a_bad_policy_names_the_accepted_ones() {
        let error = parse(&GOOD.replace("\"PAUSE\"", "\"SOMETIMES\"")).expect_err("bad value");
        let message = error.to_string();
        assert!(message.contains("feeds[0].overload.policy"), "{message}");
        assert!(
            message.contains("PAUSE") && message.contains("DROP_AFTER_SPIN"),
            "{message}"
        );
    }

    #[test]
    fn a_block_deadline_with_pause_is_refused() {
        let error = parse(&GOOD.replace(
            "policy = \"PAUSE\"",
            "policy = \"PAUSE\"\nblock_deadline_millis = 50",
        ))
        .expect_err("deadline with PAUSE");
        let message = error.to_string();
        assert!(message.contains("feeds[0].overload"), "{message}");
        assert!(message.contains("not allowed with PAUSE"), "{message}");
    }

    #[test]
    fn a_duplicate_processor_name_in_a_group_fails_boot() {
        let twice = format!("{GOOD}[[groups.processors]]\nname = \"ledger\"\nkind = \"ledger\"\n");
        let error = parse(&twice).expect_err("duplicate");
        let message = error.to_string();
        assert!(
            message.contains("groups[0].processors[1].name"),
            "{message}"
        );
        assert!(
            message.contains("duplicate processor name 'ledger'"),
            "{message}"
        );
    }

    // issue 10, item 1: `address = "0.0.0.0:8089"` was accepted without a word
    #[test]
    fn a_non_loopback_admin_address_needs_a_token_file() {
        for address in ["0.0.0.0:9000", "[::]:9000", "10.1.2.3:9000"] {
            let error = parse(&GOOD.replace("127.0.0.1:9000", address)).expect_err(address);
            let message = error.to_string();
            assert!(message.contains("admin.address"), "{message}");
            assert!(
                message.contains("token_file = \"admin.token\""),
                "{message}"
            );
        }
        let with_token = GOOD.replace(
            "127.0.0.1:9000\"",
            "0.0.0.0:9000\"\ntoken_file = \"admin.token\"\nexport_root = \"audits\"",
        );
        let config = parse(&with_token).expect("a token file makes it valid");
        let admin = config.admin.expect("admin");
        assert!(!admin.is_loopback());
        assert_eq!(admin.export_root, Some(PathBuf::from("audits")));
        assert!(parse(&GOOD.replace("127.0.0.1:9000", "[::1]:9000")).is_ok());
    }

    #[test]
    fn two_feeds_whose_paths_differ_only_by_dots_are_refused() {
        // issue 9 item 5, where no folder of the path exists: compared lexically
        let twice = format!(
            "{GOOD}[[feeds]]\nname = \"again\"\nsource = \"file\"\npath = \"x/./../input.txt\"\n"
        );
        let message = parse(&twice).expect_err("one file, two feeds").to_string();
        assert!(message.contains("feeds[1].path"), "{message}");
        assert!(
            message.contains("'lines'") && message.contains("'again'"),
            "{message}"
        );
        assert!(message.contains("/etc/mongoose/input.txt"), "{message}");
        let apart = twice.replace("x/./../input.txt", "x/../other.txt");
        parse(&apart).expect("two files");
    }

    #[test]
    fn a_kill_switch_needs_a_policy_that_latches() {
        // issue 9 item 12
        let error = parse(&GOOD.replace(
            "policy = \"DROP_AFTER_SPIN\"",
            "policy = \"DROP_AFTER_SPIN\"\nkill_switch = true",
        ))
        .expect_err("a drop queue never latches");
        assert!(
            error
                .to_string()
                .contains("feeds[0].overload.subscribers.audit.kill_switch"),
            "{error}"
        );
        let block = GOOD.replace(
            "policy = \"DROP_AFTER_SPIN\"",
            "policy = \"BLOCK_WITH_DEADLINE\"\nblock_deadline_millis = 50\nkill_switch = true",
        );
        let config = parse(&block).expect("a BLOCK queue latches");
        assert!(
            config.feed_overrides(0).expect("overrides")[0]
                .1
                .kill_switch
        );
    }

    #[test]
    fn names_are_1_to_64_of_a_z_digits_dot_underscore_dash_and_never_dot_or_dot_dot() {
        // issue 10 item 5: a group named `../../../tmp/x` recorded outside record.dir
        for good in ["a", "Az09._-", "...", ".hidden", &"n".repeat(MAX_NAME_LEN)] {
            assert_eq!(name_problem(good), None, "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "a\\b",
            "a b",
            "é",
            "a\0",
            &"n".repeat(MAX_NAME_LEN + 1),
        ] {
            assert!(name_problem(bad).is_some(), "{bad:?} is refused");
        }
        let error = parse(&GOOD.replace("name = \"ledger\"\nidle", "name = \"../x\"\nidle"))
            .expect_err("refused");
        assert!(error.to_string().contains("groups[0].name"), "{error}");
    }

    #[test]
    fn ranges_name_the_key_and_the_accepted_values() {
        // issue 10 item 6
        for (text, key) in [
            (
                "shutdown_timeout_millis = 0\nshutdown_drain_timeout_millis = 0\n",
                "shutdown_timeout_millis",
            ),
            ("control_wait_millis = 3600001\n", "control_wait_millis"),
        ] {
            let error = parse(&format!(
                "{text}{}",
                GOOD.replace("control_wait_millis = 5000\n", "")
            ))
            .expect_err("out of range");
            assert!(
                matches!(&error, ServerError::Config { path, .. } if path == key),
                "{error}"
            );
            assert!(error.to_string().contains("3600000"), "{error}");
        }
        let error = parse(&GOOD.replace("sleeping-millis:1", "sleeping-millis:60001"))
            .expect_err("out of range");
        assert!(
            error.to_string().contains("groups[0].idle_strategy"),
            "{error}"
        );
        parse(&GOOD.replace("sleeping-millis:1", "sleeping-millis:60000")).expect("the maximum");
        let capacity = |capacity: usize| {
            parse(&GOOD.replace(
                "path = \"input.txt\"",
                &format!("path = \"input.txt\"\nqueue_capacity = {capacity}"),
            ))
        };
        capacity(MAX_QUEUE_CAPACITY).expect("the maximum");
        let error = capacity(MAX_QUEUE_CAPACITY + 1).expect_err("over the maximum");
        assert!(
            error.to_string().contains("feeds[0].queue_capacity"),
            "{error}"
        );
    }

    #[test]
    fn the_cores_allowed_are_read_from_the_process_status() {
        let status = "Name:\tmongoose\nCpus_allowed:\tf\nCpus_allowed_list:\t0-2,5,7-8\n";
        assert_eq!(cpus_allowed_list(status), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(cpus_allowed_list("Cpus_allowed_list:\t3\n"), Some(vec![3]));
        assert_eq!(cpus_allowed_list("Cpus_allowed_list:\t3-x\n"), None);
        assert_eq!(cpus_allowed_list("Name:\tx\n"), None);
        assert!(!available_cores().is_empty());
    }

    #[test]
    fn a_value_cut_short_at_the_end_says_so_and_where() {
        // found by the config_loader fuzz target: the message was empty
        let error =
            parse("control_wait_millis = 1\nshutdown_timeout_millis = ").expect_err("cut short");
        let message = error.to_string();
        assert!(
            message.contains("missing or cut short") && message.contains("line 2, column 27"),
            "{message}"
        );
    }

    #[test]
    fn a_bad_idle_strategy_and_a_bad_address_say_what_is_expected() {
        let error = parse(&GOOD.replace("sleeping-millis:1", "nap")).expect_err("bad idle");
        assert!(error.to_string().contains("sleeping-millis:N"), "{error}");
        let error = parse(&GOOD.replace("127.0.0.1:9000", "localhost")).expect_err("bad address");
        assert!(error.to_string().contains("admin.address"), "{error}");
    }
}
