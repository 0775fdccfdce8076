//! Runs that cannot go on end (issue 24, item 9): with the ledger's state folder on a
//! full disk, `mongoose run --exit-when-settled` was still running after 400 s (stalled
//! from the fifth second) and had written 54 MB of log, one warning 544 times. Now a
//! stall that nothing works on any more ends the run with exit 1 after
//! `stalled_exit_millis`, naming the stall, and a repeating warning is logged once, then
//! as a count. Real processes on a real full tmpfs (needs root).

use crate::support;

use std::time::{Duration, Instant};

use mongoose_testkit::Tmpfs;
use support::{ledger_config, LedgerRun};

#[test]
fn a_run_whose_state_disk_stays_full_ends_with_exit_1_and_a_small_log() {
    let input: String = (0..20_000).map(|index| format!("a{index},-1\n")).collect();
    let run = LedgerRun::new(
        &input,
        &ledger_config(
            "stalled_exit_millis = 3000",
            "",
            "state_dir = \"state\", alerts = \"alerts.txt\"",
        ),
    );
    let _full = Tmpfs::mount_at(&run.path("state"), "64k");
    let mut child = run.spawn(true);
    // a hang fails the test instead of holding it: generous, never a timing assertion
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(status) = child.try_wait().expect("child status") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let log = run.log();
            panic!(
                "a run whose state disk stays full never ended ({} log lines); last lines:\n{}",
                log.lines().count(),
                log.lines().rev().take(5).collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = run.log();
    assert_eq!(
        status.code(),
        Some(1),
        "a run that cannot go on ends with exit 1: {status}; log tail:\n{}",
        log.lines().rev().take(8).collect::<Vec<_>>().join("\n")
    );
    assert!(
        log.contains("the run cannot go on") && log.contains("No space left on device"),
        "the end names the stall and its cause:\n{log}"
    );
    // before: thousands of lines a second, for as long as it ran
    let lines = log.lines().count();
    assert!(
        lines < 200,
        "a repeating warning is logged once, then as a count: {lines} log lines"
    );
}
