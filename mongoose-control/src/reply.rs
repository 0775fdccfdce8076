//! Control replies, reply handles and the reply executor that completes them.
//!
//! book: guarantees/control-plane.md: every request
//! that reaches a group gets exactly one [`ControlReply`]; a [`ReplyHandle`] for it is
//! returned at once and completed on a reply-executor thread
//! (`mongoose-control-replies-N`), never on an agent thread; waiting on one from an
//! agent thread is an error, not a deadlock.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::{agent, EvidenceStatus, FailureKind};
use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};

use crate::error::ControlError;

/// What happened to a control request.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReplyOutcome {
    /// The requested transition has finished (not just been accepted).
    Applied,
    /// The requested transition was not applied.
    Refused,
    /// The request was acted on but its effect did not complete.
    Failed,
    /// The group, or the server, is closing, closed or dead.
    NotRunning,
}

impl fmt::Display for ReplyOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReplyOutcome::Applied => "APPLIED",
            ReplyOutcome::Refused => "REFUSED",
            ReplyOutcome::Failed => "FAILED",
            ReplyOutcome::NotRunning => "NOT_RUNNING",
        })
    }
}

/// The one final reply to a control request.
///
/// `kind` is [`FailureKind::None`] exactly when `outcome` is APPLIED. `request_id` is
/// `None` for a request refused before it reached a group; `generation` is `None` when
/// the reply is not about one registration. Both are written `-1` when `None` (the wire
/// form replies have always had).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ControlReply {
    /// The request's id (`None`: refused before it reached a group; `-1` on the wire).
    #[serde(with = "mongoose_audit::sentinel")]
    pub request_id: Option<u64>,
    /// What happened.
    pub outcome: ReplyOutcome,
    /// Human detail; classify by `outcome` and `kind`, not by this text.
    pub reason: String,
    /// The registration the reply is about, if any (`-1` on the wire when `None`).
    #[serde(with = "mongoose_audit::sentinel")]
    pub generation: Option<u64>,
    /// The processor (or service) name, if any.
    pub name: Option<String>,
    /// Why it was not applied; NONE exactly when APPLIED.
    pub kind: FailureKind,
    /// UNVERIFIED when the group's audit had an unacknowledged write failure.
    pub evidence: EvidenceStatus,
    /// What an admin command answered (APPLIED replies to
    /// `ControlPlane::invoke_admin_command`); `None` for every other request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

impl ControlReply {
    /// True when the outcome is APPLIED.
    pub fn applied(&self) -> bool {
        self.outcome == ReplyOutcome::Applied
    }

    /// An APPLIED reply.
    pub(crate) fn applied_with(
        request_id: Option<u64>,
        reason: impl Into<String>,
        generation: Option<u64>,
        name: Option<String>,
    ) -> Self {
        ControlReply {
            request_id,
            outcome: ReplyOutcome::Applied,
            reason: reason.into(),
            generation,
            name,
            kind: FailureKind::None,
            evidence: EvidenceStatus::NotDegraded,
            output: None,
        }
    }

    /// A reply that is not APPLIED; `kind` must not be NONE.
    pub(crate) fn not_applied(
        request_id: Option<u64>,
        outcome: ReplyOutcome,
        kind: FailureKind,
        reason: impl Into<String>,
        generation: Option<u64>,
        name: Option<String>,
    ) -> Self {
        debug_assert!(outcome != ReplyOutcome::Applied && kind != FailureKind::None);
        ControlReply {
            request_id,
            outcome,
            reason: reason.into(),
            generation,
            name,
            kind,
            evidence: EvidenceStatus::NotDegraded,
            output: None,
        }
    }
}

type Callback = Box<dyn FnOnce(&ControlReply) + Send>;

#[derive(Default)]
struct CellState {
    reply: Option<ControlReply>,
    callbacks: Vec<Callback>,
}

struct ReplyCell {
    state: Mutex<CellState>,
    ready: Condvar,
}

/// A reply that arrives later: a small one-shot.
///
/// Returned at once by the stage-style calls. It is completed on the reply executor,
/// never on an agent thread; a handle for a request refused before it reached a group
/// is complete from the start.
#[derive(Clone)]
pub struct ReplyHandle {
    cell: Arc<ReplyCell>,
}

impl fmt::Debug for ReplyHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplyHandle")
            .field("reply", &self.try_get())
            .finish()
    }
}

