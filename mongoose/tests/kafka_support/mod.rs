//! What the tests that run the `mongoose` binary on a Kafka broker of their own
//! (`mongoose_testkit::kafka::Cluster`) share: the ledger lines, batching producers,
//! topics, the group's committed offsets, the members of a consumer group of servers,
//! and the check of a ledger's changelog against the truth.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use mongoose_testkit::kafka::Cluster;
use mongoose_testkit::plugin_dir;
use rdkafka::client::ClientContext;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::statistics::Statistics;
use rdkafka::ClientConfig;

use crate::support::{assert_applied_once, plugin_ledger_config, LedgerRun};

/// Held by every test of the process that runs Apache Kafka nodes of its own, for as
/// long as they run: the tests of all the suite's files share one process, and two sets
/// of JVMs started at once on a machine of few cores starve each other and the servers
/// under test (each file's tests used to run one binary after another; kafka_broker's
/// ran one at a time behind a lock of its own).
static OWN_CLUSTERS: Mutex<()> = Mutex::new(());

/// A cluster of a test's own: the nodes, and the process-wide lock of such clusters
/// ([`OWN_CLUSTERS`]), released after the nodes are stopped (fields drop in order).
pub struct OwnCluster {
    cluster: Cluster,
    _one_at_a_time: MutexGuard<'static, ()>,
}

impl std::ops::Deref for OwnCluster {
    type Target = Cluster;

    fn deref(&self) -> &Cluster {
        &self.cluster
    }
}

impl std::ops::DerefMut for OwnCluster {
    fn deref_mut(&mut self) -> &mut Cluster {
        &mut self.cluster
    }
}

/// The shared test broker (`MONGOOSE_KAFKA_BROKERS`, else `127.0.0.1:19092`) when one
/// of its addresses answers; `None` (the test skips, saying so) when none does, and a
/// failure instead when `MONGOOSE_REQUIRE_BROKER` is set.
pub fn shared_brokers() -> Option<String> {
    let brokers =
        std::env::var("MONGOOSE_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:19092".to_owned());
    // a list of brokers (a three-node test broker) answers when one of them does
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
        "no Kafka broker answers at {brokers} and MONGOOSE_REQUIRE_BROKER is set: start it with `cargo xtask broker start`"
    );
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: no Kafka broker answers at {brokers}; start one with `cargo xtask broker start`"
    );
    None
}

/// A cluster of `nodes` of the test's own from `builder`, started once no other test of
/// the process runs one (it waits for [`OWN_CLUSTERS`]), or `None` (the test is
/// skipped with a message) when Apache Kafka's jars are not resolved, unless
/// `MONGOOSE_REQUIRE_BROKER` is set.
pub fn own_cluster(
    test: &str,
    builder: mongoose_testkit::kafka::ClusterBuilder,
) -> Option<OwnCluster> {
    let one_at_a_time = OWN_CLUSTERS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
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
    cluster.map(|cluster| OwnCluster {
        cluster,
        _one_at_a_time: one_at_a_time,
    })
}

/// The ledger line of record `index`: 50 accounts, amounts -3..=3.
pub fn line(index: usize) -> String {
    let amount = (index % 7) as i64 - 3;
    format!("acc{},{amount}", index % 50)
}

/// A topic name no other run uses, nor another test of this process (the suite's
/// files share one process: two tests that name topics with the same prefix in the
/// same millisecond get different names).
pub fn unique_topic(prefix: &str) -> String {
    static NAMED: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}-{}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis()),
        NAMED.fetch_add(1, Ordering::Relaxed)
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

/// Records whose delivery failed, over every [`ProduceStats`] producer of the process.
pub static DELIVERY_FAILURES: AtomicUsize = AtomicUsize::new(0);

/// A producer's context that keeps librdkafka's latest statistics: records sent and
/// Produce requests, to show that records went in batches.
#[derive(Default)]
pub struct ProduceStats(Mutex<Option<(i64, i64)>>);

impl ProduceStats {
    /// `(records sent, Produce requests)` as the latest statistics said.
    pub fn sent(&self) -> Option<(i64, i64)> {
        *self.0.lock().expect("stats")
    }
}

impl ClientContext for ProduceStats {
    fn stats(&self, statistics: Statistics) {
        let requests = statistics
            .brokers
            .values()
            .map(|broker| broker.req.get("Produce").copied().unwrap_or(0))
            .sum();
        *self.0.lock().expect("stats") = Some((statistics.txmsgs, requests));
    }
}

impl ProducerContext for ProduceStats {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: Self::DeliveryOpaque) {
        if let Err((error, _)) = result {
            let failed = DELIVERY_FAILURES.fetch_add(1, Ordering::SeqCst) + 1;
            if failed <= 5 {
                eprintln!("a record's delivery failed ({failed} so far): {error}");
            }
        }
    }
}

