//! Publishing: PAUSE, nesting, the startup cache, in-band status, BLOCK
//! (book: guarantees/commit-after-processing.md, guarantees/pause.md, guarantees/control-plane.md).

mod support;

use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use mongoose_core::{agent, FailureKind, OverloadSettings, SourceOutput, SourceState, TryPublish};
use mongoose_delivery::{Feed, OverloadState, Publisher, SubscribeOptions};
use support::*;

/// What a nested `try_publish` was told, once the mapper ran.
type NestedOutcome = Arc<Mutex<Option<String>>>;

/// A feed whose mapper, given item 1, calls `nested` with the feed itself (a data
/// mapper publishing into its own feed). Returns the feed and what the nested
/// `try_publish(99, 990)` was told.
fn self_publishing_feed(
    nested: impl Fn(&Publisher<u64, u64>) + Send + Sync + 'static,
) -> (Arc<Publisher<u64, u64>>, NestedOutcome) {
    let nested_result: NestedOutcome = Arc::default();
    let this: Arc<OnceLock<Weak<Publisher<u64, u64>>>> = Arc::default();
    let mapper_this = Arc::clone(&this);
    let mapper_result = Arc::clone(&nested_result);
    let feed = Feed::builder("lines")
        .queue_capacity(16)
        .mapper(move |item: u64| {
            if item == 1 {
                let feed = mapper_this.get().and_then(Weak::upgrade).expect("the feed");
                let outcome = match feed.try_publish(99, 990) {
                    TryPublish::Retry(_) => "retry",
                    TryPublish::Paused(_) => "paused",
                    TryPublish::Published => "published",
                };
                *mapper_result.lock().unwrap() = Some(outcome.to_owned());
                nested(&feed);
            }
            Some(item)
        })
        .build();
    this.set(Arc::downgrade(&feed)).expect("set once");
    (feed, nested_result)
}

#[test]
fn a_publish_nested_in_a_positioned_commit_does_not_acknowledge_the_outer_item() {
    // book: guarantees/commit-after-processing.md: a data mapper publishing into its own feed is told to retry (try_publish) or
    // deferred until the outer item is committed (push publish)
    let (feed, nested_result) = self_publishing_feed(|feed| {
        feed.publish(100)
            .expect("a nested push publish is deferred");
    });
    let (feed, commits) = positioned_feed_with(feed);
    let mut group = reader(&feed, "group");
    feed.start_complete();
    assert!(feed.try_publish(1, 10).is_published());
    assert_eq!(nested_result.lock().unwrap().as_deref(), Some("retry"));
    feed.poll_acknowledgements();
    assert_eq!(
        commits.pointer(),
        0,
        "nothing was dispatched: nothing is acknowledged"
    );
    assert_eq!(
        process(&mut group, 1),
        vec![1],
        "the outer item is numbered before the nested one"
    );
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 10);
    assert_eq!(
        process(&mut group, 1),
        vec![100],
        "the deferred push publish follows the outer item"
    );
}

#[test]
fn pause_with_ten_thousand_items_into_a_small_queue_and_a_slow_consumer_loses_nothing_and_keeps_order(
) {
    // book: guarantees/pause.md: PAUSE is a no-drop backpressure: the source keeps the item and offers it again
    let (feed, commits, [mut group]) = started_with_readers(positioned_feed(1024), ["slow"]);
    let source_paused = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let consumer_sees_pause = Arc::clone(&source_paused);
    let consumer = std::thread::spawn(move || {
        // a slow consumer: it starts only once the source found the queue full
        while !consumer_sees_pause.load(std::sync::atomic::Ordering::Acquire) {
            std::thread::yield_now();
        }
        let mut collect = Collect::default();
        while collect.items.len() < 10_000 {
            group.poll(&mut collect, 7);
            std::thread::sleep(Duration::from_micros(50));
        }
        collect.items
    });
    let mut next = 1u64;
    let mut paused = 0u64;
    while next <= 10_000 {
        feed.poll_acknowledgements();
        match feed.try_publish(next, next * 10) {
            TryPublish::Published => next += 1,
            TryPublish::Paused(item) => {
                assert_eq!(item, next, "the source keeps the item");
                paused += 1;
                source_paused.store(true, std::sync::atomic::Ordering::Release);
                std::thread::yield_now();
            }
            TryPublish::Retry(_) => unreachable!("nothing is nested here"),
        }
    }
    let items = consumer.join().expect("the consumer ran");
    assert_eq!(
        items,
        (1..=10_000).collect::<Vec<_>>(),
        "every item once and in order"
    );
    feed.poll_acknowledgements();
    let status = feed.status();
    assert_eq!(status.dropped, 0);
    assert!(status.lossless);
    assert_eq!(status.policy, "PAUSE");
    assert!(
        paused > 0 && status.pauses > 0,
        "the slow consumer paused the source"
    );
    assert_eq!(
        commits.pointer(),
        100_000,
        "everything processed is committed"
    );
}

