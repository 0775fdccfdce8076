//! The delivery of a positioned item to a processor: [`Delivery`], the thread-local
//! [`DeliveryContext`] and its delivery-complete hook.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::position::{Epoch, Position, PositionValue};

/// At most this many completion registrations per delivery; past it
/// [`DeliveryContext::on_complete`] returns `false`, so a callback that registers itself
/// fails instead of spinning.
pub const MAX_COMPLETIONS_PER_DELIVERY: usize = 65_536;

/// Identifies a processor registration within its group (its generation). The
/// dispatcher sets the current one while a processor handles an item, so a completion
/// registered then belongs to it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub struct ProcessorId(pub u64);

/// Names one delivery-complete callback of a processor. A processor passes the key to
/// [`DeliveryContext::on_complete`] and receives it back in
/// [`crate::Processor::on_delivery_complete`]. Registering the same key again while it
/// is pending keeps it once.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub struct CompletionKey(pub u32);

impl CompletionKey {
    /// A conventional key for "save my state and position".
    pub const SAVE: CompletionKey = CompletionKey(0);
}

/// Where the item being processed came from: its feed, this run's publish sequence, the
/// source's epoch and position, and how many times its dispatch has failed before.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Delivery {
    feed: Arc<str>,
    sequence: u64,
    epoch: Epoch,
    position: PositionValue,
    attempt: u32,
}

impl Delivery {
    /// A delivery record (engines and replay build these; processors read them).
    pub fn new(
        feed: Arc<str>,
        sequence: u64,
        epoch: Epoch,
        position: PositionValue,
        attempt: u32,
    ) -> Self {
        Delivery {
            feed,
            sequence,
            epoch,
            position,
            attempt,
        }
    }

    /// The feed the item was published on.
    pub fn feed(&self) -> &str {
        &self.feed
    }

    /// The feed's name, shared (no copy of the text).
    pub fn feed_arc(&self) -> &Arc<str> {
        &self.feed
    }

    /// This run's publish sequence (restarts at 1 with the server: never store it).
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// The source's position space.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The source's position after the item (a file's byte offset after the line).
    pub fn position(&self) -> PositionValue {
        self.position
    }

    /// The lane of the position: the file of a many-file (glob) feed, a partition; 0
    /// for a source with one stream. Positions compare only within a lane
    /// ([`Delivery::already_applied`]): keep one saved position per lane.
    pub fn lane(&self) -> u32 {
        self.position.lane
    }

    /// How many dispatches of this item failed before this one (0 on the first).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// True when a state saved at `(stored_epoch, stored_position)` already contains
    /// this item: the same epoch, the same lane and a position at or before the stored
    /// one. False for any other epoch: after a reset, new lines are applied.
    pub fn already_applied(&self, stored_epoch: Epoch, stored_position: impl Position) -> bool {
        let stored = stored_position.value();
        self.epoch == stored_epoch
            && self.position.lane == stored.lane
            && self.position.offset <= stored.offset
    }
}

/// The current delivery as [`DeliveryContext::with_current`] lends it: the same parts
/// as a [`Delivery`], the feed name borrowed.
#[derive(Clone, Copy, Debug)]
pub struct DeliveryRef<'a> {
    /// The feed the item was published on (the engine's shared name).
    pub feed: &'a Arc<str>,
    /// This run's publish sequence.
    pub sequence: u64,
    /// The source's epoch.
    pub epoch: Epoch,
    /// The source position.
    pub position: PositionValue,
    /// How many dispatches of the item failed before this one.
    pub attempt: u32,
}

#[derive(Clone, Copy, Debug)]
struct Registration {
    owner: Option<ProcessorId>,
    key: CompletionKey,
}

/// The delivery part of the thread's context ([`crate::context`]).
pub(crate) struct DeliveryState {
    active: Cell<bool>,
    feed: RefCell<Option<Arc<str>>>,
    sequence: Cell<u64>,
    epoch: Cell<Epoch>,
    position: Cell<PositionValue>,
    attempt: Cell<u32>,
    processor: Cell<Option<ProcessorId>>,
    registrations: RefCell<Vec<Registration>>,
    /// False while `registrations` is certainly empty: the hot path then never borrows it.
    any_registration: Cell<bool>,
    ran: Cell<usize>,
    registered: Cell<usize>,
    refused: Cell<usize>,
}

