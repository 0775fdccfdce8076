//! [`Changelog`], the public handle: a store's calls go to its core, which the
//! transactions' committer shares (it replaces a partition's producer through it:
//! `heal.rs`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use mongoose_core::Epoch;

use super::{
    transactions, ChangelogConfig, ChangelogCore, OnDurable, RestoredPartition, StoredRecord,
};
use crate::error::KafkaConnectorError;

/// A per-partition state store in a compacted changelog topic (see the [module
/// docs](crate::changelog)): writes acknowledged before the input's commit, and a fenced restore
/// for the member that takes a partition over.
pub struct Changelog {
    /// Shared with the transactions' committer, which replaces a partition's producer
    /// through it (`heal.rs`).
    pub(super) core: Arc<ChangelogCore>,
}

impl Drop for Changelog {
    fn drop(&mut self) {
        if let Some(transactions) = &self.core.transactions {
            transactions.stop();
        }
    }
}

impl fmt::Debug for Changelog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Changelog")
            .field("name", &self.core.config.name)
            .field("topic", &self.core.config.topic)
            .finish_non_exhaustive()
    }
}

impl Changelog {
    /// Connects, and makes sure the changelog topic exists with at least as many
    /// partitions as `input_topic` (creating it compacted, with as many, if missing;
    /// growing it when the input has more: see `grow.rs`).
    /// `on_durable` is called on the producer's thread for each write (with
    /// transactions: on the committer's thread, when the write's transaction commits).
    ///
    /// # Errors
    /// The client configuration is refused, the broker does not answer, the input
    /// topic does not exist, the changelog topic has fewer partitions than the input and
    /// cannot be grown, or an outputs topic is given without transactions.
    pub fn open(
        config: ChangelogConfig,
        input_topic: &str,
        on_durable: OnDurable,
    ) -> Result<Self, KafkaConnectorError> {
        let core = Arc::new(ChangelogCore::open(config, input_topic, on_durable)?);
        if let Some(transactions) = &core.transactions {
            // the committer replaces a partition's producer the broker left
            // mid-transaction through the core (`heal.rs`)
            let replacer: std::sync::Weak<dyn transactions::ReplaceProducer> =
                Arc::downgrade(&core) as _;
            transactions.replace_through(replacer);
        }
        Ok(Changelog { core })
    }

    /// The changelog topic.
    pub fn topic(&self) -> &str {
        self.core.topic()
    }

    /// Sends one change of `partition`'s state: `key` now has `value` (empty: removed),
    /// after the input record whose position is `offset`, delivered in `epoch`. `tag`
    /// comes back through `on_durable` once the broker acknowledged it (or the producer
    /// gave it up). A full producer queue is waited out (the producer's thread drains
    /// it).
    ///
    /// # Errors
    /// The key starts with a zero byte (reserved), or the producer refused the record
    /// for good.
    pub fn write(
        &self,
        partition: i32,
        epoch: Epoch,
        offset: u64,
        key: &[u8],
        value: &[u8],
        tag: u64,
    ) -> Result<(), KafkaConnectorError> {
        self.core.write(partition, epoch, offset, key, value, tag)
    }

    /// Writes an output of `partition` (an alert) to the outputs topic, in the
    /// partition's transaction together with the partition's next change
    /// ([`Changelog::write`], which sends it first): it becomes visible exactly when that
    /// change does. An output of a partition whose producer was fenced or failed is
    /// dropped (the change written after it reports why it is not durable).
    ///
    /// # Errors
    /// No outputs topic or no transactions, the partition was not restored by this
    /// member, or the producer refused the record for good.
    pub fn write_output(
        &self,
        partition: i32,
        key: &[u8],
        payload: &[u8],
    ) -> Result<(), KafkaConnectorError> {
        self.core.write_output(partition, key, payload)
    }

    /// Waits until every write sent so far is acknowledged or given up.
    ///
    /// # Errors
    /// Some are still in flight after `timeout`.
    pub fn flush(&self, timeout: Duration) -> Result<(), KafkaConnectorError> {
        self.core.flush(timeout)
    }

    /// Takes `partition` over in `epoch`: writes the owner's marker, reads the
    /// partition from its start to the marker and folds it ([`fold`](super::fold)); `counted` sees
    /// each counted entry in order. Writes of this partition follow the call.
    ///
    /// # Errors
    /// The marker is not acknowledged, or the partition cannot be read to the marker
    /// within the restore timeout.
    pub fn restore(
        &self,
        partition: i32,
        epoch: Epoch,
        counted: impl FnMut(&StoredRecord),
    ) -> Result<RestoredPartition, KafkaConnectorError> {
        self.core.restore(partition, epoch, counted)
    }

    /// After this member's producer of `partition`, held in `epoch`, was fenced (its
    /// writes reported [`WriteFailure::Fenced`](super::WriteFailure::Fenced)): true when this member is still the
    /// partition's newest owner and wrote again what the fenced transaction held; false
    /// when a newer owner holds the partition (its lines of `epoch` are not this
    /// member's to apply).
    ///
    /// The fencer may be a stale owner: a member whose lines of an earlier assignment
    /// were still queued took the partition over for them between this member's check
    /// and its marker (`kafka_broker.rs`: 144 records of one partition skipped by the
    /// fenced owner, which still held it and committed them, and never applied). This
    /// member's new producer fences it in turn, a new marker of `epoch` makes this
    /// member's records count again (the fold follows the last marker), and the kept
    /// records are written again in a new transaction whose commit reports their tags.
    ///
    /// # Errors
    /// The broker could not be asked, or fenced the new producer at once: the kept
    /// transaction stays kept, for the next call.
    pub fn retake(&self, partition: i32, epoch: Epoch) -> Result<bool, KafkaConnectorError> {
        self.core.retake(partition, epoch)
    }

    /// Reads `partition` to its current end (a probe written now marks it) without
    /// taking it over: for tools and tests that inspect a changelog.
    ///
    /// # Errors
    /// As for [`Changelog::restore`].
    pub fn read(&self, partition: i32) -> Result<Vec<StoredRecord>, KafkaConnectorError> {
        self.core.read(partition)
    }
}
