//! The consumer side of a subscriber queue: the reader a processor group polls on its
//! thread. It enters the [`DeliveryContext`](mongoose_core::DeliveryContext) for each
//! positioned item's whole dispatch, runs the completion callbacks after it, and only
//! then counts the item dispatched (book: guarantees/completion-hooks.md).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use mongoose_core::engine::{self, PendingCompletion, SavedCompletions};
use mongoose_core::{Delivery, Epoch, PositionValue, ProcessorError, ProcessorId};
use tracing::error;

use mongoose_core::{DispatchOutcome, Dispatcher, RetryPolicy};

use crate::queue::{QueueEntry, QueueShared};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Dispatch,
    Complete,
}

/// What the next item waits for before it is dispatched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    /// Nothing.
    None,
    /// A retry's backoff.
    Until(Instant),
    /// The end of this poll: a processor was quarantined at the item before, so its
    /// group removes it before any further item counts as dispatched. Checked where
    /// the backoff already is, so an item that does not fail pays nothing for it.
    NextPoll,
}

#[derive(Debug)]
struct Progress {
    phase: Phase,
    attempt: u32,
    /// The attempts that were a busy processor's (not counted against the policy).
    busy: u32,
    completion_retries: u32,
    wait: Wait,
    failed_completion: Option<PendingCompletion>,
    saved: SavedCompletions,
    resume: bool,
}

impl Progress {
    fn new() -> Self {
        Progress {
            phase: Phase::Dispatch,
            attempt: 0,
            busy: 0,
            completion_retries: 0,
            wait: Wait::None,
            failed_completion: None,
            saved: SavedCompletions::default(),
            resume: false,
        }
    }

    #[inline]
    fn reset(&mut self) {
        self.phase = Phase::Dispatch;
        if self.attempt == 0 && self.completion_retries == 0 && !self.resume {
            return;
        }
        self.attempt = 0;
        self.busy = 0;
        self.completion_retries = 0;
        if self.wait != Wait::NextPoll {
            self.wait = Wait::None;
        }
        self.failed_completion = None;
        self.resume = false;
    }
}

/// The reader of one subscriber queue, owned by a processor group's thread.
pub struct QueueReader<T> {
    consumer: rtrb::Consumer<QueueEntry<T>>,
    shared: Arc<QueueShared>,
    feed: Arc<str>,
    policy: RetryPolicy,
    dispatched: u64,
    progress: Progress,
    /// The most items a poll takes from the ring at once (see [`READ_CHUNK`]).
    chunk: usize,
}

impl<T> std::fmt::Debug for QueueReader<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueReader")
            .field("queue", &self.shared.name)
            .field("dispatched", &self.dispatched)
            .finish()
    }
}

impl<T> QueueReader<T> {
    pub(crate) fn new(
        consumer: rtrb::Consumer<QueueEntry<T>>,
        shared: Arc<QueueShared>,
        feed: Arc<str>,
        policy: RetryPolicy,
    ) -> Self {
        QueueReader {
            shared,
            feed,
            policy,
            dispatched: 0,
            progress: Progress::new(),
            chunk: (consumer.buffer().capacity() / 2).clamp(1, READ_CHUNK),
            consumer,
        }
    }

    /// `wakeup` wakes this reader's thread, parked by its idler, when the feed publishes
    /// to the queue (the first one given stays: a reader is polled by one thread).
    pub fn set_wakeup(&self, wakeup: Arc<mongoose_core::Wakeup>) {
        let _ = self.shared.consumer_wakeup.set(wakeup);
    }

    /// The queue's name (`group/feed`).
    pub fn queue_name(&self) -> &str {
        &self.shared.name
    }

    /// The feed's name.
    pub fn feed(&self) -> &str {
        &self.feed
    }

    /// Items waiting in the queue.
    pub fn len(&self) -> usize {
        self.consumer.slots()
    }

    /// True when nothing waits in the queue.
    pub fn is_empty(&self) -> bool {
        self.consumer.is_empty()
    }

    /// Items this reader finished.
    pub fn dispatched(&self) -> u64 {
        self.dispatched
    }

    /// Fences the queue (a quarantine in progress): nothing is dispatched, and a
    /// positioned feed pauses and holds its position until the fence lifts.
    pub fn set_fenced(&self, fenced: bool) {
        self.shared.fenced.store(fenced, Ordering::Release);
    }

    /// The group died: the queue stays fenced for good.
    pub fn mark_dead(&self) {
        self.shared.dead.store(true, Ordering::Release);
    }