impl DeliveryState {
    /// No delivery, no processor.
    pub(crate) const fn new() -> Self {
        DeliveryState {
            active: Cell::new(false),
            feed: RefCell::new(None),
            sequence: Cell::new(0),
            epoch: Cell::new(Epoch::NONE),
            position: Cell::new(PositionValue { lane: 0, offset: 0 }),
            attempt: Cell::new(0),
            processor: Cell::new(None),
            registrations: RefCell::new(Vec::new()),
            any_registration: Cell::new(false),
            ran: Cell::new(0),
            registered: Cell::new(0),
            refused: Cell::new(0),
        }
    }
}

/// Calls `f` with this thread's delivery state.
#[inline]
fn with_state<R>(f: impl FnOnce(&DeliveryState) -> R) -> R {
    crate::context::with(|context| f(&context.delivery))
}

/// The delivery being processed on this thread, if the item has a source position.
///
/// A processor group's reader enters the context for each positioned item's whole
/// dispatch (every handler, every reentrant event, the completion callbacks) and clears
/// it after. It is `None` for items without a position, timers and service callbacks.
#[derive(Debug)]
pub struct DeliveryContext {
    _private: (),
}

impl DeliveryContext {
    /// The current delivery, or `None` when this thread handles no positioned item.
    pub fn current() -> Option<Delivery> {
        with_state(|state| {
            if !state.active.get() {
                return None;
            }
            let feed = state.feed.borrow().clone()?;
            Some(Delivery {
                feed,
                sequence: state.sequence.get(),
                epoch: state.epoch.get(),
                position: state.position.get(),
                attempt: state.attempt.get(),
            })
        })
    }

    /// Calls `f` with the current delivery, its feed name borrowed: unlike
    /// [`DeliveryContext::current`] it touches no reference count, for code that runs
    /// per item (an output writer). `None` when this thread handles no positioned item.
    ///
    /// ```
    /// use mongoose_core::DeliveryContext;
    ///
    /// // no positioned item is being handled on this thread
    /// assert_eq!(DeliveryContext::with_current(|delivery| delivery.sequence), None);
    /// ```
    pub fn with_current<R>(f: impl FnOnce(DeliveryRef<'_>) -> R) -> Option<R> {
        with_state(|state| {
            if !state.active.get() {
                return None;
            }
            let feed = state.feed.borrow();
            let feed = feed.as_ref()?;
            Some(f(DeliveryRef {
                feed,
                sequence: state.sequence.get(),
                epoch: state.epoch.get(),
                position: state.position.get(),
                attempt: state.attempt.get(),
            }))
        })
    }

    /// The current position only, without touching the feed name.
    pub fn current_position() -> Option<(Epoch, PositionValue)> {
        with_state(|state| {
            state
                .active
                .get()
                .then(|| (state.epoch.get(), state.position.get()))
        })
    }

    /// True while this thread handles a positioned item.
    pub fn is_active() -> bool {
        with_state(|state| state.active.get())
    }

    /// Asks for [`crate::Processor::on_delivery_complete`] with `key` once the current
    /// delivery is complete: after every processor's dispatch of the item (including
    /// the events they queued reentrantly) and before the feed can acknowledge or
    /// commit it.
    ///
    /// Returns `false`, keeping nothing, when no positioned item is being handled (the
    /// caller then does its work itself), or when the delivery already has
    /// [`MAX_COMPLETIONS_PER_DELIVERY`] registrations. The same key registered again by
    /// the same processor while pending is kept once; a pending key registered with no
    /// current processor is claimed by the first processor that registers it again.
    pub fn on_complete(key: CompletionKey) -> bool {
        with_state(|state| {
            if !state.active.get() {
                return false;
            }
            let owner = state.processor.get();
            let mut registrations = state.registrations.borrow_mut();
            let ran = state.ran.get().min(registrations.len());
            for pending in registrations[ran..].iter_mut() {
                if pending.key != key {
                    continue;
                }
                if pending.owner == owner {
                    return true;
                }
                if pending.owner.is_none() && owner.is_some() {
                    pending.owner = owner;
                    return true;
                }
            }
            if state.registered.get() >= MAX_COMPLETIONS_PER_DELIVERY {
                state.refused.set(state.refused.get() + 1);
                return false;
            }
            state.registered.set(state.registered.get() + 1);
            registrations.push(Registration { owner, key });
            state.any_registration.set(true);
            true
        })
    }
}

#[inline]
fn clear_registrations(state: &DeliveryState) {
    if state.any_registration.get() {
        state.registrations.borrow_mut().clear();
        state.any_registration.set(false);
    }
    state.ran.set(0);
    state.registered.set(0);
}

/// Engine-side access to the delivery context: entering and leaving a delivery, the
/// current processor, and running completions. Processor code never calls these, and
/// they are not a stable API: the module is hidden from the documentation. A
/// [`Dispatcher`](../../mongoose_delivery/trait.Dispatcher.html) implementor needs only
/// [`PendingCompletion`](crate::PendingCompletion), re-exported at the crate root.
#[doc(hidden)]
pub mod engine {
    use std::marker::PhantomData;

