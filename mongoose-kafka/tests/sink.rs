//! The Kafka sink's outcomes against a real broker (Apache Kafka): one test starts a
//! single-node broker of its own (`mongoose_testkit::kafka::Cluster`, from the jars
//! `cargo xtask broker start` resolved, so that stopping it disturbs no other test),
//! skipped with a message when the jars are not there unless `MONGOOSE_REQUIRE_BROKER`
//! is set; the transactional tests use the test
//! broker.
//! book: guarantees/outcomes.md: published with evidence, not published, uncertain.

mod common;

use std::time::Duration;

use common::{create_topic, unique};
use mongoose_core::sink::{Output, OutputKey, Sink, SinkOutcome};
use mongoose_core::Epoch;
use mongoose_kafka::{KafkaSink, KafkaSinkConfig};
use mongoose_testkit::kafka::Cluster;

fn output(position: u64, payload: Vec<u8>) -> Output {
    Output::new(
        OutputKey::new("lines", Epoch(7), 0, position, 0, 1),
        payload,
    )
}

// book: guarantees/outcomes.md: a delivery report is Published with its partition and offset; a
// record the target can never take is NotPublished, not retryable; a record handed over
// to a broker that stops answering (SIGSTOP: the connection stays open, nothing comes
// back) is Uncertain, never "not published".
#[test]
fn the_kafka_sink_reports_uncertain_on_a_broker_that_stops_answering() {
    let Some(broker) = Cluster::start(1) else {
        if std::env::var_os("MONGOOSE_REQUIRE_BROKER").is_some() {
            panic!("Apache Kafka's jars are not resolved and MONGOOSE_REQUIRE_BROKER is set: run `cargo xtask broker start` (it resolves them)");
        }
        common::skipped("SKIPPED the_kafka_sink_reports_uncertain_on_a_broker_that_stops_answering: Apache Kafka's jars are not resolved (`cargo xtask broker start` resolves them)");
        return;
    };
    let address = broker.bootstrap();
    let topic = unique("sink");
    create_topic(&address, &topic, 1, &[]);
    let mut config = KafkaSinkConfig::new("alerts", &address, &topic);
    config.delivery_timeout = Duration::from_secs(5);
    let mut sink = KafkaSink::new(config).expect("sink");

    let mut outcomes = Vec::new();
    sink.publish(
        &[
            output(10, b"first".to_vec()),
            output(20, b"second".to_vec()),
        ],
        &mut outcomes,
    );
    assert_eq!(
        outcomes,
        vec![
            SinkOutcome::Published {
                evidence: format!("{topic}/0@0")
            },
            SinkOutcome::Published {
                evidence: format!("{topic}/0@1")
            },
        ]
    );

    // larger than message.max.bytes (1 MB): refused before the hand-off, for good
    outcomes.clear();
    sink.publish(&[output(30, vec![b'x'; 2_000_000])], &mut outcomes);
    assert!(
        matches!(
            &outcomes[..],
            [SinkOutcome::NotPublished {
                retryable: false,
                ..
            }]
        ),
        "{outcomes:?}"
    );

    // the broker stops answering with the connection open: handed over, fate unknown
    broker.signal(1, "-STOP");
    outcomes.clear();
    sink.publish(&[output(40, b"third".to_vec())], &mut outcomes);
    assert!(
        matches!(&outcomes[..], [SinkOutcome::Uncertain { .. }]),
        "a record handed to a broker that stopped answering is uncertain: {outcomes:?}"
    );
    drop(broker);
}

/// The payloads of `topic`'s partition 0 that a `read_committed` consumer sees, read
/// until `count` came (or 30 s passed) and then for one more second (nothing more may
/// come).
fn read_committed(brokers: &str, topic: &str, count: usize) -> Vec<String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::Message;
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", unique("sink-tx-reader"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer");
    let mut assignment = rdkafka::TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, rdkafka::Offset::Beginning)
        .expect("offset");
    consumer.assign(&assignment).expect("assign");
    let mut payloads = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut settle: Option<std::time::Instant> = None;
    loop {
        let now = std::time::Instant::now();
        if settle.is_some_and(|until| now > until) || now > deadline {
            return payloads;
        }
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            let message = message.expect("a record");
            payloads
                .push(String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned());
        }
        if payloads.len() >= count && settle.is_none() {
            settle = Some(std::time::Instant::now() + Duration::from_secs(1));
        }
    }
}

