//! RECORD on a live processor group over the delivery engine, then REPLAY of what it
//! recorded (book: running/record-and-replay.md; guarantees/completion-hooks.md
//! and book: running/record-and-replay.md).

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use mongoose_control::{ControlConfig, ControlPlane, DeliveryFeeds, GroupOptions, IdleStrategy};
use mongoose_core::{
    CompletionKey, Delivery, DeliveryContext, Epoch, Processor, ProcessorError, SourceOutput,
    StartContext,
};
use mongoose_delivery::{Feed, FeedRegistry, Publisher};
use mongoose_replay::{
    Clock, Collected, Entry, FeedCodecs, OutputSink, RecordConfig, Recorder, Replayer,
    RECORDING_FILE,
};
use parking_lot::Mutex;

mod support;
use support::{close_groups, read_recording, wait_until, WAIT};

/// A durable store of (epoch, position): what survives a crash.
type Durable = Arc<Mutex<Option<(Epoch, u64)>>>;

/// Applies lines, skipping those its stored position already holds (book: guarantees/consumer-side-positions.md); saves its
/// position once per delivery (book: guarantees/completion-hooks.md). Reports every decision and the delivery it read to
/// its sink, and reads the clock once per applied line.
struct Ledger {
    sink: OutputSink,
    clock: Clock,
    durable: Durable,
    /// Fail the first `fail_saves` saves of this line (a callback that fails live).
    fail_save_of: Option<(&'static str, Arc<AtomicU32>)>,
    last_line: String,
}

impl Ledger {
    fn new(sink: OutputSink, clock: Clock, durable: Durable) -> Self {
        Ledger {
            sink,
            clock,
            durable,
            fail_save_of: None,
            last_line: String::new(),
        }
    }

    #[allow(clippy::ptr_arg)] // a feed of String hands handlers &String
    fn on_line(&mut self, line: &String) -> Result<(), ProcessorError> {
        let delivery = DeliveryContext::current();
        let seen = delivery.as_ref().map_or("none".to_owned(), |d| {
            format!(
                "{}#{} e{} p{}",
                d.feed(),
                d.sequence(),
                d.epoch().0,
                d.position().offset
            )
        });
        if let (Some(delivery), Some((epoch, position))) = (&delivery, *self.durable.lock()) {
            if delivery.already_applied(epoch, position) {
                self.sink.send(format!("skip {line} [{seen}]"));
                return Ok(());
            }
        }
        let now = self.clock.now();
        self.sink.send(format!("apply {line} at {now} [{seen}]"));
        self.last_line = line.clone();
        DeliveryContext::on_complete(CompletionKey::SAVE);
        Ok(())
    }
}

impl Processor for Ledger {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("lines", Ledger::on_line)
    }

    fn on_delivery_complete(
        &mut self,
        _key: CompletionKey,
        delivery: &Delivery,
    ) -> Result<(), ProcessorError> {
        if let Some((line, failures)) = &self.fail_save_of {
            if *line == self.last_line && failures.load(Ordering::Acquire) > 0 {
                failures.fetch_sub(1, Ordering::AcqRel);
                return Err(ProcessorError::new(format!("the save of {line} failed")));
            }
        }
        *self.durable.lock() = Some((delivery.epoch(), delivery.position().offset));
        Ok(())
    }
}

/// A processor of another type, for provenance.
struct Other;
impl Processor for Other {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("lines", |_: &mut Other, _: &String| Ok(()))
    }
}

struct Run {
    plane: ControlPlane,
    lines: Arc<Publisher<String, u64>>,
}

fn start_run(recorder: Recorder) -> Run {
    let feeds = DeliveryFeeds::new(FeedRegistry::default());
    let lines: Arc<Publisher<String, u64>> = Feed::builder("lines").queue_capacity(64).build();
    feeds.register(Arc::clone(&lines)).expect("registered");
    lines.set_epoch(Epoch(7));
    lines.start_complete();
    let plane = ControlPlane::new(
        ControlConfig {
            idle: IdleStrategy::SleepingMillis(1),
            ..ControlConfig::default()
        },
        Arc::new(feeds),
    );
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
    Run { plane, lines }
}

