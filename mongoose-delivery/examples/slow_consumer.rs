//! A positioned feed with a slow consumer: the source pauses instead of dropping, the
//! committed position follows what was processed, and the feed status says so.
//!
//! `cargo run --release -p mongoose-delivery --example slow_consumer`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mongoose_core::engine::PendingCompletion;
use mongoose_core::{
    CoreError, Delivery, DeliveryContext, Epoch, ProcessorError, SourceCommitter, SourceOutput,
    SourceState, TryPublish,
};
use mongoose_delivery::{DispatchOutcome, Dispatcher, Feed, StatusReport, SubscribeOptions};

const ITEMS: u64 = 20_000;

/// Commits into a shared "pointer" (a real source writes a file or a broker offset).
struct Pointer {
    acknowledged: u64,
    committed: Arc<AtomicU64>,
}

impl SourceCommitter<u64> for Pointer {
    fn acknowledged(&mut self, _sequence: u64, _epoch: Epoch, position: u64) {
        self.acknowledged = position;
    }
    fn commit(&mut self) -> Result<(), CoreError> {
        self.committed.store(self.acknowledged, Ordering::Release);
        Ok(())
    }
}

/// A slow processor: it sleeps a little every 500 items.
struct Slow {
    processed: u64,
    last_position: u64,
}

impl Dispatcher<u64> for Slow {
    fn dispatch(&mut self, _item: &u64, _attempt: u32) -> DispatchOutcome {
        if let Some((_epoch, position)) = DeliveryContext::current_position() {
            self.last_position = position.offset;
        }
        self.processed += 1;
        if self.processed % 500 == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        DispatchOutcome::Done
    }
    fn complete(&mut self, _: PendingCompletion, _: &Delivery) -> Result<(), ProcessorError> {
        Ok(())
    }
}

fn main() {
    let feed = Feed::<u64, u64>::builder("numbers")
        .queue_capacity(1024)
        .build();
    let committed = Arc::new(AtomicU64::new(0));
    feed.acknowledge_with(Box::new(Pointer {
        acknowledged: 0,
        committed: committed.clone(),
    }));
    feed.set_pause_by_default(true);
    feed.set_epoch(Epoch(1));
    let mut reader = feed
        .subscribe("slow-group", SubscribeOptions::default())
        .expect("subscribed")
        .take_reader()
        .expect("the group's reader");
    feed.start_complete();

    let consumer = std::thread::spawn(move || {
        let _agent = mongoose_core::agent::mark_current_thread("slow-group");
        let mut slow = Slow {
            processed: 0,
            last_position: 0,
        };
        while slow.processed < ITEMS {
            if reader.poll(&mut slow, 64) == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        slow
    });

    // the source: positions are item * 100 ("the byte offset after the line")
    let mut next = 1u64;
    let mut paused_offers = 0u64;
    while next <= ITEMS {
        feed.poll_acknowledgements();
        match feed.try_publish(next, next * 100) {
            TryPublish::Published => next += 1,
            TryPublish::Paused(_) | TryPublish::Retry(_) => {
                paused_offers += 1;
                feed.report_state(SourceState::Behind, Some("paused behind a full queue"));
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        if next % 5_000 == 0 {
            let status = feed.status();
            println!(
                "published {:>6}  committed position {:>8}  paused {}  pauses {:>3}  dropped {}",
                status.sequence,
                committed.load(Ordering::Acquire),
                status.paused,
                status.pauses,
                status.dropped
            );
        }
    }
    feed.report_state(SourceState::CaughtUp, None);
    let slow = consumer.join().expect("the consumer finished");
    feed.poll_acknowledgements();

    let report = StatusReport::from_feeds(vec![feed.status()]);
    println!();
    println!(
        "processed {} items, last position {}",
        slow.processed, slow.last_position
    );
    println!("the source offered {paused_offers} times while paused: nothing was dropped");
    println!(
        "committed position {} (everything processed)",
        committed.load(Ordering::Acquire)
    );
    println!("feed status:");
    println!(
        "{}",
        serde_json::to_string_pretty(&report).expect("status serializes")
    );
    assert!(
        report.settled && report.lossless,
        "the run is complete and whole"
    );
}