// The transactional sink on a broker with transactions (Apache Kafka): a batch is
// Published only once its transaction committed, each record with its place; a
// `read_committed` reader sees exactly the committed records, and the next batch is a
// new transaction (its record follows the first one's commit marker). Until issue 27
// the test broker (tansu 0.6) had no EndTxn, and this test asserted the only honest
// outcome there, Uncertain (a commit whose fate is unknown is never Published); that
// broker no longer runs the tests.
#[test]
fn a_transactional_sink_publishes_a_batch_once_its_transaction_commits() {
    let Some(brokers) = common::broker_or_skip(
        "a_transactional_sink_publishes_a_batch_once_its_transaction_commits",
    ) else {
        return;
    };
    let topic = unique("sink-tx");
    create_topic(&brokers, &topic, 1, &[]);
    let mut config = KafkaSinkConfig::new("alerts", &brokers, &topic);
    config.delivery_timeout = Duration::from_secs(10);
    config.transactional_id = Some(unique("sink-tx-id"));
    let mut sink = KafkaSink::new(config).expect("sink");
    let mut outcomes = Vec::new();
    sink.publish(&[output(10, b"first".to_vec())], &mut outcomes);
    assert_eq!(
        outcomes,
        vec![SinkOutcome::Published {
            evidence: format!("{topic}/0@0")
        }]
    );
    outcomes.clear();
    sink.publish(&[output(20, b"second".to_vec())], &mut outcomes);
    assert_eq!(
        outcomes,
        vec![SinkOutcome::Published {
            // offset 1 is the first transaction's commit marker
            evidence: format!("{topic}/0@2")
        }]
    );
    assert_eq!(read_committed(&brokers, &topic, 2), vec!["first", "second"]);
}

// Kafka's read-process-write: `publish_with_offsets` hands a consumer group's offsets to
// the transaction (`send_offsets_to_transaction`) before committing it; once the commit
// succeeds the batch is Published and the group's committed offset is the one the
// transaction carried. (On tansu 0.6, which had no EndTxn, the test asserted the
// commit's Uncertain outcome and the group's offsets left unmoved.)
#[test]
fn a_transactional_sink_commits_the_group_offsets_with_its_records() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let Some(brokers) =
        common::broker_or_skip("a_transactional_sink_commits_the_group_offsets_with_its_records")
    else {
        return;
    };
    let input = unique("sink-tx-input");
    create_topic(&brokers, &input, 1, &[]);
    let topic = unique("sink-tx-offsets");
    create_topic(&brokers, &topic, 1, &[]);
    let group = unique("sink-tx-group");
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let metadata = consumer
        .group_metadata()
        .expect("a consumer group's metadata");
    let mut offsets = rdkafka::TopicPartitionList::new();
    offsets
        .add_partition_offset(&input, 0, rdkafka::Offset::Offset(5))
        .expect("offset");
    assert_eq!(
        common::committed(&brokers, &group, &input, 1),
        vec![-1],
        "the group has committed nothing before the transaction"
    );

    let mut config = KafkaSinkConfig::new("alerts", &brokers, &topic);
    config.delivery_timeout = Duration::from_secs(10);
    config.transactional_id = Some(unique("sink-tx-offsets-id"));
    let mut sink = KafkaSink::new(config).expect("sink");
    let mut outcomes = Vec::new();
    sink.publish_with_offsets(
        &[output(1, b"first".to_vec()), output(2, b"second".to_vec())],
        &offsets,
        &metadata,
        &mut outcomes,
    );
    assert_eq!(
        outcomes,
        vec![
            SinkOutcome::Published {
                evidence: format!("{topic}/0@0")
            },
            SinkOutcome::Published {
                evidence: format!("{topic}/0@1")
            },
        ]
    );
    assert_eq!(
        common::committed(&brokers, &group, &input, 1),
        vec![5],
        "the committed transaction moved the group's offset with its records"
    );
    assert_eq!(read_committed(&brokers, &topic, 2), vec!["first", "second"]);
}
