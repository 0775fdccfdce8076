//! A registry of feeds of any item type, for the control plane and the server.

use std::any::TypeId;
use std::collections::BTreeMap;
use std::sync::Arc;

use mongoose_core::{GroupReader, OverloadSettings, Position, SourceOutput, SourceState};
use parking_lot::RwLock;

use crate::checkpoint::ProcessingCheckpoint;
use crate::driver::DrivenOutput;
use crate::feed::SubscribeOptions;
use crate::group::{GroupQueue, GroupSubscription};
use crate::publisher::Publisher;
use crate::queue::{OverloadObserver, OverloadState, SubscriptionId};
use crate::status::{FeedStatus, StatusReport};
use crate::DeliveryError;

/// A feed seen without its item and position types; the [`crate::SourceDriver`] polls
/// its acknowledgements and replays its paused items ([`DrivenOutput`]).
pub trait AnyFeed: DrivenOutput + Send + Sync {
    /// The feed's name.
    fn name(&self) -> &str;
    /// The item type's id.
    fn item_type(&self) -> TypeId;
    /// The item type's name.
    fn item_type_name(&self) -> &'static str;
    /// Subscribes `group`: its first subscription to the feed carries the group's
    /// binding to its queue ([`GroupQueue`]), typed inside, erased here.
    fn subscribe_group(
        &self,
        group: &str,
        options: SubscribeOptions,
    ) -> Result<GroupSubscription, DeliveryError>;
    /// Ends a subscription.
    fn unsubscribe(&self, subscription: SubscriptionId);
    /// Removes a group's queue.
    fn remove_group(&self, group: &str);
    /// The feed's status.
    fn status(&self) -> FeedStatus;
    /// A checkpoint hold on a group's queue.
    fn hold(&self, group: &str) -> ProcessingCheckpoint;
    /// Loss records of earlier runs found at this start ([`Publisher::note_earlier_losses`]).
    fn note_earlier_losses(&self, records: u64);
    /// Keeps what a consumer holds of the feed, for the feed's source to decide where it
    /// resumes at start ([`mongoose_core::SourceOutput::consumer_positions`]).
    fn note_consumer_position(&self, position: mongoose_core::ConsumerPosition);
    /// The operator release of a held position.
    ///
    /// # Errors
    /// [`crate::DeliveryError::NoSuchQueue`] when `queue` names no queue of the feed.
    fn release(&self, queue: Option<&str>) -> Result<crate::Released, crate::DeliveryError>;
    /// Clears overload latches.
    fn clear_overload(&self);
    /// Takes new overload bounds ([`Publisher::retune_overload`]).
    fn retune_overload(
        &self,
        default: Option<OverloadSettings>,
        overrides: std::collections::HashMap<String, OverloadSettings>,
    );
    /// Overload states per group queue.
    fn overload_states(&self) -> Vec<(String, OverloadState)>;
    /// Adds an observer of overload state changes ([`Publisher::observe_overload`]).
    fn observe_overload(&self, observer: OverloadObserver);
    /// The server began to stop.
    fn begin_stop(&self);
    /// The startup completed.
    fn start_complete(&self);
    /// Commits what the groups processed after the source stopped.
    fn commit_processed_after_stop(&self) -> usize;
    /// The feed has a source that is starting: it is BEHIND (not a silent fallback
    /// feed) until the source reports.
    fn report_source_starting(&self);
    /// Attaches an operator's tap of the published items ([`Publisher::attach_tap`]).
    fn attach_tap(&self, capacity: usize) -> Option<mongoose_core::tap::TapReceiver>;
}

