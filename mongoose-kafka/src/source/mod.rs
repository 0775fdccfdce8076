//! [`KafkaSource`]: a consumer-group member that publishes records into a feed and
//! commits their offsets only after every consumer processed them.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mongoose_core::{
    AnyCommitter, BatchEnd, CoreError, Epoch, EventSource, PositionValue, Refusal, SourceOutput,
    SourceStart, SourceState, WorkDone,
};
use parking_lot::Mutex;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{debug, info, warn};

use crate::epoch::{decide, EpochDecision, EpochFile, EpochSlot};
use crate::error::KafkaConnectorError;

mod added;
mod committer;
pub(crate) mod config;
mod gaps;
mod health;
mod incarnation;
mod partitions;
mod rebalance;
#[cfg(test)]
mod tests;

pub use committer::KafkaCommitter;
pub use config::{KafkaSourceConfig, KafkaSourceStats, SourceCounters, DEBUG_ENV};
use gaps::{Gap, LogStarts};
use health::ClientHealth;
use partitions::{Assigned, Partitions, Shared};
pub(crate) use rebalance::SourceContext;

/// One Kafka record as a feed item: its key and payload (shared, not copied again on
/// fan-out), with its partition and offset for logs (the delivery's position says the
/// same: lane = partition, offset = record offset + 1).
#[derive(Clone, PartialEq, Eq)]
pub struct KafkaRecord {
    /// The record's key, if it has one.
    pub key: Option<Bytes>,
    /// The record's value (empty for a tombstone).
    pub payload: Bytes,
    /// The partition it was read from.
    pub partition: i32,
    /// Its offset in the partition.
    pub offset: i64,
    /// Its timestamp in milliseconds since the Unix epoch, when it has one.
    pub timestamp: Option<i64>,
}

/// A record's bytes are its value (what crosses the plugin boundary).
impl AsRef<[u8]> for KafkaRecord {
    fn as_ref(&self) -> &[u8] {
        &self.payload
    }
}

impl fmt::Debug for KafkaRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaRecord")
            .field("partition", &self.partition)
            .field("offset", &self.offset)
            .field("key_len", &self.key.as_ref().map(Bytes::len))
            .field("payload_len", &self.payload.len())
            .finish()
    }
}

/// A record read and not yet published (the unpublished tail of a batch).
#[derive(Debug)]
struct Held {
    record: KafkaRecord,
    assignment: u64,
}

/// A consumer-group member publishing one topic's records into a feed. See the crate
/// documentation for positions, commits, PAUSE, revocation and epochs.
pub struct KafkaSource {
    config: KafkaSourceConfig,
    output: Arc<dyn SourceOutput<KafkaRecord, PositionValue>>,
    shared: Arc<Shared>,
    consumer: Option<Arc<BaseConsumer<SourceContext>>>,
    /// Records read and not yet published, in order.
    tail: VecDeque<Held>,
    /// The epoch last given to the output.
    output_epoch: Option<Epoch>,
    state: SourceState,
    /// The detail last reported with `state`.
    detail: Option<String>,
    /// The input topic's identity as last seen (a re-created topic: [`incarnation`]).
    incarnation: incarnation::Incarnation,
    /// The topic was made again: a new consumer replaces this one at the next cycle.
    reconnect: bool,
}

impl fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSource")
            .field("feed", &self.config.name)
            .field("topic", &self.config.topic)
            .field("tail", &self.tail.len())
            .finish_non_exhaustive()
    }
}

