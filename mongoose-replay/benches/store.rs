//! Append and read throughput of the replay store, in entries per second, for Indexed
//! entries with a delivery (each one a delivery frame and an entry frame, written
//! together): appended with one write each, appended through a 64 KiB write buffer, and
//! read back from memory.

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use mongoose_core::{Delivery, Epoch, PositionValue};
use mongoose_replay::{Entry, Recording, ReplayStore};

const ENTRIES: u64 = 10_000;

fn entry(sequence: u64, feed: &Arc<str>) -> Entry {
    Entry::Indexed {
        feed: "lines".into(),
        sequence,
        route: "onLine".into(),
        delivery: Some(Delivery::new(
            Arc::clone(feed),
            sequence,
            Epoch(0x5eed),
            PositionValue::at(sequence * 64),
            0,
        )),
        clock: vec![1_700_000_000_000 + sequence as i64],
    }
}

fn store(c: &mut Criterion) {
    let feed: Arc<str> = Arc::from("lines");
    let entries: Vec<Entry> = (1..=ENTRIES)
        .map(|sequence| entry(sequence, &feed))
        .collect();
    let dir = tempfile::tempdir().expect("temp dir");

    let mut group = c.benchmark_group("replay_store");
    group.throughput(Throughput::Elements(ENTRIES));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));

    let mut run = 0u64;
    // 0: one write per append (the default); 64 KiB: whole appends buffered, flushed on drop
    for (name, write_buffer) in [
        ("append_indexed_with_delivery", 0usize),
        ("append_indexed_with_delivery_buffered_64k", 64 << 10),
    ] {
        group.bench_function(name, |b| {
            b.iter_batched(
                || {
                    run += 1;
                    let path = dir.path().join(format!("append-{run}.replay"));
                    let mut store = ReplayStore::open_for_record(&path).expect("store");
                    store.set_write_buffer(write_buffer).expect("buffer");
                    let stream = store.begin("pricer", None).expect("begin");
                    (path, store, stream)
                },
                |(path, mut store, stream)| {
                    for entry in &entries {
                        store.append(stream, entry).expect("append");
                    }
                    store.flush().expect("flush");
                    drop(store);
                    std::fs::remove_file(path).expect("remove");
                },
                BatchSize::PerIteration,
            )
        });
    }

    let path = dir.path().join("read.replay");
    let mut store = ReplayStore::open_for_record(&path).expect("store");
    let stream = store.begin("pricer", None).expect("begin");
    for entry in &entries {
        store.append(stream, entry).expect("append");
    }
    drop(store);
    let bytes = std::fs::read(&path).expect("read");
    group.bench_function("read_indexed_with_delivery", |b| {
        b.iter(|| {
            let recording = Recording::from_bytes(&bytes).expect("read");
            assert_eq!(recording.streams()[0].entries().len(), ENTRIES as usize);
            recording
        })
    });
    group.finish();
}

criterion_group!(benches, store);
criterion_main!(benches);
