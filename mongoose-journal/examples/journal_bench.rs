//! Append and tail throughput of the journal with 100-byte excerpts.
//!
//! ```text
//! cargo run -p mongoose-journal --release --example journal_bench -- [COUNT] [DIR]
//! ```
//!
//! COUNT defaults to 10,000,000; DIR to a fresh temporary directory (removed at the end).
//! Prints excerpts/s and MiB/s of payload for: appending, syncing, tailing the written
//! journal (checksums checked, as always), and a tailer thread reading while the appender
//! writes a second journal (skipped if `JOURNAL_BENCH_NO_CONCURRENT` is set).

#![allow(missing_docs)]

use std::hint::black_box;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use mongoose_journal::{Journal, JournalConfig};

const EXCERPT_BYTES: usize = 100;

fn main() {
    let mut arguments = std::env::args().skip(1);
    let count: u64 = arguments
        .next()
        .map(|count| count.replace('_', "").parse().expect("COUNT is a number"))
        .unwrap_or(10_000_000);
    let temporary = tempfile::tempdir().expect("a temporary directory");
    let base = arguments
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| temporary.path().to_path_buf());
    println!(
        "{count} excerpts of {EXCERPT_BYTES} bytes under {}",
        base.display()
    );

    let journal = Journal::open(base.join("sequential"), JournalConfig::default()).expect("open");
    let mut appender = journal.appender().expect("appender");
    let mut record = [0u8; EXCERPT_BYTES];
    let started = Instant::now();
    for index in 0..count {
        record[..8].copy_from_slice(&index.to_le_bytes());
        appender.append(&record).expect("append");
    }
    report("append", count, started.elapsed());
    let started = Instant::now();
    appender.sync().expect("sync");
    println!(
        "sync after the appends: {:.3} s",
        started.elapsed().as_secs_f64()
    );
    drop(appender);

    let passes: usize = std::env::var("JOURNAL_BENCH_TAIL_PASSES")
        .map(|passes| passes.parse().expect("a number of passes"))
        .unwrap_or(2);
    for pass in (0..passes).map(|pass| {
        if pass == 0 {
            "tail (first read)"
        } else {
            "tail (again)"
        }
    }) {
        let mut tailer = journal.tailer();
        let mut sum = 0u64;
        let started = Instant::now();
        while let Some(excerpt) = tailer.next().expect("read") {
            sum = sum.wrapping_add(u64::from(excerpt.bytes()[0]));
        }
        let elapsed = started.elapsed();
        assert_eq!(tailer.index(), count);
        black_box(sum);
        report(pass, count, elapsed);
    }

    if std::env::var_os("JOURNAL_BENCH_NO_CONCURRENT").is_none() {
        concurrent(&base.join("concurrent"), count);
    }
}

/// A tailer thread reads while the appender writes (sleeping 50 µs when it has caught
/// up).
fn concurrent(dir: &Path, count: u64) {
    let journal = Journal::open(dir, JournalConfig::default()).expect("open");
    let reader_journal = journal.clone();
    let reader = thread::spawn(move || {
        let mut tailer = reader_journal.tailer();
        let mut sum = 0u64;
        let mut started = None;
        while tailer.index() < count {
            if let Some(excerpt) = tailer.next().expect("read") {
                started.get_or_insert_with(Instant::now);
                sum = sum.wrapping_add(u64::from(excerpt.bytes()[0]));
            } else {
                // caught up: back off as a source's idle strategy would, rather than
                // spin on the cache line the appender is writing
                thread::sleep(Duration::from_micros(50));
            }
        }
        black_box(sum);
        started.map(|started| started.elapsed())
    });
    let mut appender = journal.appender().expect("appender");
    let record = [7u8; EXCERPT_BYTES];
    let started = Instant::now();
    for _ in 0..count {
        appender.append(&record).expect("append");
    }
    report("append (a tailer thread reading)", count, started.elapsed());
    let read = reader.join().expect("reader").unwrap_or_default();
    report("tail (while appending, first to last)", count, read);
}

fn report(what: &str, count: u64, elapsed: Duration) {
    let seconds = elapsed.as_secs_f64();
    println!(
        "{what:<40} {:>8.2} M excerpts/s {:>8.1} MiB/s ({seconds:.3} s)",
        count as f64 / seconds / 1e6,
        (count as f64 * EXCERPT_BYTES as f64) / seconds / (1 << 20) as f64,
    );
}
