//! The [`ServerBuilder`]: a configuration, processor kinds and what code adds, checked
//! and wired into a [`Server`].

use std::collections::BTreeMap;
use std::sync::Arc;

use mongoose_core::sink::CommitGate;
use std::time::Duration;

use mongoose_control::capture::CaptureSettings;
use mongoose_control::{
    AddFailurePolicy as ControlAddFailurePolicy, ControlConfig, ControlPlane, DeliveryFeeds,
    IdleStrategy, ProcessorSupplier,
};
use mongoose_core::Position;
use mongoose_core::{EventSource, PositionValue, Processor, SourceOutput};
use mongoose_delivery::FeedBuilder;
use mongoose_delivery::{AnyFeed, Feed, FeedRegistry, KillSwitch, Publisher};
use mongoose_plugin::host::{ItemCodec, PluginRegistry, PluginSource, Role};
use mongoose_source_file::{
    FileEventSource, FileSourceConfig, GlobFileSource, GlobSourceConfig, Line,
};
use parking_lot::Mutex;
use tracing::error;

use crate::config::{
    check_name, AddFailurePolicy, CaptureStore, FeedCodec, IdleStrategyConfig, ServerConfig,
};
use crate::sinks::Sinks;
use crate::ServerError;

use super::kinds::{unknown_feed, ProcessorContext, ProcessorKind, SettingsCheck, SettingsError};
use super::{FeedRuntime, Inner, Lifecycle, Server, SourceSlot};

/// A configured feed and its source.
type FeedAndSource = (Arc<dyn AnyFeed>, Box<dyn EventSource>);

/// A source added by code: its feed's name, the feed, the source.
type CodeSource = (String, Arc<dyn AnyFeed>, Box<dyn EventSource>);

/// Registers a feed built by code with the server's feeds.
type FeedRegistration = Box<dyn FnOnce(&DeliveryFeeds) -> Result<(), ServerError>>;

/// Builds a [`Server`]: a configuration, processor kinds, and processors added by code.
pub struct ServerBuilder {
    pub(super) config: ServerConfig,
    pub(super) kinds: BTreeMap<String, ProcessorKind>,
    code_processors: Vec<(String, String, ProcessorSupplier)>,
    code_feeds: Vec<FeedRegistration>,
    /// The names of the feeds added by code.
    code_feed_names: Vec<String>,
    code_sources: Vec<CodeSource>,
    kill_switch: Option<KillSwitch>,
    /// The feeds once the server is built, for gates handed out before
    /// ([`ServerBuilder::commit_gate`]).
    built_registry: Arc<std::sync::OnceLock<FeedRegistry>>,
    /// The plugins of `plugin_dir`, once loaded.
    plugins: std::sync::OnceLock<Option<Arc<PluginRegistry>>>,
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

    /// The commit gate of `feed` for processors of `group`, for a processor built by
    /// code before the server is (the ledger example's): a participant in the feed's
    /// processing checkpoint for the group, taken when first used (once the server is
    /// built). Pass it to a processor that makes its state or outputs durable after
    /// the line was handled (an outbox with group commit): the feed then commits a line
    /// only once the processor said it is durable ([`CommitGate::complete_through`]).
    pub fn commit_gate(&self, feed: &str, group: &str) -> Arc<dyn CommitGate> {
        Arc::new(DeferredGate {
            registry: Arc::clone(&self.built_registry),
            feed: feed.to_owned(),
            group: group.to_owned(),
            participant: std::sync::OnceLock::new(),
        })
    }