#[test]
fn an_in_band_status_waits_for_room_in_a_paused_queue() {
    // book: guarantees/pause.md: a status that finds a PAUSE queue full waits and is delivered before any later
    // item; nothing is dropped
    let (feed, _commits) = status_feed(2);
    let mut group = reader(&feed, "group");
    feed.start_complete();
    publish_range(&feed, 1..=2);
    feed.report_state(SourceState::CaughtUp, None);
    assert!(
        matches!(feed.try_publish(3, 30), TryPublish::Paused(3)),
        "the status waits first"
    );
    assert!(!feed.status().drained);
    let mut collect = Collect::default();
    group.poll(&mut collect, 1);
    assert!(feed.flush_paused(), "the status takes the free slot");
    assert!(
        matches!(feed.try_publish(3, 30), TryPublish::Paused(3)),
        "the queue is full again"
    );
    group.poll(&mut collect, 1);
    assert!(feed.try_publish(3, 30).is_published());
    group.poll(&mut collect, 10);
    assert_eq!(collect.items, vec![1, 2, 3]);
    assert_eq!(collect.statuses.len(), 1);
    assert_eq!(collect.statuses[0].state, SourceState::CaughtUp);
    assert_eq!(
        collect.statuses[0].sequence, 2,
        "delivered after item 2, before item 3"
    );
    assert_eq!(feed.status().dropped, 0);
}

#[test]
fn a_cached_startup_status_waits_behind_the_cache_and_is_not_dropped() {
    // book: guarantees/pause.md: the startup status never overtakes cached items and is
    // not written into a full PAUSE queue with drop semantics
    let (feed, commits) = status_feed(2);
    let mut group = reader(&feed, "group");
    for item in 1..=3u64 {
        feed.cache(item, item * 10);
    }
    feed.report_state(SourceState::CaughtUp, None);
    feed.start_complete();
    let status = feed.status();
    assert!(!status.drained, "the cache and the status still wait");
    assert_eq!(status.dropped, 0);
    let mut collect = Collect::default();
    group.poll(&mut collect, 1);
    assert!(
        !feed.flush_paused(),
        "one slot: item 3 goes, the status still waits"
    );
    group.poll(&mut collect, 1);
    assert!(feed.flush_paused());
    group.poll(&mut collect, 10);
    assert_eq!(collect.items, vec![1, 2, 3]);
    assert_eq!(collect.statuses.len(), 1);
    assert_eq!(
        collect.statuses[0].sequence, 3,
        "the status follows the whole cache"
    );
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 30, "cached items carry their positions");
    let status = feed.status();
    assert_eq!(status.dropped, 0);
    assert!(status.drained);
    assert!(
        !status.paused,
        "the cache was replayed in full: the pause it met has ended"
    );
    assert!(status.settled);
}

