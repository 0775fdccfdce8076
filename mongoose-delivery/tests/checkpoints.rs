//! Processing checkpoints (book: guarantees/commit-after-processing.md).

mod support;

use mongoose_delivery::SubscribeOptions;
use support::*;

#[test]
fn a_processing_checkpoint_holds_the_commit_until_state_is_durable() {
    // book: guarantees/commit-after-processing.md
    let (feed, commits) = positioned_feed(16);
    let checkpoint = feed.hold("group");
    let mut group = reader(&feed, "group");
    feed.start_complete();
    publish_range(&feed, 1..=5);
    process(&mut group, 3);
    let after_three = checkpoint.mark();
    process(&mut group, 2);
    feed.poll_acknowledgements();
    assert_eq!(
        commits.pointer(),
        0,
        "processed 5, nothing durable: nothing committed"
    );
    checkpoint.durable_through(after_three);
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 30);
    checkpoint.durable_through(checkpoint.mark());
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 50);
    checkpoint.release();
    publish_range(&feed, 6..=6);
    process(&mut group, 1);
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 60, "released: dispatch commits again");
}

#[test]
fn a_mark_of_an_earlier_binding_does_not_release_a_resubscribed_queue() {
    // book: guarantees/commit-after-processing.md: marks belong to a binding
    let (feed, commits) = positioned_feed(16);
    let checkpoint = feed.hold("group");
    let mut first = reader(&feed, "group");
    feed.start_complete();
    publish_range(&feed, 1..=2);
    process(&mut first, 2);
    let old_mark = checkpoint.mark();
    checkpoint.durable_through(old_mark);
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 20);
    feed.remove_group("group");
    let mut second = reader(&feed, "group");
    publish_range(&feed, 3..=4);
    process(&mut second, 2);
    checkpoint.durable_through(old_mark);
    feed.poll_acknowledgements();
    assert_eq!(
        commits.pointer(),
        20,
        "the new binding starts at nothing durable"
    );
    checkpoint.durable_through(checkpoint.mark());
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 40);
}

#[test]
fn a_repeated_deregistration_does_not_unbind_the_other_binding_of_the_queue() {
    // book: guarantees/commit-after-processing.md
    let (feed, commits) = positioned_feed(16);
    let checkpoint = feed.hold("group");
    let mut first = feed
        .subscribe("group", SubscribeOptions::default())
        .expect("first");
    let second = feed
        .subscribe("group", SubscribeOptions::default())
        .expect("second");
    assert_eq!(
        first.queue(),
        second.queue(),
        "one queue per group and feed"
    );
    let mut group = first.take_reader().expect("the first subscription reads");
    feed.start_complete();
    feed.unsubscribe(second.id());
    feed.unsubscribe(second.id());
    publish_range(&feed, 1..=3);
    process(&mut group, 3);
    assert_eq!(
        feed.status().subscribers.len(),
        1,
        "the queue is still bound"
    );
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 0, "the hold still applies");
    checkpoint.durable_through(checkpoint.mark());
    feed.poll_acknowledgements();
    assert_eq!(
        commits.pointer(),
        30,
        "the durable mark of the remaining binding counts"
    );
    feed.unsubscribe(first.id());
    assert_eq!(
        feed.status().subscribers.len(),
        0,
        "the last subscription leaving removes the queue"
    );
}

#[test]
fn a_durable_point_more_than_a_queue_behind_still_holds_the_commit() {
    // book: guarantees/commit-after-processing.md (regression): the held acknowledgement point is looked up by queue position;
    // a processor that makes its state durable less often than a queue's worth of items
    // must not let the slots reused since its mark acknowledge what is not durable
    let (feed, commits) = positioned_feed(4);
    let checkpoint = feed.hold("group");
    let mut group = reader(&feed, "group");
    feed.start_complete();
    publish_range(&feed, 1..=4);
    assert_eq!(process(&mut group, 1), vec![1]);
    let mark = checkpoint.mark();
    assert_eq!(process(&mut group, 3), vec![2, 3, 4]);
    // the queue's slots are reused by items 5..8, two laps past the mark
    publish_range(&feed, 5..=8);
    assert_eq!(process(&mut group, 4), vec![5, 6, 7, 8]);
    publish_range(&feed, 9..=12);
    checkpoint.durable_through(mark);
    feed.poll_acknowledgements();
    assert_eq!(
        commits.pointer(),
        10,
        "only item 1 is durable: the commit stays at its position"
    );
    let later = checkpoint.mark();
    checkpoint.durable_through(later);
    feed.poll_acknowledgements();
    assert_eq!(
        commits.pointer(),
        80,
        "through item 8, the last one dispatched"
    );
}

#[test]
fn a_held_output_published_at_last_lifts_the_stall_it_caused() {
    // issue 24, item 6: a sink's hold policy reports an output held (the feed is
    // stalled, naming it) and goes on trying it; once it is published the stall goes,
    // and a second held output still pending holds the feed again with its own reason
    use mongoose_core::sink::CommitGate;
    let (feed, commits) = positioned_feed(16);
    let gate = feed.hold("group").participant();
    let mut group = reader(&feed, "group");
    feed.start_complete();
    publish_range(&feed, 1..=3);
    gate.pending(1);
    process(&mut group, 1);
    gate.pending(2);
    process(&mut group, 1);
    process(&mut group, 1);
    gate.held(1, "sink 'out': output one held");
    gate.held(2, "sink 'out': output two held");
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 0);
    let stalled = feed.status().stalled.unwrap_or_default();
    assert!(
        stalled.ends_with("holds: sink 'out': output one held"),
        "{stalled}"
    );

    gate.complete(1);
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 10, "the first output is over");
    let stalled = feed.status().stalled.unwrap_or_default();
    assert!(
        stalled.ends_with("holds: sink 'out': output two held"),
        "the second held output holds the feed now: {stalled}"
    );

    gate.complete_through(2);
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 30, "every output is over: all committed");
    assert_eq!(feed.status().stalled, None, "nothing is held any more");
}
