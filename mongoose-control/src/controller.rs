//! Control requests from a processor: a [`Controller`] that a processor takes on its
//! group's thread, while the group calls it, to stop a processor, add one, or register
//! or remove a service (book: guarantees/control-plane.md: "What is safe to
//! call, and from where").
//!
//! [`controller()`] returns one while the group calls a processor (in `start()`, a
//! handler, a timer, a delivery-complete callback, a service callback or `stop()`),
//! and `None` elsewhere. Every call is made on an agent thread, so none of them waits:
//! a request is admitted (or refused) and the call returns at once. `Ok` means
//! admitted, with the [`ReplyHandle`] where the request has one; the reply arrives
//! later, on the reply executor (never block on it here: the group that would answer
//! may be the one you are blocking). A request to the processor's own group is applied
//! at the group's next drain, after the current call returns.
//!
//! A [`Controller`] cannot leave the thread it was taken on: it is neither `Send` nor
//! `Sync`. The run-time failure "control request made off the processor's thread" (book: guarantees/control-plane.md)
//! (a replay would stop with "control request ... made off the processor's thread") is
//! therefore prevented at compile time instead of being detected at run time:
//!
//! ```compile_fail,E0277
//! let controller = mongoose_control::controller::controller().expect("on a group thread");
//! std::thread::spawn(move || {
//!     // a Controller cannot be moved to another thread: this does not compile
//!     let _ = controller.stop_processor("pricing", "pricer");
//! });
//! ```
//!
//! # Recording and replay
//!
//! In RECORD mode (a group with a [`crate::GroupRecorder`]) each request is reported
//! to the recorder in position ([`crate::GroupRecorder::control_call`]) with its
//! arguments as text and its outcome. In a replay, `mongoose-replay` builds the
//! replayed processor in a [`crate::ProcessorHost`] with a [`ControlInterceptor`]
//! ([`crate::ProcessorHost::build_intercepted`]): while the host calls it, its
//! controller asks the interceptor instead of the control plane, and nothing is
//! executed live.
//!
//! # Not built
//!
//! `stop_service` / `start_service` are left out: [`crate::Service::start`] and
//! [`crate::Service::stop`] are lifecycle hooks the registry calls once per
//! registration (stop only after every group confirmed a withdrawal, or at shutdown),
//! so a processor calling them would stop a service twice or restart a stopped one.
//! Remove and register the service instead.
//!
//! # Example: a processor that stops another one
//!
//! ```
//! use std::sync::Arc;
//! use std::time::{Duration, Instant};
//! use mongoose_control::{controller, memory::MemoryFeeds, ControlConfig, ControlPlane};
//! use mongoose_core::{Processor, ProcessorError, StartContext};
//!
//! /// Stops the pricer when it reads "halt".
//! struct Supervisor;
//! impl Supervisor {
//!     fn on_command(&mut self, command: &String) -> Result<(), ProcessorError> {
//!         if command == "halt" {
//!             let control = controller::controller().expect("called by its group");
//!             // admitted and returns at once: a handler never waits for a reply
//!             control
//!                 .stop_processor("pricing", "pricer")
//!                 .map_err(|error| ProcessorError::new(error.to_string()))?;
//!         }
//!         Ok(())
//!     }
//! }
//! impl Processor for Supervisor {
//!     fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
//!         context.subscribe("commands", Supervisor::on_command)
//!     }
//! }
//!
//! struct Pricer;
//! impl Processor for Pricer {
//!     fn start(&mut self, _: &mut StartContext<'_>) -> Result<(), ProcessorError> {
//!         Ok(())
//!     }
//! }
//!
//! let feeds = MemoryFeeds::default();
//! let commands = feeds.feed::<String>("commands");
//! let plane = ControlPlane::new(ControlConfig::default(), Arc::new(feeds));
//! plane.add_processor("pricing", "pricer", || Pricer).reply.wait_for(Duration::from_secs(30))?;
//! plane.add_processor("ops", "supervisor", || Supervisor).reply.wait_for(Duration::from_secs(30))?;
//! commands.publish("halt".to_owned());
//! let deadline = Instant::now() + Duration::from_secs(30);
//! while plane.processor_handle("pricing", "pricer").is_some() && Instant::now() < deadline {
//!     std::thread::sleep(Duration::from_millis(1));
//! }
//! assert!(plane.processor_handle("pricing", "pricer").is_none(), "the pricer was stopped");
//! // off a group thread there is no controller
//! assert!(controller::controller().is_none());
//! # Ok::<(), mongoose_control::ControlError>(())
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use mongoose_core::context::{ContextFlag, ContextSlot};
use mongoose_core::{engine, FailureKind, ProcessorId};

