//! The changelog in transactions against the real broker (issue 27 item 3): a
//! partition's changes, the outputs written with them and the input offsets they cover
//! commit together, and a new owner's producer fences the old one, whose open
//! transaction (changes, outputs, offsets) then counts for nothing.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{broker_or_skip, committed, create_topic, unique, wait_for};
use mongoose_core::Epoch;
use mongoose_kafka::changelog::{
    Changelog, ChangelogConfig, OnDurable, TransactionsConfig, WriteFailure,
};
use parking_lot::Mutex;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// What the store said about each tag.
type Outcomes = Arc<Mutex<Vec<(u64, Result<(), WriteFailure>)>>>;

/// A transactional changelog member committing `group`'s offsets, its outputs to
/// `outputs`; its transactions commit only at `flush` (a long interval), so the test
/// decides what is open.
fn member(
    brokers: &str,
    input: &str,
    topic: &str,
    group: &str,
    outputs: &str,
) -> (Changelog, Outcomes) {
    let outcomes: Outcomes = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&outcomes);
    let on_durable: OnDurable = Arc::new(move |tag, result| seen.lock().push((tag, result)));
    let mut config = ChangelogConfig::new("txn-test", brokers, topic);
    config.transactions = Some(TransactionsConfig {
        commit_interval: Duration::from_secs(3600),
        ..TransactionsConfig::new(Some(group))
    });
    config.outputs_topic = Some(outputs.to_owned());
    let changelog = Changelog::open(config, input, on_durable).expect("the changelog opens");
    (changelog, outcomes)
}

/// The payloads of `topic` partition 0 a `read_committed` reader sees, read up to a
/// sentinel written (outside any transaction) after everything else.
fn committed_outputs(brokers: &str, topic: &str) -> Vec<String> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("producer");
    producer
        .send(
            BaseRecord::<str, str>::to(topic)
                .partition(0)
                .key("sentinel")
                .payload("sentinel"),
        )
        .expect("queued");
    producer
        .flush(Duration::from_secs(30))
        .expect("sentinel written");
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", unique("txn-reader"))
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Beginning)
        .expect("assignment");
    consumer.assign(&assignment).expect("assigned");
    let mut payloads = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the sentinel of {topic} never came"
        );
        let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let payload = String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned();
        if payload == "sentinel" {
            return payloads;
        }
        payloads.push(payload);
    }
}

/// Lines `offsets` of partition 0 in epoch 1: each an output `alert <offset>` and a
/// change of key `acc` tagged with its offset.
fn write_lines(changelog: &Changelog, offsets: std::ops::RangeInclusive<u64>) {
    for offset in offsets {
        changelog
            .write_output(0, b"acc", format!("alert {offset}").as_bytes())
            .expect("output written");
        changelog
            .write(
                0,
                Epoch(1),
                offset,
                b"acc",
                offset.to_string().as_bytes(),
                offset,
            )
            .expect("change written");
    }
}

#[test]
fn the_transactional_sink_commits_outputs_and_offsets_together() {
    let Some(brokers) = broker_or_skip("changelog transactions") else {
        return;
    };
    let input = unique("txn-input");
    create_topic(&brokers, &input, 1, &[]);
    let outputs = unique("txn-alerts");
    create_topic(&brokers, &outputs, 1, &[]);
    let topic = format!("{input}-changelog");
    let group = unique("txn-group");

    // the first owner: 50 lines, each with an output and a change, committed together
    let (first, first_outcomes) = member(&brokers, &input, &topic, &group, &outputs);
    first.restore(0, Epoch(1), |_| {}).expect("restores");
    write_lines(&first, 1..=50);
    assert!(
        first_outcomes.lock().is_empty(),
        "nothing is durable before its transaction commits"
    );
    first.flush(Duration::from_secs(60)).expect("committed");
    assert_eq!(
        first_outcomes
            .lock()
            .iter()
            .filter(|(_, result)| result.is_ok())
            .count(),
        50,
        "every change durable once its transaction committed"
    );
    assert_eq!(
        committed(&brokers, &group, &input, 1),
        vec![50],
        "the input offsets committed in the same transaction"
    );

    // an output goes with the change after it: a commit between the two (the committer
    // thread's, here a flush) must not make the output visible without its change
    first
        .write_output(0, b"acc", b"alert 51")
        .expect("output written");
    first.flush(Duration::from_secs(60)).expect("committed");
    first
        .write(0, Epoch(1), 51, b"acc", b"51", 51)
        .expect("change written");
    // 9 more lines in the transaction, left open: the owner stops answering, and a new
    // owner takes the partition over
    write_lines(&first, 52..=60);
    let (second, _) = member(&brokers, &input, &topic, &group, &outputs);
    let taken = second.restore(0, Epoch(2), |_| {}).expect("restores");
    assert_eq!(
        taken.position,
        Some((Epoch(1), 50)),
        "the open transaction's changes are not in the new owner's state"
    );
    // the old owner wakes up and commits: the broker fenced its producer
    let _ = first.flush(Duration::from_secs(30));
    wait_for("the old owner's open changes reported", 60, || {
        first_outcomes.lock().len() == 60
    });
    let fenced = first_outcomes
        .lock()
        .iter()
        .filter(|(tag, result)| {
            *tag > 50
                && matches!(
                    result,
                    Err(WriteFailure::Fenced {
                        partition: 0,
                        epoch: Epoch(1),
                        ..
                    })
                )
        })
        .count();
    assert_eq!(
        fenced, 10,
        "the old owner's open changes are fenced, not durable"
    );
    // and a later write of the old owner is refused the same way
    first
        .write(0, Epoch(1), 61, b"acc", b"61", 61)
        .expect("reported through on_durable");
    wait_for("the late write reported", 60, || {
        first_outcomes.lock().len() == 61
    });
    assert!(matches!(
        first_outcomes.lock().last(),
        Some((61, Err(WriteFailure::Fenced { .. })))
    ));

    let seen = committed_outputs(&brokers, &outputs);
    let expected: Vec<String> = (1..=50).map(|offset| format!("alert {offset}")).collect();
    assert_eq!(
        seen, expected,
        "a read_committed reader sees the committed outputs once and none of the fenced ones"
    );
    assert_eq!(
        committed(&brokers, &group, &input, 1),
        vec![50],
        "the fenced transaction's offsets are not committed"
    );
}

