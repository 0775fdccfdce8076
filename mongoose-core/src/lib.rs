//! Traits and small shared types of Mongoose-rs.
//!
//! This crate has no threads and does no I/O. It defines the vocabulary every other
//! crate speaks:
//!
//! * [`EventSource`] and [`SourceOutput`]: a source is driven by an agent
//!   (`start` / `do_work` / `stop`) and publishes into an output with
//!   [`SourceOutput::try_publish`], attaching its own [`Position`] to each item;
//! * [`SourceCommitter`]: how a source commits what the engine acknowledged, in
//!   publish order, once per poll;
//! * [`OverloadPolicy`] / [`OverloadSettings`]: what a full subscriber queue does;
//! * [`Delivery`] and [`DeliveryContext`]: the feed, sequence, epoch and position of
//!   the item being processed, the consumer-side offset check
//!   ([`Delivery::already_applied`]) and the delivery-complete hook
//!   ([`DeliveryContext::on_complete`]);
//! * [`Processor`]: the user code a processor group dispatches to, and the
//!   [`StartContext`] its `start` is given (feeds, services, admin commands, timers);
//! * [`dispatch`]: how a queue's items reach the processors subscribed to it: one
//!   [`Dispatcher`] trait for a typed reader and for a group that reads feeds of any
//!   type (through an [`Offer`] of the item to its typed [`Subscribers`]);
//! * [`sink`]: the output side: prepared outputs keyed by the input that caused them,
//!   the [`sink::Sink`] trait and the honest outcome of each attempt
//!   ([`sink::SinkOutcome`]: published, verified not published, or uncertain);
//! * [`agent`]: marking agent threads, which must never block;
//! * [`audit`](mod@audit): a processor's audit records, kept while an operator captures it.
//!
//! # Example: a processor that stores its position with its state
//!
//! ```
//! use mongoose_core::{
//!     CompletionKey, Delivery, DeliveryContext, Epoch, Processor, ProcessorError, StartContext,
//! };
//!
//! #[derive(Default)]
//! struct Counter {
//!     applied: u64,
//!     saved: Option<(Epoch, u64)>,
//! }
//!
//! impl Counter {
//!     fn on_line(&mut self, _line: &String) -> Result<(), ProcessorError> {
//!         if let Some(delivery) = DeliveryContext::current() {
//!             if let Some((epoch, position)) = self.saved {
//!                 if delivery.already_applied(epoch, position) {
//!                     return Ok(()); // a re-delivery after a crash: already in the state
//!                 }
//!             }
//!             // ask to be called once the whole delivery is complete
//!             DeliveryContext::on_complete(CompletionKey::SAVE);
//!         }
//!         self.applied += 1;
//!         Ok(())
//!     }
//! }
//!
//! impl Processor for Counter {
//!     fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
//!         context.subscribe("lines", Counter::on_line)
//!     }
//!
//!     fn on_delivery_complete(
//!         &mut self,
//!         _key: CompletionKey,
//!         delivery: &Delivery,
//!     ) -> Result<(), ProcessorError> {
//!         // a real processor writes (state, epoch, position) atomically here
//!         self.saved = Some((delivery.epoch(), delivery.position().offset));
//!         Ok(())
//!     }
//! }
//!
//! // Outside a delivery there is no context: the processor saves at once itself.
//! let mut counter = Counter::default();
//! counter.on_line(&"a".to_string()).unwrap();
//! assert_eq!(counter.applied, 1);
//! assert!(!DeliveryContext::on_complete(CompletionKey::SAVE));
//! ```
#![forbid(unsafe_code)]

pub mod agent;
pub mod audit;
pub mod context;
mod delivery;
pub mod dispatch;
mod error;
mod idle;
mod log_every;
mod overload;
mod position;
mod processor;
mod services;
pub mod sink;
mod source;

pub use delivery::engine::PendingCompletion;
pub use delivery::{
    engine, CompletionKey, Delivery, DeliveryContext, DeliveryRef, ProcessorId,
    MAX_COMPLETIONS_PER_DELIVERY,
};
pub use dispatch::{
    DispatchOutcome, Dispatcher, DroppedRun, ErasedHandler, FeedStatusEvent, GroupReader, Offer,
    RetryPolicy, Subscribers,
};
pub use error::{CoreError, EvidenceStatus, FailureKind, ProcessorError, PublishRefused};
pub use idle::IdleStrategy;
pub use log_every::LogEvery;
pub use overload::{OverloadPolicy, OverloadSettings};
pub use position::{Epoch, Position, PositionValue};
pub use processor::{
    is_valid_command_name, CommandHandler, ConsumerPosition, Handler, Processor, SavedPosition,
    StartBackend, StartContext, MAX_COMMAND_NAME,
};
pub use services::{Service, ServiceEvent};
pub use source::{
    BatchEnd, EventSource, FileLag, Refusal, SourceCommitter, SourceOutput, SourceState,
    TryPublish, WorkDone,
};
