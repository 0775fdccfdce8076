//! What processors hold: the [`SinkHandle`] that sends outputs to a running sink,
//! asks for its status and for an early retry.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::{GateId, Parcel, Queued, RetryRequested, Shared, SinkStatus};
use crossbeam_channel::Sender;
use mongoose_core::sink::{CommitGate, Output};

/// Sends outputs to one running sink. Cloned freely; each processor that writes to
/// the sink holds one (see [`crate::SinkWriter`] for the keyed, gated form).
#[derive(Clone)]
pub struct SinkHandle {
    pub(super) tx: Sender<Parcel>,
    pub(super) shared: Arc<Shared>,
    pub(super) capacity: usize,
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
    /// Gives the running sink `retune` (a reload's new settings): the runner's thread
    /// takes it before its next batch, never inside one, so no output is sent twice or
    /// skipped for it. A second call before the thread took the first replaces it.
    pub fn retune(&self, retune: super::Retune) {
        *self.shared.retune.lock() = Some(retune);
        self.shared.retune_pending.store(true, Ordering::Release);
        self.nudge();
    }

    /// Attaches an operator's tap of the outputs the sink is given (each attempt, as
    /// the sink receives it), holding up to `capacity` unread ones: more are dropped
    /// from the tap and counted, never from the sink. `None` when the sink has as many
    /// taps as it serves.
    pub fn attach_tap(&self, capacity: usize) -> Option<mongoose_core::tap::TapReceiver> {
        self.shared.tap.attach(capacity)
    }

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
        self.reserve_up_to(1)?;
        if self.hand_over(Parcel::One(Queued { output, gate })) {
            Ok(())
        } else {
            Err(SendError::Stopped {
                sink: self.shared.name.clone(),
            })
        }
    }

    /// Counts up to `wanted` outputs as queued (what the capacity bounds) before they
    /// are handed over, now or at a batch's end: at least one, as many as the capacity
    /// leaves room for; returns how many.
    ///
    /// # Errors
    /// As [`SinkHandle::send`]: nothing was counted.
    pub(crate) fn reserve_up_to(&self, wanted: usize) -> Result<usize, SendError> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(SendError::Stopped {
                sink: self.shared.name.clone(),
            });
        }
        let queued = self.shared.queued.load(Ordering::Acquire);
        if queued >= self.capacity {
            return Err(SendError::Full {
                sink: self.shared.name.clone(),
                capacity: self.capacity,
            });
        }
        let taken = wanted.clamp(1, self.capacity - queued);
        self.shared.queued.fetch_add(taken, Ordering::AcqRel);
        Ok(taken)
    }

    /// Gives back `count` outputs counted queued that were not used.
    pub(crate) fn release(&self, count: usize) {
        self.shared.queued.fetch_sub(count, Ordering::AcqRel);
    }

    /// Hands reserved outputs to the runner; false when it stopped (they are not
    /// counted any more, and their gates stay pending: their inputs come again).
    pub(crate) fn hand_over(&self, parcel: Parcel) -> bool {
        let count = parcel.len();
        if self.tx.send(parcel).is_ok() {
            return true;
        }
        self.shared.queued.fetch_sub(count, Ordering::AcqRel);
        false
    }

    /// Moves the payload buffers the runner gave back into `into` (empty: nothing
    /// came back yet).
    pub(crate) fn take_spares(&self, into: &mut Vec<Vec<u8>>) {
        self.shared.take_spares(into);
    }

    /// An empty vector for a writer's next batch of outputs.
    pub(crate) fn parcel(&self, capacity: usize) -> Vec<Queued> {
        self.shared.parcel(capacity)
    }

    /// The sink's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// What the sink held when it was opened, per input lane
    /// ([`Sink::written_lanes`](mongoose_core::sink::Sink::written_lanes)).
    pub fn written_lanes(&self) -> &[mongoose_core::sink::WrittenLane] {
        &self.shared.written
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
        self.nudge();
        requested
    }

    /// Wakes the runner's thread to look at its flags (it waits on its queue, without
    /// a timeout while nothing is due). A closed runner has no thread to wake.
    pub(super) fn nudge(&self) {
        let _ = self.tx.send(Parcel::Nudge);
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
            cannot_deliver: self.shared.cannot_deliver.lock().clone(),
        }
    }
}
