//! A process recording a live group, killed with SIGKILL mid-stream, leaves a recording
//! that replays: every entry that reached the store replays to the outputs the live run
//! sent for it (book: running/record-and-replay.md; running/record-and-replay.md).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_control::{ControlConfig, ControlPlane, DeliveryFeeds, GroupOptions, IdleStrategy};
use mongoose_core::{BatchEnd, Processor, ProcessorError, SourceOutput, StartContext};
use mongoose_delivery::{Feed, FeedRegistry, Publisher};
use mongoose_replay::cli::{replay_report, ReplayOutcome};
use mongoose_replay::{
    Clock, FeedCodecs, OutputSink, RecordConfig, Recorder, Replayer, RECORDING_FILE,
};
use parking_lot::Mutex;

const CHILD_DIR: &str = "MONGOOSE_REPLAY_TEST_CHILD_GROUP_DIR";
const LIVE_OUTPUTS: &str = "live-outputs.txt";

/// Sums what it gets; reports each sum with the time.
struct Summer {
    sum: u64,
    sink: OutputSink,
    clock: Clock,
}

impl Summer {
    fn on_number(&mut self, number: &u64) -> Result<(), ProcessorError> {
        self.sum += number;
        self.sink
            .send(format!("{number} sum {} at {}", self.sum, self.clock.now()));
        Ok(())
    }
}

impl Processor for Summer {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("numbers", Summer::on_number)
    }
}

fn codecs() -> FeedCodecs {
    FeedCodecs::new().feed::<u64>("numbers")
}

/// The child: a group recording `summer` while a feed publishes until it is killed.
#[test]
#[ignore = "run as a child process by a_group_recorder_killed_mid_stream_leaves_a_replayable_prefix"]
fn child_records_a_group_until_killed() {
    let Some(dir) = std::env::var_os(CHILD_DIR).map(PathBuf::from) else {
        return;
    };
    let feeds = DeliveryFeeds::new(FeedRegistry::default());
    let numbers: Arc<Publisher<u64, u64>> = Feed::builder("numbers").queue_capacity(1024).build();
    numbers.set_pause_by_default(true);
    feeds.register(Arc::clone(&numbers)).expect("registered");
    numbers.start_complete();
    let plane = ControlPlane::new(ControlConfig::default(), Arc::new(feeds));
    let recorder = Recorder::create(
        dir.join("recording"),
        RecordConfig::new(["summer"], codecs()),
    )
    .expect("recorder");
    plane
        .create_group(
            "g",
            GroupOptions {
                idle: IdleStrategy::Yield,
                recorder: Some(Box::new(recorder)),
                ..GroupOptions::default()
            },
        )
        .expect("group");
    // the live sink writes each output through to a file before the handler returns
    let file = Arc::new(Mutex::new(
        std::fs::File::create(dir.join(LIVE_OUTPUTS)).expect("outputs"),
    ));
    let sink = OutputSink::new("sums", move |line| {
        let mut file = file.lock();
        file.write_all(format!("{line}\n").as_bytes())
            .expect("write");
    });
    let ticks = Arc::new(AtomicI64::new(0));
    let clock = Clock::from_fn(move || ticks.fetch_add(3, Ordering::AcqRel));
    let added = plane.add_processor("g", "summer", move || Summer {
        sum: 0,
        sink,
        clock,
    });
    assert!(added
        .reply
        .wait_for(Duration::from_secs(30))
        .expect("answered")
        .applied());
    let mut next = 1u64;
    loop {
        numbers.poll_acknowledgements();
        let mut produce = || {
            let item = next;
            next += 1;
            (item % 64 != 0).then_some((item, item * 8))
        };
        if let BatchEnd::Paused = numbers.try_publish_batch(&mut produce) {
            std::thread::yield_now();
        }
    }
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

// book: running/record-and-replay.md: a killed recorder leaves a prefix that replays to the live run's outputs
#[test]
fn a_group_recorder_killed_mid_stream_leaves_a_replayable_prefix() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "child_records_a_group_until_killed",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_DIR, dir.path())
        .spawn()
        .expect("spawn the recorder");
    let store = dir.path().join("recording").join(RECORDING_FILE);
    let deadline = Instant::now() + Duration::from_secs(60);
    while size(&store) < 128 << 10 {
        assert!(
            Instant::now() < deadline,
            "the recorder wrote nothing in 60 s"
        );
        assert!(
            child.try_wait().expect("child").is_none(),
            "the recorder exited"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");

    let replayer = || {
        Replayer::open(dir.path().join("recording"), codecs()).processor("summer", || Summer {
            sum: 0,
            sink: OutputSink::new("sums", |_| panic!("a replay never delivers")),
            clock: Clock::system(),
        })
    };
    let replay = replayer().run();
    assert_eq!(replay.stopped("summer"), None);
    // issue 10 item 10: killed, so no closing frame: incomplete, and a partial replay
    assert!(!replay.recording_complete());
    assert!(
        replay
            .recording_incomplete()
            .iter()
            .any(|reason| reason.starts_with("no closing frame")),
        "{:?}",
        replay.recording_incomplete()
    );
    let report = replay_report(dir.path().join("recording"), replayer());
    assert_eq!(
        report.outcome(),
        ReplayOutcome::RecordingIncomplete,
        "{report}"
    );
    let text = report.to_string();
    assert!(
        text.contains("recording: INCOMPLETE")
            && text.contains("processor summer")
            && text.contains("partial"),
        "{text}"
    );
    let replayed = replay.processor("summer").expect("replayed").replayed;
    assert!(replayed > 1000, "only {replayed} entries");
    let live = std::fs::read_to_string(dir.path().join(LIVE_OUTPUTS)).expect("live outputs");
    let live: Vec<&str> = live.lines().collect();
    // each recorded entry was written after its item was handled, so the live run sent at
    // least as many outputs, and the replay reproduces them exactly, in order
    assert!(
        live.len() >= replayed,
        "{} live, {replayed} replayed",
        live.len()
    );
    assert_eq!(replay.outputs("summer"), &live[..replayed]);
}