use crate::error::ControlError;
use crate::handle::AddedProcessor;
use crate::record::GroupRecorder;
use crate::reply::{ControlReply, ReplyHandle, ReplyOutcome};
use crate::services::Service;
use crate::supplier::ProcessorSupplier;

/// The recorded name of [`Controller::stop_processor`]; its arguments: group, name.
pub const STOP_PROCESSOR: &str = "stop_processor";
/// The recorded name of [`Controller::register_service`]; its argument: the name.
pub const REGISTER_SERVICE: &str = "register_service";
/// The recorded name of [`Controller::remove_service`]; its argument: the name.
pub const REMOVE_SERVICE: &str = "remove_service";
/// The recorded name of [`Controller::add_processor`]; its arguments: group, name and
/// the processor's type.
pub const ADD_PROCESSOR: &str = "add_processor";

/// Answers a processor's control requests in place of the control plane while its
/// [`crate::ProcessorHost`] calls it ([`crate::ProcessorHost::build_intercepted`]):
/// what a replay gives the host of a replayed processor so that it never reaches a
/// live server.
pub trait ControlInterceptor {
    /// `processor` made the request `call` (one of [`STOP_PROCESSOR`],
    /// [`REGISTER_SERVICE`], [`REMOVE_SERVICE`], [`ADD_PROCESSOR`]) with `args`.
    /// `Ok(())`: the call returns as admitted, and nothing is executed; `Err(reason)`:
    /// the call returns [`ControlError::ControlCallRefused`] with the reason.
    fn intercept(
        &mut self,
        processor: ProcessorId,
        call: &str,
        args: &[String],
    ) -> Result<(), String>;
}

/// What a processor's [`Controller`] reaches to make its requests live: the control
/// plane, as the few calls a processor may make. A group holds it for its processors'
/// controllers as this trait, so the group side never names the plane (the plane
/// creates the groups: holding the plane's type would make the two depend on each
/// other).
pub(crate) trait ControlRequests: Send + Sync {
    /// Stops what is admitted under `name` in `group` at call time, admitted at once
    /// (never backing off, never waiting).
    fn stop_processor_now(&self, group: &str, name: &str) -> Result<ReplyHandle, ControlError>;

    /// Registers a service: see [`crate::ControlPlane::register_service`].
    fn register_service(&self, name: &str, service: Arc<dyn Service>) -> Result<(), ControlError>;

    /// Removes a service: see [`crate::ControlPlane::remove_service`].
    fn remove_service(&self, name: &str);

    /// Adds a processor: see [`crate::ControlPlane::add_processor`].
    fn add_processor(&self, group: &str, name: &str, supplier: ProcessorSupplier)
        -> AddedProcessor;
}

/// A request a processor made, for the group's recorder.
#[derive(Debug)]
struct Note {
    processor: ProcessorId,
    call: &'static str,
    args: Vec<String>,
    outcome: Result<(), String>,
}

/// What a group thread holds for its processors' controllers.
struct GroupLink {
    plane: Option<Arc<dyn ControlRequests>>,
    recording: bool,
    notes: Vec<Note>,
}

/// The group's link, in its thread's context.
static LINK: ContextSlot<Option<GroupLink>> = ContextSlot::new();
/// True while `LINK` holds notes not yet reported (a cheap check per dispatch).
static NOTED: ContextFlag = ContextFlag::new();
/// The control interceptor of this thread (a replay's).
static INTERCEPTOR: ContextSlot<Option<Box<dyn ControlInterceptor>>> = ContextSlot::new();

/// Installs the group's link on its thread until the guard is dropped; `recording`
/// when the group has a recorder (requests are then noted for it).
pub(crate) fn install(plane: Option<Arc<dyn ControlRequests>>, recording: bool) -> LinkGuard {
    let previous = LINK.replace(Some(GroupLink {
        plane,
        recording,
        notes: Vec::new(),
    }));
    LinkGuard {
        previous,
        _thread_bound: PhantomData,
    }
}

/// The group's link installed on its thread ([`install`]): removed when dropped (the
/// group's thread ends), dropping the plane view it held and its notes not reported;
/// what was installed before is restored.
#[must_use = "the link is removed as soon as the guard is dropped"]
pub(crate) struct LinkGuard {
    previous: Option<GroupLink>,
    _thread_bound: PhantomData<*const ()>,
}

