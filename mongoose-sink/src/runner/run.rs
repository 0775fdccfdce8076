//! The runner's thread: takes what was sent, publishes it in batches, retries, holds or
//! counts as lost what cannot be published, and tells each output's gate.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::{
    GateId, HeldNote, LossRecorder, LostOutput, Parcel, Queued, RunnerConfig, Shared, Waiting,
};
use crossbeam_channel::{Receiver, RecvTimeoutError};
use mongoose_core::sink::{CommitGate, ExhaustedPolicy, Output, Sink, SinkOutcome};
use tracing::{debug, error, info, warn};

/// The largest payload buffer given back to the writers (a longer one is freed).
const SPARE_MAX_BYTES: usize = 4096;

/// The longest the runner's thread waits before it looks at its queue, its retries
/// and its stop flag again.
const IDLE_WAIT: Duration = Duration::from_millis(50);

/// The longest the runner's thread waits on its queue while nothing is due (no retry,
/// no pause): a stop, a retry request and new settings wake it
/// ([`super::SinkHandle::nudge`]), so this is only a safety look.
const QUIET_WAIT: Duration = Duration::from_secs(60);

/// The runner thread's state.
pub(super) struct Run {
    sink: Box<dyn Sink>,
    rx: Receiver<Parcel>,
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
    /// Since when the ready outputs (fewer than a batch) wait for more (the
    /// runner's `linger`).
    filling_since: Option<Instant>,
    /// The payload buffers of the batch's published outputs, given back to the
    /// writers for their next outputs ([`Shared::spares`]).
    spares: Vec<Vec<u8>>,
}

struct Meta {
    gate: Option<(GateId, u64)>,
    first_attempt: Option<SystemTime>,
    held: bool,
}

impl Run {
    pub(super) fn new(
        sink: Box<dyn Sink>,
        rx: Receiver<Parcel>,
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
            filling_since: None,
            spares: Vec::new(),
            config,
        }
    }

    pub(super) fn run(mut self) {
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
            if self.shared.retune_pending.swap(false, Ordering::AcqRel) {
                self.retune();
            }
            self.take_queued();
            self.promote_due_retries();
            let now = Instant::now();
            let paused = self.paused_until.filter(|until| now < *until);
            if self.outputs.is_empty() || paused.is_some() {
                // a stopping runner looks again at its deadline, whatever is due later
                // (chaos reload seed 1796683247187: a replaced sink's stop waited for a
                // retry an hour away)
                let deadline = if stopping {
                    *self.shared.deadline.lock()
                } else {
                    None
                };
                let wait = self
                    .waiting
                    .first()
                    .map(|first| first.due)
                    .into_iter()
                    .chain(paused)
                    .chain(deadline)
                    .map(|when| when.saturating_duration_since(now));
                if paused.is_some() {
                    std::thread::sleep(wait.fold(IDLE_WAIT, Duration::min));
                    continue;
                }
                let wait = wait.fold(QUIET_WAIT, Duration::min);
                match self.rx.recv_timeout(wait) {
                    Ok(parcel) => self.take(parcel),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => {
                        if self.waiting.iter().all(|waiting| waiting.held) {
                            break;
                        }
                    }
                }
                continue;
            }
            if !stopping && self.lingers(now) {
                continue;
            }
            self.filling_since = None;
            self.publish_batch();
        }
        let held = self.shared.held.lock().len();
        let queued: usize = self.rx.try_iter().map(|parcel| parcel.len()).sum();
        let left = self.outputs.len() + self.waiting.len() + self.parked.len() + queued;
        if left > 0 {
            warn!(sink = %self.shared.name, outputs = left, held, "sink stopped with outputs not published: their inputs are not committed and are delivered again after a restart");
        }
        info!(sink = %self.shared.name, "sink stopped");
    }

    /// Takes the settings [`super::SinkHandle::retune`] left, between two batches.
    fn retune(&mut self) {
        let Some(retune) = self.shared.retune.lock().take() else {
            return;
        };
        info!(sink = %self.shared.name, batch = retune.batch, linger_ms = retune.linger.as_millis() as u64,
            max_retries = retune.budget.max_retries, reopened = retune.sink.is_some(),
            "sink settings changed (a reload): they apply from the next batch");
        self.config.budget = retune.budget;
        self.config.batch = retune.batch.max(1);
        self.config.linger = retune.linger;
        if let Some(sink) = retune.sink {
            self.sink = sink;
        }
    }

    /// Whether fewer than a batch of first attempts wait for more (up to the runner's
    /// `linger` since the first of them was ready): waits for the next one, or until
    /// the linger is over.
    fn lingers(&mut self, now: Instant) -> bool {
        let linger = self.config.linger;
        if linger.is_zero()
            || self.outputs.len() >= self.config.batch
            // a retry (they go first) does not wait
            || self.meta.front().is_some_and(|meta| meta.first_attempt.is_some())
            || self.waiting.first().is_some_and(|waiting| waiting.due <= now)
        {
            return false;
        }
        let until = *self.filling_since.get_or_insert(now) + linger;
        if now >= until {
            return false;
        }
        // in steps, so that a stop, a retry request or a due retry is seen
        match self.rx.recv_timeout((until - now).min(IDLE_WAIT)) {
            Ok(parcel) => {
                self.take(parcel);
                true
            }
            Err(RecvTimeoutError::Timeout) => true,
            // no more will come: publish what is there
            Err(RecvTimeoutError::Disconnected) => false,
        }
    }

    fn take(&mut self, parcel: Parcel) {
        match parcel {
            Parcel::One(queued) => self.push(queued),
            Parcel::Many(mut outputs) => {
                for queued in outputs.drain(..) {
                    self.push(queued);
                }
                self.shared.give_back_parcel(outputs);
            }
            Parcel::Nudge => {}
        }
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
        let room = self.config.batch * 4;
        while self.outputs.len() < room {
            match self.rx.try_recv() {
                Ok(parcel) => self.take(parcel),
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
        if self.shared.tap.is_attached() {
            offer_to_tap(&self.shared.tap, &outputs[..count]);
        }
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
        // the "cannot deliver" condition: set when the target could not be reached,
        // cleared by the first delivery that succeeds (a comparison per publish call)
        if outcomes_delivered(&self.outcomes) {
            self.shared.delivered();
        } else if let Some(error) = self.sink.cannot_reach() {
            self.shared.cannot_deliver(error);
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
                let mut payload = output.payload;
                if payload.capacity() <= SPARE_MAX_BYTES {
                    payload.clear();
                    self.spares.push(payload);
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
        self.shared.give_back(&mut self.spares);
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

/// Whether a publish call delivered at least one output.
fn outcomes_delivered(outcomes: &[SinkOutcome]) -> bool {
    outcomes
        .iter()
        .any(|outcome| matches!(outcome, SinkOutcome::Published { .. }))
}

/// Offers each output of a batch, as the sink is given it, to the attached taps.
#[cold]
fn offer_to_tap(tap: &mongoose_core::tap::TapPoint, outputs: &[Output]) {
    for output in outputs {
        tap.offer(|| {
            let (text, cut) = mongoose_core::tap::TapRecord::text_of(&output.payload);
            mongoose_core::tap::TapRecord {
                sequence: 0,
                epoch: Some(output.key.epoch),
                lane: output.key.lane,
                position: output.key.position,
                output: Some((Arc::clone(&output.key.feed), output.key.index)),
                attempt: output.attempt,
                text,
                cut,
            }
        });
    }
}
