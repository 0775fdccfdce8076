//! The Kafka source killed with SIGKILL mid-topic and restarted, against the real broker
//! (`cargo xtask broker start`; skipped with a message when it does not answer, unless
//! `MONGOOSE_REQUIRE_BROKER` is set). book: connectors/kafka.md, and
//! the kill -9 tests of book: crashes/measured.md.

mod common;

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use common::{broker_or_skip, create_topic, pipeline, produce, source_config, unique, wait_for};
use mongoose_core::{
    Delivery, DeliveryContext, DispatchOutcome, Dispatcher, Epoch, IdleStrategy, PositionValue,
    ProcessorError,
};
use mongoose_delivery::SourceDriver;
use mongoose_kafka::KafkaRecord;

const CHILD_ENV: &str = "MONGOOSE_KAFKA_CRASH_CHILD";
const RECORDS: u64 = 1000;

/// A processor whose state is its applied log: one line `partition epoch position
/// payload` per applied record, written with one `write` (so a SIGKILL leaves whole
/// lines), the state and its saved position together, like the ledger. It skips a
/// record its state already holds ([`Delivery::already_applied`]).
struct Guard {
    log: File,
    saved: BTreeMap<u32, (Epoch, u64)>,
    skipped: u64,
}

impl Guard {
    fn open(path: &Path) -> Guard {
        let mut saved = BTreeMap::new();
        if let Ok(text) = fs::read_to_string(path) {
            for line in text.lines() {
                let fields: Vec<&str> = line.split(' ').collect();
                let lane: u32 = fields[0].parse().expect("partition");
                let epoch = Epoch(fields[1].parse().expect("epoch"));
                let position: u64 = fields[2].parse().expect("position");
                saved.insert(lane, (epoch, position));
            }
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("applied log");
        Guard {
            log,
            saved,
            skipped: 0,
        }
    }
}

impl Dispatcher<KafkaRecord> for Guard {
    fn dispatch(&mut self, item: &KafkaRecord, _attempt: u32) -> DispatchOutcome {
        let delivery = DeliveryContext::current().expect("a positioned record");
        let lane = delivery.lane();
        if let Some((epoch, position)) = self.saved.get(&lane) {
            if delivery.already_applied(
                *epoch,
                PositionValue {
                    lane,
                    offset: *position,
                },
            ) {
                self.skipped += 1;
                return DispatchOutcome::Done;
            }
        }
        let position = delivery.position().offset;
        let line = format!(
            "{lane} {} {position} {}\n",
            delivery.epoch().0,
            String::from_utf8_lossy(&item.payload)
        );
        self.log.write_all(line.as_bytes()).expect("apply");
        self.saved.insert(lane, (delivery.epoch(), position));
        // slow enough that the kill lands mid-topic, with records read and not processed
        thread::sleep(Duration::from_millis(1));
        DispatchOutcome::Done
    }

    fn complete(
        &mut self,
        _completion: mongoose_core::engine::PendingCompletion,
        _delivery: &Delivery,
    ) -> Result<(), ProcessorError> {
        Ok(())
    }
}

/// The child: a Kafka source with its epoch file in the directory, into a feed of 2000
/// (it reads far ahead of the processing), processed by the guard until killed.
#[test]
#[ignore = "run as a child process by kafka_commit_follows_processing_not_polling"]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let brokers = std::env::var("MONGOOSE_KAFKA_CRASH_BROKERS").expect("brokers");
    let topic = std::env::var("MONGOOSE_KAFKA_CRASH_TOPIC").expect("topic");
    let group = std::env::var("MONGOOSE_KAFKA_CRASH_GROUP").expect("group");
    let mut config = source_config(&brokers, &group, &topic);
    if std::env::var_os("MONGOOSE_KAFKA_CRASH_NO_EPOCH_FILE").is_none() {
        config.epoch_file = Some(dir.join("epochs"));
    }
    let mut pipeline = pipeline(config, 2000);
    let mut guard = Guard::open(&dir.join("applied.log"));
    let feed = pipeline.feed.clone();
    let driver = SourceDriver::new("kafka", IdleStrategy::SleepingMillis(1));
    let mut source = pipeline.source;
    thread::spawn(move || driver.run(&mut source, &*feed));
    loop {
        if pipeline.reader.poll(&mut guard, 1) == 0 {
            thread::sleep(Duration::from_millis(1));
        }
    }
}

