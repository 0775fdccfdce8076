//! (book: crashes/measured.md): the file source with the
//! real delivery engine. Crashes are real: a child process killed with SIGKILL.

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{numbered_lines, offset_after, pipeline, pointer_of, Pipeline};
use mongoose_core::engine::PendingCompletion;
use mongoose_core::{Delivery, DeliveryContext, Epoch, ProcessorError, SourceOutput, SourceState};
use mongoose_delivery::{
    DispatchOutcome, Dispatcher, Feed, Publisher, SourceDriver, SubscribeOptions,
};
use mongoose_source_file::{FileEventSource, FileSourceConfig, Line, ReadStrategy};
use parking_lot::Mutex;

/// A consumer that records each line with the position the delivery context gives,
/// and optionally appends it to an unbuffered file (durable across SIGKILL).
#[derive(Default)]
struct Collect {
    lines: Vec<String>,
    positions: Vec<(Epoch, u64)>,
    applied: Option<File>,
}

impl Dispatcher<Line> for Collect {
    fn dispatch(&mut self, item: &Line, _attempt: u32) -> DispatchOutcome {
        let delivery = DeliveryContext::current().expect("a positioned item");
        self.positions
            .push((delivery.epoch(), delivery.position().offset));
        self.lines.push(item.to_string());
        if let Some(file) = self.applied.as_mut() {
            writeln!(file, "{item}").expect("append applied line");
        }
        DispatchOutcome::Done
    }

    fn complete(
        &mut self,
        _completion: PendingCompletion,
        _delivery: &Delivery,
    ) -> Result<(), ProcessorError> {
        Ok(())
    }
}

fn expected(range: std::ops::RangeInclusive<usize>) -> Vec<String> {
    range.map(|n| format!("line-{n:05}")).collect()
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

const CHILD_ENV: &str = "MONGOOSE_FILE_CRASH_CHILD";
const LINES: usize = 2000;
const PROCESSED: usize = 700;

/// The child half of the crash tests: reads the whole file into the feed, processes
/// `PROCESSED` lines, waits until they are committed, says so, and waits to be killed.
#[test]
#[ignore = "run as a child process by the crash tests"]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let cache = std::env::var("MONGOOSE_FILE_CRASH_CACHE").is_ok_and(|v| v == "1");
    let input = dir.join("input.log");
    let mut pipeline = pipeline(&input, 1024);
    SourceDriver::start_source(&mut pipeline.source, &pipeline.feed).expect("start");
    if !cache {
        pipeline.feed.start_complete();
    }
    // read everything the feed takes: all of it cached, or a full queue and a pause
    let deadline = Instant::now() + Duration::from_secs(30);
    while pipeline.feed.status().sequence < 1024 && pipeline.source.state() != SourceState::CaughtUp
    {
        assert!(Instant::now() < deadline);
        SourceDriver::cycle(&mut pipeline.source, &pipeline.feed).expect("do_work");
    }
    if cache {
        pipeline.feed.start_complete();
    }
    let mut consumer = Collect {
        applied: Some(
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("applied.log"))
                .expect("applied file"),
        ),
        ..Collect::default()
    };
    while consumer.lines.len() < PROCESSED {
        pipeline.reader.poll(&mut consumer, 1);
    }
    while pipeline.source.committed_position() < offset_after(PROCESSED) {
        assert!(Instant::now() < deadline);
        SourceDriver::cycle(&mut pipeline.source, &pipeline.feed).expect("do_work");
    }
    // more duty cycles: a pointer that ran ahead of processing would move now
    for _ in 0..50 {
        SourceDriver::cycle(&mut pipeline.source, &pipeline.feed).expect("do_work");
    }
    fs::write(dir.join("ready"), b"ready").expect("marker");
    loop {
        SourceDriver::cycle(&mut pipeline.source, &pipeline.feed).expect("do_work");
        thread::sleep(Duration::from_millis(5));
    }
}

