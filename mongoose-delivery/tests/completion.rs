//! Delivery completion (book: guarantees/completion-hooks.md) at the reader level, and the
//! status it feeds (completionFailures, book: guarantees/status.md).

mod support;

use std::sync::Arc;

use mongoose_core::engine::{self, PendingCompletion};
use mongoose_core::{
    CompletionKey, Delivery, DeliveryContext, ProcessorError, ProcessorId, SourceOutput,
};
use mongoose_delivery::{DispatchOutcome, Dispatcher, Feed, Publisher};
use support::*;

/// A dispatcher with scripted processors: each registers completions and may fail.
#[derive(Default)]
struct Script {
    processors: Vec<ProcessorId>,
    /// (processor, key) registered during dispatch.
    registers: Vec<(ProcessorId, CompletionKey)>,
    /// dispatch failures to produce: (processor, retry), consumed in order.
    dispatch_failures: Vec<(ProcessorId, bool)>,
    /// completion failures to produce, per (owner, key): remaining count.
    completion_failures: Vec<(Option<ProcessorId>, CompletionKey, u32)>,
    /// what ran, in order: "d:<processor>:<attempt>" and "c:<owner>:<key>"
    log: Vec<String>,
    dispatched_seen_in_completion: Vec<u64>,
    feed: Option<Arc<Publisher<u64, u64>>>,
    /// a completion that registers another completion when it runs
    chain: Option<(CompletionKey, CompletionKey)>,
    handled: Vec<ProcessorId>,
    /// (item, processor): the processor fails for good (is quarantined) at that item
    /// and is given nothing after it.
    quarantine_at: Option<(u64, ProcessorId)>,
    quarantined: Vec<ProcessorId>,
}

impl Dispatcher<u64> for Script {
    fn dispatch(&mut self, item: &u64, attempt: u32) -> DispatchOutcome {
        let mut quarantined_now = None;
        for processor in self.processors.clone() {
            if self.handled.contains(&processor) || self.quarantined.contains(&processor) {
                continue; // a retry resumes at the failing processor
            }
            if self.quarantine_at == Some((*item, processor)) {
                // fails for good: the others still get the item
                self.log.push(format!("q:{}:{item}", processor.0));
                self.quarantined.push(processor);
                quarantined_now = Some(processor);
                continue;
            }
            engine::set_current_processor(Some(processor));
            self.log.push(format!("d:{}:{attempt}", processor.0));
            for (owner, key) in self.registers.clone() {
                if owner == processor {
                    DeliveryContext::on_complete(key);
                }
            }
            engine::set_current_processor(None);
            if let Some(index) = self
                .dispatch_failures
                .iter()
                .position(|(failing, _)| *failing == processor)
            {
                let (_, retry) = self.dispatch_failures.remove(index);
                if !retry {
                    self.handled.push(processor);
                }
                return DispatchOutcome::Failed {
                    processor: Some(processor),
                    retry,
                };
            }
            self.handled.push(processor);
        }
        self.handled.clear();
        match quarantined_now {
            Some(processor) => DispatchOutcome::Failed {
                processor: Some(processor),
                retry: false,
            },
            None => DispatchOutcome::Done,
        }
    }

    fn complete(
        &mut self,
        completion: PendingCompletion,
        delivery: &Delivery,
    ) -> Result<(), ProcessorError> {
        assert!(DeliveryContext::is_active(), "the context is still entered");
        self.log.push(format!(
            "c:{}:{}:{}",
            completion.owner.map_or(0, |owner| owner.0),
            completion.key.0,
            delivery.attempt()
        ));
        if let Some(feed) = &self.feed {
            let dispatched = feed.status().subscribers[0].dispatched;
            self.dispatched_seen_in_completion.push(dispatched);
        }
        if let Some((when, then)) = self.chain {
            if completion.key == when {
                DeliveryContext::on_complete(then);
            }
        }
        if let Some(entry) = self
            .completion_failures
            .iter_mut()
            .find(|(owner, key, left)| {
                *owner == completion.owner && *key == completion.key && *left > 0
            })
        {
            entry.2 -= 1;
            return Err(ProcessorError::new("save failed"));
        }
        Ok(())
    }

    fn gave_up(&mut self, _item: &u64, _processor: Option<ProcessorId>) {
        self.handled.clear();
    }
}

