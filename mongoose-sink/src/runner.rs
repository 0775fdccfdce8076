//! The sink runner: one thread per sink that publishes the outputs processors send it,
//! in order and in batches, retries what may still succeed within the sink's
//! [`RetryBudget`], applies the operator's [`ExhaustedPolicy`] to what cannot, and
//! tells each output's [`CommitGate`] when the output is over, so the input that made
//! it is committed only then.
//!
//! What happens to an output:
//!
//! | outcome of an attempt | what the runner does |
//! |---|---|
//! | `Published` | counted `published`; its gate is told; done |
//! | `NotPublished`, not retryable (a permanent error) | counted `not_published`; the policy decides at once (`hold`: kept, the feed's commit held, the sink reports it `held`; `count_loss`: counted `lost`, its gate told) |
//! | `Uncertain`, or `NotPublished` retryable | counted (`uncertain` / `not_published`); tried again with the same key after the budget's backoff, unless the budget is spent or the output expired: then counted `expired` and the policy decides |
//!
//! Outputs are first tried in the order they were sent; an output waiting for a retry
//! does not hold back the ones after it (a retried output can land after later ones).
//! Nothing here sleeps on a processor's thread: [`SinkHandle::send`] refuses with
//! [`SendError::Full`] when the sink's queue is full, and the processor's handler fails
//! (a retry-safe processor is given the item again later, the feed holds meanwhile).

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use mongoose_core::sink::{
    CommitGate, ExhaustedPolicy, Output, OutputKey, RetryBudget, Sink, SinkOutcome,
};
use parking_lot::Mutex;
use serde::Serialize;
use tracing::{error, info, warn};

/// How a runner runs its sink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerConfig {
    /// The sink's name (in status, metrics and logs).
    pub name: String,
    /// Its kind (`file`, `http`, ...), for status.
    pub kind: String,
    /// The retry budget of each output.
    pub budget: RetryBudget,
    /// What an output that cannot be published does to its feed.
    pub policy: ExhaustedPolicy,
    /// The most outputs given to the sink in one `publish` call.
    pub batch: usize,
    /// The most outputs queued for the sink; past it [`SinkHandle::send`] refuses.
    pub capacity: usize,
}

impl RunnerConfig {
    /// A runner for sink `name` of kind `kind` with the default budget and policy,
    /// batches of 1,024 and a queue of 65,536 outputs.
    pub fn new(name: &str, kind: &str) -> Self {
        RunnerConfig {
            name: name.to_owned(),
            kind: kind.to_owned(),
            budget: RetryBudget::default(),
            policy: ExhaustedPolicy::Hold,
            batch: 1024,
            capacity: 65_536,
        }
    }
}

/// What a sink has done, for `/status` and `/metrics`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SinkStatus {
    /// The sink's name.
    pub name: String,
    /// Its kind.
    pub kind: String,
    /// Outputs the target holds.
    pub published: u64,
    /// Attempts the target verifiably did not take (retryable or not).
    pub not_published: u64,
    /// Attempts whose outcome is unknown (retried with the same key).
    pub uncertain: u64,
    /// Outputs waiting for a retry now.
    pub retrying: u64,
    /// Outputs whose budget was spent or that expired.
    pub expired: u64,
    /// Outputs given up by the `count_loss` policy.
    pub lost: u64,
    /// Outputs not over yet: queued, being tried, or waiting for a retry (what the
    /// queue's capacity counts).
    pub queued: u64,
    /// Outputs held by the `hold` policy (their feeds' commits are held), with why;
    /// the first ten.
    pub held: Vec<String>,
    /// How many outputs are held.
    pub held_count: u64,
}

#[derive(Default)]
struct Counters {
    published: AtomicU64,
    not_published: AtomicU64,
    uncertain: AtomicU64,
    retrying: AtomicU64,
    expired: AtomicU64,
    lost: AtomicU64,
}

struct Shared {
    name: String,
    kind: String,
    counters: Counters,
    queued: AtomicUsize,
    held: Mutex<Vec<String>>,
    stop: AtomicBool,
    /// Stop only once this instant is passed, even with outputs left.
    deadline: Mutex<Option<Instant>>,
    /// The gates registered with [`SinkHandle::register_gate`], by [`GateId`].
    gates: Mutex<Vec<Arc<dyn CommitGate>>>,
}

