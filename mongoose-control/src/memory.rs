//! In-memory feeds: a small [`FeedConnector`] for tests, examples and benchmarks that
//! need a group to read something without the delivery engine.
//!
//! Each group subscribed to a feed gets its own unbounded queue; a failed item that the
//! dispatcher asks to retry stays at the head and is offered again on a later poll.

use std::any::{Any, TypeId};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use mongoose_core::dispatch::OfferDispatch;
use mongoose_core::{
    DispatchOutcome, Dispatcher, ErasedHandler, GroupReader, ProcessorError, ProcessorId,
    RetryPolicy, Subscribers,
};

use crate::error::ControlError;
use crate::feeds::{FeedBinding, FeedConnector, PendingProbe, QueueProbe, SubscribeRequest};

struct GroupQueue {
    items: Mutex<VecDeque<Arc<dyn Any + Send + Sync>>>,
    fenced: AtomicBool,
    dead: AtomicBool,
    removed: AtomicBool,
    dispatched: AtomicU64,
}

struct FeedEntry {
    item_type: TypeId,
    item_type_name: &'static str,
    make_reader: fn(Arc<GroupQueue>, RetryPolicy) -> Box<dyn GroupReader>,
    queues: HashMap<String, (Arc<GroupQueue>, Vec<u64>)>,
}

#[derive(Default)]
struct Inner {
    feeds: HashMap<String, FeedEntry>,
    next_subscription: u64,
}

/// A registry of in-memory feeds.
#[derive(Clone, Default)]
pub struct MemoryFeeds {
    inner: Arc<Mutex<Inner>>,
}

impl fmt::Debug for MemoryFeeds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.inner.lock();
        f.debug_struct("MemoryFeeds")
            .field("feeds", &inner.feeds.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Publishes into one in-memory feed.
#[derive(Clone)]
pub struct MemoryPublisher<T> {
    feeds: MemoryFeeds,
    name: String,
    _items: std::marker::PhantomData<fn(T)>,
}

impl<T> fmt::Debug for MemoryPublisher<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryPublisher")
            .field("feed", &self.name)
            .finish()
    }
}

impl MemoryFeeds {
    /// Creates (or returns) the feed `name` of items `T`.
    pub fn feed<T: Send + Sync + 'static>(&self, name: &str) -> MemoryPublisher<T> {
        let mut inner = self.inner.lock();
        inner
            .feeds
            .entry(name.to_owned())
            .or_insert_with(|| FeedEntry {
                item_type: TypeId::of::<T>(),
                item_type_name: std::any::type_name::<T>(),
                make_reader: MemoryReader::<T>::boxed,
                queues: HashMap::new(),
            });
        MemoryPublisher {
            feeds: self.clone(),
            name: name.to_owned(),
            _items: std::marker::PhantomData,
        }
    }

    /// Items dispatched so far by `group`'s queue of `feed` (0 when none).
    pub fn dispatched(&self, feed: &str, group: &str) -> u64 {
        self.queue(feed, group)
            .map(|queue| queue.dispatched.load(Ordering::Acquire))
            .unwrap_or(0)
    }

    /// Whether `group`'s queue of `feed` is fenced.
    pub fn is_fenced(&self, feed: &str, group: &str) -> bool {
        self.queue(feed, group)
            .is_some_and(|queue| queue.fenced.load(Ordering::Acquire))
    }

    /// Live subscriptions of `group` to `feed`.
    pub fn subscriptions(&self, feed: &str, group: &str) -> usize {
        let inner = self.inner.lock();
        inner
            .feeds
            .get(feed)
            .and_then(|entry| entry.queues.get(group))
            .map(|(_, subscriptions)| subscriptions.len())
            .unwrap_or(0)
    }

    fn queue(&self, feed: &str, group: &str) -> Option<Arc<GroupQueue>> {
        let inner = self.inner.lock();
        inner
            .feeds
            .get(feed)
            .and_then(|entry| entry.queues.get(group))
            .map(|(queue, _)| Arc::clone(queue))
    }
}

impl<T: Send + Sync + 'static> MemoryPublisher<T> {
    /// Offers `item` to every subscribed group's queue.
    pub fn publish(&self, item: T) {
        let shared: Arc<dyn Any + Send + Sync> = Arc::new(item);
        let inner = self.feeds.inner.lock();
        if let Some(entry) = inner.feeds.get(&self.name) {
            for (queue, _) in entry.queues.values() {
                queue.items.lock().push_back(Arc::clone(&shared));
            }
        }
    }
}

