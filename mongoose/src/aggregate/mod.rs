//! The processor kind `aggregate` (issue 40): the adapter between the server's kind API
//! and the pure core of `mongoose-aggregate`, with its state kept as the ledger keeps
//! its own: the feed's position saved with the state in the outbox, a snapshot by log
//! size, and the outputs admitted with their lines and written through the server's
//! sinks keyed by position (exactly once into a file sink).
//!
//! Its state modes (`state` in its settings):
//!
//! * `local` (the default): a snapshot and an outbox in `state_dir`, the feed's
//!   positions saved with the state ([`AggregateProcessor`]). A file (or glob) feed;
//!   a Kafka feed is refused, whose partitions move between members.
//! * `changelog`: on a Kafka feed shared by a consumer group, one state per input
//!   partition in a compacted changelog topic that follows the partition to the member
//!   that takes it over ([`partitioned::PartitionedAggregate`], the ledger's model:
//!   each line's record durable before its commit, a restore at each new epoch that
//!   skips the lines the changelog holds). Rule outputs are at least once across a
//!   takeover; windows are refused in this mode.
//!
//! `processor` holds the local processor, `store` what it keeps on disk (and the
//! offline [`store::load`] of tests and tools), `stats` its counters for `/status`;
//! `partitioned` and `partitioned_stats` the changelog mode, `changelog_kind` its
//! check and opening.

use std::sync::Arc;

use mongoose_aggregate::{AggregateError, AggregateSettings, Aggregator, StateMode};
use mongoose_core::Processor;
use mongoose_ledger::{AlertSink, SinkAlerts};
use mongoose_server::{ServerBuilder, SettingsCheck, SettingsError};

mod changelog_kind;
pub mod partitioned;
pub mod partitioned_stats;
pub mod processor;
pub mod stats;
pub mod store;

pub use processor::AggregateProcessor;
pub use stats::AggregateStats;

/// The kind's name in `[[groups.processors]]`.
pub const KIND: &str = "aggregate";

/// Registers the processor kind `aggregate` on `builder`.
pub fn register(builder: ServerBuilder) -> ServerBuilder {
    builder.processor_kind_checked(KIND, check, |context| {
        let settings: AggregateSettings = context.settings()?;
        if settings.state == StateMode::Changelog {
            return changelog_kind::open(context, settings);
        }
        let state_dir = settings
            .state_dir
            .as_deref()
            .map(|dir| context.resolve(dir))
            .ok_or("state_dir: the folder the aggregate keeps its state in is missing")?;
        let feed = settings.feed.clone();
        let snapshot_every = settings.snapshot_every();
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
        let stats = Arc::new(AggregateStats::default());
        let name = format!("{}/{}", context.group, context.name);
        let reported = Arc::clone(&stats);
        context.report_status(Arc::new(move || reported.to_json()));
        let opening = processor::Opening {
            aggregator,
            gate: context.commit_gate(&feed),
            feed,
            state_dir,
            snapshot_every,
            name,
            stats,
            sinks: sink_names,
        };
        AggregateProcessor::open(opening, outputs, dead_letter)
            .map(|processor| Box::new(processor) as Box<dyn Processor>)
    })
}

/// The kind's settings check (run when the server is built and by `mongoose
/// validate`): every key known and of its type, the feed and the sinks configured, a
/// `state_dir`, a `sink` when rules or windows give outputs, and every expression
/// parsed (an error names its key path and column).
fn check(check: &SettingsCheck<'_>) -> Result<(), SettingsError> {
    let settings: AggregateSettings = check.settings()?;
    check.feed("feed", &settings.feed)?;
    let on_kafka = check
        .config
        .feeds
        .iter()
        .any(|feed| feed.name == settings.feed && feed.plugin_kind() == Some("kafka"));
    if settings.state == StateMode::Changelog {
        changelog_kind::check(check, &settings)?;
    } else if on_kafka {
        return Err(SettingsError::at(
            "feed",
            format!(
                "the feed '{}' is a Kafka feed, whose partitions move between the members of its consumer group, and the aggregate keeps its state in a local state_dir by default: a state per member would split the aggregates. Give the aggregate state = \"changelog\" (its state per partition in a Kafka changelog topic, following the partitions), or run it on a file feed",
                settings.feed
            ),
        ));
    } else {
        check_state_dir(check, &settings)?;
    }
    check_outputs(check, settings)
}

/// The checks of `state = "local"`: a `state_dir` of the aggregate's own.
fn check_state_dir(
    check: &SettingsCheck<'_>,
    settings: &AggregateSettings,
) -> Result<(), SettingsError> {
    let Some(state_dir) = &settings.state_dir else {
        return Err(SettingsError::at(
            "state_dir",
            "the aggregate keeps its state (with the feed's position) in a folder: give state_dir = \"...\" (a folder of its own)",
        ));
    };
    // another processor keeping its state in the same folder would find its outbox
    // locked at start (or, stopped, read the other's records)
    let mine = check.resolve(state_dir);
    for group in &check.config.groups {
        for other in &group.processors {
            if (group.name.as_str(), other.name.as_str()) == (check.group, check.name) {
                continue;
            }
            let theirs = other
                .settings
                .get("state_dir")
                .and_then(toml::Value::as_str)
                .map(|dir| check.resolve(std::path::Path::new(dir)));
            if theirs.as_deref() == Some(mine.as_path()) {
                return Err(SettingsError::at(
                    "state_dir",
                    format!(
                        "{} is also the state_dir of the processor '{}/{}': two processors in one state folder would share one outbox; give each its own folder",
                        mine.display(),
                        group.name,
                        other.name
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The checks of the outputs and the expressions: a `sink` when rules or windows give
/// outputs, the sinks configured, every expression parsed.
fn check_outputs(
    check: &SettingsCheck<'_>,
    settings: AggregateSettings,
) -> Result<(), SettingsError> {
    match &settings.sink {
        Some(sink) => check.sink("sink", sink)?,
        None if !settings.rules.is_empty() || settings.window.is_some() => {
            return Err(SettingsError::at(
                "sink",
                "the rules' outputs and the windows' results go to a configured sink: give sink = \"NAME\" (one of [[sinks]])",
            ))
        }
        None => {}
    }
    if let Some(sink) = &settings.dead_letter {
        check.sink("dead_letter", sink)?;
    }
    Aggregator::compile(settings, "")
        .map(|_| ())
        .map_err(|error| match error {
            AggregateError::Config { at, message } => {
                SettingsError::at(at.trim_start_matches('.').to_owned(), message)
            }
            other => SettingsError::new(other.to_string()),
        })
}