fn crash_and_restart(cache: bool) {
    let dir = tempfile::tempdir().expect("dir");
    let input = dir.path().join("input.log");
    fs::write(&input, numbered_lines(LINES)).expect("input");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "crash_child", "--ignored", "--nocapture"])
        .env(CHILD_ENV, dir.path())
        .env("MONGOOSE_FILE_CRASH_CACHE", if cache { "1" } else { "0" })
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child");
    let marker = dir.path().join("ready");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !marker.exists() {
        if Instant::now() > deadline || child.try_wait().expect("child").is_some() {
            let _ = child.kill();
            panic!("the child did not get ready");
        }
        thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("SIGKILL"); // std sends SIGKILL on Unix
    child.wait().expect("reaped");

    // the pointer covers exactly what was processed: read-but-not-dispatched lines
    // (in the queue, paused in the source, or cached) were never committed
    assert_eq!(pointer_of(&input).offset, offset_after(PROCESSED));
    let applied = fs::read_to_string(dir.path().join("applied.log")).expect("applied");
    let applied: Vec<String> = applied.lines().map(str::to_owned).collect();
    assert_eq!(applied, expected(1..=PROCESSED));

    // the restart re-delivers everything after the pointer, once and in order
    let mut restarted = pipeline(&input, 1024);
    SourceDriver::start_source(&mut restarted.source, &restarted.feed).expect("start");
    if !cache {
        restarted.feed.start_complete();
    }
    let mut consumer = Collect::default();
    let mut completed = !cache;
    let deadline = Instant::now() + Duration::from_secs(60);
    while consumer.lines.len() < LINES - PROCESSED {
        assert!(Instant::now() < deadline, "re-delivery incomplete");
        SourceDriver::cycle(&mut restarted.source, &restarted.feed).expect("do_work");
        if !completed && restarted.source.state() == SourceState::CaughtUp {
            restarted.feed.start_complete();
            completed = true;
        }
        restarted.reader.poll(&mut consumer, 64);
    }
    assert_eq!(consumer.lines, expected(PROCESSED + 1..=LINES));
    assert_eq!(
        consumer.positions.first().map(|p| p.1),
        Some(offset_after(PROCESSED + 1))
    );
}

// book: crashes/measured.md: read-but-not-dispatched
// lines are not committed and are re-delivered after a crash
#[test]
fn read_but_not_dispatched_lines_are_re_delivered_after_a_crash() {
    crash_and_restart(false);
}

// book: crashes/measured.md (with cacheEventLog)
#[test]
fn read_but_not_dispatched_lines_are_re_delivered_after_a_crash_with_the_startup_cache() {
    crash_and_restart(true);
}

// book: guarantees/commit-after-processing.md (clean stop) and book: crashes/measured.md
#[test]
fn a_clean_stop_commits_only_processed_lines() {
    let dir = tempfile::tempdir().expect("dir");
    let input = dir.path().join("input.log");
    fs::write(&input, numbered_lines(100)).expect("input");
    let mut pipeline = pipeline(&input, 1024);
    SourceDriver::start_source(&mut pipeline.source, &pipeline.feed).expect("start");
    pipeline.feed.start_complete();
    while pipeline.source.state() != SourceState::CaughtUp {
        SourceDriver::cycle(&mut pipeline.source, &pipeline.feed).expect("do_work");
    }
    let mut consumer = Collect::default();
    pipeline.reader.poll(&mut consumer, 30);
    SourceDriver::stop_source(&mut pipeline.source, &pipeline.feed).expect("stop");
    assert_eq!(pointer_of(&input).offset, offset_after(30));
    // the group goes on after the feed stopped; the server commits once it drained
    pipeline.feed.begin_stop();
    pipeline.reader.poll(&mut consumer, 45);
    pipeline.feed.commit_processed_after_stop();
    assert_eq!(pointer_of(&input).offset, offset_after(75));
    assert_eq!(consumer.lines, expected(1..=75));
    assert_eq!(
        consumer.positions.last().map(|p| p.1),
        Some(offset_after(75))
    );
}

