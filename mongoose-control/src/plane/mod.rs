//! The control plane of one server: its groups, the processor and service calls, and
//! the group-side pieces of shutdown.
//!
//! The [`ControlPlane`] a user holds is the owner (`owner`): it shuts the plane down
//! when dropped. It and the views a group's processors reach through their controllers
//! share one [`Plane`], which holds the state and does the work and never shuts down
//! by itself.
//!
//! Its jobs live in submodules: `processors` (add and stop a processor),
//! `registry` (the service registry: register, remove, withdraw and stop services),
//! `admin` (processor-owned admin commands), `capture` (audit capture requests) and
//! `requests` (the plane as the [`ControlRequests`] a group's controllers reach).

mod admin;
mod capture;
mod owner;
mod processors;
mod registry;
mod requests;

pub use owner::ControlPlane;

use registry::Registry;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use mongoose_core::{agent, FailureKind};
use parking_lot::Mutex;

use crate::controller::ControlRequests;
use crate::error::ControlError;
use crate::feeds::FeedConnector;
use crate::group::{
    Admission, GroupOptions, GroupState, GroupStatus, Letter, NotAdmitted, ProcessorGroup, Request,
    ServiceSnapshot,
};
use crate::handle::ServerId;
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

/// Control-plane settings (book: guarantees/control-plane.md).
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

/// The state a control plane's owner ([`ControlPlane`]) and its views share, with
/// everything the plane does. Nothing here shuts down on drop: only the owner does.
pub(crate) struct Plane {
    /// This plane itself, for the views handed to groups ([`Plane::view`]).
    me: Weak<Plane>,
    server: ServerId,
    config: ControlConfig,
    feeds: Arc<dyn FeedConnector>,
    executor: ReplyExecutor,
    groups: Arc<Mutex<BTreeMap<String, ProcessorGroup>>>,
    stopping: Arc<AtomicBool>,
    started: Arc<AtomicBool>,
    next_request: Arc<AtomicU64>,
    registry: Arc<Registry>,
    /// Audit capture, once enabled ([`ControlPlane::enable_capture`]).
    capture: Mutex<Option<mongoose_audit::capture::CaptureSettings>>,
    /// The next capture session's sequence number.
    next_capture: AtomicU64,
}

impl fmt::Debug for Plane {
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

impl Plane {
    /// A plane whose groups queue requests until [`Plane::start`].
    pub(super) fn new_unstarted(
        config: ControlConfig,
        feeds: Arc<dyn FeedConnector>,
    ) -> Arc<Plane> {
        let executor = ReplyExecutor::new(config.reply_threads);
        Arc::new_cyclic(|me| Plane {
            me: me.clone(),
            server: ServerId::fresh(),
            config,
            feeds,
            executor,
            groups: Arc::new(Mutex::new(BTreeMap::new())),
            stopping: Arc::new(AtomicBool::new(false)),
            started: Arc::new(AtomicBool::new(false)),
            next_request: Arc::new(AtomicU64::new(1)),
            registry: Arc::new(Registry::default()),
            capture: Mutex::new(None),
            next_capture: AtomicU64::new(1),
        })
    }

    /// Marks the plane started: groups created later start at once.
    pub(super) fn mark_started(&self) {
        self.started.store(true, Ordering::Release);
    }

    /// A view of this plane, for the processors of a group (their
    /// [`crate::Controller`]): it shares all the plane's state and, being no
    /// [`ControlPlane`], closes nothing when dropped. A group's thread holds one while
    /// it runs (a group not started holds it in its seed), so the cycle plane -> group
    /// -> view ends when the owner's drop closes the group.
    pub(crate) fn view(&self) -> Arc<Plane> {
        self.me
            .upgrade()
            .expect("a plane is borrowed, so its owner or a view still holds it")
    }

    /// What dropping the owner does: stop admitting, close every group, shut the
    /// reply executor down.
    pub(super) fn shut_down(&self) {
        self.stopping.store(true, Ordering::Release);
        let groups: Vec<ProcessorGroup> = self.groups.lock().values().cloned().collect();
        for group in groups {
            group.close();
        }
        self.executor.shut_down();
    }

