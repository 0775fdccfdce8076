//! Many files per feed (issue 11, item 2) with the real `mongoose` binary: the ledger
//! on a glob feed of three files that are being appended to, killed with SIGKILL
//! several times and restarted; at the end every line of every file is applied exactly
//! once (one saved position per lane).

use crate::support;

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::{balances_of, ledger_config, LedgerRun};

const FILES: [&str; 3] = ["a.csv", "b.csv", "c.csv"];
const LINES_PER_FILE: usize = 3_000;

fn line(file: usize, index: usize) -> String {
    let amount = (index % 7) as i64 - 3;
    format!("f{file}acc{},{amount}\n", index % 10)
}

fn glob_run() -> LedgerRun {
    let config = ledger_config(
        "",
        "",
        "state_dir = \"state\", alerts = \"alerts.txt\", guard = true",
    )
    .replace(
        "path = \"input.txt\"",
        "path = \"logs/*.csv\"\nscan_interval_millis = 20",
    );
    let run = LedgerRun::new("", &config);
    std::fs::create_dir_all(run.path("logs")).expect("logs");
    run
}

#[test]
fn a_glob_feed_killed_while_its_files_grow_applies_every_line_once() {
    let run = glob_run();
    // the first lines, and one file that appears only later
    for (file, name) in FILES.iter().enumerate().take(2) {
        let first: String = (0..100).map(|index| line(file, index)).collect();
        std::fs::write(run.path("logs").join(name), first).expect("file");
    }
    let writing = Arc::new(AtomicBool::new(true));
    let writer = {
        let logs = run.path("logs");
        let writing = Arc::clone(&writing);
        std::thread::spawn(move || {
            let mut next = [100usize, 100, 0];
            while next.iter().any(|written| *written < LINES_PER_FILE) {
                for (file, name) in FILES.iter().enumerate() {
                    let end = (next[file] + 37).min(LINES_PER_FILE);
                    let text: String = (next[file]..end).map(|index| line(file, index)).collect();
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(logs.join(name))
                        .expect("append")
                        .write_all(text.as_bytes())
                        .expect("appended");
                    next[file] = end;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            writing.store(false, Ordering::Release);
        })
    };
    let mut applied = 0;
    let total = (FILES.len() * LINES_PER_FILE) as u64;
    for _ in 0..5 {
        if applied == total {
            break;
        }
        let mut child = run.spawn(false);
        run.wait_until(&mut child, "applied more lines", || {
            std::fs::metadata(run.path("state"))
                .is_ok_and(|_| run.state_in("state").applied > applied)
        });
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
        applied = run.state_in("state").applied;
    }
    writer.join().expect("the writer");
    assert!(!writing.load(Ordering::Acquire));

    let (code, log) = run.finish_with_log();
    assert_eq!(code, 0, "the last run settled lossless: {log}");
    let state = run.state_in("state");
    let every_line: String = (0..FILES.len())
        .flat_map(|file| (0..LINES_PER_FILE).map(move |index| line(file, index)))
        .collect();
    assert_eq!(
        state.balances,
        balances_of(every_line.lines()),
        "every line of every file applied exactly once: {log}"
    );
    assert_eq!(state.applied, total, "{log}");
    assert_eq!(
        state.lanes.len(),
        FILES.len(),
        "one saved position per file"
    );
    // a record log of the durable layer: a binary header and frame around the text
    let lanes = std::fs::read(support::feed_state(
        run.dir.path(),
        "lines",
        "logs/*.csv",
        "lines.lanes",
    ))
    .expect("the registry");
    let lanes = String::from_utf8_lossy(&lanes);
    for name in FILES {
        assert!(lanes.contains(name), "{lanes}");
    }
}

// ---------------------------------------------------------------------------------
// Issue 25, item 1: logrotate under a glob (`create` with a name the glob matches,
// `copytruncate`, `compress` + `delaycompress`), after settle, while busy and while
// stopped: every line applied once, every run lossless.
// ---------------------------------------------------------------------------------

/// When a rotation happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum When {
    /// The server has applied every line and runs on.
    AfterSettle,
    /// The server is still applying the file's lines.
    WhileBusy,
    /// The server was stopped (SIGTERM) after applying every line.
    WhileStopped,
}

/// How logrotate rotates `logs/app.log`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `create` with `dateext`-like names the glob matches: `app-N.log`, a new
    /// `app.log`.
    Create,
    /// `copytruncate`: `app.log.1` shifted to `app.log.2`, `app.log` copied to
    /// `app.log.1` and cut to 0.
    Copytruncate,
    /// `compress` + `delaycompress`: `app.log.N.gz` shifted, `app.log.1` compressed to
    /// `app.log.2.gz`, `app.log` renamed `app.log.1`, a new `app.log`.
    CompressDelaycompress,
}