// A member whose lines of a partition were queued before the group gave the partition to
// another member (an older epoch) must not take it over when it reaches them: its
// producer would fence the current owner, whose open transaction would abort while its
// consumer goes on committing the partition (kafka_broker.rs's killed broker: 130
// records of one partition committed unapplied). The takeover is refused, and the
// current owner's open transaction commits.
#[test]
fn a_takeover_for_an_older_epoch_does_not_fence_the_current_owner() {
    use mongoose_kafka::KafkaConnectorError;

    let Some(brokers) = broker_or_skip("changelog stale takeover") else {
        return;
    };
    let input = unique("stale-input");
    create_topic(&brokers, &input, 1, &[]);
    let outputs = unique("stale-alerts");
    create_topic(&brokers, &outputs, 1, &[]);
    let topic = format!("{input}-changelog");
    let group = unique("stale-group");

    // the current owner, in epoch 2: 10 lines in an open transaction
    let (current, outcomes) = member(&brokers, &input, &topic, &group, &outputs);
    current.restore(0, Epoch(2), |_| {}).expect("restores");
    write_changes(&current, 1..=10);
    // a member still holding lines of epoch 1 reaches them
    let (stale, _) = member(&brokers, &input, &topic, &group, &outputs);
    match stale.restore(0, Epoch(1), |_| {}) {
        Err(KafkaConnectorError::TakenOver { .. }) => {}
        other => panic!("a takeover for an older epoch than the changelog's newest owner must be refused: {other:?}"),
    }
    // the current owner's transaction still commits
    current.flush(Duration::from_secs(60)).expect("committed");
    let durable = outcomes
        .lock()
        .iter()
        .filter(|(_, result)| result.is_ok())
        .count();
    assert_eq!(
        durable,
        10,
        "the current owner was not fenced: {:?}",
        outcomes.lock()
    );
    assert_eq!(committed(&brokers, &group, &input, 1), vec![10]);
}

/// The current owner's changes of `offsets` (tag = offset) into partition 0, epoch 2.
fn write_changes(
    owner: &mongoose_kafka::changelog::Changelog,
    offsets: std::ops::RangeInclusive<u64>,
) {
    for offset in offsets {
        owner
            .write(
                0,
                Epoch(2),
                offset,
                b"acc",
                offset.to_string().as_bytes(),
                offset,
            )
            .expect("change written");
    }
}

/// A one-partition input and outputs topic named from `prefix`, their changelog topic
/// and a group: `(input, outputs, changelog topic, group)`.
fn topics(brokers: &str, prefix: &str) -> (String, String, String, String) {
    let input = unique(&format!("{prefix}-input"));
    create_topic(brokers, &input, 1, &[]);
    let outputs = unique(&format!("{prefix}-alerts"));
    create_topic(brokers, &outputs, 1, &[]);
    let topic = format!("{input}-changelog");
    (input, outputs, topic, unique(&format!("{prefix}-group")))
}

/// The last outcome of each tag.
fn last_outcomes(outcomes: &Outcomes) -> std::collections::BTreeMap<u64, bool> {
    outcomes
        .lock()
        .iter()
        .map(|(tag, result)| (*tag, result.is_ok()))
        .collect()
}

