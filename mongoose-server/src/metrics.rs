//! The Prometheus metrics of `GET /metrics`: counters (`_total`) and gauges mirrored
//! from the status at each scrape ([`record_metrics`]), and the latency histograms
//! (`_seconds`) the run loop's [`crate::progress::Observer`] records from sampled
//! positions. Every family has its `# HELP` and `# TYPE` lines.
//!
//! | family | type | labels |
//! |---|---|---|
//! | `mongoose_feed_events_published_total` | counter | feed |
//! | `mongoose_feed_events_committed_total` | counter | feed |
//! | `mongoose_feed_events_dropped_total` | counter | feed |
//! | `mongoose_feed_events_refused_total` | counter | feed |
//! | `mongoose_feed_pauses_total` | counter | feed |
//! | `mongoose_feed_paused`, `_lossless`, `_settled`, `_stalled` | gauge (0/1) | feed |
//! | `mongoose_feed_pending_acks` | gauge | feed |
//! | `mongoose_feed_lag_bytes` | gauge | feed |
//! | `mongoose_feed_latency_seconds` | histogram | feed |
//! | `mongoose_queue_events_dispatched_total` | counter | queue |
//! | `mongoose_queue_depth` | gauge | queue |
//! | `mongoose_group_processors`, `_quarantined`, `_mailbox_depth` | gauge | group |
//! | `mongoose_sink_outputs_total` | counter | sink, outcome (published, expired, lost) |
//! | `mongoose_sink_attempts_failed_total` | counter | sink, outcome (not_published, uncertain) |
//! | `mongoose_sink_queued`, `_retrying`, `_held` | gauge | sink |
//! | `mongoose_sink_latency_seconds` | histogram | sink |

use std::sync::OnceLock;

use metrics::{describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing::error;

use crate::server::Server;

/// The buckets of every `_seconds` histogram, in seconds.
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The process's Prometheus recorder, installed (with the descriptions and the
/// histogram buckets) at the first call.
pub fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let builder = PrometheusBuilder::new();
        let builder = match builder
            .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &LATENCY_BUCKETS)
        {
            Ok(builder) => builder,
            Err(error) => {
                error!(%error, "cannot set the latency histograms' buckets: they show as summaries");
                PrometheusBuilder::new()
            }
        };
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            error!(
                "another metrics recorder is installed: /metrics shows only what this one records"
            );
        }
        describe();
        handle
    })
}

fn describe() {
    describe_counter!(
        "mongoose_feed_events_published_total",
        "Events the feed published (its last sequence)."
    );
    describe_counter!(
        "mongoose_feed_events_committed_total",
        "Events whose position the source committed (the highest committed sequence)."
    );
    describe_counter!(
        "mongoose_feed_events_dropped_total",
        "Queue copies the feed dropped (backlogs an operator released included)."
    );
    describe_counter!(
        "mongoose_feed_events_refused_total",
        "Publishes refused under BLOCK_WITH_DEADLINE."
    );
    describe_counter!("mongoose_feed_pauses_total", "Pause episodes of the feed.");
    describe_gauge!("mongoose_feed_paused", "1 while the feed is paused.");
    describe_gauge!(
        "mongoose_feed_lossless",
        "1 while the feed has lost nothing in this run."
    );
    describe_gauge!("mongoose_feed_settled", "1 while the feed is settled.");
    describe_gauge!(
        "mongoose_feed_stalled",
        "1 while the feed holds its position and cannot complete (see /status)."
    );
    describe_gauge!(
        "mongoose_feed_pending_acks",
        "Runs of positioned events awaiting acknowledgement."
    );
    describe_gauge!(
        "mongoose_feed_lag_bytes",
        "Bytes of the feed's input files not read yet (file feeds)."
    );
    describe_histogram!(
        "mongoose_feed_latency_seconds",
        "Time from publish to processed by every subscriber queue, sampled every 20 ms (resolution: the sampling interval)."
    );
    describe_counter!(
        "mongoose_queue_events_dispatched_total",
        "Events (and in-band statuses) the subscriber queue's reader finished."
    );
    describe_gauge!(
        "mongoose_queue_depth",
        "Events put in the subscriber queue and not finished yet."
    );
    describe_gauge!(
        "mongoose_group_processors",
        "Running processors of the group."
    );
    describe_gauge!(
        "mongoose_group_quarantined",
        "Quarantined processors of the group."
    );
    describe_gauge!(
        "mongoose_group_mailbox_depth",
        "Requests in the group's control mailbox."
    );
    describe_counter!(
        "mongoose_sink_outputs_total",
        "Outputs the sink finished, by outcome: published, expired (budget spent), lost (count_loss)."
    );
    describe_counter!(
        "mongoose_sink_attempts_failed_total",
        "Attempts that did not publish, by outcome: not_published (verifiably refused) or uncertain (retried with the same key)."
    );
    describe_gauge!(
        "mongoose_sink_queued",
        "Outputs not over yet: queued, being tried or waiting for a retry."
    );
    describe_gauge!("mongoose_sink_retrying", "Outputs waiting for a retry.");
    describe_gauge!(
        "mongoose_sink_held",
        "Outputs held by the hold policy (their feeds' commits are held)."
    );
    describe_histogram!(
        "mongoose_sink_latency_seconds",
        "Time from admitted by the sink to over (published, or given up), sampled every 20 ms (resolution: the sampling interval)."
    );
}

