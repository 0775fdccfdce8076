//! Waking the threads of a flow: the feed's source parked on a full queue (its wakeup
//! is the feed's, given to every queue's reader, which wakes it after a poll that made
//! room) and the groups' threads parked on an empty queue (each reader's wakeup is its
//! group's, woken by the source driver after a duty cycle that published).

use std::sync::Arc;

use mongoose_core::{Position, Wakeup};

use super::Publisher;

impl<T: Send + Sync + 'static, P: Position> Publisher<T, P> {
    /// What wakes the feed's source thread when its driver parked it: the source
    /// driver's idler parks with it; every queue's reader wakes it after a poll that
    /// made room.
    pub fn source_wakeup(&self) -> Arc<Wakeup> {
        Arc::clone(&self.source_wakeup)
    }

    /// Wakes the threads of the queues' readers that are parked (one load each for one
    /// that is not): the source driver calls it after a duty cycle that published.
    pub fn wake_consumers(&self) {
        let state = self.state.lock();
        for binding in &state.bindings {
            if let Some(wakeup) = binding.shared.consumer_wakeup.get() {
                wakeup.wake();
            }
        }
    }
}

impl<T: Send + Sync + 'static, P: Position> Publisher<T, P> {
    /// True when nothing the source published waits (no item cached or paused, none
    /// unacknowledged, no commit owed): the source driver may then park its thread
    /// deeply, since what comes next is new input, which the source itself announces.
    pub fn nothing_in_flight(&self) -> bool {
        let state = self.state.lock();
        state.started
            && state.cache.items.is_empty()
            && state.ack.window.len() == 0
            && state.ack.committed >= state.ack.window.acknowledged()
    }
}
