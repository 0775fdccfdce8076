//! Replay of hand-written recordings: losses, legacy keys, entries this build does not
//! replay, and the report.

use std::path::Path;

use mongoose_core::{Processor, ProcessorError, StartContext};

use crate::cli::replay_report;
use crate::format::{header, push_frame, WireEntry, WireFrame};
use crate::record::{RecordedOutput, OUTPUTS_FILE, RECORDING_FILE};
use crate::{Entry, FeedCodecs, OutputSink, ReplayStore, Replayer, Utf8Codec};

/// Sends every line it gets.
struct Echo {
    sink: OutputSink,
}

impl Echo {
    #[allow(clippy::ptr_arg)] // a feed of String hands handlers &String
    fn on_line(&mut self, line: &String) -> Result<(), ProcessorError> {
        self.sink.send(format!("got {line}"));
        Ok(())
    }
}

impl Processor for Echo {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("lines", Echo::on_line)
    }
}

fn echo() -> Echo {
    Echo {
        sink: OutputSink::new("out", |_| panic!("a replay never delivers")),
    }
}

fn codecs() -> FeedCodecs {
    FeedCodecs::new().feed_with("lines", Utf8Codec, false)
}

fn line(text: &str) -> Entry {
    Entry::inline(&Utf8Codec, &text.to_owned(), "lines", None, vec![]).unwrap()
}

fn write_stream(dir: &Path, key: &str, entries: &[Entry]) {
    let mut store = ReplayStore::open_for_record(dir.join(RECORDING_FILE)).unwrap();
    let stream = store.begin(key, None).unwrap();
    for entry in entries {
        store.append(stream, entry).unwrap();
    }
    store.close().unwrap();
}

// book: guarantees/control-plane.md: a replay carries on past a Dropped entry and
// reports the loss through losses() and lossless()
#[test]
fn a_dropped_entry_is_a_loss_the_replay_carries_on_past() {
    let dir = tempfile::tempdir().unwrap();
    let dropped = Entry::Dropped {
        feed: "lines".into(),
        sequence: 2,
    };
    write_stream(dir.path(), "echo", &[line("a"), dropped, line("c")]);
    let replay = Replayer::open(dir.path(), codecs())
        .processor("echo", echo)
        .run();
    assert_eq!(replay.stopped("echo"), None);
    assert_eq!(replay.outputs("echo"), ["got a", "got c"]);
    assert!(!replay.lossless());
    let losses = replay.losses();
    assert_eq!((losses.len(), losses[0].sequence), (1, 2));
    assert!(replay.complete());
}

// book: guarantees/control-plane.md: an ambiguous legacy key (an unescaped #) stops the
// processor's replay instead of guessing
#[test]
fn an_ambiguous_legacy_stream_key_stops_the_replay() {
    let dir = tempfile::tempdir().unwrap();
    // a legacy recorder wrote the processor "a#b" under its bare name, unescaped
    let mut bytes = header().to_vec();
    push_frame(
        &mut bytes,
        &WireFrame::Stream {
            id: 0,
            key: "a#b".into(),
            provenance: None,
        },
    )
    .unwrap();
    let entry = line("x");
    push_frame(
        &mut bytes,
        &WireFrame::Entry {
            stream: 0,
            entry: WireEntry::of(&entry),
        },
    )
    .unwrap();
    std::fs::write(dir.path().join(RECORDING_FILE), bytes).unwrap();
    let replay = Replayer::open(dir.path(), codecs())
        .processor("a#b", echo)
        .run();
    let stopped = replay.stopped("a##b").expect("stopped");
    assert!(
        stopped.starts_with("ambiguous legacy stream key"),
        "{stopped}"
    );
    assert!(replay.outputs("a##b").is_empty());
}

// issue 6: the report prints per processor complete/stopped, losses and an output diff
#[test]
fn the_report_shows_each_processor_its_losses_and_where_outputs_differ() {
    let dir = tempfile::tempdir().unwrap();
    let dropped = Entry::Dropped {
        feed: "lines".into(),
        sequence: 9,
    };
    write_stream(dir.path(), "echo", &[line("a"), dropped, line("b")]);
    let recorded = ["got a", "got B"]
        .iter()
        .map(|output| {
            serde_json::to_string(&RecordedOutput {
                stream: "echo".into(),
                output: (*output).into(),
            })
            .unwrap()
        })
        .map(|line| line + "\n")
        .collect::<String>();
    std::fs::write(dir.path().join(OUTPUTS_FILE), recorded).unwrap();
    let report = replay_report(
        dir.path(),
        Replayer::open(dir.path(), codecs()).processor("echo", echo),
    );
    assert_eq!(report.diff("echo"), vec![(1, Some("got B"), Some("got b"))]);
    assert!(!report.reproduced());
    let text = report.to_string();
    assert!(
        text.contains("processor echo: complete, 3/3 entries replayed"),
        "{text}"
    );
    assert!(text.contains("losses: 1 (lines#9)"), "{text}");
    assert!(
        text.contains("@1 - got B") && text.contains("@1 + got b"),
        "{text}"
    );
    assert!(text.contains("NOT lossless"), "{text}");
}

/// Panics on "boom"; records what DeliveryContext said.
struct Fragile {
    seen: Vec<Option<u64>>,
    sink: OutputSink,
}

impl Fragile {
    #[allow(clippy::ptr_arg)] // a feed of String hands handlers &String
    fn on_line(&mut self, line: &String) -> Result<(), ProcessorError> {
        let position = mongoose_core::DeliveryContext::current().map(|d| d.position().offset);
        self.sink.send(format!("{line} at {position:?}"));
        self.seen.push(position);
        assert_ne!(line, "boom", "a handler that panics");
        Ok(())
    }
}

impl Processor for Fragile {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("lines", Fragile::on_line)
    }
}

// book: running/record-and-replay.md: the replayer enters the recorded delivery for the replayed
// cycle and clears it after (in a finally: also when the processor panics)
#[test]
fn a_replayed_delivery_is_cleared_after_its_cycle_even_when_the_processor_panics() {
    use mongoose_core::{Delivery, DeliveryContext, Epoch, PositionValue};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let at = |position| {
        Some(Delivery::new(
            Arc::from("lines"),
            position,
            Epoch(1),
            PositionValue::at(position),
            0,
        ))
    };
    let entry = |text: &str, delivery| {
        Entry::inline(&Utf8Codec, &text.to_owned(), "lines", delivery, vec![]).unwrap()
    };
    write_stream(
        dir.path(),
        "fragile",
        &[entry("a", at(3)), entry("b", None), entry("boom", at(9))],
    );
    let replay = Replayer::open(dir.path(), codecs())
        .processor("fragile", || Fragile {
            seen: Vec::new(),
            sink: OutputSink::new("out", |_| {}),
        })
        .run();
    assert_eq!(
        replay.outputs("fragile"),
        ["a at Some(3)", "b at None", "boom at Some(9)"]
    );
    let stopped = replay.stopped("fragile").expect("stopped");
    assert!(
        stopped.starts_with("entry 3 could not be replayed: panicked"),
        "{stopped}"
    );
    assert!(
        DeliveryContext::current().is_none(),
        "the delivery was cleared"
    );
}
