//! RECORD of timers, of an unpositioned feed and of a retried dispatch, on a group over
//! in-memory feeds; then their REPLAY (book: running/record-and-replay.md).

use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mongoose_control::memory::MemoryFeeds;
use mongoose_control::{
    context, ControlConfig, ControlPlane, GroupOptions, IdleStrategy, RetryPolicy,
};
use mongoose_core::{Processor, ProcessorError, StartContext};
use mongoose_replay::{Clock, Entry, FeedCodecs, OutputSink, Replayer};

mod support;
use support::{close_groups, read_recording, recording_group_with, wait_until, WAIT};

/// Schedules a timer per number; fails on 2 while `failures` lasts (retry-safe).
struct Ticker {
    sink: OutputSink,
    clock: Clock,
    failures: Arc<AtomicU32>,
}

impl Ticker {
    fn on_number(&mut self, number: &u64) -> Result<(), ProcessorError> {
        if *number == 2 && self.failures.load(Ordering::Acquire) > 0 {
            self.failures.fetch_sub(1, Ordering::AcqRel);
            return Err(ProcessorError::new("2 is not ready yet"));
        }
        context::schedule_timer(Duration::from_millis(1), *number);
        self.sink
            .send(format!("number {number} at {}", self.clock.now()));
        Ok(())
    }
}

impl Processor for Ticker {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("numbers", Ticker::on_number)
    }

    fn on_timer(&mut self, timer: u64) -> Result<(), ProcessorError> {
        let (first, second) = (self.clock.now(), self.clock.now());
        self.sink
            .send(format!("timer {timer} at {first}, {second}"));
        Ok(())
    }

    fn retry_safe(&self) -> bool {
        true
    }
}

struct Quiet;
impl Processor for Quiet {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("numbers", |_: &mut Quiet, _: &u64| Ok(()))
    }
}

// "What is recorded": TimerFired with its readings; a retried dispatch is marked Failed once
// (D4) and not recorded again; processors outside the recorded set have no stream
#[test]
fn timers_are_recorded_with_their_readings_and_a_retried_dispatch_is_marked_failed_once() {
    let dir = tempfile::tempdir().unwrap();
    let feeds = MemoryFeeds::default();
    let numbers = feeds.feed::<u64>("numbers");
    let plane = ControlPlane::new(ControlConfig::default(), Arc::new(feeds));
    let codecs = || FeedCodecs::new().feed::<u64>("numbers");
    let options = GroupOptions {
        idle: IdleStrategy::SleepingMillis(1),
        retry: RetryPolicy {
            max_retries: 5,
            ..RetryPolicy::default()
        },
        ..GroupOptions::default()
    };
    let handle = recording_group_with(&plane, dir.path(), "g", &["ticker"], codecs(), options);
    let (sink, sent) = OutputSink::collecting("out");
    let ticks = Arc::new(AtomicI64::new(100));
    let clock = Clock::from_fn(move || ticks.fetch_add(1, Ordering::AcqRel));
    let failures = Arc::new(AtomicU32::new(2));
    let ticker = plane.add_processor("g", "ticker", move || Ticker {
        sink,
        clock,
        failures,
    });
    assert!(ticker.reply.wait_for(WAIT).unwrap().applied());
    assert!(plane
        .add_processor("g", "quiet", || Quiet)
        .reply
        .wait_for(WAIT)
        .unwrap()
        .applied());
    for number in 1..=3u64 {
        numbers.publish(number);
        assert!(wait_until(|| sent
            .lock()
            .iter()
            .any(|s| s.starts_with(&format!("timer {number} ")))));
    }
    close_groups(&plane);
    assert!(handle.closed() && handle.error().is_none());

    let recording = read_recording(dir.path());
    assert_eq!(recording.streams().len(), 1, "only the recorded set");
    let entries = recording.stream("ticker").unwrap().entries();
    let kinds: Vec<&str> = entries.iter().map(Entry::kind).collect();
    assert_eq!(
        kinds,
        [
            "Inline",
            "TimerFired",
            "Failed",
            "TimerFired",
            "Inline",
            "TimerFired"
        ]
    );
    assert_eq!(
        entries[0].delivery(),
        None,
        "an unpositioned input has no delivery"
    );
    assert_eq!(entries[1].clock(), Some(&[101, 102][..]));

    let live = sent.lock().clone();
    let replay = Replayer::open(dir.path(), codecs())
        .processor("ticker", || Ticker {
            sink: OutputSink::new("out", |_| panic!("a replay never delivers")),
            clock: Clock::system(),
            failures: Arc::default(),
        })
        .run();
    let stopped = replay.stopped("ticker").expect("stops at the mark");
    assert!(
        stopped.starts_with("the recorded run failed here (entry 3)"),
        "{stopped}"
    );
    assert!(stopped.contains("2 is not ready yet"), "{stopped}");
    assert_eq!(replay.outputs("ticker"), &live[..2]);
}
