//! An idle feed costs nothing (issue 41, item 2), with the real `mongoose` binary: once
//! a file feed has read its file to the end, its source's thread sleeps until the file
//! changes (inotify), instead of waking about a thousand times a second to look. No
//! timing assertion: the test counts the thread's wake-ups (its context switches in
//! `/proc/<pid>/task/<tid>/status`) while nothing is written, then appends a line and
//! sees it forwarded.
#![cfg(target_os = "linux")]

use crate::support;

use std::io::Write;
use std::time::{Duration, Instant};

use support::{forward_config, LedgerRun};

/// The context switches (voluntary and not) of each thread of `pid`, by thread name
/// (`comm`, at most 15 bytes); a thread that ended meanwhile is left out.
fn wakeups_by_thread(pid: u32) -> Vec<(String, u64)> {
    let mut threads = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return threads;
    };
    for task in tasks.flatten() {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        let switches: u64 = status
            .lines()
            .filter(|line| line.contains("ctxt_switches:"))
            .filter_map(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        threads.push((name.trim().to_owned(), switches));
    }
    threads
}

/// The wake-ups of the feed's source thread (`mongoose-source-<feed>`, cut to 15 bytes).
fn source_wakeups(pid: u32) -> u64 {
    let sources: Vec<u64> = wakeups_by_thread(pid)
        .into_iter()
        .filter(|(name, _)| name.starts_with("mongoose-source"))
        .map(|(_, switches)| switches)
        .collect();
    assert_eq!(sources.len(), 1, "one feed, one source thread");
    sources[0]
}

/// Waits until `line` is in the sink's file, at most 20 s: less than the idle source's
/// safety look (30 s), so only a wake by the watch brings it in time (a generous
/// deadline for a wake that takes milliseconds, not a timing claim).
fn before_the_safety_look(run: &LedgerRun, child: &mut std::process::Child, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(run.path("out.txt")).is_ok_and(|out| out.contains(line)) {
        assert!(
            Instant::now() < deadline,
            "'{line}' was not forwarded within 20 s: nothing woke the idle source before its 30 s safety look; {}",
            run.log()
        );
        assert!(
            child.try_wait().expect("the child").is_none(),
            "the server exited: {}",
            run.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How long the test leaves the server idle between two counts.
const IDLE: Duration = Duration::from_secs(3);

#[test]
fn an_idle_feed_wakes_on_an_append_without_polling() {
    let run = LedgerRun::new("first line\n", &forward_config(""));
    let mut child = run.spawn(false);
    let forwarded = |text: &str| {
        std::fs::read_to_string(run.path("out.txt")).is_ok_and(|out| out.contains(text))
    };
    run.wait_until(&mut child, "the first line forwarded", || {
        forwarded("first line")
    });
    // caught up: the pointer committed past the line (nothing in flight any more)
    run.wait_until(&mut child, "the first line committed", || run.pointer() > 0);
    // the thread settles into its idle wait (its back-off parks first)
    std::thread::sleep(Duration::from_secs(1));

    let pid = child.id();
    let before = source_wakeups(pid);
    let threads_before = wakeups_by_thread(pid);
    std::thread::sleep(IDLE);
    let idle_wakeups = source_wakeups(pid) - before;
    let threads_after = wakeups_by_thread(pid);
    let per_thread: Vec<String> = threads_after
        .iter()
        .map(|(name, after)| {
            let before = threads_before
                .iter()
                .find(|(other, _)| other == name)
                .map_or(0, |(_, before)| *before);
            format!("{name}: {}", after.saturating_sub(before))
        })
        .collect();
    assert!(
        idle_wakeups <= 2,
        "the idle source's thread woke {idle_wakeups} times in {IDLE:?} with nothing written (at most 2: a safety look); every thread: {per_thread:?}"
    );

    std::fs::OpenOptions::new()
        .append(true)
        .open(run.path("input.txt"))
        .expect("input")
        .write_all(b"second line\n")
        .expect("appended");
    // the watch wakes the source: the line does not wait for the source's safety look
    // (every 30 s), which would also bring it (a generous deadline, not a timing claim)
    before_the_safety_look(&run, &mut child, "second line");
    assert!(
        source_wakeups(pid) > before + idle_wakeups,
        "the append woke the source's thread"
    );
    assert_eq!(run.terminate(child), 0, "{}", run.log());
}

/// What the watch must still show an idle feed (issue 41, item 2: keep every
/// guarantee): its file renamed away and made again, then cut to nothing and written
/// again. Each change comes while the source sleeps, and is read before its safety
/// look, with nothing lost.
#[test]
fn an_idle_feed_sees_its_file_rotated_and_truncated_while_it_sleeps() {
    let run = LedgerRun::new("first line\n", &forward_config(""));
    let mut child = run.spawn(false);
    before_the_safety_look(&run, &mut child, "first line");
    run.wait_until(&mut child, "the first line committed", || run.pointer() > 0);
    std::thread::sleep(Duration::from_secs(1));

    // rotated: renamed (a line appended to the old file after the rename), then made again
    std::fs::rename(run.path("input.txt"), run.path("input.txt.1")).expect("rotated");
    std::fs::OpenOptions::new()
        .append(true)
        .open(run.path("input.txt.1"))
        .expect("the rotated file")
        .write_all(b"late line of the old file\n")
        .expect("appended");
    std::fs::write(run.path("input.txt"), "first line of the new file\n").expect("new file");
    before_the_safety_look(&run, &mut child, "late line of the old file");
    before_the_safety_look(&run, &mut child, "first line of the new file");
    std::thread::sleep(Duration::from_secs(1));

    // truncated to nothing, then written again
    std::fs::write(run.path("input.txt"), "").expect("truncated");
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(run.path("input.txt"), "after the cut\n").expect("written again");
    before_the_safety_look(&run, &mut child, "after the cut");
    assert_eq!(run.terminate(child), 0, "{}", run.log());
}
