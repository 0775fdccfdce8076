//! Processing checkpoints: a commit never ahead of durable state (§5).
//!
//! An application that saves its state asynchronously or in batches takes a hold on
//! its group's queue for a feed. While held, the queue's acknowledgement point is
//! `min(dispatched, durable_through)` instead of `dispatched`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::queue::{QueueId, QueueShared};

/// What a queue had finished dispatching when [`ProcessingCheckpoint::mark`] was
/// called, bound to that queue (binding): a mark of an older binding is ignored.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Mark {
    binding: Option<QueueId>,
    count: u64,
}

impl Mark {
    /// The number of items the queue had dispatched.
    pub fn count(&self) -> u64 {
        self.count
    }
}

#[derive(Debug)]
pub(crate) struct HoldCell {
    held: AtomicBool,
    current: Mutex<Option<Arc<QueueShared>>>,
    durable: AtomicU64,
}

impl HoldCell {
    pub(crate) fn new() -> Self {
        HoldCell {
            held: AtomicBool::new(true),
            current: Mutex::new(None),
            durable: AtomicU64::new(0),
        }
    }

    /// Binds the hold to a new queue: a resubscribe starts at nothing durable.
    pub(crate) fn bind(&self, shared: Arc<QueueShared>) {
        let mut current = self.current.lock();
        *current = Some(shared);
        self.durable.store(0, Ordering::Release);
    }

    /// The queue went away: the binding is dropped.
    pub(crate) fn unbind(&self, queue: QueueId) {
        let mut current = self.current.lock();
        if current.as_ref().is_some_and(|shared| shared.id == queue) {
            *current = None;
            self.durable.store(0, Ordering::Release);
        }
    }

    /// The durable count for `queue`: everything when not held, nothing for a queue
    /// that is not the bound one.
    pub(crate) fn durable_for(&self, queue: QueueId) -> u64 {
        if !self.held.load(Ordering::Acquire) {
            return u64::MAX;
        }
        let current = self.current.lock();
        match current.as_ref() {
            Some(shared) if shared.id == queue => self.durable.load(Ordering::Acquire),
            _ => 0,
        }
    }

    pub(crate) fn set_held(&self, held: bool) {
        self.held.store(held, Ordering::Release);
    }
}

/// A hold on one group's queue for one feed. Take it before the feed delivers (items
/// acknowledged before it stay acknowledged).
///
/// ```
/// use std::sync::Arc;
/// use mongoose_delivery::{Feed, SubscribeOptions};
///
/// let feed = Feed::<u64, u64>::builder("lines").build();
/// let checkpoint = feed.hold("group-a");
/// let subscription = feed.subscribe("group-a", SubscribeOptions::default()).unwrap();
/// // on the processor thread, when snapshotting state:
/// let mark = checkpoint.mark();
/// // once the snapshot is durable, from any thread:
/// checkpoint.durable_through(mark);
/// # drop(subscription);
/// ```
#[derive(Clone, Debug)]
pub struct ProcessingCheckpoint {
    cell: Arc<HoldCell>,
}

impl ProcessingCheckpoint {
    pub(crate) fn new(cell: Arc<HoldCell>) -> Self {
        ProcessingCheckpoint { cell }
    }

    /// What the held queue has finished dispatching now. Inside a handler it does not
    /// count the item being handled (conservative: that item is re-delivered after a
    /// crash).
    pub fn mark(&self) -> Mark {
        let current = self.cell.current.lock();
        match current.as_ref() {
            Some(shared) => Mark {
                binding: Some(shared.id),
                count: shared.dispatched(),
            },
            None => Mark {
                binding: None,
                count: 0,
            },
        }
    }

    /// The state covering `mark` is durable: the feed may commit through it. Marks only
    /// advance; a mark of an older binding (before a resubscribe) is ignored.
    pub fn durable_through(&self, mark: Mark) {
        let current = self.cell.current.lock();
        if let (Some(shared), Some(binding)) = (current.as_ref(), mark.binding) {
            if shared.id == binding {
                self.cell.durable.fetch_max(mark.count, Ordering::AcqRel);
            }
        }
    }

    /// Returns the queue to the default: acknowledged once dispatched.
    pub fn release(&self) {
        self.cell.set_held(false);
    }

    /// True while the hold is in force.
    pub fn is_held(&self) -> bool {
        self.cell.held.load(Ordering::Acquire)
    }
}
