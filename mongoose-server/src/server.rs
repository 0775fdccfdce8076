//! The server: wiring from a configuration, the lifecycle and the ordered shutdown.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mongoose_control::{
    AddFailurePolicy as ControlAddFailurePolicy, ControlConfig, ControlPlane, DeliveryFeeds,
    GroupOptions, GroupStatus, IdleStrategy, ReplyOutcome,
};
use mongoose_core::Position;
use mongoose_core::{agent, EventSource, Processor, WorkDone};
use mongoose_delivery::FeedBuilder;
use mongoose_delivery::{AnyFeed, Feed, FeedRegistry, KillSwitch, Publisher, StatusReport};
use mongoose_replay::cli::{replay_report, ReplayReport};
use mongoose_replay::{FeedCodecs, RecordConfig, Recorder, Replayer};
use mongoose_source_file::{
    FileEventSource, FileSourceConfig, GlobFileSource, GlobSourceConfig, Line,
};
use parking_lot::Mutex;
use serde::Serialize;
use tracing::{error, info, warn};

use crate::config::{check_name, AddFailurePolicy, IdleStrategyConfig, ServerConfig, SourceKind};
use crate::ledger::{Ledger, LedgerSettings};
use crate::sinks::FileSink;
use crate::ServerError;

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
    /// The sinks of the configuration, by name.
    pub sinks: &'a BTreeMap<String, FileSink>,
}

impl ProcessorContext<'_> {
    /// Deserializes the settings table into `S`, naming the processor on error.
    pub fn settings<S: serde::de::DeserializeOwned>(&self) -> Result<S, String> {
        toml::Value::Table(self.settings.clone())
            .try_into()
            .map_err(|error: toml::de::Error| error.message().trim().to_owned())
    }

    /// The configured sink named `name`.
    pub fn sink(&self, name: &str) -> Result<FileSink, String> {
        self.sinks.get(name).cloned().ok_or_else(|| {
            let known: Vec<&str> = self.sinks.keys().map(String::as_str).collect();
            format!(
                "no sink named '{name}': configured sinks are [{}]; declare it under [[sinks]]",
                known.join(", ")
            )
        })
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
fn unknown_feed(group: &str, processor: &str, feed: &str, known: &[String]) -> String {
    format!(
        "processor '{group}/{processor}' subscribes to feed '{feed}', which the server does not have: \
         configured feeds are [{}]; fix the name or add the feed under [[feeds]]",
        known.join(", ")
    )
}

type CodeSupplier = Box<dyn FnOnce() -> Box<dyn Processor> + Send>;

/// A source added by code: its feed's name, the feed, the source.
type CodeSource = (String, Arc<dyn AnyFeed>, Box<dyn EventSource>);

/// Registers a feed built by code with the server's feeds.
type FeedRegistration = Box<dyn FnOnce(&DeliveryFeeds) -> Result<(), ServerError>>;

/// The truthful result of a shutdown (control-plane-contracts "Shutdown").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StopResult {
    /// Everything stopped.
    pub complete: bool,
    /// Called on an agent thread: the stop runs on a `mongoose-server-stop` thread.
    pub handed_off: bool,
    /// The startup step that blocked this attempt, if any.
    pub blocked_startup: Option<String>,
    /// Groups (and bracketed notes such as `<event sources stopping>`) not confirmed
    /// finished, and processors a group retains (`processor:<group>/<name>`: a
    /// quarantined processor, or any processor of a dead group). Names for people, not
    /// a protocol to parse.
    pub groups_running: Vec<String>,
    /// Services not confirmed stopped: a retained processor or a group not closed may
    /// still use them, their stop is still running on its helper, or their stop failed
    /// (a failed stop is never called again).
    pub services_left_running: Vec<String>,
}

/// Builds a [`Server`]: a configuration, processor kinds, and processors added by code.
pub struct ServerBuilder {
    config: ServerConfig,
    kinds: BTreeMap<String, ProcessorKind>,
    code_processors: Vec<(String, String, CodeSupplier)>,
    code_feeds: Vec<FeedRegistration>,
    /// The names of the feeds added by code.
    code_feed_names: Vec<String>,
    code_sources: Vec<CodeSource>,
    kill_switch: Option<KillSwitch>,
}

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("kinds", &self.kinds.keys())
            .finish()
    }
}

impl ServerBuilder {
    /// Registers a processor kind that config files can name, without a settings
    /// check: its settings are first looked at by `factory`, at start (a refusal then
    /// fails the start, exit 1). Prefer [`ServerBuilder::processor_kind_checked`].
    pub fn processor_kind(
        mut self,
        kind: &str,
        factory: impl Fn(&ProcessorContext<'_>) -> Result<Box<dyn Processor>, String>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.kinds.insert(
            kind.to_owned(),
            ProcessorKind {
                validate: None,
                build: Arc::new(factory),
            },
        );
        self
    }

