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
