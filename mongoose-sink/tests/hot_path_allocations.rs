//! A processor's side of the sink path: a writer on a batching thread (a processor
//! group's) that makes each output with [`SinkWriter::write_with`] inside a delivery,
//! with a commit gate, allocates nothing per output once the first buffers went round
//! (the runner gives published outputs' buffers and emptied batches back), counted
//! with a counting allocator on every thread (the runner's included).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::batch_end;
use mongoose_core::engine;
use mongoose_core::sink::{CommitGate, Output, Sink, SinkOutcome};
use mongoose_core::{Delivery, Epoch, PositionValue};
use mongoose_sink::{RunnerConfig, SinkRunner, SinkWriter};
use mongoose_testkit::CountingAllocator;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator::new();

/// Publishes everything (its evidence allocates nothing).
struct Discard;

impl Sink for Discard {
    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
        outcomes.extend(outputs.iter().map(|_| SinkOutcome::Published {
            evidence: String::new(),
        }));
    }
}

/// Counts what is pending and over.
#[derive(Default)]
struct Gate {
    pending: AtomicU64,
    through: AtomicU64,
}

impl CommitGate for Gate {
    fn pending(&self, _tag: u64) {
        self.pending.fetch_add(1, Ordering::Relaxed);
    }
    fn complete(&self, tag: u64) {
        self.through.fetch_max(tag, Ordering::Relaxed);
    }
    fn complete_through(&self, tag: u64) {
        self.through.fetch_max(tag, Ordering::Relaxed);
    }
    fn held(&self, _tag: u64, _reason: &str) {}
}

const BATCH: u64 = 500;

/// One poll's worth: `BATCH` outputs, each in its own delivery, then the batch's end;
/// waits until the sink published them.
fn one_batch(writer: &mut SinkWriter, feed: &Arc<str>, gate: &Gate, first: u64) {
    let line = [b'x'; 100];
    for sequence in first..first + BATCH {
        let delivery = Delivery::new(
            Arc::clone(feed),
            sequence,
            Epoch(1),
            PositionValue {
                lane: 0,
                offset: sequence * 101,
            },
            0,
        );
        let _entered = engine::enter_delivery(&delivery);
        writer
            .write_with(|payload| payload.extend_from_slice(&line))
            .expect("taken");
    }
    batch_end::end_batch();
    let deadline = Instant::now() + Duration::from_secs(60);
    while gate.through.load(Ordering::Relaxed) < first + BATCH - 1 {
        assert!(
            Instant::now() < deadline,
            "the sink did not publish the batch"
        );
        std::thread::yield_now();
    }
}

#[test]
fn writing_outputs_on_a_batching_thread_allocates_nothing_per_output() {
    let runner = SinkRunner::start(Box::new(Discard), RunnerConfig::new("discard", "memory"))
        .expect("started");
    let gate = Arc::new(Gate::default());
    let source: Arc<dyn CommitGate> = gate.clone();
    let mut writer = SinkWriter::new(
        runner.handle(),
        Arc::new(move |_feed: &str| Some(Arc::clone(&source))),
    );
    let feed: Arc<str> = Arc::from("lines");
    let _batching = batch_end::batching();
    // the first batches make the buffers, the runner's queues and the channel's blocks
    let mut next = 1;
    for _ in 0..20 {
        one_batch(&mut writer, &feed, &gate, next);
        next += BATCH;
    }
    let batches = 40;
    let before = GLOBAL.allocations();
    for _ in 0..batches {
        one_batch(&mut writer, &feed, &gate, next);
        next += BATCH;
    }
    let allocations = GLOBAL.allocations() - before;
    let outputs = batches * BATCH;
    // a hand-off may allocate (the channel's block, every 31 batches); an output not
    assert!(
        allocations <= 2 * batches as usize,
        "{allocations} allocations for {outputs} outputs in {batches} batches: an output allocates"
    );
    assert_eq!(gate.pending.load(Ordering::Relaxed), next - 1);
    drop(writer);
    assert_eq!(
        runner
            .stop(Instant::now() + Duration::from_secs(30))
            .published,
        next - 1
    );
}
