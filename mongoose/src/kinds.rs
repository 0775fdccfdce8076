//! The processor kinds the `mongoose` binary registers beside the server's built-in
//! `forward`: `ledger`, the adapter between the server's kind API
//! ([`ServerBuilder::processor_kind_checked`]) and the `mongoose-ledger` crate. The
//! ledger's state is local files (or a journal), or on a Kafka feed shared by a
//! consumer group a changelog topic per partition: the Kafka connector's
//! `mongoose_kafka::changelog::Changelog` behind the core's state store trait, linked
//! only with this crate's `kafka` feature.
//!
//! It cannot live in the ledger crate, which would then depend on the server (the
//! ledger is an application of the processor API and knows nothing of the server).

use mongoose_core::Processor;
use mongoose_ledger::{
    AlertSink, Ledger, LedgerSettings, PartitionedLedger, SinkAlerts, StateMode,
};
use mongoose_server::config::FeedConfig;
use mongoose_server::{ServerBuilder, SettingsCheck, SettingsError};

/// The plugin source kind whose feeds a ledger follows per partition by default.
const KAFKA: &str = "kafka";

/// Where a partitioned ledger (or aggregate) keeps its state: filled in from the Kafka
/// feed's settings.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ChangelogTarget {
    /// `bootstrap.servers`.
    brokers: String,
    /// The feed's topic (the changelog is co-partitioned with it).
    input_topic: String,
    /// The changelog topic.
    topic: String,
    /// A name for logs and client ids (`group/processor`).
    name: String,
    /// Changes, alerts and offsets in one transaction per partition and interval.
    transactions: Option<std::time::Duration>,
    /// The topic the alerts go to in the transactions.
    alerts_topic: Option<String>,
    /// The feed's settings: the changelog connects with their security settings
    /// (`mongoose_kafka::KafkaSecurity`).
    feed_settings: toml::Table,
}

impl ChangelogTarget {
    /// Opens the changelog (creating its topic if missing).
    /// `resolve` makes a relative path of the settings absolute.
    #[cfg(feature = "kafka")]
    pub(crate) fn open(
        &self,
        on_durable: mongoose_core::state_store::OnDurable,
        resolve: &dyn Fn(&std::path::Path) -> std::path::PathBuf,
    ) -> Result<Box<dyn mongoose_core::state_store::PartitionStateStore>, mongoose_core::CoreError>
    {
        use mongoose_kafka::changelog::{Changelog, ChangelogConfig, TransactionsConfig};
        let store_error = |error| mongoose_core::CoreError::StateStore {
            store: self.topic.clone(),
            error: Box::new(error),
        };
        let mut config = ChangelogConfig::new(&self.name, &self.brokers, &self.topic);
        // the input offsets are left to the feed's own commit, which follows each
        // transaction (its commit gate): librdkafka's send_offsets_to_transaction can
        // wait forever, past its timeout, once the group's coordinator broker dies
        // (librdkafka issues 5456 and 5511), and it held the partition's commits with it
        // (kafka_broker.rs, a broker killed: two partitions never committed again). The
        // consumer-side position check skips what the changelog holds past the offsets.
        config.transactions = self.transactions.map(|interval| TransactionsConfig {
            commit_interval: interval,
            ..TransactionsConfig::new(None)
        });
        config.outputs_topic.clone_from(&self.alerts_topic);
        let mut security: mongoose_kafka::KafkaSecurity =
            toml::Value::Table(self.feed_settings.clone())
                .try_into()
                .map_err(|error: toml::de::Error| {
                    store_error(mongoose_kafka::KafkaConnectorError::Security {
                        name: self.name.clone(),
                        message: format!("the feed's security settings: {error}"),
                    })
                })?;
        security.resolve_paths(resolve);
        config.properties = security.properties(&self.name).map_err(store_error)?;
        mongoose_kafka::check_connection(
            &self.name,
            &self.brokers,
            &config.properties,
            config.request_timeout,
        )
        .map_err(store_error)?;
        Changelog::open(config, &self.input_topic, on_durable)
            .map(|changelog| Box::new(changelog) as Box<_>)
            .map_err(store_error)
    }

    /// Without the `kafka` feature there is no changelog to open: [`changelog_target`]
    /// refuses such a ledger before this could be called.
    #[cfg(not(feature = "kafka"))]
    pub(crate) fn open(
        &self,
        _on_durable: mongoose_core::state_store::OnDurable,
        _resolve: &dyn Fn(&std::path::Path) -> std::path::PathBuf,
    ) -> Result<Box<dyn mongoose_core::state_store::PartitionStateStore>, mongoose_core::CoreError>
    {
        Err(mongoose_core::CoreError::Source {
            source_name: self.name.clone(),
            message: WITHOUT_KAFKA.to_owned(),
        })
    }
}

