//! Dispatch: how a queue's items reach the processors subscribed to it.
//!
//! One vocabulary serves every layer:
//!
//! - a queue reader (the delivery engine's) gives each item to a [`Dispatcher<T>`] and
//!   applies its [`DispatchOutcome`] under a [`RetryPolicy`], reporting the items
//!   dropped for its queue as [`DroppedRun`]s;
//! - a processor group cannot name the item types of the feeds it reads, so it is a
//!   `Dispatcher<dyn Offer>`: each item comes to it as an [`Offer`], the item together
//!   with the typed handlers its processors subscribed ([`Subscribers<T>`]). The group
//!   asks the offer to call processor `index`'s handler; the handler is typed, so the
//!   only conversion on the way is the one from `dyn Processor` to the processor's own
//!   type, inside the handler;
//! - a [`GroupReader`] is a group's binding to one feed (its queue's reader and its
//!   subscribers), made by the feed, which knows `T`, and held erased by the group.
//!
//! ```
//! use mongoose_core::dispatch::{DispatchOutcome, Dispatcher, Offer, Subscribers};
//! use mongoose_core::{
//!     Delivery, ErasedHandler, Handler, PendingCompletion, Processor, ProcessorError,
//!     ProcessorId,
//! };
//!
//! struct Total(u64);
//! impl Processor for Total {}
//!
//! // what `StartContext::subscribe` makes of a processor's handler method
//! let handler: Handler<u64> = Box::new(|processor: &mut dyn Processor, item: &u64| {
//!     let total = (processor as &mut dyn std::any::Any).downcast_mut::<Total>().unwrap();
//!     total.0 += item;
//!     Ok(())
//! });
//! let mut subscribers = Subscribers::<u64>::new();
//! subscribers.add(ProcessorId(1), ErasedHandler::new(handler)).unwrap();
//!
//! // a group: it never names u64
//! struct Group(Total);
//! impl Dispatcher<dyn Offer + '_> for Group {
//!     fn dispatch(&mut self, offer: &(dyn Offer + '_), _attempt: u32) -> DispatchOutcome {
//!         for index in 0..offer.len() {
//!             offer.call(index, &mut self.0).unwrap();
//!         }
//!         DispatchOutcome::Done
//!     }
//!     fn complete(&mut self, _: PendingCompletion, _: &Delivery) -> Result<(), ProcessorError> {
//!         Ok(())
//!     }
//! }
//!
//! let mut group = Group(Total(0));
//! let mut typed = subscribers.dispatcher(&mut group);
//! typed.dispatch(&5, 0);
//! typed.dispatch(&7, 0);
//! assert_eq!(group.0 .0, 12);
//! ```

use std::any::{Any, TypeId};
use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::delivery::engine::PendingCompletion;
use crate::delivery::{Delivery, ProcessorId};
use crate::error::ProcessorError;
use crate::processor::{Handler, Processor};
use crate::source::SourceState;

/// How often a failed dispatch (of a retry-safe processor) or a failed completion
/// callback is retried, and how long to wait between tries. The wait never sleeps: the
/// item stays at the head of its queue and is tried again on a later duty cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first failure (0: never retried).
    pub max_retries: u32,
    /// The wait before the first retry; doubled for each further one.
    pub initial_backoff: Duration,
    /// The longest wait.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_secs(1),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (1-based): the initial backoff doubled per
    /// retry, at most the longest.
    pub fn backoff(&self, retry: u32) -> Duration {
        doubling_backoff(self.initial_backoff, self.max_backoff, retry)
    }
}

/// `initial` doubled per retry after the first (`retry` is 1-based), at most `max`.
pub(crate) fn doubling_backoff(initial: Duration, max: Duration, retry: u32) -> Duration {
    let factor = 1u32
        .checked_shl(retry.saturating_sub(1))
        .unwrap_or(u32::MAX);
    initial.saturating_mul(factor).min(max)
}

/// What a dispatch of one item to a queue's processors did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DispatchOutcome {
    /// Every processor handled the item (or was skipped by the dispatcher's own rules).
    Done,
    /// A processor failed. `retry` true: it is retry-safe and should be given the item
    /// again (alone: the dispatcher resumes at it and never gives the item again to the
    /// processors that handled it). `retry` false: the dispatcher quarantined it and
    /// the delivery goes on with the others; the reader holds the feed's position
    /// before the item (the quarantined processor's state does not hold it).
    Failed {
        /// The failing processor, when known.
        processor: Option<ProcessorId>,
        /// Whether it may be retried.
        retry: bool,
    },
    /// A processor cannot take the item now ([`ProcessorError::busy`]): the reader
    /// keeps the item and offers it again a little later, without counting it against
    /// the retry policy, never giving up (the dispatcher resumes at that processor).
    Busy {
        /// The busy processor.
        processor: Option<ProcessorId>,
    },
}

