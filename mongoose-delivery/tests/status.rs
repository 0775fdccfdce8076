//! Feed status honesty (feed-delivery-guarantees §7) and overload health.

mod support;

use std::time::{Duration, Instant};

use mongoose_core::{FailureKind, OverloadSettings, SourceOutput, SourceState};
use mongoose_delivery::{Feed, OverloadState, Publisher, StatusReport};
use support::*;

#[test]
fn the_status_json_has_exactly_the_field_names_of_the_reference() {
    let (feed, _commits) = positioned_feed(4);
    let _group = reader(&feed, "g");
    feed.start_complete();
    let report = StatusReport::from_feeds(vec![feed.status()]);
    let json: serde_json::Value = serde_json::to_value(&report).expect("json");
    let top: Vec<&str> = json
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(top, vec!["fallbackFeeds", "feeds", "lossless", "settled"]);
    let mut fields: Vec<&str> = json["feeds"][0]
        .as_object()
        .expect("feed")
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    let mut expected = vec![
        "feed",
        "state",
        "bounded",
        "sequence",
        "version",
        "detail",
        "drained",
        "settled",
        "lossless",
        "policy",
        "dropped",
        "refused",
        "downgraded",
        "paused",
        "pauses",
        "acknowledged",
        "pendingAcks",
        "subscribers",
        "consumers",
        "stalled",
        "unterminated",
        "completionFailures",
    ];
    expected.sort_unstable();
    assert_eq!(fields, expected);
    let subscriber: Vec<&str> = json["feeds"][0]["subscribers"][0]
        .as_object()
        .expect("subscriber")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        subscriber,
        vec!["dispatched", "drained", "position", "queue"]
    );
}

#[test]
fn settled_waits_for_processing_and_the_acknowledgement() {
    let (feed, _commits) = positioned_feed(8);
    let mut group = reader(&feed, "g");
    feed.start_complete();
    publish_range(&feed, 1..=3);
    feed.report_state(SourceState::CaughtUp, None);
    assert!(
        !feed.status().settled,
        "published items are not processed yet"
    );
    process(&mut group, 3);
    assert!(
        !feed.status().settled,
        "processed but not yet acknowledged to the source"
    );
    feed.poll_acknowledgements();
    let status = feed.status();
    assert!(status.settled && status.lossless, "{status:?}");
    feed.set_unterminated_bytes(5);
    assert_eq!(feed.status().unterminated, 5);
}

#[test]
fn a_silent_source_is_a_fallback_feed_judged_on_drained() {
    let feed: std::sync::Arc<Publisher<u64, u64>> = Feed::builder("silent").build();
    let mut group = reader(&feed, "g");
    feed.start_complete();
    feed.publish(1).expect("published");
    let report = StatusReport::from_feeds(vec![feed.status()]);
    assert_eq!(report.fallback_feeds, vec!["silent".to_owned()]);
    assert!(!report.settled);
    process(&mut group, 1);
    assert!(StatusReport::from_feeds(vec![feed.status()]).settled);
}

#[test]
fn a_degraded_drop_queue_recovers_after_a_quiet_period() {
    // Overload and loss: DROP_AFTER_SPIN health returns to UP after quietPeriodMillis
    let settings = OverloadSettings {
        spin_bound: Duration::ZERO,
        quiet_period: Duration::from_secs(1),
        ..OverloadSettings::drop_after_spin()
    };
    let feed: std::sync::Arc<Publisher<u64, u64>> = Feed::builder("ticks")
        .queue_capacity(1)
        .overload(settings)
        .build();
    let _group = reader(&feed, "g");
    feed.start_complete();
    feed.publish(1).expect("room");
    feed.publish(2).expect("dropped, not refused");
    assert_eq!(
        feed.overload_states(),
        vec![("g/ticks".to_owned(), OverloadState::Degraded)]
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while feed.overload_states()[0].1 != OverloadState::Up {
        assert!(Instant::now() < deadline, "never recovered");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !feed.status().lossless,
        "recovered health does not erase the loss"
    );
}

#[test]
fn once_the_server_stops_a_blocked_publish_is_refused_and_no_kill_switch_starts() {
    let feed: std::sync::Arc<Publisher<u64, u64>> = Feed::builder("orders")
        .queue_capacity(1)
        .overload(OverloadSettings {
            kill_switch: true,
            ..OverloadSettings::block_with_deadline(Duration::from_secs(60))
        })
        .build();
    let (sender, received) = std::sync::mpsc::channel::<()>();
    feed.set_kill_switch(std::sync::Arc::new(move |_: &str, _: &str| {
        sender.send(()).ok();
    }));
    let _group = reader(&feed, "g");
    feed.start_complete();
    feed.publish(1).expect("room");
    feed.begin_stop();
    let refused = feed.publish(2).expect_err("refused at once");
    assert_eq!(refused.kind, FailureKind::RefusedState);
    assert!(
        received.recv_timeout(Duration::from_millis(300)).is_err(),
        "no hook while stopping"
    );
}
