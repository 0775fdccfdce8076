//! [`ServerBuilder::build`]: the checked configuration wired into a [`Server`] (feeds,
//! sources, sinks, groups), with the helpers that make each feed.

use std::sync::Arc;

use mongoose_core::sink::CommitGate;
use std::time::Duration;

use mongoose_audit::capture::CaptureSettings;
use mongoose_control::{
    AddFailurePolicy as ControlAddFailurePolicy, ControlConfig, ControlPlane, DeliveryFeeds,
    IdleStrategy,
};
use mongoose_core::Position;
use mongoose_core::{EventSource, PositionValue, SourceOutput};
use mongoose_delivery::FeedBuilder;
use mongoose_delivery::{AnyFeed, Feed, FeedRegistry, KillSwitch, Publisher};
use mongoose_plugin::host::{ItemCodec, PluginRegistry, PluginSource};
use mongoose_source_file::{
    FileEventSource, FileSourceConfig, GlobFileSource, GlobSourceConfig, Line,
};
use parking_lot::Mutex;
use tracing::error;

use crate::config::data_dir::DataFolderLock;
use crate::config::{AddFailurePolicy, CaptureStore, FeedCodec, IdleStrategyConfig, ServerConfig};
use crate::sinks::{SharedConfig, Sinks};
use crate::ServerError;

use super::builder::{FeedAndSource, ServerBuilder};
use super::{FeedRuntime, Inner, Lifecycle, Server, SourceSlot};

impl ServerBuilder {
    /// Checks everything ([`ServerBuilder::check`]) and builds the server: feeds, sinks
    /// opened (created if missing), nothing runs yet.
    pub fn build(self) -> Result<Server, ServerError> {
        self.check()?;
        // loaded by `check` when a feed or sink needs them; a folder nothing uses is
        // loaded (and its refusals reported) here
        let plugins = self.plugins()?;
        let mut config = self.config;
        // the data folder resolved once, here: every state path derives from it, so a
        // symlink (data_dir itself, or a folder above it) moved while the server runs
        // moves nothing it keeps (a reload naming another folder is refused)
        config.data_dir = config.canonical_data_folder();
        // before anything is opened: a second server on the data folder is refused
        let data_lock = config
            .keeps_state()
            .then(|| DataFolderLock::acquire(&config.data_dir))
            .transpose()?;
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
        let mut feeds: Vec<Arc<FeedRuntime>> = self
            .code_sources
            .into_iter()
            .map(|(name, publisher, source)| {
                Arc::new(FeedRuntime {
                    name,
                    publisher,
                    source: Mutex::new(SourceSlot::Ready(source)),
                })
            })
            .collect();
        for index in 0..config.feeds.len() {
            if let Some(feed) =
                configured_feed(&config, index, plugins.as_deref(), &kill_switch, &connector)?
            {
                feeds.push(Arc::new(feed));
            }
        }
        let running: SharedConfig = Arc::new(parking_lot::RwLock::new(Arc::new(config.clone())));
        let sinks = Sinks::open(
            &running,
            Some(registry.clone()),
            plugins.as_deref(),
            self.sink_capture,
        )?;
        Ok(Server {
            inner: Arc::new(Inner {
                config,
                running,
                kinds: self.kinds,
                code_processors: Mutex::new(self.code_processors),
                code_feed_names: self.code_feed_names,
                registry,
                plane,
                feeds: Mutex::new(feeds),
                sinks,
                reports: Default::default(),
                plugins,
                kill_switch,
                connector,
                reloads: Mutex::default(),
                recording_run: Mutex::new(None),
                lifecycle: Mutex::new(Lifecycle::default()),
                failures,
                failed_adds: Mutex::new(Vec::new()),
                earlier_losses: Mutex::new(Vec::new()),
                data_lock: Mutex::new(data_lock),
            }),
        })
    }
}

