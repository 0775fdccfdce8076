//! The whole server on the `aggregate` processor kind, for `cargo mongoose-bench all` (issue
//! 40's goal): a file feed of lines through an aggregate of 3 sums by key with durable
//! state (its outbox fsync'd in groups, as the ledger's), over CSV and over JSON, against
//! the ledger on the same keys and amounts (`account,a`: the ledger reads one amount).
//!
//! `cargo run --release -p mongoose --example aggregate_bench -- [--size-mib N]
//! [--rounds R]` (N MiB of the CSV lines, default 64; the JSON and ledger inputs hold
//! the same number of lines). The three run in turn, R rounds (default 3), and the
//! ratios are of the medians: on a shared machine one pass can take twice another.

/// The same allocator as the mongoose binary, so the figures are the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use mongoose_server::config::ServerConfig;
use mongoose_server::Server;

/// The aggregate's settings: 3 sums by account (CSV, or JSON at the same names).
const CSV: &str = r#"format = "csv"
columns = ["account", "a", "b", "c"]"#;
const JSON: &str = r#"format = "json""#;
const COMMON: &str = r#"fields = { account = "string", a = "integer", b = "integer", c = "integer" }
group_by = ["account"]
aggregates = { sa = "sum(a)", sb = "sum(b)", sc = "sum(c)" }"#;

fn main() {
    let arguments: Vec<String> = std::env::args().collect();
    let size_mib: u64 = arguments
        .iter()
        .position(|argument| argument == "--size-mib")
        .and_then(|index| arguments.get(index + 1))
        .and_then(|value| value.parse().ok())
        .unwrap_or(64);
    let rounds: usize = arguments
        .iter()
        .position(|argument| argument == "--rounds")
        .and_then(|index| arguments.get(index + 1))
        .and_then(|value| value.parse().ok())
        .unwrap_or(3)
        .max(1);
    let dir = bench_dir();
    let lines = write_inputs(&dir, size_mib);
    let mut rates: [Vec<f64>; 3] = Default::default();
    for _ in 0..rounds {
        rates[0].push(run(
            &dir,
            "ledger.txt",
            &ledger_processor(),
            lines,
            "ledger",
        ));
        let csv = aggregate_processor(CSV);
        rates[1].push(run(&dir, "csv.txt", &csv, lines, "aggregate csv"));
        let json = aggregate_processor(JSON);
        rates[2].push(run(&dir, "json.txt", &json, lines, "aggregate json"));
    }
    let [ledger, csv, json] = rates.map(median);
    // the lines the lead greps (issue 40's performance goals), medians of the rounds
    for (name, rate, goal) in [("csv", csv, 80.0), ("json", json, 50.0)] {
        println!(
            "aggregate {name}: {} lines/s ({:.0}% of the ledger's {} lines/s; goal >= {goal:.0}%)",
            thousands(rate as u64),
            rate / ledger * 100.0,
            thousands(ledger as u64)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes the three inputs (the same keys and amounts); how many lines each holds.
fn write_inputs(dir: &Path, size_mib: u64) -> u64 {
    let open = |name: &str| {
        std::io::BufWriter::new(std::fs::File::create(dir.join(name)).expect("an input"))
    };
    let (mut csv, mut json, mut ledger) = (open("csv.txt"), open("json.txt"), open("ledger.txt"));
    let mut written = 0u64;
    let mut lines = 0u64;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    while written < size_mib * 1024 * 1024 {
        let account = next() % 1_000;
        let mut amount = || (next() % 20_001) as i64 - 10_000;
        let (a, b, c) = (amount(), amount(), amount());
        let line = format!("acct-{account},{a},{b},{c}\n");
        csv.write_all(line.as_bytes()).expect("write");
        writeln!(
            json,
            r#"{{"account":"acct-{account}","a":{a},"b":{b},"c":{c}}}"#
        )
        .expect("write");
        writeln!(ledger, "acct-{account},{a}").expect("write");
        written += line.len() as u64;
        lines += 1;
    }
    // on disk before the first round: the runs' fsyncs must not wait for the inputs'
    // writeback (the first round ran at a third of the last one's pace without this)
    for mut file in [csv, json, ledger] {
        file.flush().expect("flush");
        file.get_ref().sync_all().expect("sync");
    }
    lines
}

fn ledger_processor() -> String {
    r#"kind = "ledger"
settings = { state_dir = "state", alerts = "alerts.txt", sync = true }"#
        .to_owned()
}

fn aggregate_processor(format: &str) -> String {
    format!(
        "kind = \"aggregate\"\n[groups.processors.settings]\nfeed = \"lines\"\nstate_dir = \"state\"\n{format}\n{COMMON}\n"
    )
}

/// Runs the server over `input` with `processor` until settled; its lines/s.
fn run(dir: &Path, input: &str, processor: &str, lines: u64, name: &str) -> f64 {
    // a fresh state and pointer for each run
    let _ = std::fs::remove_dir_all(dir.join("state"));
    let _ = std::fs::remove_dir_all(dir.join("data"));
    let config = ServerConfig::parse(
        &format!(
            r#"
[[feeds]]
name = "lines"
source = "file"
path = "{input}"
[[groups]]
name = "bench"
idle_strategy = "busy-spin"
[[groups.processors]]
name = "bench"
{processor}
"#
        ),
        dir,
    )
    .expect("config");
    let server = mongoose::kinds::register(Server::builder(config))
        .build()
        .expect("built");
    let started = Instant::now();
    server.start().expect("started");
    while !server.status().settled {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert!(server.shutdown().complete);
    let rate = lines as f64 / elapsed;
    println!(
        "  {name}: {lines} lines in {elapsed:.2} s, {} lines/s (state fsync'd in groups)",
        thousands(rate as u64)
    );
    rate
}

/// The median of `values` (the upper one of an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `value` with a comma between each group of three digits.
fn thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut grouped = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    grouped
}

fn bench_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mongoose-aggregate-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("bench folder");
    dir
}
