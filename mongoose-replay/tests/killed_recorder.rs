//! A recorder process killed with SIGKILL while appending leaves a store that reads as a
//! prefix of what it appended, every input with its own delivery, that reads as
//! incomplete (no closing frame), and that RECORD never reuses (book: running/record-and-replay.md: a torn last frame marks the
//! recording incomplete; a delivery whose input was never written adds nothing; issue 10 item 10: a killed recorder leaves no closing frame).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::{Delivery, Epoch, PositionValue};
use mongoose_replay::{Entry, Incomplete, Recording, ReplayError, ReplayStore};

const CHILD_STORE: &str = "MONGOOSE_REPLAY_TEST_CHILD_STORE";
const CHILD_BUFFER: &str = "MONGOOSE_REPLAY_TEST_CHILD_BUFFER";

fn input(sequence: u64) -> Entry {
    let positioned = sequence % 3 != 0;
    Entry::Indexed {
        feed: "lines".into(),
        sequence,
        route: "onLine".into(),
        delivery: positioned.then(|| {
            Delivery::new(
                Arc::from("lines"),
                sequence,
                Epoch(9),
                PositionValue::at(sequence * 10),
                0,
            )
        }),
        clock: vec![sequence as i64],
    }
}

/// The child: appends inputs to the store until it is killed.
#[test]
#[ignore = "run as a child process by a_recorder_killed_while_appending_leaves_a_readable_prefix"]
fn child_appends_until_killed() {
    // only a parent test sets the store path; `cargo test -- --include-ignored` alone
    // has nothing to record into
    let Some(path) = std::env::var_os(CHILD_STORE).map(PathBuf::from) else {
        return;
    };
    let buffer: usize = std::env::var(CHILD_BUFFER)
        .expect("the write buffer")
        .parse()
        .expect("a size");
    let mut store = ReplayStore::open_for_record(&path).expect("store");
    store.set_write_buffer(buffer).expect("buffer");
    let stream = store.begin("recorder", None).expect("begin");
    for sequence in 1.. {
        store.append(stream, &input(sequence)).expect("append");
    }
}

fn spawn_child(path: &Path, buffer: usize) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "child_appends_until_killed",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_STORE, path)
        .env(CHILD_BUFFER, buffer.to_string())
        .spawn()
        .expect("spawn the recorder")
}

fn kill_while_appending(buffer: usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("killed.replay");
    let mut child = spawn_child(&path, buffer);
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) < 256 << 10 {
        assert!(
            Instant::now() < deadline,
            "the recorder wrote nothing in 60 s"
        );
        assert!(
            child.try_wait().expect("child").is_none(),
            "the recorder exited"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");

    let recording = Recording::read(&path).expect("a killed store is read");
    let entries = recording.stream("recorder").expect("stream").entries();
    assert!(entries.len() > 1000, "only {} entries", entries.len());
    for (index, entry) in entries.iter().enumerate() {
        assert_eq!(entry, &input(index as u64 + 1), "entry {index}");
    }
    // never complete: the store has no closing frame
    assert!(!recording.complete());
    assert!(recording.closing().is_none());
    assert!(
        matches!(
            recording.incomplete().last(),
            Some(Incomplete::NotClosed { .. })
        ),
        "{:?}",
        recording.incomplete()
    );
    // anything incomplete is at the end: a torn frame, or a delivery cut from its input,
    // and the missing closing frame
    let end = std::fs::metadata(&path).expect("metadata").len();
    for reason in recording.incomplete() {
        match reason {
            Incomplete::TornFrame { offset }
            | Incomplete::OrphanDelivery { offset, .. }
            | Incomplete::NotClosed { offset } => {
                assert!(end - offset < 128, "{reason} is not at the end ({end})")
            }
            other => panic!("a killed recorder left {other}"),
        }
    }
    assert!(matches!(
        ReplayStore::open_for_record(&path),
        Err(ReplayError::AlreadyHoldsRecording { .. })
    ));
}

#[test]
fn a_recorder_killed_while_appending_leaves_a_readable_prefix() {
    kill_while_appending(0);
}

#[test]
fn a_buffered_recorder_killed_while_appending_leaves_a_readable_prefix() {
    kill_while_appending(4 << 10);
}
