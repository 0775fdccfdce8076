//! RECORD marks where items were lost (book: guarantees/control-plane.md: "In
//! RECORD mode, a dropped item keeps its journal entry and sequence number. The
//! processor's recording gets a Dropped entry where the items were lost. A replay
//! carries on and reports the loss").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mongoose_control::{ControlConfig, ControlPlane, DeliveryFeeds};
use mongoose_core::{OverloadSettings, Processor, ProcessorError, SourceOutput, StartContext};
use mongoose_delivery::{Feed, FeedRegistry, Publisher};
use mongoose_replay::{Entry, FeedCodecs, OutputSink, Replayer};

mod support;
use support::{assert_eventually, close_groups, read_recording, recording_group, WAIT};

/// Holds its first item until the gate opens, then echoes every line to its sink.
struct Gated {
    sink: OutputSink,
    started: Arc<AtomicBool>,
    gate: Arc<AtomicBool>,
}

impl Gated {
    #[allow(clippy::ptr_arg)] // a feed of String hands handlers &String
    fn on_line(&mut self, line: &String) -> Result<(), ProcessorError> {
        self.started.store(true, Ordering::Release);
        while !self.gate.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.sink.send(line.clone());
        Ok(())
    }
}

impl Processor for Gated {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("lines", Gated::on_line)
    }
}

fn codecs() -> FeedCodecs {
    FeedCodecs::new().feed::<String>("lines")
}

#[test]
fn a_recording_marks_where_items_were_dropped_and_the_replay_reports_the_loss() {
    let dir = tempfile::tempdir().expect("dir");
    let feeds = DeliveryFeeds::new(FeedRegistry::default());
    let lines: Arc<Publisher<String, u64>> = Feed::builder("lines")
        .queue_capacity(2)
        .overload(OverloadSettings {
            spin_bound: Duration::ZERO,
            ..OverloadSettings::drop_after_spin()
        })
        .build();
    feeds.register(Arc::clone(&lines)).expect("registered");
    lines.start_complete();
    let plane = ControlPlane::new(ControlConfig::default(), Arc::new(feeds));
    recording_group(&plane, dir.path(), "g", &["gated"], codecs());
    let (sink, sent) = OutputSink::collecting("out");
    let started = Arc::new(AtomicBool::new(false));
    let gate = Arc::new(AtomicBool::new(false));
    let (started_in, gate_in) = (Arc::clone(&started), Arc::clone(&gate));
    let reply = plane
        .add_processor("g", "gated", move || Gated {
            sink,
            started: started_in,
            gate: gate_in,
        })
        .reply
        .wait_for(WAIT)
        .expect("answered");
    assert!(reply.applied());
    assert!(lines.try_publish("a".into(), 1).is_published());
    assert_eventually(|| started.load(Ordering::Acquire));
    // "a" is being handled and still holds its slot: "b" fills the queue, "c" and "d"
    // are dropped for it
    for (line, position) in [("b", 2), ("c", 3), ("d", 4)] {
        assert!(lines.try_publish(line.into(), position).is_published());
    }
    assert_eq!(lines.status().dropped, 2);
    gate.store(true, Ordering::Release);
    assert_eventually(|| sent.lock().len() == 2);
    assert!(lines.try_publish("e".into(), 5).is_published());
    assert_eventually(|| sent.lock().len() == 3);
    close_groups(&plane);

    let recording = read_recording(dir.path());
    let stream = recording.stream("gated").expect("stream");
    let kinds: Vec<String> = stream
        .entries()
        .iter()
        .map(|entry| match entry {
            Entry::Dropped { feed, sequence } => format!("dropped {feed}#{sequence}"),
            other => other.kind().to_owned(),
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "Inline",
            "Inline",
            "dropped lines#3",
            "dropped lines#4",
            "Inline"
        ]
    );

    let replay = Replayer::open(dir.path(), codecs())
        .processor("gated", || Gated {
            sink: OutputSink::new("out", |_| panic!("a replay never delivers")),
            started: Arc::new(AtomicBool::new(false)),
            gate: Arc::new(AtomicBool::new(true)),
        })
        .run();
    assert_eq!(
        replay.stopped("gated"),
        None,
        "a replay carries on past a loss"
    );
    assert_eq!(replay.losses().len(), 2);
    assert!(!replay.lossless());
    assert_eq!(replay.outputs("gated"), ["a", "b", "e"]);
}
