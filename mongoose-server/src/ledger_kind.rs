//! The processor kind `ledger` of the `mongoose` binary: the adapter between the
//! server's kind API ([`ServerBuilder::processor_kind_checked`]) and the
//! `mongoose-ledger` crate.
//!
//! Not a part of the server's library: the binary declares this module, and the
//! examples and tests that build a server with the ledger kind in their own process
//! include this file (`#[path = ".../src/ledger_kind.rs"] mod ledger_kind;`). It
//! cannot live in the ledger crate, which would then depend on the server, whose
//! binary depends on the ledger (a cycle).

use mongoose_core::Processor;
use mongoose_ledger::{
    AlertSink, ChangelogTarget, Ledger, LedgerSettings, PartitionedLedger, SinkAlerts, StateMode,
};
use mongoose_server::config::FeedConfig;
use mongoose_server::{ServerBuilder, SettingsCheck, SettingsError};

/// The plugin source kind whose feeds a ledger follows per partition by default.
const KAFKA: &str = "kafka";

/// Where a ledger on `feed` keeps its state: `Ok(Some(target))` for a changelog,
/// `Ok(None)` for local state, or why the settings cannot work.
fn changelog_target(
    settings: &LedgerSettings,
    processor: &str,
    feed: Option<&FeedConfig>,
) -> Result<Option<ChangelogTarget>, SettingsError> {
    let kafka = feed.filter(|feed| feed.plugin_kind() == Some(KAFKA));
    let Some(feed) = (match (settings.state, kafka) {
        (StateMode::Local, _) | (StateMode::Auto, None) => return Ok(None),
        (StateMode::Auto | StateMode::Changelog, Some(feed)) => Some(feed),
        (StateMode::Changelog, None) => {
            return Err(SettingsError::at(
                "state",
                format!(
                    "state = \"changelog\" keeps the state per partition of a Kafka feed, and the feed '{}' is not one (source = \"{KAFKA}\"): use state = \"local\"",
                    settings.feed
                ),
            ))
        }
    }) else {
        return Ok(None);
    };
    let text = |key: &str| feed.settings.get(key).and_then(toml::Value::as_str);
    if text("epoch_file").is_some() {
        return Err(SettingsError::at(
            "state",
            format!(
                "the feed '{}' has an epoch_file, which keeps a partition's epoch when it comes back to this member; a ledger with a changelog restores at every new epoch, so it needs a new one at each assignment: remove epoch_file from the feed's settings, or give the ledger state = \"local\"",
                feed.name
            ),
        ));
    }
    let (Some(brokers), Some(topic), Some(group)) = (text("brokers"), text("topic"), text("group"))
    else {
        return Err(SettingsError::at(
            "state",
            format!(
                "the Kafka feed '{}' needs brokers, topic and group in its settings for the ledger's changelog",
                feed.name
            ),
        ));
    };
    Ok(Some(ChangelogTarget {
        brokers: brokers.to_owned(),
        input_topic: topic.to_owned(),
        topic: settings
            .changelog_topic
            .clone()
            .unwrap_or_else(|| format!("{group}-{processor}-changelog")),
        name: format!("{group}/{processor}"),
    }))
}

/// Registers the processor kind `ledger` on `builder`: its settings are checked when
/// the server is built (and by `mongoose validate`), the ledger opens at start.
pub(crate) fn register(builder: ServerBuilder) -> ServerBuilder {
    builder.processor_kind_checked("ledger", check, |context| {
        let mut settings: LedgerSettings = context.settings()?;
        settings.state_dir = context.resolve(&settings.state_dir);
        let target = changelog_target(&settings, context.name, context.feed(&settings.feed))
            .map_err(|error| error.to_string())?;
        let open = |alerts: Box<dyn AlertSink>| {
            let gate = context.commit_gate(&settings.feed);
            match &target {
                Some(target) => PartitionedLedger::open(settings.clone(), target, alerts, gate)
                    .map(|ledger| Box::new(ledger) as Box<dyn Processor>),
                None => Ledger::open(settings.clone(), alerts, gate)
                    .map(|ledger| Box::new(ledger) as Box<dyn Processor>),
            }
            .map_err(|error| error.to_string())
        };
        match (&settings.alerts, &settings.alerts_sink) {
            (Some(path), None) => open(Box::new(
                SinkAlerts::file(
                    &context.resolve(path),
                    settings.sync,
                    context.commit_gate(&settings.feed),
                )
                .map_err(|error| {
                    format!("cannot open the alerts file {}: {error}", path.display())
                })?,
            )),
            (None, Some(sink)) => {
                // the alerts' outcomes are tracked one by one, so the ledger records each
                // as it is published (its outbox never piles up unsettled alerts)
                let (handle, gates, name) = context.sink_parts(sink)?;
                open(Box::new(SinkAlerts::tracked(handle, gates, &name)))
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
