//! Subscriptions: a group's queue is created by its first subscription and shared by
//! the later ones; removing the last one retires the queue, keeping what it was given
//! and did not process as a retained point until a restart or an operator
//! [`Publisher::release`].

use std::sync::atomic::Ordering;
use std::sync::Arc;

use mongoose_core::Position;
use tracing::{info, warn};

use super::{Publisher, State};
use crate::error::DeliveryError;
use crate::feed::SubscribeOptions;
use crate::queue::{
    Binding, HoldRing, OverloadState, QueueId, QueueShared, RetainedPoint, SubscriptionId,
};
use crate::reader::QueueReader;

/// What an operator release gave up ([`Publisher::release`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Released {
    /// Items given up: counted in the feed's `dropped`.
    pub items: u64,
    /// The queues whose hold was released (or whose dead group's queue was removed).
    pub queues: Vec<String>,
}

/// A subscription to a feed. The first subscription of a group creates the group's
/// queue and carries its reader; later ones share the queue.
#[derive(Debug)]
pub struct Subscription<T> {
    id: SubscriptionId,
    queue: QueueId,
    reader: Option<QueueReader<T>>,
}

impl<T> Subscription<T> {
    /// The subscription's id, for [`Publisher::unsubscribe`].
    pub fn id(&self) -> SubscriptionId {
        self.id
    }

    /// The queue this subscription reads.
    pub fn queue(&self) -> QueueId {
        self.queue
    }

    /// The queue's reader, for the first subscription of a group.
    pub fn take_reader(&mut self) -> Option<QueueReader<T>> {
        self.reader.take()
    }
}