impl Run {
    fn add<P: Processor>(&self, name: &str, build: impl FnOnce() -> P + Send + 'static) {
        let reply = self
            .plane
            .add_processor("g", name, build)
            .reply
            .wait_for(WAIT)
            .expect("answered");
        assert!(reply.applied(), "{reply:?}");
    }

    fn publish(&self, lines: &[(&str, u64)]) {
        for (line, position) in lines {
            assert!(self
                .lines
                .try_publish((*line).to_owned(), *position)
                .is_published());
        }
    }

    fn close(self) {
        close_groups(&self.plane);
    }
}

fn codecs() -> FeedCodecs {
    FeedCodecs::new().feed::<String>("lines")
}

fn ticking() -> Clock {
    let next = Arc::new(AtomicU32::new(1_000));
    Clock::from_fn(move || i64::from(next.fetch_add(1, Ordering::AcqRel)))
}

fn record_ledger(
    dir: &Path,
    feeds: FeedCodecs,
    start: Option<(Epoch, u64)>,
    lines: &[(&str, u64)],
) -> Vec<String> {
    let recorder = Recorder::create(dir, RecordConfig::new(["ledger"], feeds)).expect("recorder");
    let run = start_run(recorder);
    let (sink, sent) = OutputSink::collecting("out");
    let durable: Durable = Arc::new(Mutex::new(start));
    let clock = ticking();
    run.add("ledger", move || Ledger::new(sink, clock, durable));
    run.publish(lines);
    assert!(wait_until(|| sent.lock().len() == lines.len()));
    run.close();
    let live = sent.lock().clone();
    live
}

fn replay_ledger(
    dir: &Path,
    feeds: FeedCodecs,
    start: Option<(Epoch, u64)>,
) -> mongoose_replay::Replay {
    Replayer::open(dir, feeds)
        .processor("ledger", move || {
            // the replayed build starts from the state the recorded run started from
            Ledger::new(
                OutputSink::new("out", |_| panic!("a replay never delivers")),
                Clock::system(),
                Arc::new(Mutex::new(start)),
            )
        })
        .run()
}

// book: running/record-and-replay.md, What is recorded / What a replay does
#[test]
fn a_recorded_run_replays_each_input_with_its_delivery_clock_and_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let live = record_ledger(dir.path(), codecs(), None, &[("a", 10), ("b", 20)]);
    let recording = read_recording(dir.path());
    assert!(recording.complete());
    let stream = recording
        .stream("ledger")
        .expect("recorded under the bare name");
    assert!(stream
        .provenance()
        .unwrap()
        .processor_type
        .ends_with("Ledger"));
    let entries = stream.entries();
    assert_eq!(entries.len(), 2);
    let delivery = entries[1].delivery().expect("a positioned input");
    assert_eq!(
        (
            delivery.feed(),
            delivery.sequence(),
            delivery.epoch(),
            delivery.position().offset
        ),
        ("lines", 2, Epoch(7), 20)
    );
    assert_eq!(entries[0].clock(), Some(&[1_000][..]));

    let replay = replay_ledger(dir.path(), codecs(), None);
    assert!(replay.complete() && replay.all_replayed(), "{replay:?}");
    assert_eq!(replay.stopped("ledger"), None);
    assert_eq!(replay.outputs("ledger"), &live[..]);
    assert!(replay.lossless());
}

