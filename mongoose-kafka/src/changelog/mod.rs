//! [`Changelog`]: a per-partition state store for a stateful processor on a Kafka feed,
//! kept in a changelog topic, so that a partition's state follows the partition from
//! member to member of a consumer group.
//!
//! # The model
//!
//! The changelog topic is co-partitioned with the feed's topic: the state of input
//! partition `P` lives in changelog partition `P`. Each change is one record keyed by
//! the state's key (the topic is created with `cleanup.policy=compact`, so a broker that
//! compacts keeps the last value of each key), and carries the input position it
//! follows: `(epoch, partition, offset)`, the delivery's epoch and the offset after the
//! input record (the feed's position).
//!
//! * **Before the commit.** A write is durable when the broker acknowledged it (an
//!   idempotent producer, `acks=all`): [`Changelog::write`] takes a tag, and the
//!   store's `on_durable` callback is called with it then. A processor registers the
//!   tag with its feed's commit gate, so the input's offset is committed only after the
//!   change it caused is in the changelog.
//! * **Restore, fenced.** The member that takes a partition over (a new epoch: every
//!   assignment gets one) first writes a **marker** carrying its epoch, then reads the
//!   partition from its start up to that marker ([`Changelog::restore`]). The state is
//!   the fold of the records in log order where, after each marker, only records of
//!   the marker's epoch count ([`fold`]). A member that lost the partition and still
//!   writes (its last records in flight when it was killed, or a member that stopped
//!   answering and was replaced) writes behind the new owner's marker in an old epoch:
//!   its records are fenced off, and a later restore gives exactly the state the new
//!   owner built on. The marker also tells the restore where the partition ends without
//!   asking the broker for its high watermark (the test broker reports it wrong).
//! * **The consumer-side position check.** The restored state says through which input
//!   offset it holds the partition (the last counted record's position). Kafka offsets
//!   never repeat within a partition, so the new owner skips every record at or below
//!   it: the records the old owner applied and saved but did not commit are not applied
//!   twice.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use mongoose_core::Epoch;
//! use mongoose_kafka::changelog::{Changelog, ChangelogConfig};
//!
//! # fn main() -> Result<(), mongoose_kafka::KafkaConnectorError> {
//! let config = ChangelogConfig::new("ledger", "127.0.0.1:19092", "payments-ledger-changelog");
//! let changelog = Changelog::open(config, "payments", Arc::new(|tag, result| {
//!     // complete the input's commit gate for `tag` (or fail on an error)
//!     let _ = (tag, result);
//! }))?;
//! // the first record of partition 2 in a new epoch: restore its state
//! let restored = changelog.restore(2, Epoch(7), |_record| {})?;
//! let through = restored.position.map_or(0, |(_, offset)| offset);
//! // ... skip input offsets <= through, apply the others, and for each:
//! changelog.write(2, Epoch(7), through + 1, b"account-1", b"balance", 1)?;
//! # Ok(()) }
//! ```

use std::fmt;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Sender};
use mongoose_core::state_store::PartitionStateStore;
pub use mongoose_core::state_store::{OnDurable, RecordKind, RestoredPartition, StoredRecord};
use mongoose_core::{CoreError, Epoch};
use parking_lot::Mutex;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};
use tracing::{debug, info, warn};

use crate::error::KafkaConnectorError;

mod records;

use records::StoredValue;
pub use records::{decode, fold, FORMAT, MARKER_KEY};

/// How a [`Changelog`] connects.
#[derive(Clone, Debug)]
pub struct ChangelogConfig {
    /// A name for logs and the client id (the processor's).
    pub name: String,
    /// `bootstrap.servers`.
    pub brokers: String,
    /// The changelog topic (created compacted, co-partitioned with the input, if
    /// missing).
    pub topic: String,
    /// How long a broker call (topic creation, the marker's acknowledgement) may take.
    pub request_timeout: Duration,
    /// How long a restore may read before it fails.
    pub restore_timeout: Duration,
    /// How long the producer retries a write before it gives it up
    /// (`message.timeout.ms`).
    pub delivery_timeout: Duration,
    /// More librdkafka properties for the producer and the restore consumer.
    pub properties: Vec<(String, String)>,
}

