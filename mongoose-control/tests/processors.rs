//! Adding and stopping processors, handles, names, and the threading rules
//! (book: guarantees/control-plane.md).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use mongoose_control::memory::MemoryFeeds;
use mongoose_control::{
    AddFailurePolicy, ControlConfig, ControlError, ControlPlane, GroupOptions, GroupState,
    IdleStrategy, ReplyOutcome,
};
use mongoose_core::{agent, FailureKind};
use parking_lot::Mutex;

fn group_with_mailbox(plane: &ControlPlane, group: &str, capacity: usize) {
    plane
        .create_group(
            group,
            GroupOptions {
                mailbox_capacity: capacity,
                idle: IdleStrategy::SleepingMillis(1),
                full_mailbox_timeout: Duration::from_millis(200),
                ..GroupOptions::default()
            },
        )
        .expect("group created");
}

// book: guarantees/control-plane.md: APPLIED means started
#[test]
fn an_applied_add_means_the_processor_started_and_the_supplier_ran_on_the_group_thread() {
    let (plane, _numbers, _) = plane_with_feed();
    let log = new_log();
    let inner = Arc::clone(&log);
    let supplier_thread = Arc::new(Mutex::new(None));
    let seen = Arc::clone(&supplier_thread);
    let added = plane.add_processor("pricing", "pricer", move || {
        *seen.lock() = agent::current_agent_name();
        Scripted::new("pricer", &inner)
    });
    let reply = added.reply.wait_for(WAIT).expect("reply");
    assert_eq!(reply.outcome, ReplyOutcome::Applied);
    assert_eq!(reply.kind, FailureKind::None);
    assert_eq!(reply.reason, "started");
    assert_eq!(count(&log, "pricer:start-thread:pricing"), 1);
    // book: guarantees/control-plane.md: the supplier runs on the group's agent thread
    assert_eq!(supplier_thread.lock().as_deref(), Some("pricing"));
    let handle = added.handle.expect("admitted");
    assert_eq!(reply.generation, Some(handle.generation()));
}

// book: guarantees/control-plane.md: reserved at admission, before the call returns
#[test]
fn an_admitted_add_reserves_the_name_before_the_call_returns_even_before_the_group_starts() {
    let feeds = MemoryFeeds::default();
    let plane = ControlPlane::new_unstarted(config(), Arc::new(feeds));
    let log = new_log();
    let inner = Arc::clone(&log);
    plane
        .add_event_processor("pricing", "pricer", move || {
            Scripted::new("pricer", &inner).no_feed()
        })
        .expect("queued: the group has not started");
    let inner = Arc::clone(&log);
    let error = plane
        .add_event_processor("pricing", "pricer", move || {
            Scripted::new("pricer", &inner).no_feed()
        })
        .expect_err("the name is reserved");
    assert!(matches!(error, ControlError::NameInUse { .. }));
    let stage = plane.add_processor("pricing", "pricer", || {
        Scripted::new("x", &new_log()).no_feed()
    });
    assert!(stage.handle.is_none());
    let reply = stage.reply.try_get().expect("complete at once");
    assert_eq!(
        (reply.outcome, reply.kind),
        (ReplyOutcome::Refused, FailureKind::RefusedState)
    );
    assert_eq!(reply.reason, "name in use");
    assert_eq!(reply.request_id, None);
    plane.start().expect("started");
    assert!(wait_until(
        || count(&log, "pricer:start-thread:pricing") == 1
    ));
}

