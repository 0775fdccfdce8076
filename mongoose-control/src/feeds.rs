//! How a group reaches feeds: the [`FeedConnector`] it subscribes through.
//!
//! A processor subscribes with a typed handler in [`mongoose_core::Processor::start`]
//! ([`mongoose_core::StartContext::subscribe`]); the group sees it as an
//! [`mongoose_core::ErasedHandler`]. The connector checks it against the feed's item type and hands
//! back, with the group's first subscription to the feed, a
//! [`mongoose_core::GroupReader`]: the group's queue reader with its subscribers'
//! typed handlers, made by the feed, which knows the item type. The group adds each of
//! its processors' handlers to it (the one check of a handler's type) and polls it as a
//! `Dispatcher<dyn Offer>` (see [`mongoose_core::dispatch`]), never naming the type.

use std::any::TypeId;
use std::fmt;
use std::sync::Arc;

use mongoose_core::{GroupReader, RetryPolicy};

use crate::error::ControlError;
use mongoose_audit::ControlAudit;

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
    /// The group's binding to the feed's queue, with a probe of the queue's state:
    /// `Some` for the group's first subscription to the feed, `None` when the group
    /// already reads the queue.
    pub reader: Option<(Box<dyn GroupReader>, PendingProbe)>,
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

    /// What a started processor holds of `feed` (its saved position, what its sink
    /// holds, or nothing of its own), for the feed's source to decide where it resumes
    /// ([`mongoose_core::resume`]). Ignored for an unknown feed.
    fn report_consumer_position(&self, feed: &str, position: mongoose_core::ConsumerPosition) {
        let _ = (feed, position);
    }
}

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