    /// True once the queue was removed from its feed.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Dispatches up to `limit` items to `dispatcher`; returns how many finished.
    ///
    /// An item finishes when its dispatch and its completion callbacks are done; only
    /// then is the queue's `dispatched` counter advanced (with release ordering), so the
    /// feed can acknowledge and commit it. An item waiting for a retry stays at the head
    /// of the queue: nothing behind it is dispatched meanwhile.
    pub fn poll(&mut self, dispatcher: &mut dyn Dispatcher<T>, limit: usize) -> usize {
        let mut finished = 0;
        if self.shared.closed.load(Ordering::Acquire) || self.shared.fenced_or_dead() {
            return 0;
        }
        while finished < limit {
            // a chunk at a time: the ring's shared indices are read and written once
            // per chunk, not once per item
            let wanted = (limit - finished).min(self.chunk);
            let available = self.consumer.slots().min(wanted);
            if available == 0 {
                break;
            }
            let Ok(chunk) = self.consumer.read_chunk(available) else {
                break;
            };
            let mut release = Release {
                chunk: Some(chunk),
                done: 0,
            };
            let (first, second) = release
                .chunk
                .as_ref()
                .map_or((&[][..], &[][..]), |chunk| chunk.as_slices());
            let mut stopped = false;
            for entry in first.iter().chain(second) {
                if !dispatch_one(
                    &mut self.progress,
                    &self.policy,
                    &self.shared,
                    &self.feed,
                    &mut self.dispatched,
                    dispatcher,
                    entry,
                ) {
                    stopped = true;
                    break;
                }
                release.done += 1;
            }
            finished += release.done;
            drop(release);
            if stopped {
                break;
            }
        }
        if self.shared.drops_pending.load(Ordering::Acquire) {
            report_drops(&self.shared, self.dispatched, dispatcher);
        }
        if finished > 0 {
            // room made: a source parked on the full queue goes on (one load if not)
            if let Some(wakeup) = self.shared.producer_wakeup.get() {
                wakeup.wake();
            }
        }
        finished
    }
}

/// Releases the items of a chunk that finished, when the chunk's work ends, also when a
/// dispatcher panics: a finished item is never given again nor counted twice.
///
/// The queue's `dispatched` already counts each of them ([`dispatch_one`] publishes it
/// per item): `dispatched` first, then the slots, since the publisher may reuse a
/// released slot at once.
struct Release<'a, T> {
    chunk: Option<rtrb::chunks::ReadChunk<'a, QueueEntry<T>>>,
    /// Items of the chunk that finished, from its start.
    done: usize,
}

impl<T> Drop for Release<'_, T> {
    fn drop(&mut self) {
        if let Some(chunk) = self.chunk.take() {
            chunk.commit(self.done);
        }
    }
}

/// The most items a poll takes from its ring at once, and at most half the ring: the
/// slots of a chunk are released together, so the publisher can fill one half while the
/// reader works through the other.
const READ_CHUNK: usize = 1024;

/// Dispatches the entry at the head of the queue (position `dispatched`); returns
/// false when it waits for a retry or a backoff. On true the item is finished and
/// `dispatched` counts it; the caller publishes the count before it releases the slot.
#[inline]
fn dispatch_one<T>(
    progress: &mut Progress,
    policy: &RetryPolicy,
    shared: &QueueShared,
    feed: &Arc<str>,
    dispatched: &mut u64,
    dispatcher: &mut dyn Dispatcher<T>,
    entry: &QueueEntry<T>,
) -> bool {
    if shared.drops_pending.load(Ordering::Acquire) {
        report_drops(shared, *dispatched, dispatcher);
    }
    match progress.wait {
        Wait::None => {}
        Wait::Until(at) => {
            if Instant::now() < at {
                return false;
            }
            progress.wait = Wait::None;
        }
        Wait::NextPoll => {
            progress.wait = Wait::None;
            return false;
        }
    }
    // the item and, when positioned, its delivery; a status is told at once
    let item = match entry {
        QueueEntry::Owned {
            item,
            sequence,
            epoch,
            lane,
            offset,
        } => Some((item, Some((*sequence, *epoch, *lane, *offset)))),
        QueueEntry::Shared {
            item,
            sequence,
            epoch,
            lane,
            offset,
        } => Some((&**item, Some((*sequence, *epoch, *lane, *offset)))),
        QueueEntry::OwnedPush(item) => Some((item, None)),
        QueueEntry::SharedPush(item) => Some((&**item, None)),
        QueueEntry::Status(status) => {
            dispatcher.on_status(status);
            None
        }
    };
    let done = item.is_none_or(|(item, delivery)| {
        let delivery = delivery.map(|(sequence, epoch, lane, offset)| {
            (sequence, epoch, PositionValue { lane, offset })
        });
        deliver_item(progress, policy, shared, feed, dispatcher, item, delivery)
    });
    if done {
        progress.reset();
        // invariant 2: this reader is the only writer of its queue's `dispatched` counter
        debug_assert_eq!(
            shared.dispatched.load(Ordering::Relaxed),
            *dispatched,
            "invariant 2: queue {}'s dispatched counter was written by another writer",
            shared.name
        );
        *dispatched += 1;
        // published per item, not per chunk: a slow processor's items are acknowledged
        // (and its source commits) as each one finishes, not a chunk later. Still
        // before the chunk's slots are released (see `Release`).
        shared.dispatched.store(*dispatched, Ordering::Release);
    }
    done
}

