//! Processor kinds: what a factory building a configured processor is given, and how
//! a kind checks its settings at boot.

use std::path::Path;
use std::sync::Arc;

use mongoose_core::Processor;

use crate::config::{FeedConfig, ServerConfig};
use crate::sinks::Sinks;
use mongoose_sink::SinkWriter;

/// What a processor factory is given: the processor's name and group, its settings
/// table from the config, and the config file's folder for relative paths.
#[derive(Debug)]
pub struct ProcessorContext<'a> {
    /// The processor's name.
    pub name: &'a str,
    /// Its group.
    pub group: &'a str,
    /// Its `settings` table.
    pub settings: &'a toml::Table,
    /// The folder relative paths resolve against.
    pub base_dir: &'a Path,
    /// The sinks of the configuration.
    pub sinks: &'a Sinks,
    /// The configured feeds (none in a replay: a processor replayed runs on recorded
    /// inputs only, and must not reach the feeds' systems).
    pub feeds: &'a [FeedConfig],
    /// Where a processor's own status goes (`/status`, under `processors`).
    pub reports: &'a ProcessorReports,
}

/// Reads a processor's own status (its counters) for `/status`.
pub type StatusReader = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

/// The status readers of the processors that report one, by `group/name`: what
/// `/status` shows under `processors`.
#[derive(Clone, Default)]
pub struct ProcessorReports(
    Arc<parking_lot::Mutex<std::collections::BTreeMap<String, StatusReader>>>,
);

impl std::fmt::Debug for ProcessorReports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.lock().keys()).finish()
    }
}

impl ProcessorReports {
    /// Sets the status reader of `group/name` (replacing an earlier one: a reload).
    pub fn set(&self, group: &str, name: &str, reader: StatusReader) {
        self.0.lock().insert(format!("{group}/{name}"), reader);
    }

    /// Forgets the status reader of `group/name` (a processor a reload removed).
    pub fn remove(&self, group: &str, name: &str) {
        self.0.lock().remove(&format!("{group}/{name}"));
    }

    /// Every processor's status, by `group/name`.
    pub fn read(&self) -> serde_json::Map<String, serde_json::Value> {
        let readers: Vec<(String, StatusReader)> = self
            .0
            .lock()
            .iter()
            .map(|(name, reader)| (name.clone(), Arc::clone(reader)))
            .collect();
        readers
            .into_iter()
            .map(|(name, reader)| (name, reader()))
            .collect()
    }
}

impl ProcessorContext<'_> {
    /// The configured feed named `name` (its source kind and settings), if any.
    pub fn feed(&self, name: &str) -> Option<&FeedConfig> {
        self.feeds.iter().find(|feed| feed.name == name)
    }

    /// Deserializes the settings table into `S`, naming the processor on error.
    pub fn settings<S: serde::de::DeserializeOwned>(&self) -> Result<S, String> {
        toml::Value::Table(self.settings.clone())
            .try_into()
            .map_err(|error: toml::de::Error| error.message().trim().to_owned())
    }

    /// A writer to the configured sink named `name` for this processor: each output
    /// it writes is keyed by the input being handled and by this processor
    /// (`group/name`), and holds that input's commit until the output is published (or
    /// given up by the sink's policy).
    ///
    /// # Errors
    /// No sink of that name (the message lists the configured ones).
    pub fn sink(&self, name: &str) -> Result<SinkWriter, String> {
        self.sinks.writer(name, self.group, self.name)
    }

    /// The parts of [`ProcessorContext::sink`]'s writer (the sink's handle, the gates
    /// of its outputs' feeds, the writer's name `group/name`), for a processor that
    /// tracks its outputs' outcomes itself (the ledger's alerts).
    ///
    /// # Errors
    /// No sink of that name (the message lists the configured ones).
    pub fn sink_parts(
        &self,
        name: &str,
    ) -> Result<(mongoose_sink::SinkHandle, mongoose_sink::GateSource, String), String> {
        self.sinks.writer_parts(name, self.group, self.name)
    }

    /// The commit gate of `feed` for this processor's group: a processor that makes
    /// its state durable after a line was handled (an outbox with group commit) holds
    /// the line's commit with it until the state is durable. `None` where no feed's
    /// commit is held (a replay, an unknown feed).
    pub fn commit_gate(&self, feed: &str) -> Option<Arc<dyn mongoose_core::sink::CommitGate>> {
        self.sinks.gate(feed, self.group)
    }

    /// Reports this processor's own status (its counters) in `/status`, under
    /// `processors` by `group/name`: `reader` is called at each request.
    pub fn report_status(&self, reader: StatusReader) {
        self.reports.set(self.group, self.name, reader);
    }

    /// Resolves a path against the config file's folder.
    pub fn resolve(&self, path: &Path) -> std::path::PathBuf {
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.base_dir.join(path)
        }
    }
}