const A: ProcessorId = ProcessorId(1);
const B: ProcessorId = ProcessorId(2);
const SAVE: CompletionKey = CompletionKey(1);
const OTHER: CompletionKey = CompletionKey(2);

fn setup(
    retries: u32,
) -> (
    Arc<Publisher<u64, u64>>,
    Commits,
    mongoose_delivery::QueueReader<u64>,
) {
    let (feed, commits) = positioned_feed(16);
    let reader = reader_with(&feed, "group", immediate_retries(retries));
    feed.start_complete();
    (feed, commits, reader)
}

fn poll_until_done(
    reader: &mut mongoose_delivery::QueueReader<u64>,
    script: &mut Script,
    items: usize,
) {
    let mut done = 0;
    for _ in 0..1_000 {
        done += reader.poll(script, 16);
        if done >= items {
            return;
        }
    }
    panic!("the items never finished");
}

#[test]
fn completions_run_after_the_dispatch_and_before_the_item_counts_as_dispatched() {
    let (feed, commits, mut reader) = setup(3);
    let mut script = Script {
        processors: vec![A],
        registers: vec![(A, SAVE)],
        feed: Some(Arc::clone(&feed)),
        ..Script::default()
    };
    publish_range(&feed, 1..=1);
    poll_until_done(&mut reader, &mut script, 1);
    assert_eq!(script.log, vec!["d:1:0", "c:1:1:0"]);
    assert_eq!(
        script.dispatched_seen_in_completion,
        vec![0],
        "not dispatched while completing"
    );
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 10);
    assert!(
        DeliveryContext::current().is_none(),
        "the context is cleared after the delivery"
    );
}

#[test]
fn completions_run_in_registration_order_once_each_and_chained_ones_in_the_same_pass() {
    let (feed, _commits, mut reader) = setup(3);
    let mut script = Script {
        processors: vec![A, B],
        registers: vec![(A, SAVE), (A, OTHER), (A, SAVE), (B, SAVE)],
        chain: Some((OTHER, CompletionKey(9))),
        ..Script::default()
    };
    publish_range(&feed, 1..=1);
    poll_until_done(&mut reader, &mut script, 1);
    assert_eq!(script.log, vec!["d:1:0", "d:2:0", "c:1:1:0", "c:1:2:0", "c:2:1:0", "c:1:9:0"],
        "a callback registered by a running callback belongs to its owner and runs in the same pass"
    );
}

#[test]
fn an_item_without_a_position_has_no_completion() {
    let feed: Arc<Publisher<u64, u64>> = Feed::builder("pushes").build();
    let mut group = reader(&feed, "group");
    feed.start_complete();
    feed.publish(5).expect("published");
    let mut collect = Collect::default();
    group.poll(&mut collect, 1);
    assert_eq!(
        collect.deliveries,
        vec![None],
        "no delivery context for a push item"
    );
    assert!(!DeliveryContext::on_complete(SAVE));
}

#[test]
fn a_failed_dispatch_discards_the_failing_processors_completions_and_keeps_the_others() {
    let (feed, _commits, mut reader) = setup(3);
    let mut script = Script {
        processors: vec![A, B],
        registers: vec![(A, SAVE), (B, SAVE)],
        dispatch_failures: vec![(B, false)], // B is quarantined: not retried
        ..Script::default()
    };
    publish_range(&feed, 1..=1);
    poll_until_done(&mut reader, &mut script, 1);
    assert_eq!(
        script.log,
        vec!["d:1:0", "d:2:0", "c:1:1:0"],
        "B's completion discarded"
    );
}

#[test]
fn a_retried_processor_registers_again_and_the_attempt_counts_failures() {
    let (feed, _commits, mut reader) = setup(3);
    let mut script = Script {
        processors: vec![A, B],
        registers: vec![(A, SAVE), (B, SAVE)],
        dispatch_failures: vec![(B, true)], // retry-safe: B alone is given the item again
        ..Script::default()
    };
    publish_range(&feed, 1..=1);
    poll_until_done(&mut reader, &mut script, 1);
    assert_eq!(
        script.log,
        vec!["d:1:0", "d:2:0", "d:2:1", "c:1:1:1", "c:2:1:1"],
        "A is not given the item again; its completion is kept; B's runs once"
    );
}

