//! The Kafka source at its edges (issue 37, parts 1 and 4), each test running the real
//! `mongoose` binary with the Kafka plugin on a real broker: records removed
//! (retention, `DeleteRecords`) before the group read them are a reported loss, the
//! gaps a transaction's markers leave are not, a feed is caught up only once it has its
//! assignment and read it to the end, and a client the brokers refuse is stalled with
//! the reason, not settled. Book: connectors/kafka.md.

use crate::kafka_support;
use crate::support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kafka_support::{
    committed, create_topic, forward_config, free_address, own_cluster, unique_topic,
};
use mongoose_testkit::build_plugin;
use mongoose_testkit::kafka::Cluster;
use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use support::LedgerRun;

/// The shared test broker (`cargo xtask broker start`), or `None` when it is not running
/// (the test is skipped) unless `MONGOOSE_REQUIRE_BROKER` is set.
fn shared_broker(test: &str) -> Option<String> {
    let brokers =
        std::env::var("MONGOOSE_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:19092".to_owned());
    let reachable = brokers.split(',').any(|address| {
        std::net::TcpStream::connect_timeout(
            &address.trim().parse().expect("a socket address"),
            Duration::from_secs(1),
        )
        .is_ok()
    });
    if reachable {
        return Some(brokers);
    }
    assert!(
        std::env::var_os("MONGOOSE_REQUIRE_BROKER").is_none(),
        "{test}: no Kafka broker at {brokers} and MONGOOSE_REQUIRE_BROKER is set: `cargo xtask broker start`"
    );
    eprintln!("SKIPPED {test}: no Kafka broker at {brokers}");
    None
}

/// Record `index`'s value: unique, so each one's output is counted.
fn record(index: usize) -> String {
    format!("rec-{index:06}")
}

/// Produces records `indexes` into partition 0 of `topic` (idempotent, in order: the
/// record of index `i` lands at offset `i` when the partition started empty and holds
/// only these).
fn produce(brokers: &str, topic: &str, indexes: std::ops::Range<usize>) {
    produce_to(brokers, topic, 0, indexes);
}

/// Produces records `indexes` into `partition` of `topic`.
fn produce_to(brokers: &str, topic: &str, partition: i32, indexes: std::ops::Range<usize>) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .create()
        .expect("producer");
    for index in indexes {
        let value = record(index);
        loop {
            match producer.send(
                BaseRecord::<(), _>::to(topic)
                    .partition(partition)
                    .payload(&value),
            ) {
                Ok(()) => break,
                Err((error, _)) => {
                    assert!(error.to_string().contains("Queue full"), "produce: {error}");
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(60)).expect("flushed");
}

/// Produces records `indexes` into partition 0 of `topic` in transactions of `per`
/// records each: every commit leaves a marker, an offset no record has.
fn produce_transactions(brokers: &str, topic: &str, indexes: std::ops::Range<usize>, per: usize) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("transactional.id", format!("{topic}-writer"))
        .create()
        .expect("transactional producer");
    producer
        .init_transactions(Duration::from_secs(60))
        .expect("init transactions");
    let indexes: Vec<usize> = indexes.collect();
    for chunk in indexes.chunks(per) {
        producer.begin_transaction().expect("begin");
        for index in chunk {
            let value = record(*index);
            producer
                .send(BaseRecord::<(), _>::to(topic).partition(0).payload(&value))
                .expect("send");
        }
        producer
            .commit_transaction(Duration::from_secs(60))
            .expect("commit");
    }
}

/// `(log start, high watermark)` of partition 0 of `topic`.
fn watermarks(brokers: &str, topic: &str) -> (i64, i64) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", format!("{topic}-watermarks"))
        .create()
        .expect("consumer");
    consumer
        .fetch_watermarks(topic, 0, Duration::from_secs(30))
        .expect("watermarks")
}

fn admin(brokers: &str) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("admin client")
}

fn options() -> AdminOptions {
    AdminOptions::new().request_timeout(Some(Duration::from_secs(30)))
}

