//! The built-in `forward` kind with the file sink (issue 13), on the real `mongoose`
//! binary: a file copied line for line into another, the server killed with SIGKILL
//! at random points and restarted; at the end the output holds every input line
//! exactly once, in order.

use crate::support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mongoose_testkit::http_target::HttpTarget;
use support::LedgerRun;

fn input(lines: usize) -> String {
    (0..lines)
        .map(|index| format!("{index:08} {}\n", "x".repeat(index % 61)))
        .collect()
}

/// A small deterministic generator (xorshift), seeded from the clock and printed so a
/// failing run can be repeated.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn a_kill_at_any_point_of_a_forward_run_gives_every_output_line_exactly_once() {
    let lines = 600_000;
    let text = input(lines);
    let mut run = LedgerRun::new(&text, &support::forward_config("batch = 512"));
    run.log_filter = "warn,mongoose_server::cli=info,mongoose_sink=info";
    let seed = std::env::var("FORWARD_KILL_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |elapsed| elapsed.as_nanos() as u64 | 1)
        });
    eprintln!("FORWARD_KILL_SEED={seed}");
    let mut random = Random(seed);
    let mut kills = 0;
    for _ in 0..12 {
        let written = std::fs::metadata(run.path("out.txt")).map_or(0, |meta| meta.len());
        if written == text.len() as u64 {
            break;
        }
        let mut child = run.spawn(false);
        // killed at a random point: before it wrote anything more, or part way
        let pause = Duration::from_micros(random.next() % 60_000);
        run.wait_until(&mut child, "started", || {
            run.log().contains("sink started") || run.sink_state("out", "out.txt").exists()
        });
        std::thread::sleep(pause);
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
        kills += 1;
        let out = std::fs::read(run.path("out.txt")).unwrap_or_default();
        // what a killed run leaves is a prefix of the input, or a prefix plus a torn
        // tail the next start cuts off: never a line twice
        let whole = out.len() - out.iter().rev().take_while(|byte| **byte != b'\n').count();
        assert!(
            text.as_bytes().starts_with(&out[..whole]),
            "after kill {kills} the output is not a prefix of the input (seed {seed})"
        );
    }
    assert!(kills > 0);
    let (code, log) = run.finish_with_log();
    assert_eq!(
        code, 0,
        "the last run settled lossless (seed {seed}): {log}"
    );
    let out = std::fs::read_to_string(run.path("out.txt")).expect("output");
    assert_eq!(
        out.len(),
        text.len(),
        "every input line once in the output after {kills} kills (seed {seed})"
    );
    assert!(
        out == text,
        "the output equals the input line for line after {kills} kills (seed {seed})"
    );
}

#[test]
fn an_input_is_committed_only_after_its_outputs_are_published() {
    // the sink's file cannot be written (its folder is not writable by anybody: a
    // directory where the file should be), so nothing is ever published: the feed's
    // pointer must stay at the start, and the run must not settle
    let config =
        support::forward_config("batch = 512").replace("path = \"out.txt\"", "path = \"out/\"");
    let run = LedgerRun::new(&input(100), &config);
    std::fs::create_dir_all(run.path("out")).expect("a directory");
    let (code, log) = run.finish_with_log();
    assert_eq!(code, 2, "a sink on a directory is refused at start: {log}");

    // a sink whose writes fail: an HTTP sink toward a port nobody listens on, retried
    // forever (hold policy): the lines are read and handled, the outputs never
    // published, and the pointer never moves past the first line
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = listener.local_addr().expect("address").port();
    drop(listener);
    let config = support::forward_config("batch = 512").replace(
        "kind = \"file\"\npath = \"out.txt\"\nbatch = 512",
        &format!("kind = \"http\"\nurl = \"http://127.0.0.1:{port}/events\"\nmax_retries = 1000000\ninitial_backoff_millis = 1\nmax_backoff_millis = 5"),
    );
    let mut run = LedgerRun::new(&input(100), &config);
    run.log_filter = "warn,mongoose_server::cli=info,mongoose_sink=info";
    let mut child = run.spawn(false);
    run.wait_until(&mut child, "handled the lines", || {
        run.log().contains("sink started") && std::fs::metadata(run.pointer_path()).is_ok()
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        run.pointer(),
        0,
        "no line is committed while its output is not published"
    );
    // a server now listens: everything is published, then committed
    let server = HttpTarget::builder().port(port).start();
    let lines = input(100);
    run.wait_until(&mut child, "committed every line", || {
        run.pointer() == lines.len() as u64
    });
    assert_eq!(run.terminate(child), 0, "{}", run.log());
    assert_eq!(
        server.taken().len(),
        100,
        "each output posted once, and taken"
    );
    assert_eq!(server.requests().len(), 100);
}

/// Issue 13, item 3: the ledger admits its alerts with its state in its outbox. Run 1
/// applies every line (its state durable) while its alerts sink cannot publish (an
/// HTTP sink toward a closed port); it is killed with SIGKILL. Run 2, whose alerts
/// sink is a file, publishes the admitted alerts again under their keys at start (the
/// re-delivered lines are skipped by the ledger's guard and make no alert): every
/// alert is in the file exactly once.
#[test]
fn admitted_outputs_without_an_outcome_are_republished_with_the_same_key_after_a_crash() {
    let input: String = (0..40)
        .map(|index| format!("acc{},-1\n", index % 4))
        .collect();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = listener.local_addr().expect("address").port();
    drop(listener);
    let ledger = |sink: &str| {
        support::ledger_config(
            sink,
            "",
            "state_dir = \"state\", alerts_sink = \"alerts\", group_commit = true",
        )
    };
    let http = format!(
        "[[sinks]]\nname = \"alerts\"\nkind = \"http\"\nurl = \"http://127.0.0.1:{port}/alerts\"\nmax_retries = 1000000\ninitial_backoff_millis = 1\nmax_backoff_millis = 5\n"
    );
    let run = LedgerRun::new(&input, &ledger(&http));
    let mut child = run.spawn(false);
    run.wait_until(&mut child, "applied every line", || {
        run.path("state").exists() && run.state_in("state").applied == 40
    });
    // the alerts were never published: no line may be committed
    assert_eq!(
        run.pointer(),
        0,
        "a line whose alert is not published is not committed"
    );
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");

    std::fs::write(
        run.path("mongoose.toml"),
        ledger("[[sinks]]\nname = \"alerts\"\nkind = \"file\"\npath = \"alerts.txt\"\n"),
    )
    .expect("the second config");
    let (code, log) = run.finish_with_log();
    assert_eq!(code, 0, "settled lossless: {log}");
    assert!(log.is_empty() || !log.contains("ERROR"), "{log}");
    let alerts = std::fs::read_to_string(run.path("alerts.txt")).expect("alerts");
    let mut lines: Vec<&str> = alerts.lines().collect();
    assert_eq!(
        lines.len(),
        40,
        "every line made an alert, each written once: {alerts}"
    );
    lines.sort_unstable();
    lines.dedup();
    assert_eq!(lines.len(), 40, "no alert twice: {alerts}");
    assert_eq!(run.state_in("state").applied, 40, "no line applied twice");
}