fn pause_run(cache: bool) {
    const COUNT: usize = 10_000;
    let dir = tempfile::tempdir().expect("dir");
    let input = dir.path().join("input.log");
    fs::write(&input, numbered_lines(COUNT)).expect("input");
    let Pipeline {
        feed,
        mut source,
        mut reader,
    } = pipeline(&input, 1024);
    let done = Arc::new(AtomicBool::new(false));
    let consumed = Arc::new(Mutex::new(Collect::default()));

    let consumer = {
        let done = Arc::clone(&done);
        let consumed = Arc::clone(&consumed);
        thread::spawn(move || {
            let mut batch = Collect::default();
            while !done.load(Ordering::Acquire) {
                let taken = reader.poll(&mut batch, 32);
                if taken > 0 {
                    let mut shared = consumed.lock();
                    shared.lines.append(&mut batch.lines);
                    shared.positions.append(&mut batch.positions);
                }
                // slow: far slower than the source can read
                thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let source_thread = {
        let done = Arc::clone(&done);
        let feed = Arc::clone(&feed);
        thread::spawn(move || {
            SourceDriver::start_source(&mut source, &feed).expect("start");
            if !cache {
                feed.start_complete();
            }
            let mut completed = !cache;
            while !done.load(Ordering::Acquire) {
                SourceDriver::cycle(&mut source, &feed).expect("do_work");
                if !completed && source.state() == SourceState::CaughtUp {
                    feed.start_complete();
                    completed = true;
                }
                thread::sleep(Duration::from_micros(200));
            }
            SourceDriver::stop_source(&mut source, &feed).expect("stop");
            source
        })
    };
    wait_for("every line", || consumed.lock().lines.len() >= COUNT);
    // the source commits what the consumer processed on its next duty cycle
    wait_for("the last commit", || {
        pointer_of(&input).offset == offset_after(COUNT)
    });
    done.store(true, Ordering::Release);
    consumer.join().expect("consumer");
    let source = source_thread.join().expect("source");

    let consumed = consumed.lock();
    assert_eq!(
        consumed.lines,
        expected(1..=COUNT),
        "every line once, in order"
    );
    let status = feed.status();
    assert_eq!(status.dropped, 0);
    assert!(status.lossless);
    assert_eq!(status.policy, "PAUSE", "a file feed's default");
    if cache {
        // the startup cache held everything; its replay paused at the full queue
        assert!(status.pauses > 0, "the replay never paused: {status:?}");
    } else {
        assert!(status.pauses > 0, "the feed never paused: {status:?}");
        assert!(source.status().pauses > 0);
    }
    let positions: Vec<u64> = consumed.positions.iter().map(|p| p.1).collect();
    assert!(positions.windows(2).all(|pair| pair[0] < pair[1]));
}

// book: guarantees/pause.md, crashes/measured.md: PAUSE, 10,000 lines, a 1,024 queue, a slow consumer
#[test]
fn pause_with_ten_thousand_lines_into_a_1024_queue_and_a_slow_consumer_drops_nothing() {
    pause_run(false);
}

// book: guarantees/pause.md, crashes/measured.md, with cacheEventLog
#[test]
fn pause_with_ten_thousand_lines_and_the_startup_cache_drops_nothing() {
    pause_run(true);
}

// issue 9 item 7; book: guarantees/commit-after-processing.md ("an item filtered ... is due as soon as
// the items before it") and book: guarantees/pause.md (the startup cache): a line the line mapper refuses while
// the feed caches its startup waits behind the lines cached before it
#[test]
fn a_line_the_mapper_refuses_during_the_startup_cache_is_committed_only_after_the_lines_before_it()
{
    let dir = tempfile::tempdir().expect("dir");
    let input = dir.path().join("input.log");
    fs::write(&input, "line-00001\nnot a line\nline-00003\n").expect("input");
    let feed: Arc<Publisher<Line, u64>> = Feed::builder("lines").queue_capacity(16).build();
    let output: Arc<dyn SourceOutput<Line, u64>> = feed.clone();
    let mut source = FileEventSource::new(
        FileSourceConfig::new("lines", &input, ReadStrategy::Committed),
        |line: Line| {
            if line.as_bytes().starts_with(b"line-") {
                Ok(line)
            } else {
                Err(format!("{line:?} is not a numbered line"))
            }
        },
        output,
    );
    let mut reader = feed
        .subscribe("group", SubscribeOptions::default())
        .expect("subscribe")
        .take_reader()
        .expect("the group's first subscription reads");
    SourceDriver::start_source(&mut source, &feed).expect("start");
    while source.state() != SourceState::CaughtUp {
        SourceDriver::cycle(&mut source, &feed).expect("do_work");
    }
    for _ in 0..5 {
        SourceDriver::cycle(&mut source, &feed).expect("do_work"); // each cycle polls and commits
    }
    assert_eq!(
        pointer_of(&input).offset,
        0,
        "every line is cached, none processed: the refused line is not due"
    );
    feed.start_complete();
    for _ in 0..5 {
        SourceDriver::cycle(&mut source, &feed).expect("do_work");
    }
    assert_eq!(pointer_of(&input).offset, 0, "the reader processed nothing");
    let mut consumer = Collect::default();
    assert_eq!(reader.poll(&mut consumer, 1), 1);
    SourceDriver::cycle(&mut source, &feed).expect("do_work");
    assert_eq!(
        pointer_of(&input).offset,
        offset_after(2),
        "line 1 and the refused line after it"
    );
    assert_eq!(reader.poll(&mut consumer, 1), 1);
    SourceDriver::cycle(&mut source, &feed).expect("do_work");
    assert_eq!(pointer_of(&input).offset, offset_after(3));
    assert_eq!(consumer.lines, ["line-00001", "line-00003"]);
    assert_eq!(source.status().lines_filtered, 1);
    assert_eq!(feed.filtered_count(), 1);
}
