//! What the tests that run the `mongoose` binary on a Kafka broker of their own
//! (`mongoose_testkit::kafka::Cluster`) share: the ledger lines, batching producers,
//! topics, the group's committed offsets, the members of a consumer group of servers,
//! and the check of a ledger's changelog against the truth.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use mongoose_testkit::kafka::Cluster;
use mongoose_testkit::plugin_dir;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

use crate::support::{assert_applied_once, plugin_ledger_config, LedgerRun};

/// A cluster of `nodes` of the test's own from `builder`, or `None` (the test is
/// skipped with a message) when Apache Kafka's jars are not resolved, unless
/// `MONGOOSE_REQUIRE_BROKER` is set.
pub fn own_cluster(
    test: &str,
    builder: mongoose_testkit::kafka::ClusterBuilder,
) -> Option<Cluster> {
    let cluster = builder.start();
    if cluster.is_none() {
        assert!(
            std::env::var_os("MONGOOSE_REQUIRE_BROKER").is_none(),
            "{test}: Apache Kafka's jars are not resolved and MONGOOSE_REQUIRE_BROKER is set: run `cargo xtask broker start` once (it resolves them)"
        );
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: Apache Kafka's jars are not resolved; `cargo xtask broker start` resolves them"
        );
    }
    cluster
}

/// The ledger line of record `index`: 50 accounts, amounts -3..=3.
pub fn line(index: usize) -> String {
    let amount = (index % 7) as i64 - 3;
    format!("acc{},{amount}", index % 50)
}

/// A topic name no other run uses.
pub fn unique_topic(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis())
    )
}

/// Creates `topic` with `partitions` partitions and the topic settings `config`
/// (replicated as the broker's `default.replication.factor` says).
pub fn create_topic(brokers: &str, topic: &str, partitions: i32, config: &[(&str, &str)]) {
    let created = mongoose_kafka::admin::create_topic(
        brokers,
        topic,
        partitions,
        config,
        Duration::from_secs(60),
    )
    .expect("create the topic");
    assert!(created, "the topic {topic} is new");
}

/// A producer that batches as librdkafka does by default (`linger.ms` 5,
/// `batch.size` 1 MB: many records per produce request), idempotent, `acks=all`.
pub fn batching_producer(brokers: &str) -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .create()
        .expect("producer")
}

/// Writes the ledger lines `indexes` keyed by their account (an account's lines are in
/// one partition) with `producer`, each record handed over as soon as it is made
/// (batched by the producer), and waits until every one is acknowledged.
pub fn produce_lines(producer: &BaseProducer, topic: &str, indexes: std::ops::Range<usize>) {
    for index in indexes {
        let payload = line(index);
        let key = payload
            .split_once(',')
            .map_or("", |(account, _)| account)
            .to_owned();
        while let Err((error, _)) = producer.send(BaseRecord::to(topic).key(&key).payload(&payload))
        {
            assert!(
                matches!(
                    error.rdkafka_error_code(),
                    Some(rdkafka::types::RDKafkaErrorCode::QueueFull)
                ),
                "produce: {error}"
            );
            producer.poll(Duration::from_millis(10));
        }
        producer.poll(Duration::ZERO);
    }
    producer
        .flush(Duration::from_secs(240))
        .expect("every record acknowledged");
}

/// The group's committed offset per partition (-1: none).
pub fn committed(brokers: &str, group: &str, topic: &str, partitions: i32) -> Vec<i64> {
    mongoose_kafka::admin::committed_offsets(
        brokers,
        group,
        topic,
        partitions,
        Duration::from_secs(20),
    )
    .expect("committed offsets")
}

/// The records the group has committed, summed over the partitions.
pub fn committed_total(brokers: &str, group: &str, topic: &str, partitions: i32) -> i64 {
    committed(brokers, group, topic, partitions)
        .iter()
        .map(|offset| (*offset).max(0))
        .sum()
}

/// The input positions of a partition's counted changelog changes are `1..=end`, each
/// once and in order: every record of the partition applied exactly once.
pub fn assert_each_once(partition: i32, positions: &[u64], end: u64) {
    let mut seen = BTreeMap::new();
    for position in positions {
        *seen.entry(*position).or_insert(0u32) += 1;
    }
    let twice: Vec<u64> = seen
        .iter()
        .filter(|(_, count)| **count > 1)
        .map(|(position, _)| *position)
        .collect();
    let missing: Vec<u64> = (1..=end)
        .filter(|position| !seen.contains_key(position))
        .collect();
    assert!(
        twice.is_empty() && missing.is_empty() && positions.windows(2).all(|pair| pair[0] < pair[1]),
        "partition {partition}: {} records applied more than once (first {:?}), {} never (first {:?}), of {end}",
        twice.len(),
        twice.iter().take(5).collect::<Vec<_>>(),
        missing.len(),
        missing.iter().take(5).collect::<Vec<_>>()
    );
    assert_eq!(positions.len() as u64, end, "partition {partition}");
}

