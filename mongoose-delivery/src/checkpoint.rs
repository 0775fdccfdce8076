//! Processing checkpoints: a commit never ahead of durable state (book: guarantees/commit-after-processing.md).
//!
//! An application that saves its state asynchronously or in batches takes a hold on
//! its group's queue for a feed. While held, the queue's acknowledgement point is
//! `min(dispatched, durable_through)` instead of `dispatched`.
//!
//! A hold has either one owner, which calls [`ProcessingCheckpoint::durable_through`],
//! or several participants ([`ProcessingCheckpoint::participant`]: the sinks a
//! group's processors write to, an outbox), each holding the items it has work
//! pending for: the acknowledgement point is then `dispatched`, lowered to the first
//! item any participant still has pending, computed when the feed polls its
//! acknowledgements.
//!
//! A participant dropped with work still pending (a sink a reload removed while it held
//! outputs) keeps that work pending: the queue's acknowledgement point stays before its
//! first item for the rest of the run, or until the operator release, and the feed
//! reports why (invariant 8: a reload that removes a consumer removes none of its
//! obligations; a restart reads those inputs again for the consumers there are then).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use mongoose_core::sink::CommitGate;
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
    /// The participants, when the hold is driven by them (kept while their owner holds
    /// them, and after it dropped them while they still have work pending).
    participants: Mutex<Vec<Arc<Pending>>>,
    has_participants: AtomicBool,
}

/// A participant's pending work: `(tag, mark, done)` in tag order.
#[derive(Debug, Default)]
struct Pending {
    entries: Mutex<VecDeque<(u64, Mark, bool)>>,
    /// The tags reported held ([`CommitGate::held`]) with the hold each put on the
    /// queue (`(tag, mark, reason)`): lifted when the tag completes.
    held: Mutex<Vec<(u64, Mark, String)>>,
    /// True while `held` may hold something (a cheap check on every completion).
    any_held: AtomicBool,
    /// Its owner dropped it with work pending, and the queue was told why it holds.
    orphaned: AtomicBool,
}

impl HoldCell {
    pub(crate) fn new() -> Self {
        HoldCell {
            held: AtomicBool::new(true),
            current: Mutex::new(None),
            durable: AtomicU64::new(0),
            participants: Mutex::new(Vec::new()),
            has_participants: AtomicBool::new(false),
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
            Some(shared) if shared.id == queue => {
                if self.has_participants.load(Ordering::Acquire) {
                    self.participants_floor(shared)
                } else {
                    self.durable.load(Ordering::Acquire)
                }
            }
            _ => 0,
        }
    }

    /// What the queue dispatched, lowered to the first item a participant still has
    /// pending. `dispatched` is read first: a participant registers an item's pending
    /// work before the item counts as dispatched, so what is read after it includes
    /// the work of every item it counts.
    fn participants_floor(&self, shared: &QueueShared) -> u64 {
        let mut floor = shared.dispatched();
        let mut participants = self.participants.lock();
        // a participant its owner dropped goes once it has nothing pending; with work
        // pending it keeps holding (its outputs were never published)
        participants.retain(|participant| {
            Arc::strong_count(participant) > 1 || !participant.entries.lock().is_empty()
        });
        for participant in participants.iter() {
            let entries = participant.entries.lock();
            if let Some((_, mark, _)) = entries.front() {
                if mark.binding == Some(shared.id) {
                    floor = floor.min(mark.count);
                    if Arc::strong_count(participant) == 1
                        && !participant.orphaned.swap(true, Ordering::AcqRel)
                    {
                        let reason = format!(
                            "a consumer removed by a reload left {} outputs unpublished: their inputs stay uncommitted until a restart reads them again (or an operator release)",
                            entries.len()
                        );
                        tracing::warn!(queue = %shared.name, "{reason}");
                        shared.hold_from(mark.count, reason);
                    }
                }
            }
        }
        floor
    }

