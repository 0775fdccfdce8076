//! Processor groups and the control plane of Mongoose-rs.
//!
//! The jobs this crate keeps:
//!
//! * **Processor groups** (`group/`): each [`ProcessorGroup`] runs one agent thread, a
//!   duty cycle over its control mailbox, its timers and its feed queues; every control
//!   request that reaches a group is decided in order and answered by exactly one
//!   [`ControlReply`] (book: guarantees/control-plane.md), its inputs, decisions,
//!   effects and reply written to the group's control audit.
//! * **The control plane** ([`ControlPlane`], `plane/`): groups created on demand,
//!   adding and stopping processors (each add takes one [`ProcessorSupplier`]: a closure
//!   returning a processor, or a boxed factory of configured ones), the service
//!   registry ([`services`]), processor-owned admin commands ([`admin`], run through
//!   [`ControlPlane::invoke_admin_command`] on the group's thread), audit capture
//!   requests ([`ControlPlane::start_capture`] / [`ControlPlane::stop_capture`]) and the
//!   group-side pieces of a server's shutdown.
//! * **Replies and handles**: [`ControlReply`], [`ReplyHandle`] and the
//!   [`ReplyExecutor`] that completes them; a [`ProcessorHandle`] names one
//!   registration of one server.
//! * **The processor host** ([`ProcessorHost`]): every call to a processor (build,
//!   `start`, an item, a completion, a timer, a service, an admin command, `stop`) with
//!   the processor made current, its failure contained (an error or a panic
//!   quarantines it, [`RetryPolicy`] for a retry-safe one), the recorder told, its
//!   control requests reported. A replay (`mongoose-replay`) calls a replayed processor
//!   through a host too.
//! * **A processor's own control requests** ([`controller`]): stop or add a processor,
//!   register or remove a service through a [`Controller`] taken on its group's thread
//!   while the group calls it; they never wait, and a group's recorder is told of each
//!   ([`GroupRecorder::control_call`]).
//! * **What a processor asks of its group** ([`context`]: timers, the group's name).
//! * **Feeds as a group sees them** ([`feeds`]: the [`feeds::FeedConnector`] a group
//!   subscribes through; with the `delivery` feature, `DeliveryFeeds` over the delivery
//!   engine's feed registry).
//! * **Recording hooks** ([`record`]: the [`GroupRecorder`] of `mongoose-replay`'s
//!   RECORD mode).
//! * **Test doubles** behind the `testsuite` cargo feature: the in-memory feeds of the
//!   `memory` module (`memory::MemoryFeeds`, used by the examples here) and
//!   `ProcessorGroup::inject_control_fault`. Tests and examples enable it through a
//!   dev-dependency: `mongoose-control = { ..., features = ["testsuite"] }`.
//!
//! What it does not keep: the control audit (its records, ring, export and readers) and
//! audit capture (the session folder, the records file and sidecar, the routing of a
//! processor's events and records) are `mongoose-audit`'s. The groups write the audit
//! and install the captures through its types ([`ProcessorGroup::audit`] is a
//! [`mongoose_audit::ControlAudit`], [`ControlPlane::enable_capture`] takes
//! [`mongoose_audit::capture::CaptureSettings`]); import them from `mongoose-audit`.
//!
//! # Adding, stopping and quarantining a processor
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use mongoose_control::{memory::MemoryFeeds, ControlConfig, ControlPlane, ReplyOutcome};
//! use mongoose_core::{FailureKind, Processor, ProcessorError, StartContext};
//!
//! struct Pricer;
//! impl Pricer {
//!     fn on_price(&mut self, price: &u64) -> Result<(), ProcessorError> {
//!         if *price == 0 {
//!             return Err("a zero price".into()); // quarantines this processor alone
//!         }
//!         Ok(())
//!     }
//! }
//! impl Processor for Pricer {
//!     fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
//!         context.subscribe("prices", Pricer::on_price)
//!     }
//! }
//!
//! let feeds = MemoryFeeds::default();
//! let prices = feeds.feed::<u64>("prices");
//! let plane = ControlPlane::new(ControlConfig::default(), Arc::new(feeds));
//!
//! // add: the handle names exactly this registration
//! let added = plane.add_processor("pricing", "pricer", || Pricer);
//! let reply = added.reply.wait_for(Duration::from_secs(30)).unwrap();
//! assert_eq!((reply.outcome, reply.reason.as_str()), (ReplyOutcome::Applied, "started"));
//! let pricer = added.handle.unwrap();
//!
//! // stop through the handle: it can never stop a later processor of the same name
//! let stopped = plane.stop_processor(&pricer).wait_for(Duration::from_secs(30)).unwrap();
//! assert_eq!(stopped.reason, "stopped");
//!
//! // a handler that fails quarantines its processor: name and instance retained
//! let again = plane.add_processor("pricing", "pricer", || Pricer);
//! again.reply.wait_for(Duration::from_secs(30)).unwrap();
//! prices.publish(0);
//! let group = plane.group("pricing").unwrap();
//! let deadline = std::time::Instant::now() + Duration::from_secs(30);
//! while group.status().quarantined.is_empty() && std::time::Instant::now() < deadline {
//!     std::thread::sleep(Duration::from_millis(1));
//! }
//! assert_eq!(group.status().quarantined[0].reason, "a zero price");
//! let refused = plane.stop_processor(&again.handle.unwrap()).wait_for(Duration::from_secs(30)).unwrap();
//! assert_eq!(refused.kind, FailureKind::Quarantined);
//! ```
#![forbid(unsafe_code)]

pub mod admin;
mod contain;
pub mod context;
pub mod controller;
#[cfg(feature = "delivery")]
mod delivery;
mod error;
pub mod feeds;
mod group;
mod handle;
pub mod host;
mod idle;
#[cfg(feature = "testsuite")]
pub mod memory;
mod plane;
pub mod record;
mod reply;
pub mod services;
mod supplier;

pub use controller::{ControlInterceptor, Controller, StartContextExt};
#[cfg(feature = "delivery")]
pub use delivery::DeliveryFeeds;
pub use error::ControlError;
pub use group::{
    DispatchHold, GroupOptions, GroupState, GroupStatus, ProcessorGroup, ProcessorStatus,
    QuarantinedProcessor, QueueOverload, RetryPolicy,
};
pub use handle::{AddedProcessor, ProcessorHandle, ServerId};
pub use host::{FeedSubscriptions, HandlerFailure, ProcessorHost, Recording};
pub use idle::IdleStrategy;
pub use plane::{AddFailurePolicy, ControlConfig, ControlPlane};
pub use record::{AdminOutcome, GroupRecorder};
pub use reply::{ControlReply, ReplyExecutor, ReplyHandle, ReplyOutcome};
pub use services::{Service, ServiceBroadcast, ServiceChange, ServiceEvent};
pub use supplier::ProcessorSupplier;
