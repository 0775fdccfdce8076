//! A changelog grows with its input: partitions added to the input topic are added to
//! the changelog before their state is written.
//!
//! The state of input partition `P` lives in changelog partition `P`, and every record
//! is written to its partition by number (never by a hash of its key), so adding
//! partitions to the changelog moves no state: the new ones start empty, which is the
//! state of a partition the input just gained. Growing is therefore safe, and is what
//! the changelog does (at open, when the input has more partitions than the changelog,
//! and at the takeover of a partition the changelog does not have yet). Before, the first
//! write to such a partition failed with UnknownPartition and quarantined the whole
//! ledger, and the next start refused it. A broker that refuses the growth (no ALTER
//! permission on the changelog topic) fails the takeover of that partition with the
//! reason and what to do.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::ChangelogCore;
use crate::error::KafkaConnectorError;

impl ChangelogCore {
    /// Grows the changelog topic to `partitions` (`existing` now), and waits until this
    /// store's clients see them.
    pub(super) fn grow(
        &self,
        existing: usize,
        partitions: usize,
        why: &str,
    ) -> Result<(), KafkaConnectorError> {
        let count = i32::try_from(partitions).unwrap_or(i32::MAX);
        let grown = crate::admin::add_partitions(
            &self.config.brokers,
            &self.config.properties,
            &self.config.topic,
            count,
            self.config.request_timeout,
        )
        .map_err(|error| KafkaConnectorError::Changelog {
            name: self.config.name.clone(),
            message: format!(
                "the changelog topic '{}' has {existing} partitions and {why}: growing it to {partitions} failed ({error}); allow this client to alter the topic, or add the partitions yourself (kafka-topics --alter --partitions {partitions})",
                self.config.topic
            ),
        })?;
        if grown {
            warn!(changelog = %self.config.topic, from = existing, to = partitions, why,
                "changelog topic grown with its input (the new partitions start with an empty state)");
        } else {
            info!(changelog = %self.config.topic, to = partitions, "changelog topic already grown (by another member)");
        }
        self.wait_seen(partitions)
    }

    /// Waits until this store's producer (and readers) see `partitions` partitions of the
    /// changelog: a write to a partition the producer's metadata does not hold fails at
    /// once with UnknownPartition.
    fn wait_seen(&self, partitions: usize) -> Result<(), KafkaConnectorError> {
        let deadline = Instant::now() + self.config.request_timeout;
        loop {
            // a metadata answer for the topic updates the client's own view of it
            let seen = self.partitions_of(&self.config.topic)?.unwrap_or(0);
            if seen >= partitions {
                break;
            }
            if Instant::now() > deadline {
                return Err(KafkaConnectorError::Changelog {
                    name: self.config.name.clone(),
                    message: format!(
                        "the changelog topic '{}' was grown to {partitions} partitions and shows {seen} after {:?}: check the broker, the takeover is tried again",
                        self.config.topic, self.config.request_timeout
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        for reader in [&self.reader, &self.peek_reader] {
            if let Some(reader) = reader.lock().as_ref() {
                use rdkafka::consumer::Consumer;
                let _ =
                    reader.fetch_metadata(Some(&self.config.topic), self.config.request_timeout);
            }
        }
        self.partitions.fetch_max(
            i32::try_from(partitions).unwrap_or(i32::MAX),
            Ordering::Relaxed,
        );
        Ok(())
    }

    /// Before `partition` is taken over: makes sure the changelog has it (one comparison
    /// while it does; a broker round trip and a growth when the input grew past it).
    pub(super) fn ensure_partition(&self, partition: i32) -> Result<(), KafkaConnectorError> {
        if partition < self.partitions.load(Ordering::Relaxed) {
            return Ok(());
        }
        let existing = self.partitions_of(&self.config.topic)?.unwrap_or(0);
        let wanted = usize::try_from(partition).unwrap_or(0) + 1;
        if existing >= wanted {
            self.partitions.fetch_max(
                i32::try_from(existing).unwrap_or(i32::MAX),
                Ordering::Relaxed,
            );
            return Ok(());
        }
        let input = self.partitions_of(&self.input_topic)?.unwrap_or(0);
        self.grow(
            existing,
            wanted.max(input),
            &format!(
                "input partition {partition} is taken over (the input '{}' has {input})",
                self.input_topic
            ),
        )
    }
}