// kafka_broker.rs's killed broker, again: a stale owner's producer (lines of an earlier
// assignment queued there) fenced the current owner between the stale one's check and
// its marker. The current owner, which still held the partition in the group, skipped
// the rest of its lines and let its consumer commit them (144 records of one partition
// never applied). Now it asks the changelog: no newer owner marked the partition, so it
// takes it back and writes the fenced transaction again.
#[test]
fn a_stale_owners_fence_is_undone_and_the_fenced_writes_written_again() {
    let Some(brokers) = broker_or_skip("changelog retake") else {
        return;
    };
    let (input, outputs, topic, group) = topics(&brokers, "retake");
    let (current, outcomes) = member(&brokers, &input, &topic, &group, &outputs);
    current.restore(0, Epoch(2), |_| {}).expect("restores");
    write_changes(&current, 1..=5);
    // the stale owner's producer: the partition's transactional id, initialised
    let stale: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("transactional.id", format!("{topic}-0"))
        .create()
        .expect("the stale owner's producer");
    stale
        .init_transactions(Duration::from_secs(60))
        .expect("the stale owner fences the current one");
    write_changes(&current, 6..=7);
    let _ = current.flush(Duration::from_secs(60));
    assert!(
        last_outcomes(&outcomes).values().any(|durable| !durable),
        "the current owner's producer was fenced: {:?}",
        outcomes.lock()
    );
    assert!(
        current.retake(0, Epoch(2)).expect("the changelog answers"),
        "no newer owner marked the partition: the current owner takes it back"
    );
    current.flush(Duration::from_secs(60)).expect("committed");
    let last = last_outcomes(&outcomes);
    assert_eq!(last.len(), 7);
    assert!(
        last.values().all(|durable| *durable),
        "every fenced write written again and durable: {:?}",
        outcomes.lock()
    );
    // every change counts, once, in the partition's state
    let (reader, _) = member(&brokers, &input, &topic, &group, &outputs);
    let records = reader.read(0).expect("read");
    let mut counted = Vec::new();
    let restored = mongoose_kafka::changelog::fold(&records, |record| counted.push(record.offset));
    assert_eq!(counted, (1..=7).collect::<Vec<u64>>());
    assert_eq!(restored.position, Some((Epoch(2), 7)));
}

#[test]
fn a_newer_owners_fence_is_not_undone() {
    let Some(brokers) = broker_or_skip("changelog retake refused") else {
        return;
    };
    let (input, outputs, topic, group) = topics(&brokers, "newer");
    let (current, outcomes) = member(&brokers, &input, &topic, &group, &outputs);
    current.restore(0, Epoch(2), |_| {}).expect("restores");
    write_changes(&current, 1..=5);
    // the group gave the partition to another member, in epoch 3
    let (newer, _) = member(&brokers, &input, &topic, &group, &outputs);
    newer
        .restore(0, Epoch(3), |_| {})
        .expect("the newer owner restores");
    let _ = current.flush(Duration::from_secs(60));
    assert!(
        last_outcomes(&outcomes).values().all(|durable| !durable),
        "the old owner's writes were fenced: {:?}",
        outcomes.lock()
    );
    assert!(
        !current.retake(0, Epoch(2)).expect("the changelog answers"),
        "a newer owner marked the partition: it is not taken back"
    );
}

/// A one-node broker of the test's own, or `None` (skipped) when Apache Kafka's jars
/// are not resolved.
fn own_broker(what: &str) -> Option<mongoose_testkit::kafka::Cluster> {
    let cluster = mongoose_testkit::kafka::Cluster::start(1);
    if cluster.is_none() {
        assert!(
            std::env::var_os("MONGOOSE_REQUIRE_BROKER").is_none(),
            "Apache Kafka's jars are not resolved and MONGOOSE_REQUIRE_BROKER is set: run `cargo xtask broker start` once"
        );
        common::skipped(&format!("{what}: Apache Kafka's jars are not resolved (`cargo xtask broker start` resolves them)"));
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter("info")
        .with_test_writer()
        .try_init();
    cluster
}

/// A transactional member on `brokers` (no group: the server's choice, the input's
/// offsets left to its own commit) with short timeouts (2 s delivery, 3 s requests: a
/// commit is retried for 18 s) and `patience` with a broker that stops answering, its
/// partition 0 restored in epoch 1 and lines 1 to 5 committed: `(member, its outcomes,
/// the outputs topic)`.
fn member_of_a_broker_to_pause(brokers: &str, patience: Duration) -> (Changelog, Outcomes, String) {
    let (input, outputs, topic, _) = topics(brokers, "paused");
    let outcomes: Outcomes = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&outcomes);
    let on_durable: OnDurable = Arc::new(move |tag, result| seen.lock().push((tag, result)));
    let mut config = ChangelogConfig::new("txn-pause", brokers, &topic);
    config.transactions = Some(TransactionsConfig {
        commit_interval: Duration::from_secs(3600),
        broker_patience: patience,
        ..TransactionsConfig::new(None)
    });
    config.outputs_topic = Some(outputs.clone());
    config.delivery_timeout = Duration::from_secs(2);
    config.request_timeout = Duration::from_secs(3);
    let changelog = Changelog::open(config, &input, on_durable).expect("the changelog opens");
    changelog.restore(0, Epoch(1), |_| {}).expect("restores");
    write_lines(&changelog, 1..=5);
    changelog
        .flush(Duration::from_secs(60))
        .expect("the first transaction commits");
    (changelog, outcomes, outputs)
}

