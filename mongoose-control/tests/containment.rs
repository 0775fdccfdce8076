//! Failure containment at the dispatch boundary, retries and timers
//! (book: guarantees/control-plane.md;
//! book: guarantees/completion-hooks.md).

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use mongoose_audit::RecordType;
use mongoose_control::{ControlPlane, GroupOptions, IdleStrategy, ReplyOutcome, RetryPolicy};
use mongoose_core::{agent, FailureKind, ProcessorError};

fn group_with_retries(plane: &ControlPlane, max_retries: u32) {
    plane
        .create_group(
            "pricing",
            GroupOptions {
                idle: IdleStrategy::SleepingMillis(1),
                retry: RetryPolicy {
                    max_retries,
                    initial_backoff: Duration::from_millis(1),
                    max_backoff: Duration::from_millis(5),
                },
                ..GroupOptions::default()
            },
        )
        .expect("group");
}

fn add(plane: &ControlPlane, name: &str, processor: Scripted) {
    let reply = plane
        .add_processor("pricing", name, move || processor)
        .reply
        .wait_for(WAIT)
        .expect("reply");
    assert!(reply.applied(), "{reply:?}");
}

// containment: "removes that processor from every input reader ... keeps healthy processors running"
#[test]
fn a_panicking_processor_is_quarantined_and_its_peers_keep_running() {
    let (plane, numbers, feeds) = plane_with_feed();
    let log = new_log();
    add(&plane, "before", Scripted::new("before", &log));
    add(
        &plane,
        "bomb",
        Scripted::new("bomb", &log).on_item(|_, item| {
            if item == 2 {
                panic!("boom on {item}");
            }
            Ok(())
        }),
    );
    add(&plane, "after", Scripted::new("after", &log));
    for item in 1..=3 {
        numbers.publish(item);
    }
    assert!(wait_until(|| count(&log, "after:3") == 1));
    // the group publishes its status at the end of its duty cycle
    assert!(wait_until(|| plane
        .group_status("pricing")
        .is_some_and(|status| !status.quarantined.is_empty())));
    // the peers got every item exactly once, including the one that blew up
    for item in 1..=3 {
        assert_eq!(count(&log, &format!("before:{item}")), 1);
        assert_eq!(count(&log, &format!("after:{item}")), 1);
    }
    assert_eq!(count(&log, "bomb:1"), 1);
    assert_eq!(count(&log, "bomb:3"), 0, "removed from the reader");
    let status = plane.group_status("pricing").expect("status");
    assert_eq!(status.quarantined.len(), 1);
    assert_eq!(status.quarantined[0].name, "bomb");
    assert!(status.quarantined[0].reason.contains("boom on 2"));
    assert!(
        status.running.iter().all(|p| p.name != "bomb"),
        "running excludes it"
    );
    assert_eq!(
        count(&log, "bomb:stop"),
        0,
        "stop() is not invoked after quarantine"
    );
    assert_eq!(
        feeds.subscriptions("numbers", "pricing"),
        2,
        "its subscription left the feed"
    );
    let records = plane.group("pricing").expect("group").audit().records();
    let quarantine = records
        .iter()
        .find(|r| r.record == RecordType::Fallback && r.what == "ProcessorQuarantined")
        .expect("a quarantine record");
    assert_eq!(quarantine.kind, Some(FailureKind::Quarantined));
    assert_eq!(quarantine.name.as_deref(), Some("bomb"));
}

// containment: "It retains ownership of the failed instance and its name ... Explicit stop replies are FAILED"
#[test]
fn a_processor_whose_handler_returns_an_error_is_quarantined_keeping_its_name() {
    let (plane, numbers, _) = plane_with_feed();
    let log = new_log();
    let added = plane.add_processor("pricing", "failing", {
        let log = Arc::clone(&log);
        move || Scripted::new("failing", &log).on_item(|_, _| Err(ProcessorError::new("bad price")))
    });
    added.reply.wait_for(WAIT).expect("added");
    numbers.publish(1);
    assert!(wait_until(|| !plane
        .group_status("pricing")
        .expect("status")
        .quarantined
        .is_empty()));
    let status = plane.group_status("pricing").expect("status");
    assert_eq!(status.quarantined[0].reason, "bad price");
    let re_add = plane.add_processor("pricing", "failing", || Scripted::new("x", &new_log()));
    assert_eq!(
        re_add.reply.try_get().expect("at once").reason,
        "name in use"
    );
    let stop = plane
        .stop_processor(added.handle.as_ref().expect("handle"))
        .wait_for(WAIT)
        .expect("answered");
    assert_eq!(
        (stop.outcome, stop.kind),
        (ReplyOutcome::Failed, FailureKind::Quarantined)
    );
    assert!(
        plane.processor_handle("pricing", "failing").is_some(),
        "name still owned"
    );
}

