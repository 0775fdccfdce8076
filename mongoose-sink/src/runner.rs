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
//! | no outcome (the sink stopped the batch before it: it was **not sent**) | nothing is counted or charged; it is given again, unchanged, once the failed output before it falls due |
//! | `NotPublished`, not retryable (a permanent error) | counted `not_published`; the policy decides at once (`hold`: kept, the feed's commit held, the sink reports it in `held_outputs` and tries it again only on `POST /sinks/{name}/retry` or after a restart; `count_loss`: counted `lost`, its gate told) |
//! | `Uncertain`, or `NotPublished` retryable | counted (`uncertain` / `not_published`); tried again with the same key after the budget's backoff. Once the budget is spent or the output expired it is counted `expired` and the policy decides: `count_loss` counts it `lost`; `hold` keeps it, reports it (the feed is `stalled`, the sink's `held_outputs` show its attempts, last evidence and next try) and **goes on trying it** at the capped backoff (`max_backoff`) for as long as it takes: an outage longer than the budget heals by itself when the target returns |
//!
//! Every attempt counted is an attempt made: `not_published + uncertain` is the number
//! of failed requests the target could have seen, never more.
//!
//! When the sink's target does not answer (the sink stops a batch early, or says so
//! with [`Sink::target_not_answering`]), the runner pauses: nothing is sent until the
//! failed output's retry falls due, and that output is the probe that is sent first.
//! A target that is down therefore costs one attempt per backoff, charged to one
//! output.
//!
//! Outputs are first tried in the order they were sent; an output waiting for a retry
//! does not hold back the ones after it (a retried output can land after later ones).
//! Nothing here sleeps on a processor's thread: [`SinkHandle::send`] refuses with
//! [`SendError::Full`] when the sink's queue is full, and the processor's handler fails
//! (a retry-safe processor is given the item again later, the feed holds meanwhile).
//!
//! An output given up by `count_loss` is first handed to the runner's
//! [`LossRecorder`] (the server keeps it beside the feed's pointer, so the next start
//! reports it again), and only then is its input let through to a commit.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use mongoose_core::sink::{
    CommitGate, ExhaustedPolicy, Output, OutputKey, RetryBudget, Sink, SinkOutcome,
};
use parking_lot::Mutex;
use serde::Serialize;
use tracing::{debug, error, info, warn};

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

/// One output the `hold` policy keeps, as the status shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HeldOutput {
    /// Its key (`feed/epoch/lane/position/index/generation`).
    pub key: String,
    /// The attempts made so far.
    pub attempts: u32,
    /// Why it is held: `spent its retries`, `expired` or `failed permanently`.
    pub why: String,
    /// What its last attempt proved: `not published` or `uncertain`.
    pub state: String,
    /// The last attempt's evidence (the refusal, the error).
    pub last_evidence: String,
    /// When it was first held, in milliseconds since the Unix epoch.
    pub held_since_millis: u64,
    /// In how many milliseconds it is tried again (0: now); absent when it waits for
    /// an operator (`POST /sinks/{name}/retry`) or a restart, as a permanent refusal
    /// does.
    pub next_try_in_millis: Option<u64>,
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
    /// Attempts the target verifiably did not take (retryable or not). Every one was
    /// an attempt made: an output a batch never sent counts nothing.
    pub not_published: u64,
    /// Attempts whose outcome is unknown (retried with the same key).
    pub uncertain: u64,
    /// Outputs waiting for a retry now (held outputs are in `held_count`).
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
    /// The first ten held outputs: attempts, last evidence, next try.
    pub held_outputs: Vec<HeldOutput>,
}

/// What `POST /sinks/{name}/retry` set going ([`SinkHandle::retry_now`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RetryRequested {
    /// Outputs that were waiting for a retry.
    pub retrying: u64,
    /// Outputs that were held.
    pub held: u64,
}