/// Builds a processor of a registered kind from its settings.
pub type ProcessorFactory =
    Arc<dyn Fn(&ProcessorContext<'_>) -> Result<Box<dyn Processor>, String> + Send + Sync>;

/// Checks a processor's settings when the server is built, before anything runs (the
/// `validate(settings)` hook of a processor kind): what the configuration alone shows
/// to be wrong is refused there, so `mongoose validate` says it and `mongoose run`
/// exits 2 for it instead of failing at start.
pub type SettingsValidator =
    Arc<dyn Fn(&SettingsCheck<'_>) -> Result<(), SettingsError> + Send + Sync>;

/// A registered processor kind: the check of its settings and its factory.
#[derive(Clone)]
pub struct ProcessorKind {
    /// Checks a processor's settings at build (and so at `mongoose validate`); `None`
    /// checks nothing before the factory runs at start.
    pub validate: Option<SettingsValidator>,
    /// Builds the processor at start.
    pub build: ProcessorFactory,
}

impl std::fmt::Debug for ProcessorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessorKind")
            .field("validated", &self.validate.is_some())
            .finish_non_exhaustive()
    }
}

/// What a processor kind's settings check is given: the processor, its settings, and
/// what the server will have (feeds, sinks), without opening anything.
#[derive(Debug)]
pub struct SettingsCheck<'a> {
    /// The processor's name.
    pub name: &'a str,
    /// Its group.
    pub group: &'a str,
    /// Its `settings` table.
    pub settings: &'a toml::Table,
    /// The whole configuration (its `sinks`, `feeds`, `base_dir`).
    pub config: &'a ServerConfig,
    /// Every feed the server will have: configured and added by code.
    pub feeds: &'a [String],
    /// The feeds the check named with [`SettingsCheck::feed`]: what the processor
    /// subscribes to (a feed nothing subscribes to is refused by the preflight).
    pub(super) named_feeds: std::cell::RefCell<Vec<String>>,
}

impl SettingsCheck<'_> {
    /// Deserializes the settings table into `S`; an error names the key it is about
    /// (nested keys joined with dots) when serde knows it.
    pub fn settings<S: serde::de::DeserializeOwned>(&self) -> Result<S, SettingsError> {
        serde_path_to_error::deserialize(toml::Value::Table(self.settings.clone())).map_err(
            |error| {
                let key = error.path().to_string();
                let message = error.into_inner().message().trim().to_owned();
                match key.as_str() {
                    "" | "." => SettingsError::new(message),
                    _ => SettingsError::at(key, message),
                }
            },
        )
    }

    /// Resolves a path against the config file's folder.
    pub fn resolve(&self, path: &Path) -> std::path::PathBuf {
        self.config.resolve(path)
    }

    /// Refuses a sink name (given at settings key `key`) that is not in `[[sinks]]`.
    pub fn sink(&self, key: &str, name: &str) -> Result<(), SettingsError> {
        if self.config.sinks.iter().any(|sink| sink.name == name) {
            return Ok(());
        }
        let known: Vec<&str> = self
            .config
            .sinks
            .iter()
            .map(|sink| sink.name.as_str())
            .collect();
        Err(SettingsError::at(
            key,
            format!(
                "no sink named '{name}': configured sinks are [{}]; declare it under [[sinks]]",
                known.join(", ")
            ),
        ))
    }

    /// Refuses a feed name (given at settings key `key`) the server will not have.
    pub fn feed(&self, key: &str, name: &str) -> Result<(), SettingsError> {
        self.named_feeds.borrow_mut().push(name.to_owned());
        if self.feeds.iter().any(|feed| feed == name) {
            return Ok(());
        }
        Err(SettingsError::at(
            key,
            unknown_feed(self.group, self.name, name, self.feeds),
        ))
    }
}

/// What a processor kind's settings check refuses: the settings key it is about (if
/// one) and what to do. The server reports it as a config error at
/// `groups[G].processors[P].settings.KEY`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsError {
    /// The key within the settings table (`alerts_sink`, `a.b` for nested keys).
    pub key: Option<String>,
    /// What is wrong and what to do.
    pub message: String,
}

impl SettingsError {
    /// An error about the settings as a whole.
    pub fn new(message: impl Into<String>) -> Self {
        SettingsError {
            key: None,
            message: message.into(),
        }
    }

    /// An error about the settings key `key`.
    pub fn at(key: impl Into<String>, message: impl Into<String>) -> Self {
        SettingsError {
            key: Some(key.into()),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for SettingsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.key {
            Some(key) => write!(f, "{key}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for SettingsError {}

/// The message for a processor subscribing to a feed the server does not have.
pub(super) fn unknown_feed(group: &str, processor: &str, feed: &str, known: &[String]) -> String {
    format!(
        "processor '{group}/{processor}' subscribes to feed '{feed}', which the server does not have: \
         configured feeds are [{}]; fix the name or add the feed under [[feeds]]",
        known.join(", ")
    )
}
