//! The Kafka sink's outcomes against a real broker: a private tansu broker started by the
//! test (so that stopping it disturbs no other test). Skipped with a message when the
//! tansu binary is not installed, unless `MONGOOSE_REQUIRE_BROKER` is set.
//! delivery-uncertainty: published with evidence, not published, uncertain.

mod common;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{create_topic, unique, wait_for};
use mongoose_core::sink::{Output, OutputKey, Sink, SinkOutcome};
use mongoose_core::Epoch;
use mongoose_kafka::{KafkaSink, KafkaSinkConfig};

/// The tansu binary: `$MONGOOSE_TANSU`, else `$HOME/.cache/mongoose-tansu/bin/tansu`
/// (where `cargo xtask broker start` installs it).
fn tansu() -> Option<PathBuf> {
    let binary = std::env::var_os("MONGOOSE_TANSU")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|home| PathBuf::from(home).join(".cache/mongoose-tansu/bin/tansu"))
        })?;
    binary.exists().then_some(binary)
}

/// A broker of the test's own, killed (continued first) when dropped.
struct PrivateBroker {
    child: Child,
    address: String,
}

impl PrivateBroker {
    fn start(binary: &PathBuf) -> PrivateBroker {
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("a free port")
            .local_addr()
            .expect("address")
            .port();
        let address = format!("127.0.0.1:{port}");
        let url = format!("tcp://{address}");
        let child = Command::new(binary)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", "memory://tansu/"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tansu");
        let broker = PrivateBroker { child, address };
        wait_for("the private broker to answer", 60, || {
            std::net::TcpStream::connect(&broker.address).is_ok()
        });
        broker
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal}");
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn output(position: u64, payload: Vec<u8>) -> Output {
    Output::new(
        OutputKey::new("lines", Epoch(7), 0, position, 0, 1),
        payload,
    )
}

// delivery-uncertainty: a delivery report is Published with its partition and offset; a
// record the target can never take is NotPublished, not retryable; a record handed over
// to a broker that stops answering (SIGSTOP: the connection stays open, nothing comes
// back) is Uncertain, never "not published".
#[test]
fn the_kafka_sink_reports_uncertain_on_a_broker_that_stops_answering() {
    let Some(binary) = tansu() else {
        if std::env::var_os("MONGOOSE_REQUIRE_BROKER").is_some() {
            panic!("tansu is not installed and MONGOOSE_REQUIRE_BROKER is set: run `cargo xtask broker start` (it installs tansu)");
        }
        common::skipped("SKIPPED the_kafka_sink_reports_uncertain_on_a_broker_that_stops_answering: tansu is not installed (`cargo xtask broker start` installs it)");
        return;
    };
    let broker = PrivateBroker::start(&binary);
    let topic = unique("sink");
    create_topic(&broker.address, &topic, 1, &[]);
    let mut config = KafkaSinkConfig::new("alerts", &broker.address, &topic);
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
    broker.signal("-STOP");
    outcomes.clear();
    sink.publish(&[output(40, b"third".to_vec())], &mut outcomes);
    assert!(
        matches!(&outcomes[..], [SinkOutcome::Uncertain { .. }]),
        "a record handed to a broker that stopped answering is uncertain: {outcomes:?}"
    );
    drop(broker);
}

// The transactional sink against tansu 0.6, which has no EndTxn (the broker_probe example:
// "EndTxnRequest (KIP-98) not supported by broker"): the records went out inside a
// transaction that can be neither committed nor aborted, so a read_committed reader never
// sees them and a read_uncommitted one does. The honest outcome is Uncertain, never
// Published. (Against a broker with transactions, the same batch is Published.)
#[test]
fn a_transactional_sink_on_a_broker_without_end_txn_reports_uncertain() {
    let Some(brokers) = common::broker_or_skip(
        "a_transactional_sink_on_a_broker_without_end_txn_reports_uncertain",
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
    assert!(
        matches!(&outcomes[..], [SinkOutcome::Uncertain { evidence }] if evidence.contains("EndTxn")),
        "{outcomes:?}"
    );
}

// Kafka's read-process-write: `publish_with_offsets` hands a consumer group's offsets to
// the transaction (`send_offsets_to_transaction`) before committing it. On tansu 0.6
// the offsets are taken and only the commit fails (no EndTxn), so the batch is
// Uncertain with the commit named as the step whose fate is unknown, never "sending
// the offsets" (which would mean the offsets never joined the transaction), and the
// group's offsets stay where they were. What tansu cannot show: that a committed
// transaction moves the group's offsets with its records.
#[test]
fn a_transactional_sink_send_offsets_to_transaction_then_reports_the_commit_uncertain() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let Some(brokers) = common::broker_or_skip(
        "a_transactional_sink_send_offsets_to_transaction_then_reports_the_commit_uncertain",
    ) else {
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
    assert_eq!(outcomes.len(), 2, "{outcomes:?}");
    for outcome in &outcomes {
        assert!(
            matches!(outcome, SinkOutcome::Uncertain { evidence }
                if evidence.starts_with("committing the transaction") && evidence.contains("EndTxn")),
            "the offsets joined the transaction and only its commit failed: {outcomes:?}"
        );
    }
    assert_eq!(
        common::committed(&brokers, &group, &input, 1),
        vec![-1],
        "the offsets of a transaction never committed are not the group's"
    );
}
