//! The control plane of one server: its groups, the processor and service calls, and
//! the group-side pieces of shutdown.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::{agent, FailureKind, Processor};
use parking_lot::{Condvar, Mutex};

use crate::error::ControlError;
use crate::feeds::FeedConnector;
use crate::group::{
    Admission, Envelope, GroupOptions, GroupState, GroupStatus, ProcessorGroup, Refusal, Request,
    ServiceSnapshot,
};
use crate::handle::{ProcessorHandle, ServerId};
use crate::idle::IdleStrategy;
use crate::reply::{ControlReply, ReplyExecutor, ReplyHandle, ReplyOutcome};
use crate::services::{Service, ServiceBroadcast, ServiceChange, ShutdownStops};

/// What the void `add_event_processor` does with a reply that is not APPLIED.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum AddFailurePolicy {
    /// Log and return normally.
    #[default]
    Report,
    /// Return [`ControlError::NotApplied`].
    Throw,
}

/// Control-plane settings (control-plane-contracts "Configuration keys").
#[derive(Clone, Debug)]
pub struct ControlConfig {
    /// How long void calls wait, off agent threads, for admission and reply together.
    pub control_wait: Duration,
    /// What void adds do with a reply that is not APPLIED.
    pub add_failure_policy: AddFailurePolicy,
    /// The most reply-executor threads.
    pub reply_threads: usize,
    /// Audit records kept per group (0: 10 000).
    pub audit_capacity: usize,
    /// Mailbox capacity of groups created on demand.
    pub mailbox_capacity: usize,
    /// Idle strategy of groups created on demand.
    pub idle: IdleStrategy,
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            control_wait: Duration::from_millis(10_000),
            add_failure_policy: AddFailurePolicy::Report,
            reply_threads: 16,
            audit_capacity: 0,
            mailbox_capacity: 1024,
            idle: IdleStrategy::default(),
        }
    }
}

/// The result of a stage-style add: the handle of the registration it admitted (none
/// when refused before admission) and its reply.
#[derive(Debug)]
pub struct AddedProcessor {
    /// The registration admitted, or `None` when refused before admission.
    pub handle: Option<ProcessorHandle>,
    /// The add's reply: APPLIED once started, FAILED once a failed start was released.
    pub reply: ReplyHandle,
}

struct ServiceEntry {
    version: u64,
    service: Arc<dyn Service>,
    published: bool,
}

struct Withdrawal {
    name: String,
    service: Arc<dyn Service>,
    state: Mutex<WithdrawalState>,
    done: Condvar,
}

struct WithdrawalState {
    remaining: usize,
    unconfirmed: bool,
    caller_waiting: bool,
    settled: bool,
}

#[derive(Default)]
struct RegistryState {
    entries: HashMap<String, ServiceEntry>,
    versions: HashMap<String, u64>,
    withdrawing: Vec<Arc<Withdrawal>>,
    retained: Vec<(String, Arc<dyn Service>)>,
}

#[derive(Default)]
struct Registry {
    state: Mutex<RegistryState>,
    /// The stops shutdown started (outside the service lock: they are awaited).
    shutdown: ShutdownStops,
}

impl Registry {
    fn snapshot(&self) -> Vec<ServiceBroadcast> {
        let state = self.state.lock();
        state
            .entries
            .iter()
            .filter(|(_, entry)| entry.published)
            .map(|(name, entry)| ServiceBroadcast {
                name: name.clone(),
                version: entry.version,
                change: ServiceChange::Registered(Arc::clone(&entry.service)),
            })
            .collect()
    }

    fn next_version(state: &mut RegistryState, name: &str) -> u64 {
        let version = state.versions.entry(name.to_owned()).or_insert(0);
        *version += 1;
        *version
    }

    /// Settles a withdrawal once: stops the service when every group confirmed it,
    /// otherwise keeps owning it until shutdown.
    fn settle(&self, withdrawal: &Arc<Withdrawal>) {
        let confirmed = {
            let mut state = withdrawal.state.lock();
            if state.settled || state.remaining > 0 {
                return;
            }
            state.settled = true;
            !state.unconfirmed
        };
        {
            let mut registry = self.state.lock();
            registry
                .withdrawing
                .retain(|other| !Arc::ptr_eq(other, withdrawal));
            if !confirmed {
                registry
                    .retained
                    .push((withdrawal.name.clone(), Arc::clone(&withdrawal.service)));
            }
        }
        if confirmed {
            if let Err(error) = withdrawal.service.stop() {
                tracing::error!(service = %withdrawal.name, %error, "service stop failed");
            }
        } else {
            tracing::warn!(service = %withdrawal.name, "service '{}' remains owned until shutdown", withdrawal.name);
        }
    }
}