fn flag(value: bool) -> f64 {
    if value {
        1.0
    } else {
        0.0
    }
}

/// Mirrors the current status into the counters and gauges (per feed and queue, per
/// group, per sink).
pub fn record_metrics(server: &Server) {
    prometheus();
    let report = server.status();
    for feed in &report.feeds {
        let name = &feed.feed;
        let counter = |family: &'static str, value: u64| {
            metrics::counter!(family, "feed" => name.clone()).absolute(value);
        };
        counter("mongoose_feed_events_published_total", feed.sequence);
        counter("mongoose_feed_events_committed_total", feed.committed);
        counter("mongoose_feed_events_dropped_total", feed.dropped);
        counter("mongoose_feed_events_refused_total", feed.refused);
        counter("mongoose_feed_pauses_total", feed.pauses);
        let gauge = |family: &'static str, value: f64| {
            metrics::gauge!(family, "feed" => name.clone()).set(value);
        };
        gauge("mongoose_feed_paused", flag(feed.paused));
        gauge("mongoose_feed_lossless", flag(feed.lossless));
        gauge("mongoose_feed_settled", flag(feed.settled));
        gauge("mongoose_feed_stalled", flag(feed.stalled.is_some()));
        gauge("mongoose_feed_pending_acks", feed.pending_acks as f64);
        let lag: u64 = feed.files.iter().map(|file| file.lag).sum();
        gauge("mongoose_feed_lag_bytes", lag as f64);
        for queue in &feed.subscribers {
            let depth = queue.position.saturating_sub(queue.dispatched);
            metrics::gauge!("mongoose_queue_depth", "queue" => queue.queue.clone())
                .set(depth as f64);
            metrics::counter!("mongoose_queue_events_dispatched_total", "queue" => queue.queue.clone())
                .absolute(queue.dispatched);
        }
    }
    for group in server.group_statuses() {
        metrics::gauge!("mongoose_group_processors", "group" => group.group.clone())
            .set(group.running.len() as f64);
        metrics::gauge!("mongoose_group_quarantined", "group" => group.group.clone())
            .set(group.quarantined.len() as f64);
        metrics::gauge!("mongoose_group_mailbox_depth", "group" => group.group.clone())
            .set(group.mailbox_depth as f64);
    }
    for sink in server.sink_statuses() {
        for (outcome, count) in [
            ("published", sink.published),
            ("expired", sink.expired),
            ("lost", sink.lost),
        ] {
            metrics::counter!("mongoose_sink_outputs_total", "sink" => sink.name.clone(), "outcome" => outcome)
                .absolute(count);
        }
        for (outcome, count) in [
            ("not_published", sink.not_published),
            ("uncertain", sink.uncertain),
        ] {
            metrics::counter!("mongoose_sink_attempts_failed_total", "sink" => sink.name.clone(), "outcome" => outcome)
                .absolute(count);
        }
        metrics::gauge!("mongoose_sink_retrying", "sink" => sink.name.clone())
            .set(sink.retrying as f64);
        metrics::gauge!("mongoose_sink_queued", "sink" => sink.name.clone())
            .set(sink.queued as f64);
        metrics::gauge!("mongoose_sink_held", "sink" => sink.name.clone())
            .set(sink.held_count as f64);
    }
}