// book: guarantees/control-plane.md, failure modes: start() throws, REPORT and THROW
#[test]
fn an_add_whose_start_fails_is_answered_failed_and_frees_the_name() {
    let (plane, _numbers, _) = plane_with_feed();
    let log = new_log();
    let inner = Arc::clone(&log);
    let added = plane.add_processor("pricing", "pricer", move || {
        Scripted::new("pricer", &inner).failing_start("no prices today")
    });
    let reply = added.reply.wait_for(WAIT).expect("reply");
    assert_eq!(
        (reply.outcome, reply.kind),
        (ReplyOutcome::Failed, FailureKind::FailedEffect)
    );
    assert_eq!(reply.reason, "no prices today");
    assert!(
        plane.processor_handle("pricing", "pricer").is_none(),
        "name freed"
    );
    // REPORT (the default): the void form logs and returns normally
    let inner = Arc::clone(&log);
    plane
        .add_event_processor("pricing", "pricer", move || {
            Scripted::new("pricer", &inner).failing_start("still none")
        })
        .expect("REPORT returns normally");
    // THROW: the void form returns the reply as an error
    let thrower = ControlPlane::new(
        ControlConfig {
            add_failure_policy: AddFailurePolicy::Throw,
            ..config()
        },
        Arc::new(MemoryFeeds::default()),
    );
    let inner = Arc::clone(&log);
    let error = thrower
        .add_event_processor("pricing", "pricer", move || {
            Scripted::new("pricer", &inner)
                .no_feed()
                .failing_start("none at all")
        })
        .expect_err("THROW");
    match error {
        ControlError::NotApplied(reply) => assert_eq!(reply.reason, "none at all"),
        other => panic!("unexpected {other}"),
    }
}

// book: guarantees/control-plane.md: never throws for a stopping server
#[test]
fn a_stage_add_on_a_stopping_server_is_answered_not_running_and_the_void_add_fails() {
    let (plane, _numbers, _) = plane_with_feed();
    plane.begin_stopping();
    let added = plane.add_processor("pricing", "pricer", || Scripted::new("p", &new_log()));
    assert!(added.handle.is_none());
    let reply = added.reply.try_get().expect("complete at once");
    assert_eq!(reply.outcome, ReplyOutcome::NotRunning);
    assert_eq!(reply.reason, "server is stopping");
    let error = plane
        .add_event_processor("pricing", "pricer", || Scripted::new("p", &new_log()))
        .expect_err("refused");
    assert!(matches!(error, ControlError::ServerStopping));
}

// book: guarantees/control-plane.md: a handle stops exactly its registration
#[test]
fn a_stop_through_a_handle_never_stops_a_later_processor_of_the_same_name() {
    let (plane, numbers, _) = plane_with_feed();
    let log = new_log();
    let inner = Arc::clone(&log);
    let first = plane.add_processor("pricing", "pricer", move || Scripted::new("first", &inner));
    first.reply.wait_for(WAIT).expect("added");
    let old = first.handle.expect("handle");
    let stopped = plane.stop_processor(&old).wait_for(WAIT).expect("stopped");
    assert_eq!(stopped.reason, "stopped");
    let inner = Arc::clone(&log);
    let second = plane.add_processor("pricing", "pricer", move || Scripted::new("second", &inner));
    assert!(second.reply.wait_for(WAIT).expect("added").applied());
    // the old handle again: the replacement keeps running
    let again = plane.stop_processor(&old).wait_for(WAIT).expect("answered");
    assert_eq!(
        (again.outcome, again.reason.as_str()),
        (ReplyOutcome::Applied, "alreadyStopped")
    );
    numbers.publish(7);
    assert!(wait_until(|| count(&log, "second:7") == 1));
    assert_eq!(count(&log, "second:stop"), 0);
}

