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

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mongoose_core::sink::{
    CommitGate, ExhaustedPolicy, Output, OutputKey, RetryBudget, Sink, WrittenLane,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tracing::error;

mod handle;
mod run;

pub use self::handle::{SendError, SinkHandle};
use self::run::Run;

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
    /// How long fewer than `batch` outputs wait for more before they are published
    /// (zero, the default: at once). A sink that packs outputs into requests (the HTTP
    /// sink's ndjson batches) fills them this way; retries, a paused target and a
    /// stopping runner do not wait.
    pub linger: Duration,
    /// The most outputs queued for the sink; past it [`SinkHandle::send`] refuses.
    pub capacity: usize,
}

impl RunnerConfig {
    /// A runner for sink `name` of kind `kind` with the default budget and policy,
    /// batches of 1,024 published at once and a queue of 65,536 outputs.
    pub fn new(name: &str, kind: &str) -> Self {
        RunnerConfig {
            name: name.to_owned(),
            kind: kind.to_owned(),
            budget: RetryBudget::default(),
            policy: ExhaustedPolicy::Hold,
            batch: 1024,
            linger: Duration::ZERO,
            capacity: 65_536,
        }
    }
}

/// One output the `hold` policy keeps, as the status shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
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
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
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
    /// Set while the sink cannot deliver: its last attempt could not reach the target
    /// (a connection refused, a TLS handshake that failed), with that error; cleared
    /// by the first delivery that succeeds. The server is not ready meanwhile.
    #[serde(default)]
    pub cannot_deliver: Option<String>,
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
    /// The runner's thread ended: nothing sent now is published.
    closed: AtomicBool,
    /// Stop only once this instant is passed, even with outputs left.
    deadline: Mutex<Option<Instant>>,
    /// The gates registered with [`SinkHandle::register_gate`], by [`GateId`].
    gates: Mutex<Vec<Arc<dyn CommitGate>>>,
    /// An operator asked to try every waiting and held output now.
    retry_now: AtomicBool,
    /// Payload buffers of published outputs, empty, for the writers' next outputs:
    /// an output's buffer is made once and goes round, instead of being allocated on
    /// the writer's thread and freed on the runner's for each output.
    spares: Mutex<Vec<Vec<u8>>>,
    /// How many are in `spares` (read without the lock).
    spare_count: AtomicUsize,
    /// Emptied [`Parcel::Many`] vectors, for the writers' next batches.
    parcels: Mutex<Vec<Vec<Queued>>>,
    /// What the sink held when it was opened ([`Sink::written_lanes`]).
    written: Vec<WrittenLane>,
    /// The sink cannot deliver: its last attempt could not reach the target (why).
    cannot_deliver: Mutex<Option<String>>,
    /// Whether `cannot_deliver` is set (read without the lock on each publish).
    undeliverable: AtomicBool,
    /// Settings to take before the next batch ([`SinkHandle::retune`]); `retune_pending`
    /// says one is there without the lock.
    retune: Mutex<Option<Retune>>,
    retune_pending: AtomicBool,
    /// The operator's taps of the outputs the sink is given (one relaxed load a batch
    /// while none is attached).
    tap: mongoose_core::tap::TapPoint,
}

/// Settings a running sink takes between two batches ([`SinkHandle::retune`]): its
/// retry budget, its batch and linger, and a replacement for the sink itself (a
/// network sink opened again with other timeouts or request sizes; it holds nothing
/// the runner does not).
pub struct Retune {
    /// The retry budget of each output from now on (an output waiting for a retry
    /// keeps the due time it has).
    pub budget: RetryBudget,
    /// The most outputs given to the sink in one `publish` call.
    pub batch: usize,
    /// How long fewer than `batch` outputs wait for more.
    pub linger: Duration,
    /// The sink that publishes from the next batch on, in place of the running one.
    pub sink: Option<Box<dyn Sink>>,
}

impl fmt::Debug for Retune {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retune")
            .field("budget", &self.budget)
            .field("batch", &self.batch)
            .field("linger", &self.linger)
            .field("sink", &self.sink.is_some())
            .finish()
    }
}

/// The most emptied parcels kept for the writers.
const PARCELS_MAX: usize = 8;

/// The most spare payload buffers kept for the writers.
const SPARES_MAX: usize = 16_384;

impl Shared {
    /// The last attempt could not reach the target: the sink cannot deliver until a
    /// delivery succeeds. Said once per condition (WARN), not per attempt.
    fn cannot_deliver(&self, error: &str) {
        let mut condition = self.cannot_deliver.lock();
        if condition.is_none() {
            tracing::warn!(sink = %self.name, %error,
                "the sink cannot deliver: its target cannot be reached (the server is not ready until a delivery succeeds)");
        }
        *condition = Some(error.to_owned());
        self.undeliverable.store(true, Ordering::Release);
    }

