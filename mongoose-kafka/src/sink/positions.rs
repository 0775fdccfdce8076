//! What a transactional sink committed, per input lane, kept in a compacted topic and
//! written in the same transaction as the outputs (the sink-side analogue of Kafka
//! Connect's exactly-once sources, KIP-618): read back when the sink starts, it tells
//! which outputs a restarted server sends again were committed already (the feed's
//! pointer lagged the transaction when the server was killed), and those are answered
//! published without being written twice.
//!
//! Per lane (`feed/lane/writer`) the state is the input epoch, the highest
//! `(position, index)` committed in it, and the outputs below that whose last attempt
//! failed (a retried output can land after later ones, so "at or below the highest" is
//! not enough). An output of another epoch (the input was replaced, or read again under
//! a new epoch) is never taken for a committed one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::sink::OutputKey;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::error::KafkaConnectorError;

/// The layout version of a lane's state record.
const FORMAT: u8 = 1;

/// The most failed outputs a lane's state keeps (outputs given up for good, under the
/// `count_loss` policy, stay failed: the oldest are forgotten past this).
const MAX_FAILED: usize = 10_000;

/// An input lane of one writer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct LaneKey {
    feed: Arc<str>,
    lane: u32,
    writer: u64,
}

impl LaneKey {
    fn of(key: &OutputKey) -> Self {
        LaneKey {
            feed: Arc::clone(&key.feed),
            lane: key.lane,
            writer: key.writer,
        }
    }

    /// The record key: `feed/lane/writer` (the writer in hex).
    pub(super) fn record_key(&self) -> String {
        format!("{}/{}/{:016x}", self.feed, self.lane, self.writer)
    }

    fn parse(text: &str) -> Option<Self> {
        let mut parts = text.rsplitn(3, '/');
        let writer = u64::from_str_radix(parts.next()?, 16).ok()?;
        let lane = parts.next()?.parse().ok()?;
        let feed = parts.next()?;
        Some(LaneKey {
            feed: Arc::from(feed),
            lane,
            writer,
        })
    }
}

/// What a lane has committed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct LaneState {
    format: u8,
    /// The input epoch of the outputs below.
    epoch: u64,
    /// The highest `(position, index)` committed in `epoch`.
    through: (u64, u32),
    /// Outputs at or below `through` whose last attempt failed (sorted).
    failed: Vec<(u64, u32)>,
}

impl LaneState {
    fn new(epoch: u64) -> Self {
        LaneState {
            format: FORMAT,
            epoch,
            through: (0, 0),
            failed: Vec::new(),
        }
    }

    /// The record value (postcard).
    pub(super) fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).unwrap_or_default()
    }

    fn holds(&self, key: &OutputKey) -> bool {
        let at = (key.position, key.index);
        self.epoch == key.epoch.0 && at <= self.through && self.failed.binary_search(&at).is_err()
    }
}

/// The positions of a sink: as committed when it started, and as of now.
#[derive(Debug)]
pub(super) struct Positions {
    topic: String,
    loaded: HashMap<LaneKey, LaneState>,
    current: HashMap<LaneKey, LaneState>,
}

impl Positions {
    /// Reads `topic` (created compacted if missing) to its end as a `read_committed`
    /// reader sees it.
    pub(super) fn load(
        name: &str,
        brokers: &str,
        topic: &str,
        properties: &[(String, String)],
        timeout: Duration,
    ) -> Result<Self, KafkaConnectorError> {
        let created = crate::admin::create_topic_with(
            brokers,
            properties,
            topic,
            1,
            &[("cleanup.policy", "compact")],
            timeout,
        )?;
        if created {
            info!(sink = %name, positions = %topic, "positions topic created (compacted)");
        }
        let mut client = ClientConfig::new();
        client
            .set("bootstrap.servers", brokers)
            .set(
                "metadata.recovery.rebootstrap.trigger.ms",
                crate::REBOOTSTRAP_AFTER_MS,
            )
            .set("group.id", format!("{name}-positions"))
            .set("client.id", format!("{name}-positions"))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            .set("isolation.level", "read_committed")
            .set("auto.offset.reset", "earliest")
            .set_log_level(RDKafkaLogLevel::Warning);
        for (key, value) in properties {
            client.set(key, value);
        }
        let broker_error = |action: &str, error: KafkaError| {
            KafkaConnectorError::broker(name, action, brokers, error)
        };
        let consumer: BaseConsumer =
            client
                .create()
                .map_err(|error| KafkaConnectorError::Config {
                    name: name.to_owned(),
                    error: Box::new(error),
                })?;
        let metadata = consumer
            .fetch_metadata(Some(topic), timeout)
            .map_err(|error| broker_error("reading the positions topic's metadata", error))?;
        let partitions: Vec<i32> = metadata
            .topics()
            .iter()
            .filter(|found| found.name() == topic)
            .flat_map(|found| found.partitions().iter().map(|partition| partition.id()))
            .collect();
        let mut assignment = TopicPartitionList::new();
        for partition in &partitions {
            assignment
                .add_partition_offset(topic, *partition, Offset::Beginning)
                .map_err(|error| broker_error("assigning the positions topic", error))?;
        }
        consumer
            .assign(&assignment)
            .map_err(|error| broker_error("assigning the positions topic", error))?;
        let mut loaded = HashMap::new();
        let mut ended = Vec::new();
        let deadline = Instant::now() + timeout.max(Duration::from_secs(30));
        while ended.len() < partitions.len() {
            if Instant::now() > deadline {
                return Err(KafkaConnectorError::Changelog {
                    name: name.to_owned(),
                    message: format!(
                        "the positions topic '{topic}' was not read to its end within {:?}: check the broker (a transaction of another writer left open blocks a read_committed reader until it ends)",
                        timeout.max(Duration::from_secs(30))
                    ),
                });
            }
            match consumer.poll(Duration::from_millis(100)) {
                None => {}
                Some(Err(KafkaError::PartitionEOF(partition))) if !ended.contains(&partition) => {
                    ended.push(partition);
                }
                Some(Err(KafkaError::PartitionEOF(_))) => {}
                Some(Err(error)) => {
                    warn!(sink = %name, positions = %topic, %error, "reading the positions topic (retried)");
                }
                Some(Ok(message)) => {
                    let key = message
                        .key()
                        .and_then(|key| std::str::from_utf8(key).ok())
                        .and_then(LaneKey::parse);
                    let state = message
                        .payload()
                        .and_then(|value| postcard::from_bytes::<LaneState>(value).ok())
                        .filter(|state| state.format == FORMAT);
                    match (key, state) {
                        (Some(key), Some(state)) => {
                            loaded.insert(key, state);
                        }
                        _ => warn!(sink = %name, positions = %topic, offset = message.offset(),
                            "a record of the positions topic this version does not read: skipped"),
                    }
                }
            }
        }
        info!(sink = %name, positions = %topic, lanes = loaded.len(), "the sink's committed positions read");
        Ok(Positions {
            topic: topic.to_owned(),
            current: loaded.clone(),
            loaded,
        })
    }