/// A glob feed `logs/*.log` (scanned every 20 ms) into the ledger; `top` and `feed`
/// as in [`ledger_config`].
fn glob_ledger_run(top: &str, feed: &str) -> LedgerRun {
    let config = ledger_config(
        top,
        feed,
        "state_dir = \"state\", alerts = \"alerts.txt\", guard = true, sync = false, compact_every = 1000",
    )
    .replace(
        "path = \"input.txt\"",
        "path = \"logs/*.log\"\nscan_interval_millis = 20",
    );
    let mut run = LedgerRun::new("", &config);
    run.log_filter = "warn,mongoose_server::cli=info,mongoose_source_file=info";
    std::fs::create_dir_all(run.path("logs")).expect("logs");
    run
}

/// `count` lines of accounts `{prefix}0..{prefix}39`, amounts -3..3.
fn ledger_lines(prefix: &str, count: usize) -> Vec<String> {
    (0..count)
        .map(|index| format!("{prefix}{},{}\n", index % 40, (index % 7) as i64 - 3))
        .collect()
}

fn append_lines(path: &std::path::Path, lines: &[String]) {
    let text: String = lines.concat();
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open to append")
        .write_all(text.as_bytes())
        .expect("appended");
}

/// `logs/<name>` plus `suffix`.
fn with_suffix(run: &LedgerRun, name: &str, suffix: &str) -> std::path::PathBuf {
    run.path("logs").join(format!("{name}{suffix}"))
}

/// One logrotate run over `logs/app.log` (the `number`th).
fn logrotate(run: &LedgerRun, mode: Mode, number: usize) {
    let live = run.path("logs/app.log");
    match mode {
        Mode::Create => {
            std::fs::rename(&live, run.path("logs").join(format!("app-{number}.log")))
                .expect("renamed");
            std::fs::File::create(&live).expect("created");
        }
        Mode::Copytruncate => {
            for older in (1..number).rev() {
                let from = with_suffix(run, "app.log", &format!(".{older}"));
                if from.exists() {
                    std::fs::rename(
                        &from,
                        with_suffix(run, "app.log", &format!(".{}", older + 1)),
                    )
                    .expect("shifted");
                }
            }
            std::fs::copy(&live, with_suffix(run, "app.log", ".1")).expect("copied");
            std::fs::OpenOptions::new()
                .write(true)
                .open(&live)
                .expect("open")
                .set_len(0)
                .expect("truncated");
        }
        Mode::CompressDelaycompress => {
            for older in (2..number).rev() {
                let from = with_suffix(run, "app.log", &format!(".{older}.gz"));
                if from.exists() {
                    std::fs::rename(
                        &from,
                        with_suffix(run, "app.log", &format!(".{}.gz", older + 1)),
                    )
                    .expect("shifted");
                }
            }
            let first = with_suffix(run, "app.log", ".1");
            if first.exists() {
                let gzip = std::process::Command::new("gzip")
                    .arg("-f")
                    .arg(&first)
                    .status()
                    .expect("gzip runs");
                assert!(gzip.success());
                std::fs::rename(
                    with_suffix(run, "app.log", ".1.gz"),
                    with_suffix(run, "app.log", ".2.gz"),
                )
                .expect("renamed");
            }
            std::fs::rename(&live, &first).expect("renamed");
            std::fs::File::create(&live).expect("created");
        }
    }
}

/// The committed offset and the epoch of `logs/app.log`'s pointer.
fn live_pointer(run: &LedgerRun) -> Option<(u64, u64)> {
    let bytes = std::fs::read(support::feed_state(
        run.dir.path(),
        "lines",
        "logs/*.log",
        "app.log.readPointer",
    ))
    .ok()?;
    let offset = u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
    let epoch = u64::from_be_bytes(bytes.get(8..16)?.try_into().ok()?);
    Some((offset, epoch))
}