impl ReplyHandle {
    /// A handle with no reply yet (the group completes it through a [`ReplySender`]).
    pub(crate) fn pending() -> (ReplyHandle, ReplySender) {
        let cell = Arc::new(ReplyCell {
            state: Mutex::new(CellState::default()),
            ready: Condvar::new(),
        });
        (
            ReplyHandle {
                cell: Arc::clone(&cell),
            },
            ReplySender {
                cell: Some(cell),
                request_id: None,
            },
        )
    }

    /// A handle complete from the start (a request refused before it reached a group).
    pub fn completed(reply: ControlReply) -> ReplyHandle {
        let (handle, sender) = ReplyHandle::pending();
        sender.complete_here(reply);
        handle
    }

    /// The reply, if it has arrived.
    pub fn try_get(&self) -> Option<ControlReply> {
        self.cell.state.lock().reply.clone()
    }

    /// Waits for the reply until `deadline`.
    ///
    /// # Errors
    /// [`ControlError::WaitOnAgentThread`] on an agent thread (agent threads never
    /// wait), [`ControlError::ReplyTimeout`] when the deadline passes first (the request
    /// still applies).
    pub fn wait(&self, deadline: Instant) -> Result<ControlReply, ControlError> {
        if let Some(agent) = agent::current_agent_name() {
            return Err(ControlError::WaitOnAgentThread { agent });
        }
        let mut state = self.cell.state.lock();
        loop {
            if let Some(reply) = &state.reply {
                return Ok(reply.clone());
            }
            if self.cell.ready.wait_until(&mut state, deadline).timed_out() {
                return state.reply.clone().ok_or(ControlError::ReplyTimeout);
            }
        }
    }

    /// Waits up to `timeout`; see [`ReplyHandle::wait`].
    ///
    /// # Errors
    /// As [`ReplyHandle::wait`].
    pub fn wait_for(&self, timeout: Duration) -> Result<ControlReply, ControlError> {
        self.wait(Instant::now() + timeout)
    }

    /// Runs `callback` with the reply. Attached before completion, it runs on the reply
    /// executor; attached after, it runs at once on the calling thread (which may be an
    /// agent thread: keep it short).
    pub fn on_reply(&self, callback: impl FnOnce(&ControlReply) + Send + 'static) {
        let mut state = self.cell.state.lock();
        match state.reply.clone() {
            Some(reply) => {
                drop(state);
                callback(&reply);
            }
            None => state.callbacks.push(Box::new(callback)),
        }
    }
}

/// The group side of a [`ReplyHandle`]: completes it exactly once. Dropping an
/// uncompleted sender is a bug the debug build reports.
pub(crate) struct ReplySender {
    cell: Option<Arc<ReplyCell>>,
    pub(crate) request_id: Option<u64>,
}

impl fmt::Debug for ReplySender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplySender")
            .field("request_id", &self.request_id)
            .field("completed", &self.cell.is_none())
            .finish()
    }
}

impl ReplySender {
    /// Completes the handle on the calling thread (only for replies made before the
    /// request reached a group, or on the reply executor itself).
    pub(crate) fn complete_here(mut self, reply: ControlReply) {
        if let Some(cell) = self.cell.take() {
            complete_cell(&cell, reply);
        }
    }

    /// Completes the handle on the reply executor.
    pub(crate) fn complete_on(mut self, executor: &ReplyExecutor, reply: ControlReply) {
        if let Some(cell) = self.cell.take() {
            executor.submit(Box::new(move || complete_cell(&cell, reply)));
        }
    }
}

impl Drop for ReplySender {
    fn drop(&mut self) {
        if self.cell.is_some() && !std::thread::panicking() {
            tracing::error!(
                request_id = self.request_id,
                "a control request was dropped without a reply"
            );
            debug_assert!(
                false,
                "invariant 5: request {:?} dropped without a reply",
                self.request_id
            );
        }
    }
}

