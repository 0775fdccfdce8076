//! Processor groups, the control mailbox and replies, processor handles, services,
//! failure containment and the control audit of Mongoose-rs.
//!
//! A [`ControlPlane`] owns a server's processor groups. Each [`ProcessorGroup`] runs one
//! agent thread: a duty cycle over its control mailbox, its timers and its feed queues.
//! Every control request that reaches a group is decided in order and answered by
//! exactly one [`ControlReply`] (book: guarantees/control-plane.md).
//! A processor may register admin commands in its `start` ([`admin`]) that an operator
//! runs through [`ControlPlane::invoke_admin_command`], on the group's thread.
//!
//! Every call to a processor (build, `start`, an item, a completion, a timer, a service,
//! an admin command, `stop`) goes through its [`ProcessorHost`]: the processor made
//! current, its failure contained, the recorder told, its control requests reported. A
//! replay (`mongoose-replay`) calls a replayed processor through a host too.
//!
//! A processor makes control requests of its own (stop or add a processor, register or
//! remove a service) through a [`Controller`] it takes on its group's thread while the
//! group calls it: see [`controller`]. They never wait, and a group's recorder is told
//! of each ([`GroupRecorder::control_call`]).
//!
//! Test doubles and hooks are behind the `testsuite` cargo feature: the in-memory
//! feeds of the `memory` module (`memory::MemoryFeeds`, used by the examples here) and
//! `ProcessorGroup::inject_control_fault`. Tests and examples enable it
//! through a dev-dependency: `mongoose-control = { ..., features = ["testsuite"] }`.
//!
//! An operator captures one processor's audit log (its `tracing` events while its group
//! calls it, and the records it writes through [`mongoose_core::audit`](mod@mongoose_core::audit)) with
//! [`ControlPlane::start_capture`] / [`ControlPlane::stop_capture`]: see [`capture`].
//!
//! The control plane's own jobs live in its submodules: adding and stopping processors
//! (each add takes one [`ProcessorSupplier`]: a closure returning a processor, or a boxed
//! factory of configured ones), the service registry, and processor-owned admin
//! commands.
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
