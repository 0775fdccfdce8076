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
//! * **Or in transactions** ([`ChangelogConfig::transactions`], the ledger's default):
//!   one transactional producer per partition (`transactional.id` =
//!   `<topic>-<partition>`, the same on every member) commits the partition's changes,
//!   the outputs written with them ([`Changelog::write_output`]: an alert exists exactly
//!   when its change does) and, with a group, the input offsets they cover, every commit interval; a
//!   write's tag is durable when its transaction commits. Taking a partition over
//!   initialises its producer first: the broker aborts what the previous owner left
//!   open and fences that owner, whose later commits fail ([`WriteFailure::Fenced`]).
//!   Restores read `read_committed`.
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

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
pub use mongoose_core::state_store::{
    OnDurable, RecordKind, RestoredPartition, StoredRecord, WriteFailure,
};
use mongoose_core::Epoch;
use parking_lot::Mutex;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerGroupMetadata};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, ClientContext};
use tracing::{debug, info, warn};

use crate::error::KafkaConnectorError;

mod grow;
mod handle;
mod heal;
mod identity;
mod records;
mod restore;
mod store;
mod transactions;

pub use handle::Changelog;
pub use identity::position_topic;
use records::StoredValue;
pub use records::{decode, fold, FORMAT, MARKER_KEY, PROBE_KEY};
use transactions::Transactions;
pub use transactions::TransactionsConfig;

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
    /// Exactly once: each partition's changes, the outputs written with them and (with a
    /// group) the input offsets they cover commit in one transaction ([`TransactionsConfig`]).
    /// `None`: each change is acknowledged on its own (idempotent, at least once).
    pub transactions: Option<TransactionsConfig>,
    /// Where the outputs written with the state go ([`Changelog::write_output`]; needs
    /// `transactions`).
    pub outputs_topic: Option<String>,
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
            transactions: None,
            outputs_topic: None,
        }
    }
}

/// What a write's delivery report goes back to.
enum Opaque {
    /// A state change: its tag.
    Write(u64),
    /// A marker or probe: where its offset (or the error) goes.
    Marker(Sender<Result<i64, String>>),
    /// A change or an output in a transaction: durable when the transaction commits
    /// (a failed delivery fails the commit).
    InTransaction,
}

/// Sends one record, waiting while librdkafka's queue is full.
fn send_record(
    producer: &ThreadedProducer<ChangelogContext>,
    (topic, partition): (&str, Option<i32>),
    key: &[u8],
    payload: &[u8],
    opaque: Box<Opaque>,
) -> Result<(), KafkaError> {
    let mut record = BaseRecord::with_opaque_to(topic, opaque)
        .key(key)
        .payload(payload);
    if let Some(partition) = partition {
        record = record.partition(partition);
    }
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((error, returned))
                if error.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) =>
            {
                record = returned;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((error, _)) => return Err(error),
        }
    }
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
            Opaque::Write(tag) => {
                (self.on_durable)(tag, outcome.map(|_| ()).map_err(WriteFailure::GivenUp));
            }
            Opaque::Marker(reply) => {
                let _ = reply.send(outcome);
            }
            Opaque::InTransaction => {
                if let Err(error) = outcome {
                    debug!(changelog = %self.name, %error, "a record of a transaction was not delivered: the transaction does not commit");
                }
            }
        }
    }
}

/// What a [`Changelog`] is made of: its clients, its partitions' transactions.
struct ChangelogCore {
    config: ChangelogConfig,
    producer: ThreadedProducer<ChangelogContext>,
    /// The restore reader (made at the first restore, kept).
    reader: Mutex<Option<BaseConsumer>>,
    /// The reader of what is written, open transactions included (`read_uncommitted`):
    /// a takeover's check for a newer owner (made at the first, kept).
    peek_reader: Mutex<Option<BaseConsumer>>,
    /// With `config.transactions`: the partitions' transactional producers.
    transactions: Option<Arc<Transactions>>,
    /// Where the write callbacks go (the transactional producers' too).
    on_durable: OnDurable,
    /// The input topic the changelog is co-partitioned with.
    input_topic: String,
    /// The changelog's partitions as last seen (it grows with its input: [`grow`]).
    partitions: AtomicI32,
}

