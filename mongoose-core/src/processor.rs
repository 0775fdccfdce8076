//! Processors: the user code a processor group dispatches to.

use std::any::Any;
use std::time::Duration;

use crate::delivery::{CompletionKey, Delivery};
use crate::dispatch::ErasedHandler;
use crate::error::ProcessorError;
use crate::position::{Epoch, PositionValue};
use crate::services::ServiceEvent;

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

/// A typed handler for the items of one feed, erased over the processor type. The
/// group calls it with the processor it was subscribed for.
pub type Handler<T> = Box<dyn Fn(&mut dyn Processor, &T) -> Result<(), ProcessorError> + Send>;

/// An admin command erased over the processor type
/// ([`StartContext::register_command`]): the group calls it with the processor that
/// registered it, its arguments, and sends back what it returns.
pub type CommandHandler =
    Box<dyn Fn(&mut dyn Processor, &[String]) -> Result<String, ProcessorError> + Send>;

/// User code hosted by a processor group.
///
/// A processor subscribes to feeds in [`Processor::start`], which runs on its group's
/// thread. Its handlers run on that thread, one item at a time. A handler that returns
/// an error or panics quarantines the processor alone, unless
/// [`Processor::retry_safe`] says it may be retried.
pub trait Processor: Any + Send {
    /// Called once on the group's thread before any item. Everything a processor can
    /// ask for is on `context`: subscribe to feeds and to services, register admin
    /// commands, schedule timers (and, through `mongoose_control::StartContextExt`,
    /// take the controller).
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        let _ = context;
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
    /// (book: guarantees/consumer-side-positions.md): what its saved state holds, per feed it consumes.
    /// Called once on the group's thread right after [`Processor::start`] (which loads
    /// the state), before the feed's source starts. The saved position is the
    /// authority: a source whose own pointer is missing, damaged or past it resumes
    /// from it, so a lost pointer neither re-applies nor skips lines. The default (a
    /// processor without stored positions) reports nothing.
    fn saved_positions(&self) -> Vec<SavedPosition> {
        Vec::new()
    }

    /// For a processor whose outputs go to a sink that records the keys it holds (the
    /// file sink): per feed and lane, the `(epoch, position)` of an input at or before
    /// which every output of this processor is held by the sink, so that reading the
    /// feed again from there, under that epoch, makes only outputs the sink drops as
    /// already written or writes for the first time. Called once, like
    /// [`Processor::saved_positions`], before the feed's source starts.
    ///
    /// Weaker than a saved position: the processor may have handled inputs after it that
    /// made no output, so a source never moves a trusted pointer back to it. It is used
    /// only when the source's own pointer is missing, damaged or another input's: the
    /// source resumes there under that epoch instead of reading the input again from
    /// its start under a new epoch, which would write every output a second time. The
    /// default (a processor without such a sink) reports nothing.
    fn written_positions(&self) -> Vec<SavedPosition> {
        Vec::new()
    }

    /// True when a failed handler may simply be called again with the same item (it
    /// leaves no partial state behind). Such a processor is retried alone under the
    /// group's retry policy instead of being quarantined.
    fn retry_safe(&self) -> bool {
        false
    }
}

/// What a processor host provides behind a [`StartContext`]: implemented by the host
/// that runs a processor's `start` (a live group's, a replay's) and by test doubles.
/// Processors use the typed methods of [`StartContext`] instead.
pub trait StartBackend {
    /// Subscribes `handler` to the feed named `feed`.
    ///
    /// # Errors
    /// No such feed, or a feed of another item type (naming both types).
    fn subscribe(&mut self, feed: &str, handler: ErasedHandler) -> Result<(), ProcessorError>;

    /// Takes the processor's services callback (one per processor: a second replaces
    /// the first).
    fn services(&mut self, handler: Handler<ServiceEvent>);

    /// Registers an admin command; `false` when the processor already registered one
    /// of this name (the first stays).
    fn register_command(&mut self, name: &str, handler: CommandHandler) -> bool;