/// Ledger lines written by a producer thread in chunks with a pause between them, so
/// that they keep coming while a test changes the group or the cluster.
pub struct LineStream {
    /// The records handed to the producer so far.
    pub produced: Arc<AtomicUsize>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<BaseProducer<ProduceStats>>,
}

impl LineStream {
    /// Writes the lines `indexes` to `topic` at `brokers`, `chunk` records then a
    /// `pause`, with librdkafka's default batching (`linger.ms` 5, `batch.size` 1 MB),
    /// idempotent and `acks=all`.
    pub fn start(
        brokers: &str,
        topic: &str,
        indexes: std::ops::Range<usize>,
        chunk: usize,
        pause: Duration,
    ) -> LineStream {
        let producer: BaseProducer<ProduceStats> = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("statistics.interval.ms", "200")
            .create_with_context(ProduceStats::default())
            .expect("producer");
        let produced = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&produced);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let topic = topic.to_owned();
        let thread = std::thread::spawn(move || {
            let mut start = indexes.start;
            while start < indexes.end && !stopped.load(Ordering::SeqCst) {
                let end = (start + chunk).min(indexes.end);
                send_lines(&producer, &topic, start..end);
                counter.fetch_add(end - start, Ordering::SeqCst);
                start = end;
                std::thread::sleep(pause);
            }
            producer
                .flush(Duration::from_secs(240))
                .expect("every record acknowledged");
            producer
        });
        LineStream {
            produced,
            stop,
            thread,
        }
    }

    /// Stops the stream after its current chunk (see [`LineStream::finish`]).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// The records handed over so far.
    pub fn produced(&self) -> usize {
        self.produced.load(Ordering::SeqCst)
    }

    /// Waits until every record is acknowledged; the records per Produce request
    /// (librdkafka's statistics).
    pub fn finish(self) -> f64 {
        let producer = self.thread.join().expect("the producer thread");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            producer.poll(Duration::from_millis(100));
            if let Some((records, requests)) = producer.context().sent() {
                if records > 0 && requests > 0 {
                    return records as f64 / requests as f64;
                }
            }
            assert!(Instant::now() < deadline, "no producer statistics");
        }
    }
}

/// Hands the ledger lines `indexes` keyed by their account (an account's lines are in
/// one partition) to `producer`, waiting only while its queue is full.
fn send_lines<C: ProducerContext<DeliveryOpaque = ()>>(
    producer: &BaseProducer<C>,
    topic: &str,
    indexes: std::ops::Range<usize>,
) {
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
}

/// Writes the ledger lines `indexes` with `producer` (batched by it) and waits until
/// every one is acknowledged.
pub fn produce_lines(producer: &BaseProducer, topic: &str, indexes: std::ops::Range<usize>) {
    send_lines(producer, topic, indexes);
    producer
        .flush(Duration::from_secs(240))
        .expect("every record acknowledged");
}

