//! Records/s of the ledger on a Kafka feed, with its state in the changelog: one
//! `mongoose` server, then three in one consumer group, in the same run (issue 15).
//!
//! ```text
//! cargo xtask broker start
//! cargo xtask plugins --out target/plugins
//! cargo build --release -p mongoose
//! cargo run --release -p mongoose --example scale_out_bench -- --records 300000 --runs 3
//! ```
//!
//! For each run and each server count (`--servers 1,3`, alternating): a new topic of
//! `--partitions` partitions (default 6); the servers start in a new group and the
//! group forms on the empty topic (every member joined, the rebalances over); then a
//! producer writes `--records` ledger lines keyed by account (`acc0`..`acc199`,
//! batched) while the servers read, and the clock runs from the first record produced
//! to the moment the group's committed offsets cover every record (each record
//! applied, its change acknowledged by the changelog, its offset committed). The group
//! forms first because tansu 0.6, the first test broker, could not fetch from inside a
//! record batch, which a consumer does when a rebalance moves a partition after its
//! first commits (Apache Kafka, the test broker now, can; the order stays for now).
//!
//! Prints one line per run (with the rate from 10% to 90% committed, for the shape) and
//! the medians. `--state local` runs the ledger with local state, `--state forward` the
//! `forward` processor instead, `--queue N` sets the feed's queue (default 65,536),
//! `--shift 0` makes every amount non-negative (no alerts). `BENCH_KEEP=1` keeps the
//! servers' folders, `BENCH_LOG` is their `RUST_LOG`, `BENCH_TRACE=1` prints the
//! committed count as it is sampled.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

fn argument(name: &str, default: &str) -> String {
    let arguments: Vec<String> = std::env::args().collect();
    arguments
        .iter()
        .position(|argument| argument == name)
        .and_then(|at| arguments.get(at + 1))
        .cloned()
        .unwrap_or_else(|| default.to_owned())
}

fn produce(brokers: &str, topic: &str, records: usize, shift: i64) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .expect("producer");
    for index in 0..records {
        let account = format!("acc{}", index % 200);
        let payload = format!("{account},{}", (index % 7) as i64 - shift);
        let mut record = BaseRecord::to(topic).key(&account).payload(&payload);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, returned)) => {
                    record = returned;
                    producer.poll(Duration::from_millis(5));
                }
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer
        .flush(Duration::from_secs(120))
        .expect("every record acknowledged");
}

/// The records the group has committed, over all partitions (0 while the broker does
/// not answer).
fn committed(consumer: &BaseConsumer, topic: &str, partitions: i32) -> i64 {
    mongoose_kafka::admin::committed_offsets_of(
        consumer,
        topic,
        partitions,
        Duration::from_secs(10),
    )
    .map_or(0, |offsets| {
        offsets.iter().map(|offset| (*offset).max(0)).sum()
    })
}

