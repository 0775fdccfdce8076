//! The processor host: the one place that calls a processor, for a live group and for
//! a replay alike.
//!
//! A [`ProcessorHost`] owns one processor and every call made to it: its build, its
//! `start` (with the admin commands and the services callback it registers there),
//! the call of one of its handlers with an item, its delivery-complete callbacks,
//! its timers, its services callback, its admin commands and its `stop`. Each call
//! follows the same steps, written once (`ProcessorHost::call`):
//!
//! 1. the processor becomes the thread's current processor (what
//!    [`mongoose_core::engine::current_processor`], [`crate::controller::controller()`] and a
//!    recorder's clock read) and its capture, if it is captured, enters the thread;
//! 2. the call is made with its failure contained: an error becomes its message, a
//!    panic `"panicked: <message>"`;
//! 3. the capture leaves the thread;
//! 4. the [`GroupRecorder`], if one is given, is told of the call, and the control
//!    requests the processor made meanwhile are reported to it in position (or
//!    forgotten, where a failed call's requests are not reproduced);
//! 5. what was current before is restored.
//!
//! Steps 1, 3 and 5 are one guard's: whatever ends the call, a panic that crosses it
//! included, the capture goes back to its host and the thread's previous processor is
//! current again.
//!
//! A group calls its processors only through their hosts; a replay
//! (`mongoose-replay`) rebuilds a recorded processor in a host of its own
//! ([`ProcessorHost::build_intercepted`]: its [`ControlInterceptor`] answers the
//! processor's control requests from the recording), so a replayed processor is called
//! through exactly the code that called it live. What to do with a failure (quarantine,
//! retry, stop the replay) is the caller's policy, not the host's.
//!
//! ```
//! use mongoose_control::{FeedSubscriptions, ProcessorHost};
//! use mongoose_core::{ErasedHandler, Processor, ProcessorError, ProcessorId, StartContext};
//!
//! #[derive(Default)]
//! struct Counter {
//!     count: u64,
//! }
//! impl Counter {
//!     fn count(&mut self, _args: &[String]) -> Result<String, ProcessorError> {
//!         Ok(self.count.to_string())
//!     }
//! }
//! impl Processor for Counter {
//!     fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
//!         context.register_command("count", Counter::count);
//!         Ok(())
//!     }
//!     fn on_timer(&mut self, _timer: u64) -> Result<(), ProcessorError> {
//!         self.count += 1;
//!         Ok(())
//!     }
//! }
//!
//! struct NoFeeds;
//! impl FeedSubscriptions for NoFeeds {
//!     fn subscribe(&mut self, feed: &str, _: ErasedHandler) -> Result<(), ProcessorError> {
//!         Err(format!("no feed '{feed}'").into())
//!     }
//! }
//!
//! let mut host = ProcessorHost::build(ProcessorId(1), "counter", Counter::default).unwrap();
//! host.start(&mut NoFeeds, None).unwrap();
//! assert_eq!(host.command_names(), ["count"]);
//! host.fire_timer(7, None).unwrap();
//! let answer = host.invoke_admin("count", &[], None);
//! assert_eq!(answer, Ok(Ok("1".to_owned())));
//! ```

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use mongoose_core::engine;
use mongoose_core::{
    CommandHandler, CompletionKey, Delivery, ErasedHandler, Handler, Offer, Processor,
    ProcessorError, ProcessorId, ServiceEvent, StartBackend, StartContext,
};

use crate::admin::AdminCommands;
use crate::contain::{contained, panic_message};
use crate::controller::{self, ControlInterceptor};
use crate::record::{AdminOutcome, GroupRecorder};
use crate::supplier::ProcessorSupplier;
use mongoose_audit::capture::routing::{self, ActiveCapture};

/// A group's recorder as a host is given it for one call (`None`: no recorder).
pub type Recording<'a> = Option<&'a mut (dyn GroupRecorder + 'static)>;

/// Where the feeds a processor subscribes to in `start` go: its group's subscriptions
/// (or a replay's).
pub trait FeedSubscriptions {
    /// Subscribes the processor's `handler` to `feed`.
    ///
    /// # Errors
    /// No such feed, or a feed of another item type (naming both types).
    fn subscribe(&mut self, feed: &str, handler: ErasedHandler) -> Result<(), ProcessorError>;
}

/// A handler call that failed ([`ProcessorHost::call_handler`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandlerFailure {
    /// The error's message, or `"panicked: <message>"`.
    pub reason: String,
    /// The processor said it is busy ([`mongoose_core::ProcessorError::busy`]): not a
    /// failure; offer the item again later.
    pub busy: bool,
}

