//! Readers and writers in separate processes: a reader tails what another process
//! appends, a writer killed with SIGKILL leaves a journal whose every readable excerpt
//! is whole, and only one appender exists at a time, across processes.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use common::{open_small, payload, read_all_checked, wait_for};
use mongoose_journal::JournalError;

const CHILD_MODE: &str = "MONGOOSE_JOURNAL_TEST_CHILD_MODE";
const CHILD_DIR: &str = "MONGOOSE_JOURNAL_TEST_CHILD_DIR";
const APPENDED_BY_CHILD: u64 = 200_000;

/// The child half of these tests, run by re-executing the test binary. Its mode says
/// what it does: `append` (append `APPENDED_BY_CHILD` excerpts once the parent says
/// `go`), `loop` (append forever, syncing and recording the synced count now and then)
/// or `hold` (hold the appender until killed).
#[test]
#[ignore = "run as a child process by the tests of this file"]
fn journal_child() {
    let (Ok(mode), Ok(dir)) = (std::env::var(CHILD_MODE), std::env::var(CHILD_DIR)) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let journal = open_small(&dir.join("journal"));
    let mut appender = journal.appender().expect("the child's appender");
    match mode.as_str() {
        "append" => {
            wait_for("the parent's go", || dir.join("go").exists());
            for index in 0..APPENDED_BY_CHILD {
                assert_eq!(appender.append(&payload(index)).expect("append"), index);
                if index + 1 == APPENDED_BY_CHILD / 2 {
                    // half way: wait until the reader has caught up with a live writer
                    wait_for("the parent to catch up", || dir.join("caught-up").exists());
                }
                if index % 5_000 == 0 {
                    // let the reader catch up now and then, so it really tails
                    thread::sleep(Duration::from_millis(1));
                }
            }
            fs::write(dir.join("done"), b"done").expect("done marker");
        }
        "loop" => loop {
            let index = appender.next_index();
            assert_eq!(appender.append(&payload(index)).expect("append"), index);
            if index % 1_000 == 999 {
                appender.sync().expect("sync");
                let synced = dir.join("synced.tmp");
                fs::write(&synced, (index + 1).to_string()).expect("synced count");
                fs::rename(&synced, dir.join("synced")).expect("synced count");
            }
        },
        "hold" => {
            fs::write(dir.join("holding"), b"holding").expect("marker");
            loop {
                thread::sleep(Duration::from_millis(50));
            }
        }
        other => panic!("unknown child mode {other}"),
    }
}

fn spawn_child(mode: &str, dir: &Path) -> Child {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "journal_child", "--ignored", "--nocapture"])
        .env(CHILD_MODE, mode)
        .env(CHILD_DIR, dir)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child")
}

/// Kills `child` with SIGKILL (what `Child::kill` sends on Unix) and reaps it.
fn kill(mut child: Child) {
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
}

#[test]
fn a_reader_in_another_process_sees_a_writer_appending() {
    let dir = tempfile::tempdir().expect("dir");
    let journal = open_small(&dir.path().join("journal"));
    let mut tailer = journal.tailer();
    assert!(tailer.next().expect("read").is_none(), "nothing yet");
    let mut child = spawn_child("append", dir.path());
    fs::write(dir.path().join("go"), b"go").expect("go");

    let mut read = 0;
    let mut empty_polls_before_the_end = 0u64;
    let mut told_the_child = false;
    wait_for("every excerpt the child appends", || {
        while let Some(excerpt) = tailer.next().expect("read") {
            assert_eq!(excerpt.index(), read, "each excerpt once, in order");
            assert_eq!(excerpt.bytes(), &payload(read)[..], "excerpt {read}");
            read += 1;
        }
        if read == APPENDED_BY_CHILD / 2 && !told_the_child {
            // the child waits here: the reader has caught up with a live writer
            fs::write(dir.path().join("caught-up"), b"caught up").expect("marker");
            told_the_child = true;
        }
        if read < APPENDED_BY_CHILD {
            empty_polls_before_the_end += 1;
            if let Some(status) = child.try_wait().expect("the child") {
                assert!(status.success(), "the child failed: {status}");
            }
        }
        read == APPENDED_BY_CHILD
    });
    let status = child.wait().expect("the child");
    assert!(status.success(), "the child failed: {status}");
    assert!(
        tailer.next().expect("read").is_none(),
        "nothing more than was appended"
    );
    assert!(
        journal.segment_numbers().expect("segments").len() > 10,
        "it rolled"
    );
    assert!(
        empty_polls_before_the_end > 0,
        "the reader caught up with the writer at least once (it tailed a live writer)"
    );
}

