//! The harness's calls to its broker (librdkafka through `rdkafka`, and
//! `mongoose_kafka::admin`): topics made, deleted, given partitions and a retention,
//! records deleted, produced and read back `read_committed`, watermarks and a group's
//! committed offsets, and a ledger's state summed over its changelog's partitions.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_ledger::LedgerState;
use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, NewPartitions, ResourceSpecifier};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use super::broker::BROKER_CALL;

/// A producer's context that counts failed deliveries.
#[derive(Debug, Default)]
pub(super) struct Deliveries {
    failed: Arc<AtomicUsize>,
    first_error: std::sync::Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: Self::DeliveryOpaque) {
        if let Err((error, _)) = result {
            self.failed.fetch_add(1, Ordering::SeqCst);
            if let Ok(mut first) = self.first_error.lock() {
                first.get_or_insert_with(|| error.to_string());
            }
        }
    }
}

/// The harness's producer of input records: idempotent (each partition's offsets are
/// the order the lines were handed over, without a gap or a repeat), `acks=all`, and
/// patient (a record waits out a broker restart).
pub(super) struct InputProducer {
    producer: BaseProducer<Deliveries>,
}

impl std::fmt::Debug for InputProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InputProducer")
    }
}

impl InputProducer {
    /// A producer to `brokers`.
    ///
    /// # Errors
    /// librdkafka refuses the configuration.
    pub(super) fn new(brokers: &str) -> Result<InputProducer, String> {
        let producer = client_config(brokers)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "5")
            .set("message.timeout.ms", "180000")
            .create_with_context(Deliveries::default())
            .map_err(|error| format!("cannot make the input producer: {error}"))?;
        Ok(InputProducer { producer })
    }

    /// Writes `lines` to `partition` of `topic` and waits until each is acknowledged.
    ///
    /// # Errors
    /// A record was refused or not acknowledged within 3 minutes.
    pub(super) fn send(&self, topic: &str, partition: i32, lines: &[&str]) -> Result<(), String> {
        self.await_partition(topic, partition)?;
        for line in lines {
            loop {
                match self.producer.send(
                    BaseRecord::<(), str>::to(topic)
                        .partition(partition)
                        .payload(*line),
                ) {
                    Ok(()) => break,
                    Err((error, _))
                        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) =>
                    {
                        self.producer.poll(Duration::from_millis(10));
                    }
                    Err((error, _)) => {
                        return Err(format!(
                            "cannot produce to {topic} partition {partition}: {error}"
                        ))
                    }
                }
            }
            self.producer.poll(Duration::ZERO);
        }
        self.producer
            .flush(Duration::from_secs(180))
            .map_err(|error| {
                format!("the broker did not acknowledge the lines produced to {topic} partition {partition} in 3 minutes: {error}")
            })?;
        let context = self.producer.context();
        if context.failed.load(Ordering::SeqCst) > 0 {
            let first = context
                .first_error
                .lock()
                .ok()
                .and_then(|first| first.clone())
                .unwrap_or_default();
            return Err(format!(
                "{} records produced to {topic} were not delivered (first: {first})",
                context.failed.load(Ordering::SeqCst)
            ));
        }
        Ok(())
    }
}

impl InputProducer {
    /// Waits (up to a minute) until the producer's metadata has `partition` of `topic`:
    /// a record for a partition its metadata lacks (partitions just added, a topic just
    /// made again) fails at once with "Unknown partition" (chaos kafka seed
    /// 1796658157060: 1,597 records, a harness failure, not the server's).
    fn await_partition(&self, topic: &str, partition: i32) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let known = self
                .producer
                .client()
                .fetch_metadata(Some(topic), Duration::from_secs(5));
            match known {
                Ok(metadata)
                    if metadata.topics().iter().any(|known| {
                        known.name() == topic
                            && known.error().is_none()
                            && known.partitions().len() as i64 > i64::from(partition)
                    }) =>
                {
                    return Ok(())
                }
                _ if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                other => {
                    return Err(format!(
                        "the input producer never saw partition {partition} of {topic} in a minute: {:?}",
                        other.map(|metadata| metadata.topics().len())
                    ))
                }
            }
        }
    }
}

/// A client of `brokers` that bootstraps again after 5 s without a usable broker (as
/// the server's consumers do, `mongoose_kafka::REBOOTSTRAP_AFTER_MS`): a broker paused
/// past its KRaft session answers metadata with no broker at first, and librdkafka's own
/// re-bootstrap waits 5 minutes (chaos kafka seed 1796658157060: an AddPartitions timed
/// out after 60 s right after a pause).
fn client_config(brokers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers).set(
        "metadata.recovery.rebootstrap.trigger.ms",
        mongoose_kafka::REBOOTSTRAP_AFTER_MS,
    );
    config
}

fn admin(brokers: &str) -> Result<AdminClient<DefaultClientContext>, String> {
    client_config(brokers)
        .create()
        .map_err(|error| format!("cannot make an admin client: {error}"))
}

fn options() -> AdminOptions {
    AdminOptions::new()
        .operation_timeout(Some(BROKER_CALL))
        .request_timeout(Some(BROKER_CALL))
}

