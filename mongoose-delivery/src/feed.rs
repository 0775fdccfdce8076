//! Building a feed: its name, queue capacity, overload policy and hooks.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use mongoose_core::{OverloadSettings, Position};

use crate::publisher::Publisher;
use mongoose_core::RetryPolicy;

/// The default capacity of a subscriber queue.
pub const DEFAULT_QUEUE_CAPACITY: usize = 1024;

/// A data mapper: turns a published item into the item the queues carry, or filters
/// it (`None`). It runs inside the publish: a publish into the same feed from it is
/// told to retry (`try_publish`) or deferred until the outer publish completes.
pub type DataMapper<T> = Box<dyn Fn(T) -> Option<T> + Send + Sync>;

/// Entry point for building a feed: `Feed::builder("lines").build()`.
#[derive(Debug)]
pub struct Feed<T, P = u64>(PhantomData<fn() -> (T, P)>);

impl<T: Send + Sync + 'static, P: Position> Feed<T, P> {
    /// Starts building a feed named `name`.
    pub fn builder(name: &str) -> FeedBuilder<T, P> {
        FeedBuilder {
            name: name.to_owned(),
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            overload: None,
            overrides: HashMap::new(),
            status_events: false,
            bounded: false,
            mapper: None,
            fan_out_clone: None,
            _types: PhantomData,
        }
    }
}

/// Options of a feed under construction.
pub struct FeedBuilder<T, P> {
    pub(crate) name: String,
    pub(crate) queue_capacity: usize,
    pub(crate) overload: Option<OverloadSettings>,
    pub(crate) overrides: HashMap<String, OverloadSettings>,
    pub(crate) status_events: bool,
    pub(crate) bounded: bool,
    pub(crate) mapper: Option<DataMapper<T>>,
    pub(crate) fan_out_clone: Option<fn(&T) -> T>,
    _types: PhantomData<fn() -> P>,
}

impl<T, P> std::fmt::Debug for FeedBuilder<T, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeedBuilder")
            .field("name", &self.name)
            .field("queue_capacity", &self.queue_capacity)
            .field("overload", &self.overload)
            .finish()
    }
}

impl<T: Clone + Send + Sync + 'static, P: Position> FeedBuilder<T, P> {
    /// Copies the item for each queue of a fan-out instead of sharing it behind one
    /// `Arc`: cheaper for small items (numbers, small structs), whose copies avoid a
    /// shared reference count per item.
    ///
    /// Without it a fan-out shares each item behind an `Arc` taken from a pool of one
    /// more than the largest queue, reused once every queue released it: no allocation
    /// per item, but an item is dropped when its pooled `Arc` is reused (on the
    /// publishing thread), not when the last queue releases it.
    pub fn clone_on_fan_out(mut self) -> Self {
        self.fan_out_clone = Some(T::clone);
        self
    }
}

impl<T: Send + Sync + 'static, P: Position> FeedBuilder<T, P> {
    /// The capacity of each subscriber queue (default 1,024).
    pub fn queue_capacity(mut self, capacity: usize) -> Self {
        self.queue_capacity = capacity.max(1);
        self
    }

    /// An explicit default overload policy (it wins over a source's PAUSE default).
    pub fn overload(mut self, settings: OverloadSettings) -> Self {
        self.overload = Some(settings);
        self
    }

    /// A per-group override (`overload.subscribers.<group>`).
    pub fn subscriber_overload(mut self, group: &str, settings: OverloadSettings) -> Self {
        self.overrides.insert(group.to_owned(), settings);
        self
    }

    /// Deliver feed status events in band, in order with the items.
    pub fn status_events(mut self, on: bool) -> Self {
        self.status_events = on;
        self
    }

    /// The source ends (a once read).
    pub fn bounded(mut self, bounded: bool) -> Self {
        self.bounded = bounded;
        self
    }

    /// A data mapper run on every item at publish.
    pub fn mapper(mut self, mapper: impl Fn(T) -> Option<T> + Send + Sync + 'static) -> Self {
        self.mapper = Some(Box::new(mapper));
        self
    }

    /// Builds the feed, checking the overload settings.
    ///
    /// By default an item offered to several queues is shared behind one `Arc` (never
    /// copied per queue); a single-subscriber feed moves it.
    pub fn try_build(self) -> Result<Arc<Publisher<T, P>>, crate::DeliveryError> {
        if let Some(settings) = &self.overload {
            settings.validate()?;
        }
        for settings in self.overrides.values() {
            settings.validate()?;
        }
        Ok(Arc::new(Publisher::from_builder(self)))
    }

    /// Builds the feed.
    ///
    /// # Panics
    /// When the overload settings are inconsistent; use [`FeedBuilder::try_build`] to
    /// get the error instead.
    pub fn build(self) -> Arc<Publisher<T, P>> {
        match self.try_build() {
            Ok(feed) => feed,
            Err(error) => panic!("{error}"),
        }
    }
}

/// Options of one subscription.
#[derive(Clone, Copy, Debug, Default)]
pub struct SubscribeOptions {
    /// The queue's capacity (default: the feed's).
    pub capacity: Option<usize>,
    /// The retry policy of the queue's reader.
    pub retry: RetryPolicy,
}
