//! Subscriber queues: the bounded ring between a publisher and one group's reader, the
//! counters each side writes, and the publisher's per-queue bookkeeping.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_utils::CachePadded;
use mongoose_core::{DroppedRun, Epoch, FeedStatusEvent, OverloadSettings, PositionValue};
use serde::Serialize;

use crate::checkpoint::HoldCell;

/// Identifies one physical subscriber queue of a feed (a binding).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, Serialize)]
pub struct QueueId(pub u64);

/// Identifies one subscription; several subscriptions of a group share its queue.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, Serialize)]
pub struct SubscriptionId(pub u64);

/// An entry as it travels in a queue: an item, owned when the feed has one subscriber
/// and shared when it fans out (never copied per queue), with its sequence and, for a
/// positioned item, its source position; or an in-band status.
///
/// The fields are spread over flat variants rather than nested in an item enum and an
/// optional position: the compiler then packs the lane beside the variant's tag, and an
/// entry of a small item is 40 bytes, not 56 (the ring is written by the publisher and
/// read by the reader on another core: every byte of it crosses between the cores).
#[derive(Debug)]
pub(crate) enum QueueEntry<T> {
    /// A positioned item moved into the queue.
    Owned {
        item: T,
        sequence: u64,
        epoch: Epoch,
        lane: u32,
        offset: u64,
    },
    /// A positioned item shared by the queues of a fan-out.
    Shared {
        item: Arc<T>,
        sequence: u64,
        epoch: Epoch,
        lane: u32,
        offset: u64,
    },
    /// A push item (no source position, so no delivery context: its sequence is not
    /// carried) moved into the queue.
    OwnedPush(T),
    /// A push item shared by the queues of a fan-out.
    SharedPush(Arc<T>),
    /// An in-band status event (rare: boxed, so it does not widen every entry).
    Status(Box<FeedStatusEvent>),
}

/// What a queue carries of an item: the item itself, or a share of it.
#[derive(Debug)]
pub(crate) enum Payload<T> {
    Owned(T),
    Shared(Arc<T>),
}

impl<T> QueueEntry<T> {
    /// The entry of an item: `payload` with its sequence and, when positioned, its
    /// epoch and position.
    #[inline]
    pub(crate) fn item(
        payload: Payload<T>,
        sequence: u64,
        position: Option<(Epoch, PositionValue)>,
    ) -> Self {
        match (payload, position) {
            (Payload::Owned(item), Some((epoch, position))) => QueueEntry::Owned {
                item,
                sequence,
                epoch,
                lane: position.lane,
                offset: position.offset,
            },
            (Payload::Shared(item), Some((epoch, position))) => QueueEntry::Shared {
                item,
                sequence,
                epoch,
                lane: position.lane,
                offset: position.offset,
            },
            (Payload::Owned(item), None) => QueueEntry::OwnedPush(item),
            (Payload::Shared(item), None) => QueueEntry::SharedPush(item),
        }
    }
}

/// The counters and flags shared by a queue's reader and its publisher. Each counter
/// has one writer: `dispatched` and `completion_failures` the reader, the flags the
/// group (fence) or the publisher (closed).
///
/// The reader's counters sit on a cache line of their own, so the publisher's reads of
/// the flags do not miss on every item the reader counts.
#[derive(Debug)]
pub(crate) struct QueueShared {
    pub(crate) id: QueueId,
    pub(crate) name: Arc<str>,
    pub(crate) group: Arc<str>,
    pub(crate) dispatched: CachePadded<AtomicU64>,
    pub(crate) completion_failures: AtomicU64,
    pub(crate) fenced: AtomicBool,
    pub(crate) dead: AtomicBool,
    pub(crate) closed: AtomicBool,
    /// Runs of items dropped for this queue, reported by the reader where they were
    /// lost (a recording's `Dropped` entries). Written by the publisher only on a drop;
    /// the reader looks at `drops_pending` once per poll.
    pub(crate) drops: parking_lot::Mutex<std::collections::VecDeque<DroppedRun>>,
    pub(crate) drops_pending: AtomicBool,
    /// The queue position of the first item a consumer of this queue failed to
    /// process for good (a quarantine, an exhausted completion): the queue's
    /// acknowledgement point never passes it ([`NOT_HELD`] when nothing is held). Set
    /// by the reader before it counts the item dispatched; cleared only by an operator
    /// release.
    pub(crate) held_from: AtomicU64,
    /// Why the queue holds (for `stalled`), written with `held_from`.
    pub(crate) held_because: parking_lot::Mutex<Option<String>>,
    /// The reader's log of held items and skipped completions: the first of each run
    /// of them at once, then a count at most every 10 s (a full disk made one line per
    /// item, thousands a second).
    pub(crate) hold_log: parking_lot::Mutex<mongoose_core::LogEvery>,
    pub(crate) completion_log: parking_lot::Mutex<mongoose_core::LogEvery>,
    /// Wakes the reader's thread, parked, when the feed published (its group's idler's).
    pub(crate) consumer_wakeup: std::sync::OnceLock<Arc<mongoose_core::Wakeup>>,
    /// Wakes the feed's source, parked, when the reader made room (the feed's).
    pub(crate) producer_wakeup: std::sync::OnceLock<Arc<mongoose_core::Wakeup>>,
}

