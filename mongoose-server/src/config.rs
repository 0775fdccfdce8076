//! The server's configuration file (TOML): feeds, processor groups, sinks, the admin
//! address and the control-plane keys. Unknown keys and bad values fail at load with
//! the key path and what is expected.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use mongoose_core::{OverloadPolicy, OverloadSettings};
use mongoose_source_file::ReadStrategy;
use serde::Deserialize;

use crate::error::ServerError;

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
    /// BLOCK_WITH_DEADLINE: run the kill-switch hook once per latch.
    #[serde(default)]
    pub kill_switch: bool,
    /// Per-group overrides.
    #[serde(default)]
    pub subscribers: BTreeMap<String, OverloadConfig>,
}

impl OverloadConfig {
    fn settings(&self, path: &str) -> Result<Option<OverloadSettings>, ServerError> {
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
    /// Each subscriber queue's capacity (default 1024).
    pub queue_capacity: Option<usize>,
    /// The overload block; a file feed without one pauses.
    #[serde(default)]
    pub overload: OverloadConfig,
    /// Deliver feed status events in band.
    #[serde(default)]
    pub status_events: bool,
}

fn default_read_strategy() -> ReadStrategy {
    ReadStrategy::Commited
}

/// How a group's thread idles when it has nothing to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IdleStrategyConfig {
    /// Spin.
    BusySpin,
    /// Yield the thread.
    Yield,
    /// Sleep this many milliseconds.
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
                "unknown idle strategy '{text}': expected \"busy-spin\", \"yield\", \"backoff\" or \"sleeping-millis:N\""
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
    /// Settings given to the kind's factory.
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
    /// Pin the group's thread to this core.
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
    /// How long void control calls wait off agent threads (default 10000).
    #[serde(default = "default_control_wait")]
    pub control_wait_millis: u64,
    /// The end-to-end deadline of shutdown (default 30000).
    #[serde(default = "default_shutdown_timeout")]
    pub shutdown_timeout_millis: u64,
    /// The drain phase of shutdown (default 2000).
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
                ServerError::Config {
                    path,
                    message: error.into_inner().message().trim().to_owned(),
                }
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

    fn validate(&self) -> Result<(), ServerError> {
        if self.shutdown_drain_timeout_millis > self.shutdown_timeout_millis {
            return Err(ServerError::invalid(
                "shutdown_drain_timeout_millis",
                "must not exceed shutdown_timeout_millis (the drain runs within the shutdown deadline)",
            ));
        }
        let mut feeds = BTreeSet::new();
        for (index, feed) in self.feeds.iter().enumerate() {
            if feed.name.trim().is_empty() {
                return Err(ServerError::invalid(
                    format!("feeds[{index}].name"),
                    "must not be empty",
                ));
            }
            if !feeds.insert(feed.name.as_str()) {
                return Err(ServerError::invalid(
                    format!("feeds[{index}].name"),
                    format!(
                        "a feed named '{}' is already configured: feed names must be unique",
                        feed.name
                    ),
                ));
            }
            if feed.queue_capacity == Some(0) {
                return Err(ServerError::invalid(
                    format!("feeds[{index}].queue_capacity"),
                    "must be at least 1",
                ));
            }
            self.feed_overload(index)?;
            self.feed_overrides(index)?;
        }
        let mut groups = BTreeSet::new();
        for (index, group) in self.groups.iter().enumerate() {
            if !groups.insert(group.name.as_str()) {
                return Err(ServerError::invalid(
                    format!("groups[{index}].name"),
                    format!(
                        "a group named '{}' is already configured: group names must be unique",
                        group.name
                    ),
                ));
            }
            let mut names = BTreeSet::new();
            for (position, processor) in group.processors.iter().enumerate() {
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
        if let Some(admin) = &self.admin {
            admin.validate()?;
        }
        Ok(())
    }
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
    fn a_good_config_loads_with_defaults() {
        let config = parse(GOOD).expect("valid");
        assert_eq!(config.control_wait_millis, 5000);
        assert_eq!(config.shutdown_timeout_millis, 30_000);
        assert_eq!(config.feeds[0].read_strategy, ReadStrategy::Commited);
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
    fn a_bad_idle_strategy_and_a_bad_address_say_what_is_expected() {
        let error = parse(&GOOD.replace("sleeping-millis:1", "nap")).expect_err("bad idle");
        assert!(error.to_string().contains("sleeping-millis:N"), "{error}");
        let error = parse(&GOOD.replace("127.0.0.1:9000", "localhost")).expect_err("bad address");
        assert!(error.to_string().contains("admin.address"), "{error}");
    }
}