impl<T: Send + Sync + 'static, P: Position> Publisher<T, P> {
    /// Subscribes `group` to the feed. The group's first subscription creates its
    /// queue and carries the reader; later ones share it (counted, so one leaving does
    /// not remove the queue while another still reads it).
    pub fn subscribe(
        &self,
        group: &str,
        options: SubscribeOptions,
    ) -> Result<Subscription<T>, crate::DeliveryError> {
        let mut state = self.state.lock();
        if state.stopping {
            return Err(crate::DeliveryError::Stopping(self.name.to_string()));
        }
        let id = SubscriptionId(state.next_id);
        state.next_id += 1;
        if let Some(binding) = state
            .bindings
            .iter_mut()
            .find(|binding| &*binding.shared.group == group)
        {
            binding.subscriptions.push(id);
            return Ok(Subscription {
                id,
                queue: binding.shared.id,
                reader: None,
            });
        }
        let queue = QueueId(state.next_id);
        state.next_id += 1;
        let capacity = options.capacity.unwrap_or(self.queue_capacity).max(1);
        let (producer, consumer) = rtrb::RingBuffer::new(capacity);
        let queue_name: Arc<str> = Arc::from(format!("{group}/{}", self.name).as_str());
        let shared = Arc::new(QueueShared::new(queue, queue_name, Arc::from(group)));
        let _ = shared.producer_wakeup.set(Arc::clone(&self.source_wakeup));
        let hold = state.ack.holds.get(group).cloned();
        if let Some(hold) = &hold {
            hold.bind(Arc::clone(&shared));
        }
        let (settings, explicit) = Self::effective_settings(&state, group);
        let health = state.overload.health.entry(group.to_owned()).or_default();
        if health.state == OverloadState::Removed {
            health.state = OverloadState::Latched;
            self.overload_changed(
                group,
                OverloadState::Removed,
                OverloadState::Latched,
                "re-added",
            );
        }
        let announced = explicit || state.overload.default_decided;
        state.bindings.push(Binding {
            shared: Arc::clone(&shared),
            producer,
            produced: 0,
            known_free: capacity,
            resume_at: (capacity / 8).clamp(1, 256),
            holds: HoldRing::new(capacity),
            settings,
            explicit,
            subscriptions: vec![id],
            hold,
            dropped: 0,
            refused: 0,
            first_drop: None,
            announced,
        });
        if announced {
            info!(feed = %self.name, queue = %shared.name, policy = %settings.policy, "subscribed");
        }
        let reader = QueueReader::new(consumer, shared, Arc::from(&*self.name), options.retry);
        Ok(Subscription {
            id,
            queue,
            reader: Some(reader),
        })
    }

    /// Ends a subscription. Repeating it changes nothing. When the queue's last
    /// subscription leaves, the queue is removed: what it was given and did not process
    /// keeps the feed's acknowledgement point (a retained point) for the rest of the run
    /// or until [`Publisher::release`].
    pub fn unsubscribe(&self, subscription: SubscriptionId) {
        let mut state = self.state.lock();
        let Some(index) = state
            .bindings
            .iter()
            .position(|binding| binding.subscriptions.contains(&subscription))
        else {
            return;
        };
        state.bindings[index]
            .subscriptions
            .retain(|id| *id != subscription);
        if state.bindings[index].subscriptions.is_empty() {
            let binding = state.bindings.remove(index);
            self.retire(&mut state, binding, &self.name);
        }
    }

    /// Removes every subscription of `group` (the group closed or was restarted).
    pub fn remove_group(&self, group: &str) {
        let mut state = self.state.lock();
        if let Some(index) = state
            .bindings
            .iter()
            .position(|binding| &*binding.shared.group == group)
        {
            let binding = state.bindings.remove(index);
            self.retire(&mut state, binding, &self.name);
        }
    }

    fn retire(&self, state: &mut State<T, P>, binding: Binding<T>, feed: &str) {
        binding.shared.closed.store(true, Ordering::Release);
        if state.bindings.len() < 2 {
            // no fan-out any more: the pooled items it kept for reuse can go
            state.shared_pool.clear();
        }
        let durable = binding
            .hold
            .as_ref()
            .map_or(u64::MAX, |hold| hold.durable_for(binding.shared.id));
        if let Some(hold) = &binding.hold {
            hold.unbind(binding.shared.id);
        }
        if let Some(health) = state.overload.health.get_mut(&*binding.shared.group) {
            if health.state == OverloadState::Latched {
                health.state = OverloadState::Removed;
                health.latched_while_removed = true;
                self.overload_changed(
                    &binding.shared.group,
                    OverloadState::Latched,
                    OverloadState::Removed,
                    "unsubscribed",
                );
            }
        }
        state.counts.completion_failures_of_removed +=
            binding.shared.completion_failures.load(Ordering::Acquire);
        let retained = RetainedPoint {
            shared: Arc::clone(&binding.shared),
            produced: binding.produced,
            holds: binding.holds,
            durable,
        };
        if retained.done_through() == u64::MAX {
            info!(feed, queue = %binding.shared.name, "consumer removed with nothing unprocessed");
        } else {
            warn!(
                feed,
                queue = %binding.shared.name,
                backlog = retained.backlog(),
                "consumer removed with unprocessed items: the feed holds its position before them until a restart or an operator release"
            );
            state.retained.push(retained);
        }
    }

    /// The operator release of a held position (book: guarantees/commit-after-processing.md), accepting the
    /// loss of what was held: the retained points of removed consumers, the holds of
    /// live queues whose processor was quarantined or whose completion failed, and the
    /// queues of fenced or dead groups (removed from the feed). All of them, or those
    /// of the queue named. The released items are counted in `dropped`, so the feed is
    /// no longer lossless.
    ///
    /// # Errors
    /// [`DeliveryError::NoSuchQueue`] when `queue` names no queue of the feed.
    pub fn release(&self, queue: Option<&str>) -> Result<Released, DeliveryError> {
        let mut state = self.state.lock();
        if let Some(name) = queue {
            let known = state
                .bindings
                .iter()
                .map(|binding| &binding.shared.name)
                .chain(state.retained.iter().map(|point| &point.shared.name))
                .any(|queue| &**queue == name);
            if !known {
                let mut names: Vec<String> = state
                    .bindings
                    .iter()
                    .map(|binding| binding.shared.name.to_string())
                    .chain(
                        state
                            .retained
                            .iter()
                            .map(|point| point.shared.name.to_string()),
                    )
                    .collect();
                names.dedup();
                return Err(DeliveryError::NoSuchQueue {
                    feed: self.name.to_string(),
                    queue: name.to_owned(),
                    known: if names.is_empty() {
                        "none".to_owned()
                    } else {
                        names.join(", ")
                    },
                });
            }
        }
        let selected = |shared: &QueueShared| queue.is_none_or(|name| &*shared.name == name);
        let mut released = Released::default();
        state.retained.retain(|point| {
            if !selected(&point.shared) {
                return true;
            }
            released.items += point.backlog();
            released.queues.push(point.shared.name.to_string());
            false
        });
        // live queues: a dead or fenced group's queue goes (its reader never reads
        // again); a hold left by a quarantine or a failed completion is forgotten
        let mut index = 0;
        while index < state.bindings.len() {
            let binding = &state.bindings[index];
            if !selected(&binding.shared) {
                index += 1;
                continue;
            }
            if binding.shared.fenced_or_dead() {
                let binding = state.bindings.remove(index);
                let backlog = binding.produced.saturating_sub(binding.shared.dispatched());
                binding.shared.closed.store(true, Ordering::Release);
                if let Some(hold) = &binding.hold {
                    hold.unbind(binding.shared.id);
                }
                state.counts.completion_failures_of_removed +=
                    binding.shared.completion_failures.load(Ordering::Acquire);
                released.items += backlog;
                released.queues.push(binding.shared.name.to_string());
                continue;
            }
            if let Some(from) = binding.shared.release_hold() {
                released.items += binding.produced.saturating_sub(from);
                released.queues.push(binding.shared.name.to_string());
                // what participants hold (an output never published) is given up too
                if let Some(hold) = &binding.hold {
                    hold.release_participants();
                }
            }
            index += 1;
        }
        state.counts.dropped += released.items;
        if released.items > 0 || !released.queues.is_empty() {
            warn!(feed = %self.name, released = released.items, queues = ?released.queues, "operator released a held position: the held backlog is given up and counted as dropped (the feed is no longer lossless)");
        }
        Ok(released)
    }
}