fn complete_cell(cell: &ReplyCell, reply: ControlReply) {
    let callbacks = {
        let mut state = cell.state.lock();
        if state.reply.is_some() {
            debug_assert!(false, "invariant 5: a reply handle completed twice");
            return;
        }
        state.reply = Some(reply.clone());
        cell.ready.notify_all();
        std::mem::take(&mut state.callbacks)
    };
    for callback in callbacks {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| callback(&reply))).is_err() {
            tracing::error!(
                request_id = reply.request_id,
                "a reply callback panicked; other callbacks still run"
            );
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

struct ExecutorState {
    jobs: VecDeque<Job>,
    shut_down: bool,
}

struct ExecutorShared {
    state: Mutex<ExecutorState>,
    work: Condvar,
    idle: AtomicUsize,
    threads: AtomicUsize,
    next_index: AtomicUsize,
    max_threads: usize,
    keep_alive: Duration,
    late_spawned: AtomicBool,
}

/// The reply executor: an elastic pool of threads named `mongoose-control-replies-N`
/// that completes reply handles and runs their callbacks, so a callback never runs on,
/// blocks or re-enters an agent thread. After [`ReplyExecutor::shut_down`], a late
/// completion runs on a fresh thread named `mongoose-control-replies-late`.
#[derive(Clone)]
pub struct ReplyExecutor {
    shared: Arc<ExecutorShared>,
}

impl fmt::Debug for ReplyExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplyExecutor")
            .field("threads", &self.shared.threads.load(Ordering::Relaxed))
            .finish()
    }
}

impl Default for ReplyExecutor {
    fn default() -> Self {
        ReplyExecutor::new(16)
    }
}

impl ReplyExecutor {
    /// A pool of at most `max_threads` threads (at least one), each leaving after ten
    /// idle seconds.
    pub fn new(max_threads: usize) -> Self {
        ReplyExecutor {
            shared: Arc::new(ExecutorShared {
                state: Mutex::new(ExecutorState {
                    jobs: VecDeque::new(),
                    shut_down: false,
                }),
                work: Condvar::new(),
                idle: AtomicUsize::new(0),
                threads: AtomicUsize::new(0),
                next_index: AtomicUsize::new(0),
                max_threads: max_threads.max(1),
                keep_alive: Duration::from_secs(10),
                late_spawned: AtomicBool::new(false),
            }),
        }
    }

    /// Runs `job` on a reply-executor thread.
    pub(crate) fn submit(&self, job: Job) {
        let mut state = self.shared.state.lock();
        if state.shut_down {
            drop(state);
            let spawned = std::thread::Builder::new()
                .name("mongoose-control-replies-late".into())
                .spawn(job);
            if spawned.is_err() {
                tracing::error!("could not start a late reply thread: a reply is lost");
            }
            self.shared.late_spawned.store(true, Ordering::Relaxed);
            return;
        }
        state.jobs.push_back(job);
        let need_thread = self.shared.idle.load(Ordering::Acquire) < state.jobs.len()
            && self.shared.threads.load(Ordering::Acquire) < self.shared.max_threads;
        if need_thread {
            self.shared.threads.fetch_add(1, Ordering::AcqRel);
            drop(state);
            self.spawn_worker();
        } else {
            self.shared.work.notify_one();
        }
    }

    fn spawn_worker(&self) {
        let index = self.shared.next_index.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::clone(&self.shared);
        let spawned = std::thread::Builder::new()
            .name(format!("mongoose-control-replies-{index}"))
            .spawn(move || worker(shared));
        if let Err(error) = spawned {
            self.shared.threads.fetch_sub(1, Ordering::AcqRel);
            tracing::error!(%error, "could not start a reply thread; queued replies wait for another");
        }
    }

    /// Stops the pool: queued jobs still run; later ones run on a late thread.
    pub fn shut_down(&self) {
        self.shared.state.lock().shut_down = true;
        self.shared.work.notify_all();
    }
}