impl KafkaSource {
    /// A source for `config` publishing into `output`; it connects in `start`.
    ///
    /// Fails when the configured epoch file cannot be opened or is not one.
    pub fn new(
        config: KafkaSourceConfig,
        output: Arc<dyn SourceOutput<KafkaRecord, PositionValue>>,
    ) -> Result<Self, CoreError> {
        let epochs = match &config.epoch_file {
            None => None,
            Some(path) => Some(EpochFile::open(path).map_err(|error| {
                CoreError::io(
                    format!(
                        "kafka '{}': opening the epoch file {}",
                        config.name,
                        path.display()
                    ),
                    error,
                )
            })?),
        };
        let shared = Arc::new(Shared {
            name: config.name.clone(),
            topic: config.topic.clone(),
            brokers: config.brokers.clone(),
            epochs,
            request_timeout: config.request_timeout,
            start_from_latest: config.start_from == "latest",
            partitions: Mutex::new(Partitions::default()),
            counters: Arc::new(SourceCounters::default()),
            health: ClientHealth::default(),
            log_starts: LogStarts::new(&config.topic, &config.start_from),
            id_notice: incarnation::IdNotice::new(&config.topic),
            operator_debug: config::operator_debug().is_some(),
            consumer: Mutex::new(std::sync::Weak::new()),
            forgotten: crate::forgotten::ForgottenBrokers::default(),
        });
        let incarnation = incarnation::Incarnation::new(config.metadata_refresh);
        Ok(KafkaSource {
            config,
            output,
            shared,
            consumer: None,
            tail: VecDeque::new(),
            output_epoch: None,
            state: SourceState::Starting,
            detail: None,
            incarnation,
            reconnect: false,
        })
    }

    /// Counters that can be read from any thread while the source runs.
    pub fn counters(&self) -> Arc<SourceCounters> {
        Arc::clone(&self.shared.counters)
    }

    /// What the source holds per partition now.
    pub fn stats(&self) -> KafkaSourceStats {
        let partitions = self.shared.partitions.lock();
        KafkaSourceStats {
            epochs: partitions
                .assigned
                .iter()
                .map(|(partition, assigned)| (*partition, assigned.epoch))
                .collect(),
            committed: partitions
                .committed
                .iter()
                .map(|(partition, (_, offset))| (*partition, *offset))
                .collect(),
            pending: partitions
                .assigned
                .iter()
                .filter_map(|(partition, assigned)| Some((*partition, assigned.pending?)))
                .collect(),
            paused: partitions.paused,
        }
    }

    /// Records read and not yet published (the tail a full feed paused).
    pub fn unpublished(&self) -> usize {
        self.tail.len()
    }

    fn consumer(&self) -> Result<Arc<BaseConsumer<SourceContext>>, CoreError> {
        self.consumer.clone().ok_or_else(|| {
            KafkaConnectorError::Closed {
                name: self.config.name.clone(),
                what: "nothing".to_owned(),
            }
            .into()
        })
    }

    /// Reads up to a batch of records into the tail. Returns how many.
    fn read(&mut self, consumer: &BaseConsumer<SourceContext>) -> Result<usize, CoreError> {
        let mut read = 0;
        let mut timeout = self.config.poll_timeout;
        while read < self.config.batch {
            let polled = consumer.poll(timeout);
            // a reset librdkafka logged in this poll, before any record after it
            self.check_resets(consumer);
            let Some(polled) = polled else {
                break;
            };
            timeout = Duration::ZERO;
            let message = match polled {
                Ok(message) => message,
                Err(KafkaError::PartitionEOF(partition)) => {
                    // read to the high watermark: a fetch was answered
                    self.shared.health.clear(&self.config.name);
                    let reached = {
                        let mut partitions = self.shared.partitions.lock();
                        partitions
                            .assigned
                            .get_mut(&partition)
                            .map(|assigned| (assigned.assignment, gaps::reached_end(assigned)))
                    };
                    if let Some(reached) = reached {
                        self.check_end(consumer, partition, reached);
                    }
                    continue;
                }
                Err(error) => {
                    // a consumer error (a broker down, a topic deleted): librdkafka
                    // retries by itself; what was read stays in order
                    warn!(feed = %self.config.name, %error, "kafka consumer error");
                    self.incarnation.check_soon();
                    break;
                }
            };
            let partition = message.partition();
            let offset = message.offset();
            // librdkafka said the topic has a new id: this record may be of the new topic
            if self.shared.id_notice.take() && !self.confirm_topic(consumer, (partition, offset))? {
                break;
            }
            let followed = {
                let mut partitions = self.shared.partitions.lock();
                partitions
                    .assigned
                    .get_mut(&partition)
                    .map(|assigned| (assigned.assignment, gaps::follow(assigned, offset)))
            };
            let Some((assignment, skipped)) = followed else {
                continue; // not (or no longer) ours
            };
            self.shared.health.clear(&self.config.name);
            if let Some(expected) = skipped {
                self.check_gap(consumer, partition, expected, offset);
            }
            let record = KafkaRecord {
                key: message.key().map(Bytes::copy_from_slice),
                payload: message
                    .payload()
                    .map_or_else(Bytes::new, Bytes::copy_from_slice),
                partition,
                offset,
                timestamp: message.timestamp().to_millis(),
            };
            self.tail.push_back(Held { record, assignment });
            read += 1;
        }
        if read > 0 {
            debug!(feed = %self.config.name, read, first = ?self.tail.front().map(|held| (held.record.partition, held.record.offset)),
                last = ?self.tail.back().map(|held| (held.record.partition, held.record.offset)), "records read");
        }
        Ok(read)
    }