// containment: "Subscribers before the thrower, which handled the input, never receive it again"
#[test]
fn a_retry_safe_processor_is_retried_alone_and_peers_before_it_never_receive_the_item_again() {
    let (plane, numbers, _) = plane_with_feed();
    group_with_retries(&plane, 5);
    let log = new_log();
    let failures = Arc::new(AtomicU32::new(0));
    add(&plane, "before", Scripted::new("before", &log));
    let counter = Arc::clone(&failures);
    add(
        &plane,
        "flaky",
        Scripted::new("flaky", &log)
            .retry_safe()
            .on_item(move |_, _| {
                // fails twice, then succeeds: retried on later duty cycles
                if counter.fetch_add(1, Ordering::SeqCst) < 2 {
                    Err(ProcessorError::new("transient"))
                } else {
                    Ok(())
                }
            }),
    );
    add(&plane, "after", Scripted::new("after", &log));
    numbers.publish(9);
    assert!(wait_until(|| count(&log, "after:9") == 1));
    assert_eq!(count(&log, "before:9"), 1, "never given the item again");
    assert_eq!(count(&log, "flaky:9"), 1);
    assert_eq!(failures.load(Ordering::SeqCst), 3);
    assert!(plane
        .group_status("pricing")
        .expect("status")
        .quarantined
        .is_empty());
}

// book: guarantees/completion-hooks.md: exhausted retries skip the item for that processor alone
#[test]
fn a_retry_safe_processor_whose_retries_run_out_is_skipped_and_the_peers_after_it_still_get_the_item(
) {
    let (plane, numbers, _) = plane_with_feed();
    group_with_retries(&plane, 2);
    let log = new_log();
    let attempts = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&attempts);
    add(
        &plane,
        "hopeless",
        Scripted::new("hopeless", &log)
            .retry_safe()
            .on_item(move |_, item| {
                if item == 1 {
                    counter.fetch_add(1, Ordering::SeqCst);
                    return Err(ProcessorError::new("never"));
                }
                Ok(())
            }),
    );
    add(&plane, "after", Scripted::new("after", &log));
    numbers.publish(1);
    numbers.publish(2);
    assert!(wait_until(|| count(&log, "after:2") == 1));
    assert_eq!(count(&log, "after:1"), 1);
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        3,
        "the first try and two retries"
    );
    assert_eq!(
        count(&log, "hopeless:2"),
        1,
        "kept running: retry-safe, not quarantined"
    );
    assert!(plane
        .group_status("pricing")
        .expect("status")
        .quarantined
        .is_empty());
}

// containment: a retry never sleeps on the agent thread: the group answers control meanwhile
#[test]
fn the_backoff_of_a_retry_never_blocks_the_groups_control_mailbox() {
    let (plane, numbers, _) = plane_with_feed();
    plane
        .create_group(
            "pricing",
            GroupOptions {
                idle: IdleStrategy::SleepingMillis(1),
                retry: RetryPolicy {
                    max_retries: 1,
                    initial_backoff: WAIT * 4,
                    max_backoff: WAIT * 4,
                },
                ..GroupOptions::default()
            },
        )
        .expect("group");
    let log = new_log();
    add(
        &plane,
        "slow-retry",
        Scripted::new("slow-retry", &log)
            .retry_safe()
            .on_item(|_, _| Err(ProcessorError::new("later"))),
    );
    numbers.publish(1);
    assert!(wait_until(|| plane
        .group_status("pricing")
        .expect("status")
        .queued_items
        == 1));
    // the item waits for a retry far in the future; control requests are still decided
    let reply = plane
        .add_processor("pricing", "other", || {
            Scripted::new("other", &new_log()).no_feed()
        })
        .reply
        .wait_for(WAIT)
        .expect("answered while the retry waits");
    assert!(reply.applied());
}