    use super::*;

    /// A delivery entered on this thread ([`enter`]): left (the context cleared, pending
    /// completions that did not run discarded) when dropped. Not `Send`: the context is
    /// the thread's.
    #[must_use = "the delivery is left as soon as the guard is dropped"]
    #[derive(Debug)]
    pub struct Entered {
        _thread_bound: PhantomData<*const ()>,
    }

    impl Drop for Entered {
        #[inline]
        fn drop(&mut self) {
            exit();
        }
    }

    /// The current processor set on this thread ([`processor_scope`]): the previous one
    /// is restored when dropped, also when the call it covers panics.
    #[must_use = "the previous processor is restored as soon as the guard is dropped"]
    #[derive(Debug)]
    pub struct ProcessorScope {
        previous: Option<ProcessorId>,
        _thread_bound: PhantomData<*const ()>,
    }

    impl Drop for ProcessorScope {
        #[inline]
        fn drop(&mut self) {
            with_state(|state| state.processor.set(self.previous));
        }
    }

    /// Makes `processor` the current one until the returned scope is dropped.
    #[inline]
    pub fn processor_scope(processor: Option<ProcessorId>) -> ProcessorScope {
        ProcessorScope {
            previous: set_current_processor(processor),
            _thread_bound: PhantomData,
        }
    }

    /// A pending completion: who registered it and its key.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub struct PendingCompletion {
        /// The processor that registered it (`None`: registered with no current one).
        pub owner: Option<ProcessorId>,
        /// The key it registered.
        pub key: CompletionKey,
    }

    /// Completions saved across duty cycles while a delivery waits for a retry.
    #[derive(Default, Debug)]
    pub struct SavedCompletions {
        registrations: Vec<(Option<ProcessorId>, CompletionKey)>,
        ran: usize,
        registered: usize,
    }

    impl SavedCompletions {
        /// True when nothing is saved.
        pub fn is_empty(&self) -> bool {
            self.registrations.len() <= self.ran
        }
    }

    /// Enters a positioned delivery on this thread. The feed name is cloned only when
    /// it differs from the last one entered (no per-item reference counting).
    #[inline]
    pub fn enter(
        feed: &Arc<str>,
        sequence: u64,
        epoch: Epoch,
        position: PositionValue,
        attempt: u32,
    ) -> Entered {
        with_state(|state| {
            {
                let mut current = state.feed.borrow_mut();
                let same = current.as_ref().is_some_and(|held| Arc::ptr_eq(held, feed));
                if !same {
                    *current = Some(Arc::clone(feed));
                }
            }
            state.sequence.set(sequence);
            state.epoch.set(epoch);
            state.position.set(position);
            state.attempt.set(attempt);
            clear_registrations(state);
            state.active.set(true);
        });
        Entered {
            _thread_bound: PhantomData,
        }
    }

    /// Enters a recorded delivery (replay).
    pub fn enter_delivery(delivery: &Delivery) -> Entered {
        enter(
            &delivery.feed,
            delivery.sequence,
            delivery.epoch,
            delivery.position,
            delivery.attempt,
        )
    }

    /// Updates the attempt count of the current delivery (a retry).
    pub fn set_attempt(attempt: u32) {
        with_state(|state| state.attempt.set(attempt))
    }

    /// Leaves the delivery: the context is cleared and pending completions that did not
    /// run are discarded (a delivery that ends without completing runs none).
    #[inline]
    fn exit() {
        with_state(|state| {
            state.active.set(false);
            clear_registrations(state);
        })
    }

    /// Sets the processor being dispatched (or none); returns the previous one. The
    /// engine's code calls it only through [`processor_scope`], whose drop restores
    /// the previous processor also when the call it covers panics: use that.
    pub fn set_current_processor(processor: Option<ProcessorId>) -> Option<ProcessorId> {
        with_state(|state| state.processor.replace(processor))
    }

    /// The processor being dispatched, if any.
    pub fn current_processor() -> Option<ProcessorId> {
        with_state(|state| state.processor.get())
    }

