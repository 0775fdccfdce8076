//! Processor-owned admin commands: registered in start, run through the group's control
//! mailbox on its thread, answered once with their output (book: running/record-and-replay.md: AdminInvoked, "A processor-owned admin command ran"; "Generated
//! processor failure containment": admin commands addressed to a removed route are
//! refused, "A command that ran and then failed still propagates its dispatch failure to
//! the host").

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use mongoose_audit::RecordType;
use mongoose_control::{ControlReply, ReplyOutcome};
use mongoose_core::{agent, FailureKind, Processor, ProcessorError, StartContext};

/// Sums the numbers it is given; its admin commands read and change the sum.
struct Summer {
    total: u64,
    items: u64,
    retry_safe: bool,
}

impl Summer {
    fn new() -> Self {
        Summer {
            total: 0,
            items: 0,
            retry_safe: false,
        }
    }

    fn on_number(&mut self, number: &u64) -> Result<(), ProcessorError> {
        self.total += number;
        self.items += 1;
        Ok(())
    }

    /// `total`: the sum, the items seen and the thread the command ran on.
    fn total(&mut self, _args: &[String]) -> Result<String, ProcessorError> {
        Ok(format!(
            "total {} after {} items on {}",
            self.total,
            self.items,
            agent::current_agent_name().unwrap_or_else(|| "no agent".into())
        ))
    }

    /// `add N`: adds N to the sum; an error for anything else.
    fn add(&mut self, args: &[String]) -> Result<String, ProcessorError> {
        let [by] = args else {
            return Err("usage: add N".into());
        };
        let by: u64 = by
            .parse()
            .map_err(|_| ProcessorError::new(format!("'{by}' is not a number")))?;
        self.total += by;
        Ok(self.total.to_string())
    }

    fn explode(&mut self, _args: &[String]) -> Result<String, ProcessorError> {
        panic!("the command exploded");
    }
}

impl Processor for Summer {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("numbers", Summer::on_number)?;
        context.register_command("total", Summer::total);
        context.register_command("add", Summer::add);
        context.register_command("explode", Summer::explode);
        Ok(())
    }

    fn retry_safe(&self) -> bool {
        self.retry_safe
    }
}

fn add_summer(plane: &mongoose_control::ControlPlane, name: &str) {
    let reply = plane
        .add_processor("g", name, Summer::new)
        .reply
        .wait_for(WAIT)
        .expect("reply");
    assert!(reply.applied(), "{reply:?}");
}

fn invoke(
    plane: &mongoose_control::ControlPlane,
    processor: &str,
    command: &str,
    args: &[&str],
) -> ControlReply {
    plane
        .invoke_admin_command(
            "g",
            processor,
            command,
            args.iter().map(|arg| (*arg).to_owned()).collect(),
        )
        .wait_for(WAIT)
        .expect("answered")
}