#[test]
fn a_writer_killed_with_sigkill_loses_only_unsynced_tail_and_never_corrupts() {
    let dir = tempfile::tempdir().expect("dir");
    let journal_dir = dir.path().join("journal");
    let synced = |dir: &Path| -> u64 {
        fs::read_to_string(dir.join("synced"))
            .map(|text| text.trim().parse().expect("a count"))
            .unwrap_or(0)
    };
    let mut previous_count = 0;
    for round in 0..3 {
        let _ = fs::remove_file(dir.path().join("synced"));
        let child = spawn_child("loop", dir.path());
        // let it append (and sync) a good many excerpts past where it started
        wait_for("the child to sync past its start", || {
            synced(dir.path()) > previous_count + 20_000
        });
        kill(child);
        let last_synced = synced(dir.path());

        let journal = open_small(&journal_dir);
        let count = read_all_checked(&journal);
        assert!(
            count >= last_synced,
            "round {round}: {count} readable excerpts, but {last_synced} were synced"
        );
        assert_eq!(journal.last_index().expect("last"), count.checked_sub(1));
        for entry in journal.dump().expect("dump") {
            let entry = entry.expect("a dump entry");
            assert!(entry.index >= count || entry.checksum_ok, "{entry:?}");
        }
        // appending resumes right after the last whole excerpt
        let mut appender = journal.appender().expect("the appender after a kill");
        assert_eq!(appender.next_index(), count, "round {round}");
        assert_eq!(appender.append(&payload(count)).expect("append"), count);
        drop(appender);
        assert_eq!(read_all_checked(&journal), count + 1);
        previous_count = count + 1;
    }
}

#[test]
fn a_second_appender_is_refused() {
    // in one process
    let dir = tempfile::tempdir().expect("dir");
    let journal = open_small(&dir.path().join("journal"));
    let first = journal.appender().expect("the first appender");
    let second = journal
        .appender()
        .expect_err("a second appender is refused");
    assert!(
        matches!(second, JournalError::AppenderHeld { .. }),
        "{second:?}"
    );
    let message = second.to_string();
    assert!(message.contains("another appender"), "{message}");
    let again = open_small(&dir.path().join("journal"));
    assert!(again.appender().is_err(), "also through another Journal");
    drop(first);
    // free again once the first is dropped; another test of this binary spawning a
    // child at that moment shares the lock's open file until the child's exec closes
    // it, so allow for that short window
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match journal.appender() {
            Ok(appender) => {
                drop(appender);
                break;
            }
            Err(JournalError::AppenderHeld { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(error) => panic!("free again once the first is dropped: {error:?}"),
        }
    }

    // across processes: refused while a child holds it, free once the child is killed
    let child = spawn_child("hold", dir.path());
    wait_for("the child to hold the appender", || {
        dir.path().join("holding").exists()
    });
    let refused = journal
        .appender()
        .expect_err("refused while the child holds it");
    assert!(
        matches!(refused, JournalError::AppenderHeld { .. }),
        "{refused:?}"
    );
    kill(child);
    let mut appender = journal.appender().expect("free once the holder died");
    assert_eq!(appender.append(b"after the holder").expect("append"), 0);
}
