//! Control requests per second (add+stop pairs on one group) and the dispatch cost per
//! event of a group with 1 and 8 processors on one delivery feed.
#![allow(missing_docs)] // criterion_group! generates an undocumented function

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mongoose_control::memory::MemoryFeeds;
use mongoose_control::{ControlConfig, ControlPlane, DeliveryFeeds, GroupOptions, IdleStrategy};
use mongoose_core::{Processor, ProcessorError, SourceOutput, StartContext};
use mongoose_delivery::{Feed, FeedRegistry, Publisher};

const WAIT: Duration = Duration::from_secs(30);

struct Idle;
impl Processor for Idle {}

struct Counting {
    seen: Arc<AtomicU64>,
}

impl Counting {
    fn on_number(&mut self, _n: &u64) -> Result<(), ProcessorError> {
        self.seen.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl Processor for Counting {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("numbers", Counting::on_number)
    }
}

fn add_stop_pairs(c: &mut Criterion) {
    let plane = ControlPlane::new(
        ControlConfig {
            idle: IdleStrategy::Yield,
            ..ControlConfig::default()
        },
        Arc::new(MemoryFeeds::default()),
    );
    let mut group = c.benchmark_group("control");
    group.throughput(Throughput::Elements(1));
    group.bench_function("add_stop_pair", |b| {
        b.iter(|| {
            let added = plane.add_processor("bench", "p", || Idle);
            added.reply.wait_for(WAIT).expect("added");
            let handle = added.handle.expect("admitted");
            plane
                .stop_processor(&handle)
                .wait_for(WAIT)
                .expect("stopped");
        })
    });
    group.finish();
}

fn dispatch_per_event(c: &mut Criterion) {
    const BATCH: u64 = 1024;
    let mut group = c.benchmark_group("dispatch_per_event");
    group.throughput(Throughput::Elements(BATCH));
    for processors in [1u64, 8] {
        let feeds = DeliveryFeeds::new(FeedRegistry::default());
        let numbers: Arc<Publisher<u64, u64>> = Feed::builder("numbers")
            .queue_capacity(4 * BATCH as usize)
            .build();
        feeds.register(Arc::clone(&numbers)).expect("registered");
        numbers.start_complete();
        let plane = ControlPlane::new(ControlConfig::default(), Arc::new(feeds));
        plane
            .create_group(
                "bench",
                GroupOptions {
                    idle: IdleStrategy::Yield,
                    ..GroupOptions::default()
                },
            )
            .expect("group");
        let seen = Arc::new(AtomicU64::new(0));
        for index in 0..processors {
            let seen = Arc::clone(&seen);
            plane
                .add_processor("bench", &format!("p{index}"), move || Counting { seen })
                .reply
                .wait_for(WAIT)
                .expect("added");
        }
        let mut expected = 0;
        group.bench_with_input(
            BenchmarkId::from_parameter(format!("{processors}_processors")),
            &processors,
            |b, processors| {
                b.iter(|| {
                    for item in 0..BATCH {
                        numbers.publish(item).expect("published");
                    }
                    expected += BATCH * processors;
                    let deadline = Instant::now() + WAIT;
                    while seen.load(Ordering::Relaxed) < expected && Instant::now() < deadline {
                        std::hint::spin_loop();
                    }
                })
            },
        );
        let _ = plane.close_groups(Instant::now() + WAIT);
    }
    group.finish();
}

criterion_group!(benches, add_stop_pairs, dispatch_per_event);
criterion_main!(benches);
