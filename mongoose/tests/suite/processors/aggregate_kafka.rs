//! The `aggregate` processor on a Kafka feed (issue 40, `state = "changelog"`): its
//! state per input partition in a changelog topic, following the partitions across
//! the members of a consumer group. Real broker (the shared test broker), real
//! `mongoose` processes, SIGKILL. The truth is computed from the input; the state is
//! read back from the changelog topic (the last value per key per partition), which is
//! what the next owner of a partition restores.

use crate::{kafka_support, support};

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_support::{committed, committed_total, line, unique_topic, LineStream, Member};
use mongoose_aggregate::{AggregateSettings, Aggregator};
use mongoose_testkit::{build_plugin, plugin_dir};
use support::LedgerRun;

const PARTITIONS: i32 = 3;

fn brokers() -> Option<String> {
    kafka_support::shared_brokers()
}

/// The aggregate's settings: count and sum by account, a rule when the sum goes
/// negative (into the file sink `alerts`), its state in the changelog.
const SETTINGS: &str = r#"format = "csv"
columns = ["account", "amount"]
fields = { account = "string", amount = "integer" }
group_by = ["account"]
aggregates = { n = "count", total = "sum(amount)" }
rules = [{ name = "negative", when = "sum(amount) < 0", emit = "{account} negative: {total}" }]
sink = "alerts"
dead_letter = "dead"
state = "changelog"
"#;

/// One member's config: the Kafka feed `lines` of `topic` in consumer group `group`,
/// the file sink `alerts`, and the aggregate `agg/totals` (`more`: lines added to its
/// settings).
fn member_config(brokers: &str, topic: &str, group: &str, more: &str) -> String {
    format!(
        r#"plugin_dir = "plugins"

[[feeds]]
name = "lines"
source = "kafka"
codec = "line"
settings = {{ brokers = "{brokers}", group = "{group}", topic = "{topic}", session_timeout_ms = 6000 }}

[[sinks]]
name = "alerts"
kind = "file"
path = "alerts.txt"

[[sinks]]
name = "dead"
kind = "file"
path = "dead.jsonl"

[[groups]]
name = "agg"
idle_strategy = "sleeping-millis:1"

[[groups.processors]]
name = "totals"
kind = "aggregate"
[groups.processors.settings]
{SETTINGS}{more}
"#
    )
}

/// Starts a member (logging the aggregate's takeovers).
fn start_member(library: &std::path::Path, config: &str) -> Member {
    let mut run = LedgerRun::new("", config);
    run.log_filter = "warn,mongoose_server::cli=info,mongoose::aggregate=info,mongoose_kafka=info";
    plugin_dir(run.dir.path(), &[library]);
    let child = Some(run.spawn(false));
    Member { run, child }
}

/// Starts `member` again in its folder (after a SIGKILL).
fn restart(member: &mut Member) {
    assert!(member.child.is_none(), "the member was stopped");
    member.child = Some(member.run.spawn(false));
}

/// Per account: (lines, sum).
type Totals = BTreeMap<String, (u64, i64)>;

/// The truth of `lines`: per account (count, sum), and the rule's outputs (an account's
/// sum going from >= 0 to < 0), counted by text.
fn truth(lines: &[String]) -> (Totals, BTreeMap<String, usize>) {
    let mut totals = Totals::new();
    let mut emits = BTreeMap::new();
    for line in lines {
        let (account, amount) = line.split_once(',').expect("account,amount");
        let Ok(amount) = amount.parse::<i64>() else {
            continue; // rejected: dead-lettered, counted
        };
        let entry = totals.entry(account.to_owned()).or_default();
        let was_negative = entry.0 > 0 && entry.1 < 0;
        entry.0 += 1;
        entry.1 += amount;
        if entry.1 < 0 && !was_negative {
            *emits
                .entry(format!("{account} negative: {}", entry.1))
                .or_insert(0) += 1;
        }
    }
    (totals, emits)
}

/// Reads the changelog `changelog` of input `topic` back: per partition the counted
/// records' input positions are `1..=end` each once (every line applied once), its
/// counters say `end` lines applied or rejected, and the per-key count and sum summed
/// over the partitions are returned.
fn changelog_totals(brokers: &str, topic: &str, changelog: &str, ends: &[i64]) -> Totals {
    changelog_read(brokers, topic, changelog, ends).0
}