impl<T: Send + Sync + 'static, P: Position> AnyFeed for Publisher<T, P> {
    fn name(&self) -> &str {
        Publisher::name(self)
    }
    fn item_type(&self) -> TypeId {
        TypeId::of::<T>()
    }
    fn item_type_name(&self) -> &'static str {
        std::any::type_name::<T>()
    }
    fn subscribe_group(
        &self,
        group: &str,
        options: SubscribeOptions,
    ) -> Result<GroupSubscription, DeliveryError> {
        let mut subscription = self.subscribe(group, options)?;
        let Some(reader) = subscription.take_reader() else {
            return Ok(GroupSubscription {
                id: subscription.id(),
                reader: None,
                queue: format!("{group}/{}", Publisher::name(self)),
            });
        };
        let queue = reader.queue_name().to_owned();
        Ok(GroupSubscription {
            id: subscription.id(),
            reader: Some(Box::new(GroupQueue::new(reader)) as Box<dyn GroupReader>),
            queue,
        })
    }
    fn unsubscribe(&self, subscription: SubscriptionId) {
        Publisher::unsubscribe(self, subscription)
    }
    fn remove_group(&self, group: &str) {
        Publisher::remove_group(self, group)
    }
    fn status(&self) -> FeedStatus {
        Publisher::status(self)
    }
    fn hold(&self, group: &str) -> ProcessingCheckpoint {
        Publisher::hold(self, group)
    }
    fn note_earlier_losses(&self, records: u64) {
        Publisher::note_earlier_losses(self, records);
    }
    fn note_consumer_position(&self, position: mongoose_core::ConsumerPosition) {
        Publisher::note_consumer_position(self, position);
    }
    fn release(&self, queue: Option<&str>) -> Result<crate::Released, crate::DeliveryError> {
        Publisher::release(self, queue)
    }
    fn clear_overload(&self) {
        Publisher::clear_overload(self)
    }
    fn retune_overload(
        &self,
        default: Option<OverloadSettings>,
        overrides: std::collections::HashMap<String, OverloadSettings>,
    ) {
        Publisher::retune_overload(self, default, overrides)
    }
    fn overload_states(&self) -> Vec<(String, OverloadState)> {
        Publisher::overload_states(self)
    }
    fn observe_overload(&self, observer: OverloadObserver) {
        Publisher::observe_overload(self, observer);
    }
    fn begin_stop(&self) {
        Publisher::begin_stop(self)
    }
    fn start_complete(&self) {
        Publisher::start_complete(self)
    }
    fn commit_processed_after_stop(&self) -> usize {
        Publisher::commit_processed_after_stop(self)
    }
    fn report_source_starting(&self) {
        SourceOutput::report_state(self, SourceState::Behind, Some("source starting"));
    }
    fn attach_tap(&self, capacity: usize) -> Option<mongoose_core::tap::TapReceiver> {
        Publisher::attach_tap(self, capacity)
    }
}

/// Feeds by name, of any item type.
#[derive(Default, Clone)]
pub struct FeedRegistry {
    feeds: Arc<RwLock<BTreeMap<String, Arc<dyn AnyFeed>>>>,
}

impl std::fmt::Debug for FeedRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.feeds.read().keys()).finish()
    }
}

impl FeedRegistry {
    /// Registers a feed under its name.
    pub fn register(&self, feed: Arc<dyn AnyFeed>) -> Result<(), DeliveryError> {
        let mut feeds = self.feeds.write();
        let name = feed.name().to_owned();
        if feeds.contains_key(&name) {
            return Err(DeliveryError::DuplicateFeed(name));
        }
        feeds.insert(name, feed);
        Ok(())
    }

    /// Removes the feed named `name` from the registry (a feed a configuration reload
    /// removed, once its source stopped and its processed position was committed) and
    /// returns it; `None` when there is none.
    pub fn unregister(&self, name: &str) -> Option<Arc<dyn AnyFeed>> {
        self.feeds.write().remove(name)
    }

    /// The feed named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn AnyFeed>> {
        self.feeds.read().get(name).cloned()
    }

    /// Every feed, by name.
    pub fn feeds(&self) -> Vec<Arc<dyn AnyFeed>> {
        self.feeds.read().values().cloned().collect()
    }

    /// Checks that `feed` carries `item_type`.
    pub fn check_type(
        feed: &dyn AnyFeed,
        item_type: TypeId,
        item_type_name: &'static str,
    ) -> Result<(), DeliveryError> {
        if feed.item_type() == item_type {
            Ok(())
        } else {
            Err(DeliveryError::TypeMismatch {
                feed: feed.name().to_owned(),
                feed_type: feed.item_type_name(),
                expected_type: item_type_name,
            })
        }
    }

    /// The status of every feed.
    pub fn status(&self) -> StatusReport {
        StatusReport::from_feeds(self.feeds().iter().map(|feed| feed.status()).collect())
    }
}