    /// What the bound queue has dispatched now, as a mark of its binding.
    fn mark(&self) -> Mark {
        let current = self.current.lock();
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

    /// The operator release: every participant's pending work is given up (marked
    /// over), so the queue's acknowledgement point is no longer held by it.
    pub(crate) fn release_participants(&self) {
        for participant in self.participants.lock().iter() {
            participant.entries.lock().clear();
            participant.held.lock().clear();
        }
    }

    /// Held outputs are over (published at last): the holds they put on the queue
    /// go. Another held output still pending (of any participant) holds the queue
    /// again from its own item, with its own reason.
    fn lift_holds(&self, lifted: &[(u64, Mark, String)]) {
        let current = self.current.lock();
        let Some(shared) = current.as_ref() else {
            return;
        };
        let mut lifted_one = false;
        for (_, mark, reason) in lifted {
            if mark.binding == Some(shared.id) && shared.lift_hold_if(mark.count, reason) {
                lifted_one = true;
            }
        }
        if !lifted_one {
            return;
        }
        let mut earliest: Option<(u64, String)> = None;
        for participant in self.participants.lock().iter() {
            for (_, mark, reason) in participant.held.lock().iter() {
                if mark.binding == Some(shared.id)
                    && earliest.as_ref().is_none_or(|(from, _)| mark.count < *from)
                {
                    earliest = Some((mark.count, reason.clone()));
                }
            }
        }
        if let Some((from, reason)) = earliest {
            shared.hold_from(from, reason);
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
        self.cell.mark()
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

    /// A participant in this hold: from now on the hold is driven by its
    /// participants (see the module documentation), not by
    /// [`ProcessingCheckpoint::durable_through`].
    pub fn participant(&self) -> CheckpointParticipant {
        let pending = Arc::new(Pending::default());
        self.cell.participants.lock().push(Arc::clone(&pending));
        self.cell.has_participants.store(true, Ordering::Release);
        CheckpointParticipant {
            cell: Arc::clone(&self.cell),
            pending,
        }
    }
}

/// One participant of a [`ProcessingCheckpoint`]: holds the items it has work pending
/// for (the outputs a sink has not published yet), as a
/// [`mongoose_core::sink::CommitGate`].
///
/// ```
/// use mongoose_core::sink::CommitGate;
/// use mongoose_delivery::{Feed, SubscribeOptions};
///
/// let feed = Feed::<u64, u64>::builder("lines").build();
/// let gate = feed.hold("group-a").participant();
/// let subscription = feed.subscribe("group-a", SubscribeOptions::default()).unwrap();
/// // on the processor's thread, while it handles an item that makes an output:
/// gate.pending(1);
/// // on the sink's thread, once the output is published:
/// gate.complete(1);
/// # drop(subscription);
/// ```
#[derive(Clone, Debug)]
pub struct CheckpointParticipant {
    cell: Arc<HoldCell>,
    pending: Arc<Pending>,
}

impl CheckpointParticipant {
    /// How many tags are pending (not yet complete, or complete behind one that is
    /// not).
    pub fn pending_count(&self) -> usize {
        self.pending.entries.lock().len()
    }

    /// The held tags for which `over` is true are complete: their holds are lifted.
    fn lift_held(&self, over: impl Fn(u64) -> bool) {
        if !self.pending.any_held.load(Ordering::Acquire) {
            return;
        }
        let lifted: Vec<(u64, Mark, String)> = {
            let mut held = self.pending.held.lock();
            let mut lifted = Vec::new();
            let mut index = 0;
            while index < held.len() {
                if over(held[index].0) {
                    lifted.push(held.swap_remove(index));
                } else {
                    index += 1;
                }
            }
            if held.is_empty() {
                self.pending.any_held.store(false, Ordering::Release);
            }
            lifted
        };
        if !lifted.is_empty() {
            self.cell.lift_holds(&lifted);
        }
    }
}

impl CommitGate for CheckpointParticipant {
    fn pending(&self, tag: u64) {
        let mark = self.cell.mark();
        self.pending.entries.lock().push_back((tag, mark, false));
    }

    fn complete(&self, tag: u64) {
        let mut entries = self.pending.entries.lock();
        // in order, the usual case: the first entry
        let at = if entries
            .front()
            .is_some_and(|(pending, _, _)| *pending == tag)
        {
            0
        } else {
            entries.partition_point(|(pending, _, _)| *pending < tag)
        };
        if let Some(entry) = entries.get_mut(at) {
            if entry.0 == tag {
                entry.2 = true;
            }
        }
        while entries.front().is_some_and(|(_, _, done)| *done) {
            entries.pop_front();
        }
        drop(entries);
        self.lift_held(|held| held == tag);
    }

    fn complete_through(&self, tag: u64) {
        let mut entries = self.pending.entries.lock();
        for entry in entries.iter_mut() {
            if entry.0 > tag {
                break;
            }
            entry.2 = true;
        }
        while entries.front().is_some_and(|(_, _, done)| *done) {
            entries.pop_front();
        }
        drop(entries);
        self.lift_held(|held| held <= tag);
    }

    /// Holds the queue from the tag's item with `reason` (the feed reports it
    /// `stalled`); once the tag completes (the output is published at last) the hold
    /// is lifted.
    fn held(&self, tag: u64, reason: &str) {
        let mark = {
            let entries = self.pending.entries.lock();
            let at = entries.partition_point(|(pending, _, _)| *pending < tag);
            entries
                .get(at)
                .filter(|(pending, _, _)| *pending == tag)
                .map(|(_, mark, _)| *mark)
        };
        let current = self.cell.current.lock();
        if let (Some(mark), Some(shared)) = (mark, current.as_ref()) {
            if mark.binding == Some(shared.id) {
                shared.hold_from(mark.count, reason.to_owned());
                self.pending
                    .held
                    .lock()
                    .push((tag, mark, reason.to_owned()));
                self.pending.any_held.store(true, Ordering::Release);
            }
        }
    }
}
