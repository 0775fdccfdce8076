//! Control requests a processor makes through its Controller, on its group's thread
//! (book: guarantees/control-plane.md: what is safe to call from a handler or
//! start(); "Record and replay": ControlCall entries are recorded in position).

mod common;

use std::any::Any;
use std::sync::Arc;

use common::*;
use mongoose_control::controller::{self, STOP_PROCESSOR};
use mongoose_control::{
    ControlError, GroupOptions, GroupRecorder, IdleStrategy, ReplyHandle, ReplyOutcome, Service,
};
use mongoose_core::{CompletionKey, Processor, ProcessorError, ProcessorId, StartContext};
use parking_lot::Mutex;

fn failure(error: ControlError) -> ProcessorError {
    ProcessorError::new(error.to_string())
}

// book: guarantees/control-plane.md: from a handler, a void stopProcessor is
// admitted and queued, returns without waiting, and a request to the processor's own group
// is applied at the group's next drain
#[test]
fn a_handler_stops_another_processor_of_its_own_group_without_waiting_for_the_reply() {
    let (plane, numbers, _) = plane_with_feed();
    let log = new_log();
    let target = Scripted::new("target", &log).no_feed();
    let added = plane.add_processor("pricing", "target", move || target);
    assert!(added.reply.wait_for(WAIT).expect("reply").applied());
    // what the handler saw: the reply handle, and whether it was answered before return
    let seen: Arc<Mutex<Option<(ReplyHandle, bool)>>> = Arc::default();
    let inside = Arc::clone(&seen);
    let stopper = Scripted::new("stopper", &log).on_item(move |_, _| {
        let control = controller::controller().expect("a handler has a controller");
        let reply = control
            .stop_processor("pricing", "target")
            .map_err(failure)?;
        // the group that answers is this one, busy running this handler: had the call
        // waited for the reply it would never have returned
        let answered_before_return = reply.try_get().is_some();
        *inside.lock() = Some((reply, answered_before_return));
        Ok(())
    });
    let added = plane.add_processor("pricing", "stopper", move || stopper);
    assert!(added.reply.wait_for(WAIT).expect("reply").applied());
    numbers.publish(1);
    assert!(wait_until(|| seen.lock().is_some()), "the handler ran");
    let (reply, answered_before_return) = seen.lock().take().expect("seen");
    assert!(!answered_before_return, "admitted, not waited for");
    let answer = reply.wait_for(WAIT).expect("answered after the handler");
    assert_eq!(
        (answer.outcome, answer.reason.as_str()),
        (ReplyOutcome::Applied, "stopped")
    );
    assert_eq!(count(&log, "target:stop"), 1);
    assert!(plane.processor_handle("pricing", "target").is_none());
    assert!(plane.processor_handle("pricing", "stopper").is_some());
}

// book: guarantees/control-plane.md: off a processor call
// there is no controller, and a request for a name nobody holds says so
#[test]
fn there_is_no_controller_off_a_processor_call_and_an_unknown_name_is_an_error() {
    assert!(controller::controller().is_none(), "not on a group thread");
    let (plane, numbers, _) = plane_with_feed();
    let log = new_log();
    let errors = new_log();
    let inside = Arc::clone(&errors);
    let caller = Scripted::new("caller", &log).on_item(move |_, _| {
        let control = controller::controller().expect("controller");
        if let Err(error) = control.stop_processor("pricing", "nobody") {
            inside.lock().push(error.to_string());
        }
        Ok(())
    });
    plane
        .add_processor("pricing", "caller", move || caller)
        .reply
        .wait_for(WAIT)
        .expect("reply");
    numbers.publish(1);
    assert!(wait_until(|| !errors.lock().is_empty()));
    assert!(
        errors.lock()[0].starts_with("no processor 'nobody' is admitted in group 'pricing'"),
        "{:?}",
        errors.lock()
    );
}

struct Cache;
impl Service for Cache {}