// book: running/record-and-replay.md "Replay and audit": a recording is per run; run 2's holds the
// re-delivered items with run 2's sequences and replays to run 2's output
#[test]
fn a_restarted_run_records_exactly_its_re_delivered_items_and_replays_to_its_output() {
    let run1 = tempfile::tempdir().unwrap();
    let run2 = tempfile::tempdir().unwrap();
    let lines = [("a", 1), ("b", 2), ("c", 3), ("d", 4)];
    let live1 = record_ledger(run1.path(), codecs(), None, &lines);
    assert_eq!(live1.len(), 4);
    // the state was durable through b when run 1 died; its source re-reads c, d
    let durable_through_b = Some((Epoch(7), 2));
    let live2 = record_ledger(run2.path(), codecs(), durable_through_b, &lines[2..]);
    assert!(
        live2[0].starts_with("apply c") && live2[1].starts_with("apply d"),
        "{live2:?}"
    );

    let recording = read_recording(run2.path());
    let entries = recording.stream("ledger").unwrap().entries();
    assert_eq!(entries.len(), 2, "{entries:?}");
    // run 2's own sequence numbers: the publisher's sequence restarted with the run
    let sequences: Vec<u64> = entries
        .iter()
        .map(|e| e.delivery().unwrap().sequence())
        .collect();
    assert_eq!(sequences, vec![1, 2]);
    assert_eq!(
        read_recording(run1.path())
            .stream("ledger")
            .unwrap()
            .entries()
            .len(),
        4
    );

    let replay = replay_ledger(run2.path(), codecs(), durable_through_b);
    assert_eq!(replay.stopped("ledger"), None);
    assert_eq!(replay.outputs("ledger"), &live2[..]);
}

// book: running/record-and-replay.md "Delivery metadata is recorded and replayed": indexed and
// inline recordings replay the same delivery
#[test]
fn indexed_and_inline_recordings_replay_the_same_delivery() {
    let inline = tempfile::tempdir().unwrap();
    let indexed = tempfile::tempdir().unwrap();
    let journalled = || FeedCodecs::new().journalled::<String>("lines");
    let lines = [("a", 5), ("b", 9)];
    let live_inline = record_ledger(inline.path(), codecs(), None, &lines);
    let live_indexed = record_ledger(indexed.path(), journalled(), None, &lines);
    assert_eq!(live_inline, live_indexed);
    let kinds = |dir: &Path| -> Vec<&'static str> {
        read_recording(dir)
            .stream("ledger")
            .unwrap()
            .entries()
            .iter()
            .map(Entry::kind)
            .collect()
    };
    assert_eq!(kinds(inline.path()), vec!["Inline", "Inline"]);
    assert_eq!(kinds(indexed.path()), vec!["Indexed", "Indexed"]);

    let from_inline = replay_ledger(inline.path(), codecs(), None);
    let from_indexed = replay_ledger(indexed.path(), journalled(), None);
    assert_eq!(from_indexed.stopped("ledger"), None);
    assert_eq!(
        from_inline.outputs("ledger"),
        from_indexed.outputs("ledger")
    );
    assert_eq!(from_indexed.outputs("ledger"), &live_indexed[..]);
    assert!(from_indexed.outputs("ledger")[1].contains("[lines#2 e7 p9]"));
}

// book: running/record-and-replay.md: a processor that skips re-delivered lines by its stored
// position makes the same decisions in replay (live: skip c, skip d; replay: the same)
#[test]
fn a_processor_that_skips_re_delivered_lines_by_stored_position_decides_the_same_in_replay() {
    let dir = tempfile::tempdir().unwrap();
    // its state holds everything through d, but its source committed only through b
    let durable_through_d = Some((Epoch(7), 4));
    let live = record_ledger(
        dir.path(),
        codecs(),
        durable_through_d,
        &[("c", 3), ("d", 4)],
    );
    assert!(
        live[0].starts_with("skip c") && live[1].starts_with("skip d"),
        "{live:?}"
    );
    let replay = replay_ledger(dir.path(), codecs(), durable_through_d);
    assert_eq!(replay.stopped("ledger"), None);
    assert_eq!(replay.outputs("ledger"), &live[..]);
}