// book: running/record-and-replay.md, AdminInvoked; invariant 5 (exactly one reply)
#[test]
fn a_command_runs_on_the_group_thread_between_items_and_is_answered_once_with_its_output() {
    let (plane, numbers, feeds) = plane_with_feed();
    add_summer(&plane, "summer");
    for number in [1, 2, 3] {
        numbers.publish(number);
    }
    assert!(wait_until(|| feeds.dispatched("numbers", "g") == 3));

    let answers = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&answers);
    let handle = plane.invoke_admin_command("g", "summer", "total", Vec::new());
    handle.on_reply(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
    });
    let reply = handle.wait_for(WAIT).expect("answered");
    assert_eq!(reply.outcome, ReplyOutcome::Applied, "{reply:?}");
    assert_eq!(reply.kind, FailureKind::None);
    assert_eq!(
        reply.output.as_deref(),
        Some("total 6 after 3 items on g"),
        "the command saw every item handled before it, on the group's thread"
    );
    assert!(wait_until(|| answers.load(Ordering::SeqCst) == 1));

    // a command that changes the state: the next item sees the change
    let added = invoke(&plane, "summer", "add", &["10"]);
    assert_eq!(added.output.as_deref(), Some("16"));
    numbers.publish(4);
    assert!(wait_until(|| feeds.dispatched("numbers", "g") == 4));
    let total = invoke(&plane, "summer", "total", &[]);
    assert_eq!(total.output.as_deref(), Some("total 20 after 4 items on g"));
    assert_eq!(answers.load(Ordering::SeqCst), 1, "answered exactly once");

    // the control audit holds the request: input, decision with the command line,
    // effect, reply
    let records = plane.group("g").expect("group").audit().records();
    let request: Vec<_> = records
        .iter()
        .filter(|record| record.root_id == added.request_id)
        .collect();
    let shape: Vec<(RecordType, &str)> = request
        .iter()
        .map(|record| (record.record, record.what.as_str()))
        .collect();
    assert_eq!(
        shape,
        [
            (RecordType::Input, "Admin"),
            (RecordType::Decision, "adminInvoke"),
            (RecordType::EffectOutcome, "AdminCommand"),
            (RecordType::Reply, "Reply"),
        ]
    );
    assert_eq!(request[1].reason.as_deref(), Some("command: add 10"));
    assert_eq!(
        request[1].effects,
        [format!(
            "{}.1 AdminCommand({})",
            added.request_id.expect("reached the group"),
            request[1].generation.expect("about one registration")
        )],
        "the decision names the effect whose outcome follows"
    );
    assert_eq!(
        request[2].op_id.as_deref(),
        Some(format!("{}.1", added.request_id.expect("reached the group")).as_str())
    );
    assert_eq!(request[3].outcome.as_deref(), Some("APPLIED"));
    assert_eq!(
        request[3].cause_op, request[2].op_id,
        "the reply follows the effect"
    );
}

// book: guarantees/control-plane.md: REFUSED, and the reason says what there is
#[test]
fn an_unknown_command_or_processor_is_refused_with_what_there_is() {
    let (plane, _numbers, _feeds) = plane_with_feed();
    add_summer(&plane, "summer");

    let unknown_command = invoke(&plane, "summer", "reset", &[]);
    assert_eq!(
        (unknown_command.outcome, unknown_command.kind),
        (ReplyOutcome::Refused, FailureKind::RefusedState)
    );
    assert_eq!(
        unknown_command.reason,
        "processor 'summer' has no admin command 'reset' (its commands: add, explode, total)"
    );
    assert!(unknown_command.output.is_none());

    let unknown_processor = invoke(&plane, "nobody", "total", &[]);
    assert_eq!(
        (unknown_processor.outcome, unknown_processor.kind),
        (ReplyOutcome::Refused, FailureKind::RefusedState)
    );
    assert_eq!(
        unknown_processor.reason,
        "no such processor 'nobody' in group 'g' (running: summer)"
    );
    // both reached the group: they are in its audit
    let audit = plane.group("g").expect("group").audit().records();
    for (reply, rule) in [
        (&unknown_command, "adminNoSuchCommand"),
        (&unknown_processor, "adminNoSuchProcessor"),
    ] {
        assert!(
            audit
                .iter()
                .any(|record| record.root_id == reply.request_id && record.what == rule),
            "{rule}"
        );
    }

    let unknown_group = plane
        .invoke_admin_command("elsewhere", "summer", "total", Vec::new())
        .wait_for(WAIT)
        .expect("answered at once");
    assert_eq!(unknown_group.outcome, ReplyOutcome::Refused);
    assert_eq!(unknown_group.reason, "no such group 'elsewhere'");
}

// admin module docs: an error a command returns is its answer, not a processor failure
#[test]
fn a_command_that_returns_an_error_answers_failed_and_its_processor_keeps_running() {
    let (plane, numbers, feeds) = plane_with_feed();
    add_summer(&plane, "summer");
    let failed = invoke(&plane, "summer", "add", &["lots"]);
    assert_eq!(
        (failed.outcome, failed.kind),
        (ReplyOutcome::Failed, FailureKind::FailedEffect)
    );
    assert_eq!(
        failed.reason,
        "admin command 'add' failed: 'lots' is not a number"
    );

    numbers.publish(5);
    assert!(wait_until(|| feeds.dispatched("numbers", "g") == 1));
    let group = plane.group("g").expect("group");
    assert!(group.status().quarantined.is_empty());
    assert_eq!(group.status().running.len(), 1);
    let total = invoke(&plane, "summer", "total", &[]);
    assert_eq!(total.output.as_deref(), Some("total 5 after 1 items on g"));
}

