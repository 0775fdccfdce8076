//! A group's binding to one feed, typed inside: its queue's reader and the handlers its
//! processors subscribed ([`GroupQueue`]), made by the feed, which knows the item type
//! ([`crate::AnyFeed::subscribe_group`]), and held by the group as a
//! [`mongoose_core::GroupReader`].

use std::fmt;

use mongoose_core::dispatch::OfferDispatch;
use mongoose_core::{ErasedHandler, GroupReader, ProcessorError, ProcessorId, Subscribers};

use crate::queue::SubscriptionId;
use crate::reader::QueueReader;

/// A group's reader of one feed's queue with its subscribers' typed handlers: each item
/// is offered to the group as a [`mongoose_core::Offer`].
pub struct GroupQueue<T> {
    reader: QueueReader<T>,
    subscribers: Subscribers<T>,
}

impl<T> fmt::Debug for GroupQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupQueue")
            .field("queue", &self.reader.queue_name())
            .field("subscribers", &self.subscribers)
            .finish()
    }
}

impl<T: Send + Sync + 'static> GroupQueue<T> {
    /// A group's binding over `reader`, with no subscriber yet.
    pub fn new(reader: QueueReader<T>) -> Self {
        GroupQueue {
            reader,
            subscribers: Subscribers::new(),
        }
    }
}

impl<T: Send + Sync + 'static> GroupReader for GroupQueue<T> {
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

    #[inline]
    fn poll(&mut self, dispatcher: &mut OfferDispatch<'_>, limit: usize) -> usize {
        let GroupQueue {
            reader,
            subscribers,
        } = self;
        reader.poll(&mut subscribers.dispatcher(dispatcher), limit)
    }

    fn set_fenced(&mut self, fenced: bool) {
        self.reader.set_fenced(fenced);
    }

    fn mark_dead(&mut self) {
        self.reader.mark_dead();
    }

    fn set_wakeup(&mut self, wakeup: std::sync::Arc<mongoose_core::Wakeup>) {
        self.reader.set_wakeup(wakeup);
    }
}

/// A group's subscription to a feed of any item type ([`crate::AnyFeed::subscribe_group`]).
pub struct GroupSubscription {
    /// Identifies the subscription, for [`crate::AnyFeed::unsubscribe`].
    pub id: SubscriptionId,
    /// The group's binding to the feed's queue: `Some` for the group's first
    /// subscription to the feed, `None` when the group already reads the queue.
    pub reader: Option<Box<dyn GroupReader>>,
    /// The group's queue, as the feed's status names it (`group/feed`).
    pub queue: String,
}

impl fmt::Debug for GroupSubscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupSubscription")
            .field("id", &self.id)
            .field("reader", &self.reader.is_some())
            .field("queue", &self.queue)
            .finish()
    }
}
