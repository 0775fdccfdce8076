//! The feeds a recording copies, with their codecs: [`FeedCodecs`], shared by RECORD
//! and REPLAY so both encode and decode each feed's items the same way.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use mongoose_control::ProcessorHost;
use mongoose_core::{ErasedHandler, ProcessorError, ProcessorId, Subscribers};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::entry::{EventCodec, PostcardCodec};
use crate::error::ReplayError;

type EncodeFn = Arc<dyn Fn(&dyn Any, &mut Vec<u8>) -> Result<(), ReplayError> + Send + Sync>;
type DecodeFn = Arc<dyn Fn(&[u8]) -> Result<Box<dyn Any + Send>, ReplayError> + Send + Sync>;

#[derive(Clone)]
pub(crate) struct ErasedFeed {
    pub(crate) item_type: TypeId,
    pub(crate) type_name: &'static str,
    pub(crate) journalled: bool,
    pub(crate) encode: EncodeFn,
    pub(crate) decode: DecodeFn,
    /// Makes a replayed processor's typed route of the feed from its handler.
    pub(crate) route: fn(ErasedHandler) -> Result<Box<dyn ReplayRoute>, ProcessorError>,
}

/// A replayed processor's handler of one feed, typed inside: calls it with decoded
/// items through the processor's host, as a live group does.
pub(crate) trait ReplayRoute {
    /// Calls the handler with `item` (what the feed's codec decoded: a `T`).
    fn call_handler(
        &self,
        host: &mut ProcessorHost,
        route: &str,
        item: &dyn Any,
    ) -> Result<(), String>;
}

struct TypedRoute<T> {
    subscribers: Subscribers<T>,
}

fn route_of<T: 'static>(handler: ErasedHandler) -> Result<Box<dyn ReplayRoute>, ProcessorError> {
    let mut subscribers = Subscribers::<T>::new();
    subscribers.add(ProcessorId(0), handler)?;
    Ok(Box::new(TypedRoute { subscribers }))
}

impl<T: 'static> ReplayRoute for TypedRoute<T> {
    fn call_handler(
        &self,
        host: &mut ProcessorHost,
        route: &str,
        item: &dyn Any,
    ) -> Result<(), String> {
        let Some(item) = item.downcast_ref::<T>() else {
            return Err(format!(
                "the decoded item is not a {}",
                std::any::type_name::<T>()
            ));
        };
        host.call_handler(&self.subscribers.offer(item), 0, route, None)
            .map_err(|failure| failure.reason)
    }
}

/// The feeds whose items a recording copies, each with its item type and codec.
///
/// A feed declared with [`FeedCodecs::feed`] is copied inline (an `Inline` entry per
/// input); one declared with [`FeedCodecs::journalled`] is written once per item to
/// the recording's journal and recorded by feed and sequence (an `Indexed` entry). An
/// input of an undeclared feed cannot be copied: RECORD marks it `Failed` there.
#[derive(Clone, Default)]
pub struct FeedCodecs {
    pub(crate) feeds: HashMap<String, ErasedFeed>,
}

impl fmt::Debug for FeedCodecs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<_> = self.feeds.keys().collect();
        names.sort();
        f.debug_struct("FeedCodecs").field("feeds", &names).finish()
    }
}

impl FeedCodecs {
    /// No feeds.
    pub fn new() -> Self {
        FeedCodecs::default()
    }

    /// Copies the items of `feed` inline, through serde and postcard.
    pub fn feed<T>(self, feed: &str) -> Self
    where
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        self.feed_with(feed, PostcardCodec::<T>::new(), false)
    }

    /// Journals the items of `feed` (recorded by feed and sequence), through serde and
    /// postcard.
    pub fn journalled<T>(self, feed: &str) -> Self
    where
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        self.feed_with(feed, PostcardCodec::<T>::new(), true)
    }

    /// Declares `feed` with its own codec; `journalled` as [`FeedCodecs::journalled`].
    pub fn feed_with<T, C>(mut self, feed: &str, codec: C, journalled: bool) -> Self
    where
        T: Send + Sync + 'static,
        C: EventCodec<T> + 'static,
    {
        let codec = Arc::new(codec);
        let encoder = Arc::clone(&codec);
        let encode: EncodeFn =
            Arc::new(
                move |item: &dyn Any, out: &mut Vec<u8>| match item.downcast_ref::<T>() {
                    Some(item) => encoder.encode(item, out),
                    None => Err(ReplayError::Codec {
                        action: "encode",
                        reason: format!("the item is not a {}", std::any::type_name::<T>()),
                    }),
                },
            );
        let decode: DecodeFn = Arc::new(move |bytes: &[u8]| {
            codec
                .decode(bytes)
                .map(|item| Box::new(item) as Box<dyn Any + Send>)
        });
        self.feeds.insert(
            feed.to_owned(),
            ErasedFeed {
                item_type: TypeId::of::<T>(),
                type_name: std::any::type_name::<T>(),
                journalled,
                encode,
                decode,
                route: route_of::<T>,
            },
        );
        self
    }
}