/// How often a repeating error of a queue's reader is logged (with a count).
pub(crate) const REPEATED_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// `held_from` when the queue holds nothing.
pub(crate) const NOT_HELD: u64 = u64::MAX;

impl QueueShared {
    pub(crate) fn new(id: QueueId, name: Arc<str>, group: Arc<str>) -> Self {
        QueueShared {
            id,
            name,
            group,
            dispatched: CachePadded::new(AtomicU64::new(0)),
            completion_failures: AtomicU64::new(0),
            fenced: AtomicBool::new(false),
            dead: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            drops: parking_lot::Mutex::new(std::collections::VecDeque::new()),
            drops_pending: AtomicBool::new(false),
            held_from: AtomicU64::new(NOT_HELD),
            held_because: parking_lot::Mutex::new(None),
            hold_log: parking_lot::Mutex::new(mongoose_core::LogEvery::new(REPEATED_LOG_EVERY)),
            completion_log: parking_lot::Mutex::new(mongoose_core::LogEvery::new(
                REPEATED_LOG_EVERY,
            )),
            consumer_wakeup: std::sync::OnceLock::new(),
            producer_wakeup: std::sync::OnceLock::new(),
        }
    }

    /// Holds the queue's acknowledgement point at `queue_position` (the first held
    /// item) with a reason; an earlier hold is kept (the first unprocessed item is the
    /// one that matters).
    pub(crate) fn hold_from(&self, queue_position: u64, reason: String) {
        let mut because = self.held_because.lock();
        if self.held_from.load(Ordering::Acquire) == NOT_HELD {
            *because = Some(reason);
            self.held_from.store(queue_position, Ordering::Release);
        }
    }

    /// Forgets the hold from `queue_position` with `reason`, if it is the one in
    /// force (a held output published at last); true when it was.
    pub(crate) fn lift_hold_if(&self, queue_position: u64, reason: &str) -> bool {
        let mut because = self.held_because.lock();
        if self.held_from.load(Ordering::Acquire) == queue_position
            && because.as_deref() == Some(reason)
        {
            self.held_from.store(NOT_HELD, Ordering::Release);
            *because = None;
            return true;
        }
        false
    }

    /// Why the queue holds, when it does.
    pub(crate) fn held_reason(&self) -> Option<String> {
        let because = self.held_because.lock();
        (self.held_from.load(Ordering::Acquire) != NOT_HELD)
            .then(|| because.clone().unwrap_or_default())
    }

    /// The operator release: forgets the hold; returns the queue position it held
    /// from.
    pub(crate) fn release_hold(&self) -> Option<u64> {
        let mut because = self.held_because.lock();
        let from = self.held_from.swap(NOT_HELD, Ordering::AcqRel);
        *because = None;
        (from != NOT_HELD).then_some(from)
    }

