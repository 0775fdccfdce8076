//! The delivery engine's error type.

use thiserror::Error;

/// Errors of the delivery engine.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DeliveryError {
    /// No feed of that name is registered.
    #[error("no feed named '{0}': register the feed before subscribing (check the name in the configuration)")]
    NoSuchFeed(String),
    /// A feed of that name is already registered.
    #[error("a feed named '{0}' is already registered: feed names must be unique")]
    DuplicateFeed(String),
    /// A subscription asked for another item type than the feed carries.
    #[error("feed '{feed}' carries {feed_type}, but the subscriber expects {expected_type}: subscribe with a handler for {feed_type}")]
    TypeMismatch {
        /// The feed.
        feed: String,
        /// What the feed carries.
        feed_type: &'static str,
        /// What the subscriber expects.
        expected_type: &'static str,
    },
    /// Overload settings that contradict each other.
    #[error(transparent)]
    Core(#[from] mongoose_core::CoreError),
    /// An operator release named a queue the feed does not have.
    #[error("feed '{feed}' has no queue named '{queue}' (its queues: {known}): name one of them, or leave the queue out to release every hold of the feed")]
    NoSuchQueue {
        /// The feed.
        feed: String,
        /// The queue asked for.
        queue: String,
        /// The feed's live, removed and held queues.
        known: String,
    },
    /// The feed is stopping: no new subscriber.
    #[error("feed '{0}' is stopping: subscribe before shutdown begins")]
    Stopping(String),
}