/// Items dropped for one queue between two items it was given: the reader reports the
/// run once it has dispatched everything the queue held before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DroppedRun {
    /// The queue position the run stands before (how many items the queue held before
    /// it).
    pub before: u64,
    /// The first dropped item's sequence.
    pub first_sequence: u64,
    /// The last dropped item's sequence.
    pub last_sequence: u64,
    /// How many items were dropped (sequences between the first and the last that
    /// are not counted were filtered or given to no queue).
    pub count: u64,
}

/// An in-band feed status event, delivered in order with the items.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FeedStatusEvent {
    /// The feed.
    pub feed: String,
    /// The source's state.
    pub state: SourceState,
    /// The last sequence published before the status.
    pub sequence: u64,
}

/// Delivers a queue's items to its processors: implemented by a processor group (as a
/// `Dispatcher<dyn Offer>`) and by tests and benchmarks that read a queue directly.
///
/// `T` is the item type, or `dyn Offer` for a dispatcher that reads feeds of any type.
pub trait Dispatcher<T: ?Sized> {
    /// Delivers `item` to the queue's processors. For a positioned item the delivery
    /// context is entered; `attempt` counts the earlier failed attempts of this item.
    /// Set the current processor ([`crate::engine::processor_scope`]) around each
    /// processor's call, so that the completions it registers belong to it.
    fn dispatch(&mut self, item: &T, attempt: u32) -> DispatchOutcome;

    /// Runs one completion a processor registered (its
    /// [`Processor::on_delivery_complete`]). The context is entered.
    ///
    /// # Errors
    /// The processor's error (the reader retries the completion under its policy).
    fn complete(
        &mut self,
        completion: PendingCompletion,
        delivery: &Delivery,
    ) -> Result<(), ProcessorError>;

    /// An in-band feed status event.
    fn on_status(&mut self, status: &FeedStatusEvent) {
        let _ = status;
    }

    /// The item's dispatch and completion callbacks are over and it is about to count
    /// as dispatched (so the feed may acknowledge and commit it): the last point where
    /// work belonging to the delivery (a recording of it) comes before the commit. The
    /// delivery context is still entered for a positioned item.
    fn finished(&mut self, item: &T) {
        let _ = item;
    }

    /// Items of the feed were dropped for this queue here, before the next item it is
    /// given (overload under DROP_AFTER_SPIN, or a fallback): reported once, in queue
    /// order, so a recording can mark where they were lost.
    fn dropped(&mut self, run: &DroppedRun) {
        let _ = run;
    }

    /// A retry-safe processor's retries for `item` are exhausted: the item is skipped
    /// for it, and the processors after it that have not had it get it now.
    fn gave_up(&mut self, item: &T, processor: Option<ProcessorId>) {
        let _ = (item, processor);
    }

    /// A name for `processor` in the reasons a feed reports (`stalled`).
    fn describe(&self, processor: ProcessorId) -> String {
        format!("processor #{}", processor.0)
    }
}

/// A processor's handler of one feed's items, erased over the item type: what
/// [`crate::StartContext::subscribe`] hands to its group, and what [`Subscribers::add`]
/// turns back into a [`Handler<T>`] (the one check of its type, made when it
/// subscribes).
pub struct ErasedHandler {
    item_type: TypeId,
    item_type_name: &'static str,
    handler: Box<dyn Any + Send>,
}

impl fmt::Debug for ErasedHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ErasedHandler")
            .field("item_type", &self.item_type_name)
            .finish()
    }
}

impl ErasedHandler {
    /// Erases `handler`.
    pub fn new<T: 'static>(handler: Handler<T>) -> Self {
        ErasedHandler {
            item_type: TypeId::of::<T>(),
            item_type_name: std::any::type_name::<T>(),
            handler: Box::new(handler),
        }
    }

    /// The id of the item type it handles.
    pub fn item_type(&self) -> TypeId {
        self.item_type
    }

    /// The name of the item type it handles, for errors.
    pub fn item_type_name(&self) -> &'static str {
        self.item_type_name
    }

    /// The typed handler, or `self` back when it does not handle `T`s.
    ///
    /// # Errors
    /// `self`, when it handles another item type.
    pub fn typed<T: 'static>(self) -> Result<Handler<T>, Self> {
        if self.item_type != TypeId::of::<T>() {
            return Err(self);
        }
        let ErasedHandler {
            item_type,
            item_type_name,
            handler,
        } = self;
        handler
            .downcast::<Handler<T>>()
            .map(|handler| *handler)
            .map_err(|handler| ErasedHandler {
                item_type,
                item_type_name,
                handler,
            })
    }
}

/// The processors of one group subscribed to one feed of `T`s, each with its typed
/// handler, in subscription order.
pub struct Subscribers<T> {
    entries: Vec<(ProcessorId, Handler<T>)>,
}