/// The group's committed offset per partition (-1: none). A read that times out is tried
/// again (3 tries of 20 s): on a loaded machine a new client's metadata fetch can time
/// out while the members are busy, which says nothing about what they committed.
pub fn committed(brokers: &str, group: &str, topic: &str, partitions: i32) -> Vec<i64> {
    let mut tries = 0;
    loop {
        tries += 1;
        match mongoose_kafka::admin::committed_offsets(
            brokers,
            group,
            topic,
            partitions,
            Duration::from_secs(20),
        ) {
            Ok(offsets) => return offsets,
            Err(error) if tries < 3 => {
                eprintln!("reading the committed offsets (try {tries} of 3): {error}");
            }
            Err(error) => panic!("committed offsets: {error:?}"),
        }
    }
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
        run.log_filter = "warn,mongoose_server::cli=info,mongoose_ledger=info,mongoose_kafka=info,mongoose_plugin=info";
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

    /// The backtraces of the member's threads (`gdb -batch`), or why there are none:
    /// printed when a wait gives up, to show where a stuck member waits.
    pub fn threads(&self) -> String {
        let Some(child) = self.child.as_ref() else {
            return "member not running: no threads".to_owned();
        };
        let pid = child.id().to_string();
        match std::process::Command::new("gdb")
            .args(["-batch", "-p", &pid, "-ex", "thread apply all bt 30"])
            .output()
        {
            Ok(output) => format!(
                "threads of member pid {pid}:\n{}",
                String::from_utf8_lossy(&output.stdout)
            ),
            Err(error) => format!("no backtraces of member pid {pid} (gdb: {error})"),
        }
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

/// Waits (up to `seconds`) until `done(members)`, checking every member of `members` is alive;
/// the logs of all in the failure.
pub fn wait_members(
    members: &mut [&mut Member],
    what: &str,
    seconds: u64,
    done: &dyn Fn(&[&mut Member]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !done(members) {
        for member in members.iter_mut() {
            member.check_alive();
        }
        if Instant::now() >= deadline {
            // where each stuck member's threads wait (when gdb is there to say)
            for member in members.iter() {
                eprintln!("{}", member.threads());
            }
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

/// The payloads of every record of `topic`'s partition 0 (at `brokers`, PLAINTEXT),
/// read up to its high watermark as it is now (within 60 s).
pub fn read_topic(brokers: &str, topic: &str) -> Vec<String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::Message;
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", unique_topic("reader"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let (_, end) = consumer
        .fetch_watermarks(topic, 0, Duration::from_secs(20))
        .expect("the topic's watermarks");
    let mut assignment = rdkafka::TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, rdkafka::Offset::Beginning)
        .expect("offset");
    consumer.assign(&assignment).expect("assign");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut payloads = Vec::new();
    let mut next = 0;
    while next < end {
        assert!(
            Instant::now() < deadline,
            "{topic}: read {} records up to offset {next} of {end} in 60 s",
            payloads.len()
        );
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            let message = message.expect("a record");
            next = message.offset() + 1;
            payloads
                .push(String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned());
        }
    }
    payloads
}

/// How many of `lines` leave their account's balance negative (an alert each).
pub fn expected_alerts(lines: &[String]) -> usize {
    let mut balances = std::collections::BTreeMap::<&str, i64>::new();
    let mut alerts = 0;
    for line in lines {
        let (account, amount) = line.split_once(',').expect("account,amount");
        let balance = balances.entry(account).or_insert(0);
        *balance += amount.parse::<i64>().expect("amount");
        if *balance < 0 {
            alerts += 1;
        }
    }
    alerts
}

/// The replication factor of each partition of `topic`.
pub fn replicas(brokers: &str, topic: &str) -> Vec<usize> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let client: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("client");
    let metadata = client
        .fetch_metadata(Some(topic), Duration::from_secs(20))
        .expect("metadata");
    metadata
        .topics()
        .iter()
        .flat_map(|found| {
            found
                .partitions()
                .iter()
                .map(|partition| partition.replicas().len())
        })
        .collect()
}

/// The payloads of `topic`'s partitions `0..partitions` a `read_committed` reader sees,
/// partition by partition in log order, read up to a sentinel written to each partition
/// (outside any transaction) after everything else.
pub fn read_committed(brokers: &str, topic: &str, partitions: i32) -> Vec<String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::Message;
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("producer");
    for partition in 0..partitions {
        producer
            .send(
                BaseRecord::<str, str>::to(topic)
                    .partition(partition)
                    .payload("sentinel"),
            )
            .expect("queued");
    }
    producer
        .flush(Duration::from_secs(60))
        .expect("sentinels written");
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", unique_topic("committed-reader"))
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut assignment = rdkafka::TopicPartitionList::new();
    for partition in 0..partitions {
        assignment
            .add_partition_offset(topic, partition, rdkafka::Offset::Beginning)
            .expect("assignment");
    }
    consumer.assign(&assignment).expect("assigned");
    let mut payloads = Vec::new();
    let mut ended = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while ended < partitions {
        assert!(
            Instant::now() < deadline,
            "the sentinels of {topic} never came ({ended} of {partitions})"
        );
        let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let payload = String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned();
        if payload == "sentinel" {
            ended += 1;
        } else {
            payloads.push(payload);
        }
    }
    payloads
}

/// The config of a `forward` of Kafka feed `lines` (the plugin, `settings` added to its
/// table) into the file sink `out` (`out.txt`), with the admin API at `admin`.
pub fn forward_config(
    brokers: &str,
    topic: &str,
    group: &str,
    settings: &str,
    admin: &str,
) -> String {
    format!(
        r#"plugin_dir = "plugins"

[admin]
address = "{admin}"

[[feeds]]
name = "lines"
source = "kafka"
codec = "line"
settings = {{ brokers = "{brokers}", group = "{group}", topic = "{topic}", session_timeout_ms = 6000{settings} }}

[[sinks]]
name = "out"
kind = "file"
path = "out.txt"

[[groups]]
name = "forward"
[[groups.processors]]
name = "copy"
kind = "forward"
settings = {{ feed = "lines", sink = "out" }}
"#
    )
}

/// A free local address (`127.0.0.1:port`) for an admin API.
pub fn free_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    format!(
        "127.0.0.1:{}",
        listener.local_addr().expect("address").port()
    )
}