impl std::fmt::Display for HandlerFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// One processor and every call made to it (see the [module documentation](self)).
pub struct ProcessorHost {
    id: ProcessorId,
    name: String,
    type_name: &'static str,
    processor: Box<dyn Processor>,
    /// The admin commands it registered in `start`.
    commands: AdminCommands,
    /// Its services callback, when it asked for one in `start`.
    services: Option<Handler<ServiceEvent>>,
    /// Its interceptor's installation on this thread (a replay's host).
    intercepting: Option<Intercepting>,
    /// Its audit capture, while an operator captures it: moved into the thread for
    /// the length of each call (see [`mongoose_audit::capture`]).
    capture: Option<Box<ActiveCapture>>,
}

/// A [`ControlInterceptor`] installed on this thread; what was installed before is
/// restored when it is dropped.
struct Intercepting {
    previous: Option<Box<dyn ControlInterceptor>>,
}

impl Drop for Intercepting {
    fn drop(&mut self) {
        controller::set_control_interceptor(self.previous.take());
    }
}

impl fmt::Debug for ProcessorHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessorHost")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("type_name", &self.type_name)
            .field("commands", &self.commands)
            .field("services", &self.services.is_some())
            .field("intercepted", &self.intercepting.is_some())
            .field("captured", &self.capture.is_some())
            .finish()
    }
}

fn as_outcome(result: &Result<(), String>) -> Result<(), &str> {
    result.as_ref().map(|_| ()).map_err(String::as_str)
}

impl ProcessorHost {
    /// Builds processor `name` with `supplier` (which names its type, `""` when
    /// unknown), as processor `id`, for a live group.
    ///
    /// # Errors
    /// The panic's message when the supplier panicked; what the processor asked of the
    /// control plane meanwhile is not reported (a processor never built has no
    /// stream).
    pub fn build(
        id: ProcessorId,
        name: &str,
        supplier: impl Into<ProcessorSupplier>,
    ) -> Result<Self, String> {
        Self::build_with(id, name, supplier.into(), None)
    }

    /// [`ProcessorHost::build`] for a processor whose control requests `interceptor`
    /// answers instead of the control plane: what a replay builds, so that a replayed
    /// processor never reaches a live server. The interceptor is installed on this
    /// thread from the build on until the host is dropped (what was installed before
    /// is restored then): keep the host on this thread, and drop intercepted hosts in
    /// the reverse order of their builds.
    ///
    /// # Errors
    /// As [`ProcessorHost::build`].
    pub fn build_intercepted(
        id: ProcessorId,
        name: &str,
        supplier: impl Into<ProcessorSupplier>,
        interceptor: Box<dyn ControlInterceptor>,
    ) -> Result<Self, String> {
        Self::build_with(id, name, supplier.into(), Some(interceptor))
    }

    fn build_with(
        id: ProcessorId,
        name: &str,
        supplier: ProcessorSupplier,
        interceptor: Option<Box<dyn ControlInterceptor>>,
    ) -> Result<Self, String> {
        let (type_name, supplier) = supplier.into_parts();
        // installed from the build on, for as long as the host lives
        let intercepting = interceptor.map(|interceptor| Intercepting {
            previous: controller::set_control_interceptor(Some(interceptor)),
        });
        let built = {
            let _call = CallScope::enter(id, None);
            catch_unwind(AssertUnwindSafe(supplier))
        };
        match built {
            Ok(processor) => Ok(ProcessorHost {
                id,
                name: name.to_owned(),
                type_name,
                processor,
                commands: AdminCommands::default(),
                services: None,
                intercepting,
                capture: None,
            }),
            Err(payload) => {
                controller::report_calls(None);
                Err(panic_message(&*payload))
            }
        }
    }

    /// Starts the processor: its feed subscriptions go to `feeds`; its services
    /// callback and the admin commands it registers stay with the host; its timers go
    /// to its group ([`crate::context::schedule_timer`]). Once started, `recorder` is told it was built
    /// ([`GroupRecorder::processor_built`]) and then of the control requests its build
    /// and start made.
    ///
    /// # Errors
    /// Its start's error or panic, as text; its control requests are then not
    /// reported.
    pub fn start(
        &mut self,
        feeds: &mut dyn FeedSubscriptions,
        recorder: Recording<'_>,
    ) -> Result<(), String> {
        let mut backend = HostStart {
            feeds,
            services: None,
            commands: AdminCommands::default(),
        };
        let (name, type_name) = (self.name.as_str(), self.type_name);
        let started = call(
            self.id,
            None,
            recorder,
            || contained(|| self.processor.start(&mut StartContext::new(&mut backend))),
            // the control requests its start() made come before anything else it is
            // given; a start that failed is not reproduced
            |started, id, recorder| match started {
                Ok(()) => {
                    if let Some(recorder) = recorder {
                        recorder.processor_built(id, name, type_name);
                    }
                    true
                }
                Err(_) => false,
            },
        );
        self.commands = backend.commands;
        self.services = backend.services;
        started
    }

