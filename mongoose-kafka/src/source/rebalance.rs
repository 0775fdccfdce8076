//! The consumer's context: the rebalance callbacks.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use mongoose_core::{PositionValue, SourceOutput};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::ClientContext;
use tracing::{debug, error, info, warn};

use super::{Assigned, KafkaRecord, Shared};

/// The consumer's context: the rebalance callbacks (run inside `poll`, on the source's
/// thread).
pub(crate) struct SourceContext {
    pub(super) shared: Arc<Shared>,
    /// The feed, to commit what was processed before partitions are given up.
    pub(super) output: Arc<dyn SourceOutput<KafkaRecord, PositionValue>>,
}

impl ClientContext for SourceContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        let name = &self.shared.name;
        if self.shared.id_notice.hear(facility, message) {
            debug!(feed = %name, facility, "librdkafka: {message}");
            return;
        }
        // a reset is heard and logged as librdkafka said it (a WARN)
        self.shared.log_starts.hear_reset(facility, message);
        self.shared.forgotten.hear(facility, message);
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => error!(feed = %name, facility, "librdkafka: {message}"),
            RDKafkaLogLevel::Warning => warn!(feed = %name, facility, "librdkafka: {message}"),
            // the operator asked for librdkafka's debug lines (MONGOOSE_KAFKA_DEBUG)
            _ if self.shared.operator_debug => {
                info!(feed = %name, facility, "librdkafka: {message}")
            }
            _ => debug!(feed = %name, facility, "librdkafka: {message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF) {
            // the end of a partition (an event the source asks for), not a failure
            debug!(feed = %self.shared.name, reason, "kafka partition end");
            return;
        }
        warn!(feed = %self.shared.name, %error, reason, "kafka client error (librdkafka retries)");
        // book: connectors/kafka.md, a client that cannot connect or authenticate
        self.shared.health.record(&self.shared.name, &error, reason);
    }
}

impl ConsumerContext for SourceContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(assigned) = rebalance {
            super::added::read_recreated_partitions_from_their_start(&self.shared, assigned);
            super::added::read_added_partitions_from_their_start(&self.shared, consumer, assigned);
        }
        let Rebalance::Revoke(revoked) = rebalance else {
            return;
        };
        let shared = &self.shared;
        // book: connectors/kafka.md: before the partitions go, commit
        // what was processed, synchronously
        self.output.commit_processed();
        if let Err(error) = shared.commit_pending(consumer) {
            warn!(feed = %shared.name, %error,
                "could not commit what was processed before giving partitions up: the new owner reads those records again (at-least-once)");
        }
        let mut partitions = shared.partitions.lock();
        // until the next assignment, the member has not read "everything it has"
        partitions.joined = false;
        for element in revoked.elements_for_topic(&shared.topic) {
            if let Some(assigned) = partitions.assigned.remove(&element.partition()) {
                shared.counters.revoked.fetch_add(1, Ordering::Relaxed);
                if let Some(pending) = assigned.pending {
                    warn!(feed = %shared.name, partition = element.partition(), pending,
                        "dropping an uncommitted position of a revoked partition: its records are read again by the new owner");
                }
            }
        }
        info!(feed = %shared.name, revoked = revoked.count(), "partitions revoked");
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let shared = &self.shared;
        match rebalance {
            Rebalance::Assign(assigned) => {
                let mut partitions = shared.partitions.lock();
                for element in assigned.elements_for_topic(&shared.topic) {
                    partitions.next_assignment += 1;
                    let assignment = partitions.next_assignment;
                    partitions
                        .assigned
                        .insert(element.partition(), Assigned::new(assignment));
                    shared.counters.assigned.fetch_add(1, Ordering::Relaxed);
                }
                partitions.joined = true;
                let paused = partitions.paused;
                drop(partitions);
                // librdkafka keeps an application's pause on a partition across its
                // revocation: a partition paused, revoked and assigned again would stay
                // paused, never read, if it were not set here either way
                if paused {
                    // the feed is still full: the new partitions wait too
                    if let Err(error) = consumer.pause(assigned) {
                        warn!(feed = %shared.name, %error, "could not pause newly assigned partitions");
                    }
                } else if let Err(error) = consumer.resume(assigned) {
                    warn!(feed = %shared.name, %error, "could not resume newly assigned partitions");
                }
                info!(feed = %shared.name, assigned = assigned.count(), "partitions assigned");
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(error) => {
                error!(feed = %shared.name, %error, "rebalance error");
            }
        }
    }
}