fn spawn_child(dir: &Path, brokers: &str, topic: &str, group: &str) -> Child {
    let mut command = Command::new(std::env::current_exe().expect("test binary"));
    command
        .args(["--exact", "crash_child", "--ignored", "--nocapture"])
        .env(CHILD_ENV, dir)
        .env("MONGOOSE_KAFKA_CRASH_BROKERS", brokers)
        .env("MONGOOSE_KAFKA_CRASH_TOPIC", topic)
        .env("MONGOOSE_KAFKA_CRASH_GROUP", group)
        .stdout(Stdio::null())
        .stderr(File::create(dir.join("child.log")).expect("child log"));
    if std::env::var_os("MONGOOSE_KAFKA_CRASH_NO_EPOCH_FILE").is_some() {
        command.env("MONGOOSE_KAFKA_CRASH_NO_EPOCH_FILE", "1");
    }
    command.spawn().expect("spawn the child")
}

/// Applied payloads: how many times each.
fn applied(dir: &Path) -> BTreeMap<u64, u32> {
    let mut times = BTreeMap::new();
    for line in fs::read_to_string(dir.join("applied.log"))
        .unwrap_or_default()
        .lines()
    {
        let payload: u64 = line
            .rsplit(' ')
            .next()
            .and_then(|field| field.parse().ok())
            .expect("payload");
        *times.entry(payload).or_insert(0u32) += 1;
    }
    times
}

// book: connectors/kafka.md and book: crashes/measured.md: a child reads the topic far ahead
// of its processor (a feed of 2000), is SIGKILLed mid-topic, and is restarted in the same
// group with the same state: every record is applied exactly once. A commit that
// followed polling would lose what was read and not processed; an epoch that changed
// across the restart would make the guard apply again what its state holds.
#[test]
fn kafka_commit_follows_processing_not_polling() {
    let Some(brokers) = broker_or_skip("kafka_commit_follows_processing_not_polling") else {
        return;
    };
    let topic = unique("crash");
    let group = unique("crash-group");
    create_topic(&brokers, &topic, 3, &[]);
    produce(&brokers, &topic, 0, RECORDS, 11);
    let dir = tempfile::tempdir().expect("dir");
    let mut child = spawn_child(dir.path(), &brokers, &topic, &group);
    let killed_at = RECORDS as usize / 3;
    wait_for("a third of the records applied", 120, || {
        assert!(
            child.try_wait().expect("child").is_none(),
            "the child exited: {}",
            fs::read_to_string(dir.path().join("child.log")).unwrap_or_default()
        );
        applied(dir.path()).len() >= killed_at
    });
    child.kill().expect("SIGKILL"); // std sends SIGKILL on Unix
    child.wait().expect("reaped");
    let before = applied(dir.path()).len();
    assert!(
        (before as u64) < RECORDS,
        "the kill must land mid-topic ({before} of {RECORDS} applied)"
    );
    let mut child = spawn_child(dir.path(), &brokers, &topic, &group);
    wait_for("every record applied after the restart", 180, || {
        assert!(
            child.try_wait().expect("child").is_none(),
            "the restarted child exited: {}",
            fs::read_to_string(dir.path().join("child.log")).unwrap_or_default()
        );
        applied(dir.path()).len() as u64 >= RECORDS
    });
    // a while more: a duplicate would show now
    thread::sleep(Duration::from_secs(2));
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let times = applied(dir.path());
    let missing: Vec<u64> = (0..RECORDS).filter(|n| !times.contains_key(n)).collect();
    let twice: Vec<(u64, u32)> = times
        .iter()
        .filter(|(_, count)| **count > 1)
        .map(|(n, count)| (*n, *count))
        .collect();
    assert!(
        missing.is_empty() && twice.is_empty(),
        "killed after {before} applied: missing {} (first {:?}), applied more than once {} (first {:?})",
        missing.len(),
        missing.iter().take(10).collect::<Vec<_>>(),
        twice.len(),
        twice.iter().take(10).collect::<Vec<_>>()
    );
}