#[test]
fn a_status_is_deduplicated_against_the_waiting_one_not_the_published_one() {
    // book: guarantees/pause.md: A waiting, replaced by B,
    // then A again delivers A; once subscribers hold A, B waiting then A again drops B
    // and delivers nothing
    let (feed, _commits) = status_feed(1);
    let mut group = reader(&feed, "group");
    feed.start_complete();
    publish_range(&feed, 1..=1);
    feed.report_state(SourceState::CaughtUp, None);
    feed.report_state(SourceState::Behind, Some("reading"));
    feed.report_state(SourceState::CaughtUp, None);
    let mut collect = Collect::default();
    group.poll(&mut collect, 1);
    assert!(feed.flush_paused());
    group.poll(&mut collect, 10);
    let delivered: Vec<SourceState> = collect.statuses.iter().map(|s| s.state).collect();
    assert_eq!(
        delivered,
        vec![SourceState::CaughtUp],
        "the latest report, once"
    );

    publish_range(&feed, 2..=2);
    feed.report_state(SourceState::Behind, Some("reading"));
    assert!(!feed.status().drained, "BEHIND waits for room");
    feed.report_state(SourceState::CaughtUp, None);
    group.poll(&mut collect, 1);
    feed.flush_paused();
    group.poll(&mut collect, 10);
    let delivered: Vec<SourceState> = collect.statuses.iter().map(|s| s.state).collect();
    assert_eq!(
        delivered,
        vec![SourceState::CaughtUp],
        "subscribers hold CAUGHT_UP: the waiting BEHIND is dropped and nothing is sent"
    );
    assert_eq!(collect.items, vec![1, 2]);
    assert!(feed.status().drained);
}

#[test]
fn a_report_that_replaces_the_waiting_startup_status_keeps_the_feed_undrained() {
    // book: guarantees/pause.md: the hold
    // on completion belongs to the startup status, not to whichever status waits: its
    // replacement keeps the feed undrained until it is delivered after the cache
    let (feed, _commits) = status_feed(1);
    let mut group = reader(&feed, "group");
    for item in 1..=2u64 {
        feed.cache(item, item * 10);
    }
    feed.report_state(SourceState::Behind, Some("starting"));
    feed.start_complete();
    feed.report_state(SourceState::CaughtUp, None);
    assert!(
        !feed.status().drained,
        "the cache and the replacement still wait"
    );
    let mut collect = Collect::default();
    group.poll(&mut collect, 1);
    assert!(!feed.flush_paused(), "item 2 takes the slot");
    assert!(!feed.status().drained, "the replacement still waits");
    group.poll(&mut collect, 1);
    assert!(feed.flush_paused());
    group.poll(&mut collect, 10);
    assert_eq!(collect.items, vec![1, 2]);
    let delivered: Vec<(SourceState, u64)> = collect
        .statuses
        .iter()
        .map(|s| (s.state, s.sequence))
        .collect();
    assert_eq!(
        delivered,
        vec![(SourceState::CaughtUp, 2)],
        "after the whole cache"
    );
    assert!(feed.status().drained);
}

#[test]
fn a_publish_nested_in_a_positioned_cache_never_takes_the_outer_items_position() {
    // book: guarantees/commit-after-processing.md: the mapper of an item
    // cached before the start runs inside the cache's reservation: a nested try_publish
    // is told to retry, a nested push publish and a nested positioned cache are deferred
    // and follow the outer item, the cache keeping its own position. Before, the nested
    // item was cached ahead of the outer one with the outer one's position, so consuming
    // only the nested item acknowledged past the outer one.
    let (feed, nested_result) = self_publishing_feed(|feed| {
        feed.publish(100)
            .expect("a nested push publish is deferred");
        feed.cache(50, 15);
    });
    let (feed, commits) = positioned_feed_with(feed);
    let mut group = reader(&feed, "group");
    feed.cache(1, 10);
    feed.cache(2, 20);
    feed.start_complete();
    feed.flush_paused();
    assert_eq!(nested_result.lock().unwrap().as_deref(), Some("retry"));
    assert_eq!(process(&mut group, 1), vec![1], "the outer item first");
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 10, "the outer item's own position");
    let rest = process(&mut group, 3);
    assert_eq!(
        rest,
        vec![100, 50, 2],
        "the deferred ones follow the outer item, in order"
    );
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 20);
}