    /// Schedules the processor's timer `timer` after `delay`; `false` when the host
    /// runs no timers.
    fn schedule_timer(&mut self, delay: Duration, timer: u64) -> bool;

    /// Cancels the processor's pending timers `timer`; `false` when the host runs no
    /// timers.
    fn cancel_timer(&mut self, timer: u64) -> bool;
}

/// The longest admin command name.
pub const MAX_COMMAND_NAME: usize = 64;

/// True for an admin command name an operator can type and a URL path segment can
/// carry: 1 to [`MAX_COMMAND_NAME`] of `A-Z a-z 0-9 _ - .`.
pub fn is_valid_command_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_COMMAND_NAME
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'.'))
}

/// Everything a processor can ask for in [`Processor::start`], in one value: feeds,
/// services, admin commands, timers (and, through `mongoose_control::StartContextExt`,
/// the controller for control requests).
///
/// Each handler is a method of the processor, typed by the item it takes; the context
/// erases it over the processor type. What a processor asks for during a delivery (its
/// position, a completion) is on [`crate::DeliveryContext`] instead.
///
/// ```
/// use std::time::Duration;
/// use mongoose_core::{Processor, ProcessorError, ServiceEvent, StartContext};
///
/// #[derive(Default)]
/// struct Prices {
///     last: Option<u64>,
/// }
/// impl Prices {
///     fn on_price(&mut self, price: &u64) -> Result<(), ProcessorError> {
///         self.last = Some(*price);
///         Ok(())
///     }
///     fn on_service(&mut self, _event: &ServiceEvent) -> Result<(), ProcessorError> {
///         Ok(())
///     }
///     fn last(&mut self, _args: &[String]) -> Result<String, ProcessorError> {
///         Ok(format!("{:?}", self.last))
///     }
/// }
/// impl Processor for Prices {
///     fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
///         context.subscribe("prices", Prices::on_price)?;
///         context.services(Prices::on_service);
///         context.register_command("last", Prices::last);
///         context.schedule_timer(Duration::from_secs(60), 1);
///         Ok(())
///     }
/// }
/// ```
pub struct StartContext<'a> {
    backend: &'a mut dyn StartBackend,
}

impl std::fmt::Debug for StartContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartContext").finish_non_exhaustive()
    }
}

fn erase<P, A: ?Sized, R>(
    what: &'static str,
    method: fn(&mut P, &A) -> Result<R, ProcessorError>,
) -> impl Fn(&mut dyn Processor, &A) -> Result<R, ProcessorError> + Send
where
    P: Processor,
{
    move |processor: &mut dyn Processor, argument: &A| {
        let any: &mut dyn Any = processor;
        match any.downcast_mut::<P>() {
            Some(processor) => method(processor, argument),
            None => Err(ProcessorError::new(format!(
                "{what} of {} called with another processor type",
                std::any::type_name::<P>()
            ))),
        }
    }
}

impl<'a> StartContext<'a> {
    /// A context over `backend` (a processor host builds one per `start`).
    pub fn new(backend: &'a mut dyn StartBackend) -> Self {
        StartContext { backend }
    }

    /// Subscribes `handler` to the feed named `feed`, whose items must be of type `T`.
    ///
    /// # Errors
    /// No such feed, or a feed of another type (an error naming the feed and both
    /// types). Returning it from `start` fails the processor's start.
    pub fn subscribe<P, T>(
        &mut self,
        feed: &str,
        handler: fn(&mut P, &T) -> Result<(), ProcessorError>,
    ) -> Result<(), ProcessorError>
    where
        P: Processor,
        T: 'static,
    {
        let typed: Handler<T> = Box::new(erase("handler", handler));
        self.backend.subscribe(feed, ErasedHandler::new(typed))
    }

    /// Asks to be told of services on the group's thread: `handler` gets a
    /// [`ServiceEvent`] for every service registered (including those registered
    /// before the processor was added) and for every removal.
    pub fn services<P: Processor>(
        &mut self,
        handler: fn(&mut P, &ServiceEvent) -> Result<(), ProcessorError>,
    ) {
        self.backend
            .services(Box::new(erase("services callback", handler)));
    }