    /// Registers a processor kind with the check of its settings (`validate`) next to
    /// its factory. The check runs when the server is built ([`ServerBuilder::build`],
    /// [`ServerBuilder::check`], so `mongoose validate` too) for every configured
    /// processor of the kind: a refusal is a config error at
    /// `groups[G].processors[P].settings[.KEY]` (exit 2), before anything runs. It
    /// should refuse everything the configuration alone shows the factory would
    /// (unknown keys, missing or conflicting ones, a sink or feed that is not there, a
    /// path that cannot be what it must be), and change nothing on disk.
    pub fn processor_kind_checked(
        mut self,
        kind: &str,
        validate: impl Fn(&SettingsCheck<'_>) -> Result<(), SettingsError> + Send + Sync + 'static,
        factory: impl Fn(&ProcessorContext<'_>) -> Result<Box<dyn Processor>, String>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.kinds.insert(
            kind.to_owned(),
            ProcessorKind {
                validate: Some(Arc::new(validate)),
                build: Arc::new(factory),
            },
        );
        self
    }

    /// Adds a processor built by code to a group (created on demand).
    pub fn processor<P: Processor>(
        mut self,
        group: &str,
        name: &str,
        supplier: impl FnOnce() -> P + Send + 'static,
    ) -> Self {
        let boxed: CodeSupplier = Box::new(move || Box::new(supplier()) as Box<dyn Processor>);
        self.code_processors
            .push((group.to_owned(), name.to_owned(), boxed));
        self
    }

    /// Registers a feed built by code (its publisher is the caller's to publish into).
    /// A feed whose publisher never reports a source state is a fallback feed: its
    /// settled verdict rests on drained alone.
    pub fn feed<T: Send + Sync + 'static, P: mongoose_core::Position>(
        mut self,
        publisher: Arc<Publisher<T, P>>,
    ) -> Self {
        self.code_feed_names.push(publisher.name().to_owned());
        self.code_feeds
            .push(Box::new(move |connector: &DeliveryFeeds| {
                connector.register(publisher).map_err(ServerError::from)
            }));
        self
    }