    /// Records a drop of `sequence` for this queue, at queue position `before`.
    pub(crate) fn record_drop(&self, before: u64, sequence: u64) {
        let mut drops = self.drops.lock();
        match drops.back_mut() {
            Some(run) if run.before == before => {
                run.last_sequence = sequence;
                run.count += 1;
            }
            _ => drops.push_back(DroppedRun {
                before,
                first_sequence: sequence,
                last_sequence: sequence,
                count: 1,
            }),
        }
        self.drops_pending.store(true, Ordering::Release);
    }

    pub(crate) fn dispatched(&self) -> u64 {
        self.dispatched.load(Ordering::Acquire)
    }

    #[inline]
    pub(crate) fn fenced_or_dead(&self) -> bool {
        self.fenced.load(Ordering::Acquire) || self.dead.load(Ordering::Acquire)
    }
}

/// What holds a queue's acknowledgement point back: for each queue position not yet
/// acknowledged, the first sequence that position holds back (an item's own sequence;
/// for a status, the sequence after the last item before it).
///
/// The acknowledgement point is the first position that is not both dispatched and
/// durable. Without a processing checkpoint that is the first undispatched position, at
/// most a queue's capacity behind the producer; under a checkpoint it may lag further,
/// by as many items as the processor has dispatched but not yet made durable. So the
/// holds are kept from the acknowledgement point on, not by queue slot: a slot the
/// queue reuses never overwrites a hold that is still needed. The ring is twice the
/// queue's capacity and is pruned below the acknowledgement point when it fills, so
/// without a lagging checkpoint it never grows and recording allocates nothing; a
/// checkpoint that lags by more doubles it.
#[derive(Debug)]
pub(crate) struct HoldRing {
    /// A power of two, at least twice the queue's capacity; indexed by position & mask.
    slots: Box<[u64]>,
    mask: u64,
    /// The first position still kept.
    base: u64,
    /// The next position to record.
    end: u64,
}

impl HoldRing {
    pub(crate) fn new(capacity: usize) -> Self {
        let size = (capacity.max(1) * 2).next_power_of_two();
        HoldRing {
            slots: vec![0; size].into_boxed_slice(),
            mask: size as u64 - 1,
            base: 0,
            end: 0,
        }
    }

    /// Records the hold of `queue_position`, the next position of the queue.
    #[inline]
    pub(crate) fn set(&mut self, queue_position: u64, holds_from: u64) {
        debug_assert_eq!(queue_position, self.end);
        debug_assert!(self.end - self.base < self.slots.len() as u64);
        self.slots[(queue_position & self.mask) as usize] = holds_from;
        self.end = queue_position + 1;
    }

    /// The hold of `queue_position`; `None` when it was pruned (it was acknowledged).
    #[inline]
    pub(crate) fn get(&self, queue_position: u64) -> Option<u64> {
        (self.base..self.end)
            .contains(&queue_position)
            .then(|| self.slots[(queue_position & self.mask) as usize])
    }

    /// True when the ring is full: prune (or grow) it before the next is recorded.
    #[inline]
    pub(crate) fn wants_pruning(&self) -> bool {
        self.room() == 0
    }

    /// Positions that can be recorded before the ring must be pruned (or grown).
    #[inline]
    pub(crate) fn room(&self) -> u64 {
        self.slots.len() as u64 - self.len()
    }

    /// Forgets the holds of positions below `queue_position`.
    pub(crate) fn prune_below(&mut self, queue_position: u64) {
        self.base = self.base.max(queue_position.min(self.end));
    }

    /// How many holds are kept.
    #[inline]
    pub(crate) fn len(&self) -> u64 {
        self.end - self.base
    }

    /// Doubles the ring (a checkpoint lags by more than it holds), keeping every hold.
    #[cold]
    pub(crate) fn grow(&mut self) {
        let size = self.slots.len() * 2;
        let mask = size as u64 - 1;
        let mut slots = vec![0; size].into_boxed_slice();
        for position in self.base..self.end {
            slots[(position & mask) as usize] = self.slots[(position & self.mask) as usize];
        }
        self.slots = slots;
        self.mask = mask;
    }
}