fn worker(shared: Arc<ExecutorShared>) {
    let mut state = shared.state.lock();
    loop {
        if let Some(job) = state.jobs.pop_front() {
            drop(state);
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                tracing::error!("a reply job panicked");
            }
            state = shared.state.lock();
            continue;
        }
        if state.shut_down {
            break;
        }
        shared.idle.fetch_add(1, Ordering::AcqRel);
        let timed_out = shared
            .work
            .wait_for(&mut state, shared.keep_alive)
            .timed_out();
        shared.idle.fetch_sub(1, Ordering::AcqRel);
        if timed_out && state.jobs.is_empty() {
            break;
        }
    }
    shared.threads.fetch_sub(1, Ordering::AcqRel);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(request_id: u64) -> ControlReply {
        ControlReply::applied_with(Some(request_id), "started", Some(1), Some("p".into()))
    }

    // book: guarantees/control-plane.md: ControlReplies.await refuses on an agent thread
    #[test]
    fn waiting_on_a_reply_from_an_agent_thread_is_refused() {
        let (handle, sender) = ReplyHandle::pending();
        let _agent = agent::mark_current_thread("group-a");
        let error = handle
            .wait_for(Duration::from_secs(30))
            .expect_err("refused on an agent thread");
        assert!(matches!(error, ControlError::WaitOnAgentThread { .. }));
        sender.complete_here(applied(1));
    }

    // book: guarantees/control-plane.md
    #[test]
    fn a_callback_attached_before_completion_runs_on_a_reply_executor_thread() {
        let executor = ReplyExecutor::new(2);
        let (handle, sender) = ReplyHandle::pending();
        let (tx, rx) = std::sync::mpsc::channel();
        handle.on_reply(move |reply| {
            let name = std::thread::current().name().map(str::to_owned);
            tx.send((name, agent::is_agent_thread(), reply.request_id))
                .expect("test waits");
        });
        std::thread::spawn(move || {
            let _agent = agent::mark_current_thread("group-a");
            sender.complete_on(&executor, applied(7));
        })
        .join()
        .expect("completer ran");
        let (name, on_agent, id) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("callback ran");
        assert!(name
            .expect("named thread")
            .starts_with("mongoose-control-replies-"));
        assert!(!on_agent);
        assert_eq!(id, Some(7));
        assert_eq!(handle.try_get().map(|r| r.request_id), Some(Some(7)));
    }

    // book: guarantees/control-plane.md: late completions
    #[test]
    fn a_completion_after_the_executor_shut_down_runs_on_a_late_thread() {
        let executor = ReplyExecutor::new(1);
        executor.shut_down();
        let (handle, sender) = ReplyHandle::pending();
        let (tx, rx) = std::sync::mpsc::channel();
        handle.on_reply(move |_| {
            tx.send(std::thread::current().name().map(str::to_owned))
                .expect("test waits");
        });
        sender.complete_on(&executor, applied(3));
        let name = rx.recv_timeout(Duration::from_secs(30)).expect("ran");
        assert_eq!(name.as_deref(), Some("mongoose-control-replies-late"));
    }

    #[test]
    fn a_callback_attached_after_completion_runs_at_once_on_the_caller() {
        let handle = ReplyHandle::completed(applied(2));
        let caller = std::thread::current().id();
        let ran_on = Arc::new(Mutex::new(None));
        let slot = Arc::clone(&ran_on);
        handle.on_reply(move |_| *slot.lock() = Some(std::thread::current().id()));
        assert_eq!(*ran_on.lock(), Some(caller));
    }

    #[test]
    fn a_wait_past_its_deadline_times_out_and_a_later_reply_still_arrives() {
        let executor = ReplyExecutor::new(1);
        let (handle, sender) = ReplyHandle::pending();
        let error = handle
            .wait(Instant::now() + Duration::from_millis(5))
            .expect_err("no reply yet");
        assert!(matches!(error, ControlError::ReplyTimeout));
        sender.complete_on(&executor, applied(9));
        let reply = handle.wait_for(Duration::from_secs(30)).expect("arrives");
        assert_eq!(reply.request_id, Some(9));
    }

    // "an elastic pool of daemon threads": a blocking callback does not hold up other replies
    #[test]
    fn a_blocked_reply_callback_does_not_hold_up_other_replies() {
        let executor = ReplyExecutor::new(4);
        let (first, first_sender) = ReplyHandle::pending();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        first.on_reply(move |_| {
            let _ = release_rx.recv_timeout(Duration::from_secs(30));
        });
        first_sender.complete_on(&executor, applied(1));
        let (second, second_sender) = ReplyHandle::pending();
        let (tx, rx) = std::sync::mpsc::channel();
        second.on_reply(move |reply| {
            let _ = tx.send(reply.request_id);
        });
        second_sender.complete_on(&executor, applied(2));
        assert_eq!(rx.recv_timeout(Duration::from_secs(30)), Ok(Some(2)));
        release_tx.send(()).expect("first callback waits");
    }

    #[test]
    fn kind_is_none_exactly_when_applied_and_serializes_in_reference_names() {
        let reply = ControlReply::not_applied(
            None,
            ReplyOutcome::NotRunning,
            FailureKind::FailedShutdown,
            "server is stopping",
            None,
            None,
        );
        let json = serde_json::to_string(&reply).expect("serializes");
        assert!(json.contains("\"NOT_RUNNING\""), "{json}");
        assert!(json.contains("\"FAILED_SHUTDOWN\""), "{json}");
        assert!(!reply.applied());
        assert_eq!(applied(1).kind, FailureKind::None);
    }
}
