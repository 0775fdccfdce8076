//! Groups reading feeds of the delivery engine (book: guarantees/control-plane.md; book: guarantees/completion-hooks.md).

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::*;
use mongoose_control::{ControlConfig, ControlPlane, DeliveryFeeds, ReplyOutcome};
use mongoose_core::{
    CompletionKey, Delivery, DeliveryContext, FailureKind, Processor, ProcessorError, SourceOutput,
    StartContext,
};
use mongoose_delivery::{Feed, FeedRegistry, Publisher};

fn plane_over(feeds: &DeliveryFeeds) -> ControlPlane {
    ControlPlane::new(ControlConfig { ..config() }, Arc::new(feeds.clone()))
}

fn lines_feed() -> (DeliveryFeeds, Arc<Publisher<String, u64>>) {
    let feeds = DeliveryFeeds::new(FeedRegistry::default());
    let lines: Arc<Publisher<String, u64>> = Feed::builder("lines").queue_capacity(64).build();
    feeds.register(Arc::clone(&lines)).expect("registered");
    lines.start_complete();
    (feeds, lines)
}

struct Lines {
    name: &'static str,
    log: Log,
    fail_on: Option<&'static str>,
}

impl Lines {
    #[allow(clippy::ptr_arg)] // a feed of String hands handlers &String
    fn on_line(&mut self, line: &String) -> Result<(), ProcessorError> {
        if self.fail_on == Some(line.as_str()) {
            return Err(ProcessorError::new(format!("cannot take {line}")));
        }
        if DeliveryContext::current().is_some() {
            DeliveryContext::on_complete(CompletionKey::SAVE);
        }
        self.log.lock().push(format!("{}:{line}", self.name));
        Ok(())
    }
}

impl Processor for Lines {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("lines", Lines::on_line)
    }

    fn on_delivery_complete(
        &mut self,
        _key: CompletionKey,
        delivery: &Delivery,
    ) -> Result<(), ProcessorError> {
        self.log.lock().push(format!(
            "{}:complete@{}",
            self.name,
            delivery.position().offset
        ));
        Ok(())
    }
}

struct Numbers;
impl Numbers {
    fn on_number(&mut self, _n: &u64) -> Result<(), ProcessorError> {
        Ok(())
    }
}
impl Processor for Numbers {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("lines", Numbers::on_number)
    }
}

// DESIGN "Processors": a mismatch fails at subscription naming the feed and both types
#[test]
fn a_subscription_to_a_feed_of_another_type_fails_naming_the_feed_and_both_types() {
    let (feeds, _lines) = lines_feed();
    let plane = plane_over(&feeds);
    let reply = plane
        .add_processor("pricing", "numbers", || Numbers)
        .reply
        .wait_for(WAIT)
        .expect("answered");
    assert_eq!(
        (reply.outcome, reply.kind),
        (ReplyOutcome::Failed, FailureKind::FailedEffect)
    );
    assert!(reply.reason.contains("'lines'"), "{}", reply.reason);
    assert!(reply.reason.contains("String"), "{}", reply.reason);
    assert!(reply.reason.contains("u64"), "{}", reply.reason);
}

// book: guarantees/completion-hooks.md: completions run after the dispatch, with the delivery's position
#[test]
fn a_group_dispatches_positioned_items_to_every_processor_and_runs_completions_after_them() {
    let (feeds, lines) = lines_feed();
    let plane = plane_over(&feeds);
    let log = new_log();
    for name in ["a", "b"] {
        let log = Arc::clone(&log);
        let reply = plane
            .add_processor("pricing", name, move || Lines {
                name,
                log,
                fail_on: None,
            })
            .reply
            .wait_for(WAIT)
            .expect("added");
        assert!(reply.applied(), "{reply:?}");
    }
    assert!(lines.try_publish("one".to_owned(), 4).is_published());
    assert!(wait_until(|| log.lock().len() == 4));
    assert_eq!(
        *log.lock(),
        vec!["a:one", "b:one", "a:complete@4", "b:complete@4"]
    );
}

// containment: a quarantined processor leaves the reader; the peer keeps reading the feed
#[test]
fn a_quarantined_processor_leaves_the_delivery_queue_and_its_peer_keeps_reading() {
    let (feeds, lines) = lines_feed();
    let plane = plane_over(&feeds);
    let log = new_log();
    for (name, fail_on) in [("bad", Some("two")), ("good", None)] {
        let log = Arc::clone(&log);
        plane
            .add_processor("pricing", name, move || Lines { name, log, fail_on })
            .reply
            .wait_for(WAIT)
            .expect("added");
    }
    for (line, position) in [("one", 1u64), ("two", 2), ("three", 3)] {
        assert!(lines.try_publish(line.to_owned(), position).is_published());
    }
    assert!(wait_until(|| log
        .lock()
        .iter()
        .any(|e| e == "good:complete@3")));
    let entries = log.lock().clone();
    assert!(
        !entries.iter().any(|e| e == "bad:two" || e == "bad:three"),
        "{entries:?}"
    );
    assert!(
        !entries.iter().any(|e| e == "bad:complete@2"),
        "a quarantined processor runs none of its completions"
    );
    assert_eq!(
        entries.iter().filter(|e| e.as_str() == "good:two").count(),
        1
    );
    // the group publishes its status at the end of its duty cycle
    assert!(wait_until(|| plane
        .group_status("pricing")
        .is_some_and(|status| !status.quarantined.is_empty())));
    let status = plane.group_status("pricing").expect("status");
    assert_eq!(status.quarantined[0].reason, "cannot take two");
}