    /// Calls subscriber `index` of `offer` (a handler of this processor, for an item
    /// of `feed`) with the offer's item; `recorder` is told
    /// ([`GroupRecorder::dispatched`]) with the processor still current. A busy
    /// processor's call ([`mongoose_core::ProcessorError::busy`]) is not a processing of
    /// the item: the recorder is not told, and its control requests are forgotten.
    ///
    /// # Errors
    /// The handler's error or panic.
    #[inline]
    pub fn call_handler(
        &mut self,
        offer: &dyn Offer,
        index: usize,
        feed: &str,
        recorder: Recording<'_>,
    ) -> Result<(), HandlerFailure> {
        let processor = &mut *self.processor;
        call(
            self.id,
            Some(&mut self.capture),
            recorder,
            || match catch_unwind(AssertUnwindSafe(|| offer.call(index, processor))) {
                Ok(Ok(())) => Ok(()),
                Ok(Err(error)) => Err(HandlerFailure {
                    busy: error.is_busy(),
                    reason: error.message().to_owned(),
                }),
                Err(payload) => Err(HandlerFailure {
                    reason: format!("panicked: {}", panic_message(&*payload)),
                    busy: false,
                }),
            },
            // a busy processor's call is not a processing of the item
            |result, id, recorder| {
                if result.as_ref().is_err_and(|failure| failure.busy) {
                    return false;
                }
                if let Some(recorder) = recorder {
                    let outcome = result
                        .as_ref()
                        .map(|_| ())
                        .map_err(|failure| failure.reason.as_str());
                    recorder.dispatched(id, feed, offer.item(), outcome);
                }
                true
            },
        )
    }

    /// Runs the delivery-complete callback `key` the processor registered during
    /// `delivery` ([`GroupRecorder::completed`]).
    ///
    /// # Errors
    /// The callback's error or panic, as text.
    #[inline]
    pub fn complete(
        &mut self,
        key: CompletionKey,
        delivery: &Delivery,
        recorder: Recording<'_>,
    ) -> Result<(), String> {
        let processor = &mut *self.processor;
        call(
            self.id,
            Some(&mut self.capture),
            recorder,
            || contained(|| processor.on_delivery_complete(key, delivery)),
            |result, id, recorder| {
                if let Some(recorder) = recorder {
                    recorder.completed(Some(id), key, as_outcome(result));
                }
                true
            },
        )
    }

    /// Fires the processor's timer `timer` ([`GroupRecorder::timer_fired`]).
    ///
    /// # Errors
    /// `on_timer`'s error or panic, as text.
    pub fn fire_timer(&mut self, timer: u64, recorder: Recording<'_>) -> Result<(), String> {
        let processor = &mut *self.processor;
        call(
            self.id,
            Some(&mut self.capture),
            recorder,
            || contained(|| processor.on_timer(timer)),
            |result, id, recorder| {
                if let Some(recorder) = recorder {
                    recorder.timer_fired(id, timer, as_outcome(result));
                }
                true
            },
        )
    }

    /// Gives `event` to the processor's services callback (nothing happens, `Ok`, when
    /// it has none); once it returned, `recorder` is told the service was delivered or
    /// withdrawn ([`GroupRecorder::service_changed`]).
    ///
    /// # Errors
    /// The callback's error or panic, as text; its control requests are then not
    /// reported.
    pub fn deliver_service(
        &mut self,
        event: &ServiceEvent,
        recorder: Recording<'_>,
    ) -> Result<(), String> {
        let processor = &mut *self.processor;
        let handler = self.services.as_mut();
        call(
            self.id,
            Some(&mut self.capture),
            recorder,
            || {
                contained(|| match handler {
                    Some(handler) => handler(processor, event),
                    None => Ok(()),
                })
            },
            // a callback that failed is not reproduced, nor are its requests
            |result, id, recorder| {
                if result.is_err() {
                    return false;
                }
                let (version, registering) = match event {
                    ServiceEvent::Registered { version, .. } => (*version, true),
                    ServiceEvent::Deregistered { version, .. } => (*version, false),
                };
                if let Some(recorder) = recorder {
                    recorder.service_changed(id, event.name(), version, registering);
                }
                true
            },
        )
    }