    /// Takes the next completion to run, in registration order, including completions
    /// a running completion registered. Once taken it is no longer pending: registering
    /// it again (from its own run) queues it again, so a callback that keeps
    /// registering itself meets [`MAX_COMPLETIONS_PER_DELIVERY`] instead of spinning.
    #[inline]
    pub fn take_next_completion() -> Option<PendingCompletion> {
        with_state(|state| {
            if !state.any_registration.get() {
                return None;
            }
            let registrations = state.registrations.borrow();
            let next = registrations
                .get(state.ran.get())
                .map(|found| PendingCompletion {
                    owner: found.owner,
                    key: found.key,
                });
            if next.is_some() {
                state.ran.set(state.ran.get() + 1);
            }
            next
        })
    }

    /// Number of completions registered and not yet run.
    pub fn pending_completions() -> usize {
        with_state(|state| {
            state
                .registrations
                .borrow()
                .len()
                .saturating_sub(state.ran.get())
        })
    }

    /// Registrations refused by the per-delivery cap on this thread so far.
    pub fn refused_registrations() -> usize {
        with_state(|state| state.refused.get())
    }

    /// Discards the pending completions a failed dispatch leaves behind: those of the
    /// failing processor and those registered with no current processor; all of them
    /// when the failing processor is not known.
    pub fn discard_completions_of(failing: Option<ProcessorId>) {
        with_state(|state| {
            let ran = state.ran.get();
            let mut registrations = state.registrations.borrow_mut();
            let mut index = 0;
            registrations.retain(|registration| {
                let keep = index < ran
                    || (failing.is_some()
                        && registration.owner.is_some()
                        && registration.owner != failing);
                index += 1;
                keep
            });
        })
    }

    /// Moves the pending completions out of the context, to resume them on a later
    /// duty cycle (a completion that failed and waits for its retry).
    pub fn save_completions(into: &mut SavedCompletions) {
        with_state(|state| {
            into.registrations.clear();
            into.registrations.extend(
                state
                    .registrations
                    .borrow()
                    .iter()
                    .map(|found| (found.owner, found.key)),
            );
            into.ran = state.ran.get();
            into.registered = state.registered.get();
        })
    }

    /// Puts saved completions back after [`enter`] for the retry.
    pub fn restore_completions(from: &mut SavedCompletions) {
        with_state(|state| {
            let mut registrations = state.registrations.borrow_mut();
            registrations.clear();
            registrations.extend(
                from.registrations
                    .drain(..)
                    .map(|(owner, key)| Registration { owner, key }),
            );
            state.any_registration.set(!registrations.is_empty());
            state.ran.set(from.ran);
            state.registered.set(from.registered);
            from.ran = 0;
            from.registered = 0;
        })
    }
}

impl fmt::Display for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}#{} epoch {} position {} attempt {}",
            self.feed, self.sequence, self.epoch, self.position, self.attempt
        )
    }
}

#[cfg(test)]
mod tests {
    use super::engine::*;
    use super::*;

    fn feed() -> Arc<str> {
        Arc::from("lines")
    }

    #[test]
    fn outside_a_delivery_there_is_no_context_and_no_completion() {
        assert!(DeliveryContext::current().is_none());
        assert!(!DeliveryContext::on_complete(CompletionKey(1)));
        assert_eq!(pending_completions(), 0);
    }

    #[test]
    fn the_context_holds_the_delivery_until_exit() {
        let feed = feed();
        let entered = enter(&feed, 4, Epoch(9), PositionValue::at(120), 0);
        let delivery = DeliveryContext::current().expect("entered");
        assert_eq!(delivery.feed(), "lines");
        assert_eq!(delivery.sequence(), 4);
        assert_eq!(delivery.epoch(), Epoch(9));
        assert_eq!(delivery.position(), PositionValue::at(120));
        assert_eq!(
            DeliveryContext::current_position(),
            Some((Epoch(9), PositionValue::at(120)))
        );
        drop(entered);
        assert!(DeliveryContext::current().is_none());
    }

    #[test]
    fn already_applied_needs_the_same_epoch_and_a_position_at_or_before() {
        let delivery = Delivery::new(feed(), 1, Epoch(2), PositionValue::at(10), 0);
        assert!(delivery.already_applied(Epoch(2), 10u64));
        assert!(delivery.already_applied(Epoch(2), 11u64));
        assert!(!delivery.already_applied(Epoch(2), 9u64));
        assert!(!delivery.already_applied(Epoch(3), 100u64));
        assert!(!delivery.already_applied(Epoch(2), (1u32, 100u64)));
        assert_eq!(delivery.lane(), 0);
        let laned = Delivery::new(feed(), 2, Epoch(2), PositionValue { lane: 3, offset: 7 }, 0);
        assert_eq!(laned.lane(), 3);
        assert!(laned.already_applied(Epoch(2), (3u32, 7u64)));
        assert!(!laned.already_applied(Epoch(2), (2u32, 70u64)));
    }