/// Creates `topic` with `partitions` and the topic settings `config`, waiting out a
/// deletion of the same name still under way.
///
/// # Errors
/// The broker refuses it, or the name is still taken after a minute.
pub(super) fn create_topic(
    brokers: &str,
    topic: &str,
    partitions: u32,
    config: &[(&str, &str)],
) -> Result<(), String> {
    let deadline = Instant::now() + BROKER_CALL;
    loop {
        let created = mongoose_kafka::admin::create_topic(
            brokers,
            topic,
            partitions as i32,
            config,
            BROKER_CALL,
        );
        match created {
            Ok(true) => return Ok(()),
            // the old topic of this name is still being deleted
            Ok(false) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
            }
            Ok(false) => {
                return Err(format!(
                    "the topic {topic} still exists a minute after its deletion"
                ))
            }
            Err(error) if Instant::now() < deadline => {
                let text = error.to_string();
                if !text.contains("marked for deletion") && !text.contains("TopicAlreadyExists") {
                    return Err(format!("cannot create the topic {topic}: {text}"));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(error) => return Err(format!("cannot create the topic {topic}: {error}")),
        }
    }
}

/// Deletes `topic` and waits until the broker no longer lists it.
///
/// # Errors
/// The broker refuses the deletion or still lists the topic after a minute.
pub(super) fn delete_topic(brokers: &str, topic: &str) -> Result<(), String> {
    let admin = admin(brokers)?;
    let results = mongoose_kafka::block_on(admin.delete_topics(&[topic], &options()))
        .map_err(|error| format!("cannot delete the topic {topic}: {error}"))?;
    for result in results {
        if let Err((_, code)) = result {
            return Err(format!("cannot delete the topic {topic}: {code}"));
        }
    }
    let deadline = Instant::now() + BROKER_CALL;
    while partitions_of(brokers, topic)? > 0 {
        if Instant::now() >= deadline {
            return Err(format!(
                "the broker still lists {topic} a minute after its deletion"
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// Gives `topic` `count` partitions in all.
///
/// # Errors
/// The broker refuses it.
pub(super) fn add_partitions(brokers: &str, topic: &str, count: u32) -> Result<(), String> {
    let admin = admin(brokers)?;
    let results = mongoose_kafka::block_on(
        admin.create_partitions(&[NewPartitions::new(topic, count as usize)], &options()),
    )
    .map_err(|error| format!("cannot add partitions to {topic}: {error}"))?;
    for result in results {
        if let Err((_, code)) = result {
            return Err(format!("cannot give {topic} {count} partitions: {code}"));
        }
    }
    Ok(())
}

/// Sets the topic settings of `topic` to `config` (every other one back to the
/// broker's default: the call replaces the topic's whole configuration).
///
/// # Errors
/// The broker refuses it.
pub(super) fn set_topic_config(
    brokers: &str,
    topic: &str,
    config: &[(&str, &str)],
) -> Result<(), String> {
    let admin = admin(brokers)?;
    let mut change = AlterConfig::new(ResourceSpecifier::Topic(topic));
    for (key, value) in config {
        change = change.set(key, value);
    }
    let results = mongoose_kafka::block_on(admin.alter_configs(&[change], &options()))
        .map_err(|error| format!("cannot change the settings of {topic}: {error}"))?;
    for result in results {
        if let Err((_, code)) = result {
            return Err(format!("cannot change the settings of {topic}: {code}"));
        }
    }
    Ok(())
}

/// Deletes the records of `partition` of `topic` below `offset`.
///
/// # Errors
/// The broker refuses it.
pub(super) fn delete_records(
    brokers: &str,
    topic: &str,
    partition: u32,
    offset: i64,
) -> Result<(), String> {
    let admin = admin(brokers)?;
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, partition as i32, Offset::Offset(offset))
        .map_err(|error| format!("cannot name {topic} partition {partition}: {error}"))?;
    let result = mongoose_kafka::block_on(admin.delete_records(&list, &options()))
        .map_err(|error| format!("cannot delete records of {topic}: {error}"))?;
    for element in result.elements() {
        if let Err(error) = element.error() {
            return Err(format!(
                "cannot delete the records of {topic} partition {partition} below {offset}: {error}"
            ));
        }
    }
    Ok(())
}

fn consumer(brokers: &str, group: Option<&str>) -> Result<BaseConsumer, String> {
    let mut config = client_config(brokers);
    config.set("enable.auto.commit", "false");
    config.set(
        "group.id",
        group.map_or_else(
            || format!("chaos-reader-{}", std::process::id()),
            str::to_owned,
        ),
    );
    config
        .create()
        .map_err(|error| format!("cannot make a consumer: {error}"))
}

/// The partitions of `topic` the broker lists (0: none, the topic does not exist).
///
/// # Errors
/// The broker does not answer.
pub(super) fn partitions_of(brokers: &str, topic: &str) -> Result<u32, String> {
    let consumer = consumer(brokers, None)?;
    let metadata = consumer
        .fetch_metadata(Some(topic), BROKER_CALL)
        .map_err(|error| format!("cannot read the metadata of {topic}: {error}"))?;
    Ok(metadata
        .topics()
        .iter()
        .filter(|found| found.name() == topic && found.error().is_none())
        .map(|found| found.partitions().len() as u32)
        .sum())
}

/// The low and high watermarks of `partition` of `topic` (its first record and the
/// offset its next record gets).
///
/// # Errors
/// The broker does not answer.
pub(super) fn watermarks(brokers: &str, topic: &str, partition: u32) -> Result<(i64, i64), String> {
    let consumer = consumer(brokers, None)?;
    consumer
        .fetch_watermarks(topic, partition as i32, BROKER_CALL)
        .map_err(|error| {
            format!("cannot read the watermarks of {topic} partition {partition}: {error}")
        })
}

/// The offsets `group` committed of `topic`'s `partitions` (-1: none).
///
/// # Errors
/// The broker does not answer.
pub(super) fn committed(
    brokers: &str,
    group: &str,
    topic: &str,
    partitions: u32,
) -> Result<Vec<i64>, String> {
    mongoose_kafka::admin::committed_offsets(brokers, group, topic, partitions as i32, BROKER_CALL)
        .map_err(|error| format!("cannot read the offsets {group} committed: {error}"))
}

/// The payloads of `topic`'s partitions a `read_committed` reader sees, partition by
/// partition in log order, read up to a sentinel written to each partition (outside any
/// transaction) after everything else.
///
/// # Errors
/// The broker does not answer, or a sentinel does not come back within 2 minutes.
pub(super) fn read_committed(brokers: &str, topic: &str) -> Result<Vec<String>, String> {
    const SENTINEL: &str = "chaos-sentinel";
    let partitions = partitions_of(brokers, topic)?;
    if partitions == 0 {
        return Ok(Vec::new());
    }
    let producer: BaseProducer = client_config(brokers)
        .create()
        .map_err(|error| format!("cannot make the sentinel producer: {error}"))?;
    for partition in 0..partitions {
        producer
            .send(
                BaseRecord::<(), str>::to(topic)
                    .partition(partition as i32)
                    .payload(SENTINEL),
            )
            .map_err(|(error, _)| format!("cannot write a sentinel to {topic}: {error}"))?;
    }
    producer
        .flush(BROKER_CALL)
        .map_err(|error| format!("the sentinels of {topic} were not acknowledged: {error}"))?;
    let consumer: BaseConsumer = client_config(brokers)
        .set(
            "group.id",
            format!("chaos-committed-reader-{}", std::process::id()),
        )
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|error| format!("cannot make the read_committed reader: {error}"))?;
    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions {
        assignment
            .add_partition_offset(topic, partition as i32, Offset::Beginning)
            .map_err(|error| format!("cannot assign {topic}: {error}"))?;
    }
    consumer
        .assign(&assignment)
        .map_err(|error| format!("cannot assign {topic}: {error}"))?;
    let mut payloads = Vec::new();
    let mut ended = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while ended < partitions {
        if Instant::now() >= deadline {
            return Err(format!(
                "the sentinels of {topic} did not come back in 2 minutes ({ended} of {partitions}, {} records read): a transaction the sink left open holds them back",
                payloads.len()
            ));
        }
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = match message {
            Ok(message) => message,
            Err(KafkaError::PartitionEOF(_)) => continue,
            Err(error) => return Err(format!("cannot read {topic}: {error}")),
        };
        let payload = String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned();
        if payload == SENTINEL {
            ended += 1;
        } else {
            payloads.push(
                payload
                    .strip_suffix('\n')
                    .map_or(payload.clone(), str::to_owned),
            );
        }
    }
    Ok(payloads)
}

/// The ledger state a changelog holds, summed over its partitions: each account's
/// last balance, the lines applied (the ledger's checks read it as they read
/// `state/`).
///
/// # Errors
/// The changelog cannot be read, or holds a record that is not a ledger change.
pub(super) fn changelog_state(brokers: &str, changelog: &str) -> Result<LedgerState, String> {
    let partitions = partitions_of(brokers, changelog)?;
    if partitions == 0 {
        return Ok(LedgerState::default());
    }
    // the changelog is its own "input topic" here: a reader only, whatever partitions
    // the input has now
    let store = mongoose_kafka::changelog::Changelog::open(
        mongoose_kafka::changelog::ChangelogConfig::new("chaos-check", brokers, changelog),
        changelog,
        Arc::new(|_, _| {}),
    )
    .map_err(|error| format!("cannot open the changelog {changelog}: {error}"))?;
    let mut summed = LedgerState::default();
    for partition in 0..partitions {
        let records = store.read(partition as i32).map_err(|error| {
            format!("cannot read partition {partition} of {changelog}: {error}")
        })?;
        let restored = mongoose_kafka::changelog::fold(&records, |_| {});
        let state = mongoose_ledger::partition_state(&restored)
            .map_err(|error| format!("partition {partition} of {changelog}: {error}"))?;
        summed.applied += state.applied;
        summed.rejected += state.rejected;
        for (account, balance) in state.balances {
            summed.balances.insert(account, balance);
        }
    }
    Ok(summed)
}
