//! The group side of the hot path, single-threaded: N positioned items read from a
//! feed's queue through the group's binding ([`mongoose_core::GroupReader`]), each
//! offered to a processor's typed handler and called through its [`ProcessorHost`].
//! Deterministic, for an instruction count:
//!
//! ```text
//! cargo build --release -p mongoose-control --example group_dispatch_bench
//! valgrind --tool=callgrind target/release/examples/group_dispatch_bench 1000000
//! ```

use std::sync::Arc;

use mongoose_control::{FeedSubscriptions, ProcessorHost};
use mongoose_core::engine::PendingCompletion;
use mongoose_core::{
    CoreError, Delivery, DispatchOutcome, Dispatcher, Epoch, ErasedHandler, GroupReader, Offer,
    Processor, ProcessorError, ProcessorId, RetryPolicy, SourceCommitter, SourceOutput,
    StartContext,
};
use mongoose_delivery::{AnyFeed, Feed, Publisher, SubscribeOptions};

struct Pointer;
impl SourceCommitter<u64> for Pointer {
    fn acknowledged(&mut self, _: u64, _: Epoch, _: u64) {}
    fn commit(&mut self) -> Result<(), CoreError> {
        Ok(())
    }
}

#[derive(Default)]
struct Sum(u64);

impl Sum {
    fn on_number(&mut self, number: &u64) -> Result<(), ProcessorError> {
        self.0 = self.0.wrapping_add(*number);
        Ok(())
    }
}

impl Processor for Sum {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("numbers", Sum::on_number)
    }
}

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
        let mut reader = subscription.reader.expect("the first subscription");
        reader.add(ProcessorId(1), handler)?;
        self.reader = Some(reader);
        Ok(())
    }
}

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

fn main() {
    let items: u64 = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let feed = Feed::<u64, u64>::builder("numbers")
        .queue_capacity(1024)
        .build();
    feed.acknowledge_with(Box::new(Pointer));
    feed.set_pause_by_default(true);
    let mut subscribe = Subscribe {
        feed: Arc::clone(&feed),
        reader: None,
    };
    let mut host = ProcessorHost::build(ProcessorId(1), "sum", Sum::default).expect("built");
    host.start(&mut subscribe, None).expect("started");
    let mut reader = subscribe.reader.expect("subscribed");
    feed.start_complete();
    let started = std::time::Instant::now();
    for item in 0..items {
        while !feed.try_publish(item, item).is_published() {
            reader.poll(&mut Group { host: &mut host }, 256);
            feed.poll_acknowledgements();
        }
    }
    reader.poll(&mut Group { host: &mut host }, usize::MAX);
    feed.poll_acknowledgements();
    let sum = (host.processor() as &dyn std::any::Any)
        .downcast_ref::<Sum>()
        .expect("a Sum")
        .0;
    let elapsed = started.elapsed();
    println!(
        "group dispatch: {items} items in {:.3} s = {:.1} M items/s (sum {sum})",
        elapsed.as_secs_f64(),
        items as f64 / elapsed.as_secs_f64() / 1e6
    );
}