impl<T> fmt::Debug for Subscribers<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|(id, _)| id))
            .finish()
    }
}

impl<T: 'static> Default for Subscribers<T> {
    fn default() -> Self {
        Subscribers::new()
    }
}

impl<T: 'static> Subscribers<T> {
    /// None.
    pub fn new() -> Self {
        Subscribers {
            entries: Vec::new(),
        }
    }

    /// Adds `processor` with its handler.
    ///
    /// # Errors
    /// An error naming both types when the handler does not take `T`s.
    pub fn add(
        &mut self,
        processor: ProcessorId,
        handler: ErasedHandler,
    ) -> Result<(), ProcessorError> {
        let name = handler.item_type_name();
        let handler = handler.typed::<T>().map_err(|_| {
            ProcessorError::new(format!(
                "the feed carries {}, but the handler takes {name}",
                std::any::type_name::<T>()
            ))
        })?;
        self.entries.push((processor, handler));
        Ok(())
    }

    /// Removes `processor`'s handlers; true when it had one.
    pub fn remove(&mut self, processor: ProcessorId) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(id, _)| *id != processor);
        self.entries.len() != before
    }

    /// Takes every handler out, erased again (to move them to another reader).
    pub fn take(&mut self) -> Vec<(ProcessorId, ErasedHandler)> {
        self.entries
            .drain(..)
            .map(|(id, handler)| (id, ErasedHandler::new(handler)))
            .collect()
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `item` offered to these subscribers.
    pub fn offer<'a>(&'a self, item: &'a T) -> TypedOffer<'a, T> {
        TypedOffer {
            item,
            subscribers: self,
        }
    }

    /// A `Dispatcher<T>` that offers each item to these subscribers through `group`.
    pub fn dispatcher<'a, 'g>(
        &'a self,
        group: &'a mut OfferDispatch<'g>,
    ) -> OfferDispatcher<'a, 'g, T> {
        OfferDispatcher {
            subscribers: self,
            group,
        }
    }
}

/// One item together with the handlers one group's processors subscribed to its feed,
/// erased over the item type: what a group's dispatcher is given.
pub trait Offer {
    /// How many subscribers there are.
    fn len(&self) -> usize;

    /// True when there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The processor of subscriber `index` (in subscription order).
    fn processor(&self, index: usize) -> ProcessorId;

    /// Calls subscriber `index`'s handler with the item, on `processor` (the
    /// processor registered as [`Offer::processor`]`(index)`).
    ///
    /// # Errors
    /// The handler's error; an error when `processor` is not of the type the handler
    /// was subscribed for.
    fn call(&self, index: usize, processor: &mut dyn Processor) -> Result<(), ProcessorError>;

    /// The item, for what copies items of any type (a recorder and its codecs).
    fn item(&self) -> &dyn Any;
}

/// A `T` offered to [`Subscribers<T>`] ([`Subscribers::offer`]).
pub struct TypedOffer<'a, T> {
    item: &'a T,
    subscribers: &'a Subscribers<T>,
}

impl<T> fmt::Debug for TypedOffer<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedOffer")
            .field("subscribers", self.subscribers)
            .finish()
    }
}

impl<T: 'static> Offer for TypedOffer<'_, T> {
    #[inline]
    fn len(&self) -> usize {
        self.subscribers.entries.len()
    }

    #[inline]
    fn processor(&self, index: usize) -> ProcessorId {
        self.subscribers.entries[index].0
    }

    #[inline]
    fn call(&self, index: usize, processor: &mut dyn Processor) -> Result<(), ProcessorError> {
        (self.subscribers.entries[index].1)(processor, self.item)
    }

    fn item(&self) -> &dyn Any {
        self.item
    }
}

/// The `Dispatcher<T>` of [`Subscribers::dispatcher`]: each item goes to the group as
/// an [`Offer`].
pub struct OfferDispatcher<'a, 'g, T> {
    subscribers: &'a Subscribers<T>,
    group: &'a mut OfferDispatch<'g>,
}

/// A dispatcher of [`Offer`]s of any lifetime: a processor group as a
/// [`GroupReader`] polls it.
pub type OfferDispatch<'g> = dyn for<'x> Dispatcher<dyn Offer + 'x> + 'g;

impl<T> fmt::Debug for OfferDispatcher<'_, '_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OfferDispatcher")
            .field("subscribers", self.subscribers)
            .finish()
    }
}

