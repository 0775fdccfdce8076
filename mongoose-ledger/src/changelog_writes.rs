//! The bookkeeping of a stateful processor's writes to a [`PartitionStateStore`] (a
//! Kafka changelog): [`ChangelogWrites`], shared by the partitioned ledger
//! ([`crate::PartitionedLedger`]) and the `mongoose` binary's partitioned aggregate, so
//! that the rules below are written once.
//!
//! * **A write holds its line's commit.** Each write gets a tag, pending at the feed's
//!   commit gate until the store reports the write durable ([`OnDurable`] `Ok`).
//!   Without a gate, each write is flushed before its line counts as processed.
//! * **Given up.** A write the store gives up ([`WriteFailure::GivenUp`]) keeps its
//!   line's commit held for good, and every later line fails
//!   ([`ChangelogWrites::check_given_up`]): a restart restores from the store. The
//!   first such failure is the one reported.
//! * **Fenced.** A write of a partition whose producer the broker fenced
//!   ([`WriteFailure::Fenced`]) keeps its line's commit held under `(partition,
//!   epoch)`, with one WARN per `(partition, epoch)`, until the processor settles it
//!   ([`ChangelogWrites::settle`], before each line and on a timer every
//!   [`FENCE_CHECK`]): a partition this member still holds in the fenced epoch is
//!   asked about ([`PartitionStateStore::retake`]). Retaken (the fencer was a stale
//!   owner): held on, the store writes the fenced writes again and their tags complete
//!   when durable. Not retaken (a newer owner holds it): dropped from memory, its lines
//!   in that epoch skipped ([`ChangelogWrites::is_fenced_off`]), its held tags
//!   completed (that epoch's commits are refused or ignored). No answer yet: held, and
//!   asked again at the next settle. A fenced write of an epoch this member no longer
//!   holds the partition in is over: its tag completes.
//!
//! [`WriteFailure::GivenUp`]: mongoose_core::state_store::WriteFailure::GivenUp
//! [`WriteFailure::Fenced`]: mongoose_core::state_store::WriteFailure::Fenced

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use mongoose_core::sink::CommitGate;
use mongoose_core::state_store::{OnDurable, PartitionStateStore, WriteFailure};
use mongoose_core::{Epoch, ProcessorError};
use parking_lot::Mutex;
use tracing::{info, warn};

/// How often a processor settles its fenced partitions on its timer: a fenced
/// partition's held commits hold the group's commit of every partition (one checkpoint
/// per group), and the partition's next line may never come (it moved away).
pub const FENCE_CHECK: Duration = Duration::from_millis(500);

/// How long a write waits for its durability without a commit gate.
const FLUSH_WITHOUT_GATE: Duration = Duration::from_secs(60);

/// Per `(partition, epoch)` reported fenced, the tags of its fenced writes.
type FencedWrites = BTreeMap<(i32, u64), Vec<u64>>;

/// A processor's writes to its partition state store: the callback the store reports
/// them through, the tags pending at the commit gate, the first write the store gave
/// up, the fenced writes not settled yet, and the epochs of the partitions dropped as
/// fenced (see the module docs). Log lines start with the label it was made with
/// (`ledger`, `aggregate`).
pub struct ChangelogWrites {
    /// The processor kind, first in each log line.
    label: &'static str,
    /// The feed's commit gate (`None`: each write is flushed at once).
    gate: Option<Arc<dyn CommitGate>>,
    /// The first write the store gave up, if any (set on the store's thread too).
    failure: Arc<Mutex<Option<String>>>,
    /// Partitions (with the epoch they were held in) the store reported fenced, not yet
    /// retaken or dropped, with the tags of their fenced writes: those lines' commits
    /// are held until the store says whether this member still owns the partition.
    fenced: Arc<Mutex<FencedWrites>>,
    /// The epoch of each partition dropped as fenced: its lines in it are skipped.
    fenced_epochs: HashMap<u32, u64>,
    /// The last tag given to a write.
    next_tag: u64,
}