    /// Runs the processor's admin command `command` with `args`
    /// ([`GroupRecorder::admin_invoked`]): `Ok(Ok(output))` when it returned its
    /// output, `Ok(Err(error))` when it returned an error (its answer, not a failure of
    /// the processor; also when it registered no such command), `Err(reason)` when it
    /// panicked (`"panicked: <message>"`; its control requests are then not reported).
    pub fn invoke_admin(
        &mut self,
        command: &str,
        args: &[String],
        recorder: Recording<'_>,
    ) -> Result<Result<String, String>, String> {
        let ProcessorHost {
            id,
            processor,
            commands,
            capture,
            ..
        } = self;
        call(
            *id,
            Some(capture),
            recorder,
            || match catch_unwind(AssertUnwindSafe(|| {
                commands.invoke(&mut **processor, command, args)
            })) {
                Ok(Some(Ok(output))) => Ok(Ok(output)),
                Ok(Some(Err(error))) => Ok(Err(error.message().to_owned())),
                Ok(None) => Ok(Err(format!("no admin command '{command}'"))),
                Err(payload) => Err(format!("panicked: {}", panic_message(&*payload))),
            },
            // the control requests the command made follow its entry; a command that
            // panicked is not reproduced, nor are its requests
            |ran, id, recorder| {
                if let Some(recorder) = recorder {
                    let outcome = match ran {
                        Ok(Ok(output)) => AdminOutcome::Output(output),
                        Ok(Err(error)) => AdminOutcome::Error(error),
                        Err(reason) => AdminOutcome::Panicked(reason),
                    };
                    recorder.admin_invoked(id, command, args, outcome);
                }
                ran.is_ok()
            },
        )
    }

    /// Stops the processor ([`GroupRecorder::stopped`]): `by_request` true for a stop
    /// request, false when its group closes.
    ///
    /// # Errors
    /// `stop`'s error or panic, as text.
    pub fn stop(&mut self, by_request: bool, recorder: Recording<'_>) -> Result<(), String> {
        let processor = &mut *self.processor;
        call(
            self.id,
            None,
            recorder,
            || contained(|| processor.stop()),
            |result, id, recorder| {
                if let Some(recorder) = recorder {
                    recorder.stopped(id, by_request, as_outcome(result));
                }
                true
            },
        )
    }

    /// Installs a capture: the processor's later calls are recorded into it.
    pub(crate) fn install_capture(&mut self, capture: Box<ActiveCapture>) {
        debug_assert!(self.capture.is_none(), "one capture per processor");
        self.capture = Some(capture);
    }

    /// Installs a capture writing to `writer`, as an operator's capture start would
    /// (without the open and the session's status): for tests of what a call leaves
    /// on its thread. Only with the `testsuite` feature.
    #[cfg(feature = "testsuite")]
    pub fn capture_into(&mut self, writer: Box<dyn mongoose_audit::capture::CaptureWriter>) {
        let counters = std::sync::Arc::default();
        self.install_capture(Box::new(ActiveCapture::new(writer, counters)));
    }

    /// Takes its capture off, without calling the processor.
    pub(crate) fn take_capture(&mut self) -> Option<Box<ActiveCapture>> {
        self.capture.take()
    }

    /// True while a capture is installed.
    pub fn is_captured(&self) -> bool {
        self.capture.is_some()
    }

    /// The processor's id.
    pub fn id(&self) -> ProcessorId {
        self.id
    }

    /// The processor's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The processor, for what is read without calling it as its own (its
    /// `retry_safe` declaration, its saved positions).
    pub fn processor(&self) -> &dyn Processor {
        &*self.processor
    }

    /// True when it registered the admin command `command` (and it was not cleared).
    pub fn has_command(&self, command: &str) -> bool {
        self.commands.contains(command)
    }

    /// Its admin commands' names, sorted.
    pub fn command_names(&self) -> Vec<String> {
        self.commands.names()
    }

    /// Its admin commands as a listing for an operator's error message.
    pub fn command_listing(&self) -> String {
        self.commands.listing()
    }

    /// True when it has no admin command.
    pub fn has_no_commands(&self) -> bool {
        self.commands.is_empty()
    }

    /// Removes its admin commands (they go with its routes when it is quarantined).
    pub fn clear_commands(&mut self) {
        self.commands.clear();
    }

    /// True when it asked for services in `start`.
    pub fn subscribes_to_services(&self) -> bool {
        self.services.is_some()
    }