/// [`changelog_totals`], and the lines rejected over the partitions.
fn changelog_read(brokers: &str, topic: &str, changelog: &str, ends: &[i64]) -> (Totals, u64) {
    let store = mongoose_kafka::changelog::Changelog::open(
        mongoose_kafka::changelog::ChangelogConfig::new("check", brokers, changelog),
        topic,
        std::sync::Arc::new(|_, _| {}),
    )
    .expect("the changelog opens");
    let settings: AggregateSettings = toml::from_str(SETTINGS).expect("settings");
    let aggregator = Aggregator::compile(settings, "settings").expect("compiles");
    let mut totals = Totals::new();
    let mut rejected = 0;
    for (partition, end) in ends.iter().enumerate() {
        let records = store.read(partition as i32).expect("read");
        let mut positions = Vec::new();
        let restored =
            mongoose_kafka::changelog::fold(&records, |record| positions.push(record.offset));
        let end = (*end).max(0) as u64;
        kafka_support::assert_each_once(partition as i32, &positions, end);
        let aggregate = mongoose::aggregate::partitioned::partition_state(
            &restored,
            &aggregator,
            partition as u32,
            1,
        )
        .expect("aggregate changes");
        let counters = &aggregate.state().counters;
        assert_eq!(
            counters.applied + counters.rejected_total(),
            end,
            "partition {partition}: the lines applied or rejected"
        );
        rejected += counters.rejected_total();
        for key in aggregate.state().keys.keys() {
            let view = aggregate.key(&[key.as_str()]).expect("a key").to_json();
            let count = view["values"]["n"].as_u64().expect("n");
            let sum: i64 = view["values"]["total"]
                .as_str()
                .map_or_else(
                    || view["values"]["total"].as_i64(),
                    |text| text.parse().ok(),
                )
                .expect("total");
            let entry = totals.entry(key.clone()).or_default();
            entry.0 += count;
            entry.1 += sum;
        }
    }
    (totals, rejected)
}

/// The alerts written across `members`' files, counted by text.
fn alerts_of(members: &[&Member]) -> BTreeMap<String, usize> {
    lines_of(members, "alerts.txt")
}

/// The lines of `file` across `members`' folders, counted by text.
fn lines_of(members: &[&Member], file: &str) -> BTreeMap<String, usize> {
    let mut alerts = BTreeMap::new();
    for member in members {
        let text = std::fs::read_to_string(member.run.path(file)).unwrap_or_default();
        for line in text.lines() {
            *alerts.entry(line.to_owned()).or_insert(0) += 1;
        }
    }
    alerts
}

/// Each expected alert is in the files at least as often as the truth has it (at least
/// once across a takeover), and no alert is one the truth does not have.
fn assert_alerts_at_least_once(expected: &BTreeMap<String, usize>, seen: &BTreeMap<String, usize>) {
    let missing: Vec<(&String, usize, usize)> = expected
        .iter()
        .filter(|(text, count)| seen.get(*text).copied().unwrap_or(0) < **count)
        .map(|(text, count)| (text, *count, seen.get(text).copied().unwrap_or(0)))
        .collect();
    let invented: Vec<&String> = seen
        .keys()
        .filter(|text| !expected.contains_key(*text))
        .collect();
    assert!(
        missing.is_empty() && invented.is_empty(),
        "alerts: {} expected {} times in all, missing (text, expected, seen) {:?}; invented {:?}",
        expected.len(),
        expected.values().sum::<usize>(),
        missing.iter().take(5).collect::<Vec<_>>(),
        invented.iter().take(5).collect::<Vec<_>>()
    );
}

/// The server's `/status` at `address`, if it answers.
fn server_status(address: &str) -> Option<serde_json::Value> {
    let text = ureq::get(&format!("http://{address}/status"))
        .call()
        .ok()?
        .body_mut()
        .read_to_string()
        .ok()?;
    serde_json::from_str(&text).ok()
}

/// Partitions a member restored from the changelog.
fn takeovers(member: &Member) -> usize {
    member
        .run
        .log()
        .matches("aggregate: partition taken over, state restored from the changelog")
        .count()
}

