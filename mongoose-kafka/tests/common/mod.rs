//! Fixtures shared by the tests against the real broker: the broker's address (and the
//! skip rule when it is not running), unique topic and group names, topic creation,
//! a producer of numbered records, and waiting for a condition with a generous
//! deadline.
#![allow(dead_code, unreachable_pub)]

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

/// The test broker (`cargo xtask broker start`), or `MONGOOSE_KAFKA_BROKERS`.
pub fn brokers() -> String {
    std::env::var("MONGOOSE_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:19092".to_owned())
}

fn reachable(brokers: &str) -> bool {
    brokers.split(',').any(|address| {
        address
            .to_socket_addrs()
            .ok()
            .and_then(|mut addresses| addresses.next())
            .is_some_and(|address| {
                TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_ok()
            })
    })
}

/// Says that a test was skipped, past the test harness's capture (which takes only the
/// print macros' output), so that it shows in a plain `cargo test`.
pub fn skipped(message: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{message}");
}

/// The broker's address, or `None` (with a message) when it does not answer and
/// `MONGOOSE_REQUIRE_BROKER` is unset; with it set (CI), a missing broker fails.
pub fn broker_or_skip(test: &str) -> Option<String> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_test_writer()
        .try_init();
    let brokers = brokers();
    if reachable(&brokers) {
        return Some(brokers);
    }
    if std::env::var_os("MONGOOSE_REQUIRE_BROKER").is_some() {
        panic!("{test}: no Kafka broker answers at {brokers} and MONGOOSE_REQUIRE_BROKER is set: start it with `cargo xtask broker start`");
    }
    skipped(&format!("SKIPPED {test}: no Kafka broker answers at {brokers}; start one with `cargo xtask broker start` (CI sets MONGOOSE_REQUIRE_BROKER so that a missing broker fails)"));
    None
}

/// A name no other test run uses (the broker keeps topics and groups while it runs).
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Creates `topic` with `partitions` partitions and the `config` pairs.
pub fn create_topic(brokers: &str, topic: &str, partitions: i32, config: &[(&str, &str)]) {
    let created = mongoose_kafka::admin::create_topic(
        brokers,
        topic,
        partitions,
        config,
        Duration::from_secs(30),
    )
    .expect("create the topic");
    assert!(created, "the topic {topic} is new");
}

/// Writes `count` records `"<n>"` (n from `first`) keyed `"k<n % keys>"` to `topic` and
/// waits until all are acknowledged.
///
/// One record per batch: tansu 0.6, the first test broker, returned nothing for a fetch
/// from an offset inside a record batch (see the broker_probe example), and a consumer
/// fetches from such an offset after a pause, a rebalance or a restart from a committed
/// offset. Apache Kafka, the test broker now, has no such gap: the work-around stays
/// until batched tests replace it (issue 27).
pub fn produce(brokers: &str, topic: &str, first: u64, count: u64, keys: u64) {
    produce_batched(brokers, topic, first, count, keys, false)
}