/// Why a changelog ledger is refused by a binary built without the `kafka` feature.
const WITHOUT_KAFKA: &str = "this mongoose was built without its kafka feature, which keeps a ledger's state per partition in a Kafka changelog: build it with the default features (cargo build --release -p mongoose), or give the ledger state = \"local\"";

/// The settings a processor kind keeping its state in a changelog gives (the ledger's,
/// and the aggregate's of the same names).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChangelogSettings<'a> {
    /// The kind's name, for messages (`ledger`, `aggregate`).
    pub(crate) kind: &'a str,
    /// `state`.
    pub(crate) state: StateMode,
    /// `feed`.
    pub(crate) feed: &'a str,
    /// `changelog_topic`.
    pub(crate) changelog_topic: Option<&'a str>,
    /// `transactions`.
    pub(crate) transactions: bool,
    /// `commit_interval_ms`.
    pub(crate) commit_interval_ms: u64,
    /// `alerts_topic` (the ledger's alone).
    pub(crate) alerts_topic: Option<&'a str>,
}

impl<'a> ChangelogSettings<'a> {
    /// The ledger's.
    fn of_ledger(settings: &'a LedgerSettings) -> Self {
        ChangelogSettings {
            kind: "ledger",
            state: settings.state,
            feed: &settings.feed,
            changelog_topic: settings.changelog_topic.as_deref(),
            transactions: settings.transactions,
            commit_interval_ms: settings.commit_interval_ms,
            alerts_topic: settings.alerts_topic.as_deref(),
        }
    }
}

/// Where a ledger on `feed` keeps its state: `Ok(Some(target))` for a changelog,
/// `Ok(None)` for local state, or why the settings cannot work.
fn changelog_target(
    settings: &LedgerSettings,
    processor: &str,
    feed: Option<&FeedConfig>,
) -> Result<Option<ChangelogTarget>, SettingsError> {
    changelog_target_of(ChangelogSettings::of_ledger(settings), processor, feed)
}

/// Where a processor of `settings.kind` on `feed` keeps its state: `Ok(Some(target))`
/// for a changelog, `Ok(None)` for local state, or why the settings cannot work (the
/// feed is not a Kafka one, has an `epoch_file`, lacks brokers, topic or group).
pub(crate) fn changelog_target_of(
    settings: ChangelogSettings<'_>,
    processor: &str,
    feed: Option<&FeedConfig>,
) -> Result<Option<ChangelogTarget>, SettingsError> {
    let kind = settings.kind;
    let kafka = feed.filter(|feed| feed.plugin_kind() == Some(KAFKA));
    let Some(feed) = (match (settings.state, kafka) {
        (StateMode::Local, _) | (StateMode::Auto, None) if settings.alerts_topic.is_some() => {
            return Err(SettingsError::at(
                "alerts_topic",
                "alerts_topic writes the alerts in the transactions of a changelog: it needs state = \"changelog\" on a Kafka feed; give alerts (a file) or alerts_sink instead",
            ))
        }
        (StateMode::Local, _) | (StateMode::Auto, None) => return Ok(None),
        (StateMode::Auto | StateMode::Changelog, Some(feed)) => Some(feed),
        (StateMode::Changelog, None) => {
            return Err(SettingsError::at(
                "state",
                format!(
                    "state = \"changelog\" keeps the state per partition of a Kafka feed, and the feed '{}' is not one (source = \"{KAFKA}\"): use state = \"local\" (the default of an aggregate)",
                    settings.feed
                ),
            ))
        }
    }) else {
        return Ok(None);
    };
    if !cfg!(feature = "kafka") {
        return Err(SettingsError::at(
            "state",
            WITHOUT_KAFKA.replace("a ledger's", &format!("a {kind}'s")),
        ));
    }
    let text = |key: &str| feed.settings.get(key).and_then(toml::Value::as_str);
    if text("epoch_file").is_some() {
        return Err(SettingsError::at(
            "state",
            format!(
                "the feed '{}' has an epoch_file, which keeps a partition's epoch when it comes back to this member; a {kind} with a changelog restores at every new epoch, so it needs a new one at each assignment: remove epoch_file from the feed's settings{}",
                feed.name,
                if kind == "ledger" { ", or give the ledger state = \"local\"" } else { "" }
            ),
        ));
    }
    let (Some(brokers), Some(topic), Some(group)) = (text("brokers"), text("topic"), text("group"))
    else {
        return Err(SettingsError::at(
            "state",
            format!(
                "the Kafka feed '{}' needs brokers, topic and group in its settings for the {kind}'s changelog",
                feed.name
            ),
        ));
    };
    if settings.alerts_topic.is_some() && !settings.transactions {
        return Err(SettingsError::at(
            "alerts_topic",
            "alerts_topic writes the alerts in the changelog's transactions, and transactions = false: remove transactions = false, or give alerts (a file) or alerts_sink",
        ));
    }
    Ok(Some(ChangelogTarget {
        brokers: brokers.to_owned(),
        input_topic: topic.to_owned(),
        topic: settings
            .changelog_topic
            .map_or_else(|| format!("{group}-{processor}-changelog"), str::to_owned),
        name: format!("{group}/{processor}"),
        transactions: settings
            .transactions
            .then(|| std::time::Duration::from_millis(settings.commit_interval_ms)),
        alerts_topic: settings.alerts_topic.map(str::to_owned),
        feed_settings: feed.settings.clone(),
    }))
}