/// Three batches of lines in `logs/app.log`, two rotations between them, done `when`;
/// every run must be lossless and every line applied once.
fn logrotate_case(mode: Mode, when: When) {
    let run = glob_ledger_run("", "");
    let big = if when == When::WhileBusy {
        30_000
    } else {
        2_000
    };
    let batches = [
        ledger_lines("a", big),
        ledger_lines("b", big),
        ledger_lines("c", 500),
    ];
    let context = format!("{mode:?} {when:?}");
    let live = run.path("logs/app.log");
    append_lines(&live, &batches[0]);
    let mut written = batches[0].len() as u64;
    let mut child = Some(run.spawn(false));
    let mut last_epoch = None;
    for (number, batch) in batches.iter().enumerate().skip(1) {
        let running = child.as_mut().expect("a running server");
        match when {
            When::AfterSettle => {
                run.wait_until(running, &format!("applied {written} lines"), || {
                    run.applied() >= written
                });
            }
            When::WhileBusy => {
                // busy: the live file's pointer (a new epoch since the last rotation)
                // has moved, and is still short of the file's end
                run.wait_until(
                    running,
                    &format!("read app.log after rotation {}", number - 1),
                    || {
                        live_pointer(&run)
                            .is_some_and(|(offset, epoch)| offset > 0 && Some(epoch) != last_epoch)
                    },
                );
                let (offset, epoch) = live_pointer(&run).expect("the live file's pointer");
                let size = std::fs::metadata(&live).expect("app.log").len();
                assert!(
                    offset < size,
                    "{context}: the server committed all of app.log ({offset} of {size} bytes) before rotation {number}: the case needs a busy server"
                );
                last_epoch = Some(epoch);
            }
            When::WhileStopped => {
                run.wait_until(running, &format!("applied {written} lines"), || {
                    run.applied() >= written
                });
                let code = run.terminate(child.take().expect("running"));
                assert_eq!(
                    code,
                    0,
                    "{context}: run {number} was lossless: {}",
                    run.log()
                );
            }
        }
        logrotate(&run, mode, number);
        append_lines(&live, batch);
        written += batch.len() as u64;
        if child.is_none() {
            child = Some(run.spawn(false));
        }
    }
    let mut child = child.expect("a running server");
    run.wait_until(&mut child, &format!("applied {written} lines"), || {
        run.applied() >= written
    });
    let code = run.terminate(child);
    assert_eq!(code, 0, "{context}: the run was lossless: {}", run.log());
    let earlier = run.log();
    let (code, log) = run.finish_with_log();
    assert_eq!(
        code, 0,
        "{context}: the final run settled lossless: {earlier}{log}"
    );
    let every_line: Vec<String> = batches.concat();
    support::assert_applied_once(
        &run.state_in("state"),
        &every_line,
        &format!("{context}: {earlier}{log}"),
    );
}

#[test]
fn logrotate_create_under_a_glob_applies_every_line_once() {
    for when in [When::AfterSettle, When::WhileBusy, When::WhileStopped] {
        logrotate_case(Mode::Create, when);
    }
}

#[test]
fn logrotate_copytruncate_under_a_glob_applies_every_line_once() {
    for when in [When::AfterSettle, When::WhileBusy, When::WhileStopped] {
        logrotate_case(Mode::Copytruncate, when);
    }
}

#[test]
fn logrotate_compress_and_delaycompress_under_a_glob_applies_every_line_once() {
    for when in [When::AfterSettle, When::WhileBusy, When::WhileStopped] {
        logrotate_case(Mode::CompressDelaycompress, when);
    }
}

// ---------------------------------------------------------------------------------
// Issue 25, item 2: files deleted before they are read to their end. A deleted file
// still open is read to its end; one gone before it was opened is a loss counted
// once, kept across kills until a run reports it.
// ---------------------------------------------------------------------------------

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("address").port()
}

/// A glob run with one open-file slot and the admin API on `port`; the file source's
/// debug lines are logged (which file was opened when).
fn one_slot_run(port: u16) -> LedgerRun {
    let mut run = glob_ledger_run(
        &format!("[admin]\naddress = \"127.0.0.1:{port}\"\n"),
        "max_open_files = 1",
    );
    run.log_filter = "warn,mongoose_server::cli=info,mongoose_source_file=debug";
    run
}

/// The feed's status (the admin API of the run on `port`), once it answers.
fn feed_status(port: u16) -> Option<serde_json::Value> {
    let text = mongoose_server::admin::get_text(&format!("127.0.0.1:{port}"), "/status").ok()?;
    let status: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some(status["feeds"][0].clone())
}

/// Waits until the feed is settled and caught up, and returns its status.
fn settled_status(
    run: &LedgerRun,
    child: &mut std::process::Child,
    port: u16,
) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    run.wait_until(child, "settled and caught up", || match feed_status(port) {
        Some(feed) if feed["settled"] == true && feed["state"] == "CAUGHT_UP" => {
            last = feed;
            true
        }
        _ => false,
    });
    last
}