// book: guarantees/control-plane.md: "A command that ran and
// then failed still propagates its dispatch failure to the host": a panic quarantines
#[test]
fn a_command_that_panics_answers_failed_and_quarantines_its_processor_alone() {
    let (plane, numbers, feeds) = plane_with_feed();
    add_summer(&plane, "summer");
    add_summer(&plane, "peer");
    let exploded = invoke(&plane, "summer", "explode", &[]);
    assert_eq!(
        (exploded.outcome, exploded.kind),
        (ReplyOutcome::Failed, FailureKind::Quarantined)
    );
    assert_eq!(
        exploded.reason,
        "admin command 'explode' panicked: the command exploded"
    );
    let status = plane.group("g").expect("group").status();
    assert_eq!(status.quarantined.len(), 1);
    assert_eq!(status.quarantined[0].name, "summer");

    // its commands went with its routes; the peer keeps running and answering
    let refused = invoke(&plane, "summer", "total", &[]);
    assert_eq!(
        (refused.outcome, refused.kind),
        (ReplyOutcome::Refused, FailureKind::Quarantined)
    );
    assert_eq!(plane.admin_commands("g", "summer"), None);
    numbers.publish(7);
    assert!(wait_until(|| feeds.dispatched("numbers", "g") == 1));
    let peer = invoke(&plane, "peer", "total", &[]);
    assert_eq!(peer.output.as_deref(), Some("total 7 after 1 items on g"));
}

// admin module docs: a processor's commands go when it stops
#[test]
fn commands_are_listed_while_their_processor_runs_and_vanish_when_it_stops() {
    let (plane, _numbers, _feeds) = plane_with_feed();
    add_summer(&plane, "summer");
    assert_eq!(
        plane.admin_commands("g", "summer"),
        Some(vec!["add".into(), "explode".into(), "total".into()])
    );
    assert_eq!(plane.admin_commands("g", "nobody"), None);
    assert_eq!(plane.admin_commands("nowhere", "summer"), None);

    let handle = plane.processor_handle("g", "summer").expect("admitted");
    let stopped = plane
        .stop_processor(&handle)
        .wait_for(WAIT)
        .expect("stopped");
    assert!(stopped.applied());
    assert_eq!(plane.admin_commands("g", "summer"), None);
    let refused = invoke(&plane, "summer", "total", &[]);
    assert_eq!(refused.outcome, ReplyOutcome::Refused);
    assert_eq!(
        refused.reason,
        "no such processor 'summer' in group 'g' (running: none)"
    );
}

// the wait form: one deadline for admission and reply, like stopProcessor(group, name, wait)
#[test]
fn the_waiting_form_returns_the_reply_and_refuses_an_unknown_group_at_once() {
    let (plane, _numbers, _feeds) = plane_with_feed();
    add_summer(&plane, "summer");
    let reply = plane
        .invoke_admin_command_wait("g", "summer", "add", vec!["3".into()], WAIT)
        .expect("answered in time");
    assert_eq!(reply.output.as_deref(), Some("3"));
    let refused = plane
        .invoke_admin_command_wait("nowhere", "summer", "add", vec![], WAIT)
        .expect("refused at once");
    assert_eq!(refused.outcome, ReplyOutcome::Refused);
}

// DESIGN "Processors": a retry-safe processor is not quarantined by a failure; a panicking
// command of one is reported FAILED and the processor keeps its commands
#[test]
fn a_retry_safe_processor_whose_command_panics_keeps_running_and_answering() {
    let (plane, _numbers, _feeds) = plane_with_feed();
    let reply = plane
        .add_processor("g", "safe", || Summer {
            retry_safe: true,
            ..Summer::new()
        })
        .reply
        .wait_for(WAIT)
        .expect("reply");
    assert!(reply.applied(), "{reply:?}");
    let exploded = invoke(&plane, "safe", "explode", &[]);
    assert_eq!(
        (exploded.outcome, exploded.kind),
        (ReplyOutcome::Failed, FailureKind::FailedEffect)
    );
    assert!(plane
        .group("g")
        .expect("group")
        .status()
        .quarantined
        .is_empty());
    let total = invoke(&plane, "safe", "add", &["2"]);
    assert_eq!(total.output.as_deref(), Some("2"));
}