#[test]
fn cached_startup_items_are_replayed_in_order_before_later_ones() {
    // book: guarantees/pause.md cache replay: tryPublish replays the rest of the cache first, so order is kept
    let (feed, _commits) = positioned_feed(2);
    let mut group = reader(&feed, "group");
    for item in 1..=4u64 {
        assert!(
            feed.try_publish(item, item * 10).is_published(),
            "cached before the start"
        );
    }
    feed.start_complete();
    assert!(matches!(feed.try_publish(5, 50), TryPublish::Paused(5)));
    let mut collect = Collect::default();
    group.poll(&mut collect, 2);
    assert!(
        matches!(feed.try_publish(5, 50), TryPublish::Paused(5)),
        "the cache goes first"
    );
    group.poll(&mut collect, 2);
    assert!(feed.try_publish(5, 50).is_published());
    group.poll(&mut collect, 1);
    assert_eq!(collect.items, vec![1, 2, 3, 4, 5]);
}

#[test]
fn a_filtered_line_during_the_startup_cache_never_commits_past_cached_lines() {
    // issue 9 item 7; book: guarantees/commit-after-processing.md ("an item filtered ... is due as soon
    // as the items before it", never sooner) and book: guarantees/pause.md (cache replay). A source whose
    // fallible data mapper refuses a line records it with `filtered`; during the startup
    // cache (and while a paused replay still holds cached lines) it must wait in the
    // cache behind the lines cached before it. The feed's own mapper filters item 2 at
    // the replay, in order.
    let feed = Feed::builder("lines")
        .queue_capacity(1)
        .mapper(|item: u64| (item != 2).then_some(item))
        .build();
    let (feed, commits) = positioned_feed_with(feed);
    let mut group = reader(&feed, "group");
    assert!(feed.try_publish(1, 10).is_published(), "cached");
    assert!(feed.try_publish(2, 20).is_published(), "cached");
    feed.filtered(30, "the source's mapper refused this line");
    assert!(feed.try_publish(4, 40).is_published(), "cached");
    feed.poll_acknowledgements();
    assert_eq!(
        commits.pointer(),
        0,
        "before the start completes nothing was processed"
    );
    feed.start_complete();
    feed.poll_acknowledgements();
    assert_eq!(
        commits.pointer(),
        0,
        "the reader processed nothing: not even the filtered line is due"
    );
    // the replay paused at the full queue (item 1 in it, 2, 30 and 4 still cached): a
    // line filtered now goes behind item 4, not into the window ahead of it
    feed.filtered(50, "the source's mapper refused this line too");
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 0, "still nothing processed");
    assert_eq!(process(&mut group, 1), vec![1]);
    feed.poll_acknowledgements();
    assert_eq!(
        commits.pointer(),
        10,
        "item 1, never past what is still cached"
    );
    assert!(feed.flush_paused(), "the rest of the cache is replayed");
    feed.poll_acknowledgements();
    assert_eq!(
        commits.pointer(),
        30,
        "the filtered 2 and 30 after item 1 are due; item 4 is not processed yet"
    );
    assert_eq!(process(&mut group, 1), vec![4]);
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 50);
    assert_eq!(feed.filtered_count(), 3);
}

#[test]
fn a_push_publish_into_a_full_pause_queue_drops_counts_and_latches() {
    // book: guarantees/pause.md: a push publish cannot pause: it falls back to drop-after-spin, counted as
    // dropped and downgraded, and a loss on PAUSE latches
    let settings = OverloadSettings {
        spin_bound: Duration::ZERO,
        ..OverloadSettings::pause()
    };
    let feed: Arc<Publisher<u64, u64>> = Feed::builder("pushes")
        .queue_capacity(1)
        .overload(settings)
        .build();
    let _group = reader(&feed, "group");
    feed.start_complete();
    feed.publish(1).expect("room");
    feed.publish(2)
        .expect("a push publish is not refused under PAUSE");
    let status = feed.status();
    assert_eq!((status.dropped, status.downgraded), (1, 1));
    assert!(!status.lossless);
    assert_eq!(
        feed.overload_states(),
        vec![("group/pushes".to_owned(), OverloadState::Latched)]
    );
    feed.clear_overload();
    assert_eq!(
        feed.overload_states(),
        vec![("group/pushes".to_owned(), OverloadState::Up)]
    );
}

