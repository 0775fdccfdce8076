//! Append and tail throughput of 100-byte excerpts (criterion). Figures for 10 M
//! excerpts: `cargo run -p mongoose-journal --release --example journal_bench`.

#![allow(missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mongoose_journal::{Journal, JournalConfig};

const EXCERPT_BYTES: usize = 100;
/// Excerpts per measured batch: one journal of 100 MB.
const BATCH: u64 = 1_000_000;

fn append(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("journal");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(BATCH));
    group.bench_function(BenchmarkId::new("append_100_bytes", BATCH), |bencher| {
        let record = [7u8; EXCERPT_BYTES];
        bencher.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                // a fresh journal each batch, so the disk use stays one batch
                let dir = tempfile::tempdir().expect("dir");
                let started = Instant::now();
                let journal = Journal::open(dir.path(), JournalConfig::default()).expect("open");
                let mut appender = journal.appender().expect("appender");
                for _ in 0..BATCH {
                    black_box(appender.append(&record).expect("append"));
                }
                total += started.elapsed();
            }
            total
        });
    });
    group.finish();
}

fn tail(criterion: &mut Criterion) {
    let dir = tempfile::tempdir().expect("dir");
    let journal = Journal::open(dir.path(), JournalConfig::default()).expect("open");
    {
        let mut appender = journal.appender().expect("appender");
        let record = [7u8; EXCERPT_BYTES];
        for _ in 0..BATCH {
            appender.append(&record).expect("append");
        }
    }
    let mut group = criterion.benchmark_group("journal");
    group.sample_size(20);
    group.throughput(Throughput::Elements(BATCH));
    group.bench_function(BenchmarkId::new("tail_100_bytes", BATCH), |bencher| {
        bencher.iter(|| {
            let mut tailer = journal.tailer();
            let mut sum = 0u64;
            while let Some(excerpt) = tailer.next().expect("read") {
                sum = sum.wrapping_add(u64::from(excerpt.bytes()[0]));
            }
            assert_eq!(tailer.index(), BATCH);
            black_box(sum)
        });
    });
    group.finish();
}

criterion_group!(benches, append, tail);
criterion_main!(benches);
