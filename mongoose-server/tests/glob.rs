//! Many files per feed (issue 11, item 2) with the real `mongoose` binary: the ledger
//! on a glob feed of three files that are being appended to, killed with SIGKILL
//! several times and restarted; at the end every line of every file is applied exactly
//! once (one saved position per lane).

mod support;

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
    let lanes = std::fs::read_to_string(run.path("logs/lines.lanes")).expect("the registry");
    for name in FILES {
        assert!(lanes.contains(name), "{lanes}");
    }
}
