//! Control requests a recorded processor makes: recorded as ControlCall entries in
//! position, and answered from the recording in a replay, never executed live
//! (book: running/record-and-replay.md: "What is recorded", "What a replay does
//! with each entry", "When a replay stops").

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use mongoose_control::controller::{self, ADD_PROCESSOR, REGISTER_SERVICE, STOP_PROCESSOR};
use mongoose_control::memory::MemoryFeeds;
use mongoose_control::{ControlConfig, ControlPlane, Service};
use mongoose_core::{Processor, ProcessorError, StartContext};
use mongoose_replay::{ControlOutcome, Entry, FeedCodecs, OutputSink, Replay, Replayer, Utf8Codec};
use parking_lot::Mutex;

mod support;
use support::{read_recording, recording_group, wait_until, write_stream, WAIT};

struct Cache;
impl Service for Cache {}

/// A processor with no inputs.
struct Quiet;
impl Processor for Quiet {
    fn start(&mut self, _: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        Ok(())
    }
}

/// Makes the control request a line names ("stop G N", "register S", "remove S",
/// "add G N") and sends "<line>: ok" or "<line>: <error>" (the error it was given).
struct Caller {
    sink: OutputSink,
    /// A stop its start() requests.
    stop_in_start: Option<(&'static str, &'static str)>,
    /// A stop its stop() requests.
    stop_in_stop: Option<(&'static str, &'static str)>,
    /// Set when a supplier it handed to add_processor ran.
    supplier_ran: Arc<AtomicBool>,
}

impl Caller {
    fn new(sink: OutputSink) -> Self {
        Caller {
            sink,
            stop_in_start: None,
            stop_in_stop: None,
            supplier_ran: Arc::default(),
        }
    }

    #[allow(clippy::ptr_arg)] // a feed of String hands handlers &String
    fn on_line(&mut self, line: &String) -> Result<(), ProcessorError> {
        let words: Vec<&str> = line.split(' ').collect();
        let Some(control) = controller::controller() else {
            return Err("no controller in a handler".into());
        };
        let result = match words[..] {
            ["stop", group, name] => control.stop_processor(group, name).map(|_| ()),
            ["register", name] => control.register_service(name, Arc::new(Cache)),
            ["remove", name] => control.remove_service(name),
            ["add", group, name] => {
                let ran = Arc::clone(&self.supplier_ran);
                control
                    .add_processor(group, name, move || {
                        ran.store(true, Ordering::Release);
                        Quiet
                    })
                    .map(|_| ())
            }
            ["panic"] => panic!("a handler that panics before its request"),
            _ => Ok(()),
        };
        match result {
            Ok(()) => self.sink.send(format!("{line}: ok")),
            Err(error) => self.sink.send(format!("{line}: {error}")),
        }
        Ok(())
    }
}

impl Caller {
    /// The admin command `halt GROUP NAME`: stops that processor.
    fn halt(&mut self, args: &[String]) -> Result<String, ProcessorError> {
        let [group, name] = args else {
            return Err("usage: halt GROUP NAME".into());
        };
        let control = controller::controller().ok_or("no controller in a command")?;
        control
            .stop_processor(group, name)
            .map_err(|error| ProcessorError::new(error.to_string()))?;
        Ok(format!("halting {group}/{name}"))
    }
}

impl Processor for Caller {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.register_command("halt", Caller::halt);
        if let Some((group, name)) = self.stop_in_start {
            let control = controller::controller().ok_or("no controller in start()")?;
            control
                .stop_processor(group, name)
                .map_err(|error| ProcessorError::new(error.to_string()))?;
        }
        context.subscribe("lines", Caller::on_line)
    }

    fn stop(&mut self) -> Result<(), ProcessorError> {
        if let Some((group, name)) = self.stop_in_stop {
            let control = controller::controller().ok_or("no controller in stop()")?;
            control
                .stop_processor(group, name)
                .map_err(|error| ProcessorError::new(error.to_string()))?;
        }
        Ok(())
    }
}

fn codecs() -> FeedCodecs {
    FeedCodecs::new().feed_with("lines", Utf8Codec, false)
}

fn line(text: &str) -> Entry {
    Entry::inline(&Utf8Codec, &text.to_owned(), "lines", None, vec![]).expect("encoded")
}

fn call(name: &str, args: &[&str], outcome: ControlOutcome) -> Entry {
    Entry::ControlCall {
        call: name.to_owned(),
        args: args.iter().map(|arg| (*arg).to_owned()).collect(),
        outcome,
    }
}