/// A commit gate registered with a sink's runner ([`SinkHandle::register_gate`]): an
/// output names its gate by this id, so sending one touches no reference count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GateId(u32);

/// One output with what the runner keeps about it.
struct Queued {
    output: Output,
    gate: Option<(GateId, u64)>,
}

struct Waiting {
    queued: Queued,
    due: Instant,
    first_attempt: SystemTime,
}

/// Sends outputs to one running sink. Cloned freely; each processor that writes to
/// the sink holds one (see [`crate::SinkWriter`] for the keyed, gated form).
#[derive(Clone)]
pub struct SinkHandle {
    tx: Sender<Queued>,
    shared: Arc<Shared>,
    capacity: usize,
}

impl fmt::Debug for SinkHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SinkHandle")
            .field("sink", &self.shared.name)
            .finish_non_exhaustive()
    }
}

/// Why an output was not taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The sink's queue is full: try the item again later.
    #[error("sink '{sink}' has {capacity} outputs queued: the output was not taken (the item is tried again later)")]
    Full {
        /// The sink.
        sink: String,
        /// Its queue's capacity.
        capacity: usize,
    },
    /// The sink's runner stopped.
    #[error("sink '{sink}' is stopped: the output was not taken")]
    Stopped {
        /// The sink.
        sink: String,
    },
}

impl SinkHandle {
    /// Registers `gate` (once: the same gate registered again gets the same id), for
    /// [`SinkHandle::send`].
    pub fn register_gate(&self, gate: Arc<dyn CommitGate>) -> GateId {
        let mut gates = self.shared.gates.lock();
        if let Some(at) = gates.iter().position(|known| Arc::ptr_eq(known, &gate)) {
            return GateId(at as u32);
        }
        gates.push(gate);
        GateId(u32::try_from(gates.len() - 1).expect("fewer than 2^32 gates"))
    }

    /// Queues `output`; once it is over (published, or given up by policy) the gate
    /// `gate` names is told `complete(tag)`. Never blocks.
    ///
    /// # Errors
    /// [`SendError::Full`] when the queue is full, [`SendError::Stopped`] when the
    /// runner stopped; the output was not taken and the gate not told.
    pub fn send(&self, output: Output, gate: Option<(GateId, u64)>) -> Result<(), SendError> {
        if self.shared.queued.load(Ordering::Acquire) >= self.capacity {
            return Err(SendError::Full {
                sink: self.shared.name.clone(),
                capacity: self.capacity,
            });
        }
        self.shared.queued.fetch_add(1, Ordering::AcqRel);
        match self.tx.try_send(Queued { output, gate }) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => {
                self.shared.queued.fetch_sub(1, Ordering::AcqRel);
                Err(SendError::Full {
                    sink: self.shared.name.clone(),
                    capacity: self.capacity,
                })
            }
            Err(TrySendError::Disconnected(_)) => {
                self.shared.queued.fetch_sub(1, Ordering::AcqRel);
                Err(SendError::Stopped {
                    sink: self.shared.name.clone(),
                })
            }
        }
    }

    /// The sink's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Why the first output the hold policy keeps is held, if there is one (cheap: no
    /// status is built).
    pub fn first_held(&self) -> Option<String> {
        self.shared.held.lock().first().cloned()
    }

    /// What the sink has done so far.
    pub fn status(&self) -> SinkStatus {
        let counters = &self.shared.counters;
        let held = self.shared.held.lock();
        SinkStatus {
            name: self.shared.name.clone(),
            kind: self.shared.kind.clone(),
            published: counters.published.load(Ordering::Relaxed),
            not_published: counters.not_published.load(Ordering::Relaxed),
            uncertain: counters.uncertain.load(Ordering::Relaxed),
            retrying: counters.retrying.load(Ordering::Relaxed),
            expired: counters.expired.load(Ordering::Relaxed),
            lost: counters.lost.load(Ordering::Relaxed),
            queued: self.shared.queued.load(Ordering::Relaxed) as u64,
            held: held.iter().take(10).cloned().collect(),
            held_count: held.len() as u64,
        }
    }
}