// book: guarantees/control-plane.md: handles are server-scoped
#[test]
fn a_handle_from_another_server_is_refused_and_stops_nothing() {
    let (plane, numbers, _) = plane_with_feed();
    let (other, _, _) = plane_with_feed();
    let log = new_log();
    let inner = Arc::clone(&log);
    plane
        .add_processor("pricing", "pricer", move || Scripted::new("p", &inner))
        .reply
        .wait_for(WAIT)
        .expect("added");
    let foreign = other.add_processor("pricing", "pricer", || Scripted::new("q", &new_log()));
    foreign.reply.wait_for(WAIT).expect("added");
    let reply = plane
        .stop_processor(&foreign.handle.expect("handle"))
        .wait_for(WAIT)
        .expect("answered");
    assert_eq!(
        (reply.outcome, reply.kind),
        (ReplyOutcome::Refused, FailureKind::RefusedInvalid)
    );
    assert_eq!(reply.reason, "handle belongs to another server");
    numbers.publish(1);
    assert!(wait_until(|| count(&log, "p:1") == 1));
    assert_eq!(count(&log, "p:stop"), 0);
}

// book: guarantees/control-plane.md: issue #77 rows
#[test]
fn a_waiting_stop_of_an_unknown_group_or_processor_is_refused_no_such_group_or_processor() {
    let (plane, _numbers, _) = plane_with_feed();
    let added = plane.add_processor("pricing", "pricer", || Scripted::new("p", &new_log()));
    added.reply.wait_for(WAIT).expect("added");
    let by_name = plane
        .stop_processor_wait("no-such-group", "pricer", WAIT)
        .expect("a reply");
    assert_eq!(
        (by_name.outcome, by_name.kind),
        (ReplyOutcome::Refused, FailureKind::RefusedState)
    );
    assert_eq!(by_name.reason, "no such group");
    let by_name = plane
        .stop_processor_wait("pricing", "nobody", WAIT)
        .expect("a reply");
    assert_eq!(
        (by_name.outcome, by_name.kind),
        (ReplyOutcome::Refused, FailureKind::RefusedState)
    );
    assert_eq!(by_name.reason, "no such processor");
    let stopped = plane
        .stop_processor_wait("pricing", "pricer", WAIT)
        .expect("a reply");
    assert_eq!(
        (stopped.outcome, stopped.reason.as_str()),
        (ReplyOutcome::Applied, "stopped")
    );
}

// book: guarantees/control-plane.md: no group or name returns at once
#[test]
fn a_void_stop_of_an_unknown_group_or_name_returns_at_once_and_does_nothing() {
    let (plane, _numbers, _) = plane_with_feed();
    plane
        .stop_processor_by_name("nowhere", "nobody")
        .expect("no-op");
    let added = plane.add_processor("pricing", "pricer", || Scripted::new("p", &new_log()));
    added.reply.wait_for(WAIT).expect("added");
    plane
        .stop_processor_by_name("pricing", "nobody")
        .expect("no-op");
    assert!(plane.processor_handle("pricing", "pricer").is_some());
    plane
        .stop_processor_by_name("pricing", "pricer")
        .expect("stopped");
    assert!(
        plane.processor_handle("pricing", "pricer").is_none(),
        "waited for the reply: name free"
    );
}

// book: guarantees/control-plane.md: a re-add before the stop applied is refused
#[test]
fn an_immediate_re_add_after_a_stop_that_has_not_applied_is_refused_name_in_use() {
    let (plane, numbers, _) = plane_with_feed();
    let gate = block_group(&plane, &numbers, "pricing");
    let added = plane.add_processor("pricing", "pricer", || Scripted::new("p", &new_log()));
    let stop = plane.stop_processor(added.handle.as_ref().expect("handle"));
    let re_add = plane.add_processor("pricing", "pricer", || Scripted::new("p2", &new_log()));
    let reply = re_add.reply.try_get().expect("refused at once");
    assert_eq!(reply.reason, "name in use");
    gate.open();
    assert!(stop.wait_for(WAIT).expect("stopped").applied());
    let later = plane.add_processor("pricing", "pricer", || Scripted::new("p3", &new_log()));
    assert!(later.reply.wait_for(WAIT).expect("added").applied());
}