// book: guarantees/completion-hooks.md: the first failure of a callback marks
// its processor's input Failed, once, and its ordinary entry is not written; a replay
// stops at the mark
#[test]
fn a_callback_that_failed_live_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let recorder = Recorder::create(
        dir.path(),
        RecordConfig::new(Vec::<String>::new(), codecs()),
    )
    .unwrap();
    let run = start_run(recorder);
    let (sink, sent) = OutputSink::collecting("out");
    let durable: Durable = Arc::default();
    let saved = Arc::clone(&durable);
    // the save of b fails twice, then succeeds on the reader's retry
    let failures = Arc::new(AtomicU32::new(2));
    run.add("ledger", move || Ledger {
        fail_save_of: Some(("b", failures)),
        ..Ledger::new(sink, ticking(), durable)
    });
    run.publish(&[("a", 1), ("b", 2), ("c", 3)]);
    assert!(wait_until(
        || sent.lock().len() == 3 && *saved.lock() == Some((Epoch(7), 3))
    ));
    run.close();

    let recording = read_recording(dir.path());
    let entries = recording.stream("ledger").unwrap().entries();
    let kinds: Vec<&str> = entries.iter().map(Entry::kind).collect();
    assert_eq!(kinds, vec!["Inline", "Failed", "Inline"], "{entries:?}");
    let Entry::Failed { reason } = &entries[1] else {
        unreachable!()
    };
    assert!(reason.contains("the save of b failed"), "{reason}");

    let replay = replay_ledger(dir.path(), codecs(), None);
    let stopped = replay.stopped("ledger").expect("stops at the mark");
    assert!(
        stopped.starts_with("the recorded run failed here"),
        "{stopped}"
    );
    assert_eq!(replay.processor("ledger").unwrap().replayed, 1);
}

// book: guarantees/control-plane.md: later builds of a name record under name#2, and a
// # in a name is doubled, so the two never alias; refused adds take no number
#[test]
fn later_builds_record_under_numbered_keys_that_never_alias_a_name_with_a_hash() {
    let dir = tempfile::tempdir().unwrap();
    let recorder = Recorder::create(
        dir.path(),
        RecordConfig::new(Vec::<String>::new(), codecs()),
    )
    .unwrap();
    let run = start_run(recorder);
    let sinks: Vec<(OutputSink, Collected)> =
        (0..3).map(|_| OutputSink::collecting("out")).collect();
    let make = |index: usize| {
        let sink = sinks[index].0.clone();
        move || Ledger::new(sink, ticking(), Arc::default())
    };
    run.add("p", make(0));
    // a refused add (name in use) takes no number
    let refused = run
        .plane
        .add_processor("g", "p", make(1))
        .reply
        .wait_for(WAIT)
        .unwrap();
    assert!(!refused.applied());
    run.add("p#2", make(1));
    run.publish(&[("a", 1)]);
    assert!(wait_until(
        || sinks[0].1.lock().len() == 1 && sinks[1].1.lock().len() == 1
    ));
    let handle = run.plane.processor_handle("g", "p").unwrap();
    assert!(run
        .plane
        .stop_processor(&handle)
        .wait_for(WAIT)
        .unwrap()
        .applied());
    run.add("p", make(2));
    run.publish(&[("b", 2)]);
    assert!(wait_until(|| sinks[2].1.lock().len() == 1));
    run.close();

    let recording = read_recording(dir.path());
    let keys: HashSet<&str> = recording.streams().iter().map(|s| s.key()).collect();
    assert_eq!(keys, HashSet::from(["p", "p##2", "p#2"]));
    let kinds = |key: &str| -> Vec<&'static str> {
        recording
            .stream(key)
            .unwrap()
            .entries()
            .iter()
            .map(Entry::kind)
            .collect()
    };
    assert_eq!(kinds("p"), vec!["Inline", "Stopped"]);
    assert_eq!(kinds("p#2"), vec!["Inline"]);
    assert_eq!(kinds("p##2"), vec!["Inline", "Inline"]);

    let build = || {
        Ledger::new(
            OutputSink::new("out", |_| {}),
            Clock::system(),
            Arc::default(),
        )
    };
    let replay = Replayer::open(dir.path(), codecs())
        .processor("p", build)
        .processor("p#2", build)
        .processor("p", build)
        .run();
    assert!(replay.all_replayed(), "{replay:?}");
    assert!(replay.outputs("p#2")[0].starts_with("apply b"));
    assert!(replay.outputs("p##2")[1].starts_with("apply b"));
}

// book: running/record-and-replay.md: RECORD refuses a store that already holds a recording
#[test]
fn record_refuses_a_directory_that_already_holds_a_recording() {
    let dir = tempfile::tempdir().unwrap();
    record_ledger(dir.path(), codecs(), None, &[("a", 1)]);
    let error = Recorder::create(dir.path(), RecordConfig::new(["ledger"], codecs())).unwrap_err();
    assert!(
        error.to_string().contains("already holds a recording"),
        "{error}"
    );
}