impl ChangelogCore {
    /// [`Changelog::open`]'s work.
    pub(super) fn open(
        config: ChangelogConfig,
        input_topic: &str,
        on_durable: OnDurable,
    ) -> Result<Self, KafkaConnectorError> {
        let producer = Self::producer(
            &config,
            &on_durable,
            &[
                ("client.id", format!("{}-changelog", config.name)),
                (
                    "message.timeout.ms",
                    config.delivery_timeout.as_millis().to_string(),
                ),
            ],
        )?;
        if config.outputs_topic.is_some() && config.transactions.is_none() {
            return Err(KafkaConnectorError::Changelog {
                name: config.name.clone(),
                message: "outputs are written with the state only in transactions: turn transactions on, or send the outputs to a sink".to_owned(),
            });
        }
        let transactions = match &config.transactions {
            None => None,
            Some(settings) => {
                let group = match &settings.group {
                    None => None,
                    Some(group) => Some(Self::group_metadata(&config, group)?),
                };
                Some(Transactions::start(
                    settings.clone(),
                    &config.name,
                    input_topic,
                    Arc::clone(&on_durable),
                    group,
                    config.request_timeout,
                ))
            }
        };
        let changelog = ChangelogCore {
            config,
            producer,
            reader: Mutex::new(None),
            peek_reader: Mutex::new(None),
            transactions,
            on_durable,
            input_topic: input_topic.to_owned(),
            partitions: AtomicI32::new(0),
        };
        changelog.ensure_topic(input_topic)?;
        Ok(changelog)
    }