    /// See [`ControlPlane::server_id`].
    pub(crate) fn server_id(&self) -> ServerId {
        self.server
    }

    /// See [`ControlPlane::start`].
    pub(crate) fn start(&self) -> Result<(), ControlError> {
        self.started.store(true, Ordering::Release);
        let groups: Vec<ProcessorGroup> = self.groups.lock().values().cloned().collect();
        for group in groups {
            group.start()?;
        }
        Ok(())
    }

    /// See [`ControlPlane::create_group`].
    pub(crate) fn create_group(
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
                Some(self.view() as Arc<dyn ControlRequests>),
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

    /// See [`ControlPlane::group`].
    pub(crate) fn group(&self, name: &str) -> Option<ProcessorGroup> {
        self.groups.lock().get(name).cloned()
    }

    /// See [`ControlPlane::group_names`].
    pub(crate) fn group_names(&self) -> Vec<String> {
        self.groups.lock().keys().cloned().collect()
    }

    /// See [`ControlPlane::group_status`].
    pub(crate) fn group_status(&self, name: &str) -> Option<GroupStatus> {
        self.group(name).map(|group| group.status())
    }

    fn next_request_id(&self) -> Option<u64> {
        Some(self.next_request.fetch_add(1, Ordering::Relaxed))
    }

    fn letter(&self, request: Request) -> (Letter, ReplyHandle) {
        let (handle, mut sender) = ReplyHandle::pending();
        sender.request_id = self.next_request_id();
        (
            Letter {
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
        refusal: NotAdmitted,
        generation: Option<u64>,
        name: &str,
    ) -> ControlReply {
        let name = Some(name);
        match refusal {
            NotAdmitted::Full => refused(
                ReplyOutcome::Refused,
                FailureKind::RefusedAdmission,
                "mailbox full",
                generation,
                name,
            ),
            NotAdmitted::Deadline => refused(
                ReplyOutcome::Refused,
                FailureKind::RefusedDeadline,
                "not admitted within its deadline: mailbox full",
                generation,
                name,
            ),
            NotAdmitted::ServerStopping => refused(
                ReplyOutcome::NotRunning,
                FailureKind::FailedShutdown,
                "server is stopping",
                generation,
                name,
            ),
            NotAdmitted::NotRunning(GroupState::Dead) => {
                let _ = group;
                refused(
                    ReplyOutcome::NotRunning,
                    FailureKind::FailedDead,
                    "group is dead",
                    generation,
                    name,
                )
            }
            NotAdmitted::NotRunning(_) => refused(
                ReplyOutcome::NotRunning,
                FailureKind::FailedShutdown,
                "group closed",
                generation,
                name,
            ),
        }
    }

    /// See [`ControlPlane::retained_processors`].
    pub(crate) fn retained_processors(&self) -> Vec<String> {
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

    /// See [`ControlPlane::remove_group`].
    pub(crate) fn remove_group(&self, name: &str, deadline: Instant) -> Result<bool, String> {
        let Some(group) = self.group(name) else {
            return Ok(false);
        };
        group.close();
        if !group.await_closed(deadline) {
            return Err(format!(
                "group '{name}' did not close in time: it is closed with the server"
            ));
        }
        let retained: Vec<String> = group
            .status()
            .quarantined
            .into_iter()
            .map(|processor| processor.name)
            .collect();
        if !retained.is_empty() {
            // a quarantined processor keeps its instance (and the services it was
            // given) until the server stops: the group stays for the shutdown to see
            return Err(format!(
                "group '{name}' closed but retains quarantined processors {retained:?}: they are released when the server stops"
            ));
        }
        self.groups.lock().remove(name);
        Ok(true)
    }

    /// See [`ControlPlane::begin_stopping`].
    pub(crate) fn begin_stopping(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// See [`ControlPlane::is_stopping`].
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// See [`ControlPlane::close_groups`].
    pub(crate) fn close_groups(&self, deadline: Instant) -> Vec<String> {
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
    /// See [`ControlPlane::shut_down_replies`].
    pub(crate) fn shut_down_replies(&self) {
        self.executor.shut_down();
    }
}

#[allow(dead_code)]
fn control_plane_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<ControlPlane>();
}
