//! Processor groups: one agent thread running a duty cycle over the group's control
//! mailbox, its timers and its feed readers.
//!
//! The control logic decides the mailbox's requests in order and answers each with
//! exactly one reply. Dispatch to processors is the failure-containment boundary: a
//! handler error or panic quarantines that processor alone, or retries it alone when it
//! declares itself retry-safe (book: guarantees/control-plane.md; book: guarantees/completion-hooks.md).
//!
//! Every call to a processor goes through its [`crate::ProcessorHost`] (current
//! processor, containment, recorder, control calls); the group decides what a failure
//! means. One file per job:
//!
//! | file | its job |
//! |---|---|
//! | `mod.rs` | the handle: [`ProcessorGroup`], its options, status types and lifecycle from outside (start, close, await) |
//! | `mailbox.rs` | the control mailbox: requests, admission, reserved names, deciding in order, answers to what is never decided |
//! | `runtime.rs` | the group's thread: its state, the duty cycle, the published status, close and death |
//! | `trail.rs` | the audit trail of a decision: Decision, EffectOutcome and Reply records |
//! | `lifecycle.rs` | a processor's add, stop, release and quarantine, and its subscriptions in `start` |
//! | `dispatch.rs` | the group side of a feed reader's poll: dispatch, retries, completions, first drop |
//! | `services.rs` | service broadcasts and their delivery once per version |
//! | `timers.rs` | the processors' timers |
//! | `admin.rs` | admin commands: their listing and running them |

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mongoose_core::Processor;
use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};

use crate::controller::ControlRequests;
use crate::error::ControlError;
use crate::feeds::{FeedConnector, PendingProbe};
use crate::handle::ServerId;
use crate::idle::IdleStrategy;
use crate::record::GroupRecorder;
use crate::reply::ReplyExecutor;
use crate::services::ServiceBroadcast;
use mongoose_audit::capture::CaptureSessions;
use mongoose_audit::{AuditCounts, AuditMirror, ControlAudit, NewRecord, RecordType};

mod admin;
mod capture;
mod dispatch;
mod hold;
mod lifecycle;
mod mailbox;
mod runtime;
mod services;
mod timers;
mod trail;

use capture::{Captures, OpenedCapture};
use dispatch::GroupDispatcher;
pub use hold::DispatchHold;
use mailbox::{answer_not_running, free_name, Mailbox};
pub(crate) use mailbox::{Admission, CaptureStart, Letter, NotAdmitted, Request};
use runtime::{run_group, FeedState, Runtime, Slot};
use trail::write_reply_record;

/// How a retry-safe processor's failed item (or a failed completion callback) is
/// retried: alone, on a later duty cycle, after a backoff that never sleeps on the agent
/// thread. The delivery engine's reader applies it; this is its policy.
pub use mongoose_core::RetryPolicy;

/// How a group is built.
pub struct GroupOptions {
    /// What the thread does when a cycle found no work.
    pub idle: IdleStrategy,
    /// Pin the group's thread to this core.
    pub core: Option<usize>,
    /// Requests the control mailbox holds.
    pub mailbox_capacity: usize,
    /// Records the control audit ring keeps (0: the default, 10 000).
    pub audit_capacity: usize,
    /// Where audit records are mirrored as written.
    pub audit_mirror: Option<AuditMirror>,
    /// The retry policy for retry-safe processors.
    pub retry: RetryPolicy,
    /// How long a sender off an agent thread backs off on a full mailbox at most.
    pub full_mailbox_timeout: Duration,
    /// Items taken from one feed per duty cycle.
    pub poll_limit: usize,
    /// RECORD mode: told about every call the group makes to its processors (see
    /// [`crate::record`]). `None` (the default) costs one `Option` check per call.
    pub recorder: Option<Box<dyn GroupRecorder>>,
}

impl fmt::Debug for GroupOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupOptions")
            .field("idle", &self.idle)
            .field("core", &self.core)
            .field("mailbox_capacity", &self.mailbox_capacity)
            .field("audit_capacity", &self.audit_capacity)
            .field("retry", &self.retry)
            .field("recorder", &self.recorder.is_some())
            .finish()
    }
}