/// Replays `entries` as the stream of "caller", built by `build`.
fn replay_stream(entries: &[Entry], build: impl FnMut() -> Caller + Send + 'static) -> Replay {
    let dir = tempfile::tempdir().expect("dir");
    write_stream(dir.path(), "caller", entries);
    Replayer::open(dir.path(), codecs())
        .processor("caller", build)
        .run()
}

fn quiet_caller() -> Caller {
    Caller::new(OutputSink::new("out", |_| {
        panic!("a replay never delivers")
    }))
}

/// A control plane over a memory feed "lines", with a group "pricing" recording the
/// processor "caller" into `dir`.
fn recording_plane(
    dir: &Path,
) -> (
    ControlPlane,
    mongoose_control::memory::MemoryPublisher<String>,
) {
    let feeds = MemoryFeeds::default();
    let lines = feeds.feed::<String>("lines");
    let plane = ControlPlane::new(ControlConfig::default(), Arc::new(feeds));
    recording_group(&plane, dir, "pricing", &["caller"], codecs());
    (plane, lines)
}

fn stopped(replay: &Replay) -> String {
    replay.stopped("caller").expect("stopped").to_owned()
}

// "What is recorded": ControlCall with its arguments as text and its outcome, in position:
// after the input it was made in; start() requests before the first input. "What a replay
// does": the same request in position gets its recorded outcome, and the run is reproduced
#[test]
fn control_requests_are_recorded_in_position_and_replay_to_the_recorded_outputs() {
    let dir = tempfile::tempdir().expect("dir");
    let (plane, lines) = recording_plane(dir.path());
    for name in ["early", "target"] {
        let reply = plane.add_processor("pricing", name, || Quiet).reply;
        assert!(reply.wait_for(WAIT).expect("reply").applied());
    }
    let (sink, sent) = OutputSink::collecting("out");
    let reply = plane
        .add_processor("pricing", "caller", move || Caller {
            stop_in_start: Some(("pricing", "early")),
            ..Caller::new(sink)
        })
        .reply;
    assert!(reply.wait_for(WAIT).expect("reply").applied());
    for text in ["x", "stop pricing target", "stop pricing nobody", "y"] {
        lines.publish(text.to_owned());
    }
    assert!(wait_until(|| sent.lock().len() == 4
        && plane.processor_handle("pricing", "target").is_none()
        && plane.processor_handle("pricing", "early").is_none()));
    plane.close_groups(Instant::now() + WAIT);

    let recording = read_recording(dir.path());
    let entries = recording.stream("caller").expect("recorded").entries();
    let kinds: Vec<&str> = entries.iter().map(Entry::kind).collect();
    assert_eq!(
        kinds,
        [
            "ControlCall",
            "Inline",
            "Inline",
            "ControlCall",
            "Inline",
            "ControlCall",
            "Inline"
        ]
    );
    assert_eq!(
        entries[0],
        call(STOP_PROCESSOR, &["pricing", "early"], ControlOutcome::Ok)
    );
    assert_eq!(
        entries[2]
            .decode_inline(&Utf8Codec)
            .expect("inline")
            .expect("decoded"),
        "stop pricing target"
    );
    assert_eq!(
        entries[3],
        call(STOP_PROCESSOR, &["pricing", "target"], ControlOutcome::Ok)
    );
    let Entry::ControlCall { outcome, .. } = &entries[5] else {
        panic!("a ControlCall: {:?}", entries[5]);
    };
    assert!(
        matches!(outcome, ControlOutcome::Failed(text) if text.starts_with("no processor 'nobody'")),
        "{outcome:?}"
    );

    // the replay reaches the failed request, whose error it cannot rebuild
    let replay = Replayer::open(dir.path(), codecs())
        .processor("caller", || Caller {
            stop_in_start: Some(("pricing", "early")),
            ..quiet_caller()
        })
        .run();
    assert!(
        stopped(&replay).starts_with("recorded control exception cannot be reconstructed"),
        "{}",
        stopped(&replay)
    );
    assert_eq!(
        replay.outputs("caller")[..2],
        sent.lock()[..2],
        "reproduced up to the failed request"
    );
    // the start request, "x", "stop pricing target" and its request; not the failed one
    assert_eq!(replay.processor("caller").expect("replayed").replayed, 4);
}