/// A running sink: its thread and the handle outputs are sent through.
pub struct SinkRunner {
    handle: SinkHandle,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for SinkRunner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SinkRunner")
            .field("sink", &self.handle.shared.name)
            .finish_non_exhaustive()
    }
}

impl SinkRunner {
    /// Starts a thread (`sink:<name>`) that publishes to `sink`.
    ///
    /// # Errors
    /// The thread could not be started.
    pub fn start(sink: Box<dyn Sink>, config: RunnerConfig) -> std::io::Result<Self> {
        let capacity = config.capacity.max(1);
        let (tx, rx) = crossbeam_channel::bounded(capacity);
        let shared = Arc::new(Shared {
            name: config.name.clone(),
            kind: config.kind.clone(),
            counters: Counters::default(),
            queued: AtomicUsize::new(0),
            held: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            deadline: Mutex::new(None),
            gates: Mutex::new(Vec::new()),
        });
        let thread = std::thread::Builder::new()
            .name(format!("sink:{}", config.name))
            .spawn({
                let shared = Arc::clone(&shared);
                move || Run::new(sink, rx, shared, config).run()
            })?;
        Ok(SinkRunner {
            handle: SinkHandle {
                tx,
                shared,
                capacity,
            },
            thread: Some(thread),
        })
    }

    /// A handle to send outputs through.
    pub fn handle(&self) -> SinkHandle {
        self.handle.clone()
    }

    /// Publishes what is queued (retrying as usual) until nothing is left or
    /// `deadline` passes, then stops the thread. What is left unpublished keeps its
    /// inputs uncommitted: a restart delivers them again. Returns the status at the
    /// stop.
    pub fn stop(mut self, deadline: Instant) -> SinkStatus {
        self.stop_now(deadline);
        self.handle.status()
    }

    fn stop_now(&mut self, deadline: Instant) {
        *self.handle.shared.deadline.lock() = Some(deadline);
        self.handle.shared.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                error!(sink = %self.handle.shared.name, "the sink's thread panicked");
            }
        }
    }
}

/// How long a dropped runner goes on publishing what is queued.
const DROP_DEADLINE: Duration = Duration::from_secs(10);

impl Drop for SinkRunner {
    /// Publishes what is queued (for at most ten seconds: what is left keeps its
    /// inputs uncommitted), then stops the thread.
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop_now(Instant::now() + DROP_DEADLINE);
        }
    }
}

/// The runner thread's state.
struct Run {
    sink: Box<dyn Sink>,
    rx: Receiver<Queued>,
    shared: Arc<Shared>,
    config: RunnerConfig,
    /// Outputs ready to be tried now, in order; `outputs[i]` belongs to `meta[i]`.
    outputs: VecDeque<Output>,
    meta: VecDeque<Meta>,
    /// Outputs waiting for a retry, by due time (earliest first).
    waiting: Vec<Waiting>,
    /// Outputs kept by the hold policy.
    held: Vec<Queued>,
    outcomes: Vec<SinkOutcome>,
    /// The registered gates this thread has seen (refreshed when an id is new to it).
    gates: Vec<Arc<dyn CommitGate>>,
}

struct Meta {
    gate: Option<(GateId, u64)>,
    first_attempt: Option<SystemTime>,
}

impl Run {
    fn new(
        sink: Box<dyn Sink>,
        rx: Receiver<Queued>,
        shared: Arc<Shared>,
        config: RunnerConfig,
    ) -> Self {
        Run {
            sink,
            rx,
            shared,
            outputs: VecDeque::with_capacity(config.batch),
            meta: VecDeque::with_capacity(config.batch),
            waiting: Vec::new(),
            held: Vec::new(),
            outcomes: Vec::with_capacity(config.batch),
            gates: Vec::new(),
            config,
        }
    }

