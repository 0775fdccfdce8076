//! The server's configuration file (TOML): feeds, processor groups, sinks, the admin
//! address and the control-plane keys. Unknown keys and bad values fail at load with
//! the key path and what is expected.
//!
//! This module holds the TOML types and the loading (errors name the key path, and the
//! line and column for a syntax error); `validate` holds the names, ranges and the
//! checks a loaded configuration must pass.

mod adopt;
pub mod data_dir;
mod env;
pub mod running;
mod sink;
#[cfg(test)]
mod tests;
mod text;
pub use sink::SinkConfig;
mod validate;

use text::{key_path_at, line_and_column, not_toml_hint};
pub(crate) use validate::check_name;
use validate::check_range;
pub use validate::{
    name_problem, MAX_EXPIRE_MILLIS, MAX_IDLE_SLEEP_MILLIS, MAX_NAME_LEN, MAX_QUEUE_CAPACITY,
    MAX_SINK_BATCH, MAX_SPIN_BOUND_MILLIS, MAX_TIMEOUT_MILLIS,
};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mongoose_core::{OverloadPolicy, OverloadSettings};
use mongoose_source_file::ReadStrategy;
use serde::{Deserialize, Serialize};

use crate::error::ServerError;

/// What the void add does with a reply that is not APPLIED.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AddFailurePolicy {
    /// Log and return (default).
    #[default]
    Report,
    /// Return an error naming the outcome.
    Throw,
}

/// The source of a feed: `"file"` (built in), or a source kind a plugin of
/// `plugin_dir` declares (`"counter"`, `"journal"`, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceKind {
    /// A tailed or once-read file of lines.
    File,
    /// A source kind declared by a loaded plugin.
    Plugin(String),
}

impl SourceKind {
    /// The kind's name as the config spells it.
    pub fn as_str(&self) -> &str {
        match self {
            SourceKind::File => "file",
            SourceKind::Plugin(kind) => kind,
        }
    }
}

impl Serialize for SourceKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SourceKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let kind = String::deserialize(deserializer)?;
        Ok(match kind.as_str() {
            "file" => SourceKind::File,
            _ => SourceKind::Plugin(kind),
        })
    }
}

/// How a plugin feed's items (bytes, as the plugin publishes them) become the feed's
/// item type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FeedCodec {
    /// Each item is a [`mongoose_source_file::Line`] (the ledger and `forward` read
    /// them as they read a file feed's lines). The default.
    #[default]
    Line,
    /// Each item is the plugin's bytes ([`bytes::Bytes`]), for processors added by code.
    Bytes,
}

/// An overload block: a policy and its bounds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
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
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FeedConfig {
    /// The feed's name, unique.
    pub name: String,
    /// The source kind: `file`, or a kind a plugin of `plugin_dir` declares.
    pub source: SourceKind,
    /// The input file (relative to the config file's folder): a file feed's only.
    #[serde(default)]
    pub path: PathBuf,
    /// A plugin feed's settings, given to the plugin's source as TOML text.
    #[serde(default)]
    pub settings: toml::Table,
    /// A plugin feed's item type: `line` (default) or `bytes`.
    #[serde(default)]
    pub codec: Option<FeedCodec>,
    /// The read strategy (default COMMITTED; COMMITED is read as an alias).
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
    /// 65,536; COMMITTED only).
    #[serde(default)]
    pub max_open_files: Option<usize>,
}

impl FeedConfig {
    /// Whether the feed's path is a glob: one feed over every matching file, each on
    /// its own lane.
    pub fn is_glob(&self) -> bool {
        self.is_file() && mongoose_source_file::is_glob(&self.path)
    }

    /// Whether the feed reads a file (`source = "file"`), not a plugin's source.
    pub fn is_file(&self) -> bool {
        self.source == SourceKind::File
    }