impl ChangelogConfig {
    /// A configuration with the defaults: 10 s requests, 120 s restores, 60 s deliveries.
    pub fn new(name: &str, brokers: &str, topic: &str) -> Self {
        ChangelogConfig {
            name: name.to_owned(),
            brokers: brokers.to_owned(),
            topic: topic.to_owned(),
            request_timeout: Duration::from_secs(10),
            restore_timeout: Duration::from_secs(120),
            delivery_timeout: Duration::from_secs(60),
            properties: Vec::new(),
        }
    }
}

/// What a write's delivery report goes back to.
enum Opaque {
    /// A state change: its tag.
    Write(u64),
    /// A marker or probe: where its offset (or the error) goes.
    Marker(Sender<Result<i64, String>>),
}

/// The producer's context: delivery reports and librdkafka's log.
struct ChangelogContext {
    name: String,
    on_durable: OnDurable,
}

impl ClientContext for ChangelogContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error
            | RDKafkaLogLevel::Warning => {
                warn!(changelog = %self.name, facility, "librdkafka: {message}");
            }
            _ => debug!(changelog = %self.name, facility, "librdkafka: {message}"),
        }
    }
}

impl ProducerContext for ChangelogContext {
    type DeliveryOpaque = Box<Opaque>;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: Self::DeliveryOpaque) {
        let outcome = match result {
            Ok(message) => Ok(message.offset()),
            Err((error, _)) => Err(error.to_string()),
        };
        match *opaque {
            Opaque::Write(tag) => (self.on_durable)(tag, outcome.map(|_| ())),
            Opaque::Marker(reply) => {
                let _ = reply.send(outcome);
            }
        }
    }
}

/// A per-partition state store in a compacted changelog topic (see the [module
/// docs](self)): writes acknowledged before the input's commit, and a fenced restore
/// for the member that takes a partition over.
pub struct Changelog {
    config: ChangelogConfig,
    producer: ThreadedProducer<ChangelogContext>,
    /// The restore reader (made at the first restore, kept).
    reader: Mutex<Option<BaseConsumer>>,
}

impl fmt::Debug for Changelog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Changelog")
            .field("name", &self.config.name)
            .field("topic", &self.config.topic)
            .finish_non_exhaustive()
    }
}

impl Changelog {
    /// Connects, and makes sure the changelog topic exists with at least as many
    /// partitions as `input_topic` (creating it compacted, with as many, if missing).
    /// `on_durable` is called on the producer's thread for each write.
    ///
    /// # Errors
    /// The client configuration is refused, the broker does not answer, the input
    /// topic does not exist, or the changelog topic has fewer partitions than the input.
    pub fn open(
        config: ChangelogConfig,
        input_topic: &str,
        on_durable: OnDurable,
    ) -> Result<Self, KafkaConnectorError> {
        let mut client = ClientConfig::new();
        client
            .set("bootstrap.servers", &config.brokers)
            .set("client.id", format!("{}-changelog", config.name))
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set(
                "message.timeout.ms",
                config.delivery_timeout.as_millis().to_string(),
            )
            .set("linger.ms", "2")
            // a metadata request must not create the changelog topic: a broker with
            // `auto.create.topics.enable` (Apache Kafka's default) would make it with its
            // default partition count and not compacted, before `ensure_topic` can
            .set("allow.auto.create.topics", "false")
            .set_log_level(RDKafkaLogLevel::Warning);
        for (key, value) in &config.properties {
            client.set(key, value);
        }
        let producer: ThreadedProducer<ChangelogContext> = client
            .create_with_context(ChangelogContext {
                name: config.name.clone(),
                on_durable,
            })
            .map_err(|error| KafkaConnectorError::Config {
                name: config.name.clone(),
                error: Box::new(error),
            })?;
        let changelog = Changelog {
            config,
            producer,
            reader: Mutex::new(None),
        };
        changelog.ensure_topic(input_topic)?;
        Ok(changelog)
    }

    /// The changelog topic.
    pub fn topic(&self) -> &str {
        &self.config.topic
    }

    fn broker_error(&self, action: &str, error: KafkaError) -> KafkaConnectorError {
        KafkaConnectorError::broker(&self.config.name, action, &self.config.brokers, error)
    }

    fn partitions_of(&self, topic: &str) -> Result<Option<usize>, KafkaConnectorError> {
        let metadata = self
            .producer
            .client()
            .fetch_metadata(Some(topic), self.config.request_timeout)
            .map_err(|error| {
                self.broker_error(&format!("reading the metadata of '{topic}'"), error)
            })?;
        Ok(metadata
            .topics()
            .iter()
            .find(|found| found.name() == topic && found.error().is_none())
            .map(|found| found.partitions().len())
            .filter(|count| *count > 0))
    }

