//! [`KafkaSource`]: a consumer-group member that publishes records into a feed and
//! commits their offsets only after every consumer processed them.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use mongoose_core::{
    BatchEnd, CoreError, Epoch, EventSource, PositionValue, Refusal, SourceCommitter, SourceOutput,
    SourceState, WorkDone,
};
use parking_lot::Mutex;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};
use tracing::{debug, error, info, warn};

use crate::epoch::{decide, tag, EpochDecision, EpochFile, EpochSlot};
use crate::error::KafkaConnectorError;

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

/// How a [`KafkaSource`] connects and reads.
#[derive(Clone, Debug)]
pub struct KafkaSourceConfig {
    /// The feed's name (also the client id).
    pub name: String,
    /// `bootstrap.servers`.
    pub brokers: String,
    /// The consumer group (`group.id`).
    pub group: String,
    /// The topic read (one topic per source: a lane is a partition).
    pub topic: String,
    /// The owner's epoch file, kept with the state that processes this member's
    /// partitions (for a server, in its state directory): a partition that comes back
    /// to this owner with nobody else having committed it since keeps its epoch
    /// ([`crate::epoch`]). `None`: every assignment gets a new epoch.
    pub epoch_file: Option<PathBuf>,
    /// `session.timeout.ms`.
    pub session_timeout: Duration,
    /// `max.poll.interval.ms`: the source calls `poll` every cycle, also while paused.
    pub max_poll_interval: Duration,
    /// At most this many records are polled per duty cycle.
    pub batch: usize,
    /// How long the first `poll` of a cycle may wait for a record.
    pub poll_timeout: Duration,
    /// How long a synchronous commit or committed-offset fetch may take.
    pub request_timeout: Duration,
    /// Where a group without a committed offset starts: `earliest` (the default) or
    /// `latest` (`auto.offset.reset`).
    pub start_from: String,
    /// More librdkafka properties, set last (they win).
    pub properties: Vec<(String, String)>,
}

impl KafkaSourceConfig {
    /// A configuration with the defaults: 10 s session timeout, 5 min max poll interval,
    /// 500 records a cycle, reading from the earliest offset without a committed one.
    pub fn new(name: &str, brokers: &str, group: &str, topic: &str) -> Self {
        KafkaSourceConfig {
            name: name.to_owned(),
            brokers: brokers.to_owned(),
            group: group.to_owned(),
            topic: topic.to_owned(),
            epoch_file: None,
            session_timeout: Duration::from_secs(10),
            max_poll_interval: Duration::from_secs(300),
            batch: 500,
            poll_timeout: Duration::from_millis(10),
            request_timeout: Duration::from_secs(10),
            start_from: "earliest".to_owned(),
            properties: Vec::new(),
        }
    }

    fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", &self.group)
            .set("client.id", &self.name)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", &self.start_from)
            .set(
                "session.timeout.ms",
                self.session_timeout.as_millis().to_string(),
            )
            .set(
                "max.poll.interval.ms",
                self.max_poll_interval.as_millis().to_string(),
            )
            .set("enable.partition.eof", "false")
            .set_log_level(RDKafkaLogLevel::Warning);
        for (key, value) in &self.properties {
            config.set(key, value);
        }
        config
    }
}

/// Counters a test or the feed status reads while the source runs
/// ([`KafkaSource::counters`]).
#[derive(Debug, Default)]
pub struct SourceCounters {
    /// Partitions assigned to this member (each assignment of each partition counts).
    pub assigned: AtomicU64,
    /// Partitions revoked from it.
    pub revoked: AtomicU64,
    /// Successful commits.
    pub commits: AtomicU64,
    /// Failed commits (kept and retried).
    pub commit_failures: AtomicU64,
    /// Times the assignment was paused behind a full feed.
    pub pauses: AtomicU64,
    /// Times it was resumed.
    pub resumes: AtomicU64,
    /// Records published into the feed.
    pub published: AtomicU64,
    /// Records dropped because their partition was revoked before they were published.
    pub dropped_revoked: AtomicU64,
}

/// A snapshot of what the source holds per partition ([`KafkaSource::stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KafkaSourceStats {
    /// Assigned partitions with their epoch (`None` until a record of it was read).
    pub epochs: BTreeMap<i32, Option<Epoch>>,
    /// The offsets committed by this member, per partition.
    pub committed: BTreeMap<i32, i64>,
    /// Acknowledged and not yet committed, per partition.
    pub pending: BTreeMap<i32, i64>,
    /// True while the assignment is paused behind a full feed.
    pub paused: bool,
}