fn block_feed(deadline: Duration) -> Arc<Publisher<u64, u64>> {
    Feed::builder("orders")
        .queue_capacity(1)
        .overload(OverloadSettings::block_with_deadline(deadline))
        .build()
}

#[test]
fn a_block_refusal_is_all_or_nothing() {
    // Overload and loss: no queue holds a refused item and no sequence number is used
    let feed = block_feed(Duration::from_millis(20));
    let mut roomy = feed
        .subscribe(
            "roomy",
            SubscribeOptions {
                capacity: Some(8),
                ..Default::default()
            },
        )
        .expect("subscribed")
        .take_reader()
        .expect("reader");
    let _full = reader(&feed, "full");
    feed.start_complete();
    feed.publish(1).expect("both have room");
    let refused = feed
        .publish(2)
        .expect_err("the full queue has no room within the deadline");
    assert_eq!(refused.kind, FailureKind::RefusedDeadline);
    assert!(refused.reason.contains("full/orders"), "{refused}");
    assert_eq!(process(&mut roomy, 1), vec![1]);
    assert!(
        roomy.is_empty(),
        "the queue with room did not get the refused item"
    );
    let status = feed.status();
    assert_eq!((status.sequence, status.refused, status.dropped), (1, 1, 0));
    assert!(!status.lossless);
    assert!(feed
        .overload_states()
        .contains(&("full/orders".to_owned(), OverloadState::Latched)));
}

#[test]
fn a_block_publish_waits_for_room_off_agent_threads() {
    let feed = block_feed(Duration::from_secs(30));
    let mut group = reader(&feed, "group");
    feed.start_complete();
    feed.publish(1).expect("room");
    let publisher = Arc::clone(&feed);
    let waiting = std::thread::spawn(move || publisher.publish(2));
    // the waiting publisher does not hold the publish lock: status still answers
    while feed.status().sequence < 1 {
        std::thread::yield_now();
    }
    assert_eq!(process(&mut group, 1), vec![1]);
    waiting
        .join()
        .expect("thread")
        .expect("delivered once there was room");
    assert_eq!(process(&mut group, 1), vec![2]);
    assert!(feed.status().lossless);
}

#[test]
fn a_block_publish_on_an_agent_thread_downgrades_to_a_counted_drop() {
    let feed = Feed::<u64, u64>::builder("orders")
        .queue_capacity(1)
        .overload(OverloadSettings {
            spin_bound: Duration::ZERO,
            ..OverloadSettings::block_with_deadline(Duration::from_secs(30))
        })
        .build();
    let _group = reader(&feed, "group");
    feed.start_complete();
    let _agent = agent::mark_current_thread("source-agent");
    feed.publish(1).expect("room");
    feed.publish(2)
        .expect("an agent thread never waits: the publish drops");
    let status = feed.status();
    assert_eq!(
        (status.dropped, status.downgraded, status.refused),
        (1, 1, 0)
    );
}

