//! A Kafka feed's topic changing under it (issue 37, parts 2 and 5): partitions added to
//! the input of a changelog ledger and of a forward, and an input topic deleted and made
//! again under the same name. The `mongoose` binary with the `kafka` plugin, on the test
//! broker (`cargo xtask broker start`; CI starts it). Book: connectors/kafka.md,
//! "When the topic changes under a feed".

use crate::kafka_support;
use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_support::{
    batching_producer, check_changelog, committed, committed_total, create_topic, forward_config,
    free_address, line, member_config, produce_lines, unique_topic, wait_members, Member,
};
use mongoose_testkit::{build_plugin, plugin_dir};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use support::LedgerRun;

fn brokers() -> Option<String> {
    kafka_support::shared_brokers()
}

/// Grows `topic` to `partitions` partitions.
fn add_partitions(brokers: &str, topic: &str, partitions: i32) {
    let grown = mongoose_kafka::admin::add_partitions(
        brokers,
        &[],
        topic,
        partitions,
        Duration::from_secs(30),
    )
    .expect("add partitions");
    assert!(grown, "{topic} grown to {partitions} partitions");
}

/// Writes the unique lines `name-<index>` of `indexes` to `partition` of `topic`, and
/// waits until each is acknowledged.
fn produce_to(
    brokers: &str,
    topic: &str,
    partition: i32,
    name: &str,
    indexes: std::ops::Range<usize>,
) {
    let producer: BaseProducer = batching_producer(brokers);
    for index in indexes {
        let payload = format!("{name}-{index}");
        let mut record = BaseRecord::<str, str>::to(topic)
            .partition(partition)
            .payload(&payload);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, returned)) => {
                    record = returned;
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .expect("every record acknowledged");
}

/// How many times each line of `out.txt` was written.
fn written(run: &LedgerRun) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in std::fs::read_to_string(run.path("out.txt"))
        .unwrap_or_default()
        .lines()
    {
        *counts.entry(line.to_owned()).or_insert(0) += 1;
    }
    counts
}

/// Asserts `out.txt` holds each of `expected` exactly once, and nothing else.
fn assert_written_once(run: &LedgerRun, expected: &[String]) {
    let counts = written(run);
    let twice: Vec<_> = counts.iter().filter(|(_, count)| **count > 1).collect();
    let missing: Vec<_> = expected
        .iter()
        .filter(|line| !counts.contains_key(*line))
        .collect();
    let extra = counts.len() + missing.len() - expected.len();
    assert!(
        twice.is_empty() && missing.is_empty() && extra == 0,
        "{} lines written more than once (first {:?}), {} never (first {:?}), {extra} not expected: {}",
        twice.len(),
        twice.iter().take(5).collect::<Vec<_>>(),
        missing.len(),
        missing.iter().take(5).collect::<Vec<_>>(),
        run.log()
    );
}