impl std::fmt::Debug for ChangelogWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangelogWrites")
            .field("label", &self.label)
            .field("gate", &self.gate.is_some())
            .field("failure", &*self.failure.lock())
            .field("fenced", &*self.fenced.lock())
            .field("fenced_epochs", &self.fenced_epochs)
            .field("next_tag", &self.next_tag)
            .finish()
    }
}

impl ChangelogWrites {
    /// The bookkeeping of a processor labelled `label` in its logs, whose lines'
    /// commits wait at `gate` (`None`: each write is flushed before its line counts as
    /// processed).
    pub fn new(label: &'static str, gate: Option<Arc<dyn CommitGate>>) -> Self {
        ChangelogWrites {
            label,
            gate,
            failure: Arc::new(Mutex::new(None)),
            fenced: Arc::new(Mutex::new(BTreeMap::new())),
            fenced_epochs: HashMap::new(),
            next_tag: 0,
        }
    }

    /// The callback to open the store with: a durable write completes its tag at the
    /// gate, a fenced one is held until [`ChangelogWrites::settle`], a given-up one is
    /// kept as the failure (the first only) and its tag stays pending.
    pub fn on_durable(&self) -> OnDurable {
        let label = self.label;
        let gate = self.gate.clone();
        let failure = Arc::clone(&self.failure);
        let fenced = Arc::clone(&self.fenced);
        Arc::new(move |tag, result: Result<(), WriteFailure>| match result {
            Ok(()) => {
                if let Some(gate) = &gate {
                    gate.complete(tag);
                }
            }
            Err(WriteFailure::Fenced {
                partition,
                epoch,
                message,
            }) => {
                // a newer owner took the partition, or a stale one (lines of an earlier
                // assignment still queued in another member) fenced this member, which
                // still holds it: the line's commit is held until the processor asks
                // the store which (`settle`). Completed now, a stale owner's fence
                // would commit the line unapplied
                let mut fenced = fenced.lock();
                let held = fenced.entry((partition, epoch.0)).or_insert_with(|| {
                    warn!(partition, %epoch, %message, "{label}: a partition's changelog producer was fenced: its writes since the last commit are aborted");
                    Vec::new()
                });
                held.push(tag);
            }
            Err(WriteFailure::GivenUp(error)) => {
                // the line's commit stays held: it is read again after a restart
                let mut failure = failure.lock();
                if failure.is_none() {
                    *failure = Some(error);
                }
            }
        })
    }

    /// Fails when a write was given up (the state in memory is ahead of `store`): no
    /// later line may be saved on it; a restart restores the partitions.
    ///
    /// # Errors
    /// The first write given up, and what to do.
    pub fn check_given_up(&self, store: &dyn PartitionStateStore) -> Result<(), ProcessorError> {
        match self.failure.lock().as_ref() {
            None => Ok(()),
            Some(error) => Err(ProcessorError::new(format!(
                "a changelog write was given up by the producer ({error}): its line is not committed; restart the server to restore the partitions from the changelog (topic {})",
                store.location()
            ))),
        }
    }

    /// Records a write the store refused when it was sent (an output of the line, say):
    /// every later line fails, as after a write given up.
    pub fn record_failure(&self, message: String) {
        *self.failure.lock() = Some(message);
    }

    /// Writes one change of `partition` after input `offset` in `epoch` to `store`,
    /// its line's commit pending at the gate under a new tag until the store reports
    /// it durable; without a gate, waits until it is.
    ///
    /// # Errors
    /// The store refused the write (recorded: every later line fails too), or, without
    /// a gate, the write is not durable in time.
    pub fn write(
        &mut self,
        store: &dyn PartitionStateStore,
        partition: i32,
        epoch: Epoch,
        offset: u64,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), ProcessorError> {
        self.next_tag += 1;
        let tag = self.next_tag;
        if let Some(gate) = &self.gate {
            gate.pending(tag);
        }
        if let Err(error) = store.write(partition, epoch, offset, key, value, tag) {
            // the state in memory is ahead of the store: no later line may be saved on
            // it (a restart restores)
            let message = error.to_string();
            self.record_failure(message.clone());
            return Err(ProcessorError::new(message));
        }
        if self.gate.is_none() {
            store
                .flush(FLUSH_WITHOUT_GATE)
                .map_err(|error| ProcessorError::new(error.to_string()))?;
        }
        Ok(())
    }