    /// The epoch of `partition`, decided (and, when new, written to the epoch file) on
    /// the first record of an assignment. `None`: the partition is no longer assigned
    /// under `assignment`.
    fn epoch_for(
        &self,
        consumer: &BaseConsumer<SourceContext>,
        partition: i32,
        assignment: u64,
    ) -> Result<Option<Epoch>, CoreError> {
        // the partitions of this assignment whose epoch is not decided yet: one
        // committed-offset fetch for all of them (a round trip each is slow)
        let undecided: Vec<(i32, u64, Option<Epoch>)> = {
            let partitions = self.shared.partitions.lock();
            match partitions.assigned.get(&partition) {
                Some(assigned) if assigned.assignment == assignment => {
                    if let Some(epoch) = assigned.epoch {
                        return Ok(Some(epoch));
                    }
                }
                _ => return Ok(None),
            }
            partitions
                .assigned
                .iter()
                .filter(|(_, assigned)| assigned.epoch.is_none())
                .map(|(partition, assigned)| {
                    (
                        *partition,
                        assigned.assignment,
                        partitions.seen.get(partition).copied(),
                    )
                })
                .collect()
        };
        let shared = &self.shared;
        let mut list = TopicPartitionList::new();
        for (undecided_partition, _, _) in &undecided {
            list.add_partition(&shared.topic, *undecided_partition);
        }
        let committed =
            crate::admin::committed_retrying(consumer, &list, shared.request_timeout)
                .map_err(|error| shared.broker_error("reading the committed offsets", error))?;
        let mut decided = None;
        for (undecided_partition, undecided_assignment, seen) in undecided {
            let offset = committed
                .find_partition(&shared.topic, undecided_partition)
                .and_then(|element| match element.offset() {
                    Offset::Offset(offset) => Some(offset),
                    _ => None,
                });
            let epoch =
                self.decide_epoch(undecided_partition, undecided_assignment, seen, offset)?;
            // nothing committed of it: read from its start when the group reads the topic
            let from_start = if offset.is_none() {
                gaps::expected_from_start(&self.shared, consumer)
            } else {
                None
            };
            if undecided_partition == partition {
                decided = epoch;
            }
            // its first record (read before the committed offset was known) against the
            // committed offset: records removed before they were read
            let first = {
                let mut partitions = self.shared.partitions.lock();
                partitions
                    .assigned
                    .get_mut(&undecided_partition)
                    .filter(|assigned| assigned.assignment == undecided_assignment)
                    .and_then(|assigned| {
                        assigned.expected_from_start = from_start;
                        gaps::first_unchecked(assigned, offset.or(from_start))
                    })
            };
            if let Some((expected, first)) = first {
                self.check_gap(consumer, undecided_partition, expected, first);
            }
        }
        Ok(decided)
    }

