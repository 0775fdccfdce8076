//! A service change is recorded where it reached the processor; a replay delivers or
//! withdraws it there from the services it was given, and stops saying why when it
//! cannot (book: running/record-and-replay.md, service changes).

use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_control::{ControlConfig, ControlPlane, DeliveryFeeds, Service, ServiceEvent};
use mongoose_core::{Processor, ProcessorError, SourceOutput, StartContext};
use mongoose_delivery::{Feed, FeedRegistry, Publisher};
use mongoose_replay::{Entry, FeedCodecs, OutputSink, Replayer};

mod support;
use support::{close_groups, read_recording, recording_group, write_stream, WAIT};

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
        match event {
            ServiceEvent::Registered { name, .. } => self.sink.send(format!("service {name}")),
            ServiceEvent::Deregistered { name, .. } => {
                self.sink.send(format!("service {name} withdrawn"))
            }
        }
        Ok(())
    }
}

impl Processor for UsesCache {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("lines", UsesCache::on_line)?;
        context.services(UsesCache::on_service);
        Ok(())
    }
}

fn codecs() -> FeedCodecs {
    FeedCodecs::new().feed::<String>("lines")
}

#[test]
fn a_service_change_is_recorded_and_a_replay_without_a_registry_stops_there() {
    let dir = tempfile::tempdir().expect("dir");
    record_with_a_service(dir.path());
    let recording = read_recording(dir.path());
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
    assert_eq!(
        kinds,
        [
            "Inline",
            "service cache v1 true",
            "Inline",
            "service cache v2 false",
            "Inline"
        ]
    );

    let replay = Replayer::open(dir.path(), codecs())
        .processor("uses", uses)
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

/// Records "a", the registration of `cache` (version 1), "b", its removal (version 2)
/// and "c"; returns what the processor sent live.
fn record_with_a_service(dir: &std::path::Path) -> Vec<String> {
    let feeds = DeliveryFeeds::new(FeedRegistry::default());
    let lines: Arc<Publisher<String, u64>> = Feed::builder("lines").build();
    feeds.register(Arc::clone(&lines)).expect("registered");
    lines.start_complete();
    let plane = ControlPlane::new(ControlConfig::default(), Arc::new(feeds));
    recording_group(&plane, dir, "g", &["uses"], codecs());
    let (sink, sent) = OutputSink::collecting("out");
    let reply = plane
        .add_processor("g", "uses", move || UsesCache { sink })
        .reply
        .wait_for(WAIT)
        .expect("answered");
    assert!(reply.applied());
    let wait_for = |count: usize| {
        let deadline = Instant::now() + WAIT;
        while sent.lock().len() < count {
            assert!(Instant::now() < deadline, "timed out");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    assert!(lines.try_publish("a".into(), 1).is_published());
    wait_for(1);
    plane
        .register_service("cache", Arc::new(Cache))
        .expect("registered");
    assert!(lines.try_publish("b".into(), 2).is_published());
    wait_for(3);
    plane.remove_service("cache");
    assert!(lines.try_publish("c".into(), 3).is_published());
    wait_for(5);
    close_groups(&plane);
    let live = sent.lock().clone();
    live
}

fn uses() -> UsesCache {
    UsesCache {
        sink: OutputSink::new("out", |_| {}),
    }
}

// "What a replay does": ServiceChanged "delivers or withdraws the service at this point"
#[test]
fn a_replay_given_the_recorded_service_version_delivers_and_withdraws_it_in_position() {
    let dir = tempfile::tempdir().expect("dir");
    let live = record_with_a_service(dir.path());
    assert_eq!(
        live,
        ["a", "service cache", "b", "service cache withdrawn", "c"]
    );
    let replay = Replayer::open(dir.path(), codecs())
        .service("cache", 1, Arc::new(Cache))
        .processor("uses", uses)
        .run();
    assert_eq!(replay.stopped("uses"), None);
    assert_eq!(
        replay.outputs("uses"),
        live.as_slice(),
        "the run is reproduced"
    );
}

// "This run's registry has moved past the recorded version ... recorded service S at
// version V is unavailable. Neither the latest instance nor a historical stopped object
// is substituted"
#[test]
fn a_replay_given_another_version_of_the_service_stops_at_the_change() {
    let dir = tempfile::tempdir().expect("dir");
    record_with_a_service(dir.path());
    let replay = Replayer::open(dir.path(), codecs())
        .service("cache", 3, Arc::new(Cache))
        .processor("uses", uses)
        .run();
    let reason = replay.stopped("uses").expect("stopped");
    assert!(
        reason.starts_with("recorded service cache at version 1 is unavailable")
            && reason.contains("given version(s) 3"),
        "{reason}"
    );
    assert_eq!(replay.outputs("uses"), ["a"]);
}

fn replay_entries(entries: &[Entry], replayer: impl FnOnce(Replayer) -> Replayer) -> String {
    let dir = tempfile::tempdir().expect("dir");
    write_stream(dir.path(), "uses", entries);
    let replay = replayer(Replayer::open(dir.path(), codecs())).run();
    replay.stopped("uses").expect("stopped").to_owned()
}

fn change(version: u64, delivered: bool) -> Entry {
    Entry::ServiceChanged {
        service: "cache".into(),
        version,
        delivered,
        clock: vec![],
    }
}

// "The recorded run withdrew a service the replayed processor never held: recorded
// withdrawal of service S has no delivered incarnation"
#[test]
fn a_withdrawal_of_a_service_never_delivered_in_the_replay_stops_it() {
    let reason = replay_entries(&[change(2, false)], |replayer| {
        replayer
            .service("cache", 1, Arc::new(Cache))
            .processor("uses", uses)
    });
    assert!(
        reason.starts_with("recorded withdrawal of service cache has no delivered incarnation"),
        "{reason}"
    );
}

// "The processor already held the service when the entry is replayed: recorded service
// callback for S was not delivered"
#[test]
fn a_delivery_of_a_service_the_processor_already_holds_stops_the_replay() {
    let reason = replay_entries(&[change(1, true), change(2, true)], |replayer| {
        replayer
            .service("cache", 1, Arc::new(Cache))
            .service("cache", 2, Arc::new(Cache))
            .processor("uses", uses)
    });
    assert!(
        reason.starts_with("recorded service callback for cache was not delivered (entry 2)")
            && reason.contains("already held it"),
        "{reason}"
    );
}

/// Refuses every service it is given.
struct RefusesServices;

impl RefusesServices {
    fn on_service(&mut self, _: &ServiceEvent) -> Result<(), ProcessorError> {
        Err("cannot take a service".into())
    }
}

impl Processor for RefusesServices {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.services(RefusesServices::on_service);
        Ok(())
    }
}

// "A replayed @ServiceRegistered or @ServiceDeregistered callback throws: recorded service
// callback for S was not delivered. A failed callback is never counted as delivered"
#[test]
fn a_services_callback_that_fails_in_the_replay_stops_it() {
    let reason = replay_entries(&[change(1, true)], |replayer| {
        replayer
            .service("cache", 1, Arc::new(Cache))
            .processor("uses", || RefusesServices)
    });
    assert!(
        reason.starts_with("recorded service callback for cache was not delivered (entry 1)")
            && reason.contains("cannot take a service"),
        "{reason}"
    );
}

/// Takes no services.
struct NoServices;

impl Processor for NoServices {}

#[test]
fn a_service_change_for_a_processor_that_takes_no_services_stops_the_replay() {
    let reason = replay_entries(&[change(1, true)], |replayer| {
        replayer
            .service("cache", 1, Arc::new(Cache))
            .processor("uses", || NoServices)
    });
    assert!(
        reason.contains("does not subscribe to services"),
        "{reason}"
    );
}
