//! Random appends, rotations, crashes and clean restarts against a model of which lines
//! must be applied (issue 11): a consumer that stores `(epoch, position)` with its state
//! and skips what [`already_applied`](mongoose_core::Delivery::already_applied) would
//! skip applies every line written exactly once, in the order written.
//!
//! A "crash" drops the source and its output without a stop: what the pointer holds is
//! what the last commit wrote (the mapped page, as after a SIGKILL). The crash tests
//! with real processes are in `mongoose/tests/suite/guarantees/rotation.rs`.
//!
//! One limit is part of the model: at most one rotation happens between the moment the
//! source opened the file at the path and the moment it opens the next one (a second
//! rotation while the first is still being finished, or two rotations while stopped,
//! leaves a middle file that only a glob feed reads).

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use mongoose_core::{Epoch, SourceState};
use mongoose_delivery::SourceDriver;
use mongoose_source_file::{FileEventSource, Line, ReadStrategy};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    /// Append this many lines to the file at the path.
    Append(usize),
    /// logrotate: rename the file, append this many lines to the renamed file, create
    /// a new file at the path with the second count of lines.
    Rotate(usize, usize),
    /// Duty cycles of the source.
    Drive(usize),
    /// The consumer processes up to this many of the published items.
    Process(usize),
    /// The process is killed: no stop, no commit.
    Crash,
    /// A clean stop and a start.
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1usize..6).prop_map(Op::Append),
        2 => ((0usize..3), (0usize..4)).prop_map(|(old, new)| Op::Rotate(old, new)),
        4 => (1usize..6).prop_map(Op::Drive),
        4 => (1usize..8).prop_map(Op::Process),
        1 => Just(Op::Crash),
        1 => Just(Op::Restart),
    ]
}

/// The consumer: what it applied and the `(epoch, position)` saved with it, which
/// survive a crash (its state is durable).
#[derive(Default)]
struct Consumer {
    applied: Vec<String>,
    saved: Option<(Epoch, u64)>,
}

struct Run {
    dir: tempfile::TempDir,
    path: PathBuf,
    rotations: usize,
    next_line: usize,
    written: Vec<String>,
    consumer: Consumer,
    output: Arc<RecordingOutput<Line>>,
    source: FileEventSource<Line>,
    /// Items of `output` the consumer has seen.
    seen: usize,
    /// A rotation whose new file the source has not opened yet.
    rotation_pending: bool,
}

fn write_lines(path: &Path, lines: &[String]) {
    let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
    append(path, text.as_bytes());
}

impl Run {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("input.log");
        fs::write(&path, b"").expect("input");
        let output = RecordingOutput::new();
        let mut source = started_source(&path, ReadStrategy::Committed, &output);
        // the source opens the file before the writer writes (a rotation between the
        // very first start and the first open is a rotation before the feed existed)
        drive(&mut source, &output, 1);
        Run {
            dir,
            path,
            rotations: 0,
            next_line: 0,
            written: Vec::new(),
            consumer: Consumer::default(),
            output,
            source,
            seen: 0,
            rotation_pending: false,
        }
    }

    fn new_lines(&mut self, count: usize) -> Vec<String> {
        let lines: Vec<String> = (self.next_line..self.next_line + count)
            // fixed width: no line's bytes are the start of another's, so a new file's
            // fingerprint never matches an old one by accident
            .map(|index| format!("line-{index:06}"))
            .collect();
        self.next_line += count;
        self.written.extend(lines.iter().cloned());
        lines
    }

    fn process(&mut self, count: usize) {
        let entries = self.output.entries();
        let items: Vec<_> = entries
            .iter()
            .filter(|entry| entry.item.is_some())
            .collect();
        let upto = (self.seen + count).min(items.len());
        for entry in &items[self.seen..upto] {
            let skip = self.consumer.saved.is_some_and(|(epoch, position)| {
                epoch == entry.epoch && entry.position <= position
            });
            if !skip {
                let line = entry.item.clone().expect("an item");
                self.consumer.applied.push(line.text().into_owned());
                self.consumer.saved = Some((entry.epoch, entry.position));
            }
        }
        self.seen = upto;
        self.output.process(upto);
    }

    fn restart(&mut self, clean: bool) {
        if clean {
            SourceDriver::stop_source(&mut self.source, &self.output).expect("stop");
        }
        let output = RecordingOutput::new();
        let source = started_source(&self.path, ReadStrategy::Committed, &output);
        // the old source and output go: a crash keeps nothing but the pointer
        self.source = source;
        self.output = output;
        self.seen = 0;
    }

    /// Processes everything until the source is caught up on the file at the path:
    /// a few duty cycles in a row that publish nothing, everything processed, and
    /// CAUGHT_UP the last state reported.
    fn settle(&mut self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut quiet = 0;
        while quiet < 3 {
            assert!(std::time::Instant::now() < deadline, "never caught up");
            let items = self.output.items().len();
            self.process(items - self.seen);
            drive(&mut self.source, &self.output, 1);
            let after = self.output.items().len();
            if after == items && self.output.last_state() == Some(SourceState::CaughtUp) {
                quiet += 1;
            } else {
                quiet = 0;
            }
        }
        self.rotation_pending = false;
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Append(count) => {
                let lines = self.new_lines(count);
                write_lines(&self.path, &lines);
            }
            Op::Rotate(old, new) => {
                if self.rotation_pending {
                    self.settle();
                }
                self.rotations += 1;
                let rotated = self
                    .dir
                    .path()
                    .join(format!("input.log.{}", self.rotations));
                fs::rename(&self.path, &rotated).expect("rotate");
                let lines = self.new_lines(old);
                write_lines(&rotated, &lines);
                fs::write(&self.path, b"").expect("new file");
                let lines = self.new_lines(new);
                write_lines(&self.path, &lines);
                self.rotation_pending = true;
            }
            Op::Drive(cycles) => drive(&mut self.source, &self.output, cycles),
            Op::Process(count) => self.process(count),
            Op::Crash => self.restart(false),
            Op::Restart => self.restart(true),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn every_line_written_is_applied_once_in_order_across_rotations_and_crashes(
        ops in proptest::collection::vec(op(), 1..40)
    ) {
        let mut run = Run::new();
        for op in &ops {
            run.apply(op);
        }
        run.settle();
        prop_assert_eq!(&run.consumer.applied, &run.written);
    }
}