    /// Adds a processor built by code to a group (created on demand): a closure
    /// returning a processor, or any [`ProcessorSupplier`]; its type name is what a
    /// recording keeps as the stream's provenance.
    pub fn processor(
        mut self,
        group: &str,
        name: &str,
        supplier: impl Into<ProcessorSupplier>,
    ) -> Self {
        self.code_processors
            .push((group.to_owned(), name.to_owned(), supplier.into()));
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

    /// The plugins of the configuration's `plugin_dir` (`None` without one), loaded once
    /// (by [`ServerBuilder::check`] or [`ServerBuilder::build`]). A plugin the handshake
    /// refuses, an unreadable folder or a kind two plugins declare is a config error
    /// at `plugin_dir`.
    pub fn plugins(&self) -> Result<Option<Arc<PluginRegistry>>, ServerError> {
        if let Some(loaded) = self.plugins.get() {
            return Ok(loaded.clone());
        }
        let Some(dir) = &self.config.plugin_dir else {
            return Ok(self.plugins.get_or_init(|| None).clone());
        };
        let dir = self.config.resolve(dir);
        let mut registry = PluginRegistry::load_dir(&dir)
            .map_err(|error| ServerError::invalid("plugin_dir", error.to_string()))?;
        // a plugin's relative paths mean what the rest of the config's mean
        registry
            .set_base_dir(&self.config.base_dir)
            .map_err(|error| ServerError::invalid("plugin_dir", error.to_string()))?;
        if !registry.refused().is_empty() {
            let reasons: Vec<String> = registry
                .refused()
                .iter()
                .map(|refusal| refusal.reason.clone())
                .collect();
            return Err(ServerError::invalid(
                "plugin_dir",
                format!(
                    "{} plugin(s) of {} refused: {}; rebuild them (cargo xtask plugins --out {}) or remove them from the folder",
                    reasons.len(),
                    dir.display(),
                    reasons.join("; "),
                    dir.display()
                ),
            ));
        }
        for plugin in registry.plugins() {
            let kinds: Vec<String> = plugin
                .kinds()
                .iter()
                .map(|kind| format!("{} ({})", kind.name, kind.role.as_str()))
                .collect();
            tracing::info!(plugin = %plugin.name(), version = %plugin.version(), file = %plugin.path().display(), kinds = %kinds.join(", "), "plugin loaded");
        }
        Ok(self
            .plugins
            .get_or_init(|| Some(Arc::new(registry)))
            .clone())
    }

    /// Refuses a feed's source or a sink's kind that is neither built in nor declared
    /// by a loaded plugin, naming the known kinds and the plugin folder.
    fn check_plugin_kinds(&self) -> Result<(), ServerError> {
        let config = &self.config;
        let wanted = config
            .feeds
            .iter()
            .enumerate()
            .filter_map(|(index, feed)| {
                let kind = feed.plugin_kind()?;
                Some((
                    format!("feeds[{index}].source"),
                    Role::Source,
                    kind,
                    vec!["file"],
                ))
            })
            .chain(
                config
                    .sinks
                    .iter()
                    .enumerate()
                    .filter(|(_, sink)| !sink.is_built_in())
                    .map(|(index, sink)| {
                        (
                            format!("sinks[{index}].kind"),
                            Role::Sink,
                            sink.kind.as_str(),
                            crate::config::SinkConfig::BUILT_IN.to_vec(),
                        )
                    }),
            )
            .collect::<Vec<_>>();
        if wanted.is_empty() {
            // a plugin folder nothing uses is still loaded (and checked) by `build`
            return Ok(());
        }
        let plugins = self.plugins()?;
        for (key, role, kind, built_in) in wanted {
            let role_name = role.as_str();
            let Some(registry) = plugins.as_deref() else {
                return Err(ServerError::invalid(
                    key,
                    format!(
                        "'{kind}' is not a built-in {role_name} kind ({}) and no plugin_dir is set: set plugin_dir                          to the folder holding the plugin that declares it (cargo xtask plugins --out DIR builds them)",
                        built_in.join(", ")
                    ),
                ));
            };
            if registry.find(role, kind).is_none() {
                let mut known: Vec<String> =
                    built_in.iter().map(|kind| (*kind).to_owned()).collect();
                known.extend(registry.kinds(role));
                return Err(ServerError::invalid(
                    key,
                    format!(
                        "no plugin in {} declares the {role_name} kind '{kind}': the known {role_name} kinds are [{}];                          fix the kind, or build the plugin that declares it into that folder (cargo xtask plugins --out {})",
                        registry.dir().display(),
                        known.join(", "),
                        registry.dir().display()
                    ),
                ));
            }
        }
        Ok(())
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
        self.check_plugin_kinds()?;
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
        // loaded by `check` when a feed or sink needs them; a folder nothing uses is
        // loaded (and its refusals reported) here
        let plugins = self.plugins()?;
        let config = self.config;
        let registry = FeedRegistry::default();
        let _ = self.built_registry.set(registry.clone());
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
        if config.audit.enabled {
            // the capture root is made at the first start of a capture, not here
            let root = config.resolve(&config.audit.capture_dir);
            let mut capture = match config.audit.store {
                CaptureStore::Journal => CaptureSettings::new(
                    root,
                    Arc::new(crate::audit_journal::JournalCaptureResources),
                ),
                CaptureStore::File => CaptureSettings::files(root),
            };
            capture.open_timeout = Duration::from_millis(config.audit.open_timeout_millis);
            plane.enable_capture(capture);
        }
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
            if let Some(kind) = feed_config.plugin_kind() {
                // checked: a plugin of plugin_dir declares the kind
                let Some(loaded) = plugins.as_deref() else {
                    continue;
                };
                let (publisher, source) =
                    plugin_feed(&config, index, kind, loaded, &kill_switch, &connector)?;
                feeds.push(FeedRuntime {
                    name: feed_config.name.clone(),
                    publisher,
                    source: Mutex::new(SourceSlot::Ready(source)),
                });
                continue;
            }
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
        let sinks = Sinks::open(&config, Some(registry.clone()), plugins.as_deref())?;
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
                earlier_losses: Mutex::new(Vec::new()),
            }),
        })
    }
}

