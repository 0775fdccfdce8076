//! Publishing: the holds a positioned publish checks first, the batch fast path of a
//! lone queue, numbering an item and offering it to every queue (moved to a lone
//! queue, shared through a reused pool on a fan-out), and the push publish.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::{
    agent, BatchEnd, Epoch, FailureKind, OverloadPolicy, Position, PublishRefused, Refusal,
    TryPublish,
};

use super::{Cached, Deferred, Publisher, State};
use crate::queue::{Binding, Payload, QueueEntry};

/// Why a positioned publish cannot go ahead now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Hold {
    NoConsumer,
    Fenced,
    WindowFull,
    QueueFull,
    StatusWaiting,
    CacheWaiting,
}

/// How [`Publisher::publish_chunk`] ended.
enum ChunkEnd<T, P> {
    /// The fast path does not apply (or has no room): publish the next item the slow way.
    Unavailable,
    /// The chunk is full (or a fence went up): check the holds again.
    Full,
    /// The producer had nothing more.
    Exhausted,
    /// This item's production deferred an operation: it goes after it, the slow way.
    Deferred(T, P),
    /// The producer panicked (resumed once what was written is committed).
    Panicked(Box<dyn std::any::Any + Send>),
}

impl<T: Send + Sync + 'static, P: Position> Publisher<T, P> {
    /// The batch fast path of a feed with one queue and no data mapper: pulls items
    /// from `next` and writes their entries straight into the queue's ring, as many as
    /// the ring, the hold ring and the acknowledgement window have room for, checked
    /// once for the chunk. The caller checked [`Self::hold_reason`] first. Each item is
    /// numbered, held and windowed exactly as [`Self::deliver`] would; the fence is
    /// still checked before each item is pulled. An item whose production deferred an
    /// operation (a nested publish, a `filtered`) is handed back to go the slow way, after
    /// the deferred operation. A producer that panics leaves the items before it
    /// published, as the slow way does.
    fn publish_chunk(
        &self,
        state: &mut State<T, P>,
        next: &mut dyn FnMut() -> Option<(T, P)>,
    ) -> ChunkEnd<T, P> {
        if self.mapper.is_some() || state.bindings.len() != 1 {
            return ChunkEnd::Unavailable;
        }
        let State {
            bindings,
            ack,
            sequence,
            epoch,
            paused_now,
            ..
        } = state;
        let window = &mut ack.window;
        let binding = &mut bindings[0];
        if !binding.has_room() {
            return ChunkEnd::Unavailable;
        }
        let budget = (binding.known_free as u64)
            .min(binding.holds.room())
            .min(window.room() as u64) as usize;
        if budget == 0 {
            return ChunkEnd::Unavailable;
        }
        let Ok(chunk) = binding.producer.write_chunk_uninit(budget) else {
            return ChunkEnd::Unavailable;
        };
        let epoch = *epoch;
        let shared = &binding.shared;
        let holds = &mut binding.holds;
        let produced = &mut binding.produced;
        let mut end = ChunkEnd::Full;
        let entries = std::iter::from_fn(|| {
            if shared.fenced_or_dead() {
                return None;
            }
            // a panicking producer must not lose the items written before it: they
            // are committed to the ring and the panic goes on after that
            let pulled = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(&mut *next)) {
                Ok(pulled) => pulled,
                Err(panic) => {
                    end = ChunkEnd::Panicked(panic);
                    return None;
                }
            };
            let Some((item, position)) = pulled else {
                end = ChunkEnd::Exhausted;
                return None;
            };
            if self.has_deferred.load(Ordering::Acquire) {
                end = ChunkEnd::Deferred(item, position);
                return None;
            }
            *sequence += 1;
            if self.tap.is_attached() {
                let value = position.value();
                Self::offer_to_tap(
                    &self.tap,
                    self.tap_text.get(),
                    &item,
                    *sequence,
                    Some((epoch, value)),
                );
            }
            holds.set(*produced, *sequence);
            *produced += 1;
            window.push(*sequence, epoch, position, true);
            let position = position.value();
            Some(QueueEntry::Owned {
                item,
                sequence: *sequence,
                epoch,
                lane: position.lane,
                offset: position.offset,
            })
        });
        let written = chunk.fill_from_iter(entries);
        binding.known_free -= written;
        if binding.holds.wants_pruning() {
            binding.prune_holds();
        }
        if written > 0 {
            *paused_now = false;
        }
        if let ChunkEnd::Panicked(panic) = end {
            std::panic::resume_unwind(panic);
        }
        end
    }

    fn hold_reason(&self, state: &mut State<T, P>) -> Option<Hold> {
        if !state.cache.items.is_empty() {
            return Some(Hold::CacheWaiting);
        }
        if state.events.waiting.is_some() {
            return Some(Hold::StatusWaiting);
        }
        self.room_for_positioned(state)
    }

    pub(super) fn room_for_positioned(&self, state: &mut State<T, P>) -> Option<Hold> {
        if state.bindings.is_empty() {
            return Some(Hold::NoConsumer);
        }
        if state
            .bindings
            .iter()
            .any(|binding| binding.shared.fenced_or_dead())
        {
            return Some(Hold::Fenced);
        }
        if state.ack.window.is_full() {
            return Some(Hold::WindowFull);
        }
        let paused = state.paused_now;
        let full = state.bindings.iter_mut().any(|binding| {
            let needed = if paused { binding.resume_at } else { 1 };
            binding.settings.policy != OverloadPolicy::DropAfterSpin
                && !binding.has_room_for(needed)
        });
        full.then_some(Hold::QueueFull)
    }

    pub(super) fn note_pause(state: &mut State<T, P>) {
        if !state.paused_now {
            state.paused_now = true;
            state.counts.pauses += 1;
        }
    }

    pub(super) fn apply_mapper(&self, state: &mut State<T, P>, item: T) -> Option<T> {
        match &self.mapper {
            None => Some(item),
            Some(mapper) => {
                let mapped = mapper(item);
                if mapped.is_none() {
                    state.counts.filtered += 1;
                }
                mapped
            }
        }
    }

    /// Numbers the item and offers it to every queue. The caller checked that every
    /// PAUSE and BLOCK queue has room when `positioned`. Returns true when a queue took
    /// the item.
    pub(super) fn deliver(&self, state: &mut State<T, P>, item: T, position: Option<(Epoch, P)>) {
        state.sequence += 1;
        let sequence = state.sequence;
        if self.tap.is_attached() {
            let value = position
                .as_ref()
                .map(|(epoch, position)| (*epoch, position.value()));
            Self::offer_to_tap(&self.tap, self.tap_text.get(), &item, sequence, value);
        }
        if let (Some((epoch, position)), [binding]) = (position, state.bindings.as_mut_slice()) {
            // a positioned item for a lone queue with room: no fan-out, no loss to count
            if binding.has_room() {
                let value = position.value();
                let entry = QueueEntry::Owned {
                    item,
                    sequence,
                    epoch,
                    lane: value.lane,
                    offset: value.offset,
                };
                // free space only grows behind the publisher's back: the push succeeds
                binding
                    .push(entry, sequence)
                    .unwrap_or_else(|_| unreachable!("the ring had room"));
                state.ack.window.push(sequence, epoch, position, true);
                return;
            }
        }
        let mut entered = false;
        let targets = state.bindings.len();
        let mut shared_item: Option<Arc<T>> = None;
        let mut owned_item = Some(item);
        if targets > 1 && self.fan_out_clone.is_none() {
            shared_item = owned_item
                .take()
                .map(|item| Self::share(&mut state.shared_pool, item));
        }
        let entry_position = position.map(|(epoch, position)| (epoch, position.value()));
        let mut losses: Vec<(usize, bool)> = Vec::new();
        for index in 0..targets {
            let payload = match (&shared_item, self.fan_out_clone) {
                (Some(shared), _) => Payload::Shared(Arc::clone(shared)),
                (None, Some(clone)) if index + 1 < targets => match &owned_item {
                    Some(owned) => Payload::Owned(clone(owned)),
                    None => break,
                },
                (None, _) => match owned_item.take() {
                    Some(owned) => Payload::Owned(owned),
                    None => break,
                },
            };
            let entry = QueueEntry::item(payload, sequence, entry_position);
            let binding = &mut state.bindings[index];
            // a positioned publish checked the fences before it started (it pauses)
            if position.is_none() && binding.shared.fenced_or_dead() {
                // a push feed does not wait for a fenced or dead group: counted loss (#79)
                losses.push((index, false));
                continue;
            }
            let never_drop = binding.settings.policy.never_drops();
            let room = binding.has_room() || Self::spin_for_room(binding);
            if room && binding.push(entry, sequence).is_ok() {
                entered = true;
                continue;
            }
            // no room after the spin: a drop; on a never-drop policy it is a fallback
            // (a push publish into a full PAUSE queue, a BLOCK publish on an agent thread)
            losses.push((index, never_drop));
        }
        for (index, downgraded) in losses {
            self.count_drop(state, index, sequence, downgraded);
        }
        if let Some((epoch, position)) = position {
            state.ack.window.push(sequence, epoch, position, entered);
        }
        if let Some(shared) = shared_item {
            Self::keep_shared(state, shared);
        }
    }

    /// The shared item of a fan-out: the oldest pooled one when every queue has
    /// released it (the item it held is dropped here, on the publishing thread), else a
    /// new one. Once the pool holds one more item than the largest queue, the oldest
    /// is always released (no queue holds more than its capacity), so a fan-out
    /// allocates nothing per item, as the Java original's pooled references.
    fn share(pool: &mut VecDeque<Arc<T>>, item: T) -> Arc<T> {
        if let Some(front) = pool.front_mut() {
            if let Some(slot) = Arc::get_mut(front) {
                *slot = item;
                return pool.pop_front().expect("the front was just reused");
            }
        }
        Arc::new(item)
    }

    /// Keeps a fan-out's shared item for reuse, up to one more than the largest queue.
    fn keep_shared(state: &mut State<T, P>, shared: Arc<T>) {
        let largest = state
            .bindings
            .iter()
            .map(|binding| binding.producer.buffer().capacity())
            .max()
            .unwrap_or(0);
        if state.shared_pool.len() <= largest {
            state.shared_pool.push_back(shared);
        }
    }

    pub(super) fn spin_for_room(binding: &mut Binding<T>) -> bool {
        let bound = binding.settings.spin_bound;
        if bound.is_zero() {
            return false;
        }
        let started = Instant::now();
        loop {
            for _ in 0..64 {
                std::hint::spin_loop();
                if binding.has_room() {
                    return true;
                }
            }
            if started.elapsed() >= bound {
                return binding.has_room();
            }
            std::thread::yield_now();
        }
    }

    /// Runs the data mapper and publishes the item at its position, or records the
    /// position as filtered (nothing will hold it: it is due with the items before it).
    pub(super) fn publish_positioned(
        &self,
        state: &mut State<T, P>,
        item: T,
        epoch: Epoch,
        position: P,
    ) {
        match self.apply_mapper(state, item) {
            Some(item) => self.deliver(state, item, Some((epoch, position))),
            None => {
                state.sequence += 1;
                let sequence = state.sequence;
                state.ack.window.push(sequence, epoch, position, false);
            }
        }
    }

    /// A push publish with the lock held (never waits; BLOCK waiting is done by the
    /// caller before it locks).
    pub(super) fn publish_locked(&self, state: &mut State<T, P>, item: T) {
        if !state.started || !state.cache.items.is_empty() {
            state.cache.items.push_back(Cached::Push(item));
            self.flush(state);
            return;
        }
        if state.events.waiting.is_some() {
            self.offer_waiting_status(state);
        }
        if let Some(item) = self.apply_mapper(state, item) {
            self.deliver(state, item, None);
        }
    }

    /// A positioned publish ([`SourceOutput::try_publish`](mongoose_core::SourceOutput::try_publish)).
    pub(super) fn try_publish_at(&self, item: T, position: P) -> TryPublish<T> {
        if self.nested() {
            return TryPublish::Retry(item);
        }
        let (mut state, _reservation) = self.reserve();
        state.positioned = true;
        if !state.started {
            let epoch = state.epoch;
            state.cache.items.push_back(Cached::Positioned {
                item,
                epoch,
                position,
            });
            return TryPublish::Published;
        }
        if !state.cache.items.is_empty() || state.events.waiting.is_some() {
            self.flush(&mut state);
        }
        if self.hold_reason(&mut state).is_some() {
            Self::note_pause(&mut state);
            return TryPublish::Paused(item);
        }
        state.paused_now = false;
        let epoch = state.epoch;
        self.publish_positioned(&mut state, item, epoch, position);
        self.drain_deferred(&mut state);
        TryPublish::Published
    }

    /// A positioned batch publish ([`SourceOutput::try_publish_batch`](mongoose_core::SourceOutput::try_publish_batch)).
    pub(super) fn try_publish_from(
        &self,
        next: &mut dyn FnMut() -> Option<(T, P)>,
    ) -> BatchEnd<T, P> {
        if self.nested() {
            return match next() {
                Some((item, position)) => BatchEnd::Returned(item, position, Refusal::Retry),
                None => BatchEnd::Exhausted,
            };
        }
        let (mut state, _reservation) = self.reserve();
        state.positioned = true;
        if !state.started {
            while let Some((item, position)) = next() {
                let epoch = state.epoch;
                state.cache.items.push_back(Cached::Positioned {
                    item,
                    epoch,
                    position,
                });
            }
            return BatchEnd::Exhausted;
        }
        if !state.cache.items.is_empty() || state.events.waiting.is_some() {
            self.flush(&mut state);
        }
        loop {
            if self.hold_reason(&mut state).is_some() {
                Self::note_pause(&mut state);
                break BatchEnd::Paused;
            }
            let pulled = match self.publish_chunk(&mut state, next) {
                ChunkEnd::Unavailable => next(),
                ChunkEnd::Full => continue,
                ChunkEnd::Exhausted => None,
                ChunkEnd::Deferred(item, position) => Some((item, position)),
                ChunkEnd::Panicked(panic) => std::panic::resume_unwind(panic),
            };
            let Some((item, position)) = pulled else {
                // the feed has room and the source holds nothing: not paused, even if
                // an earlier batch ended "paused" after its last item filled a queue
                state.paused_now = false;
                self.drain_deferred(&mut state);
                break BatchEnd::Exhausted;
            };
            // what the producer did while producing this item (a nested `filtered`, a
            // push publish) happened before it: it goes first, in order
            self.drain_deferred(&mut state);
            if self.hold_reason(&mut state).is_some() {
                Self::note_pause(&mut state);
                break BatchEnd::Returned(item, position, Refusal::Paused);
            }
            state.paused_now = false;
            let epoch = state.epoch;
            self.publish_positioned(&mut state, item, epoch, position);
            self.drain_deferred(&mut state);
        }
    }

    /// A push publish, waiting for a full BLOCK queue off agent threads ([`SourceOutput::publish`](mongoose_core::SourceOutput::publish)).
    pub(super) fn publish_push(&self, item: T) -> Result<(), PublishRefused> {
        if self.nested() {
            self.defer(Deferred::Publish(item));
            return Ok(());
        }
        let on_agent = agent::is_agent_thread();
        let started_waiting = Instant::now();
        loop {
            let (mut state, _reservation) = self.reserve();
            let blocked = if on_agent || !state.started {
                None
            } else {
                Self::blocking_queue_without_room(&state)
            };
            match blocked {
                None => {
                    // on an agent thread a full BLOCK queue drops after the spin, counted
                    // as dropped and downgraded: an agent thread never waits
                    self.publish_locked(&mut state, item);
                    self.drain_deferred(&mut state);
                    return Ok(());
                }
                Some(queue) => {
                    if state.stopping {
                        let reason = format!("server is stopping; queue {queue} had no room");
                        return Err(self.refuse(&mut state, FailureKind::RefusedState, reason));
                    }
                    let deadline = Self::blocking_deadline(&state).unwrap_or_default();
                    if started_waiting.elapsed() >= deadline {
                        let reason = format!(
                            "queue {queue} had no room within {} ms",
                            deadline.as_millis()
                        );
                        return Err(self.refuse(&mut state, FailureKind::RefusedDeadline, reason));
                    }
                }
            }
            // wait for room without holding the publish lock
            drop(state);
            debug_assert!(
                !on_agent,
                "invariant 3: feed '{}': an agent thread waits for room in a full queue",
                self.name
            );
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}