impl Default for GroupOptions {
    fn default() -> Self {
        GroupOptions {
            idle: IdleStrategy::default(),
            core: None,
            mailbox_capacity: 1024,
            audit_capacity: 0,
            audit_mirror: None,
            retry: RetryPolicy::default(),
            full_mailbox_timeout: Duration::from_secs(10),
            poll_limit: 256,
            recorder: None,
        }
    }
}

/// Where a group is in its life.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum GroupState {
    /// Built, its thread not started: requests queue.
    NotStarted,
    /// Its thread runs.
    Running,
    /// Closing: queued requests are answered NOT_RUNNING.
    Closing,
    /// Closed.
    Closed,
    /// Its control logic died.
    Dead,
}

/// A running processor in a [`GroupStatus`].
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ProcessorStatus {
    /// Its name.
    pub name: String,
    /// Its registration.
    pub generation: u64,
}

/// A quarantined processor in a [`GroupStatus`]: its name stays reserved.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct QuarantinedProcessor {
    /// Its name.
    pub name: String,
    /// Its registration.
    pub generation: u64,
    /// Why it was quarantined.
    pub reason: String,
}

/// A queue's overload state, as its feed reports it.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct QueueOverload {
    /// The feed.
    pub feed: String,
    /// The state.
    pub state: String,
}

/// A group's status, serializable to JSON.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupStatus {
    /// The group.
    pub group: String,
    /// Where it is in its life.
    pub state: GroupState,
    /// Running processors (quarantined ones excluded).
    pub running: Vec<ProcessorStatus>,
    /// Quarantined processors with their reasons.
    pub quarantined: Vec<QuarantinedProcessor>,
    /// Requests in the control mailbox.
    pub mailbox_depth: usize,
    /// Its capacity.
    pub mailbox_capacity: usize,
    /// Items waiting in the group's feed queues.
    pub queued_items: usize,
    /// Overload states of its queues.
    pub overload: Vec<QueueOverload>,
    /// The control audit's counters (`complete` false once anything was dropped).
    pub audit: AuditCounts,
}

pub(crate) type Supplier = Box<dyn FnOnce() -> Box<dyn Processor> + Send>;

#[derive(Default)]
struct RuntimeStatus {
    running: Vec<ProcessorStatus>,
    quarantined: Vec<QuarantinedProcessor>,
    probes: Vec<(String, PendingProbe)>,
    /// The admin command names of each running processor, by processor name.
    commands: HashMap<String, Vec<String>>,
}

pub(crate) type ServiceSnapshot = Arc<dyn Fn() -> Vec<ServiceBroadcast> + Send + Sync>;

struct Seed {
    connector: Arc<dyn FeedConnector>,
    services: ServiceSnapshot,
    idle: IdleStrategy,
    core: Option<usize>,
    retry: RetryPolicy,
    poll_limit: usize,
    recorder: Option<Box<dyn GroupRecorder>>,
    /// What the group's processors reach through their [`crate::Controller`].
    plane: Option<Arc<dyn ControlRequests>>,
}

struct GroupShared {
    name: String,
    server: ServerId,
    capacity: usize,
    full_timeout: Duration,
    mailbox: Mutex<Mailbox>,
    names: Mutex<HashMap<String, u64>>,
    next_generation: AtomicU64,
    audit: Arc<ControlAudit>,
    executor: ReplyExecutor,
    status: Mutex<RuntimeStatus>,
    thread: Mutex<Option<std::thread::Thread>>,
    finished: Mutex<bool>,
    finished_signal: Condvar,
    join: Mutex<Option<JoinHandle<()>>>,
    seed: Mutex<Option<Seed>>,
    fault: AtomicBool,
    /// Instances the group keeps owning after its thread ended: quarantined
    /// processors at close, every processor of a dead group. Never stopped, never
    /// dropped while the group lives.
    retained: Mutex<Vec<Box<dyn Processor>>>,
    /// Its audit captures' counters and sessions, shared with their helper threads.
    captures: Arc<CaptureSessions>,
    /// A helper handed an open back (`Mailbox::opened` is not empty): the duty cycle
    /// takes the mailbox lock for it only then.
    captures_opened: AtomicBool,
    /// The [`DispatchHold`]s alive: the group takes no event from its feeds meanwhile.
    dispatch_holds: AtomicU64,
}