/// Issue 37.3, the changelog's side: a one-node broker of the test's own SIGSTOPped
/// while a partition's transaction holds records (2 s delivery timeout, 3 s request
/// timeout), continued 8 s later. The records time out, the commit asks for an abort
/// (to write the transaction again in a new one), and that abort times out while the
/// broker is stopped. Before, the partition's producer ended there and changes 6 to 10
/// were given up (`GivenUp`: the ledger failed, and its lines were read again after a
/// restart); resuming the abort, as librdkafka asks, was tried, and Apache Kafka 4.1
/// answered the resumed abort with a fatal INVALID_TXN_STATE. Now the partition's
/// writes wait: once the broker answers, no newer owner having marked the partition, a
/// new producer of the partition's transactional id takes the old one's place (the
/// broker finishes the old transaction), the member's marker is committed, the
/// partition read `read_committed` through it tells that the old transaction did not
/// commit, and its changes and outputs are written again in a new one, each once.
#[test]
fn a_broker_pause_during_a_changelog_transaction_is_waited_out() {
    let Some(cluster) = own_broker("changelog broker pause") else {
        return;
    };
    let brokers = cluster.bootstrap();
    let (changelog, outcomes, outputs) =
        member_of_a_broker_to_pause(&brokers, Duration::from_secs(60));
    // the broker stops; the next transaction's records wait in the producer
    cluster.signal(1, "-STOP");
    write_lines(&changelog, 6..=10);
    let flushed = std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_secs(8));
            cluster.signal(1, "-CONT");
        });
        changelog.flush(Duration::from_secs(120))
    });
    let last = last_outcomes(&outcomes);
    assert!(
        flushed.is_ok() && last.len() == 10 && last.values().all(|durable| *durable),
        "every change durable after the broker came back ({flushed:?}): {:?}",
        outcomes.lock()
    );
    assert_eq!(
        outcomes.lock().len(),
        10,
        "each change reported once, durable: {:?}",
        outcomes.lock()
    );
    let alerts = committed_outputs(&brokers, &outputs);
    let expected: Vec<String> = (1..=10).map(|offset| format!("alert {offset}")).collect();
    assert_eq!(alerts, expected, "each output once, in order");
    // and the partition's state holds each change once
    let records = changelog.read(0).expect("read");
    let mut counted = Vec::new();
    let restored = mongoose_kafka::changelog::fold(&records, |record| counted.push(record.offset));
    assert_eq!(counted, (1..=10).collect::<Vec<u64>>());
    assert_eq!(restored.position, Some((Epoch(1), 10)));
}

/// The other side of the pause above: a broker that does not come back within the
/// changelog's patience (6 s here). The partition's writes waited that long; its changes
/// are then given up, with a reason that says so (the ledger fails, and its lines are
/// read again after a restart), never reported durable.
#[test]
fn a_broker_that_stays_away_past_the_patience_has_the_transaction_s_changes_given_up() {
    let Some(cluster) = own_broker("changelog broker gone") else {
        return;
    };
    let brokers = cluster.bootstrap();
    let (changelog, outcomes, _) = member_of_a_broker_to_pause(&brokers, Duration::from_secs(6));
    cluster.signal(1, "-STOP");
    write_lines(&changelog, 6..=10);
    let _ = changelog.flush(Duration::from_secs(120));
    let reported = outcomes.lock().clone();
    assert_eq!(reported.len(), 10, "every change reported: {reported:?}");
    for (tag, result) in &reported {
        match result {
            Ok(()) => assert!(*tag <= 5, "change {tag} reported durable: {reported:?}"),
            Err(WriteFailure::GivenUp(reason)) => assert!(
                *tag > 5 && reason.contains("did not answer for"),
                "change {tag} given up with a reason that names the broker's absence: {reason}"
            ),
            Err(other) => panic!("change {tag}: {other} (not given up)"),
        }
    }
    cluster.signal(1, "-CONT");
}
