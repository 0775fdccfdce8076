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
//! * [`tap`]: a live sample of a feed's items or a sink's outputs for an operator, that
//!   costs one relaxed load per item while nobody looks.
//!
//! # The source protocol
//!
//! A source's calls are split by who may make them, so that the types say what the
//! documentation used to:
//!
//! | who | what | where |
//! |---|---|---|
//! | the source, once at start | its epoch, PAUSE by default, its committer | [`SourceStart`], returned by [`EventSource::start`] |
//! | the running source | publish (one, a batch, push), cache, filtered, report state, a loss, rotated-unread bytes, its files, unterminated bytes, a new epoch after a reset, and "commit what was processed, now" before it gives input up ([`SourceOutput::commit_processed`]) | [`SourceOutput`], the handle the source keeps |
//! | the source driver only | give the committer what was processed around each cycle, replay paused items, apply the [`SourceStart`] | `mongoose_delivery::DrivenOutput`, on the feed the driver holds |
//!
//! A tiny source: it numbers lines, publishes each at its offset, and registers a
//! committer that remembers the highest offset processed.
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//!
//! use mongoose_core::{
//!     AnyCommitter, CoreError, Epoch, EventSource, SourceCommitter, SourceOutput, SourceStart,
//!     SourceState, TryPublish, WorkDone,
//! };
//!
//! struct Numbers {
//!     output: Arc<dyn SourceOutput<String, u64>>,
//!     next: u64,
//!     committed: Arc<AtomicU64>,
//! }
//!
//! struct Committed(Arc<AtomicU64>, Option<u64>);
//!
//! impl SourceCommitter<u64> for Committed {
//!     fn acknowledged(&mut self, _sequence: u64, _epoch: Epoch, position: u64) {
//!         self.1 = Some(position);
//!     }
//!     fn commit(&mut self) -> Result<(), CoreError> {
//!         if let Some(position) = self.1.take() {
//!             self.0.store(position, Ordering::Release); // a durable write, really
//!         }
//!         Ok(())
//!     }
//! }
//!
//! impl EventSource for Numbers {
//!     fn name(&self) -> &str {
//!         "numbers"
//!     }
//!
//!     fn start(&mut self) -> Result<SourceStart, CoreError> {
//!         // resume after what was committed
//!         self.next = self.committed.load(Ordering::Acquire);
//!         self.output.report_state(SourceState::Behind, Some("starting"));
//!         Ok(SourceStart {
//!             epoch: Epoch(1),
//!             pause_by_default: true, // re-readable: a full queue pauses it
//!             committer: Some(AnyCommitter::new(Committed(Arc::clone(&self.committed), None))),
//!         })
//!     }
//!
//!     fn do_work(&mut self) -> Result<WorkDone, CoreError> {
//!         let line = format!("line {}", self.next);
//!         match self.output.try_publish(line, self.next + 1) {
//!             TryPublish::Published => {
//!                 self.next += 1;
//!                 Ok(WorkDone(1))
//!             }
//!             // keep nothing here: the line is made again from `next` next cycle
//!             TryPublish::Paused(_) | TryPublish::Retry(_) => Ok(WorkDone(0)),
//!         }
//!     }
//!
//!     fn stop(&mut self) -> Result<(), CoreError> {
//!         Ok(())
//!     }
//! }
//! # #[derive(Default)]
//! # struct Recorded(std::sync::Mutex<Vec<(String, u64)>>);
//! # impl SourceOutput<String, u64> for Recorded {
//! #     fn try_publish(&self, item: String, position: u64) -> TryPublish<String> {
//! #         self.0.lock().unwrap().push((item, position));
//! #         TryPublish::Published
//! #     }
//! #     fn publish(&self, _item: String) -> Result<(), mongoose_core::PublishRefused> { Ok(()) }
//! #     fn cache(&self, _item: String, _position: u64) {}
//! #     fn filtered(&self, _position: u64, _reason: &str) {}
//! #     fn commit_processed(&self) -> usize { 0 }
//! #     fn set_epoch(&self, _epoch: Epoch) {}
//! #     fn report_state(&self, _state: SourceState, _detail: Option<&str>) {}
//! #     fn set_unterminated_bytes(&self, _bytes: u64) {}
//! # }
//!
//! let output = Arc::new(Recorded::default());
//! let mut source = Numbers { output: output.clone(), next: 0, committed: Arc::default() };
//! // the driver (`mongoose_delivery::SourceDriver`) does this: start, apply, cycle
//! let start = source.start()?;
//! assert_eq!(start.epoch, Epoch(1));
//! assert!(start.pause_by_default);
//! let mut committer = start.committer.expect("registered").into_typed::<u64>().expect("u64");
//! source.do_work()?;
//! source.do_work()?;
//! assert_eq!(output.0.lock().unwrap().last(), Some(&("line 1".to_string(), 2)));
//! committer.acknowledged(2, Epoch(1), 2);
//! committer.commit()?;
//! assert_eq!(source.committed.load(Ordering::Acquire), 2);
//! # Ok::<(), CoreError>(())
//! ```
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
pub mod batch_end;
pub mod context;
mod delivery;
pub mod dispatch;
mod error;
mod idle;
mod log_every;
mod overload;
mod position;
mod processor;
pub mod resume;
mod services;
pub mod sink;
mod source;
pub mod state_store;
pub mod tap;

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
pub use idle::{IdleStrategy, Idler, Wakeup, DEEP_IDLE_AFTER, DEFAULT_YIELD_FOR};
pub use log_every::LogEvery;
pub use overload::{OverloadPolicy, OverloadSettings};
pub use position::{Epoch, Position, PositionValue};
pub use processor::{
    is_valid_command_name, CommandHandler, Handler, Processor, SavedPosition, StartBackend,
    StartContext, MAX_COMMAND_NAME,
};
pub use resume::{ConsumerPosition, Held};
pub use services::{Service, ServiceEvent};
pub use source::{
    AnyCommitter, BatchEnd, EventSource, FileLag, Refusal, SourceCommitter, SourceOutput,
    SourceStart, SourceState, TryPublish, WorkDone,
};