/// A processor group: one agent thread, its control mailbox, timers and feed readers.
///
/// Built and driven through [`crate::ControlPlane`]; this type gives its status, its
/// audit and its lifecycle.
#[derive(Clone)]
pub struct ProcessorGroup {
    shared: Arc<GroupShared>,
}

impl fmt::Debug for ProcessorGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessorGroup")
            .field("name", &self.shared.name)
            .field("state", &self.state())
            .finish()
    }
}

impl ProcessorGroup {
    pub(crate) fn new(
        name: &str,
        server: ServerId,
        options: GroupOptions,
        executor: ReplyExecutor,
        connector: Arc<dyn FeedConnector>,
        services: ServiceSnapshot,
        plane: Option<Arc<dyn ControlRequests>>,
    ) -> Self {
        ProcessorGroup {
            shared: Arc::new(GroupShared {
                name: name.to_owned(),
                server,
                capacity: options.mailbox_capacity.max(1),
                full_timeout: options.full_mailbox_timeout,
                mailbox: Mutex::new(Mailbox {
                    queue: VecDeque::new(),
                    state: GroupState::NotStarted,
                    close_requested: false,
                    opened: Vec::new(),
                }),
                names: Mutex::new(HashMap::new()),
                next_generation: AtomicU64::new(1),
                audit: Arc::new(ControlAudit::new(
                    options.audit_capacity,
                    options.audit_mirror,
                )),
                executor,
                status: Mutex::new(RuntimeStatus::default()),
                thread: Mutex::new(None),
                finished: Mutex::new(false),
                finished_signal: Condvar::new(),
                join: Mutex::new(None),
                seed: Mutex::new(Some(Seed {
                    connector,
                    services,
                    idle: options.idle,
                    core: options.core,
                    retry: options.retry,
                    poll_limit: options.poll_limit.max(1),
                    recorder: options.recorder,
                    plane,
                })),
                fault: AtomicBool::new(false),
                retained: Mutex::new(Vec::new()),
                captures: Arc::new(CaptureSessions::default()),
                captures_opened: AtomicBool::new(false),
                dispatch_holds: AtomicU64::new(0),
            }),
        }
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The server the group belongs to.
    pub fn server(&self) -> ServerId {
        self.shared.server
    }

    /// Where the group is in its life.
    pub fn state(&self) -> GroupState {
        self.shared.mailbox.lock().state
    }

    /// The group's control audit.
    pub fn audit(&self) -> &ControlAudit {
        &self.shared.audit
    }

    /// The group's status (non-blocking apart from short locks).
    pub fn status(&self) -> GroupStatus {
        let (state, depth) = {
            let mailbox = self.shared.mailbox.lock();
            (mailbox.state, mailbox.queue.len())
        };
        let status = self.shared.status.lock();
        GroupStatus {
            group: self.shared.name.clone(),
            state,
            running: status.running.clone(),
            quarantined: status.quarantined.clone(),
            mailbox_depth: depth,
            mailbox_capacity: self.shared.capacity,
            queued_items: status.probes.iter().map(|(_, probe)| probe.pending()).sum(),
            overload: status
                .probes
                .iter()
                .filter_map(|(feed, probe)| {
                    probe.overload_state().map(|state| QueueOverload {
                        feed: feed.clone(),
                        state,
                    })
                })
                .collect(),
            audit: self.shared.audit.counts(),
        }
    }

    /// Starts the group's thread (once; later calls do nothing).
    ///
    /// # Errors
    /// [`ControlError::Spawn`] when the thread cannot be started.
    pub fn start(&self) -> Result<(), ControlError> {
        let Some(seed) = self.shared.seed.lock().take() else {
            return Ok(());
        };
        {
            let mut mailbox = self.shared.mailbox.lock();
            if mailbox.state != GroupState::NotStarted {
                return Ok(());
            }
            mailbox.state = GroupState::Running;
        }
        let shared = Arc::clone(&self.shared);
        let spawned = std::thread::Builder::new()
            .name(format!("mongoose-group-{}", self.shared.name))
            .spawn(move || run_group(shared, seed));
        match spawned {
            Ok(join) => {
                *self.shared.thread.lock() = Some(join.thread().clone());
                *self.shared.join.lock() = Some(join);
                Ok(())
            }
            Err(error) => {
                self.shared.mailbox.lock().state = GroupState::Dead;
                Err(ControlError::Spawn {
                    group: self.shared.name.clone(),
                    error,
                })
            }
        }
    }

    /// Asks the group to close: requests still queued are answered NOT_RUNNING ("group
    /// closed") and their suppliers never run; running processors are stopped; the
    /// group's queues are fenced and unsubscribed. Returns at once; see
    /// [`ProcessorGroup::await_closed`].
    pub fn close(&self) {
        let not_started = {
            let mut mailbox = self.shared.mailbox.lock();
            mailbox.close_requested = true;
            match mailbox.state {
                GroupState::NotStarted => {
                    mailbox.state = GroupState::Closed;
                    Some(std::mem::take(&mut mailbox.queue))
                }
                GroupState::Running => {
                    mailbox.state = GroupState::Closing;
                    None
                }
                _ => None,
            }
        };
        match not_started {
            Some(queued) => {
                for letter in queued {
                    answer_not_running(&self.shared, letter, "group closed", None);
                }
                self.shared.seed.lock().take();
                self.shared
                    .audit
                    .write(NewRecord::new(RecordType::Fallback, None, "Closed"));
                self.mark_finished();
            }
            None => self.wake(),
        }
    }

    /// Waits until the group's thread has finished (closed or dead), up to `deadline`.
    /// Returns whether it finished.
    pub fn await_closed(&self, deadline: Instant) -> bool {
        {
            let mut finished = self.shared.finished.lock();
            while !*finished {
                if self
                    .shared
                    .finished_signal
                    .wait_until(&mut finished, deadline)
                    .timed_out()
                {
                    return *finished;
                }
            }
        }
        if let Some(join) = self.shared.join.lock().take() {
            let _ = join.join();
        }
        true
    }

    /// Waits until the group's feed queues hold nothing (the shutdown's drain phase),
    /// up to `deadline`. Returns whether they drained.
    pub fn await_drained(&self, deadline: Instant) -> bool {
        let probes = || -> usize {
            let status = self.shared.status.lock();
            status.probes.iter().map(|(_, probe)| probe.pending()).sum()
        };
        loop {
            if probes() == 0 {
                return true;
            }
            if Instant::now() >= deadline || *self.shared.finished.lock() {
                return probes() == 0;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Makes the control logic fail while deciding its next request, so the group
    /// dies: for tests of what a dead group answers. Only with the `testsuite`
    /// feature.
    #[cfg(feature = "testsuite")]
    pub fn inject_control_fault(&self) {
        self.shared
            .fault
            .store(true, std::sync::atomic::Ordering::Release);
        self.wake();
    }

    fn mark_finished(&self) {
        *self.shared.finished.lock() = true;
        self.shared.finished_signal.notify_all();
    }

    fn wake(&self) {
        if let Some(thread) = self.shared.thread.lock().as_ref() {
            thread.unpark();
        }
    }

    pub(crate) fn is_started(&self) -> bool {
        self.state() != GroupState::NotStarted
    }

    pub(crate) fn capacity(&self) -> usize {
        self.shared.capacity
    }

    /// Its audit capture sessions (see [`mongoose_audit::capture`]), oldest first.
    pub fn capture_statuses(&self) -> Vec<mongoose_audit::capture::CaptureStatus> {
        self.shared.captures.statuses()
    }

    /// Capture resource slots it holds (opening, recording, closing, failed closes),
    /// and the failed closes among them (book: guarantees/control-plane.md): a closed group holding any has unresolved capture resources.
    pub fn capture_resources_held(&self) -> (usize, Vec<String>) {
        self.shared.captures.unresolved()
    }
}
