//! Lines per second through the `mongoose` binary into a local HTTP server, one output
//! per POST against ndjson batches (issue 28, item 5).
//!
//! `cargo build --release -p mongoose && cargo run --release -p mongoose-sink --example
//! http_bench -- target/release/mongoose 100000 5 1 500` forwards 100,000 lines of
//! about 100 bytes from a file into a keep-alive HTTP server on loopback (the
//! testkit's scripted target in this process, a thread per connection, answering 200
//! at once), 5 runs for each `batch_max_lines` given (1 and 500), and prints each
//! run's lines/s (the binary's whole run, start-up included, to its settled exit) and
//! the median.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use mongoose_testkit::http_target::{Answer, HttpTarget, Request};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: http_bench MONGOOSE_BINARY LINES RUNS BATCH_MAX_LINES...";
    let binary = args.first().expect(usage).clone();
    let lines: usize = args.get(1).expect(usage).parse().expect("LINES: a number");
    let runs: usize = args.get(2).expect(usage).parse().expect("RUNS: a number");
    let batches: Vec<usize> = args[3..]
        .iter()
        .map(|batch| batch.parse().expect("BATCH_MAX_LINES: a number"))
        .collect();
    assert!(!batches.is_empty(), "{usage}");

    // counts each request's lines (a body without a line break is one), answers 200
    let received = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&received);
    let target = HttpTarget::builder()
        .keep_requests(false)
        .script(move |request: &Request| {
            let breaks = request.body.iter().filter(|byte| **byte == b'\n').count() as u64;
            counter.fetch_add(breaks.max(1), Ordering::SeqCst);
            Answer::Status(200)
        })
        .start();
    let url = target.url();

    let input: String = (0..lines)
        .map(|i| format!("{{\"seq\":{i:012},\"message\":\"{:-<64}\"}}\n", "x"))
        .collect();
    for batch in batches {
        let mut rates = Vec::new();
        for run in 0..runs {
            let folder = tempfile::tempdir().expect("a folder");
            std::fs::write(folder.path().join("input.txt"), &input).expect("input");
            std::fs::write(folder.path().join("mongoose.toml"), config(&url, batch))
                .expect("config");
            let before = received.load(Ordering::SeqCst);
            let started = Instant::now();
            let status = Command::new(&binary)
                .args(["run", "--exit-when-settled", "--config"])
                .arg(folder.path().join("mongoose.toml"))
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .status()
                .expect("the binary runs");
            let seconds = started.elapsed().as_secs_f64();
            assert!(status.success(), "the run failed: {status}");
            let got = received.load(Ordering::SeqCst) - before;
            assert_eq!(got, lines as u64, "every line arrived once");
            let rate = lines as f64 / seconds;
            println!("batch_max_lines {batch}: run {run}: {seconds:.2} s, {rate:.0} lines/s");
            rates.push(rate);
        }
        rates.sort_by(f64::total_cmp);
        println!(
            "batch_max_lines {batch}: median {:.0} lines/s (min {:.0}, max {:.0}) over {runs} runs of {lines} lines",
            rates[rates.len() / 2],
            rates[0],
            rates[rates.len() - 1]
        );
    }
}

fn config(url: &str, batch: usize) -> String {
    format!(
        r#"
[[feeds]]
name = "lines"
source = "file"
path = "input.txt"
read_strategy = "COMMITED"

[[sinks]]
name = "out"
kind = "http"
url = "{url}"
batch_max_lines = {batch}

[[groups]]
name = "forward"
[[groups.processors]]
name = "copy"
kind = "forward"
settings = {{ feed = "lines", sink = "out" }}
"#
    )
}