/// How many times the run opened `logs/<name>` (the file source's debug line).
fn opens_of(run: &LedgerRun, name: &str) -> usize {
    let source = format!("source=lines:{name} ");
    run.log()
        .lines()
        .filter(|line| line.contains("opened the input file") && line.contains(&source))
        .count()
}

/// Up to five tries of a case whose timing the test cannot force (a file deleted
/// before the server gave it a slot): `case` returns false when that did not happen.
fn retried(what: &str, mut case: impl FnMut() -> bool) {
    for _ in 0..5 {
        if case() {
            return;
        }
        eprintln!("{what}: the timing of the case was missed, trying again");
    }
    panic!("{what}: the case never happened in five tries");
}

/// `b.log` (one account per line) is deleted while `a.log` holds the only slot, right
/// after the first scan tracked it. Returns the lines of `a.log` and the running
/// server, or `None` when the server had opened `b.log` before it was deleted.
fn delete_a_waiting_file(run: &LedgerRun) -> Option<(Vec<String>, std::process::Child)> {
    let first = ledger_lines("a", 20_000);
    let waiting: Vec<String> = (0..5_000).map(|index| format!("b{index},1\n")).collect();
    append_lines(&run.path("logs/a.log"), &first);
    append_lines(&run.path("logs/b.log"), &waiting);
    let mut child = run.spawn(false);
    run.wait_for_log(&mut child, "file=b.log lane=2");
    std::fs::remove_file(run.path("logs/b.log")).expect("deleted");
    run.wait_until(&mut child, "applied a line", || run.applied() > 0);
    if opens_of(run, "b.log") > 0 {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    }
    Some((first, child))
}

#[test]
fn a_file_deleted_while_waiting_for_a_slot_is_read_or_reported_once() {
    retried("b.log deleted while waiting", || {
        let port = free_port();
        let run = one_slot_run(port);
        let Some((first, mut child)) = delete_a_waiting_file(&run) else {
            return false;
        };
        let feed = settled_status(&run, &mut child, port);
        let code = run.terminate(child);
        if opens_of(&run, "b.log") > 0 {
            return false;
        }
        assert_eq!(
            feed["rotatedUnreadFiles"],
            1,
            "b.log, gone before it was opened, is one loss: {feed} {}",
            run.log()
        );
        assert_eq!(feed["lossless"], false, "{feed}");
        assert_eq!(code, 3, "the run lost b.log: {}", run.log());
        support::assert_applied_once(&run.state_in("state"), &first, &run.log());
        assert_eq!(
            run.log().matches("logs/b.log was deleted before").count(),
            1,
            "the loss is logged once: {}",
            run.log()
        );
        // the next start reports it once more (as every loss of a run), the one after
        // is clean
        let (code, log) = run.finish_with_log();
        assert_eq!(code, 3, "the loss is reported by the next start: {log}");
        assert!(
            log.contains("b.log"),
            "the earlier loss names the file: {log}"
        );
        let (code, log) = run.finish_with_log();
        assert_eq!(code, 0, "reported once, not at every start: {log}");
        support::assert_applied_once(&run.state_in("state"), &first, &log);
        true
    });
}

#[test]
fn a_loss_found_before_a_kill_is_reported_after_it() {
    retried("b.log deleted while waiting, then a kill", || {
        let port = free_port();
        let run = one_slot_run(port);
        let Some((first, mut child)) = delete_a_waiting_file(&run) else {
            return false;
        };
        run.wait_until(&mut child, "counted the loss of b.log", || {
            feed_status(port).is_some_and(|feed| feed["rotatedUnreadFiles"].as_u64() >= Some(1))
        });
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
        // the next start reports it, and is killed too before it ends
        let mut child = run.spawn(false);
        run.wait_until(&mut child, "reported the earlier loss", || {
            feed_status(port).is_some_and(|feed| feed["earlierLosses"].as_u64() >= Some(1))
        });
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
        let killed = run.log();
        let (code, log) = run.finish_with_log();
        assert_eq!(
            code, 3,
            "the loss found by a killed run is reported until a run that reports it ends: {killed}{log}"
        );
        assert!(log.contains("b.log"), "the loss names the file: {log}");
        support::assert_applied_once(&run.state_in("state"), &first, &log);
        let (code, log) = run.finish_with_log();
        assert_eq!(code, 0, "reported once: {log}");
        true
    });
}