#[test]
fn a_processor_whose_retries_are_exhausted_runs_no_completion() {
    let (feed, commits, mut reader) = setup(1);
    let mut script = Script {
        processors: vec![A, B],
        registers: vec![(A, SAVE), (B, SAVE)],
        dispatch_failures: vec![(B, true), (B, true)],
        ..Script::default()
    };
    publish_range(&feed, 1..=1);
    poll_until_done(&mut reader, &mut script, 1);
    assert_eq!(script.log, vec!["d:1:0", "d:2:0", "d:2:1", "c:1:1:1"]);
    feed.poll_acknowledgements();
    assert_eq!(
        commits.pointer(),
        10,
        "a failed item counts as dispatched: its fate was decided"
    );
}

#[test]
fn an_exhausted_callback_makes_the_feed_not_lossless() {
    // book: guarantees/completion-hooks.md: an exhausted callback is counted (completionFailures); and
    // since issue 9 (item 2) its item is held, never acknowledged
    let (feed, commits, mut reader) = setup(2);
    let mut script = Script {
        processors: vec![A],
        registers: vec![(A, SAVE), (A, OTHER)],
        completion_failures: vec![(Some(A), SAVE, 100)],
        ..Script::default()
    };
    publish_range(&feed, 1..=1);
    poll_until_done(&mut reader, &mut script, 1);
    assert_eq!(
        script.log,
        vec!["d:1:0", "c:1:1:0", "c:1:1:0", "c:1:1:0", "c:1:2:0"],
        "retried alone, the processor never given the item again, the next callback still runs"
    );
    let status = feed.status();
    assert_eq!(status.completion_failures, 1);
    assert!(!status.lossless);
    feed.poll_acknowledgements();
    assert_eq!(
        commits.pointer(),
        0,
        "the item is held: its state was never saved"
    );
    let report = mongoose_delivery::StatusReport::from_feeds(vec![status]);
    let json = serde_json::to_string(&report).expect("json");
    assert!(
        json.contains("\"completionFailures\":1") && json.contains("\"lossless\":false"),
        "{json}"
    );
}

#[test]
fn a_callback_that_succeeds_on_retry_keeps_the_feed_lossless() {
    let (feed, commits, mut reader) = setup(3);
    let mut script = Script {
        processors: vec![A],
        registers: vec![(A, SAVE)],
        completion_failures: vec![(Some(A), SAVE, 1)],
        ..Script::default()
    };
    publish_range(&feed, 1..=1);
    assert_eq!(
        reader.poll(&mut script, 1),
        0,
        "the item waits for its callback's retry"
    );
    feed.poll_acknowledgements();
    assert_eq!(
        commits.pointer(),
        0,
        "not acknowledged while its callback is retried"
    );
    poll_until_done(&mut reader, &mut script, 1);
    let status = feed.status();
    assert_eq!(status.completion_failures, 0);
    assert!(status.lossless);
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 10);
}

#[test]
fn two_queues_each_complete_their_own_delivery_before_the_item_is_acknowledged() {
    let (feed, commits, [mut first, mut second]) =
        started_with_readers(positioned_feed(16), ["first", "second"]);
    publish_range(&feed, 1..=1);
    let mut one = Script {
        processors: vec![A],
        registers: vec![(A, SAVE)],
        ..Script::default()
    };
    let mut two = Script {
        processors: vec![B],
        registers: vec![(B, SAVE)],
        ..Script::default()
    };
    poll_until_done(&mut first, &mut one, 1);
    feed.poll_acknowledgements();
    assert_eq!(
        commits.pointer(),
        0,
        "the second queue has not completed it"
    );
    poll_until_done(&mut second, &mut two, 1);
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 10);
    assert_eq!((one.log.len(), two.log.len()), (2, 2));
}

#[test]
fn a_delivery_that_ends_without_completing_runs_no_callback() {
    let (feed, commits, mut reader) = setup(3);
    let mut script = Script {
        processors: vec![A],
        registers: vec![(A, SAVE)],
        completion_failures: vec![(Some(A), SAVE, 1)],
        ..Script::default()
    };
    publish_range(&feed, 1..=1);
    assert_eq!(reader.poll(&mut script, 1), 0);
    feed.remove_group("group"); // the group ends while the callback waits for its retry
    assert_eq!(reader.poll(&mut script, 1), 0);
    assert_eq!(
        script.log,
        vec!["d:1:0", "c:1:1:0"],
        "the pending callback never ran again"
    );
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 0, "and the item is not acknowledged");
}

