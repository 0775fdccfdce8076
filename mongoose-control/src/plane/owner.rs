//! The owner of a control plane: the [`ControlPlane`] a user holds, which shuts the
//! plane down when dropped, over the [`Plane`] it shares with the views its groups'
//! processors reach through their controllers.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{ControlConfig, Plane};
use crate::error::ControlError;
use crate::feeds::FeedConnector;
use crate::group::{GroupOptions, GroupStatus, ProcessorGroup};
use crate::handle::AddedProcessor;
use crate::handle::{ProcessorHandle, ServerId};
use crate::reply::{ControlReply, ReplyHandle};
use crate::services::{Service, ServiceBroadcast};
use crate::supplier::ProcessorSupplier;

/// The control plane of one server.
///
/// This value owns the plane: dropping it stops admitting requests, closes every group
/// and shuts the reply executor down. The views a group's processors use for their
/// control requests ([`crate::Controller`]) share its state and never shut it down.
pub struct ControlPlane {
    plane: Arc<Plane>,
}

impl fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.plane, f)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.plane.shut_down();
    }
}

impl ControlPlane {
    /// A started control plane: groups start their threads when created.
    pub fn new(config: ControlConfig, feeds: Arc<dyn FeedConnector>) -> Self {
        let plane = Plane::new_unstarted(config, feeds);
        plane.mark_started();
        ControlPlane { plane }
    }

    /// A control plane whose groups queue requests until [`ControlPlane::start`].
    pub fn new_unstarted(config: ControlConfig, feeds: Arc<dyn FeedConnector>) -> Self {
        ControlPlane {
            plane: Plane::new_unstarted(config, feeds),
        }
    }

    /// This server's id (handles carry it).
    pub fn server_id(&self) -> ServerId {
        self.plane.server_id()
    }

    /// Starts every group's thread; groups created later start at once.
    ///
    /// # Errors
    /// [`ControlError::Spawn`] when a thread cannot be started.
    pub fn start(&self) -> Result<(), ControlError> {
        self.plane.start()
    }

    /// Creates a group with `options` (or returns the existing one of that name).
    ///
    /// # Errors
    /// [`ControlError::ServerStopping`] once a stop began; [`ControlError::Spawn`].
    pub fn create_group(
        &self,
        name: &str,
        options: GroupOptions,
    ) -> Result<ProcessorGroup, ControlError> {
        self.plane.create_group(name, options)
    }

    /// The group of that name.
    pub fn group(&self, name: &str) -> Option<ProcessorGroup> {
        self.plane.group(name)
    }

    /// Every group's name.
    pub fn group_names(&self) -> Vec<String> {
        self.plane.group_names()
    }

    /// A group's status.
    pub fn group_status(&self, name: &str) -> Option<GroupStatus> {
        self.plane.group_status(name)
    }

    /// The processors the groups still hold though they no longer run them, as
    /// `processor:<group>/<name>`, sorted: quarantined processors (a group keeps their
    /// instances and names, also after it closed) and every processor of a dead group.
    /// Any of them may still hold a service it was given, so while this is not empty
    /// the services must not be stopped (book: guarantees/control-plane.md: "shutdown remains incomplete with dependent services retained").
    pub fn retained_processors(&self) -> Vec<String> {
        self.plane.retained_processors()
    }

    /// Begins the server's stop: senders backing off on a full mailbox leave at once
    /// (NOT_RUNNING "server is stopping"), and new adds and registrations are refused.
    pub fn begin_stopping(&self) {
        self.plane.begin_stopping()
    }

    /// True once [`ControlPlane::begin_stopping`] was called.
    pub fn is_stopping(&self) -> bool {
        self.plane.is_stopping()
    }

    /// Closes every group and waits for them until `deadline`; returns the groups not
    /// confirmed closed. Call it from an ordinary thread (a server's stop thread), not
    /// from a processor: it waits.
    pub fn close_groups(&self, deadline: Instant) -> Vec<String> {
        self.plane.close_groups(deadline)
    }

    /// Closes the group `name` (its running processors are stopped, its queues fenced
    /// and unsubscribed) and waits for it until `deadline`; a group that closed and
    /// retains no processor is forgotten, so the name can be created again. `Ok(false)`
    /// when there is no such group. Call it off agent threads: it waits.
    ///
    /// # Errors
    /// The group did not close by the deadline, or it retains quarantined processors
    /// (it stays, closed, until the server stops); the message says which.
    pub fn remove_group(&self, name: &str, deadline: Instant) -> Result<bool, String> {
        self.plane.remove_group(name, deadline)
    }

    /// Shuts the reply executor down: later completions run on a late thread.
    pub fn shut_down_replies(&self) {
        self.plane.shut_down_replies()
    }

