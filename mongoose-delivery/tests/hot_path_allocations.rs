//! The hot path (publish, dispatch, acknowledgement) of a positioned feed allocates
//! nothing per item, with one subscriber and with a fan-out to two, measured with a
//! counting allocator.

mod support;

use mongoose_core::engine::PendingCompletion;
use mongoose_core::{CoreError, Delivery, Epoch, ProcessorError, SourceCommitter, SourceOutput};
use mongoose_delivery::{DispatchOutcome, Dispatcher, Feed};
use mongoose_testkit::CountingAllocator;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator::new();

struct Pointer(u64);
impl SourceCommitter<u64> for Pointer {
    fn acknowledged(&mut self, _: u64, _: Epoch, position: u64) {
        self.0 = position;
    }
    fn commit(&mut self) -> Result<(), CoreError> {
        Ok(())
    }
}

struct Count(u64);
impl Dispatcher<u64> for Count {
    fn dispatch(&mut self, item: &u64, _: u32) -> DispatchOutcome {
        self.0 += item;
        DispatchOutcome::Done
    }
    fn complete(&mut self, _: PendingCompletion, _: &Delivery) -> Result<(), ProcessorError> {
        Ok(())
    }
}

fn number_text(_: &u64) -> &[u8] {
    b"a number"
}

#[test]
fn publishing_dispatching_and_acknowledging_allocate_nothing_per_item() {
    let feed = Feed::<u64, u64>::builder("numbers")
        .queue_capacity(1024)
        .build();
    feed.acknowledge_with(Box::new(Pointer(0)));
    feed.set_pause_by_default(true);
    let mut reader = support::reader(&feed, "group");
    feed.start_complete();
    let mut count = Count(0);
    let mut run = |items: std::ops::Range<u64>| {
        for item in items {
            while !feed.try_publish(item, item).is_published() {
                reader.poll(&mut count, 256);
                feed.poll_acknowledgements();
            }
            if item % 256 == 0 {
                reader.poll(&mut count, 256);
                feed.poll_acknowledgements();
            }
        }
        reader.poll(&mut count, usize::MAX);
        feed.poll_acknowledgements();
    };
    // warm up: the window and scratch buffers reach their working size
    run(0..100_000);
    let before = GLOBAL.allocations();
    run(100_000..1_100_000);
    let allocations = GLOBAL.allocations() - before;
    assert_eq!(
        allocations, 0,
        "{allocations} allocations for 1,000,000 items"
    );

    // an operator's tap that does not keep up (it holds one record and is never
    // read): the feed goes on, the tap drops and counts, and a full tap makes no
    // record, so the hot path still allocates nothing per item
    feed.set_tap_text(number_text);
    let tap = feed.attach_tap(1).expect("a tap");
    let before = GLOBAL.allocations();
    run(1_100_000..2_100_000);
    let allocations = GLOBAL.allocations() - before;
    eprintln!("a full tap attached: {allocations} allocations for 1,000,000 items");
    assert_eq!(
        tap.dropped(),
        999_999,
        "every item but the first dropped from the tap"
    );
    assert_eq!(
        tap.try_recv().map(|record| record.sequence),
        Some(1_100_001)
    );
    assert!(
        allocations <= 2,
        "{allocations} allocations for 1,000,000 items with a full tap attached (one record)"
    );
    // detached: back to one relaxed load per item
    drop(tap);
    let before = GLOBAL.allocations();
    run(2_100_000..3_100_000);
    let allocations = GLOBAL.allocations() - before;
    assert_eq!(
        allocations, 0,
        "{allocations} allocations for 1,000,000 items after the tap was detached"
    );
    assert!(count.0 > 0);

    // the same through batches (the publisher's chunked fast path) and chunked reads
    let mut batches = |items: std::ops::Range<u64>| {
        let mut next = items.start;
        while next < items.end {
            let end = (next + 100).min(items.end);
            let mut produce = || {
                (next < end).then(|| {
                    next += 1;
                    (next - 1, next - 1)
                })
            };
            let _ = feed.try_publish_batch(&mut produce);
            reader.poll(&mut count, 512);
            feed.poll_acknowledgements();
        }
        reader.poll(&mut count, usize::MAX);
        feed.poll_acknowledgements();
    };
    batches(3_100_000..3_200_000);
    let before = GLOBAL.allocations();
    batches(3_200_000..4_200_000);
    let allocations = GLOBAL.allocations() - before;
    assert_eq!(feed.status().acknowledged, 4_200_000);
    assert_eq!(
        allocations, 0,
        "{allocations} allocations for 1,000,000 items published in batches"
    );

    // a fan-out to two queues shares each item behind a pooled Arc, reused once both
    // queues released it (the Java original pools its references)
    let fan = Feed::<u64, u64>::builder("fan").queue_capacity(256).build();
    fan.acknowledge_with(Box::new(Pointer(0)));
    fan.set_pause_by_default(true);
    let mut readers: Vec<_> = ["left", "right"]
        .iter()
        .map(|group| support::reader(&fan, group))
        .collect();
    fan.start_complete();
    let mut fan_out = |items: std::ops::Range<u64>| {
        for item in items {
            while !fan.try_publish(item, item).is_published() {
                for reader in readers.iter_mut() {
                    reader.poll(&mut count, 64);
                }
                fan.poll_acknowledgements();
            }
            // the source's duty cycle commits regularly, as in the phases above: the
            // acknowledgement scratch reaches its working size in the warm-up
            if item % 64 == 0 {
                for reader in readers.iter_mut() {
                    reader.poll(&mut count, 64);
                }
                fan.poll_acknowledgements();
            }
        }
        for reader in readers.iter_mut() {
            reader.poll(&mut count, usize::MAX);
        }
        fan.poll_acknowledgements();
    };
    fan_out(0..100_000);
    let before = GLOBAL.allocations();
    fan_out(100_000..1_100_000);
    let allocations = GLOBAL.allocations() - before;
    assert_eq!(fan.status().acknowledged, 1_100_000);
    assert_eq!(
        allocations, 0,
        "{allocations} allocations for 1,000,000 items fanned out to two queues"
    );
}