/// What [`check_changelog`] read.
#[derive(Debug, Default)]
pub struct ChangelogCheck {
    /// Writes fenced off (an old owner's, behind a newer owner's marker).
    pub fenced: u64,
    /// The records read per partition.
    pub records: Vec<usize>,
    /// The offsets read per partition (a compacted partition has gaps).
    pub offsets: Vec<Vec<i64>>,
}

/// Checks the ledger's changelog `changelog` (of input `topic`) against each
/// partition's end (`ends`: the group's committed offsets, -1 for a partition no record
/// went to): the counted changes are each record of the partition once, in order, its
/// count is its end, and the balances summed over the partitions are those of `lines`.
pub fn check_changelog(
    brokers: &str,
    topic: &str,
    changelog: &str,
    ends: &[i64],
    lines: &[String],
) -> ChangelogCheck {
    let store = mongoose_kafka::changelog::Changelog::open(
        mongoose_kafka::changelog::ChangelogConfig::new("check", brokers, changelog),
        topic,
        std::sync::Arc::new(|_, _| {}),
    )
    .expect("the changelog opens");
    let mut summed = mongoose_ledger::LedgerState::default();
    let mut check = ChangelogCheck::default();
    for (partition, end) in ends.iter().enumerate() {
        let partition = partition as i32;
        let records = store.read(partition).expect("read");
        check.records.push(records.len());
        check
            .offsets
            .push(records.iter().map(|record| record.log_offset).collect());
        let mut positions = Vec::new();
        let restored =
            mongoose_kafka::changelog::fold(&records, |record| positions.push(record.offset));
        let end = (*end).max(0) as u64;
        assert_each_once(partition, &positions, end);
        check.fenced += restored.fenced;
        let state = mongoose_ledger::partition_state(&restored).expect("ledger changes");
        assert_eq!(state.applied, end, "partition {partition}");
        summed.applied += state.applied;
        for (account, balance) in state.balances {
            *summed.balances.entry(account).or_insert(0) += balance;
        }
    }
    assert_applied_once(&summed, lines, "the partitions of the changelog summed");
    check
}

/// The config of one member of consumer group `group` reading `topic` at `brokers`
/// whose ledger keeps its state in the changelog (`more` added to the feed's settings,
/// `ledger` to the ledger's, `tail` after the whole config: sinks).
pub fn member_config(
    brokers: &str,
    topic: &str,
    group: &str,
    (more, ledger, tail): (&str, &str, &str),
) -> String {
    let config = plugin_ledger_config(
        "plugins",
        "kafka",
        &format!(
            r#"brokers = "{brokers}", group = "{group}", topic = "{topic}", session_timeout_ms = 6000{more}"#
        ),
        &format!(r#"state_dir = "state", state = "changelog"{ledger}"#),
    );
    format!("{config}\n{tail}\n")
}

/// One `mongoose` process of a group, in its own folder.
pub struct Member {
    pub run: LedgerRun,
    pub child: Option<std::process::Child>,
}

impl Member {
    /// Starts a member on `config` with the kafka plugin `library`.
    pub fn start(library: &Path, config: &str) -> Self {
        let mut run = LedgerRun::new("", config);
        run.log_filter = "warn,mongoose_server::cli=info,mongoose_ledger=info";
        plugin_dir(run.dir.path(), &[library]);
        let child = Some(run.spawn(false));
        Member { run, child }
    }

    /// Asserts the member still runs.
    pub fn check_alive(&mut self) {
        if let Some(child) = self.child.as_mut() {
            assert!(
                child.try_wait().expect("status").is_none(),
                "a member exited: {}",
                self.run.log()
            );
        }
    }

    /// Partitions this member restored from the changelog (took over).
    pub fn takeovers(&self) -> usize {
        self.run
            .log()
            .matches("state restored from the changelog")
            .count()
    }

    /// SIGKILLs the member.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
    }

    /// SIGTERM; asserts it stopped clean.
    pub fn stop(&mut self) {
        let child = self.child.take().expect("running");
        let code = self.run.terminate(child);
        assert_eq!(code, 0, "stopped clean: {}", self.run.log());
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits (up to `seconds`) until `done`, checking every member of `members` is alive;
/// the logs of all in the failure.
pub fn wait_members(
    members: &mut [&mut Member],
    what: &str,
    seconds: u64,
    done: &dyn Fn() -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !done() {
        for member in members.iter_mut() {
            member.check_alive();
        }
        assert!(
            Instant::now() < deadline,
            "never {what}: {}",
            members
                .iter()
                .map(|member| member.run.log())
                .collect::<Vec<_>>()
                .join("\n----\n")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