    /// The processor, out of its host (a group keeps the instances of processors it
    /// never stopped).
    pub fn into_processor(self) -> Box<dyn Processor> {
        self.processor
    }
}

/// The thread's context for one call into a processor (steps 1, 3 and 5 of the
/// [module documentation](self)): entered with the processor current and its capture,
/// if it has one, in the thread; dropped (also by a panic that crosses the call), the
/// capture goes back to its host and the processor current before is restored.
struct CallScope<'h> {
    /// The call's capture while it is in the thread (`None`: not captured, the hot
    /// path, which then has nothing to undo but the processor).
    capture: Option<CaptureEntered<'h>>,
    /// Restores the previous processor when dropped, after the capture left.
    _current: engine::ProcessorScope,
}

/// A processor's capture moved into the thread for one call ([`CaptureEntered::leave`]
/// takes it back).
struct CaptureEntered<'h> {
    /// The host's capture slot.
    held: &'h mut Option<Box<ActiveCapture>>,
    /// The capture that was in the thread before the call's.
    previous: Option<Box<ActiveCapture>>,
}

impl CaptureEntered<'_> {
    /// Takes the call's capture back into its host and restores what was in the
    /// thread before (out of line: the hot path has no capture).
    #[cold]
    #[inline(never)]
    fn leave(self) {
        *self.held = routing::leave(self.previous);
    }
}

impl Drop for CallScope<'_> {
    #[inline]
    fn drop(&mut self) {
        self.leave_capture();
    }
}

impl<'h> CallScope<'h> {
    /// Makes `id` current and moves the capture in `capture` (when given and
    /// installed) into the thread: a processor that is not captured costs one `Option`
    /// check.
    #[inline]
    fn enter(id: ProcessorId, capture: Option<&'h mut Option<Box<ActiveCapture>>>) -> Self {
        let current = engine::processor_scope(Some(id));
        let capture = match capture {
            // read first: nothing is written when the processor is not captured
            Some(held) if held.is_some() => {
                let previous = held.take().and_then(routing::enter);
                Some(CaptureEntered { held, previous })
            }
            _ => None,
        };
        CallScope {
            capture,
            _current: current,
        }
    }

    /// Takes the call's capture back from the thread into its host.
    #[inline]
    fn leave_capture(&mut self) {
        if let Some(entered) = self.capture.take() {
            entered.leave();
        }
    }
}

/// The host's call protocol, the one place that runs it: enters the call's scope
/// (processor `id` current, its capture from `capture` in the thread), makes the call
/// (`run`, which contains its failure), takes the capture back, lets `tell` tell the
/// recorder of the call's outcome, reports the control requests the call made to the
/// recorder (or forgets them when `tell` returns `false`), and restores what was
/// current before.
#[inline]
fn call<T>(
    id: ProcessorId,
    capture: Option<&mut Option<Box<ActiveCapture>>>,
    mut recorder: Recording<'_>,
    run: impl FnOnce() -> T,
    tell: impl FnOnce(&T, ProcessorId, Option<&mut (dyn GroupRecorder + 'static)>) -> bool,
) -> T {
    let mut scope = CallScope::enter(id, capture);
    let result = run();
    scope.leave_capture();
    if tell(&result, id, recorder.as_deref_mut()) {
        controller::report_calls(recorder);
    } else {
        controller::report_calls(None);
    }
    drop(scope);
    result
}

/// What a processor's `start` is given, as its host provides it: feeds go on to the
/// caller's subscriptions, the services callback and the admin commands stay with the
/// host, timers go to the group.
struct HostStart<'a> {
    feeds: &'a mut dyn FeedSubscriptions,
    services: Option<Handler<ServiceEvent>>,
    commands: AdminCommands,
}

impl StartBackend for HostStart<'_> {
    fn subscribe(&mut self, feed: &str, handler: ErasedHandler) -> Result<(), ProcessorError> {
        self.feeds.subscribe(feed, handler)
    }

    fn services(&mut self, handler: Handler<ServiceEvent>) {
        self.services = Some(handler);
    }

    fn register_command(&mut self, name: &str, handler: CommandHandler) -> bool {
        let inserted = self.commands.insert(name, handler);
        if !inserted {
            tracing::warn!(
                command = name,
                "admin command registered twice by one processor: the first stays"
            );
        }
        inserted
    }

    fn schedule_timer(&mut self, delay: Duration, timer: u64) -> bool {
        crate::context::schedule_timer(delay, timer)
    }

    fn cancel_timer(&mut self, timer: u64) -> bool {
        crate::context::cancel_timer(timer)
    }
}