// book: guarantees/control-plane.md: the replayed processor is not the recorded one
#[test]
fn a_replay_of_another_processor_type_stops_as_not_the_recorded_one() {
    let dir = tempfile::tempdir().unwrap();
    record_ledger(dir.path(), codecs(), None, &[("a", 1)]);
    let replay = Replayer::open(dir.path(), codecs())
        .processor("ledger", || Other)
        .run();
    let stopped = replay.stopped("ledger").expect("stopped");
    assert!(
        stopped.starts_with("the replayed processor is not the recorded one"),
        "{stopped}"
    );
    assert!(replay.complete());
}

// "When a replay stops": a cycle that reads the clock a different number of times
#[test]
fn a_replayed_cycle_reading_the_clock_a_different_number_of_times_stops_on_clock_divergence() {
    let dir = tempfile::tempdir().unwrap();
    record_ledger(dir.path(), codecs(), None, &[("a", 1), ("b", 2)]);
    // the replayed build skips line a (its state says so) so reads no clock for it
    let replay = replay_ledger(dir.path(), codecs(), Some((Epoch(7), 1)));
    let stopped = replay.stopped("ledger").expect("stopped");
    assert!(
        stopped.starts_with("clock divergence at entry 1"),
        "{stopped}"
    );
}

// "When a replay stops": the replay store could not be read
#[test]
fn an_unreadable_store_stops_every_processor_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(RECORDING_FILE),
        b"not a replay store at all",
    )
    .unwrap();
    let replay = replay_ledger(dir.path(), codecs(), None);
    let stopped = replay.stopped("ledger").expect("stopped");
    assert!(
        stopped.starts_with("the replay store could not be read"),
        "{stopped}"
    );
}

// "When a replay stops": entry N could not be replayed (the replayed processor fails on it)
#[test]
fn an_entry_that_fails_in_replay_stops_with_its_number() {
    let dir = tempfile::tempdir().unwrap();
    record_ledger(dir.path(), codecs(), None, &[("a", 1), ("b", 2)]);
    let replay = Replayer::open(dir.path(), codecs())
        .processor("ledger", || {
            let mut ledger = Ledger::new(
                OutputSink::new("out", |_| {}),
                Clock::system(),
                Arc::default(),
            );
            ledger.fail_save_of = Some(("b", Arc::new(AtomicU32::new(1))));
            ledger
        })
        .run();
    let stopped = replay.stopped("ledger").expect("stopped");
    assert!(
        stopped.starts_with("entry 2 could not be replayed"),
        "{stopped}"
    );
    assert!(stopped.contains("the save of b failed"), "{stopped}");
}

// "Stream keys": a later stream that was never recorded is not replayed as empty
#[test]
fn a_later_build_without_a_recorded_stream_stops_as_no_stream_recorded() {
    let dir = tempfile::tempdir().unwrap();
    record_ledger(dir.path(), codecs(), None, &[("a", 1)]);
    let build = || {
        Ledger::new(
            OutputSink::new("out", |_| {}),
            Clock::system(),
            Arc::default(),
        )
    };
    let replay = Replayer::open(dir.path(), codecs())
        .processor("ledger", build)
        .processor("ledger", build)
        .run();
    assert_eq!(replay.stopped("ledger"), None);
    let stopped = replay.stopped("ledger#2").expect("stopped");
    assert!(
        stopped.starts_with("no stream was recorded for ledger#2"),
        "{stopped}"
    );
}

// "When a replay stops": the journal holds no item of an Indexed entry
#[test]
fn an_indexed_entry_missing_from_the_journal_stops_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let journalled = || FeedCodecs::new().journalled::<String>("lines");
    record_ledger(dir.path(), journalled(), None, &[("a", 1)]);
    std::fs::remove_file(dir.path().join(mongoose_replay::JOURNAL_FILE)).unwrap();
    let replay = replay_ledger(dir.path(), journalled(), None);
    let stopped = replay.stopped("ledger").expect("stopped");
    assert!(
        stopped.starts_with("the journal holds no item 1 of feed lines"),
        "{stopped}"
    );
}
