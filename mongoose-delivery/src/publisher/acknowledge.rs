//! Acknowledgement: what bounds the feed's acknowledgement point besides the queues'
//! dispatched counters (processing-checkpoint holds, consumers' saved positions), and
//! the commit of what was processed after the source stopped.

use std::sync::Arc;

use mongoose_core::{Position, SourceOutput};

use super::Publisher;
use crate::checkpoint::{HoldCell, ProcessingCheckpoint};

impl<T: Send + Sync + 'static, P: Position> Publisher<T, P> {
    /// Keeps a consumer's saved position (its latest report replaces an earlier one)
    /// for the source to reconcile with at start.
    pub fn note_saved_position(&self, position: mongoose_core::ConsumerPosition) {
        let mut saved = self.saved_positions.lock();
        saved.retain(|known| known.consumer != position.consumer);
        saved.push(position);
    }

    /// Takes a processing-checkpoint hold on `group`'s queue for this feed (§5).
    pub fn hold(&self, group: &str) -> ProcessingCheckpoint {
        let mut state = self.state.lock();
        let cell = match state.holds.get(group) {
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
                state.holds.insert(group.to_owned(), Arc::clone(&cell));
                cell
            }
        };
        ProcessingCheckpoint::new(cell)
    }

    /// After the groups drained: commits what they processed after the source stopped,
    /// for a committer that can ([`SourceCommitter::commits_after_stop`](mongoose_core::SourceCommitter::commits_after_stop)).
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
}