/// One assigned partition.
#[derive(Debug)]
struct Assigned {
    /// Which assignment this is (records read under an earlier one are stale).
    assignment: u64,
    /// Its epoch, decided when its first record is read.
    epoch: Option<Epoch>,
    /// The highest offset acknowledged in this epoch (pending or committed).
    high: Option<i64>,
    /// Acknowledged, not yet committed.
    pending: Option<i64>,
    /// The group's committed offset as last known (read at the first record, then each
    /// commit of this member).
    committed_at: Option<i64>,
}

#[derive(Debug, Default)]
struct Partitions {
    assigned: BTreeMap<i32, Assigned>,
    /// Per partition: the epoch and offset this member last committed (kept across
    /// assignments so that a partition that comes back in the same epoch never commits
    /// backwards).
    committed: BTreeMap<i32, (Epoch, i64)>,
    /// Per partition: the greatest epoch used in this run.
    seen: BTreeMap<i32, Epoch>,
    next_assignment: u64,
    paused: bool,
}

/// What the source, its committer and its rebalance callback share.
struct Shared {
    name: String,
    topic: String,
    brokers: String,
    epochs: Option<EpochFile>,
    request_timeout: Duration,
    partitions: Mutex<Partitions>,
    counters: Arc<SourceCounters>,
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
    fn broker_error(&self, action: &str, error: KafkaError) -> KafkaConnectorError {
        KafkaConnectorError::broker(&self.name, action, &self.brokers, error)
    }

