//! Delivery completion (feed-delivery-guarantees §5b) at the reader level, and the
//! status it feeds (completionFailures, §7).

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
}

impl Dispatcher<u64> for Script {
    fn dispatch(&mut self, _item: &u64, attempt: u32) -> DispatchOutcome {
        for processor in self.processors.clone() {
            if self.handled.contains(&processor) {
                continue; // a retry resumes at the failing processor
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
        DispatchOutcome::Done
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
    // §5b decision after R2: an exhausted callback's item is acknowledged and counted
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
        10,
        "the item is acknowledged once the policy gives up"
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
    let (feed, commits) = positioned_feed(16);
    let mut first = reader(&feed, "first");
    let mut second = reader(&feed, "second");
    feed.start_complete();
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
