//! Fixtures of the acknowledgement window: a positioned feed (PAUSE by default, a
//! committer that records what it was told and committed), its readers, started with
//! them ([`started_with_readers`]), items published and processed, and a dispatcher
//! that records what it was given.
#![allow(dead_code, unreachable_pub)]

use std::sync::{Arc, Mutex};

use mongoose_core::engine::PendingCompletion;
use mongoose_core::{
    CoreError, Delivery, Epoch, OverloadSettings, ProcessorError, SourceCommitter, SourceOutput,
};
use mongoose_delivery::{
    DispatchOutcome, Dispatcher, Feed, FeedStatusEvent, Publisher, QueueReader, RetryPolicy,
    SubscribeOptions,
};

/// What the committer saw: every acknowledged run and every commit.
#[derive(Default, Debug)]
pub struct CommitLog {
    pub acknowledged: Vec<(u64, Epoch, u64)>,
    pub committed: Vec<u64>,
}

#[derive(Clone, Default)]
pub struct Commits(pub Arc<Mutex<CommitLog>>);

impl Commits {
    /// The last committed position, 0 when nothing was committed.
    pub fn pointer(&self) -> u64 {
        self.0
            .lock()
            .unwrap()
            .committed
            .last()
            .copied()
            .unwrap_or(0)
    }
}

struct RecordingCommitter {
    log: Commits,
    pending: Option<u64>,
}

impl SourceCommitter<u64> for RecordingCommitter {
    fn acknowledged(&mut self, sequence: u64, epoch: Epoch, position: u64) {
        self.log
            .0
            .lock()
            .unwrap()
            .acknowledged
            .push((sequence, epoch, position));
        self.pending = Some(position);
    }

    fn commit(&mut self) -> Result<(), CoreError> {
        if let Some(position) = self.pending.take() {
            let mut log = self.log.0.lock().unwrap();
            assert!(
                log.committed.last().is_none_or(|last| *last <= position),
                "commits go forward"
            );
            log.committed.push(position);
        }
        Ok(())
    }

    fn commits_after_stop(&self) -> bool {
        true
    }
}

/// A positioned feed as a file source sets it up: a committer and PAUSE by default.
pub fn positioned_feed(capacity: usize) -> (Arc<Publisher<u64, u64>>, Commits) {
    positioned_feed_with(Feed::builder("lines").queue_capacity(capacity).build())
}

/// A positioned feed of `capacity` slots whose status reports reach subscribers in
/// band ([`FeedStatusEvent`]s).
pub fn status_feed(capacity: usize) -> (Arc<Publisher<u64, u64>>, Commits) {
    positioned_feed_with(
        Feed::builder("lines")
            .queue_capacity(capacity)
            .status_events(true)
            .build(),
    )
}

pub fn positioned_feed_with(feed: Arc<Publisher<u64, u64>>) -> (Arc<Publisher<u64, u64>>, Commits) {
    let commits = Commits::default();
    feed.acknowledge_with(Box::new(RecordingCommitter {
        log: commits.clone(),
        pending: None,
    }));
    feed.set_pause_by_default(true);
    feed.set_epoch(Epoch(7));
    (feed, commits)
}

pub fn drop_feed(capacity: usize) -> (Arc<Publisher<u64, u64>>, Commits) {
    let settings = OverloadSettings {
        spin_bound: std::time::Duration::ZERO,
        ..OverloadSettings::drop_after_spin()
    };
    positioned_feed_with(
        Feed::builder("lines")
            .queue_capacity(capacity)
            .overload(settings)
            .build(),
    )
}

/// Subscribes one reader per group (in order) to a feed from [`positioned_feed`] or
/// [`drop_feed`], then ends the feed's startup: the usual setup of a window test.
///
/// `let (feed, commits, [mut fast, mut slow]) = started_with_readers(positioned_feed(64), ["fast", "slow"]);`
pub fn started_with_readers<const N: usize>(
    (feed, commits): (Arc<Publisher<u64, u64>>, Commits),
    groups: [&str; N],
) -> (Arc<Publisher<u64, u64>>, Commits, [QueueReader<u64>; N]) {
    let readers = groups.map(|group| reader(&feed, group));
    feed.start_complete();
    (feed, commits, readers)
}

/// The reader of `group`'s first subscription to `feed`.
pub fn reader(feed: &Publisher<u64, u64>, group: &str) -> QueueReader<u64> {
    reader_with(feed, group, RetryPolicy::default())
}

pub fn reader_with(
    feed: &Publisher<u64, u64>,
    group: &str,
    retry: RetryPolicy,
) -> QueueReader<u64> {
    feed.subscribe(
        group,
        SubscribeOptions {
            retry,
            ..SubscribeOptions::default()
        },
    )
    .expect("subscribed")
    .take_reader()
    .expect("the group's first subscription has the reader")
}

pub fn immediate_retries(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        initial_backoff: std::time::Duration::ZERO,
        max_backoff: std::time::Duration::ZERO,
    }
}

/// Publishes items 1..=count at positions item * 10.
pub fn publish_range(feed: &Publisher<u64, u64>, items: std::ops::RangeInclusive<u64>) {
    for item in items {
        assert!(
            feed.try_publish(item, item * 10).is_published(),
            "item {item} published"
        );
    }
}

/// Records what it was given, in order.
#[derive(Default)]
pub struct Collect {
    pub items: Vec<u64>,
    pub statuses: Vec<FeedStatusEvent>,
    pub deliveries: Vec<Option<Delivery>>,
}

impl Dispatcher<u64> for Collect {
    fn dispatch(&mut self, item: &u64, _attempt: u32) -> DispatchOutcome {
        self.items.push(*item);
        self.deliveries
            .push(mongoose_core::DeliveryContext::current());
        DispatchOutcome::Done
    }

    fn complete(&mut self, _: PendingCompletion, _: &Delivery) -> Result<(), ProcessorError> {
        Ok(())
    }

    fn on_status(&mut self, status: &FeedStatusEvent) {
        self.statuses.push(status.clone());
    }
}

/// Polls `count` items, one at a time.
pub fn process(reader: &mut QueueReader<u64>, count: usize) -> Vec<u64> {
    let mut collect = Collect::default();
    for _ in 0..count {
        assert_eq!(reader.poll(&mut collect, 1), 1, "an item was waiting");
    }
    collect.items
}

/// Polls whatever is waiting (up to 1,024 items).
pub fn process_available(reader: &mut QueueReader<u64>) -> Vec<u64> {
    let mut collect = Collect::default();
    reader.poll(&mut collect, 1_024);
    collect.items
}
