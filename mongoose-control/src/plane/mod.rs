//! The control plane of one server: its groups, the processor and service calls, and
//! the group-side pieces of shutdown.
//!
//! Its jobs live in submodules: `processors` (add and stop a processor),
//! `registry` (the service registry: register, remove, withdraw and stop services)
//! and `admin` (processor-owned admin commands).

mod admin;
mod processors;
mod registry;

use registry::Registry;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::{agent, FailureKind};
use parking_lot::Mutex;

use crate::error::ControlError;
use crate::feeds::FeedConnector;
use crate::group::{
    Admission, Envelope, GroupOptions, GroupState, GroupStatus, ProcessorGroup, Refusal, Request,
    ServiceSnapshot,
};
use crate::handle::{ProcessorHandle, ServerId};
use crate::idle::IdleStrategy;
use crate::reply::{ControlReply, ReplyExecutor, ReplyHandle, ReplyOutcome};

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

/// The control plane of one server.
pub struct ControlPlane {
    server: ServerId,
    config: ControlConfig,
    feeds: Arc<dyn FeedConnector>,
    executor: ReplyExecutor,
    groups: Arc<Mutex<BTreeMap<String, ProcessorGroup>>>,
    stopping: Arc<AtomicBool>,
    started: Arc<AtomicBool>,
    next_request: Arc<AtomicU64>,
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
    generation: Option<u64>,
    name: Option<&str>,
) -> ControlReply {
    ControlReply::not_applied(
        None,
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
            next_request: Arc::new(AtomicU64::new(1)),
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

    fn next_request_id(&self) -> Option<u64> {
        Some(self.next_request.fetch_add(1, Ordering::Relaxed))
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
        generation: Option<u64>,
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
    /// Shuts the reply executor down: later completions run on a late thread.
    pub fn shut_down_replies(&self) {
        self.executor.shut_down();
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

#[allow(dead_code)]
fn control_plane_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<ControlPlane>();
}