/// An output the `count_loss` policy gave up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostOutput {
    /// Its key.
    pub key: OutputKey,
    /// Why it was given up (`spent its retries`, `expired`, `failed permanently`).
    pub why: &'static str,
    /// What its last attempt proved (`not published` or `uncertain`) and its evidence.
    pub evidence: String,
}

/// Keeps a durable record of the outputs a runner counts lost, so that a later start
/// reports them again (the server appends them to the loss file beside the feed's
/// pointer). Called on the runner's thread, before the lost outputs' inputs may be
/// committed; it should not return before the record is durable.
pub trait LossRecorder: Send + Sync {
    /// Records that sink `sink` counted `lost` lost.
    fn record(&self, sink: &str, lost: &[LostOutput]);
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

/// A held output as the runner's thread last noted it (the status reads it).
#[derive(Clone, Debug)]
struct HeldNote {
    reason: String,
    attempts: u32,
    why: &'static str,
    state: &'static str,
    last_evidence: String,
    held_since: SystemTime,
    next_try: Option<Instant>,
}

impl HeldNote {
    fn status(&self, key: &OutputKey, now: Instant) -> HeldOutput {
        HeldOutput {
            key: key.to_string(),
            attempts: self.attempts,
            why: self.why.to_owned(),
            state: self.state.to_owned(),
            last_evidence: self.last_evidence.clone(),
            held_since_millis: self
                .held_since
                .duration_since(UNIX_EPOCH)
                .map_or(0, |since| since.as_millis() as u64),
            next_try_in_millis: self
                .next_try
                .map(|next| next.saturating_duration_since(now).as_millis() as u64),
        }
    }
}

struct Shared {
    name: String,
    kind: String,
    counters: Counters,
    queued: AtomicUsize,
    /// The outputs the hold policy keeps, by key.
    held: Mutex<BTreeMap<OutputKey, HeldNote>>,
    stop: AtomicBool,
    /// Stop only once this instant is passed, even with outputs left.
    deadline: Mutex<Option<Instant>>,
    /// The gates registered with [`SinkHandle::register_gate`], by [`GateId`].
    gates: Mutex<Vec<Arc<dyn CommitGate>>>,
    /// An operator asked to try every waiting and held output now.
    retry_now: AtomicBool,
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

/// An output waiting for its next attempt.
struct Waiting {
    queued: Queued,
    due: Instant,
    first_attempt: SystemTime,
    /// Kept by the hold policy (in the held book, not in `retrying` or `queued`).
    held: bool,
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

/// How many held outputs the status lists.
const HELD_LISTED: usize = 10;

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
        self.shared
            .held
            .lock()
            .values()
            .next()
            .map(|note| note.reason.clone())
    }

    /// Asks the runner to try every output that waits for a retry, and every held
    /// one (a permanent refusal included), now: what `POST /sinks/{name}/retry` does
    /// once an operator has mended the target. Returns how many were waiting and held
    /// when asked; their outcomes show in the status as they come.
    pub fn retry_now(&self) -> RetryRequested {
        let requested = RetryRequested {
            retrying: self.shared.counters.retrying.load(Ordering::Relaxed),
            held: self.shared.held.lock().len() as u64,
        };
        self.shared.retry_now.store(true, Ordering::Release);
        requested
    }

    /// What the sink has done so far.
    pub fn status(&self) -> SinkStatus {
        let counters = &self.shared.counters;
        let held = self.shared.held.lock();
        let now = Instant::now();
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
            held: held
                .values()
                .take(HELD_LISTED)
                .map(|note| note.reason.clone())
                .collect(),
            held_count: held.len() as u64,
            held_outputs: held
                .iter()
                .take(HELD_LISTED)
                .map(|(key, note)| note.status(key, now))
                .collect(),
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
        Self::start_with(sink, config, None)
    }

