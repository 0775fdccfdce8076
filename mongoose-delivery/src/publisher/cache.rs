//! The startup cache and deferred operations: what a source publishes before the
//! startup completed (and what a full PAUSE queue held back) is cached and published
//! in order later; what a data mapper does while the publish lock is held (a nested
//! publish, cache, filtered input or status) is deferred and replayed in order after
//! the item that caused it.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use mongoose_core::{Epoch, Position, SourceState};
use tracing::warn;

use super::{Publisher, State};

pub(super) enum Cached<T, P> {
    Positioned {
        item: T,
        epoch: Epoch,
        position: P,
    },
    Push(T),
    /// A positioned input that produced no item, recorded while items before it were
    /// cached: it enters the window only after them (issue 9, item 7).
    Filtered {
        epoch: Epoch,
        position: P,
    },
}

pub(super) enum Deferred<T, P> {
    Publish(T),
    Cache(T, P),
    Status(SourceState),
    Filtered(P),
}

/// The startup-cache part of the feed's state.
pub(super) struct CacheState<T, P> {
    /// What waits for the startup to complete (or for room in a PAUSE queue), in order.
    pub(super) items: VecDeque<Cached<T, P>>,
}

impl<T, P> CacheState<T, P> {
    pub(super) fn new() -> Self {
        CacheState {
            items: VecDeque::new(),
        }
    }
}

impl<T: Send + Sync + 'static, P: Position> Publisher<T, P> {
    /// The startup completed: cached items are published in order (pausing at a full
    /// PAUSE queue; [`Publisher::flush_paused`] resumes), then the status reported
    /// during startup.
    pub fn start_complete(&self) {
        let (mut state, _reservation) = self.reserve();
        state.started = true;
        self.flush(&mut state);
        self.drain_deferred(&mut state);
    }

    /// Publishes what the startup cache holds, in order; false when a full PAUSE queue
    /// (or another hold) stopped it.
    pub(super) fn flush(&self, state: &mut State<T, P>) -> bool {
        if !state.started {
            return false;
        }
        while let Some(front) = state.cache.items.front() {
            if matches!(front, Cached::Positioned { .. })
                && self.room_for_positioned(state).is_some()
            {
                Self::note_pause(state);
                return false;
            }
            let Some(cached) = state.cache.items.pop_front() else {
                break;
            };
            match cached {
                Cached::Positioned {
                    item,
                    epoch,
                    position,
                } => {
                    // room again: the pause (if any) ended
                    state.paused_now = false;
                    self.publish_positioned(state, item, epoch, position);
                    self.defer_to_front(state);
                }
                Cached::Push(item) => {
                    if let Some(item) = self.apply_mapper(state, item) {
                        self.deliver(state, item, None);
                    }
                    self.defer_to_front(state);
                }
                Cached::Filtered { epoch, position } => {
                    Self::window_filtered(state, epoch, position);
                }
            }
        }
        if state.events.startup_pending || state.events.waiting.is_some() {
            return self.offer_waiting_status(state);
        }
        true
    }

    /// Records a positioned input that produced no item. While the startup cache (or a
    /// replay a full queue paused) holds items published before it, it is cached behind
    /// them: in the window now it would be acknowledged ahead of them, and a commit of
    /// its position would pass items no consumer processed (issue 9, item 7).
    fn filter_locked(state: &mut State<T, P>, position: P) {
        state.positioned = true;
        state.counts.filtered += 1;
        let epoch = state.epoch;
        if !state.started || !state.cache.items.is_empty() {
            state
                .cache
                .items
                .push_back(Cached::Filtered { epoch, position });
            return;
        }
        Self::window_filtered(state, epoch, position);
    }

    /// Numbers a filtered input and puts it in the window: nothing holds it, so it is
    /// due with the items before it.
    fn window_filtered(state: &mut State<T, P>, epoch: Epoch, position: P) {
        state.sequence += 1;
        let sequence = state.sequence;
        state.ack.window.push(sequence, epoch, position, false);
    }

    pub(super) fn defer(&self, operation: Deferred<T, P>) {
        self.deferred.lock().push(operation);
        self.has_deferred.store(true, Ordering::Release);
    }

    /// What the mapper of a cached item deferred (a push publish, a positioned cache, a
    /// filtered input) goes to the front of the cache, in order: it follows the item
    /// that deferred it, before the next cached one, so positions stay in order
    /// (book: guarantees/commit-after-processing.md). Statuses are reported.
    fn defer_to_front(&self, state: &mut State<T, P>) {
        if !self.has_deferred.load(Ordering::Acquire) {
            return;
        }
        self.has_deferred.store(false, Ordering::Release);
        let deferred: Vec<Deferred<T, P>> = std::mem::take(&mut *self.deferred.lock());
        let epoch = state.epoch;
        for operation in deferred.into_iter().rev() {
            match operation {
                Deferred::Publish(item) => state.cache.items.push_front(Cached::Push(item)),
                Deferred::Cache(item, position) => {
                    state.positioned = true;
                    state.cache.items.push_front(Cached::Positioned {
                        item,
                        epoch,
                        position,
                    });
                }
                Deferred::Filtered(position) => {
                    state
                        .cache
                        .items
                        .push_front(Cached::Filtered { epoch, position });
                }
                Deferred::Status(status) => self.report_status(state, status),
            }
        }
    }

    pub(super) fn drain_deferred(&self, state: &mut State<T, P>) {
        if !self.has_deferred.load(Ordering::Acquire) {
            return;
        }
        loop {
            self.has_deferred.store(false, Ordering::Release);
            let deferred: Vec<Deferred<T, P>> = std::mem::take(&mut *self.deferred.lock());
            if deferred.is_empty() {
                return;
            }
            for operation in deferred {
                match operation {
                    Deferred::Publish(item) => self.publish_locked(state, item),
                    Deferred::Cache(item, position) => {
                        let epoch = state.epoch;
                        state.positioned = true;
                        state.cache.items.push_back(Cached::Positioned {
                            item,
                            epoch,
                            position,
                        });
                        self.flush(state);
                    }
                    Deferred::Status(status) => self.report_status(state, status),
                    Deferred::Filtered(position) => Self::filter_locked(state, position),
                }
            }
        }
    }

    /// Caches a positioned item, published in order with the cache ([`SourceOutput::cache`](mongoose_core::SourceOutput::cache)).
    pub(super) fn cache_at(&self, item: T, position: P) {
        if self.nested() {
            self.defer(Deferred::Cache(item, position));
            return;
        }
        let (mut state, _reservation) = self.reserve();
        state.positioned = true;
        let epoch = state.epoch;
        state.cache.items.push_back(Cached::Positioned {
            item,
            epoch,
            position,
        });
        self.flush(&mut state);
        self.drain_deferred(&mut state);
    }

    /// A positioned input that produced no item ([`SourceOutput::filtered`](mongoose_core::SourceOutput::filtered)).
    pub(super) fn filter_at(&self, position: P, reason: &str) {
        warn!(feed = %self.name, ?position, reason, "input filtered: no item published for it");
        if self.nested() {
            self.defer(Deferred::Filtered(position));
            return;
        }
        Self::filter_locked(&mut self.state.lock(), position);
    }

    /// Publishes what a full PAUSE queue held back ([`Publisher::flush_paused`]).
    pub(super) fn resume_paused(&self) -> bool {
        if self.nested() {
            return false;
        }
        let (mut state, _reservation) = self.reserve();
        let done = self.flush(&mut state);
        self.drain_deferred(&mut state);
        done
    }
}
