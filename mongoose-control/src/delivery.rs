//! The delivery engine as the groups' feed connector.
//!
//! [`DeliveryFeeds`] subscribes groups through a [`FeedRegistry`]. The registry's feeds
//! are erased over their item type, and the group only holds erased handlers, so the
//! connector needs to know each item type once: register feeds through
//! [`DeliveryFeeds::register`] (which records it), or name the type with
//! [`DeliveryFeeds::with_item_type`].

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Weak};

use mongoose_core::engine::PendingCompletion;
use mongoose_core::{Delivery, Position, ProcessorError, ProcessorId};
use mongoose_delivery::{
    AnyFeed, DeliveryError, DispatchOutcome, Dispatcher, FeedRegistry, OverloadChange, Publisher,
    QueueReader, SubscribeOptions, Subscription, SubscriptionId,
};
use parking_lot::{Mutex, RwLock};

use crate::audit::{ControlAudit, NewRecord, RecordType};

use crate::error::ControlError;
use crate::feeds::{
    DispatchResult, FeedBinding, FeedConnector, FeedDispatcher, FeedReader, PendingProbe,
    QueueProbe, SubscribeRequest,
};
use crate::host::HandlerCall;

type BindFn =
    fn(Box<dyn Any + Send>, Arc<dyn AnyFeed>, &str) -> Option<(u64, Option<Box<dyn FeedReader>>)>;

#[derive(Clone, Copy)]
struct Binder {
    bind: BindFn,
    invoke: HandlerCall,
}

/// A [`FeedConnector`] over the delivery engine's [`FeedRegistry`].
#[derive(Clone, Default)]
pub struct DeliveryFeeds {
    registry: FeedRegistry,
    binders: Arc<RwLock<HashMap<TypeId, Binder>>>,
    /// The (feed, group, audit) whose overload changes are already observed.
    observed: Arc<Mutex<Vec<Observed>>>,
}

struct Observed {
    feed: String,
    group: String,
    audit: Weak<ControlAudit>,
}

impl fmt::Debug for DeliveryFeeds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeliveryFeeds")
            .field("registry", &self.registry)
            .field("item_types", &self.binders.read().len())
            .finish()
    }
}

impl DeliveryFeeds {
    /// A connector over `registry`.
    pub fn new(registry: FeedRegistry) -> Self {
        DeliveryFeeds {
            registry,
            binders: Arc::default(),
            observed: Arc::default(),
        }
    }

    /// The registry.
    pub fn registry(&self) -> &FeedRegistry {
        &self.registry
    }

    /// Makes feeds of item type `T` subscribable by processors.
    pub fn with_item_type<T: Send + Sync + 'static>(self) -> Self {
        self.allow_item_type::<T>();
        self
    }

    /// Makes feeds of item type `T` subscribable by processors.
    pub fn allow_item_type<T: Send + Sync + 'static>(&self) {
        self.binders.write().insert(
            TypeId::of::<T>(),
            Binder {
                bind: bind::<T>,
                invoke: HandlerCall::of::<T>(),
            },
        );
    }

    /// Registers `feed` in the registry and makes its item type subscribable.
    ///
    /// # Errors
    /// [`DeliveryError::DuplicateFeed`].
    pub fn register<T: Send + Sync + 'static, P: Position>(
        &self,
        feed: Arc<Publisher<T, P>>,
    ) -> Result<(), DeliveryError> {
        self.allow_item_type::<T>();
        self.registry.register(feed)
    }
}

fn bind<T: Send + Sync + 'static>(
    boxed: Box<dyn Any + Send>,
    feed: Arc<dyn AnyFeed>,
    group: &str,
) -> Option<(u64, Option<Box<dyn FeedReader>>)> {
    let mut subscription = boxed.downcast::<Subscription<T>>().ok()?;
    let id = subscription.id().0;
    let reader = subscription.take_reader().map(|reader| {
        Box::new(DeliveryReader {
            reader,
            feed,
            group: group.to_owned(),
        }) as Box<dyn FeedReader>
    });
    Some((id, reader))
}

fn subscription_error(feed: &str, error: impl fmt::Display) -> ControlError {
    ControlError::Subscription {
        feed: feed.to_owned(),
        reason: error.to_string(),
    }
}

impl DeliveryFeeds {
    /// control-plane-contracts "Overload and loss": each overload state change of the
    /// group's queue writes an `OverloadState` record to the group's control audit
    /// (from the feed's thread, when it happens; the latch outlives an unsubscribe, so
    /// the observer stays while the audit lives). One observer per feed, group and
    /// audit.
    fn observe_overload(&self, feed: &dyn AnyFeed, group: &str, audit: &Arc<ControlAudit>) {
        let mut observed = self.observed.lock();
        observed.retain(|entry| entry.audit.strong_count() > 0);
        let known = observed.iter().any(|entry| {
            entry.feed == feed.name()
                && entry.group == group
                && Weak::ptr_eq(&entry.audit, &Arc::downgrade(audit))
        });
        if known {
            return;
        }
        observed.push(Observed {
            feed: feed.name().to_owned(),
            group: group.to_owned(),
            audit: Arc::downgrade(audit),
        });
        let watched = group.to_owned();
        let audit = Arc::downgrade(audit);
        feed.observe_overload(Arc::new(move |change: &OverloadChange| {
            let Some(audit) = audit.upgrade() else {
                return false;
            };
            if change.group == watched {
                audit.write(
                    NewRecord::new(RecordType::Fallback, None, "OverloadState")
                        .name(Some(&change.feed))
                        .transition(change.from.as_str(), change.to.as_str())
                        .reason(format!(
                            "feed {} queue {}/{}: {} -> {} ({})",
                            change.feed,
                            change.group,
                            change.feed,
                            change.from.as_str(),
                            change.to.as_str(),
                            change.cause
                        )),
                );
            }
            true
        }));
    }
}