#[test]
fn an_exhausted_save_holds_the_position_before_its_item() {
    // issue 9, item 2: a save that keeps failing must never let the feed commit past
    // its item; the feed stalls with the reason and is not lossless
    let (feed, commits, mut reader) = setup(2);
    let mut script = Script {
        processors: vec![A],
        registers: vec![(A, SAVE)],
        // item 2's save fails three times (the first try and both retries); the others
        // succeed
        completion_failures: vec![],
        ..Script::default()
    };
    publish_range(&feed, 1..=1);
    poll_until_done(&mut reader, &mut script, 1);
    script.completion_failures = vec![(Some(A), SAVE, 3)];
    publish_range(&feed, 2..=2);
    poll_until_done(&mut reader, &mut script, 1);
    script.completion_failures.clear();
    publish_range(&feed, 3..=4);
    poll_until_done(&mut reader, &mut script, 2);
    feed.poll_acknowledgements();
    assert_eq!(
        commits.pointer(),
        10,
        "committed through item 1 only: item 2 was never saved"
    );
    let status = feed.status();
    assert_eq!(status.completion_failures, 1);
    assert!(!status.lossless && !status.settled, "{status:?}");
    let stalled = status.stalled.expect("stalled with the reason");
    assert!(
        stalled.contains("delivery-complete callback") && stalled.contains("save failed"),
        "{stalled}"
    );
    // the operator gives the item up: the feed commits on
    let released = feed.release(None).expect("released");
    assert_eq!(released.items, 3, "items 2 to 4 were held");
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 40);
    assert_eq!(feed.status().stalled, None);
}

#[test]
fn a_quarantined_processor_holds_the_position_and_ends_the_poll() {
    // issue 9, item 1: the rest of the poll is never given to nobody and counted; the
    // quarantined processor's item and everything after it stay unacknowledged
    let (feed, commits, mut reader) = setup(0);
    let mut script = Script {
        processors: vec![A, B],
        registers: vec![(A, SAVE), (B, SAVE)],
        quarantine_at: Some((2, B)),
        ..Script::default()
    };
    publish_range(&feed, 1..=5);
    assert_eq!(
        reader.poll(&mut script, 16),
        2,
        "the poll ends with the item whose processor was quarantined"
    );
    poll_until_done(&mut reader, &mut script, 3);
    assert!(
        script.log.contains(&"d:1:0".to_owned()) && script.log.contains(&"q:2:2".to_owned()),
        "{:?}",
        script.log
    );
    assert_eq!(
        script
            .log
            .iter()
            .filter(|entry| entry.starts_with("d:1"))
            .count(),
        5,
        "the healthy processor had every item"
    );
    feed.poll_acknowledgements();
    assert_eq!(
        commits.pointer(),
        10,
        "committed through item 1: the quarantined processor never had item 2"
    );
    let status = feed.status();
    assert!(status.lossless, "nothing lost yet: a restart re-delivers");
    assert!(!status.settled);
    let stalled = status.stalled.expect("stalled with the reason");
    assert!(stalled.contains("quarantined"), "{stalled}");
    assert!(
        matches!(
            feed.release(Some("nope")),
            Err(mongoose_delivery::DeliveryError::NoSuchQueue { .. })
        ),
        "an unknown queue is refused"
    );
    let released = feed.release(Some("group/lines")).expect("released");
    assert_eq!(released.items, 4);
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 50);
    let status = feed.status();
    assert!(!status.lossless, "a release is a loss");
    assert_eq!(status.dropped, 4);
}

#[test]
fn releasing_a_dead_groups_queue_commits_past_its_backlog() {
    // issue 9, item 6: release also covers a fenced or dead group's hold
    let (feed, commits, mut reader) = setup(0);
    publish_range(&feed, 1..=4);
    let mut script = Script {
        processors: vec![A],
        ..Script::default()
    };
    assert_eq!(reader.poll(&mut script, 1), 1);
    reader.mark_dead();
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 10);
    let stalled = feed.status().stalled.expect("stalled");
    assert!(stalled.contains("fenced or dead"), "{stalled}");
    let released = feed.release(None).expect("released");
    assert_eq!(released.items, 3, "the dead queue's backlog");
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 40, "committed past the released backlog");
    assert_eq!(feed.status().dropped, 3);
}
