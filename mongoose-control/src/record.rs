//! Recording hooks: what a group tells a [`GroupRecorder`] (RECORD mode of
//! `mongoose-replay`) about the calls it makes to its processors.
//!
//! A group built with [`crate::GroupOptions::recorder`] calls its recorder on its own
//! thread, after each call it makes to a processor: each dispatch of an item (the
//! delivery context is still entered for a positioned item), each completion callback
//! (book: guarantees/completion-hooks.md: the callbacks run before the recorder learns the item
//! is done), each timer, each stop, each admin command, and once after each feed
//! reader's poll. A group without a recorder pays one `Option` check per call.

use std::any::Any;

use mongoose_core::{CompletionKey, ProcessorId};

/// Told by a group about every call it makes to its processors, after the call.
///
/// Every method runs on the group's thread, with
/// [`mongoose_core::engine::current_processor`] still set to the processor the call was
/// for, so the recorder can attribute what the processor did meanwhile (clock readings,
/// outputs) to it. A recorder must not panic: a panic kills the group.
pub trait GroupRecorder: Send {
    /// A processor was built and started (an add that was refused, failed or never
    /// built is never reported). `type_name` is the processor's type, or `""` when it
    /// was added boxed without one.
    fn processor_built(&mut self, processor: ProcessorId, name: &str, type_name: &'static str);

    /// A new item of a feed is about to be dispatched (not a retry of the last one):
    /// the previous item's dispatch and completions are over.
    fn item_begins(&mut self);

    /// `processor` was given `item` of `feed`: `Ok` when its handler returned,
    /// `Err(reason)` when it failed (returned an error or panicked). A retry of a
    /// retry-safe processor is reported again, without a new [`Self::item_begins`].
    fn dispatched(
        &mut self,
        processor: ProcessorId,
        feed: &str,
        item: &dyn Any,
        result: Result<(), &str>,
    );

    /// A delivery-complete callback of `owner` ran (a failed one may be retried and
    /// reported again).
    fn completed(
        &mut self,
        owner: Option<ProcessorId>,
        key: CompletionKey,
        result: Result<(), &str>,
    );

    /// `processor`'s timer `timer` fired.
    fn timer_fired(&mut self, processor: ProcessorId, timer: u64, result: Result<(), &str>);

    /// `processor` was stopped: `by_request` true for a stop request, false when its
    /// group closed.
    fn stopped(&mut self, processor: ProcessorId, by_request: bool, result: Result<(), &str>);

    /// The current item's dispatch and completions are over; it is about to count as
    /// dispatched, after which its feed may commit it. Write what belongs to it now.
    fn item_finished(&mut self) {}

    /// Items of `feed` were dropped for the group's queue before the next item it is
    /// given, for the subscribed processor `processor`: `count` items from sequence
    /// `first_sequence` to `last_sequence`.
    fn dropped(
        &mut self,
        processor: ProcessorId,
        feed: &str,
        first_sequence: u64,
        last_sequence: u64,
        count: u64,
    ) {
        let _ = (processor, feed, first_sequence, last_sequence, count);
    }

    /// A service was delivered to (`delivered` true) or withdrawn from the running
    /// processor `processor`, at registry `version`.
    fn service_changed(
        &mut self,
        processor: ProcessorId,
        service: &str,
        version: u64,
        delivered: bool,
    ) {
        let _ = (processor, service, version, delivered);
    }

    /// A feed reader's poll returned: every item it finished has had its dispatch and
    /// its completions (an item held for a retry is not finished).
    fn polled(&mut self);

    /// The group's thread is ending: write what is pending.
    fn closing(&mut self) {}

    /// `processor` made the control request `call` through its
    /// [`crate::Controller`], with `args` as text: `Ok` when it was admitted, `Err`
    /// with the error's text when it was refused. Reported in position, right after
    /// the hook of the call that made it: after [`Self::dispatched`] for a request
    /// made while handling an input (and after [`Self::completed`],
    /// [`Self::timer_fired`], [`Self::service_changed`] or [`Self::stopped`] for one
    /// made there), after [`Self::processor_built`] for one made in `start()`. Requests
    /// made by a processor whose start failed, or whose service callback failed, are
    /// not reported.
    fn control_call(
        &mut self,
        processor: ProcessorId,
        call: &str,
        args: &[String],
        outcome: Result<(), &str>,
    ) {
        let _ = (processor, call, args, outcome);
    }

    /// `processor`'s admin command `command` ran with `args`, between items, through
    /// the group's control mailbox (see [`crate::admin`]); `outcome` is what it
    /// answered. Called after the command, with the processor still current, so the
    /// clock readings it took and the outputs it sent are its own.
    fn admin_invoked(
        &mut self,
        processor: ProcessorId,
        command: &str,
        args: &[String],
        outcome: AdminOutcome<'_>,
    ) {
        let _ = (processor, command, args, outcome);
    }
}

/// What an admin command answered, as [`GroupRecorder::admin_invoked`] is told.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AdminOutcome<'a> {
    /// It returned this output (the reply is APPLIED).
    Output(&'a str),
    /// It returned this error: its answer, not a failure of the processor, which keeps
    /// running (the reply is FAILED).
    Error(&'a str),
    /// It panicked: a failure of the processor, contained like a failed handler's.
    Panicked(&'a str),
}
