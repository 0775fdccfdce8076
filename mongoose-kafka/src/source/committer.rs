//! The Kafka source's committer.

use std::fmt;
use std::sync::Arc;

use mongoose_core::{CoreError, Epoch, PositionValue, SourceCommitter};

use crate::error::KafkaConnectorError;

use super::Shared;

/// Commits acknowledged positions of a [`KafkaSource`](crate::KafkaSource): `max(offset + 1)` per
/// partition, with the partition's epoch tag as the offset's metadata, synchronously
/// on the source's thread. Acknowledgements of another epoch than the partition's
/// current one (an earlier ownership), of a partition no longer assigned, or at or
/// below what is already acknowledged (records read again after a rebalance) are
/// ignored.
pub struct KafkaCommitter {
    pub(super) shared: Arc<Shared>,
}

impl fmt::Debug for KafkaCommitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaCommitter")
            .field("feed", &self.shared.name)
            .finish_non_exhaustive()
    }
}

impl SourceCommitter<PositionValue> for KafkaCommitter {
    fn acknowledged(&mut self, _sequence: u64, epoch: Epoch, position: PositionValue) {
        let Ok(partition) = i32::try_from(position.lane) else {
            return;
        };
        let Ok(offset) = i64::try_from(position.offset) else {
            return;
        };
        let mut partitions = self.shared.partitions.lock();
        let Some(assigned) = partitions.assigned.get_mut(&partition) else {
            return; // revoked: the new owner reads it again
        };
        if assigned.epoch != Some(epoch) {
            return; // an earlier ownership's record: never committed into this one
        }
        if assigned.high.is_some_and(|high| offset <= high) {
            return; // read again after a rebalance: already acknowledged
        }
        assigned.high = Some(offset);
        assigned.pending = Some(offset);
    }

    fn commit(&mut self) -> Result<(), CoreError> {
        let consumer = self.shared.consumer.lock().upgrade();
        let Some(consumer) = consumer else {
            let pending = self
                .shared
                .partitions
                .lock()
                .assigned
                .values()
                .any(|assigned| assigned.pending.is_some());
            if pending {
                return Err(KafkaConnectorError::Closed {
                    name: self.shared.name.clone(),
                    what: "an acknowledged position".to_owned(),
                }
                .into());
            }
            return Ok(());
        };
        self.shared.commit_pending(&consumer)
    }
}
