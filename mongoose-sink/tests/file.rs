//! The file sink: durable batches, what a crash leaves cut off at the next open, keys
//! already written not written again, and a full disk.

use std::io::Write;

use mongoose_core::sink::{Output, OutputKey, Sink, SinkOutcome};
use mongoose_core::Epoch;
use mongoose_sink::{FileSink, FileSinkConfig};
use mongoose_testkit::Tmpfs;

fn output(position: u64, text: &str) -> Output {
    Output::new(
        OutputKey::new("lines", Epoch(2), 0, position, 0, 1),
        text.as_bytes().to_vec(),
    )
}

fn publish(sink: &mut FileSink, outputs: &[Output]) -> Vec<SinkOutcome> {
    let mut outcomes = Vec::new();
    sink.publish(outputs, &mut outcomes);
    outcomes
}

fn config(dir: &std::path::Path) -> FileSinkConfig {
    FileSinkConfig {
        path: dir.join("out.txt"),
        sync: true,
    }
}

#[test]
fn a_batch_written_but_not_recorded_is_cut_off_at_the_next_open() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    // the very first batch: the crash came after its write, before its record
    drop(FileSink::open("out", &config).expect("opened"));
    std::fs::OpenOptions::new()
        .append(true)
        .open(&config.path)
        .expect("file")
        .write_all(b"torn 1\ntorn 2\n")
        .expect("written by the crashed run");
    let mut sink = FileSink::open("out", &config).expect("reopened");
    assert_eq!(std::fs::read(&config.path).expect("file"), b"", "cut off");
    // a recorded batch, then an unrecorded one
    let outcomes = publish(&mut sink, &[output(10, "a"), output(20, "b")]);
    assert!(outcomes.iter().all(SinkOutcome::is_published));
    drop(sink);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&config.path)
        .expect("file")
        .write_all(b"c\nd")
        .expect("written by the crashed run");
    let sink = FileSink::open("out", &config).expect("reopened");
    assert_eq!(sink.durable_length(), 4);
    assert_eq!(std::fs::read(&config.path).expect("file"), b"a\nb\n");
}

#[test]
fn a_re_delivered_key_is_not_written_twice() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    let mut sink = FileSink::open("out", &config).expect("opened");
    publish(
        &mut sink,
        &[output(10, "a"), output(20, "b"), output(30, "c")],
    );
    drop(sink);
    // a restart re-delivers from before the last key (the pointer was behind)
    let mut sink = FileSink::open("out", &config).expect("reopened");
    let outcomes = publish(
        &mut sink,
        &[output(20, "b"), output(30, "c"), output(40, "d")],
    );
    assert!(
        outcomes.iter().all(SinkOutcome::is_published),
        "{outcomes:?}"
    );
    assert!(outcomes[0].evidence().contains("already"), "{outcomes:?}");
    assert_eq!(std::fs::read(&config.path).expect("file"), b"a\nb\nc\nd\n");
    // another epoch (the input was replaced) is not compared with the old keys
    let fresh = Output::new(
        OutputKey::new("lines", Epoch(3), 0, 10, 0, 1),
        b"new a".to_vec(),
    );
    publish(&mut sink, &[fresh]);
    assert_eq!(
        std::fs::read(&config.path).expect("file"),
        b"a\nb\nc\nd\nnew a\n"
    );
}

#[test]
fn a_full_disk_cuts_the_batch_back_and_reports_it_not_published() {
    let disk = Tmpfs::mount("256k");
    let config = config(disk.path());
    let mut sink = FileSink::open("out", &config).expect("opened");
    let line = "x".repeat(1000);
    let mut position = 0;
    let mut refused = None;
    for _ in 0..1000 {
        let batch: Vec<Output> = (0..10)
            .map(|_| {
                position += 1;
                output(position, &line)
            })
            .collect();
        let outcomes = publish(&mut sink, &batch);
        if !outcomes[0].is_published() {
            refused = Some(outcomes);
            break;
        }
    }
    let outcomes = refused.expect("the disk filled up");
    assert!(
        outcomes.iter().all(|outcome| matches!(
            outcome,
            SinkOutcome::NotPublished {
                retryable: true,
                ..
            }
        )),
        "{outcomes:?}"
    );
    let durable = sink.durable_length();
    assert_eq!(
        std::fs::metadata(&config.path).expect("file").len(),
        durable,
        "cut back to what was published"
    );
    assert_eq!(durable % 1001, 0, "whole lines only");
    // room again: the same outputs are published after the ones before
    disk.remount("size=4m");
    let retried: Vec<Output> = (position - 9..=position)
        .map(|position| output(position, &line))
        .collect();
    let outcomes = publish(&mut sink, &retried);
    assert!(
        outcomes.iter().all(SinkOutcome::is_published),
        "{outcomes:?}"
    );
    assert_eq!(sink.durable_length(), durable + 10 * 1001);
}

#[test]
fn a_device_gets_no_state_beside_it() {
    // /dev/null: a target that is not a regular file; nothing is written into /dev
    let config = FileSinkConfig {
        path: "/dev/null".into(),
        sync: false,
    };
    let mut sink = FileSink::open("null", &config).expect("opened");
    let outcomes = publish(&mut sink, &[output(1, "a"), output(2, "b")]);
    assert!(
        outcomes.iter().all(SinkOutcome::is_published),
        "{outcomes:?}"
    );
    assert!(
        !std::path::Path::new("/dev/null.sinkstate").exists(),
        "no state file beside a device"
    );
}