// book: guarantees/control-plane.md: registerService and addEventProcessor
// from a handler admit and queue, and return without waiting
#[test]
fn a_handler_registers_a_service_and_adds_a_processor_in_another_group() {
    let (plane, numbers, _) = plane_with_feed();
    let log = new_log();
    let child_log = Arc::clone(&log);
    let results = new_log();
    let inside = Arc::clone(&results);
    let caller = Scripted::new("caller", &log).on_item(move |_, _| {
        let control = controller::controller().expect("controller");
        control
            .register_service("cache", Arc::new(Cache))
            .map_err(failure)?;
        let child_log = Arc::clone(&child_log);
        let added = control
            .add_processor("children", "child", move || {
                Scripted::new("child", &child_log).no_feed()
            })
            .map_err(failure)?;
        inside
            .lock()
            .push(format!("handle {}", added.handle.is_some()));
        Ok(())
    });
    plane
        .add_processor("pricing", "caller", move || caller)
        .reply
        .wait_for(WAIT)
        .expect("reply");
    numbers.publish(1);
    assert!(wait_until(
        || count(&log, "child:start-thread:children") == 1
    ));
    assert_eq!(*results.lock(), vec!["handle true".to_owned()]);
    assert_eq!(plane.owned_services(), vec!["cache".to_owned()]);
    assert!(plane.processor_handle("children", "child").is_some());
}

/// Logs the hooks a group calls, in order.
struct HookLog(Log);

impl GroupRecorder for HookLog {
    fn processor_built(&mut self, processor: ProcessorId, name: &str, _: &'static str) {
        self.0.lock().push(format!("built {name} {}", processor.0));
    }
    fn item_begins(&mut self) {}
    fn dispatched(&mut self, processor: ProcessorId, _: &str, _: &dyn Any, _: Result<(), &str>) {
        self.0.lock().push(format!("dispatched {}", processor.0));
    }
    fn completed(&mut self, _: Option<ProcessorId>, _: CompletionKey, _: Result<(), &str>) {}
    fn timer_fired(&mut self, _: ProcessorId, _: u64, _: Result<(), &str>) {}
    fn stopped(&mut self, processor: ProcessorId, _: bool, _: Result<(), &str>) {
        self.0.lock().push(format!("stopped {}", processor.0));
    }
    fn polled(&mut self) {}
    fn control_call(
        &mut self,
        processor: ProcessorId,
        call: &str,
        args: &[String],
        outcome: Result<(), &str>,
    ) {
        let outcome = match outcome {
            Ok(()) => "ok".to_owned(),
            Err(text) => format!("failed: {text}"),
        };
        self.0.lock().push(format!(
            "call {} {call}({}) {outcome}",
            processor.0,
            args.join(", ")
        ));
    }
}

// book: guarantees/control-plane.md: ControlCall, with its arguments as text and
// its outcome (ok or failed: <text>), in position: after the input it was made in, and a
// start() request after the build, before any input
#[test]
fn a_recorder_is_told_of_each_control_request_right_after_the_call_that_made_it() {
    let (plane, numbers, _) = plane_with_feed();
    let hooks = new_log();
    plane
        .create_group(
            "pricing",
            GroupOptions {
                idle: IdleStrategy::SleepingMillis(1),
                recorder: Some(Box::new(HookLog(Arc::clone(&hooks)))),
                ..GroupOptions::default()
            },
        )
        .expect("group");
    let log = new_log();
    let target = Scripted::new("target", &log).no_feed();
    let added = plane.add_processor("pricing", "target", move || target);
    assert!(added.reply.wait_for(WAIT).expect("reply").applied());
    let target_generation = added.handle.expect("admitted").generation();
    let caller = Scripted::new("caller", &log)
        .on_start(|| {
            let control = controller::controller().expect("start() has a controller");
            assert!(control.stop_processor("pricing", "missing").is_err());
        })
        .on_item(|_, item| {
            if item == 2 {
                let control = controller::controller().expect("controller");
                control
                    .stop_processor("pricing", "target")
                    .map_err(failure)?;
            }
            Ok(())
        });
    let added = plane.add_processor("pricing", "caller", move || caller);
    assert!(added.reply.wait_for(WAIT).expect("reply").applied());
    let caller = added.handle.expect("admitted").generation();
    numbers.publish(1);
    numbers.publish(2);
    numbers.publish(3);
    assert!(wait_until(
        || count(&log, "caller:3") == 1 && count(&log, "target:stop") == 1
    ));
    let hooks = hooks.lock().clone();
    let position = |entry: &str| {
        hooks
            .iter()
            .position(|hook| hook == entry)
            .unwrap_or_else(|| panic!("{entry} in {hooks:#?}"))
    };
    let missing = format!(
        "call {caller} {STOP_PROCESSOR}(pricing, missing) failed: no processor 'missing' is admitted in group 'pricing': check the group and processor names (a stopped processor's name is free)"
    );
    assert_eq!(
        position(&missing),
        position(&format!("built caller {caller}")) + 1
    );
    let dispatches: Vec<usize> = hooks
        .iter()
        .enumerate()
        .filter(|(_, hook)| **hook == format!("dispatched {caller}"))
        .map(|(index, _)| index)
        .collect();
    assert_eq!(dispatches.len(), 3, "{hooks:#?}");
    let stop = format!("call {caller} {STOP_PROCESSOR}(pricing, target) ok");
    assert_eq!(position(&stop), dispatches[1] + 1, "{hooks:#?}");
    assert!(position(&format!("stopped {target_generation}")) > position(&stop));
    assert_eq!(
        hooks
            .iter()
            .filter(|hook| hook.starts_with("call "))
            .count(),
        2
    );
}