    /// The positions topic.
    pub(super) fn topic(&self) -> &str {
        &self.topic
    }

    /// True when the output was committed by this sink before it started (it is sent
    /// again by a server whose feed had not committed its input yet).
    pub(super) fn committed_before(&self, key: &OutputKey) -> bool {
        self.loaded
            .get(&LaneKey::of(key))
            .is_some_and(|state| state.holds(key))
    }

    /// What `lane` had committed when this copy was read.
    pub(super) fn committed_state(&self, lane: &LaneKey) -> Option<&LaneState> {
        self.loaded.get(lane)
    }

    /// The states of the lanes of `sent` once a transaction holding them commits.
    pub(super) fn after<'a>(
        &self,
        sent: impl IntoIterator<Item = &'a OutputKey>,
    ) -> Vec<(LaneKey, LaneState)> {
        let mut states: HashMap<LaneKey, LaneState> = HashMap::new();
        for key in sent {
            let lane = LaneKey::of(key);
            let state = states.entry(lane.clone()).or_insert_with(|| {
                self.current
                    .get(&lane)
                    .cloned()
                    .unwrap_or_else(|| LaneState::new(key.epoch.0))
            });
            if state.epoch != key.epoch.0 {
                *state = LaneState::new(key.epoch.0);
            }
            let at = (key.position, key.index);
            state.through = state.through.max(at);
            if let Ok(found) = state.failed.binary_search(&at) {
                state.failed.remove(found);
            }
        }
        states.into_iter().collect()
    }

    /// The transaction holding `states` committed.
    pub(super) fn committed(&mut self, states: Vec<(LaneKey, LaneState)>) {
        self.current.extend(states);
    }

    /// These outputs failed (they will be tried again, possibly after later ones).
    pub(super) fn failed<'a>(&mut self, keys: impl IntoIterator<Item = &'a OutputKey>) {
        for key in keys {
            let state = self
                .current
                .entry(LaneKey::of(key))
                .or_insert_with(|| LaneState::new(key.epoch.0));
            if state.epoch != key.epoch.0 {
                continue; // an older epoch's output: nothing of the current one
            }
            let at = (key.position, key.index);
            if let Err(slot) = state.failed.binary_search(&at) {
                state.failed.insert(slot, at);
                if state.failed.len() > MAX_FAILED {
                    state.failed.remove(0);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongoose_core::Epoch;

    fn key(epoch: u64, position: u64) -> OutputKey {
        OutputKey {
            feed: Arc::from("lines/a"),
            epoch: Epoch(epoch),
            lane: 2,
            position,
            index: 0,
            writer: 7,
        }
    }

    fn positions() -> Positions {
        Positions {
            topic: "p".to_owned(),
            loaded: HashMap::new(),
            current: HashMap::new(),
        }
    }

    #[test]
    fn a_retried_output_below_later_committed_ones_is_not_taken_for_committed() {
        let mut positions = positions();
        // 10 fails, 20 and 30 commit after it
        positions.failed([&key(1, 10)]);
        let states = positions.after([&key(1, 20), &key(1, 30)]);
        positions.committed(states.clone());
        // what a restart reads back
        positions.loaded = states.into_iter().collect();
        assert!(
            !positions.committed_before(&key(1, 10)),
            "failed: sent again"
        );
        assert!(positions.committed_before(&key(1, 20)));
        assert!(positions.committed_before(&key(1, 30)));
        assert!(!positions.committed_before(&key(1, 31)), "never sent");
        assert!(
            !positions.committed_before(&key(2, 20)),
            "another epoch is never a committed one"
        );
        // 10 commits at last: no longer failed
        let states = positions.after([&key(1, 10)]);
        positions.loaded = states.into_iter().collect();
        assert!(positions.committed_before(&key(1, 10)));
    }

    #[test]
    fn a_lane_key_reads_back_with_slashes_in_the_feed() {
        let lane = LaneKey::of(&key(1, 1));
        assert_eq!(LaneKey::parse(&lane.record_key()), Some(lane));
    }
}