impl<T: 'static> Dispatcher<T> for OfferDispatcher<'_, '_, T> {
    #[inline]
    fn dispatch(&mut self, item: &T, attempt: u32) -> DispatchOutcome {
        self.group.dispatch(&self.subscribers.offer(item), attempt)
    }

    fn complete(
        &mut self,
        completion: PendingCompletion,
        delivery: &Delivery,
    ) -> Result<(), ProcessorError> {
        self.group.complete(completion, delivery)
    }

    fn on_status(&mut self, status: &FeedStatusEvent) {
        self.group.on_status(status);
    }

    #[inline]
    fn finished(&mut self, item: &T) {
        self.group.finished(&self.subscribers.offer(item));
    }

    fn dropped(&mut self, run: &DroppedRun) {
        self.group.dropped(run);
    }

    fn gave_up(&mut self, item: &T, processor: Option<ProcessorId>) {
        self.group.gave_up(&self.subscribers.offer(item), processor);
    }

    fn describe(&self, processor: ProcessorId) -> String {
        self.group.describe(processor)
    }
}

/// A group's binding to one feed: its queue's reader and the handlers its processors
/// subscribed, typed inside, made by the feed (which knows the item type) and held by
/// the group without naming it.
pub trait GroupReader: Send {
    /// Adds `processor`'s handler.
    ///
    /// # Errors
    /// An error naming both types when the handler does not take the feed's items.
    fn add(&mut self, processor: ProcessorId, handler: ErasedHandler)
        -> Result<(), ProcessorError>;

    /// Removes `processor`'s handlers; true when it had one.
    fn remove(&mut self, processor: ProcessorId) -> bool;

    /// Takes every handler out, erased (to move them to a new reader of the feed).
    fn take_handlers(&mut self) -> Vec<(ProcessorId, ErasedHandler)>;

    /// How many handlers it holds.
    fn handlers(&self) -> usize;

    /// Offers up to `limit` items to `dispatcher`; returns how many were taken.
    fn poll(&mut self, dispatcher: &mut OfferDispatch<'_>, limit: usize) -> usize;

    /// Fences the queue (the group is closing): positioned feeds hold.
    fn set_fenced(&mut self, fenced: bool);

    /// Marks the queue's consumer dead (the group died).
    fn mark_dead(&mut self);

    /// `wakeup` wakes the group's thread when the feed publishes to this queue (its
    /// idler's [`crate::Wakeup`]). A reader without it is polled as its group's idle
    /// strategy has it.
    fn set_wakeup(&mut self, _wakeup: std::sync::Arc<crate::Wakeup>) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Sum(u64);
    impl Processor for Sum {}

    fn add_to_sum(processor: &mut dyn Processor, item: &u64) -> Result<(), ProcessorError> {
        let any: &mut dyn Any = processor;
        any.downcast_mut::<Sum>().expect("a Sum").0 += item;
        Ok(())
    }

    #[test]
    fn a_handler_of_another_type_is_refused_naming_both_types() {
        let mut subscribers = Subscribers::<u64>::new();
        let handler: Handler<String> = Box::new(|_, _| Ok(()));
        let error = subscribers
            .add(ProcessorId(1), ErasedHandler::new(handler))
            .expect_err("a String handler on a u64 feed");
        assert!(error.message().contains("u64"), "{error}");
        assert!(error.message().contains("String"), "{error}");
        assert!(subscribers.is_empty());
    }

    #[test]
    fn an_offer_calls_each_subscriber_in_order_and_handlers_move_between_readers() {
        let mut subscribers = Subscribers::<u64>::new();
        for id in [3, 1] {
            let handler: Handler<u64> = Box::new(add_to_sum);
            subscribers
                .add(ProcessorId(id), ErasedHandler::new(handler))
                .expect("typed");
        }
        let offer = subscribers.offer(&4);
        assert_eq!(
            (0..offer.len())
                .map(|i| offer.processor(i))
                .collect::<Vec<_>>(),
            [ProcessorId(3), ProcessorId(1)]
        );
        let mut sum = Sum(0);
        offer.call(1, &mut sum).expect("handled");
        assert_eq!(sum.0, 4);
        assert_eq!(offer.item().downcast_ref::<u64>(), Some(&4));

        let mut moved = Subscribers::<u64>::new();
        for (id, handler) in subscribers.take() {
            moved.add(id, handler).expect("still typed");
        }
        assert!(subscribers.is_empty());
        assert!(moved.remove(ProcessorId(3)));
        assert!(!moved.remove(ProcessorId(3)));
        assert_eq!(moved.len(), 1);
    }

    #[test]
    fn backoff_doubles_up_to_the_longest_wait() {
        let policy = RetryPolicy {
            max_retries: 10,
            initial_backoff: Duration::from_millis(2),
            max_backoff: Duration::from_millis(10),
        };
        assert_eq!(policy.backoff(1), Duration::from_millis(2));
        assert_eq!(policy.backoff(2), Duration::from_millis(4));
        assert_eq!(policy.backoff(4), Duration::from_millis(10));
        assert_eq!(policy.backoff(40), Duration::from_millis(10));
    }
}
