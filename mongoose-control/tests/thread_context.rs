//! What a processor call leaves on its thread: nothing. The host enters the thread's
//! context for each call (the current processor, the call's capture) behind a guard,
//! so a panic that crosses the call cannot leave the processor current, its capture
//! in the thread, or the delivery context changed (issue 26 item 3).

use std::any::Any;
use std::panic::{catch_unwind, panic_any, AssertUnwindSafe};
use std::sync::Arc;

use mongoose_audit::capture::{CaptureFailure, CaptureLayer, CaptureWriter};
use mongoose_control::{FeedSubscriptions, ProcessorHost};
use mongoose_core::engine;
use mongoose_core::{
    DeliveryContext, Epoch, ErasedHandler, Offer, PositionValue, Processor, ProcessorError,
    ProcessorId, StartContext,
};
use parking_lot::Mutex;
use tracing_subscriber::layer::SubscriberExt;

/// A panic payload whose drop panics again: the panic outlives the handler's
/// containment and crosses the host's call.
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("the payload panicked as it was dropped");
        }
    }
}

struct Idle;
impl Processor for Idle {
    fn start(&mut self, _: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        Ok(())
    }
}

struct NoFeeds;
impl FeedSubscriptions for NoFeeds {
    fn subscribe(&mut self, feed: &str, _: ErasedHandler) -> Result<(), ProcessorError> {
        Err(format!("no feed '{feed}'").into())
    }
}

/// An offer whose handler logs an event (captured) and panics with `PanicsOnDrop`.
struct PanickingOffer;
impl Offer for PanickingOffer {
    fn len(&self) -> usize {
        1
    }
    fn processor(&self, _: usize) -> ProcessorId {
        ProcessorId(7)
    }
    fn call(&self, _: usize, _: &mut dyn Processor) -> Result<(), ProcessorError> {
        tracing::info!("inside the handler");
        panic_any(PanicsOnDrop)
    }
    fn item(&self) -> &dyn Any {
        &()
    }
}

/// Keeps what a capture was given.
struct Kept(Arc<Mutex<usize>>);
impl CaptureWriter for Kept {
    fn write(&mut self, _: &[u8]) -> Result<(), CaptureFailure> {
        *self.0.lock() += 1;
        Ok(())
    }
    fn close(self: Box<Self>) -> Result<(), CaptureFailure> {
        Ok(())
    }
}

#[test]
fn a_handler_that_panics_leaves_the_thread_context_as_it_was_before_the_call() {
    let written = Arc::new(Mutex::new(0));
    let subscriber = tracing_subscriber::registry().with(CaptureLayer);
    tracing::subscriber::with_default(subscriber, || {
        let mut host = ProcessorHost::build(ProcessorId(7), "panicky", || Idle).expect("built");
        host.start(&mut NoFeeds, None).expect("started");
        host.capture_into(Box::new(Kept(Arc::clone(&written))));

        let feed: Arc<str> = Arc::from("numbers");
        let _delivery = engine::enter(
            &feed,
            11,
            Epoch(3),
            PositionValue {
                lane: 0,
                offset: 42,
            },
            0,
        );
        let _outer = engine::processor_scope(Some(ProcessorId(1)));
        let before = DeliveryContext::current();

        let call = catch_unwind(AssertUnwindSafe(|| {
            host.call_handler(&PanickingOffer, 0, "numbers", None)
        }));
        // the handler's panic was contained or crossed the call: either way the
        // thread is as it was
        drop(call);

        assert_eq!(
            engine::current_processor(),
            Some(ProcessorId(1)),
            "current processor"
        );
        assert_eq!(DeliveryContext::current(), before, "delivery context");
        assert_eq!(
            *written.lock(),
            1,
            "the handler's event reached its capture"
        );
        assert!(
            host.is_captured(),
            "the capture went back to its processor's host"
        );
        tracing::info!("after the call");
        assert_eq!(
            *written.lock(),
            1,
            "an event after the call is not captured"
        );
    });
}
