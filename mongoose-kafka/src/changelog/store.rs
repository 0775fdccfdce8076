//! The ledger's (any partitioned processor's) view of a [`Changelog`]: the state store
//! trait of `mongoose-core`.

use std::time::Duration;

use mongoose_core::state_store::{PartitionStateStore, RestoredPartition, StoredRecord};
use mongoose_core::{CoreError, Epoch};

use super::Changelog;
use crate::error::KafkaConnectorError;

/// The ledger's (any partitioned processor's) view of a changelog: the state store
/// trait of `mongoose-core`, so the processor builds without librdkafka.
impl PartitionStateStore for Changelog {
    fn location(&self) -> &str {
        self.topic()
    }

    fn write(
        &self,
        partition: i32,
        epoch: Epoch,
        offset: u64,
        key: &[u8],
        value: &[u8],
        tag: u64,
    ) -> Result<(), CoreError> {
        Changelog::write(self, partition, epoch, offset, key, value, tag)
            .map_err(|error| self.store_error(error))
    }

    fn restore(
        &self,
        partition: i32,
        epoch: Epoch,
        counted: &mut dyn FnMut(&StoredRecord),
    ) -> Result<RestoredPartition, CoreError> {
        Changelog::restore(self, partition, epoch, counted).map_err(|error| self.store_error(error))
    }

    fn retake(&self, partition: i32, epoch: Epoch) -> Result<bool, CoreError> {
        Changelog::retake(self, partition, epoch).map_err(|error| self.store_error(error))
    }

    fn flush(&self, timeout: Duration) -> Result<(), CoreError> {
        Changelog::flush(self, timeout).map_err(|error| self.store_error(error))
    }

    fn outputs_location(&self) -> Option<&str> {
        self.core.config.outputs_topic.as_deref()
    }

    fn write_output(&self, partition: i32, key: &[u8], payload: &[u8]) -> Result<(), CoreError> {
        Changelog::write_output(self, partition, key, payload)
            .map_err(|error| self.store_error(error))
    }
}

impl Changelog {
    fn store_error(&self, error: KafkaConnectorError) -> CoreError {
        match error {
            KafkaConnectorError::TakenOver { failure, .. } => CoreError::TakenOver(failure),
            error => CoreError::StateStore {
                store: self.core.config.topic.clone(),
                error: Box::new(error),
            },
        }
    }
}