// book: guarantees/control-plane.md: "A processor may stop itself.
// stopProcessor(group, ownName) from its own handler is queued and applied at the next
// drain"; from its own stop() it joins the release in progress (alreadyStopped)
#[test]
fn a_processor_stops_itself_from_its_handler_and_its_stop_joins_that_release() {
    /// Stops itself on any item, and asks again from its stop().
    struct Quitter {
        log: Log,
        replies: Arc<Mutex<Vec<ReplyHandle>>>,
    }
    impl Quitter {
        fn stop_myself(&mut self) -> Result<(), ProcessorError> {
            let control = controller::controller().expect("a controller");
            let reply = control
                .stop_processor("pricing", "quitter")
                .map_err(failure)?;
            self.replies.lock().push(reply);
            Ok(())
        }
        fn on_number(&mut self, _: &u64) -> Result<(), ProcessorError> {
            self.stop_myself()
        }
    }
    impl Processor for Quitter {
        fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
            context.subscribe("numbers", Quitter::on_number)
        }
        fn stop(&mut self) -> Result<(), ProcessorError> {
            self.log.lock().push("quitter:stop".to_owned());
            self.stop_myself()
        }
    }
    let (plane, numbers, _) = plane_with_feed();
    let log = new_log();
    let replies: Arc<Mutex<Vec<ReplyHandle>>> = Arc::default();
    let quitter = Quitter {
        log: Arc::clone(&log),
        replies: Arc::clone(&replies),
    };
    let added = plane.add_processor("pricing", "quitter", move || quitter);
    assert!(added.reply.wait_for(WAIT).expect("reply").applied());
    numbers.publish(1);
    assert!(wait_until(|| replies.lock().len() == 2));
    let reasons: Vec<String> = replies
        .lock()
        .iter()
        .map(|reply| reply.wait_for(WAIT).expect("answered").reason)
        .collect();
    assert_eq!(reasons, ["stopped", "alreadyStopped"]);
    assert_eq!(count(&log, "quitter:stop"), 1);
    assert!(plane.processor_handle("pricing", "quitter").is_none());
}

// issue 12 item 6: the plane a user holds owns the groups and closes them when dropped;
// the views its processors' controllers hold share its state and close nothing when
// dropped (a controller taken and dropped in every call)
#[test]
fn dropping_the_plane_closes_its_groups_and_a_dropped_controller_closes_nothing() {
    let (plane, numbers, _) = plane_with_feed();
    let log = new_log();
    let taker = Scripted::new("taker", &log).on_item(|_, _| {
        let control = controller::controller().expect("a handler has a controller");
        drop(control);
        Ok(())
    });
    let added = plane.add_processor("pricing", "taker", move || taker);
    assert!(added.reply.wait_for(WAIT).expect("reply").applied());
    for item in 0..3 {
        numbers.publish(item);
    }
    assert!(
        wait_until(|| count(&log, "taker:2") == 1),
        "{:?}",
        log.lock()
    );
    let group = plane.group("pricing").expect("group");
    assert_eq!(group.state(), mongoose_control::GroupState::Running);
    // the views dropped closed nothing: the group still answers requests
    let again = plane.add_processor("pricing", "second", || {
        Scripted::new("second", &new_log()).no_feed()
    });
    assert!(again.reply.wait_for(WAIT).expect("reply").applied());
    assert!(!plane.is_stopping());
    drop(plane);
    assert!(
        wait_until(|| group.state() == mongoose_control::GroupState::Closed),
        "dropping the plane closes its groups: {:?}",
        group.state()
    );
}
