//! The broker calls the connector, its tools, benches and tests share: creating a
//! topic, growing its partitions, and reading a consumer group's committed offsets.

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::error::KafkaConnectorError;

/// Creates `topic` with `partitions` partitions (replicated as the broker's
/// `default.replication.factor` says) and the topic settings `config`
/// (`("cleanup.policy", "compact")`). `Ok(true)`: created; `Ok(false)`: it existed
/// already (another member made it first, for instance).
///
/// # Errors
/// The admin client cannot be made, or the broker refuses the topic.
pub fn create_topic(
    brokers: &str,
    topic: &str,
    partitions: i32,
    config: &[(&str, &str)],
    timeout: Duration,
) -> Result<bool, KafkaConnectorError> {
    create_topic_with(brokers, &[], topic, partitions, config, timeout)
}

/// [`create_topic`] by a client with more librdkafka `properties` (the security
/// settings of [`crate::KafkaSecurity`], for instance).
///
/// # Errors
/// The admin client cannot be made, or the broker refuses the topic.
pub fn create_topic_with(
    brokers: &str,
    properties: &[(String, String)],
    topic: &str,
    partitions: i32,
    config: &[(&str, &str)],
    timeout: Duration,
) -> Result<bool, KafkaConnectorError> {
    let mut client = ClientConfig::new();
    client.set("bootstrap.servers", brokers);
    for (key, value) in properties {
        client.set(key, value);
    }
    let admin: AdminClient<DefaultClientContext> =
        client
            .create()
            .map_err(|error| KafkaConnectorError::Config {
                name: topic.to_owned(),
                error: Box::new(error),
            })?;
    // -1: the broker's `default.replication.factor` (1 on a single test node, what the
    // cluster's operator chose on a real one: a changelog replicated once on a
    // three-broker cluster would lose its state with one broker)
    let mut new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(-1));
    for (key, value) in config {
        new_topic = new_topic.set(key, value);
    }
    let options = AdminOptions::new().operation_timeout(Some(timeout));
    let results =
        crate::block_on(admin.create_topics([&new_topic], &options)).map_err(|error| {
            KafkaConnectorError::broker(topic, "creating the topic", brokers, error)
        })?;
    let mut created = false;
    for result in results {
        match result {
            Ok(_) => created = true,
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => {
                return Err(KafkaConnectorError::broker(
                    topic,
                    "creating the topic",
                    brokers,
                    KafkaError::AdminOp(code),
                ))
            }
        }
    }
    Ok(created)
}

/// Grows `topic` to `partitions` partitions (CreatePartitions). `Ok(true)`: grown;
/// `Ok(false)`: it had that many or more already (another member grew it first, for
/// instance). Partitions are only ever added: a topic with more is left as it is.
///
/// # Errors
/// The admin client cannot be made, or the broker refuses (not authorised, for
/// instance).
pub fn add_partitions(
    brokers: &str,
    properties: &[(String, String)],
    topic: &str,
    partitions: i32,
    timeout: Duration,
) -> Result<bool, KafkaConnectorError> {
    let mut client = ClientConfig::new();
    client.set("bootstrap.servers", brokers);
    for (key, value) in properties {
        client.set(key, value);
    }
    let admin: AdminClient<DefaultClientContext> =
        client
            .create()
            .map_err(|error| KafkaConnectorError::Config {
                name: topic.to_owned(),
                error: Box::new(error),
            })?;
    let grown = NewPartitions::new(topic, usize::try_from(partitions.max(1)).unwrap_or(1));
    let options = AdminOptions::new().operation_timeout(Some(timeout));
    let results =
        crate::block_on(admin.create_partitions([&grown], &options)).map_err(|error| {
            KafkaConnectorError::broker(topic, "adding partitions to the topic", brokers, error)
        })?;
    let mut added = false;
    for result in results {
        match result {
            Ok(_) => added = true,
            // "Topic already has N partitions": someone grew it first, or it is larger
            Err((_, RDKafkaErrorCode::InvalidPartitions)) => {}
            Err((_, code)) => {
                return Err(KafkaConnectorError::broker(
                    topic,
                    "adding partitions to the topic",
                    brokers,
                    KafkaError::AdminOp(code),
                ))
            }
        }
    }
    Ok(added)
}

/// The committed offsets of consumer group `group` for `topic`'s partitions
/// `0..partitions`, in partition order; -1 for a partition the group has committed
/// nothing of. Reads without joining the group.
///
/// # Errors
/// The consumer cannot be made, or the broker does not answer within `timeout`.
pub fn committed_offsets(
    brokers: &str,
    group: &str,
    topic: &str,
    partitions: i32,
    timeout: Duration,
) -> Result<Vec<i64>, KafkaConnectorError> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|error| KafkaConnectorError::Config {
            name: group.to_owned(),
            error: Box::new(error),
        })?;
    committed_offsets_of(&consumer, topic, partitions, timeout).map_err(|error| {
        KafkaConnectorError::broker(group, "reading the committed offsets", brokers, error)
    })
}

/// [`committed_offsets`] through `consumer` (its `group.id` is the group read), for a
/// caller that reads them again and again.
///
/// # Errors
/// The broker does not answer within `timeout`.
pub fn committed_offsets_of<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partitions: i32,
    timeout: Duration,
) -> Result<Vec<i64>, KafkaError> {
    let mut list = TopicPartitionList::new();
    for partition in 0..partitions {
        list.add_partition(topic, partition);
    }
    let committed = committed_retrying(consumer, &list, timeout)?;
    Ok((0..partitions)
        .map(|partition| {
            match committed
                .find_partition(topic, partition)
                .map(|element| element.offset())
            {
                Some(Offset::Offset(offset)) => offset,
                _ => -1,
            }
        })
        .collect())
}

/// The offset `consumer`'s group committed of one `partition` of `topic` (`None`: none).
///
/// # Errors
/// The broker does not answer within `timeout`.
pub(crate) fn committed_offset_of<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partition: i32,
    timeout: Duration,
) -> Result<Option<i64>, KafkaError> {
    let mut list = TopicPartitionList::new();
    list.add_partition(topic, partition);
    Ok(committed_retrying(consumer, &list, timeout)?
        .find_partition(topic, partition)
        .and_then(|element| match element.offset() {
            Offset::Offset(offset) => Some(offset),
            _ => None,
        }))
}

/// Whether `error` says only that the group's coordinator is moving or still loading
/// (a broker just started, restarted, or the coordinator moved): the same request
/// answers once it has settled.
pub(crate) fn is_coordinator_settling(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::NotCoordinator
                | RDKafkaErrorCode::CoordinatorLoadInProgress
                | RDKafkaErrorCode::CoordinatorNotAvailable
        )
    )
}

/// The committed offsets of `list` for `consumer`'s group, asked again while the group's
/// coordinator is settling ([`is_coordinator_settling`]), until `timeout` has passed.
///
/// # Errors
/// Any other error, or the coordinator still settling after `timeout`.
pub(crate) fn committed_retrying<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    list: &TopicPartitionList,
    timeout: Duration,
) -> Result<TopicPartitionList, KafkaError> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match consumer.committed_offsets(list.clone(), left) {
            Err(error) if is_coordinator_settling(&error) && !left.is_zero() => {
                tracing::debug!(%error, "the group coordinator is settling; asking again");
                std::thread::sleep(Duration::from_millis(100).min(left));
            }
            result => return result,
        }
    }
}