    /// Registers the admin command `name`, which an operator runs through the control
    /// plane (`mongoose admin invoke`): `handler`'s output (or error) is the answer.
    /// Commands are registered only here, so a replay that rebuilds the processor
    /// registers the same ones.
    ///
    /// Returns `false`, registering nothing, for a name that is not
    /// [valid](is_valid_command_name) and for one the processor already registered
    /// (the first stays).
    pub fn register_command<P: Processor>(
        &mut self,
        name: &str,
        handler: fn(&mut P, &[String]) -> Result<String, ProcessorError>,
    ) -> bool {
        if !is_valid_command_name(name) {
            return false;
        }
        self.backend
            .register_command(name, Box::new(erase("admin command", handler)))
    }

    /// Asks the group to call the processor's `on_timer(timer)` after `delay`, on the
    /// group's thread. A timer of a processor that stops or is quarantined never
    /// fires. Returns `false` where timers are not run. (From a handler or a timer,
    /// `mongoose_control::context::schedule_timer` does the same.)
    pub fn schedule_timer(&mut self, delay: Duration, timer: u64) -> bool {
        self.backend.schedule_timer(delay, timer)
    }

    /// Cancels the processor's pending timers with this id.
    pub fn cancel_timer(&mut self, timer: u64) -> bool {
        self.backend.cancel_timer(timer)
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

        fn count(&mut self, _args: &[String]) -> Result<String, ProcessorError> {
            Ok(self.seen.len().to_string())
        }
    }

    impl Processor for Lines {
        fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
            context.subscribe("lines", Lines::on_line)?;
            assert!(context.register_command("count", Lines::count));
            assert!(!context.register_command("bad name", Lines::count));
            Ok(())
        }
    }

    struct Other;
    impl Processor for Other {}

    #[derive(Default)]
    struct Recorder {
        handlers: Vec<(String, ErasedHandler)>,
        commands: Vec<(String, CommandHandler)>,
    }

    impl StartBackend for Recorder {
        fn subscribe(&mut self, feed: &str, handler: ErasedHandler) -> Result<(), ProcessorError> {
            self.handlers.push((feed.to_owned(), handler));
            Ok(())
        }
        fn services(&mut self, _handler: Handler<ServiceEvent>) {}
        fn register_command(&mut self, name: &str, handler: CommandHandler) -> bool {
            self.commands.push((name.to_owned(), handler));
            true
        }
        fn schedule_timer(&mut self, _delay: Duration, _timer: u64) -> bool {
            false
        }
        fn cancel_timer(&mut self, _timer: u64) -> bool {
            false
        }
    }

    #[test]
    fn a_typed_subscription_calls_the_processors_handler() {
        let mut processor = Lines { seen: Vec::new() };
        let mut recorder = Recorder::default();
        processor
            .start(&mut StartContext::new(&mut recorder))
            .expect("subscribed");
        let (feed, handler) = recorder.handlers.pop().expect("one subscription");
        assert_eq!(feed, "lines");
        assert_eq!(handler.item_type(), std::any::TypeId::of::<String>());
        let handler = handler.typed::<String>().expect("a String handler");
        handler(&mut processor, &"one".to_string()).expect("handled");
        assert_eq!(processor.seen, vec!["one".to_string()]);
        let error = handler(&mut Other, &"two".to_string()).expect_err("another type");
        assert!(
            error.message().contains("another processor type"),
            "{error}"
        );

        let (name, command) = recorder.commands.pop().expect("one valid command");
        assert_eq!(name, "count");
        assert_eq!(command(&mut processor, &[]).expect("ran"), "1");
        assert!(
            recorder.commands.is_empty(),
            "the invalid name was not registered"
        );
    }

    #[test]
    fn command_names_are_what_an_operator_can_type() {
        assert!(is_valid_command_name("flush-all.v2_x"));
        assert!(!is_valid_command_name(""));
        assert!(!is_valid_command_name("a b"));
        assert!(!is_valid_command_name("a/b"));
        assert!(!is_valid_command_name(&"x".repeat(MAX_COMMAND_NAME + 1)));
    }
}