// "When a replay stops": a control request the recorded run did not make here
#[test]
fn a_request_the_recorded_run_did_not_make_here_stops_the_replay_with_an_error_to_the_processor() {
    let replay = replay_stream(&[line("x"), line("stop g a")], quiet_caller);
    let reason = stopped(&replay);
    assert!(
        reason.starts_with(
            "control request stop_processor(g, a) was not made by the recorded run here"
        ),
        "{reason}"
    );
    let outputs = replay.outputs("caller");
    assert_eq!(outputs[0], "x: ok");
    assert!(
        outputs[1].starts_with("stop g a: control request stop_processor refused: control request"),
        "{outputs:?}"
    );
    // another request than the recorded one is not made here either
    let replay = replay_stream(
        &[
            line("stop g a"),
            call(REGISTER_SERVICE, &["cache"], ControlOutcome::Ok),
        ],
        quiet_caller,
    );
    let reason = stopped(&replay);
    assert!(
        reason.starts_with(
            "control request stop_processor(g, a) was not made by the recorded run here"
        ) && reason.contains("it made register_service(cache)"),
        "{reason}"
    );
}

// "When a replay stops": a request made with different arguments
#[test]
fn a_request_with_other_arguments_than_the_recorded_one_stops_the_replay() {
    let replay = replay_stream(
        &[
            line("stop g a"),
            call(STOP_PROCESSOR, &["g", "b"], ControlOutcome::Ok),
        ],
        quiet_caller,
    );
    let reason = stopped(&replay);
    assert!(reason.starts_with("control request differs"), "{reason}");
    assert!(reason.contains("stop_processor(g, b)"), "{reason}");
}

// "When a replay stops": the recorded run made a request the replay did not, found at the
// next entry that is not a ControlCall, or at the stream's end
#[test]
fn a_recorded_request_the_replay_never_makes_stops_the_replay() {
    let recorded = call(STOP_PROCESSOR, &["g", "a"], ControlOutcome::Ok);
    for entries in [
        vec![line("x"), recorded.clone(), line("y")],
        vec![line("x"), recorded.clone()],
    ] {
        let replay = replay_stream(&entries, quiet_caller);
        let reason = stopped(&replay);
        assert!(
            reason.starts_with(
                "the recorded run made control request stop_processor(g, a) (entry 2)"
            ),
            "{reason}"
        );
        assert_eq!(replay.outputs("caller"), ["x: ok"], "y is not replayed");
    }
}

// "When a replay stops": registerService / removeService are registry mutations, never
// executed, even when matched; the call fails into the processor
#[test]
fn a_registry_mutation_stops_the_replay_even_when_it_matches_the_recording() {
    for (text, name) in [
        ("register cache", REGISTER_SERVICE),
        ("remove cache", "remove_service"),
    ] {
        let replay = replay_stream(
            &[line(text), call(name, &["cache"], ControlOutcome::Ok)],
            quiet_caller,
        );
        let reason = stopped(&replay);
        assert!(reason.starts_with("registry mutation"), "{reason}");
        let outputs = replay.outputs("caller");
        assert!(
            outputs[0].starts_with(&format!(
                "{text}: control request {name} refused: registry mutation"
            )),
            "{outputs:?}"
        );
    }
}

// "When a replay stops": an add's supplier cannot be verified from the recording; it is
// never run, and the call fails into the processor
#[test]
fn an_add_stops_the_replay_and_its_supplier_never_runs() {
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    let quiet = std::any::type_name::<Quiet>();
    let replay = replay_stream(
        &[
            line("add g child"),
            call(ADD_PROCESSOR, &["g", "child", quiet], ControlOutcome::Ok),
        ],
        move || Caller {
            supplier_ran: Arc::clone(&flag),
            ..quiet_caller()
        },
    );
    let reason = stopped(&replay);
    assert!(
        reason.starts_with("addEventProcessor supplier cannot be verified from the recording"),
        "{reason}"
    );
    assert!(!ran.load(Ordering::Acquire), "the supplier never ran");
    assert!(
        replay.outputs("caller")[0]
            .starts_with("add g child: control request add_processor refused"),
        "{:?}",
        replay.outputs("caller")
    );
}

