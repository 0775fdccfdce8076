//! What a consumer's sink holds (`SourceOutput::written_positions`) and a pointer that is
//! not this input's, at the start of a COMMITED file source with the real delivery
//! engine (chaos seeds 1796179446144, 1796179446274, 1796542670070; book:
//! guarantees/consumer-side-positions.md). The whole-server kill tests are in
//! `mongoose/tests/suite/guarantees/lost_pointer.rs`.

mod common;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{numbered_lines, offset_after, pipeline, pointer_of, pointer_path};
use mongoose_core::engine::PendingCompletion;
use mongoose_core::{
    ConsumerPosition, Delivery, DeliveryContext, Epoch, Held, PositionValue, ProcessorError,
    SourceState,
};
use mongoose_delivery::{DispatchOutcome, Dispatcher, SourceDriver};
use mongoose_source_file::Line;

/// The lines a run delivered, with their `(epoch, position)`.
#[derive(Default)]
struct Collect {
    lines: Vec<(String, Epoch, u64)>,
}

impl Dispatcher<Line> for Collect {
    fn dispatch(&mut self, line: &Line, _attempt: u32) -> DispatchOutcome {
        let delivery = DeliveryContext::current().expect("a positioned delivery");
        self.lines.push((
            line.text().into_owned(),
            delivery.epoch(),
            delivery.position().offset,
        ));
        DispatchOutcome::Done
    }

    fn complete(&mut self, _: PendingCompletion, _: &Delivery) -> Result<(), ProcessorError> {
        Ok(())
    }
}

/// One run over `input` until caught up with everything processed, then a clean stop.
/// `written`: what a consumer's sink holds, reported before the start. Returns the
/// lines delivered and the feed's lossless flag.
fn run(input: &Path, written: Option<(Epoch, u64)>) -> (Vec<(String, Epoch, u64)>, bool) {
    run_then(input, written, &|| ())
}

/// [`run`], with `started` called once the source has started (before its first cycle).
fn run_then(
    input: &Path,
    written: Option<(Epoch, u64)>,
    started: &dyn Fn(),
) -> (Vec<(String, Epoch, u64)>, bool) {
    let mut pipeline = pipeline(input, 1024);
    if let Some((epoch, offset)) = written {
        pipeline.feed.note_consumer_position(ConsumerPosition::new(
            "forward/copy",
            Held::Written((epoch, PositionValue { lane: 0, offset })),
        ));
    }
    SourceDriver::start_source(&mut pipeline.source, &pipeline.feed).expect("start");
    pipeline.feed.start_complete();
    started();
    let mut collect = Collect::default();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "never caught up");
        SourceDriver::cycle(&mut pipeline.source, &pipeline.feed).expect("duty cycle");
        pipeline.reader.poll(&mut collect, 256);
        if pipeline.source.state() == SourceState::CaughtUp && pipeline.reader.is_empty() {
            break;
        }
    }
    SourceDriver::stop_source(&mut pipeline.source, &pipeline.feed).expect("stop");
    let lossless = pipeline.feed.status().lossless;
    (collect.lines, lossless)
}

/// Another input (`other/in.log` in `dir`) of `lines` numbered lines, read to its end
/// in a run of its own: its pointer is another input's pointer for `dir/in.log`.
fn other_input(dir: &Path, lines: usize) -> std::path::PathBuf {
    let other = dir.join("other");
    fs::create_dir_all(&other).expect("other");
    let other_input = other.join("in.log");
    fs::write(&other_input, numbered_lines(lines)).expect("other input");
    run(&other_input, None);
    other_input
}

fn texts(lines: &[(String, Epoch, u64)]) -> Vec<&str> {
    lines.iter().map(|(text, _, _)| text.as_str()).collect()
}

#[test]
fn a_deleted_pointer_resumes_after_what_the_consumers_sink_holds_under_its_epoch() {
    let dir = tempfile::tempdir().expect("dir");
    let input = dir.path().join("in.log");
    fs::write(&input, numbered_lines(10)).expect("input");
    let (first, _) = run(&input, None);
    assert_eq!(first.len(), 10);
    let epoch = first[0].1;
    fs::write(&input, numbered_lines(15)).expect("grown");
    fs::remove_file(pointer_path(&input)).expect("pointer deleted");
    // the sink holds the first 8 lines' outputs (a kill before the last two's)
    let (second, lossless) = run(&input, Some((epoch, offset_after(8))));
    assert_eq!(
        texts(&second),
        (9..=15).map(|n| format!("line-{n:05}")).collect::<Vec<_>>(),
        "read from after the last line written"
    );
    assert!(
        second.iter().all(|(_, at, _)| *at == epoch),
        "under its epoch"
    );
    assert!(lossless);
    assert_eq!(pointer_of(&input).epoch, epoch.get());
}

#[test]
fn a_written_position_never_moves_a_trusted_pointer_back() {
    // a forward with a filter: the last line it wrote may be far behind the pointer
    let dir = tempfile::tempdir().expect("dir");
    let input = dir.path().join("in.log");
    fs::write(&input, numbered_lines(10)).expect("input");
    let (first, _) = run(&input, None);
    let epoch = first[0].1;
    fs::write(&input, numbered_lines(12)).expect("grown");
    let (second, _) = run(&input, Some((epoch, offset_after(2))));
    assert_eq!(texts(&second), vec!["line-00011", "line-00012"]);
}