    #[test]
    fn a_pending_key_is_kept_once_per_owner_and_distinct_keys_keep_their_order() {
        let feed = feed();
        let entered = enter(&feed, 1, Epoch(1), PositionValue::at(1), 0);
        set_current_processor(Some(ProcessorId(1)));
        assert!(DeliveryContext::on_complete(CompletionKey(5)));
        assert!(DeliveryContext::on_complete(CompletionKey(6)));
        assert!(DeliveryContext::on_complete(CompletionKey(5)));
        set_current_processor(Some(ProcessorId(2)));
        assert!(DeliveryContext::on_complete(CompletionKey(5)));
        set_current_processor(None);
        let mut order = Vec::new();
        while let Some(next) = take_next_completion() {
            order.push((next.owner, next.key));
        }
        assert_eq!(
            order,
            vec![
                (Some(ProcessorId(1)), CompletionKey(5)),
                (Some(ProcessorId(1)), CompletionKey(6)),
                (Some(ProcessorId(2)), CompletionKey(5)),
            ]
        );
        drop(entered);
    }

    #[test]
    fn an_unowned_registration_is_claimed_by_the_first_processor_registering_it_again() {
        let feed = feed();
        let entered = enter(&feed, 1, Epoch(1), PositionValue::at(1), 0);
        set_current_processor(None);
        assert!(DeliveryContext::on_complete(CompletionKey(1)));
        set_current_processor(Some(ProcessorId(3)));
        assert!(DeliveryContext::on_complete(CompletionKey(1)));
        // the claim moved the owner: a failure of another processor keeps it
        discard_completions_of(Some(ProcessorId(4)));
        assert_eq!(
            take_next_completion(),
            Some(PendingCompletion {
                owner: Some(ProcessorId(3)),
                key: CompletionKey(1)
            })
        );
        set_current_processor(None);
        drop(entered);
    }

    #[test]
    fn a_failure_discards_the_failing_processors_and_unowned_completions() {
        let feed = feed();
        let entered = enter(&feed, 1, Epoch(1), PositionValue::at(1), 0);
        set_current_processor(Some(ProcessorId(1)));
        DeliveryContext::on_complete(CompletionKey(1));
        set_current_processor(Some(ProcessorId(2)));
        DeliveryContext::on_complete(CompletionKey(2));
        set_current_processor(None);
        DeliveryContext::on_complete(CompletionKey(3));
        discard_completions_of(Some(ProcessorId(2)));
        assert_eq!(pending_completions(), 1);
        assert_eq!(pending_completions(), 1);
        discard_completions_of(None);
        assert_eq!(pending_completions(), 0);
        drop(entered);
    }

    #[test]
    fn the_cap_refuses_registrations_past_it() {
        let feed = feed();
        let entered = enter(&feed, 1, Epoch(1), PositionValue::at(1), 0);
        set_current_processor(Some(ProcessorId(1)));
        // a callback that registers itself again each time it runs
        assert!(DeliveryContext::on_complete(CompletionKey(1)));
        let mut runs = 0;
        let before = refused_registrations();
        while take_next_completion().is_some() {
            runs += 1;
            if !DeliveryContext::on_complete(CompletionKey(1)) {
                break;
            }
        }
        assert_eq!(runs, MAX_COMPLETIONS_PER_DELIVERY);
        assert_eq!(refused_registrations(), before + 1);
        set_current_processor(None);
        drop(entered);
    }

    #[test]
    fn saved_completions_resume_where_they_stopped() {
        let feed = feed();
        let entered = enter(&feed, 1, Epoch(1), PositionValue::at(1), 0);
        set_current_processor(Some(ProcessorId(1)));
        DeliveryContext::on_complete(CompletionKey(1));
        DeliveryContext::on_complete(CompletionKey(2));
        assert_eq!(
            take_next_completion().map(|c| c.key),
            Some(CompletionKey(1))
        );
        let mut saved = SavedCompletions::default();
        save_completions(&mut saved);
        drop(entered);
        assert!(!saved.is_empty());
        let entered = enter(&feed, 1, Epoch(1), PositionValue::at(1), 1);
        restore_completions(&mut saved);
        assert_eq!(
            take_next_completion().map(|c| c.key),
            Some(CompletionKey(2))
        );
        set_current_processor(None);
        drop(entered);
    }
}