#[test]
fn an_aggregate_on_a_kafka_feed_scales_out_and_survives_a_member_kill() {
    const RECORDS: usize = 15_000;
    let Some(brokers) = brokers() else {
        return;
    };
    let library = build_plugin("kafka-plugin", &[]);
    let topic = unique_topic("agg-scale");
    let group = format!("{topic}-aggregates");
    kafka_support::create_topic(&brokers, &topic, PARTITIONS, &[]);
    let config = member_config(&brokers, &topic, &group, "");
    // 100 records every 100 ms (batched by the producer, keyed by account): about 15 s
    // of records while the members come and go
    let stream = LineStream::start(
        &brokers,
        &topic,
        0..RECORDS,
        100,
        Duration::from_millis(100),
    );
    let mut a = start_member(&library, &config);
    kafka_support::wait_members(&mut [&mut a], "A took partitions", 120, &|members| {
        takeovers(members[0]) > 0
    });
    let mut b = start_member(&library, &config);
    kafka_support::wait_members(
        &mut [&mut a, &mut b],
        "B took partitions",
        120,
        &|members| takeovers(members[1]) > 0,
    );
    let before_kill = takeovers(&b);
    a.kill(); // SIGKILL mid-run: its partitions go to B once its session times out
    let mut c = start_member(&library, &config);
    kafka_support::wait_members(
        &mut [&mut b, &mut c],
        "A's partitions taken over",
        120,
        &|members| takeovers(members[0]) > before_kill || takeovers(members[1]) > 0,
    );
    let at_last_change = stream.produced();
    assert!(
        at_last_change < RECORDS,
        "the records had all been produced before the group's last change: slow the producer"
    );
    stream.finish();
    kafka_support::wait_members(
        &mut [&mut b, &mut c],
        "committed every record",
        240,
        &|_| committed_total(&brokers, &group, &topic, PARTITIONS) >= RECORDS as i64,
    );
    b.stop();
    c.stop();
    eprintln!(
        "takeovers: a {}, b {}, c {}; the group's last change at {at_last_change} records of {RECORDS}",
        takeovers(&a),
        takeovers(&b),
        takeovers(&c)
    );
    let lines: Vec<String> = (0..RECORDS).map(line).collect();
    let (expected, expected_alerts) = truth(&lines);
    let ends = committed(&brokers, &group, &topic, PARTITIONS);
    assert_eq!(
        ends.iter().map(|end| (*end).max(0)).sum::<i64>(),
        RECORDS as i64,
        "every record committed once: {ends:?}"
    );
    let totals = changelog_totals(
        &brokers,
        &topic,
        &format!("{group}-totals-changelog"),
        &ends,
    );
    assert_eq!(
        totals, expected,
        "per account (count, sum) in the changelog"
    );
    assert_alerts_at_least_once(&expected_alerts, &alerts_of(&[&a, &b, &c]));
}