    /// A plugin feed's source kind, `None` for a file feed.
    pub fn plugin_kind(&self) -> Option<&str> {
        match &self.source {
            SourceKind::File => None,
            SourceKind::Plugin(kind) => Some(kind),
        }
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

impl Serialize for IdleStrategyConfig {
    /// As the config spells it (`busy-spin`, `sleeping-millis:5`, ...).
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            IdleStrategyConfig::BusySpin => serializer.serialize_str("busy-spin"),
            IdleStrategyConfig::Yield => serializer.serialize_str("yield"),
            IdleStrategyConfig::Backoff => serializer.serialize_str("backoff"),
            IdleStrategyConfig::SleepingMillis(millis) => {
                serializer.serialize_str(&format!("sleeping-millis:{millis}"))
            }
        }
    }
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
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
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
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
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

/// RECORD mode: the inputs of the named processors (all when empty) are recorded for
/// `mongoose replay`, each run into a new folder `dir/run-<N>/<group>/` (N one more than
/// the highest there), so a recording is never written over and a restarted server
/// records again.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RecordSection {
    /// The recordings' folder: one `run-<N>` folder per run, one folder per group in it.
    pub dir: PathBuf,
    /// The processors recorded, by name; empty records every processor.
    #[serde(default)]
    pub processors: Vec<String>,
}

/// The admin API (see [`crate::admin`] for its routes and limits).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
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

/// Audit capture (book: guarantees/control-plane.md): each session of `POST
/// /audit/{selector}/start` records into a fresh `capture-<id>` folder below
/// `capture_dir`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AuditSection {
    /// Whether the admin API may start captures (default true).
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// The capture root (relative to the config file's folder; default `captures`).
    #[serde(default = "default_capture_dir")]
    pub capture_dir: PathBuf,
    /// How long one capture open may take before the start is answered FAILED "open
    /// timed out" (default 30000; 1 to [`MAX_TIMEOUT_MILLIS`]).
    #[serde(default = "default_open_timeout")]
    pub open_timeout_millis: u64,
    /// Where a session's records go: `journal` (default: a `mongoose-journal` in the
    /// session's folder, readable with `mongoose journal tail`) or `file` (one
    /// checksummed records file).
    #[serde(default)]
    pub store: CaptureStore,
}

/// The storage of audit capture sessions ([`AuditSection::store`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CaptureStore {
    /// A journal per session (`<session>/journal`).
    #[default]
    Journal,
    /// A checksummed records file per session.
    File,
}

impl Default for AuditSection {
    fn default() -> Self {
        AuditSection {
            enabled: true,
            capture_dir: default_capture_dir(),
            open_timeout_millis: default_open_timeout(),
            store: CaptureStore::default(),
        }
    }
}

fn default_true() -> bool {
    true
}

fn default_capture_dir() -> PathBuf {
    PathBuf::from("captures")
}

fn default_open_timeout() -> u64 {
    30_000
}

fn default_admin_address() -> String {
    "127.0.0.1:8089".to_owned()
}