/// Deletes the records of partition 0 of `topic` below `offset` (`DeleteRecords`).
fn delete_records(brokers: &str, topic: &str, offset: i64) {
    delete_records_of(brokers, topic, 0, offset);
}

/// Deletes the records of `partition` of `topic` below `offset` (`DeleteRecords`).
fn delete_records_of(brokers: &str, topic: &str, partition: i32, offset: i64) {
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, partition, Offset::Offset(offset))
        .expect("a partition");
    let result = mongoose_kafka::block_on(admin(brokers).delete_records(&list, &options()))
        .expect("DeleteRecords answered");
    for element in result.elements() {
        element.error().expect("records deleted");
    }
}

/// Sets `retention.ms` of `topic` (`None`: back to the broker's default).
fn set_retention(brokers: &str, topic: &str, retention_ms: Option<&str>) {
    let mut config = AlterConfig::new(ResourceSpecifier::Topic(topic));
    if let Some(retention) = retention_ms {
        config = config.set("retention.ms", retention);
    }
    let results = mongoose_kafka::block_on(admin(brokers).alter_configs(&[config], &options()))
        .expect("AlterConfigs answered");
    for result in results {
        result.expect("the topic's config changed");
    }
}

/// A folder running the forward above (its plugin folder holds `library`).
fn forward_run(library: &Path, config: &str) -> LedgerRun {
    let mut run = LedgerRun::new("", config);
    run.log_filter = "warn,mongoose_server::cli=info,mongoose_kafka=info,mongoose_plugin=info";
    mongoose_testkit::plugin_dir(run.dir.path(), &[library]);
    run
}

/// `GET path` of the admin API at `address`: the status code and the JSON body.
fn get(address: &str, path: &str) -> (u16, serde_json::Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut response = agent
        .get(&format!("http://{address}{path}"))
        .call()
        .expect("answered");
    let code = response.status().as_u16();
    let body = response.body_mut().read_to_string().expect("body");
    (
        code,
        serde_json::from_str(&body).unwrap_or(serde_json::Value::String(body)),
    )
}