    /// Registers a feed built by code together with the source that publishes into it.
    /// The server runs the source on its own agent thread, stops it in the feed phase
    /// of the shutdown, and commits what the groups processed after it stopped.
    pub fn source<T: Send + Sync + 'static, P: mongoose_core::Position>(
        mut self,
        publisher: Arc<Publisher<T, P>>,
        source: impl EventSource + 'static,
    ) -> Self {
        let name = publisher.name().to_owned();
        let any: Arc<dyn AnyFeed> = publisher.clone();
        self.code_sources.push((name, any, Box::new(source)));
        self.feed(publisher)
    }

    /// Sets the hook a configured feed runs once per latch of a queue whose overload
    /// block has `kill_switch = true` (the reference's `setOverloadKillSwitch`), on a
    /// thread of its own, with the feed's and the queue's names. Without one, the
    /// server's own hook ends the run: [`Server::fatal_failures`] names the feed and
    /// the queue, and `mongoose run` exits 1.
    pub fn overload_kill_switch(
        mut self,
        hook: impl Fn(&str, &str) + Send + Sync + 'static,
    ) -> Self {
        self.kill_switch = Some(Arc::new(hook));
        self
    }

    /// Checks everything the configuration shows, with what only the builder knows,
    /// without opening or creating anything: the configuration itself (names, ranges,
    /// paths, as [`ServerConfig::parse`] does), the names of processors added by code,
    /// every processor's kind and its settings (the kind's settings check), a `feed`
    /// setting naming a feed the server has, overload overrides naming a group, and
    /// `record.processors` naming a processor. [`ServerBuilder::build`] runs it first.
    pub fn check(&self) -> Result<(), ServerError> {
        let config = &self.config;
        config.validate()?;
        for (group, name, _) in &self.code_processors {
            let key = format!("the processor '{group}/{name}' added by code");
            check_name(format!("{key}: its group"), group)?;
            check_name(key, name)?;
        }
        let mut feeds: Vec<String> = config.feeds.iter().map(|feed| feed.name.clone()).collect();
        feeds.extend(self.code_feed_names.iter().cloned());
        let mut groups: Vec<&str> = config
            .groups
            .iter()
            .map(|group| group.name.as_str())
            .collect();
        groups.extend(
            self.code_processors
                .iter()
                .map(|(group, _, _)| group.as_str()),
        );
        groups.sort_unstable();
        groups.dedup();
        for (index, feed) in config.feeds.iter().enumerate() {
            for group in feed.overload.subscribers.keys() {
                if !groups.contains(&group.as_str()) {
                    return Err(ServerError::invalid(
                        format!("feeds[{index}].overload.subscribers.{group}"),
                        format!(
                            "an override for the group '{group}', which is not configured: the groups are [{}]; \
                             fix the name or remove the override",
                            groups.join(", ")
                        ),
                    ));
                }
            }
        }
        if let Some(record) = &config.record {
            let mut processors: Vec<&str> = config
                .groups
                .iter()
                .flat_map(|group| {
                    group
                        .processors
                        .iter()
                        .map(|processor| processor.name.as_str())
                })
                .chain(
                    self.code_processors
                        .iter()
                        .map(|(_, name, _)| name.as_str()),
                )
                .collect();
            processors.sort_unstable();
            processors.dedup();
            for (index, name) in record.processors.iter().enumerate() {
                if !processors.contains(&name.as_str()) {
                    return Err(ServerError::invalid(
                        format!("record.processors[{index}]"),
                        format!(
                            "'{name}' names no processor: the processors are [{}]; fix the name \
                             (an empty list records every processor)",
                            processors.join(", ")
                        ),
                    ));
                }
            }
        }
        for (group_index, group) in config.groups.iter().enumerate() {
            for (index, processor) in group.processors.iter().enumerate() {
                let Some(kind) = self.kinds.get(&processor.kind) else {
                    return Err(ServerError::UnknownProcessorKind {
                        path: format!("groups[{group_index}].processors[{index}].kind"),
                        kind: processor.kind.clone(),
                        known: self.kinds.keys().cloned().collect::<Vec<_>>().join(", "),
                    });
                };
                let settings_key = format!("groups[{group_index}].processors[{index}].settings");
                // any kind's `feed` setting names the feed it subscribes to (issue 9,
                // item 11)
                if let Some(toml::Value::String(feed)) = processor.settings.get("feed") {
                    if !feeds.contains(feed) {
                        return Err(ServerError::invalid(
                            format!("{settings_key}.feed"),
                            unknown_feed(&group.name, &processor.name, feed, &feeds),
                        ));
                    }
                }
                let Some(validate) = &kind.validate else {
                    continue;
                };
                let check = SettingsCheck {
                    name: &processor.name,
                    group: &group.name,
                    settings: &processor.settings,
                    config,
                    feeds: &feeds,
                };
                if let Err(refused) = validate(&check) {
                    let path = match &refused.key {
                        Some(key) => format!("{settings_key}.{key}"),
                        None => settings_key,
                    };
                    return Err(ServerError::invalid(
                        path,
                        format!(
                            "processor '{}/{}' ({}): {}",
                            group.name, processor.name, processor.kind, refused.message
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks everything ([`ServerBuilder::check`]), and that `record.dir` holds no
    /// recording of a group already (RECORD never writes over one), and builds the
    /// server: feeds, sinks opened (created if missing), nothing runs yet.
    pub fn build(self) -> Result<Server, ServerError> {
        self.check()?;
        self.config.refuse_recording_over_a_recording()?;
        let config = self.config;
        let registry = FeedRegistry::default();
        let connector = DeliveryFeeds::new(registry.clone());
        let plane = ControlPlane::new_unstarted(
            ControlConfig {
                control_wait: Duration::from_millis(config.control_wait_millis),
                add_failure_policy: match config.add_failure_policy {
                    AddFailurePolicy::Report => ControlAddFailurePolicy::Report,
                    AddFailurePolicy::Throw => ControlAddFailurePolicy::Throw,
                },
                ..ControlConfig::default()
            },
            Arc::new(connector.clone()),
        );
        for register in self.code_feeds {
            register(&connector)?;
        }
        let failures: Arc<Mutex<Vec<String>>> = Arc::default();
        let kill_switch = self.kill_switch.unwrap_or_else(|| {
            let failures = Arc::clone(&failures);
            Arc::new(move |feed: &str, queue: &str| {
                let reason = format!(
                    "overload kill switch: feed '{feed}' queue '{queue}' latched (a \
                     never-drop queue lost or refused an item): the run ends; the feed's \
                     status shows the loss"
                );
                error!("{reason}");
                failures.lock().push(reason);
            })
        });
        let mut feeds: Vec<FeedRuntime> = self
            .code_sources
            .into_iter()
            .map(|(name, publisher, source)| FeedRuntime {
                name,
                publisher,
                source: Mutex::new(SourceSlot::Ready(source)),
            })
            .collect();
        for (index, feed_config) in config.feeds.iter().enumerate() {
            let SourceKind::File = feed_config.source;
            let strategy = feed_config.read_strategy;
            let (publisher, source): (Arc<dyn AnyFeed>, Box<dyn EventSource>) =
                if feed_config.is_glob() {
                    // one feed over every matching file, each on its own lane: positions
                    // are (lane, byte offset)
                    let publisher: Arc<Publisher<Line, (u32, u64)>> =
                        feed_builder(&config, index)?.try_build()?;
                    publisher.set_kill_switch(Arc::clone(&kill_switch));
                    connector.register(Arc::clone(&publisher))?;
                    let source = GlobFileSource::<Line>::of_lines(
                        glob_source_config(&config, index),
                        publisher.clone(),
                    );
                    (publisher, Box::new(source))
                } else {
                    let publisher: Arc<Publisher<Line, u64>> =
                        feed_builder(&config, index)?.try_build()?;
                    // run only for queues whose overload block asks for it
                    publisher.set_kill_switch(Arc::clone(&kill_switch));
                    connector.register(Arc::clone(&publisher))?;
                    let mut file_config = FileSourceConfig::new(
                        &feed_config.name,
                        config.resolve(&feed_config.path),
                        strategy,
                    );
                    file_config.rotated = feed_config.rotated.iter().cloned().collect();
                    let source = FileEventSource::<Line>::of_lines(file_config, publisher.clone());
                    (publisher, Box::new(source))
                };
            feeds.push(FeedRuntime {
                name: feed_config.name.clone(),
                publisher,
                source: Mutex::new(SourceSlot::Ready(source)),
            });
        }
        let sinks = open_sinks(&config)?;
        Ok(Server {
            inner: Arc::new(Inner {
                config,
                kinds: self.kinds,
                code_processors: Mutex::new(self.code_processors),
                registry,
                plane,
                feeds,
                sinks,
                lifecycle: Mutex::new(Lifecycle::default()),
                failures,
                failed_adds: Mutex::new(Vec::new()),
            }),
        })
    }
}

/// The builder of configured feed `index`: capacity, overload, status events, bounded.
fn feed_builder<P: Position>(
    config: &ServerConfig,
    index: usize,
) -> Result<FeedBuilder<Line, P>, ServerError> {
    let feed_config = &config.feeds[index];
    let mut builder =
        Feed::<Line, P>::builder(&feed_config.name).status_events(feed_config.status_events);
    if let Some(capacity) = feed_config.queue_capacity {
        builder = builder.queue_capacity(capacity);
    }
    if let Some(settings) = config.feed_overload(index)? {
        builder = builder.overload(settings);
    }
    for (group, settings) in config.feed_overrides(index)? {
        builder = builder.subscriber_overload(&group, settings);
    }
    Ok(builder.bounded(feed_config.read_strategy.is_once()))
}

/// The glob source configuration of configured feed `index` (a glob path).
fn glob_source_config(config: &ServerConfig, index: usize) -> GlobSourceConfig {
    let feed_config = &config.feeds[index];
    let mut glob_config = GlobSourceConfig::new(
        &feed_config.name,
        config.resolve(&feed_config.path),
        feed_config.read_strategy,
    );
    glob_config.rotated = feed_config.rotated.iter().cloned().collect();
    if let Some(millis) = feed_config.scan_interval_millis {
        glob_config.scan_interval = Duration::from_millis(millis);
    }
    if let Some(files) = feed_config.max_open_files {
        glob_config.max_open_files = files;
    }
    glob_config
}

enum SourceSlot {
    Ready(Box<dyn EventSource>),
    Running {
        stop: Arc<AtomicBool>,
        thread: JoinHandle<()>,
    },
    Stopped,
}

struct FeedRuntime {
    name: String,
    publisher: Arc<dyn AnyFeed>,
    source: Mutex<SourceSlot>,
}

#[derive(Default)]
struct Lifecycle {
    started: bool,
    stopping: bool,
    sources_stopped: bool,
    drained: bool,
    groups_closed: bool,
    committed_after_stop: bool,
    stopped: bool,
    last: Option<StopResult>,
}

struct Inner {
    config: ServerConfig,
    kinds: BTreeMap<String, ProcessorKind>,
    code_processors: Mutex<Vec<(String, String, CodeSupplier)>>,
    registry: FeedRegistry,
    plane: ControlPlane,
    feeds: Vec<FeedRuntime>,
    sinks: BTreeMap<String, FileSink>,
    lifecycle: Mutex<Lifecycle>,
    /// Why the run cannot go on: a source that could not start, a kill switch.
    failures: Arc<Mutex<Vec<String>>>,
    /// Processors whose add at start was not applied (REPORT policy).
    failed_adds: Mutex<Vec<String>>,
}

/// A running Mongoose server: feeds with their sources, processor groups, the status.
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("feeds", &self.inner.registry)
            .finish()
    }
}

/// A processor kind's name as the `'static` type name a recording's provenance keeps
/// (a bounded leak: one small string per configured kind).
fn kind_name(kind: &str) -> &'static str {
    static KINDS: std::sync::OnceLock<Mutex<BTreeMap<String, &'static str>>> =
        std::sync::OnceLock::new();
    let kinds = KINDS.get_or_init(|| Mutex::new(BTreeMap::new()));
    let mut kinds = kinds.lock();
    if let Some(name) = kinds.get(kind) {
        return name;
    }
    let leaked: &'static str = Box::leak(kind.to_owned().into_boxed_str());
    kinds.insert(kind.to_owned(), leaked);
    leaked
}

/// Replays a recording made by a server with this configuration: per group, each
/// configured processor is built afresh from its kind and settings and given its
/// recorded stream alone. Point the configuration's processor settings at scratch
/// state (a replayed ledger applies the recorded lines to the state it opens).
pub fn replay(
    builder: ServerBuilder,
    recording: &Path,
) -> Result<Vec<(String, ReplayReport)>, ServerError> {
    builder.check()?;
    let config = builder.config;
    let sinks = Arc::new(open_sinks(&config)?);
    let mut reports = Vec::new();
    for (group_index, group) in config.groups.iter().enumerate() {
        let dir = recording.join(&group.name);
        let mut replayer = Replayer::open(&dir, feed_codecs(&config));
        for (index, processor) in group.processors.iter().enumerate() {
            let factory = builder
                .kinds
                .get(&processor.kind)
                .map(|kind| Arc::clone(&kind.build))
                .ok_or_else(|| ServerError::UnknownProcessorKind {
                    path: format!("groups[{group_index}].processors[{index}].kind"),
                    kind: processor.kind.clone(),
                    known: builder.kinds.keys().cloned().collect::<Vec<_>>().join(", "),
                })?;
            let settings = processor.settings.clone();
            let (name, group_name, base) = (
                processor.name.clone(),
                group.name.clone(),
                config.base_dir.clone(),
            );
            let sinks = Arc::clone(&sinks);
            let build = move || -> Result<Box<dyn Processor>, String> {
                factory(&ProcessorContext {
                    name: &name,
                    group: &group_name,
                    settings: &settings,
                    base_dir: &base,
                    sinks: &sinks,
                })
            };
            build().map_err(|message| ServerError::ProcessorSettings {
                name: processor.name.clone(),
                kind: processor.kind.clone(),
                message,
            })?;
            replayer = replayer.processor_boxed_as(
                &processor.name,
                kind_name(&processor.kind),
                Box::new(move || match build() {
                    Ok(built) => built,
                    Err(message) => {
                        panic!("the processor could not be built again for the replay: {message}")
                    }
                }),
            );
        }
        reports.push((group.name.clone(), replay_report(&dir, replayer)));
    }
    Ok(reports)
}

/// The codecs of the configured feeds (their [`Line`]s), for record and replay.
fn feed_codecs(config: &ServerConfig) -> FeedCodecs {
    config.feeds.iter().fold(FeedCodecs::new(), |codecs, feed| {
        let codec = LineCodec {
            path: config.resolve(&feed.path),
        };
        codecs.feed_with::<Line, _>(&feed.name, codec, false)
    })
}

/// The recorded form of a file feed's line: its length (a postcard varint) and its
/// bytes as they were on disk, which is also how a `String` line was recorded before
/// lines were [`Line`]s: those recordings replay unchanged. A replayed line's path is
/// the feed's configured input.
#[derive(Debug)]
struct LineCodec {
    path: std::path::PathBuf,
}

impl mongoose_replay::EventCodec<Line> for LineCodec {
    fn encode(&self, line: &Line, out: &mut Vec<u8>) -> Result<(), mongoose_replay::ReplayError> {
        let mut length = line.len();
        while length >= 0x80 {
            out.push((length as u8) | 0x80);
            length >>= 7;
        }
        out.push(length as u8);
        out.extend_from_slice(line.as_bytes());
        Ok(())
    }

    fn decode(&self, bytes: &[u8]) -> Result<Line, mongoose_replay::ReplayError> {
        let mut length = 0usize;
        for (index, &byte) in bytes.iter().enumerate().take(10) {
            length |= usize::from(byte & 0x7f) << (7 * index);
            if byte & 0x80 == 0 {
                let text = &bytes[index + 1..];
                if text.len() != length {
                    break;
                }
                return Ok(Line::new(&self.path, text.to_vec()));
            }
        }
        Err(mongoose_replay::ReplayError::Codec {
            action: "decode",
            reason: format!(
                "a recorded line is not a length and that many bytes ({} bytes)",
                bytes.len()
            ),
        })
    }
}

fn open_sinks(config: &ServerConfig) -> Result<BTreeMap<String, FileSink>, ServerError> {
    let mut sinks = BTreeMap::new();
    for sink in &config.sinks {
        let path = config.resolve(&sink.path);
        let opened = FileSink::open(&path).map_err(|error| ServerError::Io {
            context: format!("cannot open the sink '{}' ({})", sink.name, path.display()),
            error,
        })?;
        sinks.insert(sink.name.clone(), opened);
    }
    Ok(sinks)
}

fn idle_strategy(config: IdleStrategyConfig) -> IdleStrategy {
    match config {
        IdleStrategyConfig::BusySpin => IdleStrategy::BusySpin,
        IdleStrategyConfig::Yield => IdleStrategy::Yield,
        IdleStrategyConfig::SleepingMillis(millis) => IdleStrategy::SleepingMillis(millis),
        IdleStrategyConfig::Backoff => IdleStrategy::default(),
    }
}

impl Server {
    /// Starts building a server from a configuration. The built-in processor kinds
    /// (`ledger`) are registered.
    pub fn builder(config: ServerConfig) -> ServerBuilder {
        ServerBuilder {
            config,
            kinds: BTreeMap::new(),
            code_processors: Vec::new(),
            code_feeds: Vec::new(),
            code_feed_names: Vec::new(),
            code_sources: Vec::new(),
            kill_switch: None,
        }
        .processor_kind_checked("ledger", LedgerSettings::check, |context| {
            let mut settings: LedgerSettings = context.settings()?;
            settings.state_dir = context.resolve(&settings.state_dir);
            let alerts = match (&settings.alerts, &settings.alerts_sink) {
                (Some(path), None) => FileSink::open(&context.resolve(path)).map_err(|error| {
                    format!("cannot open the alerts file {}: {error}", path.display())
                })?,
                (None, Some(sink)) => context.sink(sink)?,
                _ => {
                    return Err(
                        "give the ledger exactly one of alerts (a file) or alerts_sink \
                                (a configured sink)"
                            .to_owned(),
                    )
                }
            };
            Ledger::open(settings, alerts)
                .map(|ledger| Box::new(ledger) as Box<dyn Processor>)
                .map_err(|error| error.to_string())
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// The feeds, for the admin API and embedders.
    pub fn registry(&self) -> &FeedRegistry {
        &self.inner.registry
    }

    /// The control plane.
    pub fn control(&self) -> &ControlPlane {
        &self.inner.plane
    }

    /// The status of every feed.
    pub fn status(&self) -> StatusReport {
        self.inner.registry.status()
    }

    /// The status of every processor group.
    pub fn group_statuses(&self) -> Vec<GroupStatus> {
        let plane = &self.inner.plane;
        plane
            .group_names()
            .iter()
            .filter_map(|name| plane.group_status(name))
            .collect()
    }

    /// Starts the server: processor groups and their processors first (each processor
    /// subscribes in its start), then the sources, then the start completes (cached
    /// startup items are delivered).
    pub fn start(&self) -> Result<(), ServerError> {
        let inner = &self.inner;
        {
            let mut lifecycle = inner.lifecycle.lock();
            if lifecycle.started {
                return Err(ServerError::State("the server was already started".into()));
            }
            lifecycle.started = true;
        }
        info!(
            feeds = inner.feeds.len(),
            groups = inner.config.groups.len(),
            "server starting"
        );
        if let Some(plugins) = &inner.config.plugin_dir {
            warn!(dir = %plugins.display(), "plugin_dir is set but this build loads no plugins yet (the plugin loader is a later step of the roadmap): connectors there are not loaded");
        }
        for group in &inner.config.groups {
            let recorder = match &inner.config.record {
                None => None,
                Some(record) => {
                    let dir = inner.config.resolve(&record.dir).join(&group.name);
                    let config =
                        RecordConfig::new(record.processors.clone(), feed_codecs(&inner.config));
                    let recorder = Recorder::create(&dir, config).map_err(|error| {
                        ServerError::invalid(
                            "record.dir",
                            format!("cannot record into {}: {error}", dir.display()),
                        )
                    })?;
                    info!(group = %group.name, dir = %dir.display(), "recording processor inputs");
                    Some(Box::new(recorder) as Box<dyn mongoose_control::GroupRecorder>)
                }
            };
            inner.plane.create_group(
                &group.name,
                GroupOptions {
                    idle: idle_strategy(group.idle_strategy),
                    core: group.core,
                    recorder,
                    ..GroupOptions::default()
                },
            )?;
        }
        inner.plane.start()?;
        let wait = Duration::from_millis(inner.config.control_wait_millis);
        let mut adds = Vec::new();
        for group in &inner.config.groups {
            for processor in &group.processors {
                let factory = Arc::clone(&inner.kinds[&processor.kind].build);
                let context = ProcessorContext {
                    name: &processor.name,
                    group: &group.name,
                    settings: &processor.settings,
                    base_dir: &inner.config.base_dir,
                    sinks: &inner.sinks,
                };
                let built =
                    factory(&context).map_err(|message| ServerError::ProcessorSettings {
                        name: processor.name.clone(),
                        kind: processor.kind.clone(),
                        message,
                    })?;
                let supplier: CodeSupplier = Box::new(move || built);
                adds.push((
                    group.name.clone(),
                    processor.name.clone(),
                    kind_name(&processor.kind),
                    supplier,
                ));
            }
        }
        adds.extend(
            inner
                .code_processors
                .lock()
                .drain(..)
                .map(|(group, name, supplier)| (group, name, "", supplier)),
        );
        for (group, name, kind, supplier) in adds {
            let added = inner
                .plane
                .add_processor_boxed_as(&group, &name, kind, supplier);
            match added.reply.wait_for(wait) {
                Ok(reply) if reply.outcome == ReplyOutcome::Applied => {
                    info!(group = %group, processor = %name, "processor started");
                }
                Ok(reply) => {
                    let message = format!(
                        "processor '{group}/{name}' not added: {:?} ({:?}): {}",
                        reply.outcome, reply.kind, reply.reason
                    );
                    match inner.config.add_failure_policy {
                        AddFailurePolicy::Report => {
                            error!("{message}");
                            inner.failed_adds.lock().push(message);
                        }
                        AddFailurePolicy::Throw => return Err(ServerError::State(message)),
                    }
                }
                Err(error) => {
                    warn!(group = %group, processor = %name, %error, "no reply to the add in time; it still applies")
                }
            }
        }
        self.report_earlier_losses();
        for feed in &inner.feeds {
            Self::start_source(feed, &inner.failures);
        }
        for feed in inner.registry.feeds() {
            feed.start_complete();
        }
        info!("server started");
        Ok(())
    }

    fn start_source(feed: &FeedRuntime, failures: &Arc<Mutex<Vec<String>>>) {
        let mut slot = feed.source.lock();
        let SourceSlot::Ready(mut source) = std::mem::replace(&mut *slot, SourceSlot::Stopped)
        else {
            return;
        };
        // the feed has a source: it is behind until the source says otherwise, never a
        // silent (fallback) feed judged on drained alone while its thread starts
        feed.publisher.report_source_starting();
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = Arc::clone(&stop);
        let name = feed.name.clone();
        let failed = Arc::clone(failures);
        let thread = std::thread::Builder::new()
            .name(format!("mongoose-source-{name}"))
            .spawn(move || {
                let _agent = agent::mark_current_thread(&format!("source:{name}"));
                if let Err(error) = source.start() {
                    // the feed can never deliver: the run ends (issue 9, item 11)
                    let reason = format!("feed '{name}': the source could not start: {error}");
                    error!("{reason}");
                    failed.lock().push(reason);
                    return;
                }
                info!(feed = %name, "source started");
                let mut idle = 0u32;
                // a failing duty cycle is logged once, then as a count at most every
                // 10 s (issue 10, item 8: no flood of repeated lines)
                let mut failures = 0u64;
                let mut unlogged = 0u64;
                let mut last_logged: Option<Instant> = None;
                while !stop_flag.load(Ordering::Acquire) {
                    let cycle = source.do_work();
                    if cycle.is_ok() && failures > 0 {
                        info!(feed = %name, failures, "the source works again");
                        failures = 0;
                        unlogged = 0;
                        last_logged = None;
                    }
                    match cycle {
                        Ok(WorkDone(0)) => {
                            idle = idle.saturating_add(1);
                            if idle > 64 {
                                std::thread::sleep(Duration::from_millis(1));
                            } else {
                                std::thread::yield_now();
                            }
                        }
                        Ok(_) => idle = 0,
                        Err(error) => {
                            failures += 1;
                            let due = last_logged.is_none_or(|last| {
                                last.elapsed() >= Duration::from_secs(10)
                            });
                            if due {
                                error!(feed = %name, %error, failures, unlogged,
                                    "source duty cycle failed; retrying every 100 ms (this error is repeated at most every 10 s, with a count)");
                                last_logged = Some(Instant::now());
                                unlogged = 0;
                            } else {
                                unlogged += 1;
                            }
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                }
                if let Err(error) = source.stop() {
                    error!(feed = %name, %error, "source stop failed: what it processed may be re-delivered");
                }
                info!(feed = %name, "source stopped");
            });
        match thread {
            Ok(thread) => *slot = SourceSlot::Running { stop, thread },
            Err(error) => {
                let reason = format!(
                    "feed '{}': cannot start the source thread: {error}",
                    feed.name
                );
                error!("{reason}");
                failures.lock().push(reason);
            }
        }
    }

    /// The ordered shutdown under one deadline (`shutdown_timeout_millis`): stop the
    /// feeds (capped at 5 s), drain the queues (`shutdown_drain_timeout_millis`),
    /// commit what the groups processed after the feeds stopped, close the groups,
    /// commit again, stop services only if every group closed and no group retains a
    /// processor (a quarantined one, or any of a dead group: it may still use them),
    /// each on a helper thread under the deadline. Calling it again resumes an
    /// incomplete stop: it re-joins service stops still running and never calls a
    /// service `stop()` that failed again (that service stays in
    /// `services_left_running`). On an agent thread it hands the stop to a
    /// `mongoose-server-stop` thread and returns `handed_off`.
    pub fn shutdown(&self) -> StopResult {
        if agent::is_agent_thread() {
            let server = self.clone();
            let spawned = std::thread::Builder::new()
                .name("mongoose-server-stop".into())
                .spawn(move || {
                    server.shutdown();
                });
            if let Err(error) = spawned {
                error!(%error, "cannot start the stop thread");
            }
            return StopResult {
                handed_off: true,
                ..StopResult::default()
            };
        }
        let inner = &self.inner;
        let mut lifecycle = inner.lifecycle.lock();
        if lifecycle.stopped {
            return lifecycle.last.clone().unwrap_or(StopResult {
                complete: true,
                ..Default::default()
            });
        }
        let deadline = Instant::now() + Duration::from_millis(inner.config.shutdown_timeout_millis);
        if !lifecycle.stopping {
            lifecycle.stopping = true;
            info!("shutdown: fencing startup and refusing new work");
            inner.plane.begin_stopping();
            for feed in inner.registry.feeds() {
                feed.begin_stop();
            }
        }
        let mut running = Vec::new();
        if !lifecycle.sources_stopped {
            info!("shutdown: stopping feeds");
            let feed_deadline = deadline.min(Instant::now() + Duration::from_secs(5));
            lifecycle.sources_stopped = self.stop_sources(feed_deadline);
            if !lifecycle.sources_stopped {
                running.push("<event sources stopping>".to_owned());
            }
        }
        if !lifecycle.drained {
            let drain = Duration::from_millis(inner.config.shutdown_drain_timeout_millis);
            let drain_deadline = deadline.min(Instant::now() + drain);
            info!(
                bound_ms = drain.as_millis() as u64,
                "shutdown: draining queued events"
            );
            let mut drained = true;
            for name in inner.plane.group_names() {
                if let Some(group) = inner.plane.group(&name) {
                    drained &= group.await_drained(drain_deadline);
                }
            }
            if !drained {
                let pending: usize = self
                    .group_statuses()
                    .iter()
                    .map(|status| status.queued_items)
                    .sum();
                warn!(pending, "shutdown drain timed out: the pending events stay uncommitted and are re-delivered at the next start");
            }
            lifecycle.drained = true;
        }
        if lifecycle.sources_stopped {
            self.commit_after_stop("after the drain");
        }
        if !lifecycle.groups_closed {
            info!("shutdown: closing processor groups");
            let still = inner.plane.close_groups(deadline);
            lifecycle.groups_closed = still.is_empty();
            running.extend(still);
        }
        if !lifecycle.sources_stopped && lifecycle.groups_closed {
            // the feed phase ran out of its bound: join the late stop now, and make the
            // final commit only once every source has stopped (third review, item 5)
            lifecycle.sources_stopped = self.stop_sources(deadline);
            if lifecycle.sources_stopped {
                running.retain(|entry| entry != "<event sources stopping>");
            }
        }
        if lifecycle.sources_stopped && lifecycle.groups_closed && !lifecycle.committed_after_stop {
            self.commit_after_stop("after the groups closed");
            lifecycle.committed_after_stop = true;
        }
        // a quarantined processor, or any processor of a dead group, keeps its instance
        // and so whatever service it was given: services are stopped only once every
        // group closed and no group holds a processor (control-plane-contracts
        // "Shutdown" phase 5 and "Failure containment")
        let held = inner.plane.retained_processors();
        if !held.is_empty() {
            warn!(
                ?held,
                "shutdown: processors are retained (quarantined or in a dead group); the services stay running because those processors may still use them"
            );
        }
        running.extend(held.iter().cloned());
        let services_left_running = if lifecycle.groups_closed && held.is_empty() {
            info!("shutdown: stopping services");
            // each stop runs on a helper thread; one still running at the deadline is
            // re-joined by a resumed attempt, one that failed is never called again
            inner.plane.stop_services(deadline)
        } else {
            inner.plane.owned_services()
        };
        let complete = lifecycle.sources_stopped
            && lifecycle.groups_closed
            && lifecycle.committed_after_stop
            && services_left_running.is_empty()
            && running.is_empty();
        let result = StopResult {
            complete,
            handed_off: false,
            blocked_startup: None,
            groups_running: running,
            services_left_running,
        };
        lifecycle.stopped = complete;
        lifecycle.last = Some(result.clone());
        if complete {
            info!("shutdown complete");
        } else {
            warn!(
                ?result,
                "shutdown incomplete: call shutdown again to resume"
            );
        }
        result
    }

    fn stop_sources(&self, deadline: Instant) -> bool {
        for feed in &self.inner.feeds {
            if let SourceSlot::Running { stop, .. } = &*feed.source.lock() {
                stop.store(true, Ordering::Release);
            }
        }
        let mut all = true;
        for feed in &self.inner.feeds {
            let mut slot = feed.source.lock();
            match std::mem::replace(&mut *slot, SourceSlot::Stopped) {
                SourceSlot::Running { stop, thread } => {
                    while !thread.is_finished() && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    if thread.is_finished() {
                        if thread.join().is_err() {
                            error!(feed = %feed.name, "the source thread panicked");
                        }
                    } else {
                        all = false;
                        *slot = SourceSlot::Running { stop, thread };
                    }
                }
                SourceSlot::Ready(_) | SourceSlot::Stopped => {}
            }
        }
        all
    }

    fn commit_after_stop(&self, when: &str) {
        for feed in &self.inner.feeds {
            let committed = feed.publisher.commit_processed_after_stop();
            info!(feed = %feed.name, acknowledged = committed, "committed what the groups processed {when}");
        }
    }

    /// Why the run cannot go on, one reason each: a source that could not start, an
    /// overload kill switch that ran. [`crate::cli::run_until_done`] ends the run (exit
    /// 1) as soon as there is one.
    pub fn fatal_failures(&self) -> Vec<String> {
        self.inner.failures.lock().clone()
    }

    /// Processors that failed, one reason each: an add at start that was not applied
    /// (REPORT policy) and every quarantined processor. The server goes on without
    /// them; a run that waits to settle ends (exit 1) once they leave nothing able to
    /// make progress.
    pub fn processor_failures(&self) -> Vec<String> {
        let mut failures = self.inner.failed_adds.lock().clone();
        for group in self.group_statuses() {
            for processor in &group.quarantined {
                failures.push(format!(
                    "processor '{}/{}' was quarantined: {}",
                    group.group, processor.name, processor.reason
                ));
            }
        }
        failures
    }

    /// The last shutdown attempt's result.
    pub fn last_stop_result(&self) -> Option<StopResult> {
        self.inner.lifecycle.lock().last.clone()
    }

    /// Waits until a shutdown completed (use after a handed-off stop).
    pub fn await_stopped(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.inner.lifecycle.lock().stopped {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A feed by name.
    pub fn feed(&self, name: &str) -> Option<Arc<dyn AnyFeed>> {
        self.inner.registry.get(name)
    }

    /// The loss file of a configured feed that keeps a pointer
    /// ([`crate::losses::loss_path`]); `None` for other feeds.
    pub fn loss_file(&self, feed: &str) -> Option<std::path::PathBuf> {
        let config = &self.inner.config;
        config
            .feeds
            .iter()
            .position(|candidate| candidate.name == feed && candidate.read_strategy.has_pointer())
            .map(|index| {
                let found = &config.feeds[index];
                if found.is_glob() {
                    // beside the glob feed's lane registry
                    return crate::losses::loss_path(
                        &glob_source_config(config, index).registry_path(),
                    );
                }
                crate::losses::loss_path(&mongoose_source_file::pointer::pointer_path_for(
                    &config.resolve(&found.path),
                ))
            })
    }

    /// Records a loss of `feed` in the log and, for a feed that keeps a pointer, in
    /// its loss file, so the next start reports it once.
    pub fn record_loss(&self, feed: &str, what: String) {
        warn!(feed, %what, "loss recorded: the next start reports it once");
        let Some(path) = self.loss_file(feed) else {
            return;
        };
        if let Err(error) =
            crate::losses::append(&path, &crate::losses::LossRecord::now(feed, what))
        {
            error!(feed, file = %path.display(), %error, "cannot keep the loss record beside the pointer: the next start will not report it");
        }
    }

    /// Reports, once, the losses earlier runs recorded beside the feeds' pointers: a
    /// WARN each, and the feed is not lossless in this run.
    fn report_earlier_losses(&self) {
        for feed in &self.inner.config.feeds {
            let Some(path) = self.loss_file(&feed.name) else {
                continue;
            };
            match crate::losses::take_unreported(&path) {
                Ok(records) if records.is_empty() => {}
                Ok(records) => {
                    for record in &records {
                        warn!(feed = %feed.name, at_millis = record.at_millis, what = %record.what,
                            "an earlier run of this feed was not lossless (reported once; this run is not lossless either)");
                    }
                    if let Some(found) = self.inner.registry.get(&feed.name) {
                        found.note_earlier_losses(records.len() as u64);
                    }
                }
                Err(error) => {
                    error!(feed = %feed.name, file = %path.display(), %error, "cannot read the loss records of earlier runs");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongoose_replay::{EventCodec, PostcardCodec};

    #[test]
    fn a_recorded_line_decodes_with_its_bytes_and_a_string_recording_still_replays() {
        let codec = LineCodec {
            path: "in.csv".into(),
        };
        let long = "x".repeat(300);
        for bytes in [&b"a,5"[..], b"caf\xe9", b"", long.as_bytes()] {
            let mut encoded = Vec::new();
            codec
                .encode(&Line::new("in.csv", bytes.to_vec()), &mut encoded)
                .expect("encoded");
            let decoded = codec.decode(&encoded).expect("decoded");
            assert_eq!(decoded.as_bytes(), bytes);
            assert_eq!(decoded.path(), std::path::Path::new("in.csv"));
        }
        // lines were recorded as postcard Strings before they were Lines
        let mut recorded = Vec::new();
        PostcardCodec::<String>::new()
            .encode(&format!("héllo,{long}"), &mut recorded)
            .expect("encoded");
        assert_eq!(
            codec.decode(&recorded).expect("decoded"),
            format!("héllo,{long}")
        );
        assert!(codec.decode(&[5, b'a']).is_err(), "a short record");
    }
}
