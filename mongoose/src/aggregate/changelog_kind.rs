//! The kind `aggregate` with `state = "changelog"`: its settings check (the ledger's
//! changelog checks, and no `window`) and how the binary opens it
//! ([`super::partitioned::PartitionedAggregate`] on the Kafka changelog of
//! `crate::kinds`).

use std::sync::Arc;

use mongoose_aggregate::{AggregateSettings, Aggregator};
use mongoose_core::Processor;
use mongoose_ledger::{AlertSink, SinkAlerts};
use mongoose_server::{ProcessorContext, SettingsCheck, SettingsError};

use super::partitioned::{PartitionedAggregate, PartitionedOpening};
use super::partitioned_stats::PartitionedStats;
use crate::kinds::{changelog_target_of, ChangelogSettings};

/// The changelog settings of an aggregate, as the ledger's of the same names.
fn changelog_settings(settings: &AggregateSettings) -> ChangelogSettings<'_> {
    ChangelogSettings {
        kind: "aggregate",
        state: mongoose_ledger::StateMode::Changelog,
        feed: &settings.feed,
        changelog_topic: settings.changelog_topic.as_deref(),
        transactions: settings.transactions,
        commit_interval_ms: settings.commit_interval_ms,
        alerts_topic: None,
    }
}

/// The checks of `state = "changelog"` (the feed is a Kafka feed without an
/// `epoch_file`, with brokers, topic and group; no `window`; a commit interval).
pub(super) fn check(
    check: &SettingsCheck<'_>,
    settings: &AggregateSettings,
) -> Result<(), SettingsError> {
    let feed = check
        .config
        .feeds
        .iter()
        .find(|feed| feed.name == settings.feed);
    changelog_target_of(changelog_settings(settings), check.name, feed)?;
    if settings.state_dir.is_some() {
        return Err(SettingsError::at(
            "state_dir",
            "with state = \"changelog\" the state lives in the changelog topic, per partition, and no folder is used: remove state_dir (or use state = \"local\" on a file feed)",
        ));
    }
    if settings.snapshot_every_setting.is_some() {
        return Err(SettingsError::at(
            "snapshot_every",
            "with state = \"changelog\" there is no local snapshot (the broker compacts the changelog topic, and a takeover reads the last value of each key): remove snapshot_every",
        ));
    }
    if settings.window.is_some() {
        return Err(SettingsError::at(
            "window",
            "windows are not kept in a changelog yet: a window closes on its partition's event-time watermark, which a takeover would have to restore with every open window. Remove window to count per key since the start, or run the windowed aggregate on a file feed (state = \"local\")",
        ));
    }
    if settings.commit_interval_ms == 0 {
        return Err(SettingsError::at(
            "commit_interval_ms",
            "commit_interval_ms = 0 would commit without pause: give at least 1 (the default is 100)",
        ));
    }
    Ok(())
}

/// Opens the aggregate of `context` with its state in the changelog.
pub(super) fn open(
    context: &ProcessorContext<'_>,
    settings: AggregateSettings,
) -> Result<Box<dyn Processor>, String> {
    let target = changelog_target_of(
        changelog_settings(&settings),
        context.name,
        context.feed(&settings.feed),
    )
    .map_err(|error| error.to_string())?
    .ok_or("state = \"changelog\" keeps the state per partition of a Kafka feed")?;
    let feed = settings.feed.clone();
    let sink_names = (settings.sink.clone(), settings.dead_letter.clone());
    let aggregator =
        Aggregator::compile(settings, "settings").map_err(|error| error.to_string())?;
    let writer = |sink: &str, suffix: &str| -> Result<Box<dyn AlertSink>, String> {
        let (handle, gates, name) = context.sink_parts(sink)?;
        Ok(Box::new(SinkAlerts::tracked(
            handle,
            gates,
            &format!("{name}{suffix}"),
        )))
    };
    let outputs = sink_names
        .0
        .as_deref()
        .map(|sink| writer(sink, ""))
        .transpose()?;
    let dead_letter = sink_names
        .1
        .as_deref()
        .map(|sink| writer(sink, "/dead_letter"))
        .transpose()?;
    let stats = Arc::new(PartitionedStats::default());
    let reported = Arc::clone(&stats);
    context.report_status(Arc::new(move || reported.to_json()));
    let opening = PartitionedOpening {
        aggregator,
        gate: context.commit_gate(&feed),
        feed,
        name: format!("{}/{}", context.group, context.name),
        stats,
    };
    PartitionedAggregate::open(
        opening,
        |on_durable| target.open(on_durable, &|path| context.resolve(path)),
        outputs,
        dead_letter,
    )
    .map(|processor| Box::new(processor) as Box<dyn Processor>)
}