#[test]
fn the_block_latch_survives_an_unsubscribe_and_the_kill_switch_runs_once() {
    let feed = Feed::<u64, u64>::builder("orders")
        .queue_capacity(1)
        .overload(OverloadSettings {
            kill_switch: true,
            ..OverloadSettings::block_with_deadline(Duration::from_millis(1))
        })
        .build();
    let (sender, received) = std::sync::mpsc::channel();
    feed.set_kill_switch(Arc::new(move |feed: &str, queue: &str| {
        let on_agent = agent::is_agent_thread();
        sender
            .send((feed.to_owned(), queue.to_owned(), on_agent))
            .ok();
    }));
    let group = feed
        .subscribe("group", SubscribeOptions::default())
        .expect("subscribed");
    feed.start_complete();
    feed.publish(1).expect("room");
    assert!(feed.publish(2).is_err());
    assert!(feed.publish(3).is_err());
    let hook = received
        .recv_timeout(Duration::from_secs(30))
        .expect("the hook ran");
    assert_eq!(
        hook,
        ("orders".to_owned(), "group/orders".to_owned(), false)
    );
    assert!(
        received.recv_timeout(Duration::from_millis(200)).is_err(),
        "once per latch"
    );
    feed.unsubscribe(group.id());
    assert_eq!(
        feed.overload_states(),
        vec![("group/orders".to_owned(), OverloadState::Removed)]
    );
    let _again = feed
        .subscribe("group", SubscribeOptions::default())
        .expect("re-added");
    assert_eq!(
        feed.overload_states(),
        vec![("group/orders".to_owned(), OverloadState::Latched)]
    );
}

#[test]
fn a_feed_for_several_groups_shares_one_copy_of_each_item() {
    let feed: Arc<Publisher<Vec<u8>, u64>> = Feed::builder("blobs").build();
    let registry = mongoose_delivery::FeedRegistry::default();
    registry.register(feed.clone()).expect("registered");
    let blobs = registry.get("blobs").expect("registered");
    let error = mongoose_delivery::FeedRegistry::check_type(
        &*blobs,
        std::any::TypeId::of::<String>(),
        std::any::type_name::<String>(),
    )
    .expect_err("wrong type");
    assert!(error.to_string().contains("alloc::vec::Vec<u8>"), "{error}");
    assert!(
        error.to_string().contains("alloc::string::String"),
        "{error}"
    );
    assert!(registry.get("nope").is_none());
    let mut first = feed
        .subscribe("a", SubscribeOptions::default())
        .expect("subscribed")
        .take_reader()
        .expect("reader");
    let mut second = feed
        .subscribe("b", SubscribeOptions::default())
        .expect("subscribed")
        .take_reader()
        .expect("reader");
    feed.start_complete();
    feed.publish(vec![7; 1024]).expect("published");
    struct Address(Vec<usize>);
    impl mongoose_delivery::Dispatcher<Vec<u8>> for Address {
        fn dispatch(&mut self, item: &Vec<u8>, _: u32) -> mongoose_delivery::DispatchOutcome {
            self.0.push(item.as_ptr() as usize);
            mongoose_delivery::DispatchOutcome::Done
        }
        fn complete(
            &mut self,
            _: mongoose_core::engine::PendingCompletion,
            _: &mongoose_core::Delivery,
        ) -> Result<(), mongoose_core::ProcessorError> {
            Ok(())
        }
    }
    let mut seen = Address(Vec::new());
    first.poll(&mut seen, 1);
    second.poll(&mut seen, 1);
    assert_eq!(seen.0.len(), 2);
    assert_eq!(seen.0[0], seen.0[1], "both queues read the same allocation");
}

#[test]
fn a_batch_pulls_only_what_the_feed_can_take() {
    // book: guarantees/pause.md under a batch: nothing is taken from the source that cannot be published
    let (feed, commits, [mut group]) = started_with_readers(positioned_feed(4), ["group"]);
    let mut next = 1u64;
    let mut pulled = Vec::new();
    let mut produce = || {
        let item = next;
        next += 1;
        pulled.push(item);
        Some((item, item * 10))
    };
    assert_eq!(
        feed.try_publish_batch(&mut produce),
        mongoose_core::BatchEnd::Paused
    );
    assert_eq!(pulled, vec![1, 2, 3, 4], "the fifth item was never taken");
    assert_eq!(process(&mut group, 4), vec![1, 2, 3, 4]);
    let mut rest = vec![(5u64, 50u64)].into_iter();
    assert_eq!(
        feed.try_publish_batch(&mut || rest.next()),
        mongoose_core::BatchEnd::Exhausted
    );
    assert_eq!(process(&mut group, 1), vec![5]);
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 50);
    assert_eq!(feed.status().dropped, 0);
}