// Shutdown: a closing group fences its queues and leaves the feed
#[test]
fn a_closed_group_leaves_its_delivery_queue() {
    let (feeds, lines) = lines_feed();
    let plane = plane_over(&feeds);
    let log = new_log();
    let inner = Arc::clone(&log);
    plane
        .add_processor("pricing", "a", move || Lines {
            name: "a",
            log: inner,
            fail_on: None,
        })
        .reply
        .wait_for(WAIT)
        .expect("added");
    assert_eq!(lines.status().subscribers.len(), 1);
    assert!(plane.close_groups(Instant::now() + WAIT).is_empty());
    assert!(
        lines.status().subscribers.is_empty(),
        "unsubscribed through the removed-consumer rules"
    );
    let group = plane.group("pricing").expect("group");
    assert_eq!(group.state(), mongoose_control::GroupState::Closed);
}

// Combined failure and overload contract: "Group status JSON includes overload states"
#[test]
fn group_status_shows_the_overload_state_and_backlog_of_its_delivery_queues() {
    let (feeds, lines) = lines_feed();
    let plane = plane_over(&feeds);
    let log = new_log();
    plane
        .add_processor("pricing", "a", move || Lines {
            name: "a",
            log,
            fail_on: None,
        })
        .reply
        .wait_for(WAIT)
        .expect("added");
    assert!(lines.try_publish("x".to_owned(), 1).is_published());
    let group = plane.group("pricing").expect("group");
    assert!(group.await_drained(Instant::now() + WAIT));
    let json = serde_json::to_value(group.status()).expect("json");
    assert_eq!(json["overload"][0]["feed"], "lines");
    assert_eq!(json["overload"][0]["state"], "UP");
    assert_eq!(json["queuedItems"], 0);
}

struct FlakySave {
    log: Log,
    failures_left: u32,
}

impl FlakySave {
    #[allow(clippy::ptr_arg)] // a feed of String hands handlers &String
    fn on_line(&mut self, line: &String) -> Result<(), ProcessorError> {
        DeliveryContext::on_complete(CompletionKey::SAVE);
        self.log.lock().push(format!("handled:{line}"));
        Ok(())
    }
}

impl Processor for FlakySave {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("lines", FlakySave::on_line)
    }

    fn on_delivery_complete(
        &mut self,
        _key: CompletionKey,
        delivery: &Delivery,
    ) -> Result<(), ProcessorError> {
        if self.failures_left > 0 {
            self.failures_left -= 1;
            return Err(ProcessorError::new("disk busy"));
        }
        self.log
            .lock()
            .push(format!("saved@{}", delivery.position().offset));
        Ok(())
    }
}

// book: guarantees/completion-hooks.md: "A callback that throws: retried alone ... the processors never given the item again"
#[test]
fn a_failing_completion_is_retried_alone_and_the_item_is_not_handled_again() {
    let (feeds, lines) = lines_feed();
    let plane = plane_over(&feeds);
    let log = new_log();
    let inner = Arc::clone(&log);
    plane
        .add_processor("pricing", "saver", move || FlakySave {
            log: inner,
            failures_left: 1,
        })
        .reply
        .wait_for(WAIT)
        .expect("added");
    assert!(lines.try_publish("one".to_owned(), 3).is_published());
    assert!(wait_until(|| log.lock().iter().any(|e| e == "saved@3")));
    assert_eq!(*log.lock(), vec!["handled:one", "saved@3"]);
    assert!(
        lines.status().lossless,
        "a callback that succeeds on retry lost nothing"
    );
    assert!(plane
        .group_status("pricing")
        .expect("status")
        .quarantined
        .is_empty());
}

/// Blocks inside its first line until the gate opens.
struct Held {
    gate: Gate,
    log: Log,
}

impl Held {
    #[allow(clippy::ptr_arg)] // a feed of String hands handlers &String
    fn on_line(&mut self, line: &String) -> Result<(), ProcessorError> {
        if line == "hold" {
            self.gate.enter_and_wait();
        }
        self.log.lock().push(line.clone());
        Ok(())
    }
}

impl Processor for Held {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("lines", Held::on_line)
    }
}