    /// [`SinkRunner::start`], with `losses` told of every output the `count_loss`
    /// policy gives up before its input may be committed.
    ///
    /// # Errors
    /// The thread could not be started.
    pub fn start_with(
        sink: Box<dyn Sink>,
        config: RunnerConfig,
        losses: Option<Arc<dyn LossRecorder>>,
    ) -> std::io::Result<Self> {
        let capacity = config.capacity.max(1);
        let (tx, rx) = crossbeam_channel::bounded(capacity);
        let shared = Arc::new(Shared {
            name: config.name.clone(),
            kind: config.kind.clone(),
            counters: Counters::default(),
            queued: AtomicUsize::new(0),
            held: Mutex::new(BTreeMap::new()),
            stop: AtomicBool::new(false),
            deadline: Mutex::new(None),
            gates: Mutex::new(Vec::new()),
            retry_now: AtomicBool::new(false),
        });
        let thread = std::thread::Builder::new()
            .name(format!("sink:{}", config.name))
            .spawn({
                let shared = Arc::clone(&shared);
                move || Run::new(sink, rx, shared, config, losses).run()
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
    /// `deadline` passes, then stops the thread. Held outputs do not keep it running.
    /// What is left unpublished keeps its inputs uncommitted: a restart delivers them
    /// again. Returns the status at the stop.
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

/// The longest the runner's thread waits before it looks at its queue, its retries
/// and its stop flag again.
const IDLE_WAIT: Duration = Duration::from_millis(50);

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
    /// Held outputs refused for good: tried again only when an operator asks.
    parked: Vec<Waiting>,
    outcomes: Vec<SinkOutcome>,
    /// The registered gates this thread has seen (refreshed when an id is new to it).
    gates: Vec<Arc<dyn CommitGate>>,
    /// Nothing is sent before this instant: the sink stopped a batch because its
    /// target did not answer, and the output it stopped at is retried then, first.
    paused_until: Option<Instant>,
    /// True from a stopped batch until an output is published again (for the logs).
    outage: bool,
    /// Outputs given up in the batch being settled, with their gates, told once their
    /// loss is recorded.
    lost: Vec<LostOutput>,
    lost_gates: Vec<(GateId, u64)>,
    losses: Option<Arc<dyn LossRecorder>>,
}

struct Meta {
    gate: Option<(GateId, u64)>,
    first_attempt: Option<SystemTime>,
    held: bool,
}

impl Run {
    fn new(
        sink: Box<dyn Sink>,
        rx: Receiver<Queued>,
        shared: Arc<Shared>,
        config: RunnerConfig,
        losses: Option<Arc<dyn LossRecorder>>,
    ) -> Self {
        Run {
            sink,
            rx,
            shared,
            outputs: VecDeque::with_capacity(config.batch),
            meta: VecDeque::with_capacity(config.batch),
            waiting: Vec::new(),
            parked: Vec::new(),
            outcomes: Vec::with_capacity(config.batch),
            gates: Vec::new(),
            paused_until: None,
            outage: false,
            lost: Vec::new(),
            lost_gates: Vec::new(),
            losses,
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
                // held outputs do not keep a stopping sink: a restart tries them
                let idle = self.outputs.is_empty()
                    && self.rx.is_empty()
                    && self.waiting.iter().all(|waiting| waiting.held);
                if idle || past {
                    break;
                }
            }
            if self.shared.retry_now.swap(false, Ordering::AcqRel) {
                self.retry_everything_now();
            }
            self.take_queued();
            self.promote_due_retries();
            let now = Instant::now();
            let paused = self.paused_until.filter(|until| now < *until);
            if self.outputs.is_empty() || paused.is_some() {
                let wait = self
                    .waiting
                    .first()
                    .map(|first| first.due)
                    .into_iter()
                    .chain(paused)
                    .map(|when| when.saturating_duration_since(now))
                    .fold(IDLE_WAIT, Duration::min);
                if paused.is_some() {
                    std::thread::sleep(wait);
                    continue;
                }
                match self.rx.recv_timeout(wait) {
                    Ok(queued) => self.push(queued),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => {
                        if self.waiting.iter().all(|waiting| waiting.held) {
                            break;
                        }
                    }
                }
                continue;
            }
            self.publish_batch();
        }
        let held = self.shared.held.lock().len();
        let left = self.outputs.len() + self.waiting.len() + self.parked.len() + self.rx.len();
        if left > 0 {
            warn!(sink = %self.shared.name, outputs = left, held, "sink stopped with outputs not published: their inputs are not committed and are delivered again after a restart");
        }
        info!(sink = %self.shared.name, "sink stopped");
    }

    fn push(&mut self, queued: Queued) {
        self.outputs.push_back(queued.output);
        self.meta.push_back(Meta {
            gate: queued.gate,
            first_attempt: None,
            held: false,
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
            if !waiting.held {
                self.shared
                    .counters
                    .retrying
                    .fetch_sub(1, Ordering::Relaxed);
            }
            self.outputs.push_front(waiting.queued.output);
            self.meta.push_front(Meta {
                gate: waiting.queued.gate,
                first_attempt: Some(waiting.first_attempt),
                held: waiting.held,
            });
        }
    }

    /// An operator asked: every waiting output falls due now, held ones and those
    /// refused for good included, and a pause ends.
    fn retry_everything_now(&mut self) {
        let now = Instant::now();
        let parked = std::mem::take(&mut self.parked);
        for waiting in &mut self.waiting {
            waiting.due = now;
        }
        self.waiting.extend(parked.into_iter().map(|mut waiting| {
            waiting.due = now;
            waiting
        }));
        for note in self.shared.held.lock().values_mut() {
            note.next_try = Some(now);
        }
        self.paused_until = None;
        info!(sink = %self.shared.name, outputs = self.waiting.len(), "an operator asked for a retry: every waiting and held output is tried now");
    }

    fn publish_batch(&mut self) {
        let count = self.outputs.len().min(self.config.batch);
        let outputs = self.outputs.make_contiguous();
        self.outcomes.clear();
        self.sink.publish(&outputs[..count], &mut self.outcomes);
        if self.outcomes.len() > count {
            error!(sink = %self.shared.name, expected = count, answered = self.outcomes.len(), "the sink answered more outcomes than it was given outputs: the extra ones are ignored");
            self.outcomes.truncate(count);
        }
        if self.outcomes.is_empty() {
            // a sink stops after an attempt, never before its first: that one may
            // have been sent, and charging it keeps the retries bounded
            error!(sink = %self.shared.name, outputs = count, "the sink answered none of its batch: the first output counts as an uncertain attempt");
            self.outcomes.push(SinkOutcome::Uncertain {
                evidence: "the sink gave no outcome for it".to_owned(),
            });
        }
        let now = Instant::now();
        let wall = SystemTime::now();
        let outcomes = std::mem::take(&mut self.outcomes);
        // the rest of the batch was not sent, or the target stopped answering (a
        // batch of one says so too): nothing more goes out until the failed output
        // is tried again
        let stopped = outcomes.len() < count || self.sink.target_not_answering();
        // Published outputs are counted once per batch, and a run of one gate's tags is
        // completed with one `complete_through`. That is exact only while every tag up
        // to the run's last is published: so no output of this runner may be waiting
        // for a retry or held, the batch may hold no retried output (retries come back
        // in the order they fall due, not in tag order, and ahead of the new outputs),
        // and the run ends at the batch's first output that was not published. New
        // outputs reach the runner in increasing tag order per gate (an output a batch
        // did not send stays at the front, in its place).
        let mut coalesce = self.waiting.is_empty()
            && self.parked.is_empty()
            && self
                .meta
                .iter()
                .take(outcomes.len())
                .all(|meta| meta.first_attempt.is_none());
        let mut run: Option<(GateId, u64)> = None;
        let mut published = 0usize;
        let mut published_held = 0usize;
        let mut next_try = None;
        for outcome in &outcomes {
            let (Some(output), Some(meta)) = (self.outputs.pop_front(), self.meta.pop_front())
            else {
                break;
            };
            if outcome.is_published() {
                if meta.held {
                    published_held += 1;
                    self.healed(&output, outcome);
                } else {
                    published += 1;
                }
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
            next_try = Some(self.settle(output, meta, outcome, now, wall));
        }
        if let Some((gate, through)) = run {
            self.gate(gate).complete_through(through);
        }
        self.record_losses();
        if published > 0 {
            // over: they leave the queue (a retried output stays counted until then;
            // a held one left it when it was held)
            self.shared.queued.fetch_sub(published, Ordering::AcqRel);
        }
        if published + published_held > 0 {
            self.shared
                .counters
                .published
                .fetch_add((published + published_held) as u64, Ordering::Relaxed);
            if self.outage {
                self.outage = false;
                info!(sink = %self.shared.name, "the sink's target answers again: outputs are sent again");
            }
        }
        if stopped {
            // what the batch did not send waits, uncharged, in its place until the
            // output the sink stopped at is tried again
            let last = outcomes.last().filter(|last| !last.is_published());
            if let (Some(next), Some(last)) = (next_try, last) {
                self.paused_until = Some(next);
                if !self.outage {
                    self.outage = true;
                    warn!(sink = %self.shared.name, evidence = last.evidence(), not_sent = count - outcomes.len(),
                        "the sink's target does not answer: nothing more is sent until the failed output is tried again (one probe per backoff)");
                }
            }
        }
        self.outcomes = outcomes;
    }

    /// A held output was published at last: it leaves the held book, and its gate is
    /// told (which lifts the feed's stall it caused).
    fn healed(&mut self, output: &Output, outcome: &SinkOutcome) {
        let note = self.shared.held.lock().remove(&output.key);
        if let Some(note) = note {
            info!(sink = %self.shared.name, key = %output.key, attempts = output.attempt + 1, held_since_millis = note.status(&output.key, Instant::now()).held_since_millis,
                evidence = outcome.evidence(), "a held output is published: its feed's commit goes on");
        }
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

    /// An output whose attempt failed: retried, held (and retried), or given up by the
    /// policy. Returns when it would be tried next (for a pause of the sink).
    fn settle(
        &mut self,
        mut output: Output,
        meta: Meta,
        outcome: &SinkOutcome,
        now: Instant,
        wall: SystemTime,
    ) -> Instant {
        let counters = &self.shared.counters;
        let state = match outcome {
            SinkOutcome::Published { .. } => {
                debug_assert!(false, "publish_batch settles published outputs itself");
                return now;
            }
            SinkOutcome::NotPublished { .. } => {
                counters.not_published.fetch_add(1, Ordering::Relaxed);
                "not published"
            }
            SinkOutcome::Uncertain { .. } => {
                counters.uncertain.fetch_add(1, Ordering::Relaxed);
                "uncertain"
            }
        };
        let first_attempt = meta.first_attempt.unwrap_or(wall);
        // the attempts made so far, this one included
        let attempts = output.attempt.saturating_add(1);
        let queued = Queued {
            output: Output {
                key: output.key.clone(),
                payload: std::mem::take(&mut output.payload),
                attempt: attempts,
            },
            gate: meta.gate,
        };
        let budget = self.config.budget;
        // the backoff is capped (`max_backoff`): a held output is tried at that pace
        let due = now + budget.backoff(attempts);
        let permanent = !outcome.may_retry();
        if meta.held {
            // held already: it stays held, and is tried again unless refused for good
            if let Some(note) = self.shared.held.lock().get_mut(&queued.output.key) {
                note.attempts = attempts;
                note.state = state;
                note.last_evidence = outcome.evidence().to_owned();
                note.next_try = (!permanent).then_some(due);
                if permanent {
                    note.why = "failed permanently";
                }
            }
            debug!(sink = %self.shared.name, key = %queued.output.key, attempts, evidence = outcome.evidence(), "a held output failed again");
            self.wait(queued, due, first_attempt, true, permanent);
            return due;
        }
        let expired = wall >= budget.expire_at(first_attempt);
        let spent = attempts > budget.max_retries;
        if !permanent && !expired && !spent {
            counters.retrying.fetch_add(1, Ordering::Relaxed);
            self.wait(queued, due, first_attempt, false, false);
            return due;
        }
        if !permanent {
            counters.expired.fetch_add(1, Ordering::Relaxed);
        }
        let why = if permanent {
            "failed permanently"
        } else if expired {
            "expired"
        } else {
            "spent its retries"
        };
        // over for the queue (a held output is kept aside, not queued)
        self.shared.queued.fetch_sub(1, Ordering::AcqRel);
        let key = queued.output.key.clone();
        match self.config.policy {
            ExhaustedPolicy::CountLoss => {
                counters.lost.fetch_add(1, Ordering::Relaxed);
                error!(sink = %self.shared.name, key = %key, attempts, evidence = outcome.evidence(), "output {why} ({state}): counted lost by the count_loss policy; its input is committed");
                self.lost.push(LostOutput {
                    key,
                    why,
                    evidence: format!("{state}: {}", outcome.evidence()),
                });
                if let Some(gate) = queued.gate {
                    self.lost_gates.push(gate);
                }
            }
            ExhaustedPolicy::Hold => {
                let next = if permanent {
                    format!(
                        "it is tried again on POST /sinks/{}/retry or after a restart",
                        self.shared.name
                    )
                } else {
                    format!(
                        "the sink goes on trying it every {} ms (POST /sinks/{}/retry tries now)",
                        budget.max_backoff.as_millis(),
                        self.shared.name
                    )
                };
                let reason = format!(
                    "sink '{}': output {key} {why} after {attempts} attempts ({state}: {}): its feed's commit is held; {next}",
                    self.shared.name,
                    outcome.evidence()
                );
                error!(sink = %self.shared.name, key = %key, attempts, evidence = outcome.evidence(), "output {why} ({state}): held by the hold policy; its feed's commit stays before its input; {next}");
                if let Some((gate, tag)) = queued.gate {
                    self.gate(gate).held(tag, &reason);
                }
                self.shared.held.lock().insert(
                    key,
                    HeldNote {
                        reason,
                        attempts,
                        why,
                        state,
                        last_evidence: outcome.evidence().to_owned(),
                        held_since: wall,
                        next_try: (!permanent).then_some(due),
                    },
                );
                self.wait(queued, due, first_attempt, true, permanent);
            }
        }
        due
    }

    /// Keeps `queued` for its next attempt at `due` (or, `parked`, until an operator
    /// asks).
    fn wait(
        &mut self,
        queued: Queued,
        due: Instant,
        first_attempt: SystemTime,
        held: bool,
        parked: bool,
    ) {
        let waiting = Waiting {
            queued,
            due,
            first_attempt,
            held,
        };
        if parked {
            self.parked.push(waiting);
            return;
        }
        let at = self.waiting.partition_point(|waiting| waiting.due <= due);
        self.waiting.insert(at, waiting);
    }

    /// Hands the outputs given up in this batch to the loss recorder, then tells their
    /// gates (their inputs may be committed only once the loss is on record).
    fn record_losses(&mut self) {
        if self.lost.is_empty() {
            return;
        }
        if let Some(losses) = &self.losses {
            losses.record(&self.shared.name, &self.lost);
        }
        self.lost.clear();
        for (gate, tag) in std::mem::take(&mut self.lost_gates) {
            self.gate(gate).complete(tag);
        }
    }
}