// book: guarantees/control-plane.md: decided in publication order
#[test]
fn mailbox_requests_are_decided_in_publication_order() {
    let (plane, numbers, _) = plane_with_feed();
    let gate = block_group(&plane, &numbers, "pricing");
    let mut replies = Vec::new();
    for index in 0..20 {
        let added = plane.add_processor("pricing", &format!("p{index}"), move || {
            Scripted::new("p", &new_log()).no_feed()
        });
        replies.push(added.reply.clone());
        replies.push(plane.stop_processor(&added.handle.expect("admitted")));
    }
    gate.open();
    let ids: Vec<Option<u64>> = replies
        .iter()
        .map(|reply| reply.wait_for(WAIT).expect("answered").request_id)
        .collect();
    let group = plane.group("pricing").expect("group");
    let decided: Vec<Option<u64>> = group
        .audit()
        .records()
        .into_iter()
        .filter(|r| r.record == mongoose_audit::RecordType::Input && ids.contains(&r.request_id))
        .map(|r| r.request_id)
        .collect();
    assert_eq!(
        decided, ids,
        "inputs in the order the requests were admitted"
    );
    for reply in &replies {
        assert!(reply.try_get().expect("answered").applied());
    }
}

// book: guarantees/control-plane.md: queued adds never run
#[test]
fn a_request_queued_when_the_group_closes_is_answered_not_running() {
    let (plane, numbers, _) = plane_with_feed();
    let gate = block_group(&plane, &numbers, "pricing");
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    let queued = plane.add_processor("pricing", "late", move || {
        flag.store(true, Ordering::SeqCst);
        Scripted::new("late", &new_log())
    });
    assert!(queued.handle.is_some(), "admitted");
    let group = plane.group("pricing").expect("group");
    group.close();
    gate.open();
    let reply = queued.reply.wait_for(WAIT).expect("answered");
    assert_eq!(
        (reply.outcome, reply.kind),
        (ReplyOutcome::NotRunning, FailureKind::FailedShutdown)
    );
    assert_eq!(reply.reason, "group closed");
    assert!(group.await_closed(Instant::now() + WAIT));
    assert!(!ran.load(Ordering::SeqCst), "the supplier never ran");
    assert_eq!(group.state(), GroupState::Closed);
    // after close, a new request is answered NOT_RUNNING without reaching the group
    let after = plane.add_processor("pricing", "later", || Scripted::new("x", &new_log()));
    assert_eq!(
        after.reply.try_get().expect("at once").outcome,
        ReplyOutcome::NotRunning
    );
}

// book: guarantees/control-plane.md: a never-started group's queued adds answer NOT_RUNNING
#[test]
fn closing_a_group_that_never_started_answers_its_queued_adds_without_running_suppliers() {
    let plane = ControlPlane::new_unstarted(config(), Arc::new(MemoryFeeds::default()));
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    let queued = plane.add_processor("pricing", "p", move || {
        flag.store(true, Ordering::SeqCst);
        Scripted::new("p", &new_log()).no_feed()
    });
    assert!(plane.close_groups(Instant::now() + WAIT).is_empty());
    let reply = queued.reply.wait_for(WAIT).expect("answered");
    assert_eq!(reply.outcome, ReplyOutcome::NotRunning);
    assert!(!ran.load(Ordering::SeqCst));
}