// book: guarantees/control-plane.md: "The first drop of each queue binding
// emits QueueDrop in the group's control fallback audit ... with feed, queue, group,
// sequence, count and wall-clock time. This is first-ever evidence for the lifetime of
// the queue binding, not a fresh record for every overload incident."
#[test]
fn the_first_drop_of_a_group_queue_leaves_one_queue_drop_record_in_its_control_audit() {
    let feeds = DeliveryFeeds::new(FeedRegistry::default());
    let lines: Arc<Publisher<String, u64>> = Feed::builder("lines")
        .queue_capacity(2)
        .overload(mongoose_core::OverloadSettings {
            spin_bound: std::time::Duration::ZERO,
            ..mongoose_core::OverloadSettings::drop_after_spin()
        })
        .build();
    feeds.register(Arc::clone(&lines)).expect("registered");
    lines.start_complete();
    let plane = plane_over(&feeds);
    let gate = Gate::default();
    let log = new_log();
    let (held_gate, held_log) = (gate.clone(), Arc::clone(&log));
    let reply = plane
        .add_processor("slow", "held", move || Held {
            gate: held_gate,
            log: held_log,
        })
        .reply
        .wait_for(WAIT)
        .expect("added");
    assert!(reply.applied(), "{reply:?}");
    lines.publish("hold".to_owned()).expect("published");
    assert!(gate.wait_entered(), "the group is held in its first line");
    // the queue holds 2 (the held line among them): the rest of each burst drops
    for burst in 0..2 {
        for index in 0..5 {
            lines
                .publish(format!("burst {burst} line {index}"))
                .expect("a drop is not an error");
        }
        if burst == 0 {
            gate.open();
        }
        assert!(
            wait_until(|| lines.status().drained),
            "the group drained burst {burst}"
        );
    }
    assert!(lines.status().dropped >= 2, "{:?}", lines.status());
    let records = plane.group("slow").expect("group").audit().records();
    let drops: Vec<_> = records
        .iter()
        .filter(|record| record.what == "QueueDrop")
        .collect();
    assert_eq!(drops.len(), 1, "one record per queue binding: {drops:?}");
    assert_eq!(drops[0].record, mongoose_audit::RecordType::Fallback);
    assert_eq!(drops[0].name.as_deref(), Some("lines"));
    let reason = drops[0].reason.as_deref().unwrap_or_default();
    assert!(
        reason.contains("feed lines")
            && reason.contains("group slow")
            && reason.contains("first drop at sequence"),
        "{reason}"
    );
}

// book: guarantees/control-plane.md, BLOCK_WITH_DEADLINE: "Any loss on a
// blocking queue latches it. The latch outlasts an unsubscribe: LATCHED→REMOVED, then
// REMOVED→LATCHED if the queue is re-added ... Each change also writes an OverloadState
// record to the group control audit."
#[test]
fn each_overload_state_change_of_a_group_queue_writes_an_overload_state_record() {
    let feeds = DeliveryFeeds::new(FeedRegistry::default());
    let lines: Arc<Publisher<String, u64>> = Feed::builder("lines")
        .queue_capacity(2)
        .overload(mongoose_core::OverloadSettings::block_with_deadline(
            std::time::Duration::from_millis(5),
        ))
        .build();
    feeds.register(Arc::clone(&lines)).expect("registered");
    lines.start_complete();
    let plane = plane_over(&feeds);
    let gate = Gate::default();
    let (held_gate, log) = (gate.clone(), new_log());
    let held_log = Arc::clone(&log);
    let added = plane.add_processor("slow", "held", move || Held {
        gate: held_gate,
        log: held_log,
    });
    assert!(added.reply.wait_for(WAIT).expect("added").applied());
    lines.publish("hold".to_owned()).expect("published");
    assert!(gate.wait_entered(), "the group is held in its first line");
    lines.publish("fits".to_owned()).expect("the second slot");
    let refused = lines.publish("refused".to_owned());
    assert!(refused.is_err(), "no room before the deadline: refused");
    gate.open();
    assert!(wait_until(|| lines.status().drained));
    let stopped = plane
        .stop_processor(added.handle.as_ref().expect("handle"))
        .wait_for(WAIT)
        .expect("stopped");
    assert!(stopped.applied(), "{stopped:?}");
    let again = plane.add_processor("slow", "again", || Held {
        gate: Gate::default(),
        log: new_log(),
    });
    assert!(again.reply.wait_for(WAIT).expect("re-added").applied());
    lines.clear_overload();
    let records = plane.group("slow").expect("group").audit().records();
    let changes: Vec<(String, String)> = records
        .iter()
        .filter(|record| record.what == "OverloadState")
        .map(|record| {
            (
                record.from.clone().unwrap_or_default(),
                record.to.clone().unwrap_or_default(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("UP", "LATCHED"),
        ("LATCHED", "REMOVED"),
        ("REMOVED", "LATCHED"),
        ("LATCHED", "UP"),
    ]
    .iter()
    .map(|(from, to)| (from.to_string(), to.to_string()))
    .collect();
    assert_eq!(changes, expected, "{records:#?}");
}