    /// Commits every pending position synchronously. On an error they stay pending.
    fn commit_pending(&self, consumer: &BaseConsumer<SourceContext>) -> Result<(), CoreError> {
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

/// The consumer's context: the rebalance callbacks (run inside `poll`, on the source's
/// thread).
pub(crate) struct SourceContext {
    shared: Arc<Shared>,
    /// The feed, to poll acknowledgements before partitions are given up.
    output: Arc<dyn SourceOutput<KafkaRecord, PositionValue>>,
}

impl ClientContext for SourceContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        let name = &self.shared.name;
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => error!(feed = %name, facility, "librdkafka: {message}"),
            RDKafkaLogLevel::Warning => warn!(feed = %name, facility, "librdkafka: {message}"),
            _ => debug!(feed = %name, facility, "librdkafka: {message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        warn!(feed = %self.shared.name, %error, reason, "kafka client error (librdkafka retries)");
    }
}

impl ConsumerContext for SourceContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(revoked) = rebalance else {
            return;
        };
        let shared = &self.shared;
        // feed-delivery-guarantees §9, connector-kafka: before the partitions go, commit
        // what was processed (the acknowledgements polled now), synchronously
        self.output.poll_acknowledgements();
        if let Err(error) = shared.commit_pending(consumer) {
            warn!(feed = %shared.name, %error,
                "could not commit what was processed before giving partitions up: the new owner reads those records again (at-least-once)");
        }
        let mut partitions = shared.partitions.lock();
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
                    partitions.assigned.insert(
                        element.partition(),
                        Assigned {
                            assignment,
                            epoch: None,
                            high: None,
                            pending: None,
                            committed_at: None,
                        },
                    );
                    shared.counters.assigned.fetch_add(1, Ordering::Relaxed);
                }
                let paused = partitions.paused;
                drop(partitions);
                if paused {
                    // the feed is still full: the new partitions wait too
                    if let Err(error) = consumer.pause(assigned) {
                        warn!(feed = %shared.name, %error, "could not pause newly assigned partitions");
                    }
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

/// A record read and not yet published (the unpublished tail of a batch).
#[derive(Debug)]
struct Held {
    record: KafkaRecord,
    assignment: u64,
}

/// Commits acknowledged positions of a [`KafkaSource`]: `max(offset + 1)` per
/// partition, with the partition's epoch tag as the offset's metadata, synchronously
/// on the source's thread. Acknowledgements of another epoch than the partition's
/// current one (an earlier ownership), of a partition no longer assigned, or at or
/// below what is already acknowledged (records read again after a rebalance) are
/// ignored.
pub struct KafkaCommitter {
    shared: Arc<Shared>,
    consumer: Weak<BaseConsumer<SourceContext>>,
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
        let Some(consumer) = self.consumer.upgrade() else {
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
            partitions: Mutex::new(Partitions::default()),
            counters: Arc::new(SourceCounters::default()),
        });
        Ok(KafkaSource {
            config,
            output,
            shared,
            consumer: None,
            tail: VecDeque::new(),
            output_epoch: None,
            state: SourceState::Starting,
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
            let Some(polled) = consumer.poll(timeout) else {
                break;
            };
            timeout = Duration::ZERO;
            let message = match polled {
                Ok(message) => message,
                Err(error) => {
                    // a consumer error (a broker down, a partition EOF event): librdkafka
                    // retries by itself; what was read stays in order
                    warn!(feed = %self.config.name, %error, "kafka consumer error");
                    break;
                }
            };
            let partition = message.partition();
            let assignment = {
                let partitions = self.shared.partitions.lock();
                partitions
                    .assigned
                    .get(&partition)
                    .map(|assigned| assigned.assignment)
            };
            let Some(assignment) = assignment else {
                continue; // not (or no longer) ours
            };
            let record = KafkaRecord {
                key: message.key().map(Bytes::copy_from_slice),
                payload: message
                    .payload()
                    .map_or_else(Bytes::new, Bytes::copy_from_slice),
                partition,
                offset: message.offset(),
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
        let committed = consumer
            .committed_offsets(list, shared.request_timeout)
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
            if undecided_partition == partition {
                decided = epoch;
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
        if self.state != state {
            self.state = state;
            self.output.report_state(state, detail);
        }
    }
}

impl EventSource for KafkaSource {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn start(&mut self) -> Result<(), CoreError> {
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
        self.output.set_pause_by_default(true);
        self.output.acknowledge_with(Box::new(KafkaCommitter {
            shared: Arc::clone(&self.shared),
            consumer: Arc::downgrade(&consumer),
        }));
        self.consumer = Some(consumer);
        self.output.report_state(SourceState::Starting, None);
        info!(feed = %self.config.name, topic = %self.config.topic, group = %self.config.group,
            brokers = %self.config.brokers, "kafka source subscribed");
        Ok(())
    }

    fn do_work(&mut self) -> Result<WorkDone, CoreError> {
        let consumer = self.consumer()?;
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
            if published == 0 {
                self.report(SourceState::CaughtUp, None);
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
        consumer.unsubscribe();
        for _ in 0..10 {
            if consumer.poll(Duration::from_millis(10)).is_none() {
                let partitions = self.shared.partitions.lock();
                if partitions.assigned.is_empty() {
                    break;
                }
            }
        }
        self.tail.clear();
        drop(consumer);
        info!(feed = %self.config.name, "kafka source stopped");
        committed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committer_with(partitions: Partitions) -> KafkaCommitter {
        KafkaCommitter {
            shared: Arc::new(Shared {
                name: "kafka".into(),
                topic: "t".into(),
                brokers: "nowhere".into(),
                epochs: None,
                request_timeout: Duration::from_secs(1),
                partitions: Mutex::new(partitions),
                counters: Arc::default(),
            }),
            consumer: Weak::new(),
        }
    }

    // the SourceCommitter contract: acknowledgements of an earlier epoch (ownership) or of
    // a partition no longer assigned are ignored; within an epoch, never backwards
    #[test]
    fn the_committer_takes_only_the_current_ownerships_positions_and_never_goes_back() {
        let mut partitions = Partitions::default();
        partitions.assigned.insert(
            0,
            Assigned {
                assignment: 1,
                epoch: Some(Epoch(20)),
                high: Some(10),
                pending: None,
                committed_at: Some(10),
            },
        );
        let mut committer = committer_with(partitions);
        let at = |lane: u32, offset: u64| PositionValue { lane, offset };
        committer.acknowledged(1, Epoch(19), at(0, 50)); // an earlier ownership
        committer.acknowledged(2, Epoch(20), at(0, 8)); // read again after a rebalance
        committer.acknowledged(3, Epoch(20), at(1, 70)); // a partition not assigned
        assert_eq!(
            committer.shared.partitions.lock().assigned[&0].pending,
            None
        );
        committer.acknowledged(4, Epoch(20), at(0, 12));
        committer.acknowledged(5, Epoch(20), at(0, 11)); // never backwards
        assert_eq!(
            committer.shared.partitions.lock().assigned[&0].pending,
            Some(12)
        );
        // the consumer is gone: what is pending is not committed, and says so
        let error = committer.commit().expect_err("closed");
        assert!(
            error.to_string().contains("read again at the next start"),
            "{error}"
        );
        committer.shared.partitions.lock().assigned.clear();
        committer.commit().expect("nothing pending");
    }

    #[test]
    fn a_record_prints_its_place_not_its_bytes() {
        let record = KafkaRecord {
            key: Some(Bytes::from_static(b"k")),
            payload: Bytes::from_static(b"secret"),
            partition: 2,
            offset: 41,
            timestamp: None,
        };
        let text = format!("{record:?}");
        assert!(text.contains("partition: 2") && text.contains("offset: 41"));
        assert!(!text.contains("secret"));
    }
}
