//! The whole server on the ledger, for `cargo mongoose-bench all`: a COMMITED file feed of
//! `account,amount` lines through the ledger, its state saved per delivery into its
//! outbox without fsync, then with fsync in groups (group commit); and the cost of one
//! state save with and without an fsync of its own.
//!
//! `cargo run --release -p mongoose --example ledger_bench -- [--size-mib N]`

/// The same allocator as the mongoose binary, so the figures are the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use mongoose::kinds as ledger_kind;

use mongoose_ledger::LedgerState;
use mongoose_server::config::ServerConfig;
use mongoose_server::Server;

fn main() {
    let arguments: Vec<String> = std::env::args().collect();
    let size_mib: u64 = arguments
        .iter()
        .position(|argument| argument == "--size-mib")
        .and_then(|index| arguments.get(index + 1))
        .and_then(|value| value.parse().ok())
        .unwrap_or(64);
    let dir = tempfile_dir();
    let input = dir.join("input.txt");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&input).expect("input"));
    let mut written = 0u64;
    let mut lines = 0u64;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    while written < size_mib * 1024 * 1024 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let line = format!("acct-{},{}\n", seed % 1_000, (seed >> 20) % 2_001);
        file.write_all(line.as_bytes()).expect("write");
        written += line.len() as u64;
        lines += 1;
    }
    file.flush().expect("flush");
    drop(file);
    let mut state = LedgerState::default();
    let mut rates = [0.0f64; 2];
    for sync in [false, true] {
        // a fresh state and pointer for each run
        let _ = std::fs::remove_dir_all(dir.join("state"));
        let _ = std::fs::remove_dir_all(dir.join("data"));
        let config = ServerConfig::parse(
            &format!(
                r#"
[[feeds]]
name = "lines"
source = "file"
path = "input.txt"
[[groups]]
name = "ledger"
idle_strategy = "busy-spin"
[[groups.processors]]
name = "ledger"
kind = "ledger"
settings = {{ state_dir = "state", alerts = "alerts.txt", sync = {sync} }}
"#
            ),
            &dir,
        )
        .expect("config");
        let server = ledger_kind::register(Server::builder(config))
            .build()
            .expect("built");
        let started = Instant::now();
        server.start().expect("started");
        while !server.status().settled {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let elapsed = started.elapsed().as_secs_f64();
        assert!(server.shutdown().complete);
        state = LedgerState::load(&dir.join("state")).expect("state");
        assert_eq!(state.applied, lines, "every line applied once");
        println!(
            "ledger server, {size_mib} MiB input ({lines} lines), one outbox record per delivery, {}",
            if sync {
                "fsync'd in groups (group commit: the feed commits a line once its record is durable)"
            } else {
                "no fsync"
            }
        );
        rates[usize::from(sync)] = lines as f64 / elapsed;
        println!(
            "  {:.0} lines/s, {:.1} MiB/s, {:.2} s",
            lines as f64 / elapsed,
            size_mib as f64 / elapsed,
            elapsed
        );
    }
    // the lines the lead greps (issue 29, goal 4)
    println!(
        "ledger, fsync'd group commit: {} lines/s (goal 1,000,000: {}; without fsync: {} lines/s)",
        thousands(rates[1] as u64),
        if rates[1] >= 1e6 { "met" } else { "not met" },
        thousands(rates[0] as u64)
    );
    // the per-delivery save is one journal record appended in one write
    let record = format!(
        "{:08x} {{\"account\":[\"acct-1\",-42],\"applied\":{},\"rejected\":0,\"epoch\":1,\"position\":{}}}\n",
        0, state.applied, state.position
    );
    let mut journal = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("bench-journal.log"))
        .expect("journal");
    for sync in [false, true] {
        let appends = if sync { 200 } else { 20_000 };
        let started = Instant::now();
        for _ in 0..appends {
            journal.write_all(record.as_bytes()).expect("append");
            if sync {
                journal.sync_data().expect("sync");
            }
        }
        let each = started.elapsed().as_secs_f64() / appends as f64 * 1e6;
        println!(
            "  the save per delivery (one {}-byte journal record{}): {each:.1} us",
            record.len(),
            if sync { " + fsync" } else { "" }
        );
    }
    for sync in [false, true] {
        let saves = if sync { 50 } else { 500 };
        let started = Instant::now();
        for _ in 0..saves {
            state.save(&dir.join("state"), sync).expect("save");
        }
        let each = started.elapsed().as_secs_f64() / saves as f64 * 1e6;
        println!(
            "  a snapshot every 100,000 records ({} accounts{}): {each:.1} us",
            state.balances.len(),
            if sync {
                ", fsync + rename + fsync dir"
            } else {
                ", rename"
            }
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
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

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mongoose-ledger-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("bench folder");
    let _ = Path::new(&dir).exists();
    dir
}