    fn run(mut self) {
        info!(sink = %self.shared.name, kind = %self.shared.kind, "sink started");
        loop {
            let stopping = self.shared.stop.load(Ordering::Acquire);
            if stopping {
                let past = self
                    .shared
                    .deadline
                    .lock()
                    .is_none_or(|deadline| Instant::now() >= deadline);
                let idle = self.outputs.is_empty() && self.waiting.is_empty() && self.rx.is_empty();
                if idle || past {
                    break;
                }
            }
            self.take_queued();
            self.promote_due_retries();
            if self.outputs.is_empty() {
                let wait = self
                    .waiting
                    .first()
                    .map_or(Duration::from_millis(50), |first| {
                        first.due.saturating_duration_since(Instant::now())
                    })
                    .min(Duration::from_millis(50));
                match self.rx.recv_timeout(wait) {
                    Ok(queued) => self.push(queued),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => {
                        if self.waiting.is_empty() {
                            break;
                        }
                    }
                }
                continue;
            }
            self.publish_batch();
        }
        let left = self.outputs.len() + self.waiting.len() + self.rx.len();
        if left > 0 {
            warn!(sink = %self.shared.name, outputs = left, "sink stopped with outputs not published: their inputs are not committed and are delivered again after a restart");
        }
        info!(sink = %self.shared.name, "sink stopped");
    }

    fn push(&mut self, queued: Queued) {
        self.outputs.push_back(queued.output);
        self.meta.push_back(Meta {
            gate: queued.gate,
            first_attempt: None,
        });
    }

    fn take_queued(&mut self) {
        let room = (self.config.batch * 4).saturating_sub(self.outputs.len());
        for _ in 0..room {
            match self.rx.try_recv() {
                Ok(queued) => self.push(queued),
                Err(_) => break,
            }
        }
    }

    /// Due retries go to the front, ahead of first attempts (in their due order).
    fn promote_due_retries(&mut self) {
        let now = Instant::now();
        let due = self.waiting.partition_point(|waiting| waiting.due <= now);
        if due == 0 {
            return;
        }
        for waiting in self.waiting.drain(..due).rev() {
            self.shared
                .counters
                .retrying
                .fetch_sub(1, Ordering::Relaxed);
            self.outputs.push_front(waiting.queued.output);
            self.meta.push_front(Meta {
                gate: waiting.queued.gate,
                first_attempt: Some(waiting.first_attempt),
            });
        }
    }

    fn publish_batch(&mut self) {
        let count = self.outputs.len().min(self.config.batch);
        let outputs = self.outputs.make_contiguous();
        self.outcomes.clear();
        self.sink.publish(&outputs[..count], &mut self.outcomes);
        if self.outcomes.len() != count {
            error!(sink = %self.shared.name, expected = count, answered = self.outcomes.len(), "the sink answered a different number of outcomes: the missing ones count as uncertain");
            self.outcomes.resize(
                count,
                SinkOutcome::Uncertain {
                    evidence: "the sink gave no outcome for it".to_owned(),
                },
            );
        }
        let now = Instant::now();
        let wall = SystemTime::now();
        let outcomes = std::mem::take(&mut self.outcomes);
        // Published outputs are counted once per batch, and a run of one gate's tags is
        // completed with one `complete_through`. That is exact only while every tag up
        // to the run's last is published: so no output of this runner may be waiting
        // for a retry or held, the batch may hold no retried output (retries come back
        // in the order they fall due, not in tag order, and ahead of the new outputs),
        // and the run ends at the batch's first output that was not published. New
        // outputs reach the runner in increasing tag order per gate.
        let mut coalesce = self.waiting.is_empty()
            && self.held.is_empty()
            && self
                .meta
                .iter()
                .take(count)
                .all(|meta| meta.first_attempt.is_none());
        let mut run: Option<(GateId, u64)> = None;
        let mut published = 0usize;
        for outcome in &outcomes {
            let (Some(output), Some(meta)) = (self.outputs.pop_front(), self.meta.pop_front())
            else {
                break;
            };
            if outcome.is_published() {
                published += 1;
                let Some((gate, tag)) = meta.gate else {
                    continue;
                };
                if !coalesce {
                    self.gate(gate).complete(tag);
                    continue;
                }
                match &mut run {
                    Some((same, through)) if *same == gate => *through = tag,
                    _ => {
                        if let Some((gate, through)) = run.replace((gate, tag)) {
                            self.gate(gate).complete_through(through);
                        }
                    }
                }
                continue;
            }
            coalesce = false;
            if let Some((gate, through)) = run.take() {
                self.gate(gate).complete_through(through);
            }
            self.settle(output, meta, outcome, now, wall);
        }
        if let Some((gate, through)) = run {
            self.gate(gate).complete_through(through);
        }
        if published > 0 {
            // over: they leave the queue (a retried output stays counted until then)
            self.shared.queued.fetch_sub(published, Ordering::AcqRel);
            self.shared
                .counters
                .published
                .fetch_add(published as u64, Ordering::Relaxed);
        }
        self.outcomes = outcomes;
    }