impl FeedConnector for MemoryFeeds {
    fn subscribe(&self, request: SubscribeRequest<'_>) -> Result<FeedBinding, ControlError> {
        let mut inner = self.inner.lock();
        inner.next_subscription += 1;
        let subscription = inner.next_subscription;
        let Some(entry) = inner.feeds.get_mut(request.feed) else {
            return Err(ControlError::Subscription {
                feed: request.feed.to_owned(),
                reason: format!("no feed named '{}'", request.feed),
            });
        };
        if entry.item_type != request.item_type {
            return Err(ControlError::Subscription {
                feed: request.feed.to_owned(),
                reason: format!(
                    "feed '{}' carries {}, but the handler takes {}",
                    request.feed, entry.item_type_name, request.item_type_name
                ),
            });
        }
        let make_reader = entry.make_reader;
        let (queue, subscriptions) =
            entry
                .queues
                .entry(request.group.to_owned())
                .or_insert_with(|| {
                    (
                        Arc::new(GroupQueue {
                            items: Mutex::new(VecDeque::new()),
                            fenced: AtomicBool::new(false),
                            dead: AtomicBool::new(false),
                            removed: AtomicBool::new(false),
                            dispatched: AtomicU64::new(0),
                        }),
                        Vec::new(),
                    )
                });
        let first = subscriptions.is_empty();
        subscriptions.push(subscription);
        let reader = first.then(|| {
            (
                make_reader(Arc::clone(queue), request.retry),
                Arc::clone(queue) as PendingProbe,
            )
        });
        Ok(FeedBinding {
            subscription,
            reader,
        })
    }

    fn unsubscribe(&self, feed: &str, subscription: u64) {
        let mut inner = self.inner.lock();
        let Some(entry) = inner.feeds.get_mut(feed) else {
            return;
        };
        let mut emptied = None;
        for (group, (queue, subscriptions)) in entry.queues.iter_mut() {
            subscriptions.retain(|id| *id != subscription);
            if subscriptions.is_empty() {
                queue.removed.store(true, Ordering::Release);
                emptied = Some(group.clone());
            }
        }
        if let Some(group) = emptied {
            entry.queues.remove(&group);
        }
    }
}

impl QueueProbe for GroupQueue {
    fn pending(&self) -> usize {
        self.items.lock().len()
    }
}

struct MemoryReader<T> {
    queue: Arc<GroupQueue>,
    subscribers: Subscribers<T>,
    attempt: u32,
    not_before: Option<Instant>,
    policy: RetryPolicy,
}

impl<T: Send + Sync + 'static> MemoryReader<T> {
    fn boxed(queue: Arc<GroupQueue>, policy: RetryPolicy) -> Box<dyn GroupReader> {
        Box::new(MemoryReader::<T> {
            queue,
            subscribers: Subscribers::new(),
            attempt: 0,
            not_before: None,
            policy,
        })
    }
}

impl<T: Send + Sync + 'static> GroupReader for MemoryReader<T> {
    fn add(
        &mut self,
        processor: ProcessorId,
        handler: ErasedHandler,
    ) -> Result<(), ProcessorError> {
        self.subscribers.add(processor, handler)
    }

    fn remove(&mut self, processor: ProcessorId) -> bool {
        self.subscribers.remove(processor)
    }

    fn take_handlers(&mut self) -> Vec<(ProcessorId, ErasedHandler)> {
        self.subscribers.take()
    }

    fn handlers(&self) -> usize {
        self.subscribers.len()
    }

    fn poll(&mut self, dispatcher: &mut OfferDispatch<'_>, limit: usize) -> usize {
        let mut dispatcher = self.subscribers.dispatcher(dispatcher);
        let mut taken = 0;
        while taken < limit {
            if self.queue.fenced.load(Ordering::Acquire)
                || self.queue.dead.load(Ordering::Acquire)
                || self.queue.removed.load(Ordering::Acquire)
            {
                break;
            }
            if let Some(at) = self.not_before {
                if Instant::now() < at {
                    break;
                }
                self.not_before = None;
            }
            let Some(item) = self.queue.items.lock().front().cloned() else {
                break;
            };
            // the feed was made for Ts: every item is one
            let Some(item) = item.downcast_ref::<T>() else {
                self.queue.items.lock().pop_front();
                continue;
            };
            let outcome = dispatcher.dispatch(item, self.attempt);
            if let DispatchOutcome::Busy { .. } = outcome {
                self.attempt += 1;
                self.not_before = Some(Instant::now() + self.policy.initial_backoff);
                break;
            }
            if let DispatchOutcome::Failed {
                retry: true,
                processor,
            } = outcome
            {
                if self.attempt < self.policy.max_retries {
                    self.attempt += 1;
                    self.not_before = Some(Instant::now() + self.policy.backoff(self.attempt));
                    break;
                }
                dispatcher.gave_up(item, processor);
            }
            self.queue.items.lock().pop_front();
            self.attempt = 0;
            self.queue.dispatched.fetch_add(1, Ordering::AcqRel);
            taken += 1;
        }
        taken
    }

    fn set_fenced(&mut self, fenced: bool) {
        self.queue.fenced.store(fenced, Ordering::Release);
    }

    fn mark_dead(&mut self) {
        self.queue.dead.store(true, Ordering::Release);
    }
}