    /// A delivery succeeded: the sink can deliver again.
    fn delivered(&self) {
        if !self.undeliverable.load(Ordering::Acquire) {
            return;
        }
        if let Some(error) = self.cannot_deliver.lock().take() {
            tracing::info!(sink = %self.name, last_error = %error, "the sink delivers again");
        }
        self.undeliverable.store(false, Ordering::Release);
    }

    /// Keeps the runner's `spares` for the writers (up to [`SPARES_MAX`]).
    fn give_back(&self, spares: &mut Vec<Vec<u8>>) {
        if spares.is_empty() {
            return;
        }
        let mut kept = self.spares.lock();
        let room = SPARES_MAX.saturating_sub(kept.len());
        if room < spares.len() {
            spares.truncate(room);
        }
        if kept.is_empty() {
            std::mem::swap(&mut *kept, spares);
        } else {
            kept.append(spares);
        }
        self.spare_count.store(kept.len(), Ordering::Release);
        spares.clear();
    }

    /// Keeps an emptied parcel's vector for a writer's next batch.
    fn give_back_parcel(&self, parcel: Vec<Queued>) {
        let mut parcels = self.parcels.lock();
        if parcels.len() < PARCELS_MAX {
            parcels.push(parcel);
        }
    }

    /// An empty vector for a writer's next batch: a parcel the runner emptied, or a new
    /// one with room for `capacity`.
    pub(crate) fn parcel(&self, capacity: usize) -> Vec<Queued> {
        self.parcels
            .lock()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(capacity))
    }

    /// Moves the spare buffers into `into` (a writer's own stock).
    fn take_spares(&self, into: &mut Vec<Vec<u8>>) {
        if self.spare_count.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut kept = self.spares.lock();
        std::mem::swap(&mut *kept, into);
        kept.clear();
        self.spare_count.store(0, Ordering::Release);
    }
}

/// A commit gate registered with a sink's runner ([`SinkHandle::register_gate`]): an
/// output names its gate by this id, so sending one touches no reference count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GateId(u32);

/// One output with what the runner keeps about it.
pub(crate) struct Queued {
    pub(crate) output: Output,
    pub(crate) gate: Option<(GateId, u64)>,
}

/// What one hand-off to the runner carries: an output, or the outputs a writer kept
/// until its batch ended ([`crate::SinkWriter`]).
pub(crate) enum Parcel {
    One(Queued),
    Many(Vec<Queued>),
    /// No output: wakes the idle runner's thread to look at its flags (a stop, a
    /// retry request, new settings), which it no longer polls.
    Nudge,
}

impl Parcel {
    /// How many outputs it carries.
    fn len(&self) -> usize {
        match self {
            Parcel::One(_) => 1,
            Parcel::Many(outputs) => outputs.len(),
            Parcel::Nudge => 0,
        }
    }
}

/// An output waiting for its next attempt.
struct Waiting {
    queued: Queued,
    due: Instant,
    first_attempt: SystemTime,
    /// Kept by the hold policy (in the held book, not in `retrying` or `queued`).
    held: bool,
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
        // unbounded: `queued`, counted before a hand-off, bounds what is in it
        let (tx, rx) = crossbeam_channel::unbounded();
        let shared = Arc::new(Shared {
            name: config.name.clone(),
            kind: config.kind.clone(),
            counters: Counters::default(),
            queued: AtomicUsize::new(0),
            held: Mutex::new(BTreeMap::new()),
            stop: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            deadline: Mutex::new(None),
            gates: Mutex::new(Vec::new()),
            retry_now: AtomicBool::new(false),
            spares: Mutex::new(Vec::new()),
            spare_count: AtomicUsize::new(0),
            parcels: Mutex::new(Vec::new()),
            written: sink.written_lanes(),
            cannot_deliver: Mutex::new(None),
            undeliverable: AtomicBool::new(false),
            retune: Mutex::new(None),
            retune_pending: AtomicBool::new(false),
            tap: mongoose_core::tap::TapPoint::default(),
        });
        let thread = std::thread::Builder::new()
            .name(format!("sink:{}", config.name))
            .spawn({
                let shared = Arc::clone(&shared);
                move || {
                    let closed = Arc::clone(&shared);
                    Run::new(sink, rx, shared, config, losses).run();
                    closed.closed.store(true, Ordering::Release);
                }
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
        self.handle.nudge();
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