#[test]
fn another_inputs_pointer_is_not_taken_for_a_replaced_input() {
    let dir = tempfile::tempdir().expect("dir");
    let other = dir.path().join("other");
    fs::create_dir_all(&other).expect("other");
    let other_input = other.join("in.log");
    fs::write(&other_input, "another input's first line\nand more\n").expect("other input");
    run(&other_input, None);
    let input = dir.path().join("in.log");
    fs::write(&input, numbered_lines(10)).expect("input");
    let (first, _) = run(&input, None);
    let epoch = first[0].1;
    fs::write(&input, numbered_lines(14)).expect("grown");
    fs::copy(pointer_path(&other_input), pointer_path(&input)).expect("the other pointer");
    let (second, lossless) = run(&input, Some((epoch, offset_after(10))));
    assert_eq!(
        texts(&second),
        vec!["line-00011", "line-00012", "line-00013", "line-00014"],
        "resumed after what the sink holds, under its epoch"
    );
    assert!(second.iter().all(|(_, at, _)| *at == epoch));
    assert!(lossless, "nothing lost, and not reported lost");
    // with no consumer position, another input's pointer is not taken for this
    // input's rotated-away file (a possible loss): from the start, under the input's
    // identity (the epoch of its first read: every repeat keeps its key)
    fs::copy(pointer_path(&other_input), pointer_path(&input)).expect("the other pointer");
    let (third, lossless) = run(&input, None);
    assert_eq!(third.len(), 14);
    assert!(third.iter().all(|(_, at, _)| *at == epoch));
    assert!(lossless, "another input's pointer is no loss of this input");
}

#[test]
fn this_inputs_pointer_of_a_replaced_file_reads_the_new_file_from_its_start() {
    // the sink's position of the old file does not apply to the new one
    let dir = tempfile::tempdir().expect("dir");
    let input = dir.path().join("in.log");
    fs::write(&input, numbered_lines(10)).expect("input");
    let (first, _) = run(&input, None);
    let epoch = first[0].1;
    fs::write(&input, "a new file\nwith other lines\nthree of them\n").expect("replaced");
    let (second, _) = run(&input, Some((epoch, offset_after(10))));
    assert_eq!(
        texts(&second),
        vec!["a new file", "with other lines", "three of them"]
    );
    assert!(second.iter().all(|(_, at, _)| *at != epoch), "a new epoch");
}

#[test]
fn another_copys_pointer_of_the_same_content_is_not_taken_when_the_consumers_hold_another_epoch() {
    // chaos seed 1796179446144: the other run read the same lines (the same leading
    // bytes) from its own copy, under its own epoch
    let dir = tempfile::tempdir().expect("dir");
    let other_input = other_input(dir.path(), 4);
    let input = dir.path().join("in.log");
    fs::write(&input, numbered_lines(10)).expect("input");
    let (first, _) = run(&input, None);
    let epoch = first[0].1;
    fs::write(&input, numbered_lines(12)).expect("grown");
    fs::copy(pointer_path(&other_input), pointer_path(&input)).expect("the other pointer");
    let (second, lossless) = run(&input, Some((epoch, offset_after(10))));
    assert_eq!(texts(&second), vec!["line-00011", "line-00012"]);
    assert!(second.iter().all(|(_, at, _)| *at == epoch));
    assert!(lossless);
}

#[test]
fn another_inputs_pointer_for_an_input_not_made_yet_is_no_loss_when_it_is() {
    // chaos seed 1796554965093: another run's pointer (past 25,900 bytes) in place of
    // the pointer of a glob's input that had no file yet; the file was made after the
    // start, shorter than the pointer's offset, and was reported as a rotated file
    // deleted before it was read to its end (a loss that never was)
    let dir = tempfile::tempdir().expect("dir");
    let other_input = other_input(dir.path(), 40);
    let input = dir.path().join("in.log");
    fs::copy(pointer_path(&other_input), pointer_path(&input)).expect("the other pointer");
    let (lines, lossless) = run_then(&input, None, &|| {
        fs::write(&input, numbered_lines(5)).expect("the input, made after the start");
    });
    assert_eq!(
        texts(&lines),
        (1..=5).map(|n| format!("line-{n:05}")).collect::<Vec<_>>(),
        "read from its start"
    );
    assert!(lossless, "another input's pointer is no loss of this input");
}

#[test]
fn this_inputs_pointer_for_a_file_deleted_while_stopped_still_reports_the_loss() {
    // the other side of the rule above: this input's own pointer, its file deleted
    // while the server was down and made again shorter, is a possible loss
    let dir = tempfile::tempdir().expect("dir");
    let input = dir.path().join("in.log");
    fs::write(&input, numbered_lines(40)).expect("input");
    run(&input, None);
    fs::remove_file(&input).expect("deleted while stopped");
    let (lines, lossless) = run_then(&input, None, &|| {
        fs::write(&input, numbered_lines(5)).expect("made again after the start");
    });
    assert_eq!(lines.len(), 5, "the new file read from its start");
    assert!(!lossless, "the old file's unread end is a possible loss");
}

#[test]
fn another_copys_pointer_of_the_same_content_skips_nothing_when_no_consumer_holds_its_epoch() {
    // chaos seed 1796554965093 again: the other run read 40 lines of the same content;
    // no consumer holds anything of this input. Taken for this input's, the pointer
    // skipped this file's first 40 lines (a longer file) or reported a loss that never
    // was (a shorter one)
    for (lines, what) in [(50, "a longer file"), (5, "a shorter file")] {
        let dir = tempfile::tempdir().expect("dir");
        let other_input = other_input(dir.path(), 40);
        let input = dir.path().join("in.log");
        fs::write(&input, numbered_lines(lines)).expect("input");
        fs::copy(pointer_path(&other_input), pointer_path(&input)).expect("the other pointer");
        let (read, lossless) = run(&input, None);
        assert_eq!(read.len(), lines, "{what}: every line read, from the start");
        assert!(
            lossless,
            "{what}: another input's pointer is no loss of this input"
        );
    }
}
