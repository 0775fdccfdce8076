//! The [`ServerBuilder`]: a configuration, processor kinds and what code adds, checked
//! and wired into a [`Server`].

use std::collections::BTreeMap;
use std::sync::Arc;

use mongoose_core::sink::CommitGate;

use mongoose_control::{DeliveryFeeds, ProcessorSupplier};
use mongoose_core::{EventSource, Processor};
use mongoose_delivery::{AnyFeed, FeedRegistry, KillSwitch, Publisher};
use mongoose_plugin::host::PluginRegistry;

use crate::config::ServerConfig;
use crate::ServerError;

use super::build::DeferredGate;
use super::kinds::{ProcessorContext, ProcessorKind, SettingsCheck, SettingsError};
use super::Server;

/// A configured feed and its source.
pub(super) type FeedAndSource = (Arc<dyn AnyFeed>, Box<dyn EventSource>);

/// A source added by code: its feed's name, the feed, the source.
pub(super) type CodeSource = (String, Arc<dyn AnyFeed>, Box<dyn EventSource>);

/// Registers a feed built by code with the server's feeds.
pub(super) type FeedRegistration = Box<dyn FnOnce(&DeliveryFeeds) -> Result<(), ServerError>>;

/// Builds a [`Server`]: a configuration, processor kinds, and processors added by code.
pub struct ServerBuilder {
    pub(super) config: ServerConfig,
    pub(super) kinds: BTreeMap<String, ProcessorKind>,
    pub(super) code_processors: Vec<(String, String, ProcessorSupplier)>,
    pub(super) code_feeds: Vec<FeedRegistration>,
    /// The names of the feeds added by code.
    pub(super) code_feed_names: Vec<String>,
    pub(super) code_sources: Vec<CodeSource>,
    pub(super) kill_switch: Option<KillSwitch>,
    /// The feeds once the server is built, for gates handed out before
    /// ([`ServerBuilder::commit_gate`]).
    pub(super) built_registry: Arc<std::sync::OnceLock<FeedRegistry>>,
    /// The plugins of `plugin_dir`, once loaded.
    pub(super) plugins: std::sync::OnceLock<Option<Arc<PluginRegistry>>>,
    /// Every configured sink's outputs are kept here instead of sent
    /// ([`ServerBuilder::capture_sinks`]).
    pub(super) sink_capture: Option<crate::unit_tests::SinkCapture>,
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

    /// Every configured sink keeps its outputs in `capture` (by sink name, in the order
    /// it was given them) instead of writing or sending them: the config unit tests'
    /// sinks ([`crate::unit_tests`]). No file is opened and nothing is sent.
    pub fn capture_sinks(mut self, capture: crate::unit_tests::SinkCapture) -> Self {
        self.sink_capture = Some(capture);
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
    /// block has `kill_switch = true` (book: guarantees/pause.md), on a
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
            sink_capture: None,
        })
    }
}
