//! The source driver (issue 12, item 4): a source that only reads and publishes is
//! committed, paused and stopped correctly because the driver polls the
//! acknowledgements and flushes paused items around its duty cycles, and polls once
//! more at the stop.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::{
    agent, CoreError, Epoch, EventSource, IdleStrategy, SourceOutput, SourceStart, SourceState,
    TryPublish, WorkDone,
};
use mongoose_delivery::{AnyFeed, Publisher, SourceDriver};
use support::*;

/// Publishes 1..=count at positions 10, 20, ... and nothing else: it never polls the
/// acknowledgements nor flushes, and keeps a paused item to offer it again.
struct Counter {
    output: Arc<Publisher<u64, u64>>,
    next: u64,
    count: u64,
    paused: Option<u64>,
    on_agent_thread: bool,
}

impl EventSource for Counter {
    fn name(&self) -> &str {
        "counter"
    }

    fn start(&mut self) -> Result<SourceStart, CoreError> {
        self.on_agent_thread = agent::is_agent_thread();
        Ok(SourceStart {
            epoch: Epoch::NONE,
            // it keeps a paused item and offers it again: a re-readable source, which
            // waits for a full queue (registered false, a queue of 4 dropped an item
            // whenever the reader was late, about one run in eight under load)
            pause_by_default: true,
            committer: None,
        })
    }

    fn do_work(&mut self) -> Result<WorkDone, CoreError> {
        let mut done = 0;
        while self.next <= self.count {
            let item = self.paused.take().unwrap_or(self.next);
            match self.output.try_publish(item, item * 10) {
                TryPublish::Published => {
                    self.next += 1;
                    done += 1;
                }
                TryPublish::Paused(item) | TryPublish::Retry(item) => {
                    self.paused = Some(item);
                    break;
                }
            }
        }
        if self.next > self.count {
            self.output.report_state(SourceState::CaughtUp, None);
        }
        Ok(WorkDone(done))
    }

    fn stop(&mut self) -> Result<(), CoreError> {
        Ok(())
    }
}