/// Delivers one item, inside the delivery context when it is positioned (`delivery`:
/// its sequence, epoch and position); true when it finished.
#[inline]
fn deliver_item<T>(
    progress: &mut Progress,
    policy: &RetryPolicy,
    shared: &QueueShared,
    feed: &Arc<str>,
    dispatcher: &mut dyn Dispatcher<T>,
    item: &T,
    delivery: Option<(u64, Epoch, PositionValue)>,
) -> bool {
    // entered for the whole dispatch (handlers, completions), left at the end
    let _entered = delivery.map(|(sequence, epoch, position)| {
        let entered = engine::enter(feed, sequence, epoch, position, progress.attempt);
        if progress.resume {
            engine::restore_completions(&mut progress.saved);
            progress.resume = false;
        }
        entered
    });
    let done = deliver(
        progress,
        policy,
        shared,
        dispatcher,
        item,
        delivery.map(|(sequence, epoch, position)| (feed, sequence, epoch, position)),
    );
    if done {
        dispatcher.finished(item);
    }
    done
}

/// Holds the queue's acknowledgement point at the item being delivered (the queue
/// position its reader has not counted yet): a processor that was given it failed for
/// good (quarantined) or a completion was skipped after its retries, so its consumer's
/// state does not hold the item and the feed must never commit past it
/// (book: guarantees/commit-after-processing.md). Only a positioned item is held: a push item has no
/// commit.
#[cold]
fn hold_item(
    shared: &QueueShared,
    delivery: Option<(&Arc<str>, u64, Epoch, PositionValue)>,
    reason: String,
) {
    let Some((feed, sequence, epoch, position)) = delivery else {
        return;
    };
    if let Some(unlogged) = shared.hold_log.lock().due() {
        error!(
            feed = &**feed,
            queue = %shared.name,
            sequence,
            epoch = epoch.get(),
            position = position.offset,
            %reason,
            unlogged,
            "the feed holds its position before this item: it is never committed in this run (a restart re-delivers it, an operator release gives it up); more held items are logged at most every 10 s, with a count"
        );
    }
    // the reader alone writes `dispatched`: it still counts the items before this one
    let queue_position = shared.dispatched.load(Ordering::Relaxed);
    shared.hold_from(
        queue_position,
        format!(
            "{reason} (at sequence {sequence}, position {})",
            position.offset
        ),
    );
}

/// Reports the dropped runs that stand before the next undispatched item (queue
/// position `dispatched`).
fn report_drops<T>(shared: &QueueShared, dispatched: u64, dispatcher: &mut dyn Dispatcher<T>) {
    loop {
        let run = {
            let mut drops = shared.drops.lock();
            match drops.front() {
                Some(run) if run.before <= dispatched => drops.pop_front(),
                Some(_) => None,
                None => {
                    shared.drops_pending.store(false, Ordering::Release);
                    None
                }
            }
        };
        match run {
            Some(run) => dispatcher.dropped(&run),
            None => return,
        }
    }
}

/// Runs one item's dispatch and completions. Returns false when the item waits for a
/// retry (its completions saved in `progress`).
fn deliver<T>(
    progress: &mut Progress,
    policy: &RetryPolicy,
    shared: &QueueShared,
    dispatcher: &mut dyn Dispatcher<T>,
    item: &T,
    delivery: Option<(&Arc<str>, u64, Epoch, PositionValue)>,
) -> bool {
    if progress.phase == Phase::Dispatch {
        match dispatcher.dispatch(item, progress.attempt) {
            DispatchOutcome::Done => {}
            DispatchOutcome::Failed { processor, retry } => {
                if !dispatch_failed(
                    progress, policy, shared, dispatcher, item, delivery, processor, retry,
                ) {
                    return false;
                }
            }
            DispatchOutcome::Busy { processor } => {
                dispatch_busy(progress, policy, delivery.is_some(), processor);
                return false;
            }
        }
        progress.phase = Phase::Complete;
    }
    let Some((feed, sequence, epoch, position)) = delivery else {
        return true;
    };
    loop {
        let next = progress
            .failed_completion
            .take()
            .or_else(engine::take_next_completion);
        let Some(completion) = next else {
            return true;
        };
        let current = Delivery::new(
            Arc::clone(feed),
            sequence,
            epoch,
            position,
            progress.attempt,
        );
        let result = {
            let _owner = engine::processor_scope(completion.owner);
            dispatcher.complete(completion, &current)
        };
        match result {
            Ok(()) => progress.completion_retries = 0,
            Err(failure) => {
                if !completion_failed(
                    progress,
                    policy,
                    shared,
                    dispatcher,
                    completion,
                    failure,
                    (feed, sequence, epoch, position),
                ) {
                    return false;
                }
            }
        }
    }
}

