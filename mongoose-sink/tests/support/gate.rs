//! A commit gate that notes what it is told, for the runner's and the writers' tests.

use mongoose_core::sink::CommitGate;
use parking_lot::Mutex;

/// Notes every tag pending, completed and held.
#[derive(Default)]
pub struct Gate {
    pub pending: Mutex<Vec<u64>>,
    pub completed: Mutex<Vec<u64>>,
    pub held: Mutex<Vec<(u64, String)>>,
}

impl CommitGate for Gate {
    fn pending(&self, tag: u64) {
        self.pending.lock().push(tag);
    }
    fn complete(&self, tag: u64) {
        self.completed.lock().push(tag);
    }
    fn complete_through(&self, tag: u64) {
        // every pending tag up to `tag` not completed yet (a real gate forgets a tag
        // once it is complete, so none is completed twice)
        let pending = self.pending.lock().clone();
        let mut completed = self.completed.lock();
        let fresh: Vec<u64> = pending
            .into_iter()
            .filter(|pending| *pending <= tag && !completed.contains(pending))
            .collect();
        completed.extend(fresh);
    }
    fn held(&self, tag: u64, reason: &str) {
        self.held.lock().push((tag, reason.to_owned()));
    }
}