    /// Decides the epoch of `partition` (assigned as `assignment`) whose committed offset
    /// is `committed`, writing a new one to the epoch file.
    fn decide_epoch(
        &self,
        partition: i32,
        assignment: u64,
        seen: Option<Epoch>,
        committed: Option<i64>,
    ) -> Result<Option<Epoch>, CoreError> {
        let shared = &self.shared;
        let slot = shared
            .epochs
            .as_ref()
            .and_then(|epochs| epochs.read(partition));
        let decision = decide(slot, committed, seen);
        let epoch = decision.epoch();
        match decision {
            EpochDecision::Mint(_) => {
                // durable before any record of the new epoch is published: a state saved
                // from now on is in an epoch a restart of this owner finds again
                if let Some(epochs) = &shared.epochs {
                    let at = committed.unwrap_or(-1);
                    let slot = EpochSlot {
                        epoch,
                        previous: at,
                        offset: at,
                    };
                    epochs.write(partition, slot).map_err(|error| {
                        CoreError::io(
                            format!(
                                "kafka '{}': writing the epoch file {} (check its directory and disk; the partition's records wait)",
                                shared.name,
                                epochs.path().display()
                            ),
                            error,
                        )
                    })?;
                }
                info!(feed = %shared.name, partition, %epoch, ?committed, previous = ?slot,
                    "partition taken over: new epoch");
            }
            EpochDecision::Keep(_) => {
                info!(feed = %shared.name, partition, %epoch, ?committed,
                    "partition back with its owner, nobody committed it since: same epoch");
            }
        }
        let mut partitions = shared.partitions.lock();
        let last = partitions.committed.get(&partition).copied();
        let seen = partitions.seen.entry(partition).or_insert(epoch);
        *seen = (*seen).max(epoch);
        match partitions.assigned.get_mut(&partition) {
            Some(assigned) if assigned.assignment == assignment => {
                assigned.epoch = Some(epoch);
                assigned.committed_at = committed;
                // never commit backwards, nor re-commit what is committed
                assigned.high = match (last, committed) {
                    (Some((last_epoch, at)), Some(committed)) if last_epoch == epoch => {
                        Some(at.max(committed))
                    }
                    (_, committed) => committed,
                };
                Ok(Some(epoch))
            }
            _ => Ok(None),
        }
    }

    /// Publishes the tail in order, until the feed takes no more. Returns how many were
    /// published (the tail keeps the rest).
    fn publish_tail(&mut self, consumer: &BaseConsumer<SourceContext>) -> Result<usize, CoreError> {
        let mut published = 0;
        while let Some(front) = self.tail.front() {
            let partition = front.record.partition;
            let assignment = front.assignment;
            let Some(epoch) = self.epoch_for(consumer, partition, assignment)? else {
                // revoked (or reassigned) since it was read: the owner reads it again
                self.tail.pop_front();
                self.shared
                    .counters
                    .dropped_revoked
                    .fetch_add(1, Ordering::Relaxed);
                continue;
            };
            if self.output_epoch != Some(epoch) {
                self.output.set_epoch(epoch);
                self.output_epoch = Some(epoch);
            }
            // one batch per run of the same partition and assignment (one epoch)
            let tail = &mut self.tail;
            let mut taken = 0usize;
            let end = self.output.try_publish_batch(&mut || {
                let next = tail.front()?;
                if next.record.partition != partition || next.assignment != assignment {
                    return None;
                }
                let held = tail.pop_front()?;
                taken += 1;
                let position = PositionValue {
                    lane: held.record.partition as u32,
                    offset: (held.record.offset + 1) as u64,
                };
                Some((held.record, position))
            });
            match end {
                BatchEnd::Exhausted => published += taken,
                BatchEnd::Paused => {
                    published += taken;
                    break;
                }
                BatchEnd::Returned(record, _, refusal) => {
                    published += taken - 1;
                    self.tail.push_front(Held { record, assignment });
                    if refusal == Refusal::Retry {
                        debug!(feed = %self.config.name, "publish nested in a commit: retried next cycle");
                    }
                    break;
                }
            }
        }
        self.shared
            .counters
            .published
            .fetch_add(published as u64, Ordering::Relaxed);
        Ok(published)
    }