impl FeedConnector for DeliveryFeeds {
    fn subscribe(&self, request: SubscribeRequest<'_>) -> Result<FeedBinding, ControlError> {
        let feed = self.registry.get(request.feed).ok_or_else(|| {
            subscription_error(
                request.feed,
                DeliveryError::NoSuchFeed(request.feed.to_owned()),
            )
        })?;
        FeedRegistry::check_type(&*feed, request.item_type, request.item_type_name)
            .map_err(|error| subscription_error(request.feed, error))?;
        let binder = self.binders.read().get(&request.item_type).copied().ok_or_else(|| {
            subscription_error(
                request.feed,
                format!(
                    "item type {} is not known to the control plane: register the feed through DeliveryFeeds::register, or call DeliveryFeeds::allow_item_type::<{}>()",
                    request.item_type_name, request.item_type_name
                ),
            )
        })?;
        let options = SubscribeOptions {
            capacity: None,
            retry: request.retry,
        };
        let boxed = feed
            .subscribe_any(request.group, options)
            .map_err(|error| subscription_error(request.feed, error))?;
        let Some((subscription, reader)) = (binder.bind)(boxed, Arc::clone(&feed), request.group)
        else {
            return Err(subscription_error(
                request.feed,
                "the feed returned a subscription of another item type",
            ));
        };
        if let Some(audit) = request.audit {
            self.observe_overload(&*feed, request.group, audit);
        }
        Ok(FeedBinding {
            subscription,
            reader,
            invoke: binder.invoke,
        })
    }

    fn unsubscribe(&self, feed: &str, subscription: u64) {
        if let Some(feed) = self.registry.get(feed) {
            feed.unsubscribe(SubscriptionId(subscription));
        }
    }

    fn report_saved_position(&self, feed: &str, position: mongoose_core::ConsumerPosition) {
        match self.registry.get(feed) {
            Some(feed) => feed.note_saved_position(position),
            None => {
                tracing::warn!(feed, consumer = %position.consumer, "a processor reported a saved position for a feed that does not exist")
            }
        }
    }
}

struct DeliveryReader<T> {
    reader: QueueReader<T>,
    feed: Arc<dyn AnyFeed>,
    group: String,
}

impl<T: Send + Sync + 'static> FeedReader for DeliveryReader<T> {
    fn poll(&mut self, dispatcher: &mut dyn FeedDispatcher, limit: usize) -> usize {
        self.reader
            .poll(&mut TypedDispatcher { inner: dispatcher }, limit)
    }

    fn set_fenced(&mut self, fenced: bool) {
        self.reader.set_fenced(fenced);
    }

    fn mark_dead(&mut self) {
        self.reader.mark_dead();
    }

    fn probe(&self) -> PendingProbe {
        Arc::new(DeliveryProbe {
            feed: Arc::clone(&self.feed),
            queue: self.reader.queue_name().to_owned(),
            group: self.group.clone(),
        })
    }
}

struct DeliveryProbe {
    feed: Arc<dyn AnyFeed>,
    queue: String,
    group: String,
}

impl QueueProbe for DeliveryProbe {
    fn pending(&self) -> usize {
        self.feed
            .status()
            .subscribers
            .iter()
            .find(|subscriber| subscriber.queue == self.queue)
            .map_or(0, |subscriber| {
                subscriber.position.saturating_sub(subscriber.dispatched) as usize
            })
    }

    fn overload_state(&self) -> Option<String> {
        self.feed
            .overload_states()
            .into_iter()
            .find(|(queue, _)| *queue == self.queue || *queue == self.group)
            .and_then(|(_, state)| serde_json::to_value(state).ok())
            .and_then(|value| value.as_str().map(str::to_owned))
    }
}

struct TypedDispatcher<'a> {
    inner: &'a mut dyn FeedDispatcher,
}

impl<T: 'static> Dispatcher<T> for TypedDispatcher<'_> {
    fn dispatch(&mut self, item: &T, attempt: u32) -> DispatchOutcome {
        match self.inner.dispatch(item, attempt) {
            DispatchResult::Done => DispatchOutcome::Done,
            DispatchResult::Failed { processor, retry } => {
                DispatchOutcome::Failed { processor, retry }
            }
        }
    }

    fn complete(
        &mut self,
        completion: PendingCompletion,
        delivery: &Delivery,
    ) -> Result<(), ProcessorError> {
        self.inner.complete(completion, delivery)
    }

    fn gave_up(&mut self, item: &T, processor: Option<ProcessorId>) {
        self.inner.gave_up(item, processor);
    }

    fn describe(&self, processor: ProcessorId) -> String {
        self.inner.describe(processor)
    }

    fn finished(&mut self, _item: &T) {
        self.inner.finished();
    }

    fn dropped(&mut self, run: &mongoose_delivery::DroppedRun) {
        self.inner.dropped(run);
    }
}