#[test]
fn a_batch_whose_last_item_fills_the_queue_does_not_stay_paused() {
    // regression (CI, "never settled"): the hold is checked before the next item is
    // pulled, so a batch whose last item filled the queue ends "paused" with nothing
    // held. Once the queue drained and the source found nothing more to publish, the
    // feed must not report itself paused (and so never settled).
    let (feed, commits, [mut group]) = started_with_readers(positioned_feed(4), ["group"]);
    let mut batch = (1u64..=4).map(|item| (item, item * 10));
    assert_eq!(
        feed.try_publish_batch(&mut || batch.next()),
        mongoose_core::BatchEnd::Paused,
        "the queue is full: the feed cannot tell whether the source has more"
    );
    assert_eq!(process(&mut group, 4), vec![1, 2, 3, 4]);
    assert_eq!(
        feed.try_publish_batch(&mut || None),
        mongoose_core::BatchEnd::Exhausted
    );
    feed.report_state(SourceState::CaughtUp, None);
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 40);
    let status = feed.status();
    assert!(!status.paused, "nothing is held: the feed is not paused");
    assert!(status.settled, "everything was processed and committed");
    assert_eq!(status.pauses, 1);
}

#[test]
fn a_filtered_input_reported_while_producing_a_batch_keeps_its_place() {
    // a producer that reports a mapper error from inside the batch: the filtered
    // position is numbered before the line produced after it
    let (feed, commits, [mut group]) = started_with_readers(positioned_feed(16), ["group"]);
    let publisher = Arc::clone(&feed);
    let mut step = 0u64;
    let mut produce = || {
        step += 1;
        match step {
            1 => Some((1u64, 10u64)),
            2 => {
                publisher.filtered(20, "not a number");
                Some((3, 30))
            }
            3 => {
                publisher.filtered(40, "not a number");
                None
            }
            _ => None,
        }
    };
    assert_eq!(
        feed.try_publish_batch(&mut produce),
        mongoose_core::BatchEnd::Exhausted
    );
    let status = feed.status();
    assert_eq!(
        status.sequence, 4,
        "two lines and two filtered inputs, none left deferred"
    );
    assert_eq!(process(&mut group, 2), vec![1, 3]);
    feed.poll_acknowledgements();
    assert_eq!(
        commits.pointer(),
        40,
        "the trailing filtered input is committed with the rest"
    );
    let acknowledged: Vec<u64> = commits
        .0
        .lock()
        .unwrap()
        .acknowledged
        .iter()
        .map(|(_, _, position)| *position)
        .collect();
    assert!(
        acknowledged.windows(2).all(|pair| pair[0] < pair[1]),
        "positions in order: {acknowledged:?}"
    );
}

#[test]
fn a_drop_is_reported_to_the_reader_where_it_was_lost() {
    // book: guarantees/control-plane.md: a recording marks where items were
    // lost, so the reader reports each dropped run before the next item it is given
    struct Events(Vec<String>);
    impl mongoose_delivery::Dispatcher<u64> for Events {
        fn dispatch(&mut self, item: &u64, _: u32) -> mongoose_delivery::DispatchOutcome {
            self.0.push(format!("item {item}"));
            mongoose_delivery::DispatchOutcome::Done
        }
        fn complete(
            &mut self,
            _: mongoose_core::engine::PendingCompletion,
            _: &mongoose_core::Delivery,
        ) -> Result<(), mongoose_core::ProcessorError> {
            Ok(())
        }
        fn dropped(&mut self, run: &mongoose_delivery::DroppedRun) {
            self.0.push(format!(
                "dropped {}..={} ({})",
                run.first_sequence, run.last_sequence, run.count
            ));
        }
    }
    let (feed, _commits, [mut group]) = started_with_readers(drop_feed(2), ["slow"]);
    publish_range(&feed, 1..=5);
    let mut events = Events(Vec::new());
    assert_eq!(group.poll(&mut events, 1), 1);
    assert_eq!(
        events.0,
        vec!["item 1"],
        "the loss is reported where it happened, not before"
    );
    group.poll(&mut events, 10);
    publish_range(&feed, 6..=6);
    group.poll(&mut events, 10);
    feed.publish(7).expect("queued");
    feed.publish(8).expect("queued");
    feed.publish(9)
        .expect("dropped: a trailing loss with no item after it");
    group.poll(&mut events, 10);
    assert_eq!(
        events.0,
        vec![
            "item 1",
            "item 2",
            "dropped 3..=5 (3)",
            "item 6",
            "item 7",
            "item 8",
            "dropped 9..=9 (1)"
        ]
    );
}