    fn pause(&self, consumer: &BaseConsumer<SourceContext>) {
        let mut partitions = self.shared.partitions.lock();
        if partitions.paused {
            return;
        }
        partitions.paused = true;
        drop(partitions);
        match consumer.assignment() {
            Ok(assignment) => {
                if let Err(error) = consumer.pause(&assignment) {
                    warn!(feed = %self.config.name, %error, "could not pause the assignment");
                }
            }
            Err(error) => warn!(feed = %self.config.name, %error, "could not read the assignment"),
        }
        self.shared.counters.pauses.fetch_add(1, Ordering::Relaxed);
        debug!(feed = %self.config.name, "feed full: assignment paused, still polling");
    }

    fn resume(&self, consumer: &BaseConsumer<SourceContext>) {
        let mut partitions = self.shared.partitions.lock();
        if !partitions.paused {
            return;
        }
        partitions.paused = false;
        drop(partitions);
        match consumer.assignment() {
            Ok(assignment) => {
                if let Err(error) = consumer.resume(&assignment) {
                    warn!(feed = %self.config.name, %error, "could not resume the assignment");
                }
            }
            Err(error) => warn!(feed = %self.config.name, %error, "could not read the assignment"),
        }
        self.shared.counters.resumes.fetch_add(1, Ordering::Relaxed);
        debug!(feed = %self.config.name, "feed takes records again: assignment resumed");
    }

    fn report(&mut self, state: SourceState, detail: Option<&str>) {
        if self.state != state || self.detail.as_deref() != detail {
            self.state = state;
            self.detail = detail.map(str::to_owned);
            self.output.report_state(state, detail);
        }
    }

    /// Offsets of `partition` skipped from `expected` to `resumed`: when the log start
    /// passed `expected`, a loss, reported to the feed (book: connectors/kafka.md,
    /// records removed before they were read).
    fn check_gap(
        &self,
        consumer: &BaseConsumer<SourceContext>,
        partition: i32,
        expected: i64,
        resumed: i64,
    ) {
        let shared = &self.shared;
        let Some(gap) = shared.log_starts.check(
            consumer,
            (&shared.name, &shared.topic),
            partition,
            (expected, resumed),
            shared.request_timeout,
        ) else {
            return;
        };
        self.report_gap(consumer, gap);
    }

    /// The resets librdkafka logged since the last look: each partition's log start is
    /// asked at once (book: connectors/kafka.md, records removed before they were read).
    fn check_resets(&self, consumer: &BaseConsumer<SourceContext>) {
        let shared = &self.shared;
        for (partition, expected) in shared.log_starts.take_resets() {
            if !shared.partitions.lock().assigned.contains_key(&partition) {
                continue;
            }
            let timeout = shared.request_timeout.min(Duration::from_secs(5));
            match shared.log_starts.check_reset(
                consumer,
                &shared.topic,
                (partition, expected),
                timeout,
            ) {
                Ok(Some(gap)) => self.report_gap(consumer, gap),
                Ok(None) => {
                    debug!(feed = %shared.name, partition, expected,
                        "an offset reset from past the log's end (a truncated log): nothing removed before it was read");
                }
                Err(error) => {
                    if !shared.log_starts.first_report(partition, expected) {
                        continue;
                    }
                    warn!(feed = %shared.name, topic = %shared.topic, partition, expected, %error,
                        "the consumer's offset was out of range and reset, and the partition's log start cannot be read: records from that offset were removed before they were read, how many is unknown; the feed is not lossless");
                    self.output.report_loss(
                        &format!(
                            "kafka {} partition {partition}: records from offset {expected} on were removed before they were read (the offset was out of range and reset; the log start could not be read: {error}), how many is unknown",
                            shared.topic
                        ),
                        None,
                    );
                }
            }
        }
    }