fn same_instance(a: &Arc<dyn Service>, b: &Arc<dyn Service>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

/// The control plane of one server.
pub struct ControlPlane {
    server: ServerId,
    config: ControlConfig,
    feeds: Arc<dyn FeedConnector>,
    executor: ReplyExecutor,
    groups: Arc<Mutex<BTreeMap<String, ProcessorGroup>>>,
    stopping: Arc<AtomicBool>,
    started: Arc<AtomicBool>,
    next_request: Arc<AtomicI64>,
    registry: Arc<Registry>,
    /// True for the view a group's thread holds for its processors' control requests
    /// ([`crate::controller`]): it shares every piece of state and closes nothing when
    /// dropped.
    view: bool,
}

impl fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControlPlane")
            .field("server", &self.server)
            .field("groups", &self.groups.lock().keys().collect::<Vec<_>>())
            .finish()
    }
}

fn refused(
    outcome: ReplyOutcome,
    kind: FailureKind,
    reason: &str,
    generation: i64,
    name: Option<&str>,
) -> ControlReply {
    ControlReply::not_applied(
        -1,
        outcome,
        kind,
        reason,
        generation,
        name.map(str::to_owned),
    )
}

impl ControlPlane {
    /// A started control plane: groups start their threads when created.
    pub fn new(config: ControlConfig, feeds: Arc<dyn FeedConnector>) -> Self {
        let plane = ControlPlane::new_unstarted(config, feeds);
        plane.started.store(true, Ordering::Release);
        plane
    }

    /// A control plane whose groups queue requests until [`ControlPlane::start`].
    pub fn new_unstarted(config: ControlConfig, feeds: Arc<dyn FeedConnector>) -> Self {
        let executor = ReplyExecutor::new(config.reply_threads);
        ControlPlane {
            server: ServerId::fresh(),
            config,
            feeds,
            executor,
            groups: Arc::new(Mutex::new(BTreeMap::new())),
            stopping: Arc::new(AtomicBool::new(false)),
            started: Arc::new(AtomicBool::new(false)),
            next_request: Arc::new(AtomicI64::new(1)),
            registry: Arc::new(Registry::default()),
            view: false,
        }
    }

    /// A view of this control plane sharing all its state, for the processors of a
    /// group (their [`crate::Controller`]): dropping it closes nothing. A group's
    /// thread holds one while it runs (a group not started holds it in its seed), so
    /// the cycle plane -> group -> view ends when the group closes.
    pub(crate) fn view(&self) -> ControlPlane {
        ControlPlane {
            server: self.server,
            config: self.config.clone(),
            feeds: Arc::clone(&self.feeds),
            executor: self.executor.clone(),
            groups: Arc::clone(&self.groups),
            stopping: Arc::clone(&self.stopping),
            started: Arc::clone(&self.started),
            next_request: Arc::clone(&self.next_request),
            registry: Arc::clone(&self.registry),
            view: true,
        }
    }

    /// This server's id (handles carry it).
    pub fn server_id(&self) -> ServerId {
        self.server
    }

    /// Starts every group's thread; groups created later start at once.
    ///
    /// # Errors
    /// [`ControlError::Spawn`] when a thread cannot be started.
    pub fn start(&self) -> Result<(), ControlError> {
        self.started.store(true, Ordering::Release);
        let groups: Vec<ProcessorGroup> = self.groups.lock().values().cloned().collect();
        for group in groups {
            group.start()?;
        }
        Ok(())
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
        if self.stopping.load(Ordering::Acquire) {
            return Err(ControlError::ServerStopping);
        }
        let group = {
            let mut groups = self.groups.lock();
            if let Some(existing) = groups.get(name) {
                return Ok(existing.clone());
            }
            let registry = Arc::clone(&self.registry);
            let snapshot: ServiceSnapshot = Arc::new(move || registry.snapshot());
            let group = ProcessorGroup::new(
                name,
                self.server,
                options,
                self.executor.clone(),
                Arc::clone(&self.feeds),
                snapshot,
                Some(self.view()),
            );
            groups.insert(name.to_owned(), group.clone());
            group
        };
        if self.started.load(Ordering::Acquire) {
            group.start()?;
        }
        Ok(group)
    }

    fn group_or_create(&self, name: &str) -> Result<ProcessorGroup, ControlError> {
        if let Some(group) = self.group(name) {
            return Ok(group);
        }
        self.create_group(
            name,
            GroupOptions {
                idle: self.config.idle,
                mailbox_capacity: self.config.mailbox_capacity,
                audit_capacity: self.config.audit_capacity,
                ..GroupOptions::default()
            },
        )
    }