// "When a replay stops": a recorded control exception cannot be reconstructed; the call
// fails into the processor
#[test]
fn a_request_that_failed_in_the_recorded_run_stops_the_replay() {
    let replay = replay_stream(
        &[
            line("stop g a"),
            call(
                STOP_PROCESSOR,
                &["g", "a"],
                ControlOutcome::Failed("no processor 'a' is admitted in group 'g'".into()),
            ),
        ],
        quiet_caller,
    );
    let reason = stopped(&replay);
    assert!(
        reason.starts_with("recorded control exception cannot be reconstructed"),
        "{reason}"
    );
    assert!(reason.contains("no processor 'a' is admitted"), "{reason}");
    assert!(
        replay.outputs("caller")[0].starts_with("stop g a: control request stop_processor refused"),
        "{:?}",
        replay.outputs("caller")
    );
}

// "What a replay does with each entry": calls made in start() are expected before the
// first input
#[test]
fn a_request_made_in_start_is_expected_before_the_first_input() {
    let in_start = || Caller {
        stop_in_start: Some(("g", "a")),
        ..quiet_caller()
    };
    let recorded = call(STOP_PROCESSOR, &["g", "a"], ControlOutcome::Ok);
    let before = replay_stream(&[recorded.clone(), line("x")], in_start);
    assert_eq!(before.stopped("caller"), None);
    assert!(before.complete());
    assert_eq!(before.processor("caller").expect("replayed").replayed, 2);
    let after = replay_stream(&[line("x"), recorded], in_start);
    let reason = stopped(&after);
    assert!(
        reason.starts_with("control request stop_processor(g, a) was not made by the recorded run here (in start())"),
        "{reason}"
    );
}

/// Runs a replay of "caller" in its handler: on a group's thread, where a controller
/// would reach the live control plane.
struct Host {
    dir: std::path::PathBuf,
    result: Arc<Mutex<Option<Replay>>>,
    handled: Arc<Mutex<Vec<String>>>,
}

impl Host {
    #[allow(clippy::ptr_arg)] // a feed of String hands handlers &String
    fn on_command(&mut self, command: &String) -> Result<(), ProcessorError> {
        if command == "replay" {
            let replay = Replayer::open(&self.dir, codecs())
                .processor("caller", quiet_caller)
                .run();
            *self.result.lock() = Some(replay);
        }
        self.handled.lock().push(command.clone());
        Ok(())
    }
}

impl Processor for Host {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("commands", Host::on_command)
    }
}

// "What a replay does with each entry": a matched, supported request returns its recorded
// outcome without executing the live control action, even on a group thread
#[test]
fn a_matched_stop_replays_to_completion_and_stops_nothing_live() {
    let dir = tempfile::tempdir().expect("dir");
    write_stream(
        dir.path(),
        "caller",
        &[
            line("stop live target"),
            call(STOP_PROCESSOR, &["live", "target"], ControlOutcome::Ok),
            line("x"),
        ],
    );
    let feeds = MemoryFeeds::default();
    let commands = feeds.feed::<String>("commands");
    let plane = ControlPlane::new(ControlConfig::default(), Arc::new(feeds));
    let reply = plane.add_processor("live", "target", || Quiet).reply;
    assert!(reply.wait_for(WAIT).expect("reply").applied());
    let result: Arc<Mutex<Option<Replay>>> = Arc::default();
    let handled: Arc<Mutex<Vec<String>>> = Arc::default();
    let host = Host {
        dir: dir.path().to_path_buf(),
        result: Arc::clone(&result),
        handled: Arc::clone(&handled),
    };
    let reply = plane.add_processor("live", "host", move || host).reply;
    assert!(reply.wait_for(WAIT).expect("reply").applied());
    commands.publish("replay".to_owned());
    // the group drains its mailbox before it polls for the next item: a stop admitted
    // by the replay would have been decided by the time "after" is handled
    commands.publish("after".to_owned());
    assert!(wait_until(|| handled.lock().len() == 2));
    let replay = result.lock().take().expect("replayed");
    assert_eq!(replay.stopped("caller"), None);
    assert!(replay.complete() && replay.all_replayed());
    assert_eq!(replay.processor("caller").expect("replayed").replayed, 3);
    assert_eq!(replay.outputs("caller"), ["stop live target: ok", "x: ok"]);
    let group = plane.group("live").expect("group");
    let stops = group
        .audit()
        .records()
        .into_iter()
        .filter(|record| record.what == "Stop")
        .count();
    assert_eq!(stops, 0, "no stop request reached the group");
    assert!(plane.processor_handle("live", "target").is_some());
}

