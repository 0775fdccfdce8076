//! How a group reaches feeds: the [`FeedConnector`] it subscribes through and the
//! [`FeedReader`] it polls, erased over the item type.
//!
//! A processor subscribes with a typed [`mongoose_core::Handler<T>`] in
//! [`mongoose_core::Processor::start`]; the group only sees it as `Box<dyn Any + Send>`.
//! The connector, which knows the feed's item type, hands back a
//! [`HandlerCall`] (`HandlerCall::of::<T>()`) that downcasts the handler and the item, so
//! the group's [`crate::ProcessorHost`]s can call a handler without naming `T`.

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::Arc;

use mongoose_core::engine::PendingCompletion;
use mongoose_core::{Delivery, Handler, Processor, ProcessorError, ProcessorId};

use crate::audit::ControlAudit;
use crate::error::ControlError;
use crate::group::RetryPolicy;
use crate::host::HandlerCall;

/// Calls an erased handler (a `Handler<T>`) with an erased item (a `T`).
pub(crate) type InvokeFn =
    fn(&mut (dyn Any + Send), &mut dyn Processor, &dyn Any) -> Result<(), ProcessorError>;

/// The [`InvokeFn`] for items of type `T`.
///
/// # Errors
/// The handler's own error, or an error when the handler or the item is not of type `T`.
pub(crate) fn invoke_handler<T: 'static>(
    handler: &mut (dyn Any + Send),
    processor: &mut dyn Processor,
    item: &dyn Any,
) -> Result<(), ProcessorError> {
    let Some(handler) = handler.downcast_mut::<Handler<T>>() else {
        return Err(ProcessorError::new(format!(
            "handler is not a Handler<{}>",
            std::any::type_name::<T>()
        )));
    };
    let Some(item) = item.downcast_ref::<T>() else {
        return Err(ProcessorError::new(format!(
            "item is not a {}",
            std::any::type_name::<T>()
        )));
    };
    handler(processor, item)
}

/// What a processor asked to subscribe to.
#[derive(Clone, Copy, Debug)]
pub struct SubscribeRequest<'a> {
    /// The feed's name.
    pub feed: &'a str,
    /// The subscribing group (the queue is per group and feed).
    pub group: &'a str,
    /// The handler's item type.
    pub item_type: TypeId,
    /// Its name, for errors.
    pub item_type_name: &'static str,
    /// The retry policy the group's reader applies to retry-safe failures and failed
    /// completions.
    pub retry: RetryPolicy,
    /// The group's control audit, where a connector that can observe overload states
    /// writes their changes (`OverloadState` records); `None` when there is none.
    pub audit: Option<&'a Arc<ControlAudit>>,
}

/// A subscription made by a [`FeedConnector`].
pub struct FeedBinding {
    /// Identifies the subscription, for [`FeedConnector::unsubscribe`].
    pub subscription: u64,
    /// The group's reader of the feed's queue: `Some` for the group's first
    /// subscription to the feed, `None` when the group already reads the queue.
    pub reader: Option<Box<dyn FeedReader>>,
    /// Calls a handler of this feed's item type.
    pub invoke: HandlerCall,
}

impl fmt::Debug for FeedBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FeedBinding")
            .field("subscription", &self.subscription)
            .field("reader", &self.reader.is_some())
            .finish()
    }
}

/// Subscribes groups to feeds by name (the delivery engine's feed registry, or a test
/// double).
pub trait FeedConnector: Send + Sync {
    /// Subscribes; fails with an error naming the feed (no such feed, a type mismatch
    /// naming both types).
    ///
    /// # Errors
    /// [`ControlError::Subscription`].
    fn subscribe(&self, request: SubscribeRequest<'_>) -> Result<FeedBinding, ControlError>;

    /// Removes a subscription under the delivery engine's removed-consumer rules.
    fn unsubscribe(&self, feed: &str, subscription: u64);

    /// A started processor's saved position for `feed`
    /// ([`mongoose_core::Processor::saved_positions`]), for the feed's source to
    /// reconcile with at start. Ignored for an unknown feed.
    fn report_saved_position(&self, feed: &str, position: mongoose_core::ConsumerPosition) {
        let _ = (feed, position);
    }
}

/// The result of dispatching one item to a group's processors of one feed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum DispatchResult {
    /// Every live processor handled it (a retry-safe one may have been skipped after
    /// its retries): the item goes on to its completions.
    Done,
    /// A processor failed. `retry` true: it is retry-safe; the reader keeps the item
    /// and, under its retry policy, calls [`FeedDispatcher::dispatch`] again with
    /// `attempt + 1` on a later poll (never sleeping), or [`FeedDispatcher::gave_up`]
    /// once retries are spent. `retry` false: it was quarantined and the others had
    /// the item; the reader holds the feed's position before the item (the quarantined
    /// processor's state does not hold it) and ends the poll.
    Failed {
        /// The processor that failed.
        processor: Option<ProcessorId>,
        /// Whether the item is to be retried.
        retry: bool,
    },
}

