//! The delivery engine as the groups' feed connector.
//!
//! [`DeliveryFeeds`] subscribes groups through a [`FeedRegistry`]. Each feed knows its
//! item type and makes the group's typed binding to its queue itself
//! ([`AnyFeed::subscribe_group`]), so any feed in the registry can be subscribed to.

use std::fmt;
use std::sync::{Arc, Weak};

use mongoose_core::Position;
use mongoose_delivery::{
    AnyFeed, DeliveryError, FeedRegistry, OverloadChange, Publisher, SubscribeOptions,
    SubscriptionId,
};
use parking_lot::Mutex;

use mongoose_audit::{ControlAudit, NewRecord, RecordType};

use crate::error::ControlError;
use crate::feeds::{FeedBinding, FeedConnector, PendingProbe, QueueProbe, SubscribeRequest};

/// A [`FeedConnector`] over the delivery engine's [`FeedRegistry`].
#[derive(Clone, Default)]
pub struct DeliveryFeeds {
    registry: FeedRegistry,
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
            .finish()
    }
}

impl DeliveryFeeds {
    /// A connector over `registry`.
    pub fn new(registry: FeedRegistry) -> Self {
        DeliveryFeeds {
            registry,
            observed: Arc::default(),
        }
    }

    /// The registry.
    pub fn registry(&self) -> &FeedRegistry {
        &self.registry
    }

    /// Removes the feed `name` from the registry (a feed a configuration reload
    /// removed), and forgets which of its overload changes were observed, so a feed
    /// registered again under the name is observed again.
    pub fn unregister(&self, name: &str) -> Option<Arc<dyn AnyFeed>> {
        self.observed.lock().retain(|entry| entry.feed != name);
        self.registry.unregister(name)
    }

    /// Registers `feed` in the registry.
    ///
    /// # Errors
    /// [`DeliveryError::DuplicateFeed`].
    pub fn register<T: Send + Sync + 'static, P: Position>(
        &self,
        feed: Arc<Publisher<T, P>>,
    ) -> Result<(), DeliveryError> {
        self.registry.register(feed)
    }
}

fn subscription_error(feed: &str, error: impl fmt::Display) -> ControlError {
    ControlError::Subscription {
        feed: feed.to_owned(),
        reason: error.to_string(),
    }
}

impl DeliveryFeeds {
    /// book: guarantees/control-plane.md: each overload state change of the
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
        let options = SubscribeOptions {
            capacity: None,
            retry: request.retry,
        };
        let subscription = feed
            .subscribe_group(request.group, options)
            .map_err(|error| subscription_error(request.feed, error))?;
        if let Some(audit) = request.audit {
            self.observe_overload(&*feed, request.group, audit);
        }
        let probe = Arc::new(DeliveryProbe {
            feed: Arc::clone(&feed),
            queue: subscription.queue,
            group: request.group.to_owned(),
        }) as PendingProbe;
        Ok(FeedBinding {
            subscription: subscription.id.0,
            reader: subscription.reader.map(|reader| (reader, probe)),
        })
    }

    fn unsubscribe(&self, feed: &str, subscription: u64) {
        if let Some(feed) = self.registry.get(feed) {
            feed.unsubscribe(SubscriptionId(subscription));
        }
    }

    fn report_consumer_position(&self, feed: &str, position: mongoose_core::ConsumerPosition) {
        match self.registry.get(feed) {
            Some(feed) => feed.note_consumer_position(position),
            None => {
                tracing::warn!(feed, consumer = %position.consumer, "a processor reported what it holds of a feed that does not exist")
            }
        }
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
