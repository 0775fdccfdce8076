//! The `kafka` family's truth without a broker: a run made by hand (its input, what the
//! server wrote, its exit) goes through the same marking and the same checks as a
//! real one.

use std::time::Duration;

use crate::run::{check, RunEnd};
use crate::scenario::{KafkaOptions, Options, Scenario, SinkKind, SourceKind, Workload};
use crate::truth::FailureKind;
use crate::world::{Binaries, InputFile, Launcher, World};

/// A `forward kafka->file` world whose partition 0 holds `lines` lines, of which the
/// server read, wrote and committed the first `read`; records of the partition then
/// deleted from offset `read` to the end by a retention that caught up with the
/// stopped group; the final run then ended with `exit`.
fn retention_past_the_group(dir: &std::path::Path, lines: u32, read: usize, exit: i32) -> World {
    // the world of a file feed (no broker is started for it), then its source named
    // Kafka: the checks read the truth, the output file and the runs' ends
    let scenario = Scenario {
        seed: 7,
        family: "kafka".to_owned(),
        workload: Workload::Forward,
        source: SourceKind::File,
        sink: SinkKind::File,
        writers: 1,
        options: Options {
            kafka: Some(KafkaOptions::default()),
            ..Options::default()
        },
        steps: Vec::new(),
    };
    let bins = Binaries {
        mongoose: dir.join("no-mongoose"),
        plugin_dir: dir.join("no-plugins"),
        peer: Launcher {
            program: dir.join("no-peer"),
            args: Vec::new(),
        },
    };
    let mut world = World::create(scenario, bins, &dir.join("run")).expect("a world");
    world.scenario.source = SourceKind::Kafka;
    let live = world.path("in/kafka-0");
    world.streams[0].live = live.clone();
    // offset k of partition 0 is line k (the harness's producer is idempotent)
    let produced = world.truth.new_lines(0, lines, None);
    world.streams[0].files.push(InputFile {
        path: live,
        lines: produced.collect(),
    });
    std::fs::write(world.path("out/out.txt"), world.truth.text_of(0..read)).expect("output");
    let gone = world.records_deleted(
        0,
        read as i64,
        (0, i64::from(lines)),
        "kafka retention of partition 0",
    );
    assert_eq!(
        gone,
        lines as usize - read,
        "the unread records are the lost ones"
    );
    let fault = world.last_lossy_at.expect("the retention is a lossy fault");
    world.runs = 2;
    world.ends.push(RunEnd {
        run: 2,
        code: exit,
        at: fault + Duration::from_millis(1),
    });
    world
}

#[test]
fn the_kafka_family_finds_a_loss_hidden_by_retention() {
    let dir = tempfile::tempdir().expect("a folder");
    // 3,000 records deleted before the stopped group read them, and the final run said
    // lossless (exit 0): the records are missing from the output, a loss nobody reported
    let mut world = retention_past_the_group(dir.path(), 5_000, 2_000, 0);
    check(&mut world, Some(0));
    let kinds: Vec<FailureKind> = world.failures.iter().map(|failure| failure.kind).collect();
    assert_eq!(kinds, [FailureKind::FalseLossless], "{:?}", world.failures);
    assert!(
        world.failures[0].detail.contains("3000 lines")
            && world.failures[0]
                .detail
                .contains("kafka retention of partition 0"),
        "{}",
        world.failures[0].detail
    );
    drop(world);

    // the same loss reported (the final run exited 3): nothing to find
    let dir = tempfile::tempdir().expect("a folder");
    let mut world = retention_past_the_group(dir.path(), 5_000, 2_000, 3);
    check(&mut world, Some(3));
    assert!(world.failures.is_empty(), "{:?}", world.failures);
}

// chaos kafka seed 1796685595091: DeleteRecords past the stopped group's commit, then
// the broker killed before it checkpointed the new log start: restarted, it gave the
// records back and the server read them all after reporting them removed (exit 3,
// nothing missing). The report was honest when made: no false alarm then. A broker
// that kept the log start leaves the exit 3 with nothing missing a false alarm.
#[test]
fn records_a_restarted_broker_gives_back_make_a_reported_loss_no_false_alarm() {
    let dir = tempfile::tempdir().expect("a folder");
    let mut world = retention_past_the_group(dir.path(), 5_000, 2_000, 3);
    std::fs::write(world.path("out/out.txt"), world.truth.text_of(0..5_000)).expect("output");
    world.log_starts_after_restart(&[(0, 5_000)]);
    check(&mut world, Some(3));
    let kinds: Vec<FailureKind> = world.failures.iter().map(|failure| failure.kind).collect();
    assert_eq!(
        kinds,
        [FailureKind::FalseAlarm],
        "the log start held: {:?}",
        world.failures
    );
    drop(world);

    let dir = tempfile::tempdir().expect("a folder");
    let mut world = retention_past_the_group(dir.path(), 5_000, 2_000, 3);
    std::fs::write(world.path("out/out.txt"), world.truth.text_of(0..5_000)).expect("output");
    world.log_starts_after_restart(&[(0, 0)]);
    check(&mut world, Some(3));
    assert!(world.failures.is_empty(), "{:?}", world.failures);
}