    /// A producer of the changelog: idempotent, `acks=all`, `own` settings, then the
    /// config's properties (they win).
    fn producer(
        config: &ChangelogConfig,
        on_durable: &OnDurable,
        own: &[(&str, String)],
    ) -> Result<ThreadedProducer<ChangelogContext>, KafkaConnectorError> {
        let mut client = ClientConfig::new();
        client
            .set("bootstrap.servers", &config.brokers)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "2")
            // a metadata request must not create the changelog topic: a broker with
            // `auto.create.topics.enable` (Apache Kafka's default) would make it with its
            // default partition count and not compacted, before `ensure_topic` can
            .set("allow.auto.create.topics", "false")
            .set_log_level(RDKafkaLogLevel::Warning);
        for (key, value) in own {
            client.set(*key, value);
        }
        for (key, value) in &config.properties {
            client.set(key, value);
        }
        client
            .create_with_context(ChangelogContext {
                name: config.name.clone(),
                on_durable: Arc::clone(on_durable),
            })
            .map_err(|error| KafkaConnectorError::Config {
                name: config.name.clone(),
                error: Box::new(error),
            })
    }

    /// The metadata a transaction commits `group`'s offsets with: a consumer of the group
    /// that never joins it gives it without a member or a generation.
    fn group_metadata(
        config: &ChangelogConfig,
        group: &str,
    ) -> Result<ConsumerGroupMetadata, KafkaConnectorError> {
        let mut client = ClientConfig::new();
        client
            .set("bootstrap.servers", &config.brokers)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set_log_level(RDKafkaLogLevel::Warning);
        for (key, value) in &config.properties {
            client.set(key, value);
        }
        let consumer: BaseConsumer =
            client
                .create()
                .map_err(|error| KafkaConnectorError::Config {
                    name: config.name.clone(),
                    error: Box::new(error),
                })?;
        consumer
            .group_metadata()
            .ok_or_else(|| KafkaConnectorError::Changelog {
                name: config.name.clone(),
                message: format!("no consumer group metadata for group '{group}'"),
            })
    }

    /// A new transactional producer for `partition`, initialised: the broker aborts what
    /// an earlier producer of the partition left open and fences it.
    fn transactional_producer(
        &self,
        partition: i32,
        settings: &TransactionsConfig,
    ) -> Result<ThreadedProducer<ChangelogContext>, KafkaConnectorError> {
        let producer = Self::producer(
            &self.config,
            &self.on_durable,
            &[
                (
                    "client.id",
                    format!("{}-changelog-{partition}", self.config.name),
                ),
                (
                    "transactional.id",
                    transactions::transactional_id(&self.config.topic, partition),
                ),
                (
                    "transaction.timeout.ms",
                    settings.transaction_timeout.as_millis().to_string(),
                ),
                (
                    "message.timeout.ms",
                    self.config
                        .delivery_timeout
                        .min(settings.transaction_timeout)
                        .as_millis()
                        .to_string(),
                ),
            ],
        )?;
        // a retriable failure (the transaction coordinator moving to another broker while
        // one is down: "Timed out waiting for operation to finish, retry call to
        // resume") is retried, as a commit is, up to six request timeouts: failing here
        // quarantined the ledger while a broker of three was restarting
        let deadline = std::time::Instant::now() + self.config.request_timeout * 6;
        loop {
            match producer.init_transactions(self.config.request_timeout) {
                Ok(()) => return Ok(producer),
                Err(error)
                    if transactions::retriable(&error) && std::time::Instant::now() < deadline =>
                {
                    tracing::warn!(
                        changelog = %self.config.name,
                        partition,
                        %error,
                        "initialising the transactions of a partition: the broker asks to retry"
                    );
                }
                Err(error) => {
                    return Err(self.broker_error(
                        &format!("initialising the transactions of partition {partition}"),
                        error,
                    ))
                }
            }
        }
    }

    /// [`Changelog::topic`]'s work.
    pub(super) fn topic(&self) -> &str {
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
        if let Some(outputs) = &self.config.outputs_topic {
            if self.partitions_of(outputs)?.is_none() {
                let created = crate::admin::create_topic_with(
                    &self.config.brokers,
                    &self.config.properties,
                    outputs,
                    i32::try_from(input).unwrap_or(i32::MAX),
                    &[],
                    self.config.request_timeout,
                )?;
                if created {
                    info!(outputs = %outputs, partitions = input, "outputs topic created");
                }
            }
        }
        if let Some(existing) = self.partitions_of(&self.config.topic)? {
            if existing < input {
                // the state of input partition P lives in changelog partition P: partitions
                // added to the input are added to the changelog (empty states)
                return self.grow(
                    existing,
                    input,
                    &format!("the input '{input_topic}' has {input}"),
                );
            }
            self.partitions.store(
                i32::try_from(existing).unwrap_or(i32::MAX),
                Ordering::Relaxed,
            );
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
        self.partitions
            .store(i32::try_from(input).unwrap_or(i32::MAX), Ordering::Relaxed);
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

    /// [`Changelog::write`]'s work.
    pub(super) fn write(
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
        if let Some(transactions) = &self.transactions {
            return self.write_in_transaction(
                transactions,
                partition,
                (&self.config.topic, Some(partition)),
                key,
                &payload,
                Some((tag, offset)),
            );
        }
        self.send(
            &self.producer,
            (&self.config.topic, Some(partition)),
            key,
            &payload,
            Box::new(Opaque::Write(tag)),
        )
    }

    /// [`Changelog::write_output`]'s work.
    pub(super) fn write_output(
        &self,
        partition: i32,
        key: &[u8],
        payload: &[u8],
    ) -> Result<(), KafkaConnectorError> {
        let (Some(transactions), Some(_)) = (&self.transactions, &self.config.outputs_topic) else {
            return Err(KafkaConnectorError::Changelog {
                name: self.config.name.clone(),
                message:
                    "this changelog writes no outputs: give it an outputs topic and transactions"
                        .to_owned(),
            });
        };
        let Some(producer) = transactions.partition(partition) else {
            return Err(self.not_taken_over(partition));
        };
        // held until the change after it: the two go into one transaction together (a
        // commit between them would make the output visible without its change)
        producer.lock().hold_output(key, payload);
        Ok(())
    }

    fn not_taken_over(&self, partition: i32) -> KafkaConnectorError {
        KafkaConnectorError::Changelog {
            name: self.config.name.clone(),
            message: format!("partition {partition} was not taken over by this member (restore it first): its writes have no transaction"),
        }
    }

    /// Sends a change of `partition` (to `target`: the changelog topic and the
    /// partition) in the partition's open transaction (opening one if needed), after the
    /// outputs held for it, under one lock: the committer commits both or neither.
    /// `change` is the change's tag and input position. A dead producer's change is
    /// reported through `on_durable` (its held outputs dropped).
    fn write_in_transaction(
        &self,
        transactions: &Transactions,
        partition: i32,
        target: (&str, Option<i32>),
        key: &[u8],
        payload: &[u8],
        change: Option<(u64, u64)>,
    ) -> Result<(), KafkaConnectorError> {
        let Some(producer) = transactions.partition(partition) else {
            return Err(self.not_taken_over(partition));
        };
        let mut producer = producer.lock();
        let held = producer.take_outputs();
        if let Err(failure) = producer.begin(partition) {
            // fenced earlier: kept with the fenced transaction, for a retake
            let records: Vec<_> = self.pending(&held, (target, key, payload)).collect();
            if matches!(failure, WriteFailure::Fenced { .. }) {
                transactions.stash(partition, producer.epoch(), &records, change);
            }
            if let Some((tag, _)) = change {
                (self.on_durable)(tag, Err(failure));
            }
            return Ok(());
        }
        let sent = self.send_change(&mut producer, &held, target, key, payload);
        if let Err((error, unsent)) = sent {
            // a producer fenced by another owner: the partition's new one (a rebalance
            // moved it), which is no failure of the processor, or a stale one, whose
            // fence this member undoes (`retake`): the change is kept with the open
            // transaction and reported fenced, as its commit would be
            let Some(failure) = producer.fatal(partition) else {
                return Err(error);
            };
            info!(changelog = %self.config.name, partition, %failure, "a change was not written: the partition's producer ended");
            for (target, key, payload) in self.pending(&held, (target, key, payload)).skip(unsent) {
                producer.remember(target, key, payload);
            }
            producer.holds(change.map(|(tag, _)| tag), change.map(|(_, offset)| offset));
            transactions.fail_open(partition, &mut producer);
            return Ok(());
        }
        producer.holds(change.map(|(tag, _)| tag), change.map(|(_, offset)| offset));
        Ok(())
    }

    /// The records a change sends, in order: the outputs held for it, then the change.
    fn pending<'a>(
        &'a self,
        held: &'a [(Vec<u8>, Vec<u8>)],
        change: transactions::PendingRecord<'a>,
    ) -> impl Iterator<Item = transactions::PendingRecord<'a>> {
        let outputs = self.config.outputs_topic.as_deref().unwrap_or_default();
        held.iter()
            .map(move |(key, payload)| ((outputs, None), key.as_slice(), payload.as_slice()))
            .chain(std::iter::once(change))
    }

    /// Sends the held outputs and the change in the open transaction, keeping each
    /// record to send again if the broker makes the transaction abort.
    /// On a failure: the error and how many of the records (the held outputs, then the
    /// change) went before it.
    fn send_change(
        &self,
        producer: &mut transactions::TxnPartition,
        held: &[(Vec<u8>, Vec<u8>)],
        target: (&str, Option<i32>),
        key: &[u8],
        payload: &[u8],
    ) -> Result<(), (KafkaConnectorError, usize)> {
        let mut went = 0;
        if let Some(outputs) = &self.config.outputs_topic {
            for (output_key, output) in held {
                self.send(
                    &producer.producer,
                    (outputs, None),
                    output_key,
                    output,
                    Box::new(Opaque::InTransaction),
                )
                .map_err(|error| (error, went))?;
                producer.remember((outputs, None), output_key, output);
                went += 1;
            }
        }
        self.send(
            &producer.producer,
            target,
            key,
            payload,
            Box::new(Opaque::InTransaction),
        )
        .map_err(|error| (error, went))?;
        producer.remember(target, key, payload);
        Ok(())
    }

    fn send(
        &self,
        producer: &ThreadedProducer<ChangelogContext>,
        (topic, partition): (&str, Option<i32>),
        key: &[u8],
        payload: &[u8],
        opaque: Box<Opaque>,
    ) -> Result<(), KafkaConnectorError> {
        send_record(producer, (topic, partition), key, payload, opaque)
            .map_err(|error| self.broker_error("writing a changelog record", error))
    }

    /// [`Changelog::flush`]'s work.
    pub(super) fn flush(&self, timeout: Duration) -> Result<(), KafkaConnectorError> {
        if let Some(transactions) = &self.transactions {
            let deadline = Instant::now() + timeout;
            loop {
                transactions.commit_all();
                if !transactions.any_open() {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(KafkaConnectorError::Changelog {
                        name: self.config.name.clone(),
                        message: format!("transactions still open after {timeout:?}: their changes are not committed and their input is read again"),
                    });
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.producer
            .flush(timeout)
            .map_err(|error| self.broker_error("flushing the changelog", error))
    }
}