/// Waits up to `seconds` for `done`, the server alive; the log in the failure.
fn wait_for(
    run: &LedgerRun,
    child: &mut std::process::Child,
    what: &str,
    seconds: u64,
    done: impl Fn() -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !done() {
        assert!(
            child.try_wait().expect("status").is_none(),
            "the server exited before it {what}: {}",
            run.log()
        );
        assert!(
            Instant::now() < deadline,
            "never {what} within {seconds} s: {}",
            run.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Issue 37.5 (chaos seed kafka 11): partitions added to a changelog ledger's input were
/// not read for 5 minutes (librdkafka's default metadata refresh), then the first write
/// to changelog partition 3 failed with UnknownPartition and quarantined every partition
/// (SIGTERM exit 4), and the next start refused the whole ledger (the changelog has fewer
/// partitions than the input, exit 1). Now the feed sees the new partition within its
/// metadata refresh (5 s by default), the changelog grows with the input, the old
/// partitions keep working, and a restart starts.
#[test]
fn partitions_added_to_a_ledgers_input_keep_the_old_partitions_working() {
    let Some(brokers) = brokers() else {
        return;
    };
    let library = build_plugin("kafka-plugin", &[]);
    let topic = unique_topic("grown-ledger");
    let group = format!("{topic}-ledgers");
    let changelog = format!("{group}-ledger-changelog");
    create_topic(&brokers, &topic, 3, &[]);
    let producer = batching_producer(&brokers);
    produce_lines(&producer, &topic, 0..600);
    let config = member_config(
        &brokers,
        &topic,
        &group,
        ("", r#", alerts = "alerts.txt""#, ""),
    );
    let mut member = Member::start(&library, &config);
    wait_members(
        &mut [&mut member],
        "committed the first 600 lines",
        120,
        &|_| committed_total(&brokers, &group, &topic, 3) >= 600,
    );
    add_partitions(&brokers, &topic, 4);
    // a new producer sees 4 partitions: the accounts hash over them, partition 3 too
    let producer = batching_producer(&brokers);
    produce_lines(&producer, &topic, 600..1_200);
    let ends = committed(&brokers, &group, &topic, 4);
    eprintln!("committed before the new partition is read: {ends:?}");
    // well under the 5 minutes of librdkafka's default refresh
    wait_members(
        &mut [&mut member],
        "committed every line, partition 3's too",
        90,
        &|_| committed_total(&brokers, &group, &topic, 4) >= 1_200,
    );
    assert!(
        committed(&brokers, &group, &topic, 4)[3] > 0,
        "partition 3 got lines and they were committed"
    );
    let log = member.run.log();
    assert!(
        log.contains("changelog topic grown") || log.contains("changelog topic already grown"),
        "the changelog grew with its input: {log}"
    );
    member.stop();
    // a restart starts (it refused the whole ledger: fewer changelog partitions)
    let mut member = Member::start(&library, &config);
    produce_lines(&producer, &topic, 1_200..1_500);
    wait_members(
        &mut [&mut member],
        "committed the lines after the restart",
        120,
        &|_| committed_total(&brokers, &group, &topic, 4) >= 1_500,
    );
    member.stop();
    let ends = committed(&brokers, &group, &topic, 4);
    let lines: Vec<String> = (0..1_500).map(line).collect();
    check_changelog(&brokers, &topic, &changelog, &ends, &lines);
}

/// Issue 37.5: without a ledger, a partition added to a forward's input was read only
/// after up to 5 minutes, and with `start_from = "latest"` from its end: the records
/// written to it before the member saw it were never read. A partition of a topic the
/// group already reads is read from its start, within the feed's metadata refresh (5 s
/// by default).
#[test]
fn partitions_added_to_a_forwards_input_are_read_from_their_start_promptly() {
    let Some(brokers) = brokers() else {
        return;
    };
    let library = build_plugin("kafka-plugin", &[]);
    let topic = unique_topic("grown-forward");
    let group = format!("{topic}-forward");
    create_topic(&brokers, &topic, 2, &[]);
    let mut run = LedgerRun::new(
        "",
        &forward_config(
            &brokers,
            &topic,
            &group,
            r#", start_from = "latest""#,
            &free_address(),
        ),
    );
    run.log_filter = "warn,mongoose_server::cli=info,mongoose_kafka=info,mongoose_plugin=info";
    plugin_dir(run.dir.path(), &[&library]);
    let mut child = run.spawn(false);
    run.wait_for_log(&mut child, "partitions assigned");
    let mut expected = Vec::new();
    for partition in 0..2 {
        produce_to(
            &brokers,
            &topic,
            partition,
            &format!("p{partition}"),
            0..100,
        );
        expected.extend((0..100).map(|index| format!("p{partition}-{index}")));
    }
    wait_for(
        &run,
        &mut child,
        "forwarded the first 200 lines",
        120,
        || written(&run).len() >= 200,
    );
    add_partitions(&brokers, &topic, 3);
    // written at once, before the member can have seen the partition
    produce_to(&brokers, &topic, 2, "p2", 0..300);
    expected.extend((0..300).map(|index| format!("p2-{index}")));
    wait_for(
        &run,
        &mut child,
        "forwarded partition 2's lines",
        60,
        || written(&run).len() >= expected.len(),
    );
    std::thread::sleep(Duration::from_millis(500));
    let code = run.terminate(child);
    assert_eq!(code, 0, "stopped clean: {}", run.log());
    assert!(
        run.log()
            .contains("read from its start, not from start_from = latest"),
        "the added partition was read from its start: {}",
        run.log()
    );
    assert_written_once(&run, &expected);
}

/// Deletes `topic` and makes it again with `partitions` partitions (asked again while the
/// broker still deletes the old one).
fn delete_topic(brokers: &str, topic: &str) {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("admin client");
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results =
        mongoose_kafka::block_on(admin.delete_topics(&[topic], &options)).expect("delete");
    for result in results {
        result.expect("the topic deleted");
    }
}

fn create_topic_again(brokers: &str, topic: &str, partitions: i32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match mongoose_kafka::admin::create_topic(
            brokers,
            topic,
            partitions,
            &[],
            Duration::from_secs(30),
        ) {
            Ok(true) => return,
            Ok(false) | Err(_) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
            }
            other => panic!("{topic} not made again: {other:?}"),
        }
    }
}

/// The ledger's state summed over the partitions of its changelog, and the lines the
/// forward wrote, each against `lines` (the old topic's and the new one's): every line
/// applied (and written) exactly once.
fn check_recreated(brokers: &str, topic: &str, changelog: &str, run: &LedgerRun, lines: &[String]) {
    let store = mongoose_kafka::changelog::Changelog::open(
        mongoose_kafka::changelog::ChangelogConfig::new("check", brokers, changelog),
        topic,
        std::sync::Arc::new(|_, _| {}),
    )
    .expect("the changelog opens");
    let mut summed = mongoose_ledger::LedgerState::default();
    for partition in 0..3 {
        let records = store.read(partition).expect("read");
        let restored = mongoose_kafka::changelog::fold(&records, |_| {});
        let state = mongoose_ledger::partition_state(&restored).expect("ledger changes");
        summed.applied += state.applied;
        for (account, balance) in state.balances {
            *summed.balances.entry(account).or_insert(0) += balance;
        }
    }
    support::assert_applied_once(
        &summed,
        lines,
        "the ledger's partitions summed, both topics",
    );
    let mut expected = BTreeMap::new();
    for line in lines {
        *expected.entry(line.clone()).or_insert(0usize) += 1;
    }
    let counts = written(run);
    let wrong: Vec<_> = expected
        .iter()
        .filter(|(line, count)| counts.get(*line) != Some(count))
        .map(|(line, count)| (line.clone(), *count, counts.get(line).copied().unwrap_or(0)))
        .collect();
    let total: usize = counts.values().sum();
    assert!(
        wrong.is_empty() && total == lines.len(),
        "the forward wrote {total} lines of {}; (line, expected, written) differing: {} (first {:?})",
        lines.len(),
        wrong.len(),
        wrong.iter().take(5).collect::<Vec<_>>()
    );
}

/// A member of `group` on `topic`: the ledger with its changelog, and a forward of the
/// same feed into the file sink `out.txt`.
fn recreate_member(library: &std::path::Path, brokers: &str, topic: &str, group: &str) -> Member {
    let tail = r#"
[[sinks]]
name = "out"
kind = "file"
path = "out.txt"

[[groups]]
name = "forward"
[[groups.processors]]
name = "copy"
kind = "forward"
settings = { feed = "lines", sink = "out" }
"#;
    Member::start(
        library,
        &member_config(
            brokers,
            topic,
            group,
            ("", r#", alerts = "alerts.txt""#, tail),
        ),
    )
}

/// Lines of the old topic, then of the new one (fewer: under the old position check all
/// of them were at or below the restored offsets, "already in the state").
const OLD: usize = 600;
const NEW: usize = 400;

/// Issue 37.2 (chaos seed kafka 6): the input topic deleted and made again while the
/// member is stopped. The changelog's position check took the new topic's first records
/// for "already in the restored state" (875 lines never applied, exit 0). The takeover's
/// marker now records the input topic's id, and a position of another topic is not
/// compared.
/// Waits until `member` committed and forwarded the old topic's `OLD` records, stops it,
/// deletes the topic and makes it again with `partitions`, writes `NEW` records and
/// starts the member again on its folder, then waits until it forwarded and committed
/// them.
fn remake_while_stopped(
    member: &mut Member,
    (brokers, topic, group): (&str, &str, &str),
    partitions: i32,
) {
    wait_members(
        &mut [&mut *member],
        "committed and forwarded the old topic",
        120,
        &|members| {
            committed_total(brokers, group, topic, partitions) >= OLD as i64
                && written(&members[0].run).values().sum::<usize>() >= OLD
        },
    );
    member.stop();
    delete_topic(brokers, topic);
    create_topic_again(brokers, topic, partitions);
    produce_lines(&batching_producer(brokers), topic, OLD..OLD + NEW);
    member.child = Some(member.run.spawn(false));
    wait_members(
        &mut [&mut *member],
        "forwarded the new topic",
        120,
        &|members| written(&members[0].run).values().sum::<usize>() >= OLD + NEW,
    );
    wait_members(&mut [&mut *member], "committed the new topic", 120, &|_| {
        committed_total(brokers, group, topic, partitions) >= NEW as i64
    });
}

#[test]
fn a_recreated_input_topic_is_a_new_epoch_and_nothing_is_skipped_stopped() {
    let Some(brokers) = brokers() else {
        return;
    };
    let library = build_plugin("kafka-plugin", &[]);
    let topic = unique_topic("recreated-stopped");
    let group = format!("{topic}-ledgers");
    let changelog = format!("{group}-ledger-changelog");
    create_topic(&brokers, &topic, 3, &[]);
    produce_lines(&batching_producer(&brokers), &topic, 0..OLD);
    let mut member = recreate_member(&library, &brokers, &topic, &group);
    // the same folder: the forward's file and the feed's state are this member's
    remake_while_stopped(&mut member, (&brokers, &topic, &group), 3);
    std::thread::sleep(Duration::from_millis(500));
    let log = member.run.log();
    assert!(
        log.contains("the restored position belongs to an earlier topic"),
        "the changelog saw the position's topic was another: {log}"
    );
    member.stop();
    let lines: Vec<String> = (0..OLD + NEW).map(line).collect();
    check_recreated(&brokers, &topic, &changelog, &member.run, &lines);
}

/// Issue 37.2 (chaos seed kafka 13): the input topic deleted and made again while the
/// member reads. The consumer kept its fetch positions on the new topic, nothing was
/// logged, and 1,540 lines were never applied (exit 0). The source now notices the topic
/// going and coming back (its id), reads the new one from its start in new epochs, and
/// the changelog does not compare offsets across the two topics.
#[test]
fn a_recreated_input_topic_is_a_new_epoch_and_nothing_is_skipped_live() {
    let Some(brokers) = brokers() else {
        return;
    };
    let library = build_plugin("kafka-plugin", &[]);
    let topic = unique_topic("recreated-live");
    let group = format!("{topic}-ledgers");
    let changelog = format!("{group}-ledger-changelog");
    create_topic(&brokers, &topic, 3, &[]);
    produce_lines(&batching_producer(&brokers), &topic, 0..OLD);
    let mut member = recreate_member(&library, &brokers, &topic, &group);
    wait_members(
        &mut [&mut member],
        "committed and forwarded the old topic",
        120,
        &|members| {
            committed_total(&brokers, &group, &topic, 3) >= OLD as i64
                && written(&members[0].run).values().sum::<usize>() >= OLD
        },
    );
    delete_topic(&brokers, &topic);
    // give the member the time to see it gone (it asks every 5 s by default): a topic made
    // again within one look is a new id all the same, but records of it read before that
    // look may be applied twice (duplicates, never a gap)
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && !member.run.log().contains("input topic was deleted") {
        member.check_alive();
        std::thread::sleep(Duration::from_millis(100));
    }
    create_topic_again(&brokers, &topic, 3);
    produce_lines(&batching_producer(&brokers), &topic, OLD..OLD + NEW);
    wait_members(
        &mut [&mut member],
        "forwarded the new topic",
        120,
        &|members| written(&members[0].run).values().sum::<usize>() >= OLD + NEW,
    );
    wait_members(&mut [&mut member], "committed the new topic", 120, &|_| {
        committed(&brokers, &group, &topic, 3)
            .iter()
            .map(|offset| (*offset).max(0))
            .sum::<i64>()
            >= NEW as i64
    });
    std::thread::sleep(Duration::from_millis(500));
    let log = member.run.log();
    assert!(
        log.contains("the input topic was deleted and made again"),
        "the source saw the topic's new id: {log}"
    );
    member.stop();
    let lines: Vec<String> = (0..OLD + NEW).map(line).collect();
    check_recreated(&brokers, &topic, &changelog, &member.run, &lines);
}

/// Issue 37.2 (chaos seeds kafka 1796645212024 and 1796645212021): the input topic
/// deleted and made again within one look at its id, with more records than the old
/// offsets. librdkafka took the new id from its metadata and went on fetching at the old
/// topic's offsets, so the new topic's first records were never read (946 of 2,621 lines
/// in the chaos run, exit 0). The source now hears librdkafka's own notice of the new id
/// (in order with the records) before it reads a record of the new topic.
#[test]
fn a_topic_made_again_within_one_id_check_is_a_new_epoch_and_nothing_is_skipped() {
    let Some(brokers) = brokers() else {
        return;
    };
    let library = build_plugin("kafka-plugin", &[]);
    let topic = unique_topic("recreated-quick");
    let group = format!("{topic}-ledgers");
    let changelog = format!("{group}-ledger-changelog");
    create_topic(&brokers, &topic, 3, &[]);
    produce_lines(&batching_producer(&brokers), &topic, 0..OLD);
    // the source's own look at the topic's id is a minute away: only librdkafka's metadata
    // can tell the topic is another
    let config = member_config(
        &brokers,
        &topic,
        &group,
        (
            ", metadata_refresh_ms = 60000",
            r#", alerts = "alerts.txt""#,
            r#"
[[sinks]]
name = "out"
kind = "file"
path = "out.txt"

[[groups]]
name = "forward"
[[groups.processors]]
name = "copy"
kind = "forward"
settings = { feed = "lines", sink = "out" }
"#,
        ),
    );
    let mut member = Member::start(&library, &config);
    wait_members(
        &mut [&mut member],
        "committed and forwarded the old topic",
        120,
        &|members| {
            committed_total(&brokers, &group, &topic, 3) >= OLD as i64
                && written(&members[0].run).values().sum::<usize>() >= OLD
        },
    );
    delete_topic(&brokers, &topic);
    create_topic_again(&brokers, &topic, 3);
    // more records than the old offsets in every partition
    let new = OLD + 3 * OLD;
    produce_lines(&batching_producer(&brokers), &topic, OLD..new);
    wait_members(
        &mut [&mut member],
        "forwarded the new topic",
        150,
        &|members| written(&members[0].run).values().sum::<usize>() >= new,
    );
    wait_members(&mut [&mut member], "committed the new topic", 120, &|_| {
        committed(&brokers, &group, &topic, 3)
            .iter()
            .map(|offset| (*offset).max(0))
            .sum::<i64>()
            >= (new - OLD) as i64
    });
    std::thread::sleep(Duration::from_millis(500));
    let log = member.run.log();
    assert!(
        log.contains("the input topic was deleted and made again"),
        "the source saw the topic's new id: {log}"
    );
    member.stop();
    let lines: Vec<String> = (0..new).map(line).collect();
    check_recreated(&brokers, &topic, &changelog, &member.run, &lines);
}

/// Chaos kafka seed 1796658157071: the input topic of a forward with an `epoch_file`
/// deleted and made again while the server was stopped. The epoch file's slots (the old
/// topic's, never committed on the new one) kept their epochs, so the file sink took
/// the new topic's records at offsets 0.. for repeats of the old one's and dropped them
/// (764 of 6,872 lines never written, exit 0). The topic's id is now recorded beside
/// the epoch file, and a start under another id clears the slots first.
#[test]
fn a_topic_made_again_while_a_forward_with_an_epoch_file_is_stopped_is_a_new_epoch() {
    let Some(brokers) = brokers() else {
        return;
    };
    let library = build_plugin("kafka-plugin", &[]);
    let topic = unique_topic("recreated-epochs");
    let group = format!("{topic}-forward");
    create_topic(&brokers, &topic, 1, &[]);
    produce_lines(&batching_producer(&brokers), &topic, 0..OLD);
    let config = forward_config(
        &brokers,
        &topic,
        &group,
        r#", epoch_file = "kafka.epochs""#,
        &free_address(),
    );
    let mut member = Member::start(&library, &config);
    // fewer records than the old offsets: every one of them at an offset the old topic
    // had written
    remake_while_stopped(&mut member, (&brokers, &topic, &group), 1);
    member.stop();
    let log = member.run.log();
    assert!(
        log.contains("made again while the feed was stopped"),
        "the source saw the topic's new id against its epoch file's: {log}"
    );
    let counts = written(&member.run);
    let mut expected = BTreeMap::new();
    for line in (0..OLD + NEW).map(line) {
        *expected.entry(line).or_insert(0usize) += 1;
    }
    let wrong: Vec<_> = expected
        .iter()
        .filter(|(line, count)| counts.get(*line) != Some(count))
        .take(5)
        .collect();
    assert!(
        wrong.is_empty() && counts.values().sum::<usize>() == OLD + NEW,
        "every line of both topics written as often as it was produced ({} written): differing {wrong:?}",
        counts.values().sum::<usize>()
    );
}
