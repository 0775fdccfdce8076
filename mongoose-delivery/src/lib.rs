//! The delivery engine of Mongoose-rs: a source's committed position never passes an
//! item that some consumer was given and did not process.
//!
//! A [`Publisher`] per feed numbers each item, offers it to one bounded queue per
//! subscriber group under that queue's [`OverloadPolicy`](mongoose_core::OverloadPolicy),
//! and keeps the acknowledgement window: sequence to position, in publish order. A
//! group's [`QueueReader`] dispatches each item inside the
//! [`DeliveryContext`](mongoose_core::DeliveryContext), runs the completion callbacks,
//! and only then counts it dispatched. The [`SourceDriver`] polls
//! [`Publisher::poll_acknowledgements`] on the source's own thread and the source's
//! [`SourceCommitter`](mongoose_core::SourceCommitter) commits what every queue has
//! processed.
//!
//! The publisher lives in `publisher/`, one file per job (subscriptions, publish, the
//! startup cache, overload, acknowledge, status) over the one locked state; the queues
//! and their health records in `queue.rs`, the reader in `reader.rs`, the window in
//! `window.rs`, checkpoint holds in `checkpoint.rs`, the status types in `status.rs`.
//!
//! # Example: a positioned feed, one slow group, commit after processing
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use mongoose_core::engine::PendingCompletion;
//! use mongoose_core::{
//!     AnyCommitter, CoreError, Delivery, Epoch, ProcessorError, SourceCommitter, SourceOutput,
//!     SourceStart, TryPublish,
//! };
//! use mongoose_delivery::{Dispatcher, DispatchOutcome, Feed, SubscribeOptions};
//!
//! // a committer that remembers the last committed position
//! struct Pointer(Arc<Mutex<u64>>, u64);
//! impl SourceCommitter<u64> for Pointer {
//!     fn acknowledged(&mut self, _sequence: u64, _epoch: Epoch, position: u64) {
//!         self.1 = position;
//!     }
//!     fn commit(&mut self) -> Result<(), CoreError> {
//!         *self.0.lock().unwrap() = self.1;
//!         Ok(())
//!     }
//! }
//!
//! struct Sum(u64);
//! impl Dispatcher<u64> for Sum {
//!     fn dispatch(&mut self, item: &u64, _attempt: u32) -> DispatchOutcome {
//!         self.0 += item;
//!         DispatchOutcome::Done
//!     }
//!     fn complete(&mut self, _c: PendingCompletion, _d: &Delivery) -> Result<(), ProcessorError> {
//!         Ok(())
//!     }
//! }
//!
//! let feed = Feed::<u64, u64>::builder("numbers").queue_capacity(2).build();
//! let committed = Arc::new(Mutex::new(0));
//! // what a source's `start` returns, applied as the source driver does
//! feed.apply_start(SourceStart {
//!     epoch: Epoch::NONE,
//!     pause_by_default: true, // a re-readable source pauses instead of dropping
//!     committer: Some(AnyCommitter::new(Pointer(committed.clone(), 0))),
//! })?;
//! let mut reader = feed.subscribe("sums", SubscribeOptions::default())?.take_reader().unwrap();
//! feed.start_complete();
//!
//! assert!(feed.try_publish(1, 10).is_published());
//! assert!(feed.try_publish(2, 20).is_published());
//! // the queue is full: the source keeps the item and reads nothing more
//! assert!(matches!(feed.try_publish(3, 30), TryPublish::Paused(3)));
//! // nothing was processed, so nothing is committed
//! feed.poll_acknowledgements();
//! assert_eq!(*committed.lock().unwrap(), 0);
//!
//! let mut sum = Sum(0);
//! reader.poll(&mut sum, 1);
//! feed.poll_acknowledgements();
//! assert_eq!(*committed.lock().unwrap(), 10); // exactly what was processed
//! assert_eq!(feed.status().paused, true);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

mod checkpoint;
mod driver;
mod error;
mod feed;
mod group;
mod publisher;
mod queue;
mod reader;
mod registry;
mod status;
mod window;

pub use checkpoint::{CheckpointParticipant, Mark, ProcessingCheckpoint};
pub use driver::{DrivenOutput, DriverStop, SourceDriver, STALL_AFTER_FAILURES};
pub use error::DeliveryError;
pub use feed::{DataMapper, Feed, FeedBuilder, SubscribeOptions, DEFAULT_QUEUE_CAPACITY};
pub use group::{GroupQueue, GroupSubscription};
pub use mongoose_core::dispatch::{
    DispatchOutcome, Dispatcher, DroppedRun, FeedStatusEvent, RetryPolicy,
};
/// The idler of agent threads lives in the core beside its [`IdleStrategy`](mongoose_core::IdleStrategy).
pub use mongoose_core::Idler;
pub use publisher::{KillSwitch, LossKeeper, Publisher, Released, Subscription, TapText};
pub use queue::{
    DropEvidence, OverloadChange, OverloadObserver, OverloadState, QueueId, SubscriptionId,
};
pub use reader::QueueReader;
pub use registry::{AnyFeed, FeedRegistry};
pub use status::{FeedStatus, StatusReport, SubscriberStatus};
pub use window::MAX_PENDING_ACKNOWLEDGEMENTS;