// book: guarantees/control-plane.md: a group that dies answers FAILED
#[test]
fn a_request_queued_when_the_group_dies_is_answered_failed() {
    let (plane, numbers, _) = plane_with_feed();
    let gate = block_group(&plane, &numbers, "pricing");
    let first = plane.add_processor("pricing", "a", || Scripted::new("a", &new_log()).no_feed());
    let second = plane.add_processor("pricing", "b", || Scripted::new("b", &new_log()).no_feed());
    let group = plane.group("pricing").expect("group");
    group.inject_control_fault();
    gate.open();
    let in_flight = first.reply.wait_for(WAIT).expect("answered");
    assert_eq!(
        (in_flight.outcome, in_flight.kind),
        (ReplyOutcome::Failed, FailureKind::FailedRule)
    );
    let queued = second.reply.wait_for(WAIT).expect("answered");
    assert_eq!(
        (queued.outcome, queued.kind),
        (ReplyOutcome::Failed, FailureKind::FailedDead)
    );
    assert!(
        queued.reason.starts_with("group died:"),
        "{}",
        queued.reason
    );
    assert!(group.await_closed(Instant::now() + WAIT));
    assert_eq!(group.state(), GroupState::Dead);
    // containment: a dead control plane fences every processor, keeping names
    let status = group.status();
    assert!(status.running.is_empty());
    assert!(status
        .quarantined
        .iter()
        .any(|p| p.name == "blocker" && p.reason.starts_with("group died:")));
    assert!(plane.processor_handle("pricing", "blocker").is_some());
    let refused = plane.add_processor("pricing", "c", || Scripted::new("c", &new_log()));
    let reply = refused.reply.try_get().expect("at once");
    assert_eq!(
        (reply.outcome, reply.kind),
        (ReplyOutcome::NotRunning, FailureKind::FailedDead)
    );
}

// book: guarantees/control-plane.md: a full mailbox on an agent thread is refused at once
#[test]
fn a_full_mailbox_on_an_agent_thread_is_refused_at_once() {
    let (plane, numbers, _) = plane_with_feed();
    group_with_mailbox(&plane, "pricing", 1);
    let gate = block_group(&plane, &numbers, "pricing");
    let filler = plane.add_processor("pricing", "filler", || {
        Scripted::new("f", &new_log()).no_feed()
    });
    assert!(filler.handle.is_some());
    let plane = Arc::new(plane);
    let on_agent = Arc::clone(&plane);
    let (stage, void, wait_form) = std::thread::spawn(move || {
        let _agent = agent::mark_current_thread("another-group");
        let stage = on_agent.add_processor("pricing", "x", || Scripted::new("x", &new_log()));
        let void = on_agent.add_event_processor("pricing", "y", || Scripted::new("y", &new_log()));
        let wait_form = on_agent.stop_processor_wait("pricing", "filler", WAIT);
        (stage, void, wait_form)
    })
    .join()
    .expect("ran");
    let reply = stage.reply.try_get().expect("refused at once");
    assert_eq!(
        (reply.outcome, reply.kind),
        (ReplyOutcome::Refused, FailureKind::RefusedAdmission)
    );
    assert_eq!(reply.reason, "mailbox full");
    assert!(matches!(
        void,
        Err(ControlError::MailboxFull { capacity: 1, .. })
    ));
    assert_eq!(wait_form.expect("a reply").reason, "mailbox full");
    // refusal released the names
    assert!(plane.processor_handle("pricing", "x").is_none());
    assert!(plane.processor_handle("pricing", "y").is_none());
    gate.open();
}

// book: guarantees/control-plane.md: an expired full-mailbox admission is REFUSED
#[test]
fn a_full_mailbox_admission_that_expires_is_refused_and_never_applies() {
    let (plane, numbers, _) = plane_with_feed();
    group_with_mailbox(&plane, "pricing", 1);
    let gate = block_group(&plane, &numbers, "pricing");
    let filler = plane.add_processor("pricing", "filler", || {
        Scripted::new("f", &new_log()).no_feed()
    });
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    let error = plane
        .add_event_processor("pricing", "late", move || {
            flag.store(true, Ordering::SeqCst);
            Scripted::new("late", &new_log()).no_feed()
        })
        .expect_err("backs off until the 200 ms full-mailbox timeout");
    assert!(matches!(error, ControlError::MailboxFull { .. }));
    assert!(
        plane.processor_handle("pricing", "late").is_none(),
        "name released"
    );
    let reply = plane
        .stop_processor_wait("pricing", "filler", Duration::from_millis(50))
        .expect("refused");
    assert_eq!(
        (reply.kind, reply.reason.as_str()),
        (
            FailureKind::RefusedDeadline,
            "not admitted within its deadline: mailbox full"
        )
    );
    gate.open();
    assert!(filler.reply.wait_for(WAIT).expect("added").applied());
    assert!(wait_until(|| plane
        .group_status("pricing")
        .expect("status")
        .mailbox_depth
        == 0));
    assert!(!ran.load(Ordering::SeqCst), "the refused add never applies");
    assert!(
        plane.processor_handle("pricing", "filler").is_some(),
        "the refused stop stopped nothing"
    );
}

