#![allow(missing_docs)] // criterion_group! generates an undocumented item
//! Criterion micro-benchmarks of the delivery hot path on one thread: a batch of 1,024
//! positioned items published, dispatched and acknowledged, for 1 and 4 subscriber
//! queues, against a raw SPSC ring pass-through of the same batch. The cross-thread
//! pipeline figures come from `cargo mongoose-bench all` (examples/pipeline_bench.rs).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use mongoose_core::engine::PendingCompletion;
use mongoose_core::{CoreError, Delivery, Epoch, ProcessorError, SourceCommitter, SourceOutput};
use mongoose_delivery::{DispatchOutcome, Dispatcher, Feed, QueueReader, SubscribeOptions};

const BATCH: u64 = 1024;

struct NoOp;
impl SourceCommitter<u64> for NoOp {
    fn acknowledged(&mut self, _: u64, _: Epoch, _: u64) {}
    fn commit(&mut self) -> Result<(), CoreError> {
        Ok(())
    }
}

struct Count(u64);
impl Dispatcher<u64> for Count {
    fn dispatch(&mut self, item: &u64, _: u32) -> DispatchOutcome {
        self.0 = self.0.wrapping_add(*item);
        DispatchOutcome::Done
    }
    fn complete(&mut self, _: PendingCompletion, _: &Delivery) -> Result<(), ProcessorError> {
        Ok(())
    }
}

fn feed_with(
    queues: usize,
) -> (
    std::sync::Arc<mongoose_delivery::Publisher<u64, u64>>,
    Vec<QueueReader<u64>>,
) {
    let feed = Feed::<u64, u64>::builder("bench")
        .queue_capacity(4096)
        .build();
    feed.acknowledge_with(Box::new(NoOp));
    feed.set_pause_by_default(true);
    let readers = (0..queues)
        .map(|queue| {
            feed.subscribe(&format!("g{queue}"), SubscribeOptions::default())
                .expect("subscribed")
                .take_reader()
                .expect("reader")
        })
        .collect();
    feed.start_complete();
    (feed, readers)
}

fn delivery(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("delivery");
    group.throughput(Throughput::Elements(BATCH));
    for (queues, name) in [
        (1usize, "publish_dispatch_ack_1_queue"),
        (4, "publish_dispatch_ack_4_queue"),
    ] {
        let (feed, mut readers) = feed_with(queues);
        let mut count = Count(0);
        let mut next = 0u64;
        group.bench_function(name, |bench| {
            bench.iter(|| {
                for _ in 0..BATCH {
                    next += 1;
                    let _ = feed.try_publish(next, next);
                }
                for reader in readers.iter_mut() {
                    reader.poll(&mut count, BATCH as usize);
                }
                feed.poll_acknowledgements();
            })
        });
    }
    let (mut producer, mut consumer) = rtrb::RingBuffer::<u64>::new(4096);
    group.bench_function("raw_spsc_ring", |bench| {
        bench.iter(|| {
            for item in 0..BATCH {
                let _ = producer.push(item);
            }
            let mut sum = 0u64;
            while let Ok(item) = consumer.pop() {
                sum = sum.wrapping_add(item);
            }
            sum
        })
    });
    group.finish();
}

criterion_group!(benches, delivery);
criterion_main!(benches);
