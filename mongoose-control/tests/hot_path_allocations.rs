//! The group's side of the hot path: a feed's queue read through the group's erased
//! binding ([`mongoose_core::GroupReader`]), each item offered to its typed handlers
//! and called through the processor's [`ProcessorHost`], allocates nothing per item,
//! measured with a counting allocator. (The group's own loop runs on its thread; this
//! drives the same reader, offers and host on the test's thread.)

use std::sync::Arc;

use mongoose_control::{FeedSubscriptions, ProcessorHost};
use mongoose_core::engine::PendingCompletion;
use mongoose_core::{
    CoreError, Delivery, DispatchOutcome, Dispatcher, Epoch, ErasedHandler, GroupReader, Offer,
    Processor, ProcessorError, ProcessorId, RetryPolicy, SourceCommitter, SourceOutput,
    StartContext,
};
use mongoose_delivery::{AnyFeed, Feed, Publisher, SubscribeOptions};
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

#[derive(Default)]
struct Sum(u64);

impl Sum {
    fn on_number(&mut self, number: &u64) -> Result<(), ProcessorError> {
        self.0 += number;
        Ok(())
    }
}

impl Processor for Sum {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("numbers", Sum::on_number)
    }
}

/// The feed's group binding, made by the feed, with the processor's handler added.
struct Subscribe {
    feed: Arc<Publisher<u64, u64>>,
    reader: Option<Box<dyn GroupReader>>,
}

impl FeedSubscriptions for Subscribe {
    fn subscribe(&mut self, _feed: &str, handler: ErasedHandler) -> Result<(), ProcessorError> {
        let options = SubscribeOptions {
            capacity: None,
            retry: RetryPolicy::default(),
        };
        let subscription = AnyFeed::subscribe_group(&*self.feed, "group", options)
            .map_err(|error| ProcessorError::new(error.to_string()))?;
        let mut reader = subscription.reader.expect("the group's first subscription");
        reader.add(ProcessorId(1), handler)?;
        self.reader = Some(reader);
        Ok(())
    }
}

/// What the group does with an offer, through the processor's host.
struct Group<'a> {
    host: &'a mut ProcessorHost,
}

impl Dispatcher<dyn Offer + '_> for Group<'_> {
    fn dispatch(&mut self, offer: &(dyn Offer + '_), _attempt: u32) -> DispatchOutcome {
        for index in 0..offer.len() {
            if self
                .host
                .call_handler(offer, index, "numbers", None)
                .is_err()
            {
                return DispatchOutcome::Failed {
                    processor: Some(offer.processor(index)),
                    retry: false,
                };
            }
        }
        DispatchOutcome::Done
    }

    fn complete(&mut self, _: PendingCompletion, _: &Delivery) -> Result<(), ProcessorError> {
        Ok(())
    }
}

#[test]
fn offering_items_to_a_processor_through_its_host_allocates_nothing_per_item() {
    let feed = Feed::<u64, u64>::builder("numbers")
        .queue_capacity(1024)
        .build();
    feed.acknowledge_with(Box::new(Pointer(0)));
    feed.set_pause_by_default(true);
    let mut subscribe = Subscribe {
        feed: Arc::clone(&feed),
        reader: None,
    };
    let mut host = ProcessorHost::build(ProcessorId(1), "sum", Sum::default).expect("built");
    host.start(&mut subscribe, None).expect("started");
    let mut reader = subscribe.reader.expect("subscribed");
    feed.start_complete();
    let mut run = |host: &mut ProcessorHost, items: std::ops::Range<u64>| {
        for item in items {
            while !feed.try_publish(item, item).is_published() {
                reader.poll(&mut Group { host: &mut *host }, 256);
                feed.poll_acknowledgements();
            }
            if item % 256 == 0 {
                reader.poll(&mut Group { host: &mut *host }, 256);
                feed.poll_acknowledgements();
            }
        }
        reader.poll(&mut Group { host }, usize::MAX);
        feed.poll_acknowledgements();
    };
    // warm up
    run(&mut host, 0..10_000);
    let before = GLOBAL.allocations();
    run(&mut host, 10_000..1_010_000);
    let allocations = GLOBAL.allocations() - before;
    let total = (host.processor() as &dyn std::any::Any)
        .downcast_ref::<Sum>()
        .expect("a Sum")
        .0;
    assert_eq!(
        total,
        (0..1_010_000u64).sum::<u64>(),
        "every item handled once"
    );
    assert_eq!(feed.status().acknowledged, 1_010_000);
    assert_eq!(
        allocations, 0,
        "{allocations} allocations for 1,000,000 items"
    );
}