// book: guarantees/control-plane.md: a sender backing off leaves when a stop begins
#[test]
fn a_sender_backing_off_on_a_full_mailbox_leaves_at_once_when_the_server_begins_to_stop() {
    let (plane, numbers, _) = plane_with_feed();
    plane
        .create_group(
            "pricing",
            GroupOptions {
                mailbox_capacity: 1,
                idle: IdleStrategy::SleepingMillis(1),
                full_mailbox_timeout: WAIT,
                ..GroupOptions::default()
            },
        )
        .expect("group");
    let gate = block_group(&plane, &numbers, "pricing");
    plane.add_processor("pricing", "filler", || {
        Scripted::new("f", &new_log()).no_feed()
    });
    let plane = Arc::new(plane);
    let sender = Arc::clone(&plane);
    let backing_off = std::thread::spawn(move || {
        sender.add_event_processor("pricing", "late", || {
            Scripted::new("late", &new_log()).no_feed()
        })
    });
    assert!(
        wait_until(|| plane.processor_handle("pricing", "late").is_some()),
        "reserved while backing off"
    );
    plane.begin_stopping();
    let result = backing_off.join().expect("returned");
    assert!(
        matches!(result, Err(ControlError::ServerStopping)),
        "{result:?}"
    );
    assert!(
        plane.processor_handle("pricing", "late").is_none(),
        "its name released"
    );
    gate.open();
}

// book: guarantees/control-plane.md: a void call that times out still applies
#[test]
fn a_void_call_that_times_out_returns_and_the_request_still_applies() {
    let feeds = MemoryFeeds::default();
    let numbers = feeds.feed::<u64>("numbers");
    let plane = ControlPlane::new(
        ControlConfig {
            control_wait: Duration::from_millis(50),
            ..config()
        },
        Arc::new(feeds),
    );
    let gate = block_group(&plane, &numbers, "pricing");
    let log = new_log();
    let inner = Arc::clone(&log);
    plane
        .add_event_processor("pricing", "slow", move || {
            Scripted::new("slow", &inner).no_feed()
        })
        .expect("times out after admission and returns normally");
    assert_eq!(
        count(&log, "slow:start-thread:pricing"),
        0,
        "not applied yet"
    );
    gate.open();
    assert!(
        wait_until(|| count(&log, "slow:start-thread:pricing") == 1),
        "the add still applies"
    );
}

// book: guarantees/control-plane.md: a processor may stop itself
#[test]
fn a_processor_stopping_itself_from_a_handler_is_applied_at_the_next_drain() {
    let (plane, numbers, _) = plane_with_feed();
    let plane = Arc::new(plane);
    let log = new_log();
    let inner = Arc::clone(&log);
    let control = Arc::downgrade(&plane);
    let outcome = Arc::new(Mutex::new(None));
    let seen = Arc::clone(&outcome);
    let added = plane.add_processor("pricing", "quitter", move || {
        Scripted::new("quitter", &inner).on_item(move |_, item| {
            if item == 1 {
                if let Some(plane) = control.upgrade() {
                    // on its own agent thread: queued, no wait, no deadlock
                    *seen.lock() = Some(plane.stop_processor_by_name("pricing", "quitter").is_ok());
                }
            }
            Ok(())
        })
    });
    added.reply.wait_for(WAIT).expect("added");
    numbers.publish(1);
    assert!(wait_until(|| count(&log, "quitter:stop") == 1));
    assert_eq!(*outcome.lock(), Some(true));
    assert_eq!(count(&log, "quitter:1"), 1);
    assert!(wait_until(|| plane
        .processor_handle("pricing", "quitter")
        .is_none()));
}

