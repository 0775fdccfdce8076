//! The source driver (issue 12, item 4): a source that only reads and publishes is
//! committed, paused and stopped correctly because the driver polls the
//! acknowledgements and flushes paused items around its duty cycles, and polls once
//! more at the stop.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::{
    agent, CoreError, EventSource, IdleStrategy, SourceOutput, SourceState, TryPublish, WorkDone,
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

    fn start(&mut self) -> Result<(), CoreError> {
        self.on_agent_thread = agent::is_agent_thread();
        Ok(())
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