    /// Adds a processor and returns its handle and reply at once, without waiting and
    /// without backing off (book: guarantees/control-plane.md). Never fails: a
    /// duplicate name comes back REFUSED (name in use), a stopping server NOT_RUNNING.
    ///
    /// The supplier runs on the group's thread: a closure returning a processor
    /// (`|| Pricer`), or a [`ProcessorSupplier::boxed`] factory of configured
    /// processors, named for the group's recorder with [`ProcessorSupplier::named`].
    pub fn add_processor(
        &self,
        group: &str,
        name: &str,
        supplier: impl Into<ProcessorSupplier>,
    ) -> AddedProcessor {
        self.plane.add_processor(group, name, supplier)
    }

    /// Adds a processor, waiting up to `control_wait` (admission and reply together)
    /// off agent threads (book: guarantees/control-plane.md). On an agent
    /// thread, or before the group started, it returns once queued. A timeout logs and
    /// returns; the add still applies.
    ///
    /// # Errors
    /// [`ControlError::NameInUse`] at once; [`ControlError::ServerStopping`];
    /// [`ControlError::MailboxFull`] (the name is released); with
    /// [`AddFailurePolicy::Throw`](super::AddFailurePolicy::Throw), [`ControlError::NotApplied`].
    pub fn add_event_processor(
        &self,
        group: &str,
        name: &str,
        supplier: impl Into<ProcessorSupplier>,
    ) -> Result<(), ControlError> {
        self.plane.add_event_processor(group, name, supplier)
    }

    /// A handle for what is admitted under the name now (prefer the handle from
    /// [`ControlPlane::add_processor`], which cannot name a replacement).
    pub fn processor_handle(&self, group: &str, name: &str) -> Option<ProcessorHandle> {
        self.plane.processor_handle(group, name)
    }

    /// Stops exactly the registration the handle names; returns the reply at once
    /// without backing off. A handle from another server is refused and stops nothing.
    pub fn stop_processor(&self, handle: &ProcessorHandle) -> ReplyHandle {
        self.plane.stop_processor(handle)
    }

    /// Stops what is admitted under the name at call time (void form). No group or no
    /// such name: returns at once. Off an agent thread it waits up to `control_wait`;
    /// a timeout logs and returns (the stop still applies).
    ///
    /// # Errors
    /// [`ControlError::MailboxFull`]: nothing is stopped and the name stays reserved.
    pub fn stop_processor_by_name(&self, group: &str, name: &str) -> Result<(), ControlError> {
        self.plane.stop_processor_by_name(group, name)
    }

    /// Stops what is admitted under the name at call time and returns the reply; one
    /// deadline, `wait` from the call, covers admission and reply. `None` when the
    /// caller may not wait (agent thread, group not started) or no reply came in time
    /// (the stop still applies).
    pub fn stop_processor_wait(
        &self,
        group: &str,
        name: &str,
        wait: Duration,
    ) -> Option<ControlReply> {
        self.plane.stop_processor_wait(group, name, wait)
    }

    /// Enables audit capture (see [`mongoose_audit::capture`]): sessions go below
    /// `settings.root`, opened by `settings.resources`. Without it, capture calls fail
    /// with [`ControlError::CaptureDisabled`].
    pub fn enable_capture(&self, settings: mongoose_audit::capture::CaptureSettings) {
        self.plane.enable_capture(settings);
    }

    /// Starts capturing the processor `selector` names (`name`, or `group/name` with
    /// each part percent-encoded when it holds `/` or `%`): a request to its group,
    /// answered APPLIED "recording" once the capture is installed on the processor's
    /// thread, APPLIED "already recording" when it records, FAILED with the reason
    /// when the open failed, timed out ("open timed out") or a limit was reached.
    ///
    /// # Errors
    /// [`ControlError::UnknownProcessor`], [`ControlError::AmbiguousProcessor`] (a
    /// name admitted in several groups: address it as `group/name`),
    /// [`ControlError::NoSuchProcessor`], [`ControlError::BadSelector`],
    /// [`ControlError::CaptureDisabled`].
    pub fn start_capture(&self, selector: &str) -> Result<ReplyHandle, ControlError> {
        self.plane.start_capture(selector)
    }

    /// [`ControlPlane::start_capture`], waiting for the reply up to the open timeout
    /// plus 5 s.
    ///
    /// # Errors
    /// As [`ControlPlane::start_capture`], and [`ControlError::ReplyTimeout`] (the
    /// start may still complete) or [`ControlError::WaitOnAgentThread`].
    pub fn start_capture_wait(&self, selector: &str) -> Result<ControlReply, ControlError> {
        self.plane.start_capture_wait(selector)
    }

    /// Stops the capture of the processor `selector` names: APPLIED "stopped
    /// recording" once it is uninstalled (its writer is closed afterwards on a closer
    /// thread), APPLIED "not recording" when it does not record.
    ///
    /// # Errors
    /// As [`ControlPlane::start_capture`].
    pub fn stop_capture(&self, selector: &str) -> Result<ReplyHandle, ControlError> {
        self.plane.stop_capture(selector)
    }