#[test]
fn rotated_unread_counts_each_file_once() {
    retried("a.log parked and d.log waiting, both deleted", || {
        let port = free_port();
        let run = one_slot_run(port);
        // a.log is read to its end and gives its slot to c.log (busy); a.log grows and
        // is deleted before it gets a slot again; d.log waits and is deleted unopened
        let parked = ledger_lines("a", 100);
        let busy = ledger_lines("c", 30_000);
        append_lines(&run.path("logs/a.log"), &parked);
        let mut child = run.spawn(false);
        run.wait_until(&mut child, "applied a.log", || {
            run.applied() >= parked.len() as u64
        });
        append_lines(&run.path("logs/c.log"), &busy);
        append_lines(&run.path("logs/d.log"), &ledger_lines("d", 1_000));
        run.wait_for_log(&mut child, "file=d.log lane=3");
        run.wait_for_log(&mut child, "gave its open-file slot");
        append_lines(&run.path("logs/a.log"), &ledger_lines("e", 1_000));
        std::fs::remove_file(run.path("logs/a.log")).expect("deleted");
        std::fs::remove_file(run.path("logs/d.log")).expect("deleted");
        let feed = settled_status(&run, &mut child, port);
        let code = run.terminate(child);
        if opens_of(&run, "a.log") > 1 || opens_of(&run, "d.log") > 0 {
            return false;
        }
        assert_eq!(
            feed["rotatedUnreadFiles"],
            2,
            "a.log and d.log, each counted once: {feed} {}",
            run.log()
        );
        assert_eq!(code, 3, "{}", run.log());
        let every_line: Vec<String> = [parked, busy].concat();
        support::assert_applied_once(&run.state_in("state"), &every_line, &run.log());
        true
    });
}

// ---------------------------------------------------------------------------------
// Issue 25, item 2: a `rotated` glob that matches every file of the feed's own glob
// took each for a rotation: 0 of 400 lines read, "settled and lossless". Refused at
// load (validate and run), with its key path.
// ---------------------------------------------------------------------------------

#[test]
fn a_rotated_glob_that_matches_the_feeds_own_files_is_refused_at_load() {
    for rotated in ["*.log", "*", "*.lo?"] {
        let run = glob_ledger_run("", &format!("rotated = \"{rotated}\""));
        append_lines(&run.path("logs/app.log"), &ledger_lines("a", 400));
        for command in ["validate", "run"] {
            let output = std::process::Command::new(env!("CARGO_BIN_EXE_mongoose"))
                .arg(command)
                .arg("--config")
                .arg(run.path("mongoose.toml"))
                .args((command == "run").then_some("--exit-when-settled"))
                .output()
                .expect("the mongoose binary runs");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(
                output.status.code(),
                Some(mongoose_server::cli::EXIT_BAD_CONFIG as i32),
                "`mongoose {command}` with rotated = {rotated:?}: {stderr}"
            );
            assert!(
                stderr.contains("feeds[0].rotated") && stderr.contains(rotated),
                "names the key and the glob: {stderr}"
            );
        }
    }
    // a rotated glob that leaves the feed's files alone is taken
    let run = glob_ledger_run("", "rotated = \"*.log.[0-9]\"");
    append_lines(&run.path("logs/app.log"), &ledger_lines("a", 400));
    let (code, log) = run.finish_with_log();
    assert_eq!(code, 0, "{log}");
    support::assert_applied_once(&run.state_in("state"), &ledger_lines("a", 400), &log);
}

// Found by the glob-churn soak: the ledger reports one saved position per lane, and the
// feed kept only the last one. With the glob's pointer files lost, every other file
// looked unknown to the ledger and was read again from its start under a new epoch:
// applied twice.
#[test]
fn a_glob_whose_pointers_are_lost_resumes_every_file_at_the_ledgers_saved_position() {
    let run = glob_ledger_run("", "");
    let names = ["a.log", "b.log", "c.log"];
    let mut every_line = Vec::new();
    for (index, name) in names.iter().enumerate() {
        let lines = ledger_lines(&format!("f{index}x"), 500);
        append_lines(&run.path("logs").join(name), &lines);
        every_line.extend(lines);
    }
    let (code, log) = run.finish_with_log();
    assert_eq!(code, 0, "{log}");
    for name in names {
        std::fs::remove_file(support::feed_state(
            run.dir.path(),
            "lines",
            "logs/*.log",
            &format!("{name}.readPointer"),
        ))
        .expect("pointer lost");
    }
    let more = ledger_lines("more", 100);
    append_lines(&run.path("logs/b.log"), &more);
    every_line.extend(more);
    let (code, log) = run.finish_with_log();
    assert_eq!(code, 0, "{log}");
    support::assert_applied_once(&run.state_in("state"), &every_line, &log);
}