    /// The group of that name.
    pub fn group(&self, name: &str) -> Option<ProcessorGroup> {
        self.groups.lock().get(name).cloned()
    }

    /// Every group's name.
    pub fn group_names(&self) -> Vec<String> {
        self.groups.lock().keys().cloned().collect()
    }

    /// A group's status.
    pub fn group_status(&self, name: &str) -> Option<GroupStatus> {
        self.group(name).map(|group| group.status())
    }

    fn next_request_id(&self) -> i64 {
        self.next_request.fetch_add(1, Ordering::Relaxed)
    }

    fn envelope(&self, request: Request) -> (Envelope, ReplyHandle) {
        let (handle, mut sender) = ReplyHandle::pending();
        sender.request_id = self.next_request_id();
        (
            Envelope {
                request,
                reply: sender,
            },
            handle,
        )
    }

    fn backoff_admission(&self, group: &ProcessorGroup, deadline: Instant) -> Admission {
        if agent::is_agent_thread() {
            Admission::Immediate
        } else {
            Admission::Backoff {
                deadline: deadline.min(Instant::now() + group.full_timeout()),
                stopping: Arc::clone(&self.stopping),
            }
        }
    }

    fn may_wait(&self, group: &ProcessorGroup) -> bool {
        !agent::is_agent_thread() && group.is_started()
    }

    /// The reply to a request refused at admission (it never reached the group).
    fn refusal_reply(
        group: &ProcessorGroup,
        refusal: Refusal,
        generation: i64,
        name: &str,
    ) -> ControlReply {
        let name = Some(name);
        match refusal {
            Refusal::Full => refused(
                ReplyOutcome::Refused,
                FailureKind::RefusedAdmission,
                "mailbox full",
                generation,
                name,
            ),
            Refusal::Deadline => refused(
                ReplyOutcome::Refused,
                FailureKind::RefusedDeadline,
                "not admitted within its deadline: mailbox full",
                generation,
                name,
            ),
            Refusal::ServerStopping => refused(
                ReplyOutcome::NotRunning,
                FailureKind::FailedShutdown,
                "server is stopping",
                generation,
                name,
            ),
            Refusal::NotRunning(GroupState::Dead) => {
                let _ = group;
                refused(
                    ReplyOutcome::NotRunning,
                    FailureKind::FailedDead,
                    "group is dead",
                    generation,
                    name,
                )
            }
            Refusal::NotRunning(_) => refused(
                ReplyOutcome::NotRunning,
                FailureKind::FailedShutdown,
                "group closed",
                generation,
                name,
            ),
        }
    }

    fn add_request<P, F>(name: &str, generation: u64, supplier: F) -> Request
    where
        P: Processor,
        F: FnOnce() -> P + Send + 'static,
    {
        Request::Add {
            name: name.to_owned(),
            generation,
            type_name: std::any::type_name::<P>(),
            supplier: Box::new(move || Box::new(supplier()) as Box<dyn Processor>),
        }
    }

    /// Adds a processor and returns its handle and reply at once, without waiting and
    /// without backing off (control-plane-contracts "addProcessor"). Never fails: a
    /// duplicate name comes back REFUSED (name in use), a stopping server NOT_RUNNING.
    /// The supplier runs on the group's thread.
    pub fn add_processor<P, F>(&self, group: &str, name: &str, supplier: F) -> AddedProcessor
    where
        P: Processor,
        F: FnOnce() -> P + Send + 'static,
    {
        self.add_processor_boxed_as(
            group,
            name,
            std::any::type_name::<P>(),
            Box::new(move || Box::new(supplier()) as Box<dyn Processor>),
        )
    }

    /// [`ControlPlane::add_processor_boxed`] naming the processor's type, which a
    /// group's recorder keeps as the stream's provenance (`mongoose-replay`).
    pub fn add_processor_boxed_as(
        &self,
        group: &str,
        name: &str,
        type_name: &'static str,
        supplier: Box<dyn FnOnce() -> Box<dyn Processor> + Send>,
    ) -> AddedProcessor {
        self.add_processor_erased(group, name, type_name, supplier)
    }

    /// [`ControlPlane::add_processor`] for a supplier of an already boxed processor
    /// (processors built from configuration by a factory).
    pub fn add_processor_boxed(
        &self,
        group: &str,
        name: &str,
        supplier: Box<dyn FnOnce() -> Box<dyn Processor> + Send>,
    ) -> AddedProcessor {
        self.add_processor_erased(group, name, "", supplier)
    }

