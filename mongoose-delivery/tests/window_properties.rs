//! Property: whatever the interleaving of publishes, dispatches, unsubscribes, fences
//! and processing checkpoints, the committed position never passes an item some queue
//! was given and did not dispatch, nor one a checkpointed queue dispatched and did not
//! make durable (invariant 1, book: guarantees/commit-after-processing.md).

mod support;

use std::collections::BTreeMap;

use mongoose_core::{SourceOutput, TryPublish};
use mongoose_delivery::QueueReader;
use proptest::prelude::*;
use support::*;

#[derive(Clone, Debug)]
enum Step {
    Publish,
    /// A batch of up to this many items (the publisher's chunked fast path when the
    /// feed has one queue).
    PublishBatch(usize),
    Dispatch(usize, usize),
    Remove(usize),
    Fence(usize, bool),
    Subscribe(usize),
    Poll,
    /// The checkpointed queue dispatches up to this many items.
    DispatchHeld(usize),
    /// Its processor takes a mark.
    Mark,
    /// The state covering its oldest outstanding mark became durable.
    Durable,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => Just(Step::Publish),
        2 => (1..8usize).prop_map(Step::PublishBatch),
        4 => (0..3usize, 1..4usize).prop_map(|(queue, count)| Step::Dispatch(queue, count)),
        1 => (0..3usize).prop_map(Step::Remove),
        1 => (0..3usize, any::<bool>()).prop_map(|(queue, on)| Step::Fence(queue, on)),
        1 => (0..3usize).prop_map(Step::Subscribe),
        2 => Just(Step::Poll),
        3 => (1..6usize).prop_map(Step::DispatchHeld),
        1 => Just(Step::Mark),
        1 => Just(Step::Durable),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn the_committed_position_never_passes_an_undispatched_item(steps in proptest::collection::vec(step(), 1..120)) {
        let (feed, commits) = positioned_feed(4);
        let mut readers: BTreeMap<usize, QueueReader<u64>> = BTreeMap::new();
        // per queue: the items it was given and has not dispatched
        let mut given: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        // items given to removed queues that they never dispatched: held for the run
        let mut abandoned: Vec<u64> = Vec::new();
        let mut next = 1u64;
        for queue in 0..2 {
            readers.insert(queue, reader(&feed, &format!("g{queue}")));
            given.insert(queue, Vec::new());
        }
        // a queue under a processing checkpoint: its items, in order; how many it
        // dispatched, how many are durable, and the marks not yet made durable
        let checkpoint = feed.hold("held");
        let mut held = reader(&feed, "held");
        let mut held_items: Vec<u64> = Vec::new();
        let (mut held_dispatched, mut held_durable) = (0usize, 0usize);
        let mut marks: std::collections::VecDeque<(mongoose_delivery::Mark, usize)> =
            std::collections::VecDeque::new();
        feed.start_complete();
        for step in steps {
            match step {
                Step::Publish => {
                    let before: Vec<usize> = readers.keys().copied().collect();
                    if let TryPublish::Published = feed.try_publish(next, next) {
                        for queue in before {
                            given.get_mut(&queue).expect("tracked").push(next);
                        }
                        held_items.push(next);
                        next += 1;
                    }
                }
                Step::PublishBatch(count) => {
                    let before: Vec<usize> = readers.keys().copied().collect();
                    let first = next;
                    let mut pulled = next;
                    let mut produce = || {
                        (pulled < first + count as u64).then(|| {
                            pulled += 1;
                            (pulled - 1, pulled - 1)
                        })
                    };
                    let end = feed.try_publish_batch(&mut produce);
                    // a returned item was pulled and not published
                    let published_end = match end {
                        mongoose_core::BatchEnd::Returned(item, ..) => item,
                        _ => pulled,
                    };
                    for item in first..published_end {
                        for queue in &before {
                            given.get_mut(queue).expect("tracked").push(item);
                        }
                        held_items.push(item);
                    }
                    next = published_end;
                }
                Step::Dispatch(queue, count) => {
                    if let Some(reader) = readers.get_mut(&queue) {
                        let mut collect = Collect::default();
                        reader.poll(&mut collect, count);
                        let pending = given.get_mut(&queue).expect("tracked");
                        for item in &collect.items {
                            prop_assert_eq!(pending.remove(0), *item, "in order");
                        }
                    }
                }
                Step::Remove(queue) => {
                    if readers.remove(&queue).is_some() {
                        feed.remove_group(&format!("g{queue}"));
                        abandoned.extend(given.remove(&queue).unwrap_or_default());
                    }
                }
                Step::Fence(queue, on) => {
                    if let Some(reader) = readers.get(&queue) {
                        reader.set_fenced(on);
                    }
                }
                Step::Subscribe(queue) => {
                    if let std::collections::btree_map::Entry::Vacant(slot) = readers.entry(queue) {
                        slot.insert(reader(&feed, &format!("g{queue}")));
                        given.insert(queue, Vec::new());
                    }
                }
                Step::Poll => {
                    feed.poll_acknowledgements();
                }
                Step::DispatchHeld(count) => {
                    let mut collect = Collect::default();
                    held.poll(&mut collect, count);
                    for item in &collect.items {
                        prop_assert_eq!(held_items[held_dispatched], *item, "in order");
                        held_dispatched += 1;
                    }
                }
                Step::Mark => marks.push_back((checkpoint.mark(), held_dispatched)),
                Step::Durable => {
                    if let Some((mark, covered)) = marks.pop_front() {
                        checkpoint.durable_through(mark);
                        held_durable = held_durable.max(covered);
                    }
                }
            }
            let pointer = commits.pointer();
            let lowest_undispatched = given
                .values()
                .flatten()
                .chain(abandoned.iter())
                .chain(held_items[held_durable..].iter())
                .min()
                .copied()
                .unwrap_or(u64::MAX);
            prop_assert!(
                pointer < lowest_undispatched,
                "committed {} but item {} was not finished (given and not dispatched, or not durable)", pointer, lowest_undispatched
            );
        }
    }
}