/// The acknowledgement point of one queue: every item with a sequence at or below the
/// returned value that was offered to the queue has been dispatched (and is durable,
/// under a checkpoint hold). `u64::MAX` when the queue holds nothing.
pub(crate) fn done_through(
    shared: &QueueShared,
    produced: u64,
    holds: &HoldRing,
    durable: u64,
) -> u64 {
    // dispatched first: the reader writes a hold before it counts the held item
    let done = shared
        .dispatched()
        .min(durable)
        .min(shared.held_from.load(Ordering::Acquire));
    if done >= produced {
        u64::MAX
    } else {
        // a pruned hold was below an earlier acknowledgement point: nothing new
        holds
            .get(done)
            .map_or(0, |holds_from| holds_from.saturating_sub(1))
    }
}

/// Overload health of one group's queue on a feed.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OverloadState {
    /// No loss (or recovered after the quiet period).
    #[default]
    Up,
    /// DROP_AFTER_SPIN lost items; recovers after the quiet period without loss.
    Degraded,
    /// A never-drop policy (BLOCK, PAUSE) lost an item: latched until cleared.
    Latched,
    /// The queue was unsubscribed while latched; the latch is kept for a re-add.
    Removed,
}

impl OverloadState {
    /// The state as the status JSON spells it (`UP`, `DEGRADED`, `LATCHED`, `REMOVED`).
    pub fn as_str(self) -> &'static str {
        match self {
            OverloadState::Up => "UP",
            OverloadState::Degraded => "DEGRADED",
            OverloadState::Latched => "LATCHED",
            OverloadState::Removed => "REMOVED",
        }
    }
}

/// A change of one group queue's [`OverloadState`], told to the feed's overload
/// observers ([`crate::Publisher::observe_overload`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OverloadChange {
    /// The feed.
    pub feed: String,
    /// The subscriber group whose queue changed.
    pub group: String,
    /// The state before.
    pub from: OverloadState,
    /// The state after.
    pub to: OverloadState,
    /// What changed it (`loss`, `refused`, `unsubscribed`, `re-added`, `cleared`,
    /// `quiet period`).
    pub cause: &'static str,
}

/// Told of every [`OverloadChange`] of a feed, under the feed's publish lock: it must
/// be quick, must not block and must not call back into the feed. It returns `false`
/// to be removed (its listener is gone).
pub type OverloadObserver = std::sync::Arc<dyn Fn(&OverloadChange) -> bool + Send + Sync>;

/// The first drop of a queue binding: a correlation point, not one record per loss.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DropEvidence {
    /// The feed.
    pub feed: String,
    /// The queue.
    pub queue: String,
    /// The subscriber group.
    pub group: String,
    /// The sequence of the first dropped item.
    pub sequence: u64,
    /// Drops of this binding when the evidence was taken (1).
    pub count: u64,
    /// Wall-clock milliseconds since the Unix epoch.
    pub wall_clock_millis: u64,
}

/// The publisher's side of one queue.
pub(crate) struct Binding<T> {
    pub(crate) shared: Arc<QueueShared>,
    pub(crate) producer: rtrb::Producer<QueueEntry<T>>,
    pub(crate) produced: u64,
    /// Slots known to be free: free space only grows behind the publisher's back, so
    /// the ring's shared head is read only when this runs out.
    pub(crate) known_free: usize,
    /// Free slots a paused positioned feed waits for before it publishes again, so a
    /// source and a slow reader do not hand the last slot back and forth.
    pub(crate) resume_at: usize,
    pub(crate) holds: HoldRing,
    pub(crate) settings: OverloadSettings,
    /// True when the group's override or the feed's explicit policy set it.
    pub(crate) explicit: bool,
    pub(crate) subscriptions: Vec<SubscriptionId>,
    pub(crate) hold: Option<Arc<HoldCell>>,
    pub(crate) dropped: u64,
    pub(crate) refused: u64,
    pub(crate) first_drop: Option<DropEvidence>,
    /// The `subscribed` line was logged with the queue's policy; a queue that takes the
    /// feed's default before its source said what that is (PAUSE for a re-readable
    /// source) logs it once the source started.
    pub(crate) announced: bool,
}

impl<T> std::fmt::Debug for Binding<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Binding")
            .field("queue", &self.shared.name)
            .field("produced", &self.produced)
            .field("dispatched", &self.shared.dispatched())
            .field("policy", &self.settings.policy)
            .finish()
    }
}