// book: guarantees/control-plane.md, failure modes: full mailbox refuses a handle stop
#[test]
fn a_handle_stop_into_a_full_mailbox_is_refused_and_the_processor_keeps_running() {
    let (plane, numbers, _) = plane_with_feed();
    group_with_mailbox(&plane, "pricing", 1);
    let log = new_log();
    let inner = Arc::clone(&log);
    let added = plane.add_processor("pricing", "p", move || Scripted::new("p", &inner));
    added.reply.wait_for(WAIT).expect("added");
    let gate = block_group(&plane, &numbers, "pricing");
    plane.add_processor("pricing", "filler", || {
        Scripted::new("f", &new_log()).no_feed()
    });
    let reply = plane
        .stop_processor(added.handle.as_ref().expect("handle"))
        .try_get()
        .expect("refused at once");
    assert_eq!(
        (reply.outcome, reply.kind),
        (ReplyOutcome::Refused, FailureKind::RefusedAdmission)
    );
    let void = plane.stop_processor_by_name("pricing", "p");
    assert!(
        matches!(void, Err(ControlError::MailboxFull { .. })),
        "{void:?}"
    );
    gate.open();
    numbers.publish(5);
    assert!(wait_until(|| count(&log, "p:5") == 1));
    assert!(
        plane.processor_handle("pricing", "p").is_some(),
        "name stays reserved"
    );
}

// book: guarantees/control-plane.md
#[test]
fn reply_callbacks_of_a_group_run_on_reply_executor_threads_never_on_the_agent_thread() {
    let (plane, numbers, _) = plane_with_feed();
    let gate = block_group(&plane, &numbers, "pricing");
    let added = plane.add_processor("pricing", "p", || Scripted::new("p", &new_log()).no_feed());
    let (tx, rx) = std::sync::mpsc::channel();
    added.reply.on_reply(move |_| {
        let _ = tx.send((
            std::thread::current().name().map(str::to_owned),
            agent::is_agent_thread(),
        ));
    });
    gate.open();
    let (name, on_agent) = rx.recv_timeout(WAIT).expect("callback ran");
    assert!(name
        .expect("named")
        .starts_with("mongoose-control-replies-"));
    assert!(!on_agent);
}

// book: guarantees/control-plane.md: waiting from a handler is an error, not a deadlock
#[test]
fn waiting_on_a_reply_from_a_handler_is_refused_instead_of_deadlocking() {
    let (plane, numbers, _) = plane_with_feed();
    let plane = Arc::new(plane);
    let control = Arc::downgrade(&plane);
    let result = Arc::new(Mutex::new(None));
    let seen = Arc::clone(&result);
    let added = plane.add_processor("pricing", "waiter", move || {
        Scripted::new("waiter", &new_log()).on_item(move |_, _| {
            if let Some(plane) = control.upgrade() {
                let child = plane.add_processor("pricing", "child", || {
                    Scripted::new("c", &new_log()).no_feed()
                });
                *seen.lock() = Some(
                    child
                        .reply
                        .wait_for(WAIT)
                        .map(|_| ())
                        .map_err(|e| e.to_string()),
                );
            }
            Ok(())
        })
    });
    added.reply.wait_for(WAIT).expect("added");
    numbers.publish(1);
    assert!(wait_until(|| result.lock().is_some()));
    let outcome = result.lock().clone().expect("set");
    assert!(outcome
        .expect_err("refused")
        .contains("agent threads never wait"));
    assert!(wait_until(|| plane
        .processor_handle("pricing", "child")
        .is_some()));
}

