//! Follow the file, not the name, across a restart (issue 11, item 1), with the real
//! `mongoose` binary: the ledger is killed with SIGKILL, the input is rotated like
//! logrotate does while the server is down, and the restart applies every line of both
//! files exactly once.

use crate::support;

use std::io::Write;

use support::{balances_of, ledger_config, LedgerRun};

fn line(index: usize) -> String {
    let amount = (index % 7) as i64 - 3;
    format!("acc{},{amount}\n", index % 20)
}

fn lines(range: std::ops::Range<usize>) -> String {
    range.map(line).collect()
}

/// The ledger over the first `count` lines, killed with SIGKILL once it applied some.
fn killed_after_some_of(count: usize) -> LedgerRun {
    let run = LedgerRun::new(
        &lines(0..count),
        &ledger_config(
            "",
            "",
            "state_dir = \"state\", alerts = \"alerts.txt\", guard = true",
        ),
    );
    let mut child = run.spawn(false);
    run.wait_until(&mut child, "applied some lines", || {
        run.state_in("state").applied > 0
    });
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    run
}

#[test]
fn a_restart_after_rotation_finishes_the_rotated_files_unread_tail() {
    let run = killed_after_some_of(1_000);
    // rotate while down: rename, the writer appends to the renamed file, a new file
    std::fs::rename(run.path("input.txt"), run.path("input.txt.1")).expect("rotate");
    std::fs::OpenOptions::new()
        .append(true)
        .open(run.path("input.txt.1"))
        .expect("rotated")
        .write_all(lines(1_000..1_500).as_bytes())
        .expect("appended");
    std::fs::write(run.path("input.txt"), lines(1_500..2_000)).expect("new file");

    let (code, log) = run.finish_with_log();
    assert_eq!(code, 0, "the restart settled lossless: {log}");
    let state = run.state_in("state");
    assert_eq!(
        state.balances,
        balances_of(lines(0..2_000).lines()),
        "every line of both files applied exactly once: {log}"
    );
    assert_eq!(state.applied, 2_000, "{log}");
}

#[test]
fn a_compressed_rotated_file_is_reported_as_a_loss_not_skipped_silently() {
    let run = killed_after_some_of(1_000);
    // rotated with lines after the pointer, then compressed before any restart
    std::fs::OpenOptions::new()
        .append(true)
        .open(run.path("input.txt"))
        .expect("input")
        .write_all(lines(1_000..1_500).as_bytes())
        .expect("appended");
    std::fs::write(run.path("input.txt.1.gz"), b"\x1f\x8bcompressed").expect("gz");
    // hold the old file open while the new one is made: a freed inode can be given
    // to the new file at once, which then passes for the old file truncated
    let old = std::fs::File::open(run.path("input.txt")).expect("the old file");
    std::fs::remove_file(run.path("input.txt")).expect("compressed away");
    std::fs::write(run.path("input.txt"), lines(1_500..2_000)).expect("new file");
    drop(old);

    let (code, log) = run.finish_with_log();
    assert_eq!(code, 3, "a possible loss is a lossy exit: {log}");
    assert!(
        log.contains("input.txt.1.gz"),
        "the WARN names the file: {log}"
    );
}

#[test]
fn a_rotation_just_before_a_kill_loses_nothing() {
    // a queue that holds the whole file: the source reads all of it at once, far ahead
    // of the ledger (one fsync per line), so the rotation is seen while most lines are
    // still unprocessed
    let mut run = LedgerRun::new(
        &lines(0..20_000),
        &ledger_config(
            "",
            "queue_capacity = 32768",
            "state_dir = \"state\", alerts = \"alerts.txt\", guard = true",
        ),
    );
    // the rotation is said at INFO (issue 39, item 4)
    run.log_filter = "warn,mongoose_server::cli=info,mongoose_source_file=info";
    let mut child = run.spawn(false);
    run.wait_until(&mut child, "applied some lines", || {
        run.state_in("state").applied > 0
    });
    std::fs::rename(run.path("input.txt"), run.path("input.txt.1")).expect("rotate");
    std::fs::write(run.path("input.txt"), lines(20_000..20_500)).expect("new file");
    run.wait_for_log(&mut child, "rotated: ");
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let applied_at_kill = run.state_in("state").applied;

    let (code, log) = run.finish_with_log();
    assert_eq!(code, 0, "the restart settled lossless: {log}");
    let state = run.state_in("state");
    assert_eq!(
        state.balances,
        balances_of(lines(0..20_500).lines()),
        "every line of both files applied exactly once (killed after {applied_at_kill}): {log}"
    );
    assert_eq!(state.applied, 20_500, "{log}");
}