/// Registers the processor kind `ledger` on `builder`: its settings are checked when
/// the server is built (and by `mongoose validate`), the ledger opens at start.
pub fn register(builder: ServerBuilder) -> ServerBuilder {
    crate::aggregate::register(builder).processor_kind_checked("ledger", check, |context| {
        let mut settings: LedgerSettings = context.settings()?;
        settings.state_dir = context.resolve(&settings.state_dir);
        let target = changelog_target(&settings, context.name, context.feed(&settings.feed))
            .map_err(|error| error.to_string())?;
        let open = |alerts: Option<Box<dyn AlertSink>>| {
            let gate = context.commit_gate(&settings.feed);
            match &target {
                Some(target) => PartitionedLedger::open(
                    settings.clone(),
                    |on_durable| target.open(on_durable, &|path| context.resolve(path)),
                    alerts,
                    gate,
                )
                .map(|ledger| Box::new(ledger) as Box<dyn Processor>),
                None => match alerts {
                    Some(alerts) => Ledger::open(settings.clone(), alerts, gate)
                        .map(|ledger| Box::new(ledger) as Box<dyn Processor>),
                    // refused by `changelog_target` before this
                    None => Err(
                        "a ledger with local state writes its alerts to alerts or alerts_sink"
                            .into(),
                    ),
                },
            }
            .map_err(|error| error.to_string())
        };
        match (&settings.alerts, &settings.alerts_sink) {
            (None, None) if settings.alerts_topic.is_some() => open(None),
            (Some(path), None) => open(Some(Box::new(
                SinkAlerts::file(
                    &context.resolve(path),
                    settings.sync,
                    context.commit_gate(&settings.feed),
                )
                .map_err(|error| {
                    format!("cannot open the alerts file {}: {error}", path.display())
                })?,
            ))),
            (None, Some(sink)) => {
                // the alerts' outcomes are tracked one by one, so the ledger records each
                // as it is published (its outbox never piles up unsettled alerts)
                let (handle, gates, name) = context.sink_parts(sink)?;
                open(Some(Box::new(SinkAlerts::tracked(handle, gates, &name))))
            }
            _ => Err(
                "give the ledger exactly one of alerts (a file) or alerts_sink \
                 (a configured sink)"
                    .to_owned(),
            ),
        }
    })
}

/// The ledger kind's settings check (its `validate(settings)` hook, run when the
/// server is built and by `mongoose validate`): the settings deserialize (no unknown
/// key, `state_dir` given), the feed is one the server has, an `alerts_sink` is a
/// configured sink, and the ledger's own checks ([`LedgerSettings::check`]).
fn check(check: &SettingsCheck<'_>) -> Result<(), SettingsError> {
    let settings: LedgerSettings = check.settings()?;
    check.feed("feed", &settings.feed)?;
    let feed = check
        .config
        .feeds
        .iter()
        .find(|feed| feed.name == settings.feed);
    changelog_target(&settings, check.name, feed)?;
    if let (None, Some(sink)) = (&settings.alerts, &settings.alerts_sink) {
        check.sink("alerts_sink", sink)?;
    }
    if let Some(path) = &settings.alerts {
        if let Some(sink) = check.config.file_sink_writing(path) {
            return Err(SettingsError::at(
                "alerts",
                format!(
                    "the alerts file {} is the same file the file sink '{}' writes: two writers into one file overwrite each other's lines; give the alerts a file of their own, or write them into that sink with alerts_sink = \"{}\" (its outputs are keyed by processor)",
                    path.display(),
                    sink.name,
                    sink.name
                ),
            ));
        }
    }
    settings
        .check(|path| check.resolve(path))
        .map_err(|refusal| match refusal.key {
            Some(key) => SettingsError::at(key, refusal.message),
            None => SettingsError::new(refusal.message),
        })
}