/// A dispatch failed: schedules a retry (false: the item waits), or settles the item
/// for the failing processor (true: the delivery goes on). Kept out of line, so the
/// delivery of an item that does not fail stays small.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn dispatch_failed<T>(
    progress: &mut Progress,
    policy: &RetryPolicy,
    shared: &QueueShared,
    dispatcher: &mut dyn Dispatcher<T>,
    item: &T,
    delivery: Option<(&Arc<str>, u64, Epoch, PositionValue)>,
    processor: Option<ProcessorId>,
    retry: bool,
) -> bool {
    engine::discard_completions_of(processor);
    if retry && progress.attempt - progress.busy < policy.max_retries {
        progress.attempt += 1;
        progress.wait = Wait::Until(Instant::now() + policy.backoff(progress.attempt));
        if delivery.is_some() {
            engine::save_completions(&mut progress.saved);
            progress.resume = true;
        }
        return false;
    }
    if retry {
        error!(
            queue = %shared.name,
            ?processor,
            attempts = progress.attempt - progress.busy + 1,
            "retries exhausted: the item counts as dispatched without this processor"
        );
        dispatcher.gave_up(item, processor);
    } else {
        // quarantined: its state does not hold the item
        let who = processor.map_or_else(
            || "a processor".to_owned(),
            |processor| dispatcher.describe(processor),
        );
        hold_item(
            shared,
            delivery,
            format!("{who} of queue {} was quarantined", shared.name),
        );
        progress.wait = Wait::NextPoll;
    }
    true
}

/// A processor is busy: the item waits a little and is offered again, as another
/// attempt (so a retried handler makes the same output keys) that does not count
/// against the retry policy.
#[cold]
#[inline(never)]
fn dispatch_busy(
    progress: &mut Progress,
    policy: &RetryPolicy,
    positioned: bool,
    processor: Option<ProcessorId>,
) {
    engine::discard_completions_of(processor);
    progress.attempt += 1;
    progress.busy += 1;
    progress.wait = Wait::Until(Instant::now() + policy.initial_backoff);
    if positioned {
        engine::save_completions(&mut progress.saved);
        progress.resume = true;
    }
}

/// A completion callback failed: schedules its retry (false: the item waits), or, once
/// its retries are spent, counts it and holds the item (true: the next callback runs).
#[cold]
#[inline(never)]
fn completion_failed<T>(
    progress: &mut Progress,
    policy: &RetryPolicy,
    shared: &QueueShared,
    dispatcher: &mut dyn Dispatcher<T>,
    completion: PendingCompletion,
    failure: ProcessorError,
    (feed, sequence, epoch, position): (&Arc<str>, u64, Epoch, PositionValue),
) -> bool {
    if progress.completion_retries < policy.max_retries {
        progress.completion_retries += 1;
        progress.failed_completion = Some(completion);
        progress.wait = Wait::Until(Instant::now() + policy.backoff(progress.completion_retries));
        engine::save_completions(&mut progress.saved);
        progress.resume = true;
        return false;
    }
    if let Some(unlogged) = shared.completion_log.lock().due() {
        error!(
            queue = %shared.name,
            owner = ?completion.owner,
            key = ?completion.key,
            %failure,
            unlogged,
            "a delivery-complete callback failed after its retries: skipped; the feed holds its position before the item (counted in completionFailures; more are logged at most every 10 s, with a count)"
        );
    }
    let who = completion.owner.map_or_else(
        || "a processor".to_owned(),
        |processor| dispatcher.describe(processor),
    );
    hold_item(
        shared,
        Some((feed, sequence, epoch, position)),
        format!(
            "a delivery-complete callback of {who} on queue {} failed after {} retries: {failure}",
            shared.name, policy.max_retries
        ),
    );
    progress.completion_retries = 0;
    shared.completion_failures.fetch_add(1, Ordering::AcqRel);
    true
}