// "What is recorded": a stop by request is a Stopped entry; the requests its stop() made
// follow it, and a replay of the stop makes them in position
#[test]
fn a_request_made_in_stop_is_recorded_after_the_stopped_entry_and_replays() {
    let dir = tempfile::tempdir().expect("dir");
    let (plane, lines) = recording_plane(dir.path());
    let reply = plane.add_processor("pricing", "target", || Quiet).reply;
    assert!(reply.wait_for(WAIT).expect("reply").applied());
    let (sink, sent) = OutputSink::collecting("out");
    let added = plane.add_processor("pricing", "caller", move || Caller {
        stop_in_stop: Some(("pricing", "target")),
        ..Caller::new(sink)
    });
    assert!(added.reply.wait_for(WAIT).expect("reply").applied());
    lines.publish("x".to_owned());
    assert!(wait_until(|| sent.lock().len() == 1));
    let caller = added.handle.expect("admitted");
    let stopped_reply = plane.stop_processor(&caller).wait_for(WAIT).expect("reply");
    assert!(stopped_reply.applied());
    assert!(wait_until(|| plane
        .processor_handle("pricing", "target")
        .is_none()));
    plane.close_groups(Instant::now() + WAIT);

    let recording = read_recording(dir.path());
    let entries = recording.stream("caller").expect("recorded").entries();
    let kinds: Vec<&str> = entries.iter().map(Entry::kind).collect();
    assert_eq!(kinds, ["Inline", "Stopped", "ControlCall"]);
    assert_eq!(
        entries[2],
        call(STOP_PROCESSOR, &["pricing", "target"], ControlOutcome::Ok)
    );
    let replay = Replayer::open(dir.path(), codecs())
        .processor("caller", || Caller {
            stop_in_stop: Some(("pricing", "target")),
            ..quiet_caller()
        })
        .run();
    assert_eq!(replay.stopped("caller"), None);
    assert_eq!(replay.processor("caller").expect("replayed").replayed, 3);
}

// "When a replay stops": an entry that fails in the replay before making its recorded
// request stops with its own failure, not as a missing request
#[test]
fn an_entry_that_fails_before_its_request_stops_with_its_own_failure() {
    let replay = replay_stream(
        &[
            line("panic"),
            call(STOP_PROCESSOR, &["g", "a"], ControlOutcome::Ok),
        ],
        quiet_caller,
    );
    let reason = stopped(&replay);
    assert!(
        reason.starts_with("entry 1 could not be replayed: panicked"),
        "{reason}"
    );
}

// "What is recorded": a control request made by an admin command follows the command's
// AdminInvoked entry (not the next input), and a replay of the command makes it in
// position. The target is in another group, so nothing else reports the request early.
#[test]
fn a_request_made_by_an_admin_command_is_recorded_after_it_and_replays() {
    let dir = tempfile::tempdir().expect("dir");
    let (plane, lines) = recording_plane(dir.path());
    let reply = plane.add_processor("other", "target", || Quiet).reply;
    assert!(reply.wait_for(WAIT).expect("reply").applied());
    let (sink, sent) = OutputSink::collecting("out");
    let reply = plane
        .add_processor("pricing", "caller", move || Caller::new(sink))
        .reply;
    assert!(reply.wait_for(WAIT).expect("reply").applied());
    let answer = plane
        .invoke_admin_command(
            "pricing",
            "caller",
            "halt",
            vec!["other".to_owned(), "target".to_owned()],
        )
        .wait_for(WAIT)
        .expect("answered");
    assert!(answer.applied(), "{answer:?}");
    assert!(wait_until(|| plane
        .processor_handle("other", "target")
        .is_none()));
    // an input after the command: the command's request must not slip behind it
    lines.publish("x".to_owned());
    assert!(wait_until(|| sent.lock().len() == 1));
    plane.close_groups(Instant::now() + WAIT);

    let recording = read_recording(dir.path());
    let entries = recording.stream("caller").expect("recorded").entries();
    let kinds: Vec<&str> = entries.iter().map(Entry::kind).collect();
    assert_eq!(kinds, ["AdminInvoked", "ControlCall", "Inline"]);
    assert_eq!(
        entries[1],
        call(STOP_PROCESSOR, &["other", "target"], ControlOutcome::Ok)
    );
    let replay = Replayer::open(dir.path(), codecs())
        .processor("caller", quiet_caller)
        .run();
    assert_eq!(replay.stopped("caller"), None, "{replay:?}");
    assert_eq!(replay.processor("caller").expect("replayed").replayed, 3);
}