impl Drop for LinkGuard {
    fn drop(&mut self) {
        let link = LINK.replace(self.previous.take());
        NOTED.set(false);
        drop(link);
    }
}

/// Reports the requests noted since the last call to `recorder`, in order (with no
/// recorder: forgets them).
pub(crate) fn report_calls(recorder: Option<&mut (dyn GroupRecorder + 'static)>) {
    if !NOTED.get() {
        return;
    }
    NOTED.set(false);
    let notes = LINK.with(|link| {
        link.as_mut()
            .map(|link| std::mem::take(&mut link.notes))
            .unwrap_or_default()
    });
    if let Some(recorder) = recorder {
        for note in notes {
            recorder.control_call(
                note.processor,
                note.call,
                &note.args,
                note.outcome.as_ref().map(|_| ()).map_err(String::as_str),
            );
        }
    }
}

fn note(
    processor: ProcessorId,
    call: &'static str,
    args: Vec<String>,
    outcome: Result<(), String>,
) {
    LINK.with(|link| {
        if let Some(link) = link.as_mut() {
            if link.recording {
                link.notes.push(Note {
                    processor,
                    call,
                    args,
                    outcome,
                });
                NOTED.set(true);
            }
        }
    });
}

/// Installs (or, with `None`, removes) the control interceptor of this thread and
/// returns the one it replaces. While one is installed, every [`Controller`] on the
/// thread asks it instead of the control plane, and [`controller()`] returns a
/// controller whenever a processor is being called (also off a group thread, as in a
/// replay, which runs on the caller's thread).
pub(crate) fn set_control_interceptor(
    interceptor: Option<Box<dyn ControlInterceptor>>,
) -> Option<Box<dyn ControlInterceptor>> {
    INTERCEPTOR.replace(interceptor)
}

fn intercepted() -> bool {
    INTERCEPTOR.with(|slot| slot.is_some())
}

/// The controller of the processor the group is calling on this thread, or `None`
/// outside such a call (or on a thread with neither a group nor an interceptor).
pub fn controller() -> Option<Controller> {
    let processor = engine::current_processor()?;
    let plane = LINK.with(|link| {
        link.as_ref()
            .and_then(|link| link.plane.as_ref().map(Arc::clone))
    });
    if plane.is_none() && !intercepted() {
        return None;
    }
    Some(Controller {
        processor,
        plane,
        _not_send: PhantomData,
    })
}

/// A processor's way to make control requests, on its group's thread (see the
/// [module documentation](self)). Take it with [`controller()`] inside the call that
/// needs it; it is neither `Send` nor `Sync`, so it never leaves that thread.
pub struct Controller {
    processor: ProcessorId,
    plane: Option<Arc<dyn ControlRequests>>,
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for Controller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("processor", &self.processor)
            .field("intercepted", &intercepted())
            .finish()
    }
}

impl Controller {
    /// The processor the requests are made for.
    pub fn processor(&self) -> ProcessorId {
        self.processor
    }

    /// Stops what is admitted under `name` in `group` at call time. Returns once the
    /// stop is admitted, with its reply to come (APPLIED "stopped" once released; a
    /// processor stopping itself is stopped at its group's next drain; from its own
    /// `stop()` the reply is APPLIED "alreadyStopped").
    ///
    /// # Errors
    /// [`ControlError::NoSuchProcessor`] when nothing is admitted under the name;
    /// [`ControlError::MailboxFull`] (nothing stops; retry later);
    /// [`ControlError::NotApplied`] when the group is closed; in a replay,
    /// [`ControlError::ControlCallRefused`].
    pub fn stop_processor(&self, group: &str, name: &str) -> Result<ReplyHandle, ControlError> {
        let args = vec![group.to_owned(), name.to_owned()];
        self.submit(
            STOP_PROCESSOR,
            args,
            |plane| plane.stop_processor_now(group, name),
            || {
                ReplyHandle::completed(ControlReply::applied_with(
                    None,
                    "replayed: not executed",
                    None,
                    Some(name.to_owned()),
                ))
            },
        )
    }

    /// Registers a service (book: guarantees/control-plane.md): its
    /// injection and `start()` run here, synchronously; the broadcast to the groups is
    /// sent and not waited for.
    ///
    /// # Errors
    /// As [`crate::ControlPlane::register_service`]; in a replay,
    /// [`ControlError::ControlCallRefused`] (a registry mutation is never replayed).
    pub fn register_service(
        &self,
        name: &str,
        service: Arc<dyn Service>,
    ) -> Result<(), ControlError> {
        self.submit(
            REGISTER_SERVICE,
            vec![name.to_owned()],
            |plane| plane.register_service(name, service),
            || (),
        )
    }