    /// Reports `gap` as a loss, less what every consumer of the feed holds of it
    /// ([`gaps::held_by_every_consumer`]): a gap they hold whole is no loss.
    fn report_gap(&self, consumer: &BaseConsumer<SourceContext>, gap: Gap) {
        let shared = &self.shared;
        let Some(gap) = gap.less_held(self.consumers_hold(consumer, gap.partition)) else {
            info!(feed = %shared.name, partition = gap.partition, expected = gap.expected, log_start = gap.log_start,
                "records removed before the group's commit reached them had been applied and saved by every consumer of the feed (its commit lagged): no loss");
            return;
        };
        if !shared.log_starts.first_report(gap.partition, gap.expected) {
            debug!(feed = %shared.name, partition = gap.partition, expected = gap.expected,
                "this gap was reported already");
            return;
        }
        let lost = gap.lost();
        shared
            .counters
            .lost_records
            .fetch_add(lost, Ordering::Relaxed);
        warn!(feed = %shared.name, topic = %shared.topic, partition = gap.partition, expected = gap.expected,
            log_start = gap.log_start, resumed = gap.resumed, lost,
            "records removed before they were read (retention or DeleteRecords moved the partition's log start past the offset to read): the feed is not lossless");
        self.output.report_loss(&gap.describe(&shared.topic), None);
    }

    /// Why the source is not caught up though a poll returned nothing: `None` when it
    /// has its assignment and read every partition of it to the end.
    fn not_caught_up(&self) -> Option<&'static str> {
        let partitions = self.shared.partitions.lock();
        if !partitions.joined {
            Some("waiting for the consumer group's assignment")
        } else if !partitions.read_to_the_end() {
            Some("reading its partitions to their end")
        } else {
            None
        }
    }
}

impl KafkaSource {
    /// Makes the consumer and subscribes it to the topic (the committer commits
    /// through it from now on).
    fn connect(&mut self) -> Result<(), CoreError> {
        let context = SourceContext {
            shared: Arc::clone(&self.shared),
            output: Arc::clone(&self.output),
        };
        let consumer: BaseConsumer<SourceContext> = self
            .config
            .client_config()
            .create_with_context(context)
            .map_err(|error| KafkaConnectorError::Config {
                name: self.config.name.clone(),
                error: Box::new(error),
            })?;
        consumer
            .subscribe(&[&self.config.topic])
            .map_err(|error| self.shared.broker_error("subscribing", error))?;
        let consumer = Arc::new(consumer);
        *self.shared.consumer.lock() = Arc::downgrade(&consumer);
        self.consumer = Some(consumer);
        // not "starting": a feed whose source says nothing is settled by drained alone,
        // and nothing was read yet
        self.report(
            SourceState::Behind,
            Some("waiting for the consumer group's assignment"),
        );
        Ok(())
    }

    /// Unsubscribes `consumer` and polls it briefly so that its revocation runs (the
    /// callback commits what was processed), then closes it; what was read and not
    /// published is dropped (read again by the next owner).
    fn leave_group(&mut self, consumer: Arc<BaseConsumer<SourceContext>>) {
        consumer.unsubscribe();
        for _ in 0..10 {
            if consumer.poll(Duration::from_millis(10)).is_none()
                && self.shared.partitions.lock().assigned.is_empty()
            {
                break;
            }
        }
        self.tail.clear();
        drop(consumer);
    }

    /// A new consumer in place of one whose librdkafka state cannot go on: it read an
    /// earlier incarnation of the topic ([`incarnation`]: nothing of the new topic is
    /// committed yet, and the new one reads the re-created partitions from their start),
    /// or it forgot every broker ([`forgotten`]: its assignment was lost already). The
    /// old one leaves the group; the new one bootstraps from `brokers` and joins.
    fn replace_consumer(&mut self) -> Result<(), CoreError> {
        if let Some(old) = self.consumer.take() {
            self.leave_group(old);
        }
        self.connect()?;
        info!(feed = %self.config.name, topic = %self.config.topic,
            "a new consumer joins the group in place of the old one");
        Ok(())
    }
}