/// Waits (180 s at most) until the status of the server at `address` satisfies `done`;
/// returns that status.
fn wait_status(
    run: &LedgerRun,
    child: &mut std::process::Child,
    address: &str,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut last = serde_json::Value::Null;
    loop {
        assert!(
            child.try_wait().expect("child status").is_none(),
            "the server exited before {what}: {}",
            run.log()
        );
        if std::net::TcpStream::connect(address).is_ok() {
            last = get(address, "/status").1;
            if done(&last) {
                return last;
            }
        }
        assert!(
            Instant::now() < deadline,
            "never {what}; last status: {last}\n{}",
            run.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs with `--exit-when-settled` to the end (180 s at most): the exit code.
fn finish(run: &LedgerRun) -> i32 {
    run.finish()
}

/// The records in the output, each with how many times it was written.
fn outputs(run: &LedgerRun) -> std::collections::BTreeMap<String, usize> {
    let text = std::fs::read_to_string(run.path("out.txt")).unwrap_or_default();
    let mut counts = std::collections::BTreeMap::new();
    for line in text.lines() {
        *counts.entry(line.to_owned()).or_insert(0) += 1;
    }
    counts
}

/// Asserts the output holds each record of `indexes` exactly once and nothing else.
fn assert_written_once(run: &LedgerRun, indexes: impl Iterator<Item = usize>, context: &str) {
    let counts = outputs(run);
    let expected: std::collections::BTreeSet<String> = indexes.map(record).collect();
    let twice: Vec<&String> = counts
        .iter()
        .filter(|(_, count)| **count > 1)
        .map(|(line, _)| line)
        .take(5)
        .collect();
    let missing: Vec<&String> = expected
        .iter()
        .filter(|line| !counts.contains_key(*line))
        .take(5)
        .collect();
    let invented: Vec<&String> = counts
        .keys()
        .filter(|line| !expected.contains(*line))
        .take(5)
        .collect();
    assert!(
        twice.is_empty() && missing.is_empty() && invented.is_empty(),
        "{context}: every record once ({} expected, {} distinct written): twice {twice:?}, missing {missing:?}, not expected {invented:?}\n{}",
        expected.len(),
        counts.len(),
        run.log()
    );
}

/// The first run reads records 0..`first`, commits them and is stopped (SIGTERM: it
/// does not rest on `--exit-when-settled`, so that the loss tests see only the loss).
fn first_run(run: &LedgerRun, (brokers, group, topic): (&str, &str, &str), first: usize) {
    let mut child = run.spawn(false);
    run.wait_until(&mut child, "committed every record", || {
        committed(brokers, group, topic, 1) == vec![first as i64]
    });
    let code = run.terminate(child);
    assert_eq!(code, 0, "the first run stops clean: {}", run.log());
    assert_written_once(run, 0..first, "the first run");
}

/// A forward of a new topic whose first run read and committed its records 0..1,000,
/// then stopped ([`first_run`]).
struct Stopped {
    topic: String,
    group: String,
    /// The admin API's address.
    address: String,
    run: LedgerRun,
}

/// [`Stopped`] on a topic of `partitions` named from `prefix`.
fn stopped_forward(brokers: &str, prefix: &str, partitions: i32) -> Stopped {
    let library = build_plugin("kafka-plugin", &[]);
    let topic = unique_topic(prefix);
    let group = format!("{topic}-forward");
    create_topic(brokers, &topic, partitions, &[]);
    produce(brokers, &topic, 0..1_000);
    let address = free_address();
    let run = forward_run(
        &library,
        &forward_config(brokers, &topic, &group, "", &address),
    );
    first_run(&run, (brokers, &group, &topic), 1_000);
    Stopped {
        topic,
        group,
        address,
        run,
    }
}

// issue 37.1, chaos kafka seed 17: `DeleteRecords` past a stopped group's committed
// offset; the records in between were never applied and the run said lossless (exit 0)
#[test]
fn records_removed_by_delete_records_are_a_reported_loss() {
    let test = "records_removed_by_delete_records_are_a_reported_loss";
    let Some(brokers) = shared_broker(test) else {
        return;
    };
    let Stopped {
        topic,
        group,
        address,
        run,
    } = stopped_forward(&brokers, "deleted", 1);
    // the group is stopped at 1,000; 2,000 more come, and the first 600 of them are
    // deleted before the group reads them
    produce(&brokers, &topic, 1_000..3_000);
    delete_records(&brokers, &topic, 1_600);
    assert_eq!(watermarks(&brokers, &topic), (1_600, 3_000));
    let mut child = run.spawn(false);
    run.wait_until(&mut child, "committed every record", || {
        committed(&brokers, &group, &topic, 1) == vec![3_000]
    });
    let status = wait_status(&run, &mut child, &address, "settled", |status| {
        status["settled"] == true
    });
    let code = run.terminate(child);
    let feed = &status["feeds"][0];
    assert_eq!(
        (status["lossless"].clone(), feed["losses"].clone()),
        (serde_json::json!(false), serde_json::json!(1)),
        "the removed records are one loss of the feed: {status}\n{}",
        run.log()
    );
    let log = run.log();
    assert!(
        log.contains("600 records never read (offsets 1000 to 1599)"),
        "the loss names the partition, the offsets and the count: {log}"
    );
    assert_ne!(code, 0, "a run with a loss does not stop clean: {log}");
    assert_written_once(&run, (0..1_000).chain(1_600..3_000), "after DeleteRecords");
    assert_eq!(committed(&brokers, &group, &topic, 1), vec![3_000]);
}

// chaos kafka seed 1796658157051 (a soak): the run that found a retention loss was
// SIGKILLed after it had committed past the gap, and the next run exited 0: the loss a
// Kafka source reported lived in memory only, where a file feed's is in its loss file
#[test]
fn a_kafka_loss_found_by_a_killed_run_is_reported_by_the_next_start() {
    let test = "a_kafka_loss_found_by_a_killed_run_is_reported_by_the_next_start";
    let Some(brokers) = shared_broker(test) else {
        return;
    };
    let Stopped {
        topic,
        group,
        address,
        run,
    } = stopped_forward(&brokers, "killed-loss", 1);
    produce(&brokers, &topic, 1_000..2_000);
    delete_records(&brokers, &topic, 1_400);
    // the run that finds the loss commits past it and is killed
    let mut child = run.spawn(false);
    run.wait_until(&mut child, "committed every record", || {
        committed(&brokers, &group, &topic, 1) == vec![2_000]
    });
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    assert!(
        run.log().contains("400 records never read"),
        "the killed run found the loss: {}",
        run.log()
    );
    // the next start reads nothing new, and still says the feed was not lossless
    let mut child = run.spawn(false);
    let status = wait_status(&run, &mut child, &address, "settled", |status| {
        status["settled"] == true
    });
    let code = run.terminate(child);
    let feed = &status["feeds"][0];
    assert_eq!(
        (status["lossless"].clone(), feed["earlierLosses"].clone()),
        (serde_json::json!(false), serde_json::json!(1)),
        "the killed run's loss is reported by the next start: {status}\n{}",
        run.log()
    );
    assert_eq!(
        code,
        3,
        "the run that reports it exits lossy: {}",
        run.log()
    );
    // reported to a run's end, it is not reported again
    let mut child = run.spawn(false);
    let status = wait_status(&run, &mut child, &address, "settled", |status| {
        status["settled"] == true
    });
    let code = run.terminate(child);
    assert_eq!(
        (status["lossless"].clone(), code),
        (serde_json::json!(true), 0),
        "a loss reported to a run's end is not reported again: {status}\n{}",
        run.log()
    );
    assert_written_once(&run, (0..1_000).chain(1_400..2_000), "after the kill");
}

// chaos kafka seeds 1796645212008 and 1796645212014 (a soak): records written to a
// partition the group had never committed (it held nothing yet when the group stopped)
// and removed by retention before the group came back: the restart began at the log
// start, nothing was compared, and the run said lossless (1,507 and 1,780 lines, exit 0)
#[test]
fn records_of_a_partition_the_group_never_committed_removed_before_they_were_read_are_a_reported_loss(
) {
    let test = "records_of_a_partition_the_group_never_committed_removed_before_they_were_read_are_a_reported_loss";
    let Some(brokers) = shared_broker(test) else {
        return;
    };
    let Stopped {
        topic,
        group: _,
        address: _,
        run,
    } = stopped_forward(&brokers, "uncommitted", 2);
    // partition 1, empty until now: 500 records while the group is stopped, removed,
    // then 200 more
    produce_to(&brokers, &topic, 1, 1_000..1_500);
    delete_records_of(&brokers, &topic, 1, 500);
    produce_to(&brokers, &topic, 1, 1_500..1_700);
    let code = finish(&run);
    let log = run.log();
    assert!(
        log.contains("500 records never read (offsets 0 to 499)"),
        "the loss names the partition, the offsets and the count: {log}"
    );
    assert_eq!(code, 3, "settled but not lossless: {log}");
    assert_written_once(&run, (0..1_000).chain(1_500..1_700), "after DeleteRecords");
}

// issue 37.1, chaos kafka seed 17 (its DeleteRecords goes to the partition's end):
// nothing is written after the removal, so no record is read to compare with the
// committed offset; the partition's end must say it
#[test]
fn records_removed_up_to_the_partitions_end_are_a_reported_loss() {
    let test = "records_removed_up_to_the_partitions_end_are_a_reported_loss";
    let Some(brokers) = shared_broker(test) else {
        return;
    };
    let Stopped {
        topic,
        group: _,
        address: _,
        run,
    } = stopped_forward(&brokers, "emptied", 1);
    produce(&brokers, &topic, 1_000..3_000);
    delete_records(&brokers, &topic, 3_000);
    assert_eq!(watermarks(&brokers, &topic), (3_000, 3_000));
    let code = finish(&run);
    let log = run.log();
    assert!(
        log.contains("2000 records never read (offsets 1000 to 2999)"),
        "the loss names the partition, the offsets and the count: {log}"
    );
    assert_eq!(code, 3, "settled but not lossless: {log}");
    assert_written_once(&run, 0..1_000, "after DeleteRecords to the end");
}

// issue 37.1: retention moves the log start past a stopped group's committed offset
#[test]
fn records_deleted_by_retention_before_they_were_read_are_a_reported_loss() {
    let test = "records_deleted_by_retention_before_they_were_read_are_a_reported_loss";
    // retention checked every second (the shared broker checks every 5 minutes)
    let builder = Cluster::builder(1)
        .property("log.retention.check.interval.ms", "1000")
        .property("log.initial.task.delay.ms", "1000");
    let Some(cluster) = own_cluster(test, builder) else {
        return;
    };
    let brokers = cluster.bootstrap();
    let Stopped {
        topic,
        group: _,
        address: _,
        run,
    } = stopped_forward(&brokers, "retention", 1);
    produce(&brokers, &topic, 1_000..3_000);
    // retention of a second while the group is stopped: every record goes
    set_retention(&brokers, &topic, Some("1000"));
    let deadline = Instant::now() + Duration::from_secs(120);
    while watermarks(&brokers, &topic).0 < 3_000 {
        assert!(
            Instant::now() < deadline,
            "retention never removed the records: {:?}",
            watermarks(&brokers, &topic)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    set_retention(&brokers, &topic, None);
    produce(&brokers, &topic, 3_000..4_000);
    let (log_start, _) = watermarks(&brokers, &topic);
    assert_eq!(log_start, 3_000, "the log starts after the removed records");
    let code = finish(&run);
    let log = run.log();
    assert_eq!(code, 3, "settled but not lossless: {log}");
    assert!(
        log.contains("2000 records never read (offsets 1000 to 2999)")
            && log.contains("settled but NOT lossless"),
        "the loss names the partition, the offsets and the count: {log}"
    );
    assert_written_once(&run, (0..1_000).chain(3_000..4_000), "after retention");
}

// issue 37.1: a transaction's commit marker leaves an offset without a record: the loss
// check must not cry wolf on it (at an assignment's first record: the committed offset
// is the marker's; and within an assignment: a skip after each transaction)
#[test]
fn a_transactional_topic_read_across_restarts_reports_no_loss() {
    let test = "a_transactional_topic_read_across_restarts_reports_no_loss";
    let Some(brokers) = shared_broker(test) else {
        return;
    };
    let library = build_plugin("kafka-plugin", &[]);
    let topic = unique_topic("transactions");
    let group = format!("{topic}-forward");
    create_topic(&brokers, &topic, 1, &[]);
    produce_transactions(&brokers, &topic, 0..1_000, 100);
    let run = forward_run(
        &library,
        &forward_config(&brokers, &topic, &group, "", &free_address()),
    );
    assert_eq!(finish(&run), 0, "the first run: {}", run.log());
    // the last marker is at offset 1,010: the group committed the offset after the
    // last record, 1,009... or past the marker; either way the next record is further
    produce_transactions(&brokers, &topic, 1_000..2_000, 100);
    assert_eq!(finish(&run), 0, "the second run: {}", run.log());
    let log = run.log();
    assert!(!log.contains("never read"), "no loss reported: {log}");
    assert_written_once(&run, 0..2_000, "a transactional topic");
}

/// Whether the run ended settled with nothing written.
fn caught_up_too_early(run: &LedgerRun) -> bool {
    run.log().contains("settled and lossless") && outputs(run).is_empty()
}

// issue 37.4, chaos kafka seed 20: the source said CAUGHT_UP on any empty poll, so a run
// with --exit-when-settled exited 0 before its first assignment, records unread
#[test]
fn a_kafka_feed_is_not_settled_before_its_assignment_was_read() {
    let test = "a_kafka_feed_is_not_settled_before_its_assignment_was_read";
    let Some(brokers) = shared_broker(test) else {
        return;
    };
    let library = build_plugin("kafka-plugin", &[]);
    let topic = unique_topic("assignment");
    let group = format!("{topic}-forward");
    create_topic(&brokers, &topic, 1, &[]);
    produce(&brokers, &topic, 0..5_000);
    // another member holds the group and stops polling: the rebalance that gives the
    // server its partition waits for it (its max poll interval, 10 s)
    let holder: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .set("session.timeout.ms", "6000")
        .set("max.poll.interval.ms", "10000")
        .create()
        .expect("the other member");
    holder.subscribe(&[&topic]).expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(60);
    while holder.assignment().expect("assignment").count() == 0 {
        assert!(
            Instant::now() < deadline,
            "the other member got no partition"
        );
        let _ = holder.poll(Duration::from_millis(100));
    }
    let run = forward_run(
        &library,
        &forward_config(&brokers, &topic, &group, "", &free_address()),
    );
    let code = finish(&run);
    drop(holder);
    assert!(
        !caught_up_too_early(&run),
        "the run settled before its assignment, nothing written (exit {code}): {}",
        run.log()
    );
    assert_eq!(code, 0, "{}", run.log());
    assert_written_once(&run, 0..5_000, "a slow assignment");
}

const USER: &str = "forwarder";
const PASSWORD: &str = "correct-horse-battery-staple";

/// Changes the SCRAM-SHA-256 password of `USER` on the cluster at `brokers` (Kafka's
/// own `kafka-configs` tool: `kafka.admin.ConfigCommand`, from the broker's jars).
fn set_password(brokers: &str, password: &str) {
    let classpath = mongoose_testkit::kafka::cached_classpath().expect("Kafka's jars");
    let output = Command::new(mongoose_testkit::kafka::java())
        .args(["-cp", &classpath, "kafka.admin.ConfigCommand"])
        .args(["--bootstrap-server", brokers, "--alter", "--add-config"])
        .arg(format!("SCRAM-SHA-256=[password={password}]"))
        .args(["--entity-type", "users", "--entity-name", USER])
        .output()
        .expect("java runs");
    assert!(
        output.status.success(),
        "kafka-configs: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

// issue 37.4: a SASL password changed under a running member: the logs said "invalid
// credentials" while /status said CAUGHT_UP, settled, lossless, records waiting. The
// password is changed live (kafka-configs), and the broker makes each client
// re-authenticate every 3 s (`connections.max.reauth.ms`), so the member's connections
// are refused as they would be at their next reconnect.
#[test]
fn refused_credentials_make_the_feed_stalled_not_settled() {
    let test = "refused_credentials_make_the_feed_stalled_not_settled";
    let builder = Cluster::builder(1)
        .listener("SECURE", "SASL_PLAINTEXT")
        .property(
            "listener.name.secure.sasl.enabled.mechanisms",
            "SCRAM-SHA-256",
        )
        .property(
            "listener.name.secure.scram-sha-256.sasl.jaas.config",
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        )
        .property("connections.max.reauth.ms", "3000")
        .format_argument("--add-scram")
        .format_argument(&format!("SCRAM-SHA-256=[name={USER},password={PASSWORD}]"));
    let Some(cluster) = own_cluster(test, builder) else {
        return;
    };
    let plain = cluster.bootstrap();
    let secure = cluster.bootstrap_of("SECURE");
    let library = build_plugin("kafka-plugin", &[]);
    let topic = unique_topic("refused");
    let group = format!("{topic}-forward");
    create_topic(&plain, &topic, 1, &[]);
    produce(&plain, &topic, 0..1_000);
    let address = free_address();
    let security = format!(
        r#", security_protocol = "SASL_PLAINTEXT", sasl_mechanism = "SCRAM-SHA-256", sasl_username = "{USER}", sasl_password_file = "password""#
    );
    let run = forward_run(
        &library,
        &forward_config(&secure, &topic, &group, &security, &address),
    );
    std::fs::write(run.path("password"), format!("{PASSWORD}\n")).expect("password file");
    let mut child = run.spawn(false);
    run.wait_until(&mut child, "committed the first records", || {
        committed(&plain, &group, &topic, 1) == vec![1_000]
    });
    set_password(&plain, "a-new-password");
    // the member's next re-authentication is refused (within 3 s): from then on its
    // connections are, and the records that come wait
    run.wait_for_log(&mut child, "invalid credentials");
    produce(&plain, &topic, 1_000..11_000);
    let status = wait_status(
        &run,
        &mut child,
        &address,
        "stalled with the brokers' refusal",
        |status| status["feeds"][0]["stalled"].is_string(),
    );
    let feed = &status["feeds"][0];
    assert_eq!(status["settled"], false, "{status}");
    let reason = feed["stalled"].as_str().expect("a reason");
    assert!(
        reason.contains("refuse") && reason.contains("sasl_username"),
        "the reason says the brokers refuse the credentials and what to check: {reason}"
    );
    let (code, ready) = get(&address, "/ready");
    assert_eq!(code, 503, "not ready while stalled: {ready}");
    // the password back: the member reads again, the stall is cleared, and the records
    // that waited are written
    set_password(&plain, PASSWORD);
    wait_status(
        &run,
        &mut child,
        &address,
        "settled again with the password back",
        |status| status["settled"] == true && status["feeds"][0]["stalled"].is_null(),
    );
    let (code, ready) = get(&address, "/ready");
    assert_eq!(code, 200, "ready again: {ready}");
    let code = run.terminate(child);
    assert_eq!(code, 0, "{}", run.log());
    assert_written_once(&run, 0..11_000, "refused, then accepted again");
}

// issue 37.4: a broker that cannot be reached makes the feed stalled with the reason;
// once it answers again the stall is cleared, though a member at the end of its
// partitions reads nothing new to say so (the source asks the brokers itself)
#[test]
fn an_unreachable_broker_makes_the_feed_stalled_until_it_answers_again() {
    let test = "an_unreachable_broker_makes_the_feed_stalled_until_it_answers_again";
    let Some(mut cluster) = own_cluster(test, Cluster::builder(1)) else {
        return;
    };
    let brokers = cluster.bootstrap();
    let library = build_plugin("kafka-plugin", &[]);
    let topic = unique_topic("unreachable");
    let group = format!("{topic}-forward");
    create_topic(&brokers, &topic, 1, &[]);
    produce(&brokers, &topic, 0..1_000);
    let address = free_address();
    let run = forward_run(
        &library,
        &forward_config(&brokers, &topic, &group, "", &address),
    );
    let mut child = run.spawn(false);
    run.wait_until(&mut child, "committed every record", || {
        committed(&brokers, &group, &topic, 1) == vec![1_000]
    });
    wait_status(&run, &mut child, &address, "settled", |status| {
        status["settled"] == true
    });
    cluster.kill(1);
    let status = wait_status(
        &run,
        &mut child,
        &address,
        "stalled with the brokers down",
        |status| status["feeds"][0]["stalled"].is_string(),
    );
    assert_eq!(status["settled"], false, "{status}");
    let reason = status["feeds"][0]["stalled"].as_str().expect("a reason");
    assert!(
        reason.contains("reaching the brokers"),
        "the reason says no broker answers: {reason}"
    );
    cluster.restart(1);
    wait_status(
        &run,
        &mut child,
        &address,
        "settled again with the broker back",
        |status| status["settled"] == true && status["feeds"][0]["stalled"].is_null(),
    );
    produce(&brokers, &topic, 1_000..2_000);
    run.wait_until(&mut child, "committed the records written after", || {
        committed(&brokers, &group, &topic, 1) == vec![2_000]
    });
    let code = run.terminate(child);
    assert_eq!(code, 0, "{}", run.log());
    assert_written_once(&run, 0..2_000, "a broker down, then back");
}