    /// Removes a service (book: guarantees/control-plane.md): the withdrawal is
    /// broadcast and not waited for; the service is stopped once every group
    /// confirmed it. An unknown name is ignored.
    ///
    /// # Errors
    /// In a replay, [`ControlError::ControlCallRefused`] (a registry mutation is never
    /// replayed).
    pub fn remove_service(&self, name: &str) -> Result<(), ControlError> {
        self.submit(
            REMOVE_SERVICE,
            vec![name.to_owned()],
            |plane| {
                plane.remove_service(name);
                Ok(())
            },
            || (),
        )
    }

    /// Adds a processor to `group` (created on demand), like
    /// [`crate::ControlPlane::add_processor`]: returns its handle and its reply to come; the
    /// supplier runs on that group's thread.
    ///
    /// # Errors
    /// [`ControlError::NotApplied`] when the add was refused before it reached the
    /// group (a name in use, a stopping server, a full mailbox); in a replay,
    /// [`ControlError::ControlCallRefused`] (a supplier is code the recording cannot
    /// identify: it is never run).
    pub fn add_processor(
        &self,
        group: &str,
        name: &str,
        supplier: impl Into<ProcessorSupplier>,
    ) -> Result<AddedProcessor, ControlError> {
        let supplier = supplier.into();
        let type_name = supplier.type_name();
        let args = vec![group.to_owned(), name.to_owned(), type_name.to_owned()];
        self.submit(
            ADD_PROCESSOR,
            args,
            |plane| {
                let added = plane.add_processor(group, name, supplier);
                match (&added.handle, added.reply.try_get()) {
                    (None, Some(reply)) => Err(ControlError::NotApplied(Box::new(reply))),
                    _ => Ok(added),
                }
            },
            || AddedProcessor {
                handle: None,
                reply: ReplyHandle::completed(ControlReply::not_applied(
                    None,
                    ReplyOutcome::Refused,
                    FailureKind::ReplayStopped,
                    "replayed: not executed",
                    None,
                    Some(name.to_owned()),
                )),
            },
        )
    }

    /// Asks the interceptor when one is installed, else makes the request live and
    /// notes it for the group's recorder.
    fn submit<T>(
        &self,
        call: &'static str,
        args: Vec<String>,
        live: impl FnOnce(&dyn ControlRequests) -> Result<T, ControlError>,
        replayed: impl FnOnce() -> T,
    ) -> Result<T, ControlError> {
        // taken out while it answers, so an interceptor may not re-enter itself
        if let Some(mut interceptor) = set_control_interceptor(None) {
            let answer = interceptor.intercept(self.processor, call, &args);
            set_control_interceptor(Some(interceptor));
            return match answer {
                Ok(()) => Ok(replayed()),
                Err(reason) => Err(ControlError::ControlCallRefused {
                    call: call.to_owned(),
                    reason,
                }),
            };
        }
        let Some(plane) = &self.plane else {
            return Err(ControlError::ControlCallRefused {
                call: call.to_owned(),
                reason: "this thread runs no processor group, so the request has nowhere to go: make it from a processor its group is calling".to_owned(),
            });
        };
        let result = live(plane.as_ref());
        let outcome = match &result {
            Ok(_) => Ok(()),
            Err(error) => Err(error.to_string()),
        };
        note(self.processor, call, args, outcome);
        result
    }
}

/// The controller on the context a processor's `start` is given: `context.controller()`
/// is [`controller()`] (a [`Controller`] while the group runs the processor's start),
/// so that everything a processor can ask for in `start` is found on its
/// [`mongoose_core::StartContext`]. (The context is defined in `mongoose-core`, which
/// cannot name the control plane's types; this trait adds the method.)
///
/// ```
/// use mongoose_control::StartContextExt;
/// use mongoose_core::{Processor, ProcessorError, StartContext};
///
/// struct Starter;
/// impl Processor for Starter {
///     fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
///         let control = context.controller().ok_or("started outside a group")?;
///         control
///             .remove_service("cache")
///             .map_err(|error| ProcessorError::new(error.to_string()))
///     }
/// }
/// ```
pub trait StartContextExt {
    /// The controller of the processor being started; `None` outside a group's call.
    fn controller(&self) -> Option<Controller>;
}

impl StartContextExt for mongoose_core::StartContext<'_> {
    fn controller(&self) -> Option<Controller> {
        controller()
    }
}