impl EventSource for KafkaSource {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn start(&mut self) -> Result<SourceStart, CoreError> {
        self.connect()?;
        let committer = AnyCommitter::new(KafkaCommitter {
            shared: Arc::clone(&self.shared),
        });
        info!(feed = %self.config.name, topic = %self.config.topic, group = %self.config.group,
            brokers = %self.config.brokers, "kafka source subscribed");
        // each partition's epoch is set as its records are published: the driver sets
        // `Epoch::NONE` now, so the next publish sets its partition's again
        self.output_epoch = None;
        Ok(SourceStart {
            epoch: Epoch::NONE,
            pause_by_default: true,
            committer: Some(committer),
        })
    }

    fn do_work(&mut self) -> Result<WorkDone, CoreError> {
        if let Some(forgotten) = self.shared.forgotten.past_patience() {
            warn!(feed = %self.config.name, brokers = %self.config.brokers, seconds = forgotten.as_secs(),
                "the kafka client knows no broker (a broker answered metadata with none, as one paused past its session does when it continues) and did not bootstrap again: a new consumer bootstraps from brokers");
            self.reconnect = true;
        }
        if std::mem::take(&mut self.reconnect) {
            self.shared.forgotten.clear();
            self.replace_consumer()?;
        }
        let consumer = self.consumer()?;
        if let Some(done) = self.watch_topic(&consumer)? {
            return Ok(done);
        }
        let mut published = 0;
        if !self.tail.is_empty() {
            published += self.publish_tail(&consumer)?;
        }
        if !self.tail.is_empty() {
            self.pause(&consumer);
            // keep polling while paused: the group sees this member alive, and the
            // rebalance callbacks run; a paused partition returns nothing (a record
            // that comes anyway joins the tail, in order)
            self.read(&consumer)?;
            self.report(SourceState::Behind, Some("paused: the feed is full"));
            return Ok(WorkDone(published));
        }
        // the tail is out (a batch may end "paused" with its last record taken: an
        // empty tail is what says the feed took everything)
        self.resume(&consumer);
        let read = self.read(&consumer)?;
        if read == 0 {
            // a client that cannot authenticate or reach a broker: the cycle fails with
            // why, and the driver reports the feed stalled with it until one works again
            let health = &self.shared.health;
            health.probe(&consumer, &self.config.name, &self.config.topic);
            if let Some(error) = health.outstanding(&self.config.name, &self.config.brokers) {
                self.report(SourceState::Behind, Some("the kafka client cannot read"));
                return Err(error.into());
            }
            if published == 0 {
                // caught up only with the assignment read to its end (an empty poll
                // before the first assignment or fetch says nothing)
                match self.not_caught_up() {
                    None => self.report(SourceState::CaughtUp, None),
                    Some(why) => self.report(SourceState::Behind, Some(why)),
                }
            }
            return Ok(WorkDone(published));
        }
        published += self.publish_tail(&consumer)?;
        if self.tail.is_empty() {
            self.report(SourceState::Behind, None);
        } else {
            self.pause(&consumer);
            self.report(SourceState::Behind, Some("paused: the feed is full"));
        }
        Ok(WorkDone(published.max(1)))
    }

    fn stop(&mut self) -> Result<(), CoreError> {
        let Some(consumer) = self.consumer.take() else {
            return Ok(());
        };
        // the driver polled the acknowledgements just before: commit them, then leave
        // the group (the revocation callback commits once more what was processed)
        let committed = self.shared.commit_pending(&consumer);
        self.leave_group(consumer);
        info!(feed = %self.config.name, "kafka source stopped");
        committed
    }
}