/// [`produce`], in batches of many records when `batched` (what a real producer does).
pub fn produce_batched(
    brokers: &str,
    topic: &str,
    first: u64,
    count: u64,
    keys: u64,
    batched: bool,
) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("linger.ms", if batched { "5" } else { "0" })
        .set("batch.num.messages", if batched { "10000" } else { "1" })
        .create()
        .expect("producer");
    for n in first..first + count {
        let key = format!("k{}", n % keys);
        let payload = n.to_string();
        loop {
            match producer.send(BaseRecord::to(topic).key(&key).payload(&payload)) {
                Ok(()) => break,
                Err((error, _)) => {
                    // a full local queue: let it drain
                    assert!(
                        matches!(
                            error.rdkafka_error_code(),
                            Some(rdkafka::types::RDKafkaErrorCode::QueueFull)
                        ),
                        "produce: {error}"
                    );
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer
        .flush(Duration::from_secs(60))
        .expect("every record acknowledged");
}

/// Waits until `done` holds, failing after `seconds`.
pub fn wait_for(what: &str, seconds: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// A Kafka source into the real delivery engine: the feed, its one reader, and the
/// source (not started).
pub struct Pipeline {
    pub feed: Arc<
        mongoose_delivery::Publisher<mongoose_kafka::KafkaRecord, mongoose_core::PositionValue>,
    >,
    pub source: mongoose_kafka::KafkaSource,
    pub reader: mongoose_delivery::QueueReader<mongoose_kafka::KafkaRecord>,
}

/// A pipeline for `config` with queues of `capacity`; the feed's startup is complete.
pub fn pipeline(config: mongoose_kafka::KafkaSourceConfig, capacity: usize) -> Pipeline {
    use mongoose_core::{PositionValue, SourceOutput};
    use mongoose_delivery::{Feed, Publisher, SubscribeOptions};
    use mongoose_kafka::{KafkaRecord, KafkaSource};
    let feed: Arc<Publisher<KafkaRecord, PositionValue>> =
        Feed::builder(&config.name).queue_capacity(capacity).build();
    let output: Arc<dyn SourceOutput<KafkaRecord, PositionValue>> = feed.clone();
    let source = KafkaSource::new(config, output).expect("source");
    let reader = feed
        .subscribe("group", SubscribeOptions::default())
        .expect("subscribe")
        .take_reader()
        .expect("the group's first subscription reads");
    feed.start_complete();
    Pipeline {
        feed,
        source,
        reader,
    }
}

/// A source configuration for the tests: short session and poll intervals, so that a
/// dead member leaves the group in seconds.
pub fn source_config(brokers: &str, group: &str, topic: &str) -> mongoose_kafka::KafkaSourceConfig {
    let mut config = mongoose_kafka::KafkaSourceConfig::new("kafka", brokers, group, topic);
    config.session_timeout = Duration::from_secs(6);
    config.max_poll_interval = Duration::from_secs(10);
    config
}

/// What a test's processor saw of one record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub partition: i32,
    pub offset: i64,
    pub epoch: mongoose_core::Epoch,
    pub payload: String,
}

/// A dispatcher that records every record it is given (and can sleep per record).
#[derive(Default)]
pub struct Collect {
    pub seen: Vec<Seen>,
    pub delay: Duration,
}

impl mongoose_core::Dispatcher<mongoose_kafka::KafkaRecord> for Collect {
    fn dispatch(
        &mut self,
        item: &mongoose_kafka::KafkaRecord,
        _attempt: u32,
    ) -> mongoose_core::DispatchOutcome {
        let delivery = mongoose_core::DeliveryContext::current().expect("a positioned record");
        assert_eq!(delivery.lane(), item.partition as u32, "lane = partition");
        assert_eq!(
            delivery.position().offset,
            item.offset as u64 + 1,
            "position = offset + 1"
        );
        self.seen.push(Seen {
            partition: item.partition,
            offset: item.offset,
            epoch: delivery.epoch(),
            payload: String::from_utf8_lossy(&item.payload).into_owned(),
        });
        if !self.delay.is_zero() {
            thread::sleep(self.delay);
        }
        mongoose_core::DispatchOutcome::Done
    }

    fn complete(
        &mut self,
        _completion: mongoose_core::engine::PendingCompletion,
        _delivery: &mongoose_core::Delivery,
    ) -> Result<(), mongoose_core::ProcessorError> {
        Ok(())
    }
}

/// The group's committed offsets of `topic`'s partitions `0..partitions` (-1: none).
pub fn committed(brokers: &str, group: &str, topic: &str, partitions: i32) -> Vec<i64> {
    mongoose_kafka::admin::committed_offsets(
        brokers,
        group,
        topic,
        partitions,
        Duration::from_secs(10),
    )
    .expect("committed offsets")
}

/// The end offsets (high watermarks) of `topic`'s partitions `0..partitions`.
pub fn end_offsets(brokers: &str, topic: &str, partitions: i32) -> Vec<i64> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("consumer");
    (0..partitions)
        .map(|partition| {
            consumer
                .fetch_watermarks(topic, partition, Duration::from_secs(10))
                .expect("watermarks")
                .1
        })
        .collect()
}

/// Writes `count` records `"<n>"` (n from `first`) to `partition` of `topic`, one per
/// batch, and waits until all are acknowledged.
pub fn produce_to(brokers: &str, topic: &str, partition: i32, first: u64, count: u64) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("linger.ms", "0")
        .set("batch.num.messages", "1")
        .create()
        .expect("producer");
    for n in first..first + count {
        let payload = n.to_string();
        producer
            .send(
                BaseRecord::<str, str>::to(topic)
                    .partition(partition)
                    .payload(&payload),
            )
            .expect("queued");
        producer.poll(Duration::ZERO);
    }
    producer
        .flush(Duration::from_secs(60))
        .expect("every record acknowledged");
}