impl<T> Binding<T> {
    pub(crate) fn has_room(&mut self) -> bool {
        if self.known_free == 0 {
            self.known_free = self.producer.slots();
        }
        self.known_free > 0
    }

    /// True when at least `needed` slots are free.
    #[inline]
    pub(crate) fn has_room_for(&mut self, needed: usize) -> bool {
        if self.known_free < needed {
            self.known_free = self.producer.slots();
        }
        self.known_free >= needed
    }

    /// Reads the ring's free space without caching (for `&self` checks).
    pub(crate) fn room_now(&self) -> bool {
        self.known_free > 0 || self.producer.slots() > 0
    }

    pub(crate) fn done_through(&self) -> u64 {
        let durable = self
            .hold
            .as_ref()
            .map_or(u64::MAX, |hold| hold.durable_for(self.shared.id));
        done_through(&self.shared, self.produced, &self.holds, durable)
    }

    /// Forgets the holds below the acknowledgement point (dispatched and durable). A
    /// positioned feed keeps at most its window's worth of unacknowledged items, which
    /// bounds what a lagging checkpoint keeps; past that bound (a checkpoint on a feed
    /// without positions, which acknowledges nothing) holds below `dispatched` go too.
    #[cold]
    pub(crate) fn prune_holds(&mut self) {
        let durable = self
            .hold
            .as_ref()
            .map_or(u64::MAX, |hold| hold.durable_for(self.shared.id));
        let dispatched = self.shared.dispatched();
        let held = self.shared.held_from.load(Ordering::Acquire);
        self.holds.prune_below(dispatched.min(durable).min(held));
        if !self.holds.wants_pruning() {
            return;
        }
        let capacity = self.producer.buffer().capacity() as u64;
        let bound = capacity + crate::window::MAX_PENDING_ACKNOWLEDGEMENTS as u64;
        if self.holds.len() >= bound {
            self.holds.prune_below(dispatched);
        } else {
            self.holds.grow();
        }
    }

    /// Pushes into the ring, which the caller checked has room.
    #[inline]
    pub(crate) fn push(
        &mut self,
        entry: QueueEntry<T>,
        holds_from: u64,
    ) -> Result<(), QueueEntry<T>> {
        match self.producer.push(entry) {
            Ok(()) => {
                self.holds.set(self.produced, holds_from);
                self.produced += 1;
                if self.holds.wants_pruning() {
                    self.prune_holds();
                }
                self.known_free = self.known_free.saturating_sub(1);
                Ok(())
            }
            Err(rtrb::PushError::Full(entry)) => Err(entry),
        }
    }
}

/// A removed queue's acknowledgement point, kept while the window waits for it: what
/// the removed consumer was given and did not process is never acknowledged.
#[derive(Debug)]
pub(crate) struct RetainedPoint {
    pub(crate) shared: Arc<QueueShared>,
    pub(crate) produced: u64,
    pub(crate) holds: HoldRing,
    /// Under a checkpoint hold, what was durable when the queue was removed: the rest
    /// of its items are not known durable and stay held.
    pub(crate) durable: u64,
}

impl RetainedPoint {
    pub(crate) fn done_through(&self) -> u64 {
        done_through(&self.shared, self.produced, &self.holds, self.durable)
    }

    pub(crate) fn backlog(&self) -> u64 {
        let held = self.shared.held_from.load(Ordering::Acquire);
        self.produced
            .saturating_sub(self.shared.dispatched().min(held))
    }
}

/// A health record of one group's queue on a feed, kept across unsubscribe.
#[derive(Clone, Debug)]
pub(crate) struct HealthRecord {
    pub(crate) state: OverloadState,
    pub(crate) last_loss: Option<Instant>,
    pub(crate) latched_while_removed: bool,
}

impl Default for HealthRecord {
    fn default() -> Self {
        HealthRecord {
            state: OverloadState::Up,
            last_loss: None,
            latched_while_removed: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::QueueEntry;

    #[test]
    fn an_entry_of_a_small_item_is_forty_bytes() {
        // the tag and the lane share a word; the item, sequence, epoch and offset follow
        assert_eq!(std::mem::size_of::<QueueEntry<u64>>(), 40);
    }
}