    fn ensure_topic(&self, input_topic: &str) -> Result<(), KafkaConnectorError> {
        let Some(input) = self.partitions_of(input_topic)? else {
            return Err(KafkaConnectorError::Changelog {
                name: self.config.name.clone(),
                message: format!(
                    "the input topic '{input_topic}' does not exist: create it first (the changelog '{}' is made with as many partitions)",
                    self.config.topic
                ),
            });
        };
        if let Some(existing) = self.partitions_of(&self.config.topic)? {
            if existing < input {
                return Err(KafkaConnectorError::Changelog {
                    name: self.config.name.clone(),
                    message: format!(
                        "the changelog topic '{}' has {existing} partitions and the input '{input_topic}' has {input}: the state of input partition P lives in changelog partition P, so give the changelog at least {input} (or name a new changelog topic)",
                        self.config.topic
                    ),
                });
            }
            return Ok(());
        }
        let created = crate::admin::create_topic_with(
            &self.config.brokers,
            &self.config.properties,
            &self.config.topic,
            i32::try_from(input).unwrap_or(i32::MAX),
            &[("cleanup.policy", "compact")],
            self.config.request_timeout,
        )?;
        if created {
            info!(changelog = %self.config.topic, partitions = input, "changelog topic created (compacted)");
        }
        Ok(())
    }

    fn encode(
        kind: RecordKind,
        epoch: Epoch,
        partition: i32,
        offset: u64,
        value: &[u8],
    ) -> Vec<u8> {
        postcard::to_allocvec(&StoredValue {
            format: FORMAT,
            kind,
            epoch: epoch.0,
            partition,
            offset,
            value,
        })
        .unwrap_or_default()
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
        if key.first() == Some(&0) {
            return Err(KafkaConnectorError::Changelog {
                name: self.config.name.clone(),
                message: "a state key may not start with a zero byte (reserved for markers)"
                    .to_owned(),
            });
        }
        let payload = Self::encode(RecordKind::Entry, epoch, partition, offset, value);
        self.send(partition, key, &payload, Box::new(Opaque::Write(tag)))
    }

