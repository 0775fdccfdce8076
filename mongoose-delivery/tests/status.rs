//! Feed status honesty (book: guarantees/status.md) and overload health.

mod support;

use std::time::{Duration, Instant};

use mongoose_core::{FailureKind, OverloadSettings, SourceOutput, SourceState};
use mongoose_delivery::{Feed, OverloadState, Publisher, StatusReport};
use support::*;

#[test]
fn the_status_json_has_exactly_the_field_names_of_the_reference() {
    let (feed, _commits, [_group]) = started_with_readers(positioned_feed(4), ["g"]);
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
        "committed",
        "pendingAcks",
        "subscribers",
        "consumers",
        "stalled",
        "unterminated",
        "completionFailures",
        "earlierLosses",
        "rotatedUnreadBytes",
        "rotatedUnreadFiles",
        "losses",
        "lostBytes",
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
    let (feed, _commits, [mut group]) = started_with_readers(positioned_feed(8), ["g"]);
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
    // Overload and loss: DROP_AFTER_SPIN health returns to UP after quiet_period_millis
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

/// A committer whose first `failures` commits fail, as a pointer write or a broker
/// commit can; it keeps what was acknowledged until a commit succeeds.
struct FailingCommitter {
    failures: usize,
    attempts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    durable: std::sync::Arc<std::sync::atomic::AtomicU64>,
    pending: Option<u64>,
}

impl mongoose_core::SourceCommitter<u64> for FailingCommitter {
    fn acknowledged(&mut self, _: u64, _: mongoose_core::Epoch, position: u64) {
        self.pending = Some(position);
    }

    fn commit(&mut self) -> Result<(), mongoose_core::CoreError> {
        let attempt = self
            .attempts
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        let Some(position) = self.pending else {
            return Ok(());
        };
        if attempt <= self.failures {
            return Err(mongoose_core::CoreError::io(
                "test: the commit target refused the write",
                std::io::Error::other("injected at the committer"),
            ));
        }
        self.durable
            .store(position, std::sync::atomic::Ordering::SeqCst);
        self.pending = None;
        Ok(())
    }
}

#[test]
fn a_failed_commit_is_retried_each_cycle_and_settled_waits_for_it() {
    // issue 9 item 8: a failed commit is retried on later polls even when nothing new
    // was acknowledged, and the feed is not settled until the commit succeeded
    let feed: std::sync::Arc<Publisher<u64, u64>> = Feed::builder("lines").build();
    let attempts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let durable = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    feed.acknowledge_with(Box::new(FailingCommitter {
        failures: 2,
        attempts: std::sync::Arc::clone(&attempts),
        durable: std::sync::Arc::clone(&durable),
        pending: None,
    }));
    feed.set_pause_by_default(true);
    let mut group = reader(&feed, "g");
    feed.start_complete();
    publish_range(&feed, 1..=3);
    feed.report_state(SourceState::CaughtUp, None);
    process(&mut group, 3);
    assert_eq!(feed.poll_acknowledgements(), 3, "three items acknowledged");
    let durable_now = || durable.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(durable_now(), 0, "the first commit failed");
    let status = feed.status();
    assert!(
        !status.settled,
        "acknowledged but not committed: not settled: {status:?}"
    );
    assert_eq!((status.acknowledged, status.committed), (3, 0));
    assert_eq!(feed.poll_acknowledgements(), 0, "nothing new");
    assert_eq!(durable_now(), 0, "the second commit failed too");
    assert!(!feed.status().settled);
    assert_eq!(feed.poll_acknowledgements(), 0, "nothing new");
    assert_eq!(durable_now(), 30, "the third attempt committed");
    assert_eq!(attempts.load(std::sync::atomic::Ordering::SeqCst), 3);
    let status = feed.status();
    assert!(status.settled, "{status:?}");
    assert_eq!((status.acknowledged, status.committed), (3, 3));
    assert_eq!(feed.poll_acknowledgements(), 0);
    assert_eq!(
        attempts.load(std::sync::atomic::Ordering::SeqCst),
        3,
        "nothing left to commit: no more attempts"
    );
}