#[test]
fn an_aggregate_on_a_kafka_feed_restarted_after_a_kill_restores_and_continues_exactly() {
    const RECORDS: usize = 6_000;
    let Some(brokers) = brokers() else {
        return;
    };
    let library = build_plugin("kafka-plugin", &[]);
    let topic = unique_topic("agg-restart");
    let group = format!("{topic}-aggregates");
    kafka_support::create_topic(&brokers, &topic, PARTITIONS, &[]);
    // without transactions each change is durable on its own, before its line's
    // commit: a SIGKILL leaves changes past the committed offsets, which the restarted
    // member must skip (each line counted once)
    let address = kafka_support::free_address();
    let config = format!(
        "{}\n[admin]\naddress = \"{address}\"\n",
        member_config(&brokers, &topic, &group, "transactions = false")
    );
    // every line there before the start: the member is busy when it is killed
    kafka_support::produce_lines(
        &kafka_support::batching_producer(&brokers),
        &topic,
        0..RECORDS,
    );
    let mut member = start_member(&library, &config);
    kafka_support::wait_members(&mut [&mut member], "committed 1500 lines", 120, &|_| {
        committed_total(&brokers, &group, &topic, PARTITIONS) >= 1_500
    });
    member.kill();
    let at_kill = committed_total(&brokers, &group, &topic, PARTITIONS);
    let first_run = takeovers(&member);
    assert!(
        at_kill < RECORDS as i64,
        "every line was committed before the kill: give more lines"
    );
    restart(&mut member);
    kafka_support::wait_members(&mut [&mut member], "committed every record", 240, &|_| {
        committed_total(&brokers, &group, &topic, PARTITIONS) >= RECORDS as i64
    });
    // /status shows the partitions this member holds, what they hold through, and the
    // lines applied (the restored counters went on: every line of the topic)
    let status = server_status(&address).expect("/status answers");
    let aggregate = &status["processors"]["agg/totals"];
    assert_eq!(aggregate["state"], "changelog", "{aggregate}");
    assert_eq!(aggregate["applied"], RECORDS as u64, "{aggregate}");
    assert_eq!(
        aggregate["partitions"].as_array().map(Vec::len),
        Some(PARTITIONS as usize),
        "{aggregate}"
    );
    // the state query answers a key from the partition that holds it
    let lines: Vec<String> = (0..RECORDS).map(line).collect();
    let (expected, expected_alerts) = truth(&lines);
    let text = ureq::get(&format!(
        "http://{address}/processors/agg/totals/state?key=acc3"
    ))
    .call()
    .expect("the state route answers")
    .body_mut()
    .read_to_string()
    .expect("a body");
    let view: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(
        (
            view["values"]["n"].as_u64(),
            view["values"]["total"].as_i64()
        ),
        (Some(expected["acc3"].0), Some(expected["acc3"].1)),
        "{view}"
    );
    assert!(view["partition"].is_u64(), "{view}");
    member.stop();
    assert!(
        takeovers(&member) > first_run,
        "the restarted member restored its partitions from the changelog: {}",
        member.run.log()
    );
    let skipped = member
        .run
        .log()
        .matches("lines already in the restored state were skipped")
        .count();
    eprintln!("killed at {at_kill} committed of {RECORDS}; partitions that skipped lines after the restart: {skipped}");
    let ends = committed(&brokers, &group, &topic, PARTITIONS);
    let totals = changelog_totals(
        &brokers,
        &topic,
        &format!("{group}-totals-changelog"),
        &ends,
    );
    assert_eq!(
        totals, expected,
        "per account (count, sum) in the changelog"
    );
    assert_alerts_at_least_once(&expected_alerts, &alerts_of(&[&member]));
}