/// Configured feed `index` of `config`: its publisher (registered with `connector`)
/// and its source, not started. `None` for a plugin feed without loaded plugins (the
/// checks refused such a config already).
pub(super) fn configured_feed(
    config: &ServerConfig,
    index: usize,
    plugins: Option<&PluginRegistry>,
    kill_switch: &KillSwitch,
    connector: &DeliveryFeeds,
) -> Result<Option<FeedRuntime>, ServerError> {
    let feed_config = &config.feeds[index];
    if let Some(kind) = feed_config.plugin_kind() {
        // checked: a plugin of plugin_dir declares the kind
        let Some(loaded) = plugins else {
            return Ok(None);
        };
        let (publisher, source) = plugin_feed(config, index, kind, loaded, kill_switch, connector)?;
        return Ok(Some(FeedRuntime {
            name: feed_config.name.clone(),
            publisher,
            source: Mutex::new(SourceSlot::Ready(source)),
        }));
    }
    let strategy = feed_config.read_strategy;
    let (publisher, source): (Arc<dyn AnyFeed>, Box<dyn EventSource>) = if feed_config.is_glob() {
        // one feed over every matching file, each on its own lane: positions are
        // (lane, byte offset)
        let publisher: Arc<Publisher<Line, (u32, u64)>> =
            feed_builder(config, index)?.try_build()?;
        publisher.set_tap_text(Line::as_bytes);
        publisher.set_kill_switch(Arc::clone(kill_switch));
        connector.register(Arc::clone(&publisher))?;
        if strategy.has_pointer() {
            config.adopt_feed_state(index)?;
            config.warn_about_orphan_state("feed", &config.feed_state_dir(index));
        }
        let source =
            GlobFileSource::<Line>::of_lines(glob_source_config(config, index), publisher.clone());
        (publisher, Box::new(source))
    } else {
        let publisher: Arc<Publisher<Line, u64>> = feed_builder(config, index)?.try_build()?;
        publisher.set_tap_text(Line::as_bytes);
        // run only for queues whose overload block asks for it
        publisher.set_kill_switch(Arc::clone(kill_switch));
        connector.register(Arc::clone(&publisher))?;
        let mut file_config = FileSourceConfig::new(
            &feed_config.name,
            config.resolve(&feed_config.path),
            strategy,
        );
        file_config.rotated = feed_config.rotated.iter().cloned().collect();
        file_config.state_dir = Some(config.feed_state_dir(index));
        if strategy.has_pointer() {
            config.adopt_feed_state(index)?;
            config.warn_about_orphan_state("feed", &config.feed_state_dir(index));
        }
        let source = FileEventSource::<Line>::of_lines(file_config, publisher.clone());
        (publisher, Box::new(source))
    };
    Ok(Some(FeedRuntime {
        name: feed_config.name.clone(),
        publisher,
        source: Mutex::new(SourceSlot::Ready(source)),
    }))
}

/// A byte feed's item as a tap reads it.
fn bytes_text(bytes: &bytes::Bytes) -> &[u8] {
    bytes
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
            publisher.set_tap_text(Line::as_bytes);
            publisher.set_kill_switch(Arc::clone(kill_switch));
            set_loss_keeper(config, &feed_config.name, &publisher);
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
            publisher.set_tap_text(bytes_text);
            publisher.set_kill_switch(Arc::clone(kill_switch));
            set_loss_keeper(config, &feed_config.name, &publisher);
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

/// Has each loss the plugin source of `feed` reports kept in the feed's loss file
/// ([`super::loss_file_of`]) before the report returns: the source commits past a loss
/// only after it reported it, so a run killed after that commit leaves the loss for the
/// next start (a file source keeps its own). A feed without a loss file keeps none.
fn set_loss_keeper<T: Send + Sync + 'static>(
    config: &ServerConfig,
    feed: &str,
    publisher: &Publisher<T, PositionValue>,
) {
    let Some(path) = super::loss_file_of(config, feed) else {
        return;
    };
    let feed = feed.to_owned();
    publisher.set_loss_keeper(Box::new(move |what: &str| {
        super::keep_loss(&path, &feed, what.to_owned());
    }));
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
    glob_config.state_dir = Some(config.feed_state_dir(index));
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

/// A commit gate resolved on first use, once the server (its feed registry) exists.
pub(super) struct DeferredGate {
    pub(super) registry: Arc<std::sync::OnceLock<FeedRegistry>>,
    pub(super) feed: String,
    pub(super) group: String,
    pub(super) participant: std::sync::OnceLock<Option<mongoose_delivery::CheckpointParticipant>>,
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