/// The builder of configured feed `index`: capacity, overload, status events, bounded.
fn feed_builder<T: Send + Sync + 'static, P: Position>(
    config: &ServerConfig,
    index: usize,
) -> Result<FeedBuilder<T, P>, ServerError> {
    let feed_config = &config.feeds[index];
    let mut builder =
        Feed::<T, P>::builder(&feed_config.name).status_events(feed_config.status_events);
    if let Some(capacity) = feed_config.queue_capacity {
        builder = builder.queue_capacity(capacity);
    }
    if let Some(settings) = config.feed_overload(index)? {
        builder = builder.overload(settings);
    }
    for (group, settings) in config.feed_overrides(index)? {
        builder = builder.subscriber_overload(&group, settings);
    }
    Ok(builder.bounded(feed_config.is_file() && feed_config.read_strategy.is_once()))
}

/// The feed and source of configured plugin feed `index` (source kind `kind`): a feed
/// of [`Line`]s or of [`bytes::Bytes`] (its `codec`), positioned by
/// [`PositionValue`], and the plugin's source publishing into it.
fn plugin_feed(
    config: &ServerConfig,
    index: usize,
    kind: &str,
    plugins: &PluginRegistry,
    kill_switch: &KillSwitch,
    connector: &DeliveryFeeds,
) -> Result<FeedAndSource, ServerError> {
    let feed_config = &config.feeds[index];
    let settings = toml::to_string(&feed_config.settings).map_err(|error| {
        ServerError::invalid(format!("feeds[{index}].settings"), error.to_string())
    })?;
    let refused = |error: mongoose_plugin::host::PluginError| {
        ServerError::invalid(format!("feeds[{index}].settings"), error.to_string())
    };
    Ok(match feed_config.codec.unwrap_or_default() {
        FeedCodec::Line => {
            let publisher: Arc<Publisher<Line, PositionValue>> =
                feed_builder(config, index)?.try_build()?;
            publisher.set_kill_switch(Arc::clone(kill_switch));
            connector.register(Arc::clone(&publisher))?;
            // a plugin line's "path" is its source kind (what `{path}` of a forward
            // template prints)
            let origin = std::path::PathBuf::from(kind);
            let codec: Arc<dyn ItemCodec<Line>> =
                Arc::new(move |bytes: bytes::Bytes| Line::new(&origin, bytes));
            let output: Arc<dyn SourceOutput<Line, PositionValue>> = publisher.clone();
            let source =
                PluginSource::create(plugins, kind, &feed_config.name, &settings, output, codec)
                    .map_err(refused)?;
            (publisher, Box::new(source))
        }
        FeedCodec::Bytes => {
            let publisher: Arc<Publisher<bytes::Bytes, PositionValue>> =
                feed_builder(config, index)?.try_build()?;
            publisher.set_kill_switch(Arc::clone(kill_switch));
            connector.register(Arc::clone(&publisher))?;
            let codec: Arc<dyn ItemCodec<bytes::Bytes>> = Arc::new(|bytes: bytes::Bytes| bytes);
            let output: Arc<dyn SourceOutput<bytes::Bytes, PositionValue>> = publisher.clone();
            let source =
                PluginSource::create(plugins, kind, &feed_config.name, &settings, output, codec)
                    .map_err(refused)?;
            (publisher, Box::new(source))
        }
    })
}