// containment: "cancels its timers"; timers run on the group thread
#[test]
fn a_timer_fires_on_the_group_thread_and_never_after_its_processor_is_quarantined() {
    let (plane, numbers, _) = plane_with_feed();
    let log = new_log();
    let fired_on = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let threads = Arc::clone(&fired_on);
    add(
        &plane,
        "ticker",
        Scripted::new("ticker", &log)
            .on_item(|_, item| {
                match item {
                    1 => assert!(schedule(Duration::from_millis(1), 1)),
                    2 => {
                        assert!(schedule(Duration::from_millis(300), 2));
                        return Err(ProcessorError::new("quarantine me"));
                    }
                    _ => {}
                }
                Ok(())
            })
            .on_timer(move |_, _| {
                threads.lock().push(agent::current_agent_name());
                Ok(())
            }),
    );
    numbers.publish(1);
    assert!(wait_until(|| count(&log, "ticker:timer:1") == 1));
    assert_eq!(
        fired_on.lock().first().cloned().flatten().as_deref(),
        Some("pricing")
    );
    numbers.publish(2);
    assert!(wait_until(|| !plane
        .group_status("pricing")
        .expect("status")
        .quarantined
        .is_empty()));
    // a canary timer of a healthy processor, scheduled later than the cancelled one
    let canary = new_log();
    add(
        &plane,
        "canary",
        Scripted::new("canary", &canary).on_item(|_, _| {
            assert!(schedule(Duration::from_millis(600), 3));
            Ok(())
        }),
    );
    numbers.publish(3);
    assert!(wait_until(|| count(&canary, "canary:timer:3") == 1));
    assert_eq!(
        count(&log, "ticker:timer:2"),
        0,
        "cancelled by the quarantine"
    );
}

// timers: cancelled on processor stop
#[test]
fn a_stopped_processors_timers_never_fire() {
    let (plane, numbers, _) = plane_with_feed();
    let log = new_log();
    let added = plane.add_processor("pricing", "ticker", {
        let log = Arc::clone(&log);
        move || {
            Scripted::new("ticker", &log).on_item(|_, _| {
                assert!(schedule(Duration::from_millis(200), 7));
                Ok(())
            })
        }
    });
    added.reply.wait_for(WAIT).expect("added");
    numbers.publish(1);
    assert!(wait_until(|| count(&log, "ticker:1") == 1));
    plane
        .stop_processor(added.handle.as_ref().expect("handle"))
        .wait_for(WAIT)
        .expect("stopped");
    let canary = new_log();
    add(
        &plane,
        "canary",
        Scripted::new("canary", &canary).on_item(|_, _| {
            assert!(schedule(Duration::from_millis(400), 8));
            Ok(())
        }),
    );
    numbers.publish(2);
    assert!(wait_until(|| count(&canary, "canary:timer:8") == 1));
    assert_eq!(count(&log, "ticker:timer:7"), 0);
}

// containment: a failing timer callback quarantines a non-retry-safe processor
#[test]
fn a_timer_callback_that_fails_quarantines_its_processor() {
    let (plane, numbers, _) = plane_with_feed();
    let log = new_log();
    add(
        &plane,
        "ticker",
        Scripted::new("ticker", &log)
            .on_item(|_, _| {
                schedule(Duration::from_millis(1), 1);
                Ok(())
            })
            .on_timer(|_, _| Err(ProcessorError::new("timer broke"))),
    );
    numbers.publish(1);
    assert!(wait_until(|| !plane
        .group_status("pricing")
        .expect("status")
        .quarantined
        .is_empty()));
    assert!(
        plane.group_status("pricing").expect("status").quarantined[0]
            .reason
            .contains("timer broke")
    );
}

struct DropWatch {
    dropped: Arc<std::sync::atomic::AtomicBool>,
    stopped: Arc<std::sync::atomic::AtomicBool>,
}

impl DropWatch {
    fn on_number(&mut self, _n: &u64) -> Result<(), ProcessorError> {
        panic!("generated graph wedged")
    }
}

impl mongoose_core::Processor for DropWatch {
    fn start(
        &mut self,
        context: &mut mongoose_core::StartContext<'_>,
    ) -> Result<(), ProcessorError> {
        context.subscribe("numbers", DropWatch::on_number)
    }
    fn stop(&mut self) -> Result<(), ProcessorError> {
        self.stopped.store(true, Ordering::SeqCst);
        Ok(())
    }
}

impl Drop for DropWatch {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

// containment: "retains ownership of the failed instance ... Generated stop() and tearDown() are not invoked after quarantine"
#[test]
fn a_quarantined_processor_is_neither_stopped_nor_dropped_when_its_group_closes() {
    let (plane, numbers, _) = plane_with_feed();
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (d, s) = (Arc::clone(&dropped), Arc::clone(&stopped));
    plane
        .add_processor("pricing", "wedged", move || DropWatch {
            dropped: d,
            stopped: s,
        })
        .reply
        .wait_for(WAIT)
        .expect("added");
    numbers.publish(1);
    assert!(wait_until(|| !plane
        .group_status("pricing")
        .expect("status")
        .quarantined
        .is_empty()));
    let group = plane.group("pricing").expect("group");
    group.close();
    assert!(group.await_closed(std::time::Instant::now() + WAIT));
    assert!(!stopped.load(Ordering::SeqCst));
    assert!(
        !dropped.load(Ordering::SeqCst),
        "the group keeps owning the instance"
    );
    assert_eq!(
        group.status().quarantined[0].name,
        "wedged",
        "status keeps the quarantine"
    );
}