    /// The gate registered as `id`.
    fn gate(&mut self, id: GateId) -> &Arc<dyn CommitGate> {
        let at = id.0 as usize;
        if at >= self.gates.len() {
            // registered before any output naming it was sent
            self.gates.clone_from(&self.shared.gates.lock());
        }
        &self.gates[at]
    }

    /// An output that was not published: retried, or given up by the policy.
    fn settle(
        &mut self,
        mut output: Output,
        meta: Meta,
        outcome: &SinkOutcome,
        now: Instant,
        wall: SystemTime,
    ) {
        let counters = &self.shared.counters;
        match outcome {
            SinkOutcome::Published { .. } => {
                debug_assert!(false, "publish_batch settles published outputs itself");
                return;
            }
            SinkOutcome::NotPublished { .. } => {
                counters.not_published.fetch_add(1, Ordering::Relaxed);
            }
            SinkOutcome::Uncertain { .. } => {
                counters.uncertain.fetch_add(1, Ordering::Relaxed);
            }
        }
        let first_attempt = meta.first_attempt.unwrap_or(wall);
        let queued = Queued {
            output: Output {
                key: output.key.clone(),
                payload: std::mem::take(&mut output.payload),
                attempt: output.attempt.saturating_add(1),
            },
            gate: meta.gate,
        };
        let budget = self.config.budget;
        let expired = wall >= budget.expire_at(first_attempt);
        let spent = queued.output.attempt > budget.max_retries;
        if !outcome.may_retry() || expired || spent {
            if outcome.may_retry() {
                counters.expired.fetch_add(1, Ordering::Relaxed);
            }
            let why = if !outcome.may_retry() {
                "failed permanently"
            } else if expired {
                "expired"
            } else {
                "spent its retries"
            };
            self.give_up(queued, why, outcome);
            return;
        }
        counters.retrying.fetch_add(1, Ordering::Relaxed);
        let due = now + budget.backoff(queued.output.attempt);
        let at = self.waiting.partition_point(|waiting| waiting.due <= due);
        self.waiting.insert(
            at,
            Waiting {
                queued,
                due,
                first_attempt,
            },
        );
    }

    fn give_up(&mut self, queued: Queued, why: &str, outcome: &SinkOutcome) {
        // over for the queue (a held output is kept aside, not queued)
        self.shared.queued.fetch_sub(1, Ordering::AcqRel);
        let key: &OutputKey = &queued.output.key;
        let state = if matches!(outcome, SinkOutcome::Uncertain { .. }) {
            "uncertain"
        } else {
            "not published"
        };
        match self.config.policy {
            ExhaustedPolicy::CountLoss => {
                self.shared.counters.lost.fetch_add(1, Ordering::Relaxed);
                error!(sink = %self.shared.name, key = %key, evidence = outcome.evidence(), "output {why} ({state}): counted lost by the count_loss policy; its input is committed");
                if let Some((gate, tag)) = queued.gate {
                    self.gate(gate).complete(tag);
                }
            }
            ExhaustedPolicy::Hold => {
                let reason = format!(
                    "sink '{}': output {key} {why} ({state}: {}): its feed's commit is held; a restart tries it again",
                    self.shared.name,
                    outcome.evidence()
                );
                error!(sink = %self.shared.name, key = %key, evidence = outcome.evidence(), "output {why} ({state}): held by the hold policy; its feed's commit stays before its input");
                if let Some((gate, tag)) = queued.gate {
                    self.gate(gate).held(tag, &reason);
                }
                self.shared.held.lock().push(reason);
                self.held.push(queued);
            }
        }
    }
}