    fn send(
        &self,
        partition: i32,
        key: &[u8],
        payload: &[u8],
        opaque: Box<Opaque>,
    ) -> Result<(), KafkaConnectorError> {
        let mut record = BaseRecord::with_opaque_to(&self.config.topic, opaque)
            .partition(partition)
            .key(key)
            .payload(payload);
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((error, returned))
                    if error.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) =>
                {
                    record = returned;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((error, _)) => {
                    return Err(self.broker_error("writing a changelog record", error))
                }
            }
        }
    }

    /// Writes a marker (or a probe) into `partition` and waits for its offset.
    fn mark(
        &self,
        partition: i32,
        kind: RecordKind,
        epoch: Epoch,
    ) -> Result<i64, KafkaConnectorError> {
        let (reply, answer) = bounded(1);
        let payload = Self::encode(kind, epoch, partition, 0, &[]);
        self.send(
            partition,
            MARKER_KEY,
            &payload,
            Box::new(Opaque::Marker(reply)),
        )?;
        let waited = self.config.delivery_timeout + self.config.request_timeout;
        match answer.recv_timeout(waited) {
            Ok(Ok(offset)) => Ok(offset),
            Ok(Err(error)) => Err(KafkaConnectorError::Changelog {
                name: self.config.name.clone(),
                message: format!(
                    "the broker did not take the marker of partition {partition}: {error}"
                ),
            }),
            Err(_) => Err(KafkaConnectorError::Changelog {
                name: self.config.name.clone(),
                message: format!(
                    "no acknowledgement of the marker of partition {partition} within {waited:?}: check that the broker at {} answers",
                    self.config.brokers
                ),
            }),
        }
    }

    /// Takes `partition` over in `epoch`: writes the owner's marker, reads the
    /// partition from its start to the marker and folds it ([`fold`]); `counted` sees
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
        let started = Instant::now();
        let marker = self.mark(partition, RecordKind::Marker, epoch)?;
        let marked = started.elapsed();
        let records = self.read_through(partition, marker)?;
        let restored = fold(&records, counted);
        info!(changelog = %self.config.topic, partition, %epoch, records = records.len(),
            counted = restored.counted, fenced = restored.fenced, keys = restored.entries.len(),
            through = ?restored.position.map(|(_, offset)| offset),
            marker_millis = marked.as_millis() as u64,
            millis = started.elapsed().as_millis() as u64, "partition state restored from the changelog");
        Ok(restored)
    }

    /// Reads `partition` from its start through changelog offset `last` (inclusive).
    fn read_through(
        &self,
        partition: i32,
        last: i64,
    ) -> Result<Vec<StoredRecord>, KafkaConnectorError> {
        let mut reader = self.reader.lock();
        if reader.is_none() {
            let mut client = ClientConfig::new();
            client
                .set("bootstrap.servers", &self.config.brokers)
                .set("group.id", format!("{}-restore", self.config.name))
                .set("client.id", format!("{}-restore", self.config.name))
                .set("enable.auto.commit", "false")
                .set("enable.auto.offset.store", "false")
                .set("enable.partition.eof", "false")
                .set("auto.offset.reset", "earliest")
                // a restore waits on each fetch: ask the broker not to hold it back
                .set("fetch.wait.max.ms", "10")
                .set_log_level(RDKafkaLogLevel::Warning);
            for (key, value) in &self.config.properties {
                client.set(key, value);
            }
            *reader = Some(
                client
                    .create()
                    .map_err(|error| KafkaConnectorError::Config {
                        name: self.config.name.clone(),
                        error: Box::new(error),
                    })?,
            );
        }
        let Some(consumer) = reader.as_ref() else {
            unreachable!("made above");
        };
        // from offset 0, not `Offset::Beginning`: the test broker answers the offset
        // lookup that needs after about 500 ms, a restore's whole cost otherwise; a log
        // whose start was removed (retention) is out of range at 0 and the consumer
        // resets to its earliest offset (`auto.offset.reset`)
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(&self.config.topic, partition, Offset::Offset(0))
            .map_err(|error| self.broker_error("assigning the changelog partition", error))?;
        consumer
            .assign(&assignment)
            .map_err(|error| self.broker_error("assigning the changelog partition", error))?;
        let deadline = Instant::now() + self.config.restore_timeout;
        let mut records = Vec::new();
        let mut result = Ok(());
        loop {
            if Instant::now() > deadline {
                result = Err(KafkaConnectorError::Changelog {
                    name: self.config.name.clone(),
                    message: format!(
                        "reading changelog partition {partition} to offset {last} took longer than {:?} (read {} records): check the broker, or raise restore_timeout",
                        self.config.restore_timeout,
                        records.len()
                    ),
                });
                break;
            }
            let Some(polled) = consumer.poll(Duration::from_millis(100)) else {
                continue;
            };
            let message = match polled {
                Ok(message) => message,
                Err(error) => {
                    warn!(changelog = %self.config.topic, partition, %error, "reading the changelog (retried)");
                    continue;
                }
            };
            if message.partition() != partition {
                continue;
            }
            let log_offset = message.offset();
            if let Some(record) = decode(
                log_offset,
                message.key().unwrap_or_default(),
                message.payload().unwrap_or_default(),
            ) {
                records.push(record);
            } else {
                warn!(changelog = %self.config.topic, partition, log_offset,
                    "a changelog record this version does not read (another format, or not written by mongoose): skipped");
            }
            if log_offset >= last {
                break;
            }
        }
        let _ = consumer.unassign();
        result.map(|()| records)
    }

    /// Reads `partition` to its current end (a probe written now marks it) without
    /// taking it over: for tools and tests that inspect a changelog.
    ///
    /// # Errors
    /// As for [`Changelog::restore`].
    pub fn read(&self, partition: i32) -> Result<Vec<StoredRecord>, KafkaConnectorError> {
        let probe = self.mark(partition, RecordKind::Probe, Epoch(0))?;
        self.read_through(partition, probe)
    }

    /// Waits until every write sent so far is acknowledged or given up.
    ///
    /// # Errors
    /// Some are still in flight after `timeout`.
    pub fn flush(&self, timeout: Duration) -> Result<(), KafkaConnectorError> {
        self.producer
            .flush(timeout)
            .map_err(|error| self.broker_error("flushing the changelog", error))
    }
}

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

    fn flush(&self, timeout: Duration) -> Result<(), CoreError> {
        Changelog::flush(self, timeout).map_err(|error| self.store_error(error))
    }
}

impl Changelog {
    fn store_error(&self, error: KafkaConnectorError) -> CoreError {
        CoreError::StateStore {
            store: self.config.topic.clone(),
            error: Box::new(error),
        }
    }
}
