//! A service change is recorded where it reached the processor, and a replay without a
//! service registry stops there saying why (control-plane-contracts "Record and
//! replay", service changes: "recorded service S at version V is unavailable").

use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_control::{
    ControlConfig, ControlPlane, DeliveryFeeds, GroupOptions, IdleStrategy, Service, ServiceEvent,
    SERVICES_FEED,
};
use mongoose_core::{Processor, ProcessorError, SourceOutput, Subscriptions};
use mongoose_delivery::{Feed, FeedRegistry, Publisher};
use mongoose_replay::{
    Entry, FeedCodecs, OutputSink, RecordConfig, Recorder, Recording, Replayer, RECORDING_FILE,
};

const WAIT: Duration = Duration::from_secs(30);

struct Cache;
impl Service for Cache {}

/// Echoes lines, and notes the services it is given.
struct UsesCache {
    sink: OutputSink,
}

impl UsesCache {
    #[allow(clippy::ptr_arg)] // a feed of String hands handlers &String
    fn on_line(&mut self, line: &String) -> Result<(), ProcessorError> {
        self.sink.send(line.clone());
        Ok(())
    }

    fn on_service(&mut self, event: &ServiceEvent) -> Result<(), ProcessorError> {
        self.sink.send(format!("service {}", event.name()));
        Ok(())
    }
}

impl Processor for UsesCache {
    fn start(&mut self, subscriptions: &mut dyn Subscriptions) -> Result<(), ProcessorError> {
        subscriptions.subscribe("lines", UsesCache::on_line)?;
        subscriptions.subscribe(SERVICES_FEED, UsesCache::on_service)
    }
}

fn codecs() -> FeedCodecs {
    FeedCodecs::new().feed::<String>("lines")
}

#[test]
fn a_service_change_is_recorded_and_a_replay_without_a_registry_stops_there() {
    let dir = tempfile::tempdir().expect("dir");
    let feeds = DeliveryFeeds::new(FeedRegistry::default());
    let lines: Arc<Publisher<String, u64>> = Feed::builder("lines").build();
    feeds.register(Arc::clone(&lines)).expect("registered");
    lines.start_complete();
    let plane = ControlPlane::new(ControlConfig::default(), Arc::new(feeds));
    let recorder =
        Recorder::create(dir.path(), RecordConfig::new(["uses"], codecs())).expect("recorder");
    plane
        .create_group(
            "g",
            GroupOptions {
                idle: IdleStrategy::SleepingMillis(1),
                recorder: Some(Box::new(recorder)),
                ..GroupOptions::default()
            },
        )
        .expect("group");
    let (sink, sent) = OutputSink::collecting("out");
    let reply = plane
        .add_processor("g", "uses", move || UsesCache { sink })
        .reply
        .wait_for(WAIT)
        .expect("answered");
    assert!(reply.applied());
    assert!(lines.try_publish("a".into(), 1).is_published());
    let deadline = Instant::now() + WAIT;
    while sent.lock().is_empty() {
        assert!(Instant::now() < deadline, "timed out");
        std::thread::sleep(Duration::from_millis(1));
    }
    plane
        .register_service("cache", Arc::new(Cache))
        .expect("registered");
    assert!(lines.try_publish("b".into(), 2).is_published());
    while sent.lock().len() < 3 {
        assert!(Instant::now() < deadline, "timed out");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(plane.close_groups(Instant::now() + WAIT).is_empty());
    assert_eq!(*sent.lock(), ["a", "service cache", "b"]);

    let recording = Recording::read(dir.path().join(RECORDING_FILE)).expect("readable");
    let kinds: Vec<String> = recording
        .stream("uses")
        .expect("stream")
        .entries()
        .iter()
        .map(|entry| match entry {
            Entry::ServiceChanged {
                service,
                version,
                delivered,
                ..
            } => {
                format!("service {service} v{version} {delivered}")
            }
            other => other.kind().to_owned(),
        })
        .collect();
    assert_eq!(kinds, ["Inline", "service cache v1 true", "Inline"]);

    let replay = Replayer::open(dir.path(), codecs())
        .processor("uses", || UsesCache {
            sink: OutputSink::new("out", |_| {}),
        })
        .run();
    let reason = replay
        .stopped("uses")
        .expect("the replay stops at the service change");
    assert!(
        reason.starts_with("recorded service cache at version 1 is unavailable"),
        "{reason}"
    );
    assert_eq!(
        replay.outputs("uses"),
        ["a"],
        "replayed up to the change, not past it"
    );
}