fn start(mongoose: &Path, plugins: &Path, dir: &Path, config: &str) -> Child {
    std::fs::create_dir_all(dir).expect("server folder");
    mongoose_testkit::plugin_dir(dir, &[&plugins.join("libkafka_plugin.so")]);
    std::fs::write(dir.join("mongoose.toml"), config).expect("config");
    Command::new(mongoose)
        .args(["run", "--config"])
        .arg(dir.join("mongoose.toml"))
        .env(
            "RUST_LOG",
            std::env::var("BENCH_LOG").unwrap_or_else(|_| "warn".to_owned()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::from(
            std::fs::File::create(dir.join("server.log")).expect("log"),
        ))
        .spawn()
        .expect("the mongoose binary starts")
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let brokers = argument("--brokers", "127.0.0.1:19092");
    let records: usize = argument("--records", "300000")
        .parse()
        .expect("--records N");
    let partitions: i32 = argument("--partitions", "6")
        .parse()
        .expect("--partitions N");
    let runs: usize = argument("--runs", "3").parse().expect("--runs N");
    // `--state local`: the ledger keeps its state on each server's disk (not shared:
    // for comparison only, one server)
    let state = argument("--state", "auto");
    let queue = argument("--queue", "65536");
    // amounts are `n % 7 - shift`: 3 (the default) makes balances go below zero now and
    // then (alerts); 0 never
    let shift: i64 = argument("--shift", "3").parse().expect("--shift N");
    let servers: Vec<usize> = argument("--servers", "1,3")
        .split(',')
        .map(|count| count.parse().expect("--servers 1,3"))
        .collect();
    let mongoose = PathBuf::from(argument("--mongoose", "target/release/mongoose"));
    let plugins = PathBuf::from(argument("--plugin-dir", "target/plugins"));
    if std::net::TcpStream::connect_timeout(
        &brokers.parse().expect("a socket address"),
        Duration::from_secs(1),
    )
    .is_err()
    {
        eprintln!("SKIPPED: no broker at {brokers}: start one with `cargo xtask broker start`");
        return;
    }
    if !mongoose.exists() || !plugins.join("libkafka_plugin.so").exists() {
        eprintln!(
            "SKIPPED: needs {} (cargo build --release -p mongoose --bin mongoose) and {}/libkafka_plugin.so (cargo xtask plugins --out {})",
            mongoose.display(),
            plugins.display(),
            plugins.display()
        );
        return;
    }
    let work = tempfile::tempdir().expect("temp dir");
    let mut results: Vec<(usize, Vec<f64>)> =
        servers.iter().map(|count| (*count, Vec::new())).collect();
    for run in 0..runs {
        for (count, rates) in &mut results {
            let topic = format!(
                "bench-{count}-{run}-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |since| since.as_millis())
            );
            mongoose_kafka::admin::create_topic(
                &brokers,
                &topic,
                partitions,
                &[],
                Duration::from_secs(30),
            )
            .expect("create the topic");
            let group = format!("{topic}-ledgers");
            let processor = if state == "forward" {
                "[[sinks]]\nname = \"out\"\nkind = \"file\"\npath = \"out.log\"\n[[groups.processors]]\nname = \"forward\"\nkind = \"forward\"\nsettings = { feed = \"lines\", sink = \"out\" }".to_owned()
            } else {
                format!("[[groups.processors]]\nname = \"ledger\"\nkind = \"ledger\"\nsettings = {{ state_dir = \"state\", alerts = \"alerts.txt\", state = \"{state}\" }}")
            };
            let config = format!(
                r#"
plugin_dir = "plugins"
[[feeds]]
name = "lines"
source = "kafka"
codec = "line"
queue_capacity = {queue}
settings = {{ brokers = "{brokers}", group = "{group}", topic = "{topic}", session_timeout_ms = 6000 }}
[[groups]]
name = "ledger"
idle_strategy = "sleeping-millis:1"
{processor}
"#
            );
            let watcher: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &brokers)
                .set("group.id", &group)
                .set("enable.auto.commit", "false")
                .create()
                .expect("consumer");
            let mut children: Vec<Child> = (0..*count)
                .map(|index| {
                    start(
                        &mongoose,
                        &plugins,
                        &work.path().join(format!("{topic}-{index}")),
                        &config,
                    )
                })
                .collect();
            // the group forms on the empty topic (every member joined, the partitions
            // spread), then the records come, batched: no rebalance moves a partition
            // during the run, so no consumer fetches from inside a batch
            let formed = Instant::now();
            let members = loop {
                let members = watcher
                    .fetch_group_list(Some(&group), Duration::from_secs(5))
                    .ok()
                    .and_then(|list| {
                        list.groups()
                            .iter()
                            .find(|found| found.name() == group)
                            .map(|found| (found.state().to_owned(), found.members().len()))
                    });
                // a broker that does not list groups (tansu 0.6 did not): then a fixed
                // wait (two session timeouts: every member joined, the rebalances over)
                if matches!(&members, Some((state, joined)) if state == "Stable" && *joined == *count)
                    || formed.elapsed() > Duration::from_secs(12)
                {
                    break members;
                }
                std::thread::sleep(Duration::from_millis(100));
            };
            let started = Instant::now();
            let producer = {
                let brokers = brokers.clone();
                let topic = topic.clone();
                std::thread::spawn(move || {
                    produce(&brokers, &topic, records, shift);
                    started.elapsed()
                })
            };
            let mut first_commit = None;
            let (low, high) = (records as i64 / 10, records as i64 * 9 / 10);
            let (mut at_low, mut at_high) = (None, None);
            loop {
                let done = committed(&watcher, &topic, partitions);
                if done > 0 && first_commit.is_none() {
                    first_commit = Some(started.elapsed());
                }
                if std::env::var_os("BENCH_TRACE").is_some() {
                    eprintln!("{:.3} {done}", started.elapsed().as_secs_f64());
                }
                if done >= low && at_low.is_none() {
                    at_low = Some((done, started.elapsed()));
                }
                if done >= high && at_high.is_none() {
                    at_high = Some((done, started.elapsed()));
                }
                if done >= records as i64 {
                    break;
                }
                for child in &mut children {
                    if let Some(status) = child.try_wait().expect("status") {
                        panic!("a server exited ({status}); see {}", work.path().display());
                    }
                }
                assert!(
                    started.elapsed() < Duration::from_secs(1800),
                    "never finished"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            let seconds = started.elapsed().as_secs_f64();
            let produced = producer.join().expect("the producer").as_secs_f64();
            for child in &mut children {
                let _ = Command::new("kill")
                    .args(["-TERM", &child.id().to_string()])
                    .status();
                let _ = child.wait();
            }
            let rate = records as f64 / seconds;
            // the steady rate: from 10% to 90% of the records committed (group formation
            // and the last partition's tail left out)
            let steady = match (at_low, at_high) {
                (Some((from, start)), Some((to, end))) if end > start => {
                    (to - from) as f64 / (end - start).as_secs_f64()
                }
                _ => rate,
            };
            rates.push(rate);
            println!(
                "servers {count}: {records} records in {seconds:.2} s = {rate:.0} records/s from the first record produced to the last committed; {steady:.0} records/s from 10% to 90% committed (the producer took {produced:.2} s: the servers' last commit came {:.2} s after its last record; first commit after {:.2} s; group {members:?} after {:.1} s)",
                seconds - produced,
                first_commit.unwrap_or_default().as_secs_f64(),
                formed.elapsed().as_secs_f64() - seconds
            );
        }
    }
    if std::env::var_os("BENCH_KEEP").is_some() {
        println!("the servers' folders are kept in {}", work.keep().display());
    }
    for (count, rates) in &mut results {
        println!(
            "median, servers {count}: {:.0} records/s (first produced to last committed) over {} runs",
            median(rates),
            rates.len()
        );
    }
}