    fn add_processor_erased(
        &self,
        group: &str,
        name: &str,
        type_name: &'static str,
        supplier: Box<dyn FnOnce() -> Box<dyn Processor> + Send>,
    ) -> AddedProcessor {
        let refused_now = |reply: ControlReply| AddedProcessor {
            handle: None,
            reply: ReplyHandle::completed(reply),
        };
        if self.stopping.load(Ordering::Acquire) {
            return refused_now(refused(
                ReplyOutcome::NotRunning,
                FailureKind::FailedShutdown,
                "server is stopping",
                -1,
                Some(name),
            ));
        }
        let group = match self.group_or_create(group) {
            Ok(group) => group,
            Err(error) => {
                return refused_now(refused(
                    ReplyOutcome::NotRunning,
                    FailureKind::FailedShutdown,
                    &error.to_string(),
                    -1,
                    Some(name),
                ))
            }
        };
        let Some(generation) = group.reserve(name) else {
            return refused_now(refused(
                ReplyOutcome::Refused,
                FailureKind::RefusedState,
                "name in use",
                -1,
                Some(name),
            ));
        };
        let request = Request::Add {
            name: name.to_owned(),
            generation,
            type_name,
            supplier,
        };
        let (envelope, reply) = self.envelope(request);
        match group.admit(envelope, Admission::Immediate) {
            Ok(()) => AddedProcessor {
                handle: Some(ProcessorHandle {
                    server: self.server,
                    group: group.name().to_owned(),
                    name: name.to_owned(),
                    generation,
                }),
                reply,
            },
            Err((envelope, refusal)) => {
                group.release_reservation(name, generation);
                let answer = Self::refusal_reply(&group, refusal, generation as i64, name);
                ProcessorGroup::answer_refused(envelope, answer);
                AddedProcessor {
                    handle: None,
                    reply,
                }
            }
        }
    }

    /// Adds a processor, waiting up to `control_wait` (admission and reply together)
    /// off agent threads (control-plane-contracts "addEventProcessor"). On an agent
    /// thread, or before the group started, it returns once queued. A timeout logs and
    /// returns; the add still applies.
    ///
    /// # Errors
    /// [`ControlError::NameInUse`] at once; [`ControlError::ServerStopping`];
    /// [`ControlError::MailboxFull`] (the name is released); with
    /// [`AddFailurePolicy::Throw`], [`ControlError::NotApplied`].
    pub fn add_event_processor<P, F>(
        &self,
        group: &str,
        name: &str,
        supplier: F,
    ) -> Result<(), ControlError>
    where
        P: Processor,
        F: FnOnce() -> P + Send + 'static,
    {
        let deadline = Instant::now() + self.config.control_wait;
        if self.stopping.load(Ordering::Acquire) {
            return Err(ControlError::ServerStopping);
        }
        let group = self.group_or_create(group)?;
        let Some(generation) = group.reserve(name) else {
            return Err(ControlError::NameInUse {
                group: group.name().to_owned(),
                name: name.to_owned(),
            });
        };
        let (envelope, reply) = self.envelope(Self::add_request(name, generation, supplier));
        if let Err((envelope, refusal)) =
            group.admit(envelope, self.backoff_admission(&group, deadline))
        {
            group.release_reservation(name, generation);
            let answer = Self::refusal_reply(&group, refusal, generation as i64, name);
            ProcessorGroup::answer_refused(envelope, answer);
            return Err(match refusal {
                Refusal::Full | Refusal::Deadline => ControlError::MailboxFull {
                    group: group.name().to_owned(),
                    capacity: group.capacity(),
                },
                Refusal::ServerStopping | Refusal::NotRunning(_) => ControlError::ServerStopping,
            });
        }
        if !self.may_wait(&group) {
            log_outcome(&reply, "add");
            return Ok(());
        }
        match reply.wait(deadline) {
            Ok(answer) if answer.applied() => Ok(()),
            Ok(answer) => match self.config.add_failure_policy {
                AddFailurePolicy::Report => {
                    tracing::warn!(group = group.name(), processor = name, outcome = %answer.outcome, kind = ?answer.kind, reason = %answer.reason, "processor not added");
                    Ok(())
                }
                AddFailurePolicy::Throw => Err(ControlError::NotApplied(Box::new(answer))),
            },
            Err(_) => {
                tracing::warn!(
                    group = group.name(),
                    processor = name,
                    "no add reply within control_wait; the add still applies"
                );
                Ok(())
            }
        }
    }