// Shutdown phase 3 (the group side): drain events already queued to processors
#[test]
fn a_group_reports_drained_only_once_its_queued_items_were_dispatched() {
    let (plane, numbers, _) = plane_with_feed();
    let log = new_log();
    let inner = Arc::clone(&log);
    plane
        .add_processor("pricing", "p", move || Scripted::new("p", &inner))
        .reply
        .wait_for(WAIT)
        .expect("added");
    let gate = block_group(&plane, &numbers, "pricing");
    for item in 1..=3 {
        numbers.publish(item);
    }
    let group = plane.group("pricing").expect("group");
    assert!(wait_until(|| group.status().queued_items >= 3));
    assert!(
        !group.await_drained(Instant::now() + Duration::from_millis(20)),
        "blocked: not drained"
    );
    gate.open();
    assert!(group.await_drained(Instant::now() + WAIT));
    assert_eq!(count(&log, "p:3"), 1);
}

// Threading rules: "Called from its own stop(), it joins the release already in progress"
#[test]
fn a_processor_stopping_itself_from_its_own_stop_joins_the_release_in_progress() {
    let (plane, _numbers, _) = plane_with_feed();
    let plane = Arc::new(plane);
    let control = Arc::downgrade(&plane);
    let from_stop = Arc::new(Mutex::new(None));
    let seen = Arc::clone(&from_stop);
    struct SelfStopper {
        control: std::sync::Weak<ControlPlane>,
        seen: Arc<Mutex<Option<bool>>>,
    }
    impl mongoose_core::Processor for SelfStopper {
        fn stop(&mut self) -> Result<(), mongoose_core::ProcessorError> {
            if let Some(plane) = self.control.upgrade() {
                *self.seen.lock() = Some(plane.stop_processor_by_name("pricing", "me").is_ok());
            }
            Ok(())
        }
    }
    let added = plane.add_processor("pricing", "me", move || SelfStopper { control, seen });
    added.reply.wait_for(WAIT).expect("added");
    let reply = plane
        .stop_processor(added.handle.as_ref().expect("handle"))
        .wait_for(WAIT)
        .expect("stopped");
    assert_eq!(reply.reason, "stopped");
    assert_eq!(
        *from_stop.lock(),
        Some(true),
        "queued from its own stop(), no wait"
    );
    let group = plane.group("pricing").expect("group");
    assert!(wait_until(|| group
        .audit()
        .records()
        .iter()
        .any(|r| r.record == mongoose_audit::RecordType::Reply
            && r.reason.as_deref() == Some("alreadyStopped"))));
}

// Threading rules / idle strategies: every strategy runs the duty cycle and wakes for control
#[test]
fn every_idle_strategy_runs_the_duty_cycle_and_answers_control_requests() {
    let (plane, numbers, _) = plane_with_feed();
    let strategies = [
        IdleStrategy::BusySpin,
        IdleStrategy::Yield,
        IdleStrategy::SleepingMillis(5),
        IdleStrategy::default(),
    ];
    let log = new_log();
    for (index, idle) in strategies.into_iter().enumerate() {
        let group = format!("g{index}");
        plane
            .create_group(
                &group,
                GroupOptions {
                    idle,
                    ..GroupOptions::default()
                },
            )
            .expect("group");
        let inner = Arc::clone(&log);
        let name = format!("p{index}");
        let label = name.clone();
        let reply = plane
            .add_processor(&group, &name, move || Scripted::new(&label, &inner))
            .reply
            .wait_for(WAIT)
            .expect("answered");
        assert!(reply.applied());
    }
    numbers.publish(1);
    for index in 0..4 {
        assert!(wait_until(|| count(&log, &format!("p{index}:1")) == 1));
    }
    // BusySpin keeps a core busy: close these groups now
    assert!(plane.close_groups(Instant::now() + WAIT).is_empty());
}