/// The group side of a poll: called by a [`FeedReader`] for each item.
///
/// Sealed: only a group dispatches (a reader calls it, never implements it), so a type
/// outside this crate cannot implement it:
///
/// ```compile_fail
/// use std::any::Any;
/// use mongoose_control::feeds::{DispatchResult, FeedDispatcher};
/// use mongoose_core::{Delivery, PendingCompletion, ProcessorError, ProcessorId};
///
/// struct NotAGroup;
/// impl FeedDispatcher for NotAGroup {
///     fn dispatch(&mut self, _item: &dyn Any, _attempt: u32) -> DispatchResult {
///         DispatchResult::Done
///     }
///     fn complete(&mut self, _: PendingCompletion, _: &Delivery) -> Result<(), ProcessorError> {
///         Ok(())
///     }
///     fn gave_up(&mut self, _item: &dyn Any, _processor: Option<ProcessorId>) {}
/// }
/// ```
pub trait FeedDispatcher: sealed::Sealed {
    /// Delivers `item` to the queue's processors; `attempt` counts earlier failed
    /// attempts of this item. For a positioned item the delivery context is entered.
    fn dispatch(&mut self, item: &dyn Any, attempt: u32) -> DispatchResult;

    /// Runs one completion a processor registered during the delivery.
    ///
    /// # Errors
    /// The processor's error (the reader retries the completion under its policy).
    fn complete(
        &mut self,
        completion: PendingCompletion,
        delivery: &Delivery,
    ) -> Result<(), ProcessorError>;

    /// A retry-safe processor's retries for `item` are spent: the item is skipped for
    /// it, and the processors after it that have not had it get it now.
    fn gave_up(&mut self, item: &dyn Any, processor: Option<ProcessorId>);

    /// A name for `processor` in the reasons a feed reports (`stalled`).
    fn describe(&self, processor: ProcessorId) -> String {
        format!("processor #{}", processor.0)
    }

    /// The item's dispatch and completions are over; it is about to count as
    /// dispatched (and may then be committed by its feed).
    fn finished(&mut self) {}

    /// Items were dropped for this queue here (reported once, in queue order).
    fn dropped(&mut self, run: &mongoose_delivery::DroppedRun) {
        let _ = run;
    }
}

/// The private supertrait that seals [`FeedDispatcher`]: only this crate's types
/// implement it.
mod sealed {
    /// Implemented by the group's dispatcher alone.
    pub trait Sealed {}
}

pub(crate) use sealed::Sealed;

/// Reads a queue's state from any thread (the group's status and its drain are read
/// off the group's thread, even while it is busy in a handler).
pub trait QueueProbe: Send + Sync {
    /// Items waiting in the queue.
    fn pending(&self) -> usize;
    /// The queue's overload state, if the feed reports one.
    fn overload_state(&self) -> Option<String> {
        None
    }
}

/// A shared [`QueueProbe`].
pub type PendingProbe = Arc<dyn QueueProbe>;

/// A group's reader of one feed's queue.
pub trait FeedReader: Send {
    /// Dispatches up to `limit` items; returns how many were taken.
    fn poll(&mut self, dispatcher: &mut dyn FeedDispatcher, limit: usize) -> usize;
    /// Fences the queue (the group is closing): positioned feeds hold.
    fn set_fenced(&mut self, fenced: bool);
    /// Marks the queue's consumer dead (the group died).
    fn mark_dead(&mut self);
    /// A probe of the queue's state, readable from any thread.
    fn probe(&self) -> PendingProbe;
}