    /// A handle for what is admitted under the name now (prefer the handle from
    /// [`ControlPlane::add_processor`], which cannot name a replacement).
    pub fn processor_handle(&self, group: &str, name: &str) -> Option<ProcessorHandle> {
        let group = self.group(group)?;
        let generation = group.admitted_generation(name)?;
        Some(ProcessorHandle {
            server: self.server,
            group: group.name().to_owned(),
            name: name.to_owned(),
            generation,
        })
    }

    /// Stops exactly the registration the handle names; returns the reply at once
    /// without backing off. A handle from another server is refused and stops nothing.
    pub fn stop_processor(&self, handle: &ProcessorHandle) -> ReplyHandle {
        let generation = handle.generation as i64;
        if handle.server != self.server {
            return ReplyHandle::completed(refused(
                ReplyOutcome::Refused,
                FailureKind::RefusedInvalid,
                "handle belongs to another server",
                generation,
                Some(&handle.name),
            ));
        }
        let Some(group) = self.group(&handle.group) else {
            return ReplyHandle::completed(refused(
                ReplyOutcome::Refused,
                FailureKind::RefusedState,
                "no such group",
                generation,
                Some(&handle.name),
            ));
        };
        let (envelope, reply) = self.envelope(Request::Stop {
            name: handle.name.clone(),
            generation: handle.generation,
        });
        if let Err((envelope, refusal)) = group.admit(envelope, Admission::Immediate) {
            let answer = Self::refusal_reply(&group, refusal, generation, &handle.name);
            ProcessorGroup::answer_refused(envelope, answer);
        }
        reply
    }

    /// Stops what is admitted under the name at call time (void form). No group or no
    /// such name: returns at once. Off an agent thread it waits up to `control_wait`;
    /// a timeout logs and returns (the stop still applies).
    ///
    /// # Errors
    /// [`ControlError::MailboxFull`]: nothing is stopped and the name stays reserved.
    pub fn stop_processor_by_name(&self, group: &str, name: &str) -> Result<(), ControlError> {
        let deadline = Instant::now() + self.config.control_wait;
        let Some(group) = self.group(group) else {
            return Ok(());
        };
        let Some(generation) = group.admitted_generation(name) else {
            return Ok(());
        };
        let (envelope, reply) = self.envelope(Request::Stop {
            name: name.to_owned(),
            generation,
        });
        if let Err((envelope, refusal)) =
            group.admit(envelope, self.backoff_admission(&group, deadline))
        {
            let answer = Self::refusal_reply(&group, refusal, generation as i64, name);
            ProcessorGroup::answer_refused(envelope, answer);
            return match refusal {
                Refusal::Full | Refusal::Deadline => Err(ControlError::MailboxFull {
                    group: group.name().to_owned(),
                    capacity: group.capacity(),
                }),
                Refusal::ServerStopping | Refusal::NotRunning(_) => Ok(()),
            };
        }
        if !self.may_wait(&group) {
            log_outcome(&reply, "stop");
            return Ok(());
        }
        if reply.wait(deadline).is_err() {
            tracing::warn!(
                group = group.name(),
                processor = name,
                "no stop reply within control_wait; the stop still applies"
            );
        }
        Ok(())
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
        let deadline = Instant::now() + wait;
        let Some(group) = self.group(group) else {
            return Some(refused(
                ReplyOutcome::Refused,
                FailureKind::RefusedState,
                "no such group",
                -1,
                Some(name),
            ));
        };
        let Some(generation) = group.admitted_generation(name) else {
            return Some(refused(
                ReplyOutcome::Refused,
                FailureKind::RefusedState,
                "no such processor",
                -1,
                Some(name),
            ));
        };
        let (envelope, reply) = self.envelope(Request::Stop {
            name: name.to_owned(),
            generation,
        });
        if let Err((envelope, refusal)) =
            group.admit(envelope, self.backoff_admission(&group, deadline))
        {
            let answer = Self::refusal_reply(&group, refusal, generation as i64, name);
            ProcessorGroup::answer_refused(envelope, answer.clone());
            return Some(answer);
        }
        if !self.may_wait(&group) {
            return None;
        }
        reply.wait(deadline).ok()
    }

