//! The partition state the source, its committer and its rebalance callback share.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use mongoose_core::{CoreError, Epoch};
use parking_lot::Mutex;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{debug, warn};

use crate::epoch::{tag, EpochFile, EpochSlot};
use crate::error::KafkaConnectorError;

use super::gaps::LogStarts;
use super::health::ClientHealth;
use super::incarnation::IdNotice;
use super::{SourceContext, SourceCounters};

/// One assigned partition.
#[derive(Debug)]
pub(super) struct Assigned {
    /// Which assignment this is (records read under an earlier one are stale).
    pub(super) assignment: u64,
    /// Its epoch, decided when its first record is read.
    pub(super) epoch: Option<Epoch>,
    /// The highest offset acknowledged in this epoch (pending or committed).
    pub(super) high: Option<i64>,
    /// Acknowledged, not yet committed.
    pub(super) pending: Option<i64>,
    /// The group's committed offset as last known (read at the first record, then each
    /// commit of this member).
    pub(super) committed_at: Option<i64>,
    /// The offset of the first record read in this assignment ([`super::gaps`]).
    pub(super) first_read: Option<i64>,
    /// The offset expected next: the last record read + 1 ([`super::gaps`]).
    pub(super) next: Option<i64>,
    /// With nothing committed of it: 0 when the group has committed another partition
    /// of the topic ([`super::gaps::expected_from_start`]), else `None`.
    pub(super) expected_from_start: Option<i64>,
    /// True when the consumer reached the partition's end (librdkafka's partition EOF)
    /// and read nothing since: read to the high watermark it knows.
    pub(super) at_end: bool,
}

impl Assigned {
    /// A partition just assigned (`assignment`): nothing read, nothing decided.
    pub(super) fn new(assignment: u64) -> Self {
        Assigned {
            assignment,
            epoch: None,
            high: None,
            pending: None,
            committed_at: None,
            first_read: None,
            next: None,
            expected_from_start: None,
            at_end: false,
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Partitions {
    pub(super) assigned: BTreeMap<i32, Assigned>,
    /// Per partition: the epoch and offset this member last committed (kept across
    /// assignments so that a partition that comes back in the same epoch never commits
    /// backwards).
    pub(super) committed: BTreeMap<i32, (Epoch, i64)>,
    /// Per partition: the greatest epoch used in this run.
    pub(super) seen: BTreeMap<i32, Epoch>,
    pub(super) next_assignment: u64,
    pub(super) paused: bool,
    /// True once the group gave this member its assignment (possibly empty), false
    /// again from a revocation until the next one: no caught-up before.
    pub(super) joined: bool,
    /// Partitions of a topic made again, read from their start at their next assignment
    /// (the new consumer's: [`super::incarnation`]), whatever the group committed.
    pub(super) from_start: std::collections::BTreeSet<i32>,
}

impl Partitions {
    /// Read to the end: the member has its assignment and every partition of it reached
    /// its high watermark with nothing read since.
    pub(super) fn read_to_the_end(&self) -> bool {
        self.joined && self.assigned.values().all(|assigned| assigned.at_end)
    }
}

/// What the source, its committer and its rebalance callback share.
pub(super) struct Shared {
    pub(super) name: String,
    pub(super) topic: String,
    pub(super) brokers: String,
    pub(super) epochs: Option<EpochFile>,
    pub(super) request_timeout: Duration,
    /// `start_from = "latest"` ([`super::added`]).
    pub(super) start_from_latest: bool,
    pub(super) partitions: Mutex<Partitions>,
    pub(super) counters: Arc<SourceCounters>,
    /// A condition that keeps the client from reading ([`super::health`]).
    pub(super) health: ClientHealth,
    /// The topic's log starts, to tell a loss from a skip ([`super::gaps`]).
    pub(super) log_starts: LogStarts,
    /// librdkafka's notice that the topic's id changed ([`super::incarnation`]).
    pub(super) id_notice: IdNotice,
    /// The operator asked for librdkafka's debug lines ([`super::config::DEBUG_ENV`]):
    /// they are logged at INFO.
    pub(super) operator_debug: bool,
    /// The consumer now (the committer commits through it; a new incarnation of the
    /// topic replaces it).
    pub(super) consumer: Mutex<std::sync::Weak<BaseConsumer<SourceContext>>>,
    /// librdkafka knows no broker ([`crate::forgotten`]).
    pub(super) forgotten: crate::forgotten::ForgottenBrokers,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("name", &self.name)
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// The error of `what` the epoch file `epochs` failed at (`"writing"`, `"clearing"`,
    /// `"recording the topic id beside"`).
    pub(super) fn epoch_file_error(
        &self,
        epochs: &EpochFile,
        what: &str,
        error: std::io::Error,
    ) -> CoreError {
        CoreError::io(
            format!(
                "kafka '{}': {what} the epoch file {} (check its directory and disk)",
                self.name,
                epochs.path().display()
            ),
            error,
        )
    }

    pub(super) fn broker_error(&self, action: &str, error: KafkaError) -> KafkaConnectorError {
        KafkaConnectorError::broker(&self.name, action, &self.brokers, error)
    }

    /// Commits every pending position synchronously. On an error they stay pending.
    pub(super) fn commit_pending(
        &self,
        consumer: &BaseConsumer<SourceContext>,
    ) -> Result<(), CoreError> {
        let pending: Vec<(i32, Epoch, i64, Option<i64>)> = {
            let partitions = self.partitions.lock();
            partitions
                .assigned
                .iter()
                .filter_map(|(partition, assigned)| {
                    Some((
                        *partition,
                        assigned.epoch?,
                        assigned.pending?,
                        assigned.committed_at,
                    ))
                })
                .collect()
        };
        if pending.is_empty() {
            return Ok(());
        }
        let mut list = TopicPartitionList::with_capacity(pending.len());
        for (partition, epoch, offset, previous) in &pending {
            // the slot first: a crash before the commit leaves the broker at `previous`,
            // which the slot still matches
            if let Some(epochs) = &self.epochs {
                let slot = EpochSlot {
                    epoch: *epoch,
                    previous: previous.unwrap_or(-1),
                    offset: *offset,
                };
                if let Err(error) = epochs.write(*partition, slot) {
                    warn!(feed = %self.name, partition, %error, file = %epochs.path().display(),
                        "could not write the epoch file: after a restart this partition gets a new epoch (the guard re-applies what the state held past the committed offset)");
                }
            }
            let mut element = list.add_partition(&self.topic, *partition);
            element
                .set_offset(Offset::Offset(*offset))
                .map_err(|error| self.broker_error("building a commit", error))?;
            element.set_metadata(tag(*epoch));
        }
        if let Err(error) = consumer.commit(&list, CommitMode::Sync) {
            self.counters
                .commit_failures
                .fetch_add(1, Ordering::Relaxed);
            return Err(self.broker_error("committing offsets", error).into());
        }
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        let mut partitions = self.partitions.lock();
        for (partition, epoch, offset, _) in pending {
            if let Some(assigned) = partitions.assigned.get_mut(&partition) {
                if assigned.pending == Some(offset) {
                    assigned.pending = None;
                }
                assigned.committed_at = Some(offset);
            }
            partitions.committed.insert(partition, (epoch, offset));
        }
        debug!(feed = %self.name, "committed processed offsets");
        Ok(())
    }
}