    /// True when `lane`'s lines in `epoch` are skipped: the lane was dropped as fenced
    /// in that epoch, or taken over by another member while this one restored it.
    pub fn is_fenced_off(&self, lane: u32, epoch: u64) -> bool {
        self.fenced_epochs.get(&lane) == Some(&epoch)
    }

    /// Skips `lane`'s lines in `epoch`: another member took the partition over while
    /// this one restored it.
    pub fn skip_epoch(&mut self, lane: u32, epoch: u64) {
        self.fenced_epochs.insert(lane, epoch);
    }

    /// `lane` was restored (in a new epoch): its lines are no longer skipped.
    pub fn restored(&mut self, lane: u32) {
        self.fenced_epochs.remove(&lane);
    }

    /// Settles the partitions the store reported fenced, before a line of `current`
    /// `(lane, epoch)` or on the fence timer (`None`); `holds(lane, epoch)` tells
    /// whether this member holds `lane` in memory in `epoch`. One held in the fenced
    /// epoch (and not behind a line of a later epoch of the lane) is asked about with
    /// [`PartitionStateStore::retake`]: retaken, it is held on (the store wrote the
    /// fenced writes again; their tags complete when durable); not retaken, it is
    /// dropped, its lines in that epoch skipped and its held tags completed (a newer
    /// owner holds it: this member's commits of that epoch are refused or ignored);
    /// no answer, its tags stay held and it is asked again at the next settle. Fenced
    /// writes of an epoch the lane is not held in any more: their tags complete.
    ///
    /// Returns the lanes dropped: the caller forgets their state.
    #[must_use = "the dropped lanes' state must be forgotten"]
    pub fn settle(
        &mut self,
        store: &dyn PartitionStateStore,
        holds: impl Fn(u32, u64) -> bool,
        current: Option<(u32, u64)>,
    ) -> Vec<u32> {
        let label = self.label;
        let fenced = std::mem::take(&mut *self.fenced.lock());
        let mut dropped = Vec::new();
        for ((partition, fenced_epoch), tags) in fenced {
            let Ok(fenced_lane) = u32::try_from(partition) else {
                continue;
            };
            let held = holds(fenced_lane, fenced_epoch)
                // a line of a later epoch of that lane: the fenced one is over here
                && !current.is_some_and(|(lane, epoch)| fenced_lane == lane && epoch > fenced_epoch);
            if held {
                match store.retake(partition, Epoch(fenced_epoch)) {
                    Ok(true) => {
                        info!(partition, epoch = fenced_epoch, writes = tags.len(),
                            "{label}: fenced by a stale owner: the partition is held on, its fenced writes written again");
                        continue;
                    }
                    Ok(false) => {}
                    Err(error) => {
                        warn!(partition, epoch = fenced_epoch, %error,
                            "{label}: cannot tell yet whether a fenced partition is still this member's: its lines' commits stay held, asked again at the next line or the fence timer");
                        self.fenced
                            .lock()
                            .entry((partition, fenced_epoch))
                            .or_default()
                            .extend(tags);
                        continue;
                    }
                }
                dropped.push(fenced_lane);
                info!(
                    partition,
                    epoch = fenced_epoch,
                    "{label}: fenced partition dropped; its lines in this epoch are skipped"
                );
                self.fenced_epochs.insert(fenced_lane, fenced_epoch);
            }
            if let Some(gate) = &self.gate {
                for tag in tags {
                    gate.complete(tag);
                }
            }
        }
        dropped
    }
}

#[cfg(test)]
mod tests;