    /// Stops what is admitted under the name at call time, admitted at once (never
    /// backing off, never waiting): what a processor's [`crate::Controller`] does.
    pub(crate) fn stop_processor_now(
        &self,
        group: &str,
        name: &str,
    ) -> Result<ReplyHandle, ControlError> {
        let no_such = || ControlError::NoSuchProcessor {
            group: group.to_owned(),
            name: name.to_owned(),
        };
        let group = self.group(group).ok_or_else(no_such)?;
        let generation = group.admitted_generation(name).ok_or_else(no_such)?;
        let (envelope, reply) = self.envelope(Request::Stop {
            name: name.to_owned(),
            generation,
        });
        if let Err((envelope, refusal)) = group.admit(envelope, Admission::Immediate) {
            let answer = Self::refusal_reply(&group, refusal, generation as i64, name);
            ProcessorGroup::answer_refused(envelope, answer.clone());
            return Err(match refusal {
                Refusal::Full => ControlError::MailboxFull {
                    group: group.name().to_owned(),
                    capacity: group.capacity(),
                },
                _ => ControlError::NotApplied(Box::new(answer)),
            });
        }
        Ok(reply)
    }

    /// Sends a service broadcast to one group (low level: the registry uses it; an
    /// old version is answered APPLIED "ignored: stale version N"). Never backs off.
    pub fn send_service_broadcast(
        &self,
        group: &ProcessorGroup,
        broadcast: ServiceBroadcast,
    ) -> ReplyHandle {
        let name = broadcast.name.clone();
        let (envelope, reply) = self.envelope(Request::Service(broadcast));
        if let Err((envelope, refusal)) = group.admit(envelope, Admission::Immediate) {
            let answer = Self::refusal_reply(group, refusal, -1, &name);
            ProcessorGroup::answer_refused(envelope, answer);
        }
        reply
    }

    /// Publishes a broadcast to every group without waiting. Returns the replies to
    /// expect, how many groups missed it (mailbox full), and whether a group that
    /// has not started got it (nobody may wait for that one).
    fn broadcast(&self, broadcast: &ServiceBroadcast) -> (Vec<ReplyHandle>, usize, bool) {
        let groups: Vec<ProcessorGroup> = self.groups.lock().values().cloned().collect();
        let mut handles = Vec::new();
        let mut missed = 0;
        let mut unstarted = false;
        for group in groups {
            unstarted |= !group.is_started();
            let reply = self.send_service_broadcast(&group, broadcast.clone());
            match reply.try_get() {
                Some(answer) if answer.request_id == -1 => {
                    if answer.outcome == ReplyOutcome::Refused {
                        missed += 1;
                        tracing::error!(group = group.name(), service = %broadcast.name, version = broadcast.version, "group missed a service broadcast: mailbox full");
                    }
                }
                _ => handles.push(reply),
            }
        }
        (handles, missed, unstarted)
    }

