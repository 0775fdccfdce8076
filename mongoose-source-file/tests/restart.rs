//! A restart of a COMMITED source whose pointer is at the end of a large file reads
//! nothing of the file before CAUGHT_UP (issue 11, item 4): no re-scan, whatever the
//! file's size. The bytes read are the process's own count (`rchar` of
//! `/proc/self/io`), so this file holds one test: no other test reads meanwhile.

mod common;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;

use common::*;
use mongoose_core::SourceState;
use mongoose_delivery::SourceDriver;
use mongoose_source_file::pointer::PointerRecord;
use mongoose_source_file::ReadStrategy;

/// Bytes this process read through `read`-like calls so far.
fn bytes_read_by_this_process() -> u64 {
    let io = fs::read_to_string("/proc/self/io").expect("/proc/self/io");
    io.lines()
        .find_map(|line| line.strip_prefix("rchar:"))
        .and_then(|value| value.trim().parse().ok())
        .expect("rchar")
}

// issue 11, item 4
#[test]
fn a_restart_at_the_committed_end_of_a_1_gib_file_reads_nothing_before_caught_up() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("big.log");
    let lines: Vec<u8> = (0..80)
        .flat_map(|number| {
            let mut line = format!("{number:099}").into_bytes();
            line.push(b'\n');
            line
        })
        .collect();
    fs::write(&path, &lines).expect("input");

    // a first run commits the first lines: the pointer gets its epoch, file key and a
    // fingerprint of the first 4 KiB
    let (output, mut source) = committed_source(&path);
    drive_until(&mut source, &output, || output.items().len() == 80);
    output.process_all();
    drive_until(&mut source, &output, || pointer_of(&path).offset == 8_000);
    SourceDriver::stop_source(&mut source, &output).expect("stopped");

    // the file grows to 1 GiB (sparse: a hole, then a line end) and everything in it
    // was committed: the pointer is at its end
    const SIZE: u64 = 1 << 30;
    let file = OpenOptions::new().write(true).open(&path).expect("input");
    file.set_len(SIZE - 1).expect("sparse");
    file.write_all_at(b"\n", SIZE - 1)
        .expect("the last line end");
    drop(file);
    let committed = pointer_of(&path);
    let mut bytes = fs::read(pointer_path(&path)).expect("pointer");
    PointerRecord {
        offset: SIZE,
        ..committed
    }
    .encode_into(&mut bytes);
    fs::write(pointer_path(&path), &bytes).expect("pointer at the end");

    let output = RecordingOutput::new();
    let before = bytes_read_by_this_process();
    let mut source = started_source(&path, ReadStrategy::Committed, &output);
    drive_until_state(&mut source, &output, SourceState::CaughtUp);
    let read = bytes_read_by_this_process() - before;
    assert!(
        read < 64 * 1024,
        "{read} bytes read from start to CAUGHT_UP: the file was scanned again"
    );
    assert!(output.items().is_empty(), "nothing published again");
    assert_eq!(source.epoch().get(), committed.epoch, "the same epoch");
    assert_eq!(pointer_of(&path).offset, SIZE, "the pointer kept");
    SourceDriver::stop_source(&mut source, &output).expect("stopped");
}