#[test]
fn a_batch_takes_nothing_more_once_its_queue_is_fenced_while_producing() {
    // book: guarantees/pause.md under a batch (the chunked fast path of a feed with one queue): a fence raised
    // while the source produces pauses the feed before the next item is pulled, as it
    // does between single publishes
    let (feed, commits, [mut group]) = started_with_readers(positioned_feed(16), ["group"]);
    let mut next = 1u64;
    let mut pulled = Vec::new();
    let mut produce = || {
        let item = next;
        next += 1;
        pulled.push(item);
        if item == 2 {
            group.set_fenced(true);
        }
        Some((item, item * 10))
    };
    assert_eq!(
        feed.try_publish_batch(&mut produce),
        mongoose_core::BatchEnd::Paused
    );
    assert_eq!(
        pulled,
        vec![1, 2],
        "nothing was pulled after the fence went up"
    );
    group.set_fenced(false);
    assert_eq!(process(&mut group, 2), vec![1, 2]);
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 20);
}

#[test]
fn a_batch_whose_producer_panics_keeps_the_items_it_had_published() {
    // book: guarantees/commit-after-processing.md under a batch (the chunked fast path): items pulled before the producer
    // panicked were handed over and are published, as single publishes would be, and
    // the feed goes on numbering and acknowledging after it
    let (feed, commits, [mut group]) = started_with_readers(positioned_feed(16), ["group"]);
    let mut next = 1u64;
    let mut produce = || {
        let item = next;
        next += 1;
        assert!(item < 3, "the producer failed");
        Some((item, item * 10))
    };
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = feed.try_publish_batch(&mut produce);
    }));
    assert!(panicked.is_err(), "the producer's panic reaches its caller");
    assert_eq!(process(&mut group, 2), vec![1, 2]);
    let mut rest = vec![(3u64, 30u64)].into_iter();
    assert_eq!(
        feed.try_publish_batch(&mut || rest.next()),
        mongoose_core::BatchEnd::Exhausted
    );
    assert_eq!(process(&mut group, 1), vec![3]);
    feed.poll_acknowledgements();
    assert_eq!(commits.pointer(), 30);
    assert_eq!(feed.status().sequence, 3);
}

#[test]
fn retuned_overload_bounds_apply_to_the_queues_already_subscribed() {
    // issue 39, item 5: a reload's new block deadline applies to the running queues:
    // a publish into the full queue now waits for room instead of being refused after
    // the old 20 ms
    let feed = block_feed(Duration::from_millis(20));
    let mut full = reader(&feed, "full");
    feed.start_complete();
    feed.publish(1).expect("room");
    feed.publish(2)
        .expect_err("refused after the old deadline of 20 ms");
    feed.retune_overload(
        Some(OverloadSettings::block_with_deadline(Duration::from_secs(
            3600,
        ))),
        std::collections::HashMap::new(),
    );
    let publisher = {
        let feed = Arc::clone(&feed);
        std::thread::spawn(move || feed.publish(3))
    };
    // the publish waits (the old deadline passed long before this)
    std::thread::sleep(Duration::from_millis(300));
    assert!(!publisher.is_finished(), "the publish waits for room");
    assert_eq!(process(&mut full, 1), vec![1]);
    publisher
        .join()
        .expect("the publisher")
        .expect("published once there was room");
    assert_eq!(process(&mut full, 1), vec![3]);
    assert_eq!(
        feed.status().refused,
        1,
        "only the publish before the retune"
    );
}