/// The glob source configuration of configured feed `index` (a glob path).
pub(super) fn glob_source_config(config: &ServerConfig, index: usize) -> GlobSourceConfig {
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

pub(super) fn idle_strategy(config: IdleStrategyConfig) -> IdleStrategy {
    match config {
        IdleStrategyConfig::BusySpin => IdleStrategy::BusySpin,
        IdleStrategyConfig::Yield => IdleStrategy::Yield,
        IdleStrategyConfig::SleepingMillis(millis) => IdleStrategy::SleepingMillis(millis),
        IdleStrategyConfig::Backoff => IdleStrategy::default(),
    }
}

impl Server {
    /// Starts building a server from a configuration, with the built-in processor
    /// kind `forward` ([`crate::forward`]) registered: register the others its config
    /// files name with [`ServerBuilder::processor_kind_checked`] (the `mongoose` binary
    /// registers the ledger's).
    pub fn builder(config: ServerConfig) -> ServerBuilder {
        crate::forward::register(ServerBuilder {
            config,
            kinds: BTreeMap::new(),
            code_processors: Vec::new(),
            code_feeds: Vec::new(),
            code_feed_names: Vec::new(),
            code_sources: Vec::new(),
            kill_switch: None,
            built_registry: Arc::default(),
            plugins: std::sync::OnceLock::new(),
        })
    }
}

/// A commit gate resolved on first use, once the server (its feed registry) exists.
struct DeferredGate {
    registry: Arc<std::sync::OnceLock<FeedRegistry>>,
    feed: String,
    group: String,
    participant: std::sync::OnceLock<Option<mongoose_delivery::CheckpointParticipant>>,
}

impl DeferredGate {
    fn participant(&self) -> Option<&mongoose_delivery::CheckpointParticipant> {
        self.participant
            .get_or_init(|| {
                let feed = self.registry.get()?.get(&self.feed)?;
                Some(feed.hold(&self.group).participant())
            })
            .as_ref()
    }
}

impl CommitGate for DeferredGate {
    fn pending(&self, tag: u64) {
        if let Some(participant) = self.participant() {
            participant.pending(tag);
        }
    }

    fn complete(&self, tag: u64) {
        if let Some(participant) = self.participant() {
            participant.complete(tag);
        }
    }

    fn complete_through(&self, tag: u64) {
        if let Some(participant) = self.participant() {
            participant.complete_through(tag);
        }
    }

    fn held(&self, tag: u64, reason: &str) {
        if let Some(participant) = self.participant() {
            participant.held(tag, reason);
        }
    }
}