/// The whole configuration file.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
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
    /// With `--exit-when-settled`: how long every unsettled feed may stay stalled, with
    /// no sink still trying an output, before the run ends with exit 1 naming the stalls
    /// (default 30000; 1 to [`MAX_TIMEOUT_MILLIS`]). Such a stall needs an operator (a
    /// full disk under a processor's state, a source that cannot read on, a processor
    /// that failed): a run that cannot go on ends instead of waiting for ever.
    #[serde(default = "default_stalled_exit")]
    pub stalled_exit_millis: u64,
    /// How often a run logs its progress at INFO, one line per feed and per sink
    /// (default 10; 0 disables; at most 86400).
    #[serde(default = "default_progress_interval")]
    pub progress_interval_seconds: u64,
    /// The log filter, in `RUST_LOG`'s syntax (`info`, `warn,mongoose_server=debug`):
    /// when set, `mongoose run` logs with it instead of `RUST_LOG`'s, and a reload
    /// changes it live. Unset: `RUST_LOG`, else `info`.
    #[serde(default)]
    pub log_level: Option<String>,
    /// REPORT (default) or THROW.
    #[serde(default)]
    pub add_failure_policy: AddFailurePolicy,
    /// The folder of connector plugins (`*.so`, built by `cargo xtask plugins`), loaded
    /// when the server is built: a feed's `source` and a sink's `kind` may name a kind
    /// they declare.
    pub plugin_dir: Option<PathBuf>,
    /// The admin API; none when absent.
    pub admin: Option<AdminConfig>,
    /// RECORD mode; none when absent.
    pub record: Option<RecordSection>,
    /// Audit capture of processors (enabled by default, below `captures`).
    #[serde(default)]
    pub audit: AuditSection,
    /// The feeds.
    #[serde(default)]
    pub feeds: Vec<FeedConfig>,
    /// The processor groups.
    #[serde(default)]
    pub groups: Vec<GroupConfig>,
    /// The sinks.
    #[serde(default)]
    pub sinks: Vec<SinkConfig>,
    /// The folder of everything the server writes for a feed or a sink (pointers, lane
    /// registries, loss files, sink states), relative to the config file's folder
    /// (default `data`); one server at a time (`<data_dir>/lock`). See [`data_dir`].
    #[serde(default = "data_dir::default_data_dir")]
    pub data_dir: PathBuf,
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
            stalled_exit_millis: default_stalled_exit(),
            progress_interval_seconds: default_progress_interval(),
            log_level: None,
            shutdown_timeout_millis: default_shutdown_timeout(),
            shutdown_drain_timeout_millis: default_drain_timeout(),
            add_failure_policy: AddFailurePolicy::default(),
            plugin_dir: None,
            admin: None,
            record: None,
            audit: AuditSection::default(),
            feeds: Vec::new(),
            groups: Vec::new(),
            sinks: Vec::new(),
            data_dir: data_dir::default_data_dir(),
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
fn default_stalled_exit() -> u64 {
    30_000
}
fn default_progress_interval() -> u64 {
    10
}

fn default_drain_timeout() -> u64 {
    2_000
}

impl ServerConfig {
    /// Parses and validates a configuration text; relative paths resolve against
    /// `base_dir`.
    ///
    /// String values may name environment variables (`${VAR}`, `${VAR:-default}`,
    /// `$${` for a literal `${`): see the `env` module of this one for the rules. An
    /// unset variable without a default is an error at the value's key path.
    pub fn parse(text: &str, base_dir: &Path) -> Result<Self, ServerError> {
        Self::parse_with_environment(text, base_dir, &env::process_environment)
    }

    /// [`ServerConfig::parse`] with the variables `lookup` gives.
    fn parse_with_environment(
        text: &str,
        base_dir: &Path,
        lookup: env::Lookup<'_>,
    ) -> Result<Self, ServerError> {
        // a text that is not TOML is reported by the deserialization below, with its line
        if let Ok(mut table) = text.parse::<toml::Table>() {
            let expanded = env::expand_table(&mut table, lookup)
                .map_err(|error| ServerError::invalid(error.path, error.message))?;
            if expanded.changed {
                let mut config: ServerConfig = env::deserialize_expanded(table, expanded)?;
                config.base_dir = base_dir.to_path_buf();
                config.validate()?;
                return Ok(config);
            }
        }
        let deserializer = toml::Deserializer::new(text);
        let mut config: ServerConfig =
            serde_path_to_error::deserialize(deserializer).map_err(|error| {
                let mut path = error.path().to_string();
                let error = error.into_inner();
                if path == "." {
                    // a value the TOML parser itself refused (a number too large for
                    // any integer): name its key from where it is in the text
                    if let Some(key) = error.span().and_then(|span| key_path_at(text, span.start)) {
                        path = key;
                    }
                }
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
                if path.starts_with("feeds[") && message.starts_with("missing field `source`") {
                    message = format!("{message}: every feed names its source: source = \"file\" for a file or a glob of files, or a kind a plugin of plugin_dir declares (kafka, journal, archive)");
                }
                // a text that is not TOML at all: say what the config is
                if text.parse::<toml::Table>().is_err() {
                    message = format!("{message}: {}", not_toml_hint(text));
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
}
