//! Acknowledgement: the source's poll that advances the window's head while every
//! live queue and retained point processed it, hands the entries to the committer and
//! commits (a failed commit is retried on the next poll); the committer and the epoch a
//! source registers; what else bounds the acknowledgement point (processing-checkpoint
//! holds, consumers' saved positions); and the commit of what was processed after the
//! source stopped.

use std::collections::HashMap;
use std::sync::Arc;

use mongoose_core::{Epoch, Position, SourceCommitter};
use tracing::error;

use super::Publisher;
use crate::checkpoint::{HoldCell, ProcessingCheckpoint};
use crate::window::{Window, WindowEntry};

/// The acknowledgement part of the feed's state.
pub(super) struct AckState<P: Position> {
    /// Sequence to position, in publish order, until every queue processed it.
    pub(super) window: Window<P>,
    /// The processing-checkpoint hold of each group that took one (book: guarantees/commit-after-processing.md).
    pub(super) holds: HashMap<String, Arc<HoldCell>>,
    /// A committer is registered ([`Publisher::acknowledge_with`]).
    pub(super) has_committer: bool,
    /// The highest sequence a successful commit covered (issue 9, item 8).
    pub(super) committed: u64,
}

impl<P: Position> AckState<P> {
    pub(super) fn new() -> Self {
        AckState {
            window: Window::new(),
            holds: HashMap::new(),
            has_committer: false,
            committed: 0,
        }
    }
}

impl<T: Send + Sync + 'static, P: Position> Publisher<T, P> {
    /// Keeps what a consumer holds of the feed, for the source to decide where it
    /// resumes at start ([`mongoose_core::resume`]). A consumer of a many-file feed
    /// reports one position per lane: a report replaces the consumer's earlier report of
    /// the same kind and lane (and one that it holds nothing of the feed, or keeps no
    /// position), never its other lanes'; a report that its state holds nothing replaces
    /// all of its saved ones, and one that it keeps no position all of its reports.
    pub fn note_consumer_position(&self, position: mongoose_core::ConsumerPosition) {
        use mongoose_core::Held;
        let mut known = self.consumer_positions.lock();
        let lane = position.lane();
        known.retain(|earlier| {
            if earlier.consumer != position.consumer {
                return true;
            }
            match (position.held, earlier.held) {
                (Held::Nothing, _) => false,
                (_, Held::Nothing) => false,
                (Held::Saved(None), Held::Saved(_)) => false,
                (Held::Saved(Some(_)), Held::Saved(None)) => false,
                (Held::Saved(Some(_)), Held::Saved(Some(_)))
                | (Held::Written(_), Held::Written(_)) => earlier.lane() != lane,
                _ => true,
            }
        });
        known.push(position);
    }

    /// Takes a processing-checkpoint hold on `group`'s queue for this feed (book: guarantees/commit-after-processing.md).
    pub fn hold(&self, group: &str) -> ProcessingCheckpoint {
        let mut state = self.state.lock();
        let cell = match state.ack.holds.get(group) {
            Some(cell) => {
                cell.set_held(true);
                Arc::clone(cell)
            }
            None => {
                let cell = Arc::new(HoldCell::new());
                if let Some(binding) = state
                    .bindings
                    .iter_mut()
                    .find(|binding| &*binding.shared.group == group)
                {
                    cell.bind(Arc::clone(&binding.shared));
                    binding.hold = Some(Arc::clone(&cell));
                }
                state.ack.holds.insert(group.to_owned(), Arc::clone(&cell));
                cell
            }
        };
        ProcessingCheckpoint::new(cell)
    }

    /// After the groups drained: commits what they processed after the source stopped,
    /// for a committer that can ([`SourceCommitter::commits_after_stop`]).
    pub fn commit_processed_after_stop(&self) -> usize {
        let commits = self
            .committer
            .lock()
            .as_ref()
            .is_some_and(|c| c.commits_after_stop());
        if commits {
            self.poll_acknowledgements()
        } else {
            0
        }
    }

    /// Hands the committer what every queue processed and commits it ([`Publisher::poll_acknowledgements`]).
    pub(super) fn acknowledge_processed(&self) -> usize {
        let mut committer = self.committer.lock();
        let mut acknowledged = self.acknowledged_scratch.lock();
        acknowledged.clear();
        // the highest sequence handed to the committer, and whether a commit must cover
        // something (new acknowledgements, or a commit that failed before: retried on
        // every poll until it succeeds, at stop too; issue 9, item 8)
        let (count, handed, uncommitted) = {
            let mut state = self.state.lock();
            let mut done = u64::MAX;
            for binding in &state.bindings {
                done = done.min(binding.done_through());
            }
            state
                .retained
                .retain(|point| point.done_through() != u64::MAX);
            for point in &state.retained {
                done = done.min(point.done_through());
            }
            let count = state
                .ack
                .window
                .acknowledge_through(done, &mut acknowledged, |entry| self.check_forward(entry));
            let handed = state.ack.window.acknowledged();
            (count, handed, state.ack.committed < handed)
        };
        if let Some(committer) = committer.as_mut() {
            for entry in acknowledged.iter() {
                committer.acknowledged(entry.sequence, entry.epoch, entry.position);
            }
            if uncommitted {
                match committer.commit() {
                    Ok(()) => {
                        let mut state = self.state.lock();
                        state.ack.committed = state.ack.committed.max(handed);
                    }
                    Err(error) => {
                        error!(feed = %self.name, %error, "commit failed: retried on the next poll; until it succeeds the feed is not settled, and a restart re-delivers the items it covers");
                    }
                }
            }
        }
        count
    }

    /// Debug builds (invariant 1): within an epoch and lane what is handed to the
    /// committer (and so committed) never goes backwards; checked on every acknowledged
    /// entry, also those a run's last entry stands for.
    #[cfg(debug_assertions)]
    fn check_forward(&self, entry: &WindowEntry<P>) {
        let mut last = self.last_handed.lock();
        let position = entry.position.value();
        if let Some((epoch, offset)) = last.get(&position.lane) {
            debug_assert!(
                *epoch != entry.epoch || position.offset >= *offset,
                "invariant 1: feed '{}': position {position} acknowledged after {offset} in epoch {epoch}",
                self.name
            );
        }
        last.insert(position.lane, (entry.epoch, position.offset));
    }

    /// Release builds check nothing.
    #[cfg(not(debug_assertions))]
    #[inline(always)]
    fn check_forward(&self, _entry: &WindowEntry<P>) {}

    /// Registers the source's committer ([`Publisher::acknowledge_with`]).
    pub(super) fn register_committer(&self, committer: Box<dyn SourceCommitter<P>>) {
        *self.committer.lock() = Some(committer);
        let mut state = self.state.lock();
        state.positioned = true;
        state.ack.has_committer = true;
        // a new committer (a restarted source) starts from its own durable position:
        // what an earlier one failed to commit is read and published again
        state.ack.committed = state.ack.window.acknowledged();
    }

    /// The epoch of the positions published from now on ([`SourceOutput::set_epoch`](mongoose_core::SourceOutput::set_epoch)).
    pub(super) fn enter_epoch(&self, epoch: Epoch) {
        self.state.lock().epoch = epoch;
    }
}
