//! Issue 38.1: how long a ledger restart takes against the log it must replay, with the
//! release `mongoose` binary (real processes): for a log of about 60 MB, 180 MB and
//! 1,000,000 records after the last snapshot, the time from the start of
//! `mongoose run` to the moment a line appended before it is processed (its pointer
//! committed), and the same for the restart after that one. Medians of `--runs` (3).
//!
//! `cargo run --release -p mongoose --example ledger_recovery_bench -- [--bin PATH] [--compare PATH] [--runs N]`
//!
//! `--bin` measures another build (the default: the `mongoose` beside this example,
//! `target/release/mongoose`); `--compare` measures a second one on the same logs (an
//! earlier build, for a before and after). Each log is written anew before each
//! measured start (a copy of the folder would be another input: the file's identity is
//! its inode), by `--bin` with bounds no run reaches (so no snapshot).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A small deterministic random source (xorshift64*).
struct Random(u64);

impl Random {
    fn between(&mut self, low: u64, high: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        low + self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % (high - low + 1)
    }
}

/// `count` ledger lines as the crash-loop test writes them: 10,000 accounts, about one
/// line in 60 an alert-making -200.
fn lines(random: &mut Random, count: u64) -> String {
    let mut text = String::with_capacity(count as usize * 12);
    for _ in 0..count {
        let account = random.between(0, 9_999);
        let amount = if random.between(0, 59) == 0 {
            -200
        } else {
            random.between(1, 9) as i64
        };
        text.push_str(&format!("acc{account},{amount}\n"));
    }
    text
}

fn config(settings: &str) -> String {
    format!(
        r#"[[feeds]]
name = "lines"
source = "file"
path = "input.txt"
read_strategy = "COMMITED"
[[groups]]
name = "ledger"
idle_strategy = "sleeping-millis:1"
[[groups.processors]]
name = "ledger"
kind = "ledger"
settings = {{ state_dir = "state", alerts = "alerts.txt"{settings} }}
"#
    )
}

/// Runs `bin` on `dir` until settled.
fn settle(bin: &Path, dir: &Path) {
    let status = Command::new(bin)
        .args(["run", "--config", "mongoose.toml", "--exit-when-settled"])
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .status()
        .expect("mongoose runs");
    assert!(status.success(), "the run that writes the log failed");
}

/// The feed's pointer file under `dir`.
fn pointer_file(dir: &Path) -> Option<PathBuf> {
    fn walk(dir: &Path) -> Option<PathBuf> {
        for entry in std::fs::read_dir(dir).ok()?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if let Some(found) = walk(&path) {
                    return Some(found);
                }
            } else if path.to_string_lossy().ends_with(".readPointer") {
                return Some(path);
            }
        }
        None
    }
    walk(&dir.join("data"))
}

fn committed(dir: &Path) -> u64 {
    pointer_file(dir)
        .and_then(|path| std::fs::read(path).ok())
        .and_then(|bytes| Some(u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?)))
        .unwrap_or(0)
}

/// Appends a line, starts `bin`, and returns how long until that line is committed
/// (then kills the run).
fn restart(bin: &Path, dir: &Path) -> Duration {
    let mut input = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("input.txt"))
        .expect("input");
    input.write_all(b"acc1,1\n").expect("append");
    let end = input.metadata().expect("input").len();
    let started = Instant::now();
    let mut child = Command::new(bin)
        .args(["run", "--config", "mongoose.toml"])
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("mongoose runs");
    while committed(dir) < end {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "no progress in 10 minutes"
        );
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the run ended by itself: {status}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let took = started.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    took
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let arguments: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        arguments
            .iter()
            .position(|argument| argument == name)
            .and_then(|index| arguments.get(index + 1))
            .cloned()
    };
    let bin = value("--bin").map(PathBuf::from).unwrap_or_else(|| {
        let example = std::env::current_exe().expect("this example");
        example
            .parent()
            .and_then(Path::parent)
            .expect("target/release")
            .join("mongoose")
    });
    let mut bins = vec![bin];
    bins.extend(value("--compare").map(PathBuf::from));
    let runs: usize = value("--runs")
        .and_then(|runs| runs.parse().ok())
        .unwrap_or(3);
    let root = std::env::temp_dir().join(format!("mongoose-recovery-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("bench folder");
    println!("ledger restart against the log since the snapshot");
    // 1,000,000 records of this input are about 172 MB of outbox
    for (what, records) in [
        ("~60 MB", 350_000u64),
        ("1,000,000 records", 1_000_000),
        ("~180 MB", 1_050_000),
    ] {
        for bin in &bins {
            let (mut first, mut second) = (Vec::new(), Vec::new());
            let mut found = (0, 0);
            for run in 0..runs {
                let dir = root.join(format!("run-{records}-{run}"));
                std::fs::create_dir_all(&dir).expect("folder");
                let mut random = Random(0x5eed_0038_0001);
                std::fs::write(dir.join("input.txt"), lines(&mut random, records)).expect("input");
                std::fs::write(
                    dir.join("mongoose.toml"),
                    config(", compact_every = 1000000000000, snapshot_bytes = 1000000000000000, snapshot_every_secs = 1000000000"),
                )
                .expect("config");
                settle(&bins[0], &dir);
                let recovery = mongoose_outbox::read(&dir.join("state/outbox")).expect("outbox");
                found = (recovery.last_seq, recovery.since_saved.bytes);
                std::fs::write(dir.join("mongoose.toml"), config("")).expect("config");
                first.push(restart(bin, &dir).as_secs_f64());
                second.push(restart(bin, &dir).as_secs_f64());
                let _ = std::fs::remove_dir_all(&dir);
            }
            println!(
                "  {what} ({}): {} records, {:.0} MB after the snapshot: the restart processes again after {:.2} s (median of {runs}: {first:.2?}), the restart after it {:.2} s ({second:.2?})",
                bin.display(),
                found.0,
                found.1 as f64 / 1e6,
                median(first.clone()),
                median(second.clone()),
            );
        }
    }
    let _ = std::fs::remove_dir_all(&root);
}