#[test]
fn a_source_that_never_polls_is_committed_through_the_driver() {
    // a queue of 4 for 200 items: the source pauses again and again
    let (feed, commits) = positioned_feed(4);
    let mut group = reader(&feed, "group");
    feed.start_complete();
    let driver = SourceDriver::new("counter", IdleStrategy::Yield);
    let stop = driver.stop_handle();
    let mut source = Counter {
        output: Arc::clone(&feed),
        next: 1,
        count: 200,
        paused: None,
        on_agent_thread: false,
    };
    let driven = Arc::clone(&feed);
    let thread = std::thread::spawn(move || {
        driver
            .run(&mut source, &*driven as &dyn AnyFeed)
            .expect("ran");
        source.on_agent_thread
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut processed = Vec::new();
    while commits.pointer() < 2_000 {
        assert!(
            Instant::now() < deadline,
            "never committed: {}",
            commits.pointer()
        );
        processed.extend(process_available(&mut group));
        std::thread::yield_now();
    }
    stop.stop();
    let on_agent_thread = thread.join().expect("the driver's thread");
    assert_eq!(
        processed,
        (1..=200).collect::<Vec<u64>>(),
        "every item once, in order"
    );
    assert!(feed.status().lossless, "nothing dropped: the source waited");
    assert!(
        on_agent_thread,
        "the driver marks its thread as the source's agent thread"
    );
}

#[test]
fn the_driver_commits_what_was_processed_when_it_stops() {
    let (feed, commits) = positioned_feed(16);
    let mut group = reader(&feed, "group");
    feed.start_complete();
    let driver = SourceDriver::new("counter", IdleStrategy::SleepingMillis(1));
    let stop = driver.stop_handle();
    let mut source = Counter {
        output: Arc::clone(&feed),
        next: 1,
        count: 5,
        paused: None,
        on_agent_thread: false,
    };
    stop.stop(); // stopped before it starts: one start, no cycle, one stop
    driver
        .run(&mut source, &*feed as &dyn AnyFeed)
        .expect("ran");
    assert_eq!(commits.pointer(), 0, "nothing published, nothing committed");
    // published by hand, processed, then a driver run that stops at once: its final
    // poll commits what was processed
    assert!(feed.try_publish(1, 10).is_published());
    assert_eq!(process(&mut group, 1), vec![1]);
    driver
        .run(&mut source, &*feed as &dyn AnyFeed)
        .expect("ran");
    assert_eq!(commits.pointer(), 10);
}

/// Publishes `count` items in its first cycle and lets its group process them inside
/// the same cycle (as a consumer on another thread would meanwhile); at its stop it
/// notes what was committed then. It never polls the acknowledgements itself.
struct SelfConsuming {
    inner: Counter,
    group: mongoose_delivery::QueueReader<u64>,
    processed: Vec<u64>,
    committed_at_stop: Option<u64>,
    commits: Commits,
}

impl EventSource for SelfConsuming {
    fn name(&self) -> &str {
        "self-consuming"
    }

    fn start(&mut self) -> Result<SourceStart, CoreError> {
        self.inner.start()
    }

    fn do_work(&mut self) -> Result<WorkDone, CoreError> {
        let done = self.inner.do_work()?;
        self.processed.extend(process_available(&mut self.group));
        Ok(done)
    }

    fn stop(&mut self) -> Result<(), CoreError> {
        self.committed_at_stop = Some(self.commits.pointer());
        Ok(())
    }
}

fn self_consuming(count: u64) -> (SelfConsuming, Arc<Publisher<u64, u64>>) {
    let (feed, commits) = positioned_feed(16);
    let group = reader(&feed, "group");
    feed.start_complete();
    let source = SelfConsuming {
        inner: Counter {
            output: Arc::clone(&feed),
            next: 1,
            count,
            paused: None,
            on_agent_thread: false,
        },
        group,
        processed: Vec::new(),
        committed_at_stop: None,
        commits,
    };
    (source, feed)
}

#[test]
fn one_driver_cycle_commits_what_was_processed_during_it() {
    let (mut source, feed) = self_consuming(3);
    SourceDriver::start_source(&mut source, &*feed).expect("started");
    let work = SourceDriver::cycle(&mut source, &*feed).expect("a cycle");
    assert_eq!(source.processed, vec![1, 2, 3]);
    assert!(work.0 >= 3, "the cycle reports what it published: {work:?}");
    assert_eq!(
        source.commits.pointer(),
        30,
        "a cycle that published polls the acknowledgements once more (the commit lag)"
    );
    SourceDriver::stop_source(&mut source, &*feed).expect("stopped");
}

#[test]
fn the_driver_commits_before_and_after_the_source_stops() {
    let (mut source, feed) = self_consuming(2);
    SourceDriver::start_source(&mut source, &*feed).expect("started");
    // published and processed by hand, uncommitted: the stop must commit it before the
    // source stops (a file source writes its pointer back and unmaps it then)
    assert!(source.inner.output.try_publish(7, 5).is_published());
    assert_eq!(process(&mut source.group, 1), vec![7]);
    SourceDriver::stop_source(&mut source, &*feed).expect("stopped");
    assert_eq!(
        source.committed_at_stop,
        Some(5),
        "committed before the source's stop"
    );
    // through run: a stop requested before it starts still commits before the stop
    let (mut source, feed) = self_consuming(2);
    assert!(source.inner.output.try_publish(7, 5).is_published());
    assert_eq!(process(&mut source.group, 1), vec![7]);
    let driver = SourceDriver::new("self-consuming", IdleStrategy::Yield);
    driver.stop_handle().stop();
    driver
        .run(&mut source, &*feed as &dyn AnyFeed)
        .expect("ran");
    assert_eq!(source.committed_at_stop, Some(5));
}

/// Fails every duty cycle until `works` is set (a pointer inside a frame, a damaged
/// input: it cannot read on).
struct Failing {
    works: Arc<std::sync::atomic::AtomicBool>,
    output: Arc<Publisher<u64, u64>>,
}

impl EventSource for Failing {
    fn name(&self) -> &str {
        "failing"
    }

    fn start(&mut self) -> Result<SourceStart, CoreError> {
        Ok(SourceStart {
            epoch: Epoch::NONE,
            pause_by_default: false,
            committer: None,
        })
    }

    fn do_work(&mut self) -> Result<WorkDone, CoreError> {
        if self.works.load(std::sync::atomic::Ordering::Acquire) {
            self.output.report_state(SourceState::CaughtUp, None);
            return Ok(WorkDone(0));
        }
        Err(CoreError::Source {
            source_name: "failing".into(),
            message: "the pointer is inside a frame at 4711".into(),
        })
    }

    fn stop(&mut self) -> Result<(), CoreError> {
        Ok(())
    }
}

// issue 25, item 5: a pointer inside a frame failed the cycle every 10 s for ever while
// the feed said BEHIND with `stalled: null`, and `--exit-when-settled` never ended
#[test]
fn a_source_whose_cycle_keeps_failing_stalls_with_its_reason() {
    let (feed, _commits) = positioned_feed(16);
    let _group = reader(&feed, "group");
    feed.start_complete();
    let works = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let driver = SourceDriver::new("failing", IdleStrategy::SleepingMillis(1));
    let stop = driver.stop_handle();
    let mut source = Failing {
        works: Arc::clone(&works),
        output: Arc::clone(&feed),
    };
    let driven = Arc::clone(&feed);
    let thread = std::thread::spawn(move || {
        driver
            .run(&mut source, &*driven as &dyn AnyFeed)
            .expect("ran");
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let stalled = loop {
        if let Some(stalled) = feed.status().stalled {
            break stalled;
        }
        assert!(
            Instant::now() < deadline,
            "the failing source never stalled its feed"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        stalled.contains("the pointer is inside a frame at 4711")
            && stalled.contains("failed 30 times in a row"),
        "the stall names the source's error and how often it failed: {stalled}"
    );
    assert!(!feed.status().settled, "a stalled feed is not settled");
    // the source works again: the stall goes
    works.store(true, std::sync::atomic::Ordering::Release);
    while feed.status().stalled.is_some() {
        assert!(
            Instant::now() < deadline,
            "the stall stayed after the source recovered"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.stop();
    thread.join().expect("the driver's thread");
}
