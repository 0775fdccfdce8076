//! An idle feed costs nothing (issue 41, item 2), with the real `mongoose` binary: once
//! a file feed has read its file to the end, its source's thread sleeps until the file
//! changes (inotify), instead of waking about a thousand times a second to look. No
//! timing assertion: the test counts the thread's wake-ups (its context switches in
//! `/proc/<pid>/task/<tid>/status`) while nothing is written, then appends a line and
//! sees it forwarded.
#![cfg(target_os = "linux")]

mod support;

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
    let deadline = Instant::now() + Duration::from_secs(20);
    while !forwarded("second line") {
        assert!(
            Instant::now() < deadline,
            "the appended line was not forwarded within 20 s: nothing woke the idle source before its 30 s safety look; {}",
            run.log()
        );
        assert!(
            child.try_wait().expect("the child").is_none(),
            "the server exited: {}",
            run.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        source_wakeups(pid) > before + idle_wakeups,
        "the append woke the source's thread"
    );
    assert_eq!(run.terminate(child), 0, "{}", run.log());
}
