//! Processors: the user code a processor group dispatches to.

use std::any::{Any, TypeId};

use crate::delivery::{CompletionKey, Delivery};
use crate::error::ProcessorError;
use crate::position::{Epoch, PositionValue};

/// What a processor that stores source positions with its state holds for one feed
/// ([`Processor::saved_positions`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedPosition {
    /// The feed.
    pub feed: String,
    /// The `(epoch, position)` of the last item its saved state holds; `None` when its
    /// state holds nothing of the feed yet (a new or emptied state).
    pub saved: Option<(Epoch, PositionValue)>,
}

/// A consumer's [`SavedPosition`] for the feed it was reported to, as a source sees it
/// at start ([`crate::SourceOutput::saved_positions`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerPosition {
    /// Who holds it: `group/processor`.
    pub consumer: String,
    /// What its saved state holds of the feed.
    pub saved: Option<(Epoch, PositionValue)>,
}

/// A typed handler for the items of one feed, erased over the processor type. The
/// group calls it with the processor it was subscribed for.
pub type Handler<T> = Box<dyn FnMut(&mut dyn Processor, &T) -> Result<(), ProcessorError> + Send>;

/// User code hosted by a processor group.
///
/// A processor subscribes to feeds in [`Processor::start`], which runs on its group's
/// thread. Its handlers run on that thread, one item at a time. A handler that returns
/// an error or panics quarantines the processor alone, unless
/// [`Processor::retry_safe`] says it may be retried.
pub trait Processor: Any + Send {
    /// Called once on the group's thread before any item: subscribe to feeds here.
    fn start(&mut self, subscriptions: &mut dyn Subscriptions) -> Result<(), ProcessorError> {
        let _ = subscriptions;
        Ok(())
    }

    /// Called once when the processor is stopped by a request or its group closes.
    fn stop(&mut self) -> Result<(), ProcessorError> {
        Ok(())
    }

    /// Runs once per key the processor registered with
    /// [`crate::DeliveryContext::on_complete`] during a delivery, after the whole
    /// delivery and before the feed may commit the item. The delivery context is still
    /// entered. An error is retried alone under the group's retry policy.
    fn on_delivery_complete(
        &mut self,
        key: CompletionKey,
        delivery: &Delivery,
    ) -> Result<(), ProcessorError> {
        let _ = (key, delivery);
        Ok(())
    }

    /// A timer this processor scheduled fired.
    fn on_timer(&mut self, timer: u64) -> Result<(), ProcessorError> {
        let _ = timer;
        Ok(())
    }

    /// For a processor that stores the feed's `(epoch, position)` with its state
    /// (feed-delivery-guarantees §5a): what its saved state holds, per feed it consumes.
    /// Called once on the group's thread right after [`Processor::start`] (which loads
    /// the state), before the feed's source starts. The saved position is the
    /// authority: a source whose own pointer is missing, damaged or past it resumes
    /// from it, so a lost pointer neither re-applies nor skips lines. The default (a
    /// processor without stored positions) reports nothing.
    fn saved_positions(&self) -> Vec<SavedPosition> {
        Vec::new()
    }

    /// True when a failed handler may simply be called again with the same item (it
    /// leaves no partial state behind). Such a processor is retried alone under the
    /// group's retry policy instead of being quarantined.
    fn retry_safe(&self) -> bool {
        false
    }
}

/// Where a processor subscribes to feeds, given to [`Processor::start`].
pub trait Subscriptions {
    /// Subscribes an erased handler: `handler` is a `Handler<T>` for the item type
    /// `item_type`. Prefer the typed `subscribe` on `dyn Subscriptions`.
    fn subscribe_erased(
        &mut self,
        feed: &str,
        item_type: TypeId,
        item_type_name: &'static str,
        handler: Box<dyn Any + Send>,
    ) -> Result<(), ProcessorError>;
}

impl dyn Subscriptions + '_ {
    /// Subscribes `handler` to the feed named `feed`, whose items must be of type `T`.
    /// A feed of another type fails with an error naming the feed and both types.
    pub fn subscribe<P, T>(
        &mut self,
        feed: &str,
        handler: fn(&mut P, &T) -> Result<(), ProcessorError>,
    ) -> Result<(), ProcessorError>
    where
        P: Processor,
        T: 'static,
    {
        let typed: Handler<T> = Box::new(move |processor: &mut dyn Processor, item: &T| {
            let any: &mut dyn Any = processor;
            match any.downcast_mut::<P>() {
                Some(processor) => handler(processor, item),
                None => Err(ProcessorError::new(format!(
                    "handler for {} called with another processor type",
                    std::any::type_name::<P>()
                ))),
            }
        });
        self.subscribe_erased(
            feed,
            TypeId::of::<T>(),
            std::any::type_name::<T>(),
            Box::new(typed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Lines {
        seen: Vec<String>,
    }

    impl Lines {
        #[allow(clippy::ptr_arg)] // the handler takes &T for a feed of T = String
        fn on_line(&mut self, line: &String) -> Result<(), ProcessorError> {
            self.seen.push(line.clone());
            Ok(())
        }
    }

    impl Processor for Lines {
        fn start(&mut self, subscriptions: &mut dyn Subscriptions) -> Result<(), ProcessorError> {
            subscriptions.subscribe("lines", Lines::on_line)
        }
    }

    #[derive(Default)]
    struct Recorder {
        handlers: Vec<(String, TypeId, Box<dyn Any + Send>)>,
    }

    impl Subscriptions for Recorder {
        fn subscribe_erased(
            &mut self,
            feed: &str,
            item_type: TypeId,
            _item_type_name: &'static str,
            handler: Box<dyn Any + Send>,
        ) -> Result<(), ProcessorError> {
            self.handlers.push((feed.to_owned(), item_type, handler));
            Ok(())
        }
    }

    #[test]
    fn a_typed_subscription_calls_the_processors_handler() {
        let mut processor = Lines { seen: Vec::new() };
        let mut recorder = Recorder::default();
        processor.start(&mut recorder).expect("subscribed");
        let (feed, item_type, handler) = recorder.handlers.pop().expect("one subscription");
        assert_eq!(feed, "lines");
        assert_eq!(item_type, TypeId::of::<String>());
        let mut handler = handler
            .downcast::<Handler<String>>()
            .expect("a String handler");
        handler(&mut processor, &"one".to_string()).expect("handled");
        assert_eq!(processor.seen, vec!["one".to_string()]);
    }
}