    /// [`ControlPlane::stop_capture`], waiting for the reply.
    ///
    /// # Errors
    /// As [`ControlPlane::start_capture_wait`].
    pub fn stop_capture_wait(&self, selector: &str) -> Result<ControlReply, ControlError> {
        self.plane.stop_capture_wait(selector)
    }

    /// Every group's capture sessions (this run's, the newest ended ones kept).
    pub fn capture_statuses(&self) -> Vec<mongoose_audit::capture::CaptureStatus> {
        self.plane.capture_statuses()
    }

    /// Waits, up to `deadline`, until no group holds a capture resource (after the
    /// groups closed, their closes run on closer threads); returns one line per group
    /// still holding some (failed closes are never retried, so they are not waited
    /// for). Empty: every capture resource is closed.
    pub fn await_captures_resolved(&self, deadline: Instant) -> Vec<String> {
        self.plane.await_captures_resolved(deadline)
    }

    /// Sends a service broadcast to one group (low level: the registry uses it; an
    /// old version is answered APPLIED "ignored: stale version N"). Never backs off.
    pub fn send_service_broadcast(
        &self,
        group: &ProcessorGroup,
        broadcast: ServiceBroadcast,
    ) -> ReplyHandle {
        self.plane.send_service_broadcast(group, broadcast)
    }

    /// Registers a service (book: guarantees/control-plane.md): the name is
    /// reserved under the service lock, injection and `start()` run outside it, then a
    /// versioned broadcast goes to every group; off an agent thread the call waits up
    /// to `control_wait` for every group's reply.
    ///
    /// # Errors
    /// [`ControlError::ServerStopping`]; [`ControlError::ServiceRegistration`] for a
    /// name in use, an instance still being stopped by an earlier removal, a failed
    /// `start()`, or a removal that overtook the registration.
    pub fn register_service(
        &self,
        name: &str,
        service: Arc<dyn Service>,
    ) -> Result<(), ControlError> {
        self.plane.register_service(name, service)
    }

    /// Removes a service (book: guarantees/control-plane.md): unbinds it from
    /// every group first and stops it only when every group confirmed the withdrawal;
    /// otherwise the control plane keeps owning it until [`ControlPlane::stop_services`].
    /// Unknown names and calls during a stop are ignored.
    pub fn remove_service(&self, name: &str) {
        self.plane.remove_service(name)
    }

    /// Names of the services this control plane owns and has not confirmed stopped:
    /// registered, being withdrawn, removed but kept because a group did not confirm
    /// the withdrawal, or handed to shutdown whose stop is still running or failed.
    pub fn owned_services(&self) -> Vec<String> {
        self.plane.owned_services()
    }

    /// Stops every service still owned (registered, withdrawing, retained), once each,
    /// each on its own helper thread, and waits for them until `deadline`; call it
    /// from an ordinary thread once every group closed and
    /// [`ControlPlane::retained_processors`] is empty. Returns the services not
    /// confirmed stopped, sorted: a stop still running on its helper, or one that
    /// failed or panicked.
    ///
    /// Calling it again resumes: it re-joins helpers still running, and never calls a
    /// `stop()` that failed again (its side effects are unknown, so the service stays
    /// listed; book: guarantees/control-plane.md).
    pub fn stop_services(&self, deadline: Instant) -> Vec<String> {
        self.plane.stop_services(deadline)
    }

    /// Runs `processor`'s admin command `command` with `args` on its group's thread,
    /// through the group's control mailbox (between items, never while a handler
    /// runs), and returns the reply handle at once, without backing off on a full
    /// mailbox. The reply is APPLIED with the command's [`ControlReply::output`], FAILED
    /// when the command returned an error or panicked, REFUSED for an unknown group,
    /// processor or command (the reason lists what there is). Every request that
    /// reaches the group is written to its control audit. See [`crate::admin`].
    pub fn invoke_admin_command(
        &self,
        group: &str,
        processor: &str,
        command: &str,
        args: Vec<String>,
    ) -> ReplyHandle {
        self.plane
            .invoke_admin_command(group, processor, command, args)
    }

    /// [`ControlPlane::invoke_admin_command`], waiting for the reply: one deadline,
    /// `wait` from the call, covers admission (backing off on a full mailbox) and the
    /// reply. `None` when the caller may not wait (an agent thread, a group not
    /// started) or no reply came in time: the command still runs.
    pub fn invoke_admin_command_wait(
        &self,
        group: &str,
        processor: &str,
        command: &str,
        args: Vec<String>,
        wait: Duration,
    ) -> Option<ControlReply> {
        self.plane
            .invoke_admin_command_wait(group, processor, command, args, wait)
    }

    /// The admin commands the running processor `processor` of `group` registered,
    /// sorted; `None` when there is no such group or running processor.
    pub fn admin_commands(&self, group: &str, processor: &str) -> Option<Vec<String>> {
        self.plane.admin_commands(group, processor)
    }
}