    /// Registers a service (control-plane-contracts "registerService"): the name is
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
        let deadline = Instant::now() + self.config.control_wait;
        if self.stopping.load(Ordering::Acquire) {
            return Err(ControlError::ServerStopping);
        }
        let registration_error = |reason: &str| ControlError::ServiceRegistration {
            name: name.to_owned(),
            reason: reason.to_owned(),
        };
        // 1. reserve the name under the lock
        let (version, others) = {
            let mut state = self.registry.state.lock();
            if state.entries.contains_key(name) {
                return Err(registration_error("name in use"));
            }
            let stopping_instance = state
                .withdrawing
                .iter()
                .any(|w| same_instance(&w.service, &service));
            if stopping_instance {
                return Err(registration_error(
                    "the same instance is being stopped by an earlier removal",
                ));
            }
            let version = Registry::next_version(&mut state, name);
            state.entries.insert(
                name.to_owned(),
                ServiceEntry {
                    version,
                    service: Arc::clone(&service),
                    published: false,
                },
            );
            let others: Vec<(String, Arc<dyn Service>)> = state
                .entries
                .iter()
                .filter(|(other, entry)| entry.published && other.as_str() != name)
                .map(|(other, entry)| (other.clone(), Arc::clone(&entry.service)))
                .collect();
            (version, others)
        };
        // 2. inject and start outside the lock
        for (other_name, other) in &others {
            service.inject(other_name, other);
            other.inject(name, &service);
        }
        if let Err(error) = service.start() {
            let mut state = self.registry.state.lock();
            if state
                .entries
                .get(name)
                .is_some_and(|e| e.version == version)
            {
                state.entries.remove(name);
            }
            return Err(registration_error(&format!("start failed: {error}")));
        }
        // 3. publish under the lock, unless a removal overtook the registration
        let (handles, _missed, unstarted) = {
            let mut state = self.registry.state.lock();
            match state.entries.get_mut(name) {
                Some(entry) if entry.version == version => entry.published = true,
                _ => {
                    drop(state);
                    if let Err(error) = service.stop() {
                        tracing::error!(service = name, %error, "service stop failed");
                    }
                    return Err(registration_error(
                        "removed before its registration was published",
                    ));
                }
            }
            self.broadcast(&ServiceBroadcast {
                name: name.to_owned(),
                version,
                change: ServiceChange::Registered(Arc::clone(&service)),
            })
        };
        // 4. off an agent thread, wait for every group under one deadline (not for a
        // group that has not started: it cannot answer yet)
        if !agent::is_agent_thread() && !unstarted {
            for handle in handles {
                if handle.wait(deadline).is_err() {
                    tracing::warn!(
                        service = name,
                        "not every group answered the registration within control_wait"
                    );
                    break;
                }
            }
        }
        Ok(())
    }

    /// Removes a service (control-plane-contracts "removeService"): unbinds it from
    /// every group first and stops it only when every group confirmed the withdrawal;
    /// otherwise the control plane keeps owning it until [`ControlPlane::stop_services`].
    /// Unknown names and calls during a stop are ignored.
    pub fn remove_service(&self, name: &str) {
        let deadline = Instant::now() + self.config.control_wait;
        if self.stopping.load(Ordering::Acquire) {
            tracing::info!(
                service = name,
                "removeService during a stop is ignored; the stop stops the service"
            );
            return;
        }
        let (withdrawal, handles) = {
            let mut state = self.registry.state.lock();
            let Some(entry) = state.entries.remove(name) else {
                return;
            };
            let version = Registry::next_version(&mut state, name);
            if !entry.published {
                // the registering call sees the removal and stops its service itself
                return;
            }
            let (handles, missed, unstarted) = self.broadcast(&ServiceBroadcast {
                name: name.to_owned(),
                version,
                change: ServiceChange::Deregistered,
            });
            let withdrawal = Arc::new(Withdrawal {
                name: name.to_owned(),
                service: entry.service,
                state: Mutex::new(WithdrawalState {
                    remaining: handles.len(),
                    unconfirmed: missed > 0,
                    caller_waiting: !agent::is_agent_thread() && !unstarted,
                    settled: false,
                }),
                done: Condvar::new(),
            });
            state.withdrawing.push(Arc::clone(&withdrawal));
            (withdrawal, handles)
        };
        // outside the service lock: a reply already in may settle at once, which
        // takes the lock again
        for handle in handles {
            let registry = Arc::clone(&self.registry);
            let arrived = Arc::clone(&withdrawal);
            handle.on_reply(move |reply| {
                let settle_here = {
                    let mut state = arrived.state.lock();
                    state.remaining -= 1;
                    if !reply.applied() {
                        state.unconfirmed = true;
                    }
                    arrived.done.notify_all();
                    state.remaining == 0 && !state.caller_waiting
                };
                if settle_here {
                    registry.settle(&arrived);
                }
            });
        }
        let mut state = withdrawal.state.lock();
        while state.caller_waiting && state.remaining > 0 {
            if withdrawal.done.wait_until(&mut state, deadline).timed_out() {
                tracing::warn!(service = name, "not every group confirmed the withdrawal within control_wait; the stop waits for them");
                break;
            }
        }
        state.caller_waiting = false;
        let settle_now = state.remaining == 0;
        drop(state);
        if settle_now {
            self.registry.settle(&withdrawal);
        }
    }

    /// Names of the services this control plane owns and has not confirmed stopped:
    /// registered, being withdrawn, removed but kept because a group did not confirm
    /// the withdrawal, or handed to shutdown whose stop is still running or failed.
    pub fn owned_services(&self) -> Vec<String> {
        let mut names: Vec<String> = {
            let state = self.registry.state.lock();
            let mut names: Vec<String> = state.entries.keys().cloned().collect();
            names.extend(state.withdrawing.iter().map(|w| w.name.clone()));
            names.extend(state.retained.iter().map(|(name, _)| name.clone()));
            names
        };
        names.extend(self.registry.shutdown.unconfirmed());
        names.sort();
        names
    }

    /// The processors the groups still hold though they no longer run them, as
    /// `processor:<group>/<name>`, sorted: quarantined processors (a group keeps their
    /// instances and names, also after it closed) and every processor of a dead group.
    /// Any of them may still hold a service it was given, so while this is not empty
    /// the services must not be stopped (control-plane-contracts "Failure
    /// containment": "shutdown remains incomplete with dependent services retained").
    pub fn retained_processors(&self) -> Vec<String> {
        let groups: Vec<ProcessorGroup> = self.groups.lock().values().cloned().collect();
        let mut held: Vec<String> = groups
            .iter()
            .flat_map(|group| {
                group
                    .status()
                    .quarantined
                    .into_iter()
                    .map(move |processor| format!("processor:{}/{}", group.name(), processor.name))
            })
            .collect();
        held.sort();
        held
    }

    /// Begins the server's stop: senders backing off on a full mailbox leave at once
    /// (NOT_RUNNING "server is stopping"), and new adds and registrations are refused.
    pub fn begin_stopping(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// True once [`ControlPlane::begin_stopping`] was called.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Closes every group and waits for them until `deadline`; returns the groups not
    /// confirmed closed. Call it from an ordinary thread (a server's stop thread), not
    /// from a processor: it waits.
    pub fn close_groups(&self, deadline: Instant) -> Vec<String> {
        let groups: Vec<ProcessorGroup> = self.groups.lock().values().cloned().collect();
        for group in &groups {
            group.close();
        }
        groups
            .iter()
            .filter(|group| !group.await_closed(deadline))
            .map(|group| group.name().to_owned())
            .collect()
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
    /// listed; control-plane-contracts "Resuming an incomplete stop").
    pub fn stop_services(&self, deadline: Instant) -> Vec<String> {
        let services: Vec<(String, Arc<dyn Service>)> = {
            let mut state = self.registry.state.lock();
            let mut owned: Vec<(String, Arc<dyn Service>)> = state
                .entries
                .drain()
                .filter(|(_, entry)| entry.published)
                .map(|(name, entry)| (name, entry.service))
                .collect();
            for withdrawal in state.withdrawing.drain(..) {
                let mut claim = withdrawal.state.lock();
                if !claim.settled {
                    claim.settled = true;
                    owned.push((withdrawal.name.clone(), Arc::clone(&withdrawal.service)));
                }
            }
            owned.append(&mut state.retained);
            owned
        };
        // outside the service lock: the stops run on helpers and are awaited
        self.registry.shutdown.start(services);
        self.registry.shutdown.await_stopped(deadline)
    }

    /// Shuts the reply executor down: later completions run on a late thread.
    pub fn shut_down_replies(&self) {
        self.executor.shut_down();
    }
}

/// Processor-owned admin commands (see [`crate::admin`]).
impl ControlPlane {
    fn admin_envelope(
        &self,
        group: &str,
        processor: &str,
        command: &str,
        args: Vec<String>,
    ) -> Result<(ProcessorGroup, Envelope, ReplyHandle), ControlReply> {
        let Some(found) = self.group(group) else {
            return Err(refused(
                ReplyOutcome::Refused,
                FailureKind::RefusedState,
                &format!("no such group '{group}'"),
                -1,
                Some(processor),
            ));
        };
        let (envelope, reply) = self.envelope(Request::Admin {
            name: processor.to_owned(),
            command: command.to_owned(),
            args,
        });
        Ok((found, envelope, reply))
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
        let (found, envelope, reply) = match self.admin_envelope(group, processor, command, args) {
            Ok(parts) => parts,
            Err(refusal) => return ReplyHandle::completed(refusal),
        };
        if let Err((envelope, refusal)) = found.admit(envelope, Admission::Immediate) {
            let answer = Self::refusal_reply(&found, refusal, -1, processor);
            ProcessorGroup::answer_refused(envelope, answer);
        }
        reply
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
        let deadline = Instant::now() + wait;
        let (found, envelope, reply) = match self.admin_envelope(group, processor, command, args) {
            Ok(parts) => parts,
            Err(refusal) => return Some(refusal),
        };
        if let Err((envelope, refusal)) =
            found.admit(envelope, self.backoff_admission(&found, deadline))
        {
            let answer = Self::refusal_reply(&found, refusal, -1, processor);
            ProcessorGroup::answer_refused(envelope, answer.clone());
            return Some(answer);
        }
        if !self.may_wait(&found) {
            return None;
        }
        reply.wait(deadline).ok()
    }

    /// The admin commands the running processor `processor` of `group` registered,
    /// sorted; `None` when there is no such group or running processor.
    pub fn admin_commands(&self, group: &str, processor: &str) -> Option<Vec<String>> {
        self.group(group)?.admin_commands(processor)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if self.view {
            return;
        }
        self.stopping.store(true, Ordering::Release);
        let groups: Vec<ProcessorGroup> = self.groups.lock().values().cloned().collect();
        for group in groups {
            group.close();
        }
        self.executor.shut_down();
    }
}

fn log_outcome(reply: &ReplyHandle, what: &'static str) {
    reply.on_reply(move |answer| {
        if answer.applied() {
            tracing::debug!(request_id = answer.request_id, "{what} applied");
        } else {
            tracing::warn!(request_id = answer.request_id, outcome = %answer.outcome, kind = ?answer.kind, reason = %answer.reason, "{what} not applied");
        }
    });
}

#[allow(dead_code)]
fn control_plane_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<ControlPlane>();
}