/// The position check on restore, made certain (the ledger's test of the same name): a
/// first group applies every line and saves it in the changelog; a second group (with
/// nothing committed: it reads every line again) restores each partition from the same
/// changelog and must skip every line the state holds. Without the check every count
/// and sum comes out doubled.
#[test]
fn an_aggregate_taking_a_partition_over_skips_what_its_changelog_holds_past_the_commit() {
    const RECORDS: usize = 3_000;
    const MALFORMED: usize = 30;
    let Some(brokers) = brokers() else {
        return;
    };
    let library = build_plugin("kafka-plugin", &[]);
    let topic = unique_topic("agg-skip");
    kafka_support::create_topic(&brokers, &topic, PARTITIONS, &[]);
    let producer = kafka_support::batching_producer(&brokers);
    kafka_support::produce_lines(&producer, &topic, 0..RECORDS);
    // and lines that do not read: counted, dead-lettered, one changelog record each
    let malformed: Vec<String> = (0..MALFORMED)
        .map(|index| format!("acc{},x{index}", index % 50))
        .collect();
    for payload in &malformed {
        let key = payload.split_once(',').map_or("", |(account, _)| account);
        producer
            .send(
                rdkafka::producer::BaseRecord::to(&topic)
                    .key(key)
                    .payload(payload),
            )
            .map_err(|(error, _)| error)
            .expect("queued");
    }
    rdkafka::producer::Producer::flush(&producer, Duration::from_secs(60)).expect("acknowledged");
    let total = (RECORDS + MALFORMED) as i64;
    let changelog = format!("{topic}-changelog");
    let mut ends = Vec::new();
    let mut members = Vec::new();
    for group in ["first", "second"] {
        let group = format!("{topic}-{group}");
        let more = format!(r#"changelog_topic = "{changelog}""#);
        let mut member = start_member(&library, &member_config(&brokers, &topic, &group, &more));
        kafka_support::wait_members(&mut [&mut member], "committed every record", 180, &|_| {
            committed_total(&brokers, &group, &topic, PARTITIONS) >= total
        });
        member.stop();
        assert!(
            takeovers(&member) > 0,
            "restored from the changelog: {}",
            member.run.log()
        );
        ends = committed(&brokers, &group, &topic, PARTITIONS);
        members.push(member);
    }
    let mut lines: Vec<String> = (0..RECORDS).map(line).collect();
    lines.extend(malformed.iter().cloned());
    let (expected, expected_alerts) = truth(&lines);
    let (totals, rejected) = changelog_read(&brokers, &topic, &changelog, &ends);
    assert_eq!(
        totals, expected,
        "per account (count, sum) in the changelog"
    );
    assert_eq!(
        rejected, MALFORMED as u64,
        "the lines that do not read, counted once"
    );
    // the second member applied nothing (the changelog held every line) and wrote the
    // outputs of the lines it skipped again: each alert and dead letter at least once
    let second = &members[1];
    assert_alerts_at_least_once(&expected_alerts, &alerts_of(&[second]));
    let dead = lines_of(&[second], "dead.jsonl");
    for payload in &malformed {
        assert!(
            dead.keys()
                .any(|letter| letter.contains(&format!("\"line\":\"{payload}\""))),
            "the dead letter of {payload} written again by the member that skipped it: {dead:?}"
        );
    }
}

/// `mongoose validate` on `config` (a folder with the kafka plugin): exit code and stderr.
fn validate(library: &std::path::Path, config: &str) -> (Option<i32>, String) {
    let run = LedgerRun::new("", config);
    plugin_dir(run.dir.path(), &[library]);
    let output = std::process::Command::new(support::binary())
        .args(["validate", "--config"])
        .arg(run.path("mongoose.toml"))
        .output()
        .expect("the mongoose binary runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The aggregate's state mode is checked against its feed before anything runs (no
/// broker needed), with the ledger's changelog checks: a Kafka feed needs
/// `state = "changelog"` (the message says so), a changelog needs a Kafka feed without
/// an epoch file, and windows are refused with a changelog.
#[test]
fn the_aggregates_state_mode_is_checked_against_its_feed() {
    let library = build_plugin("kafka-plugin", &[]);
    let kafka = member_config("127.0.0.1:1", "input", "group", "");
    let (code, stderr) = validate(&library, &kafka);
    assert_eq!(
        code,
        Some(0),
        "an aggregate on a Kafka feed, state in the changelog: {stderr}"
    );

    let local = kafka.replace(r#"state = "changelog""#, r#"state_dir = "state""#);
    let (code, stderr) = validate(&library, &local);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("settings.feed") && stderr.contains(r#"state = "changelog""#),
        "the refusal names state = \"changelog\": {stderr}"
    );

    let with_epochs = kafka.replace(
        "session_timeout_ms = 6000",
        "session_timeout_ms = 6000, epoch_file = \"kafka.epochs\"",
    );
    let (code, stderr) = validate(&library, &with_epochs);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("settings.state") && stderr.contains("remove epoch_file"),
        "{stderr}"
    );

    let no_group = kafka.replace(r#"group = "group", "#, "");
    let (code, stderr) = validate(&library, &no_group);
    assert_eq!(code, Some(2), "{stderr}");

    let windowed = kafka.replace(
        r#"state = "changelog""#,
        "state = \"changelog\"\nwindow = { field = \"ts\", size = \"1m\" }",
    );
    let (code, stderr) = validate(&library, &windowed);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("settings.window") && stderr.contains("Remove window"),
        "{stderr}"
    );

    let with_dir = kafka.replace(
        r#"state = "changelog""#,
        "state = \"changelog\"\nstate_dir = \"state\"",
    );
    let (code, stderr) = validate(&library, &with_dir);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("settings.state_dir") && stderr.contains("remove state_dir"),
        "{stderr}"
    );

    // a setting of the local state only, which the changelog mode would ignore
    let snapshots = kafka.replace(
        r#"state = "changelog""#,
        "state = \"changelog\"\nsnapshot_every = 500",
    );
    let (code, stderr) = validate(&library, &snapshots);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("settings.snapshot_every") && stderr.contains("remove snapshot_every"),
        "{stderr}"
    );

    let interval = kafka.replace(
        r#"state = "changelog""#,
        "state = \"changelog\"\ncommit_interval_ms = 0",
    );
    let (code, stderr) = validate(&library, &interval);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("settings.commit_interval_ms"), "{stderr}");

    let file_feed = support::aggregate::config(
        "",
        &support::aggregate::TOTALS.replace(r#"state_dir = "state""#, r#"state = "changelog""#),
    );
    let (code, stderr) = validate(&library, &file_feed);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("settings.state") && stderr.contains("is not one"),
        "{stderr}"
    );
}
