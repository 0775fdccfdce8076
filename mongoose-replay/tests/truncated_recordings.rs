//! A replay never reports a recording "complete" or a run "reproduced" that the files on
//! disk cannot back (issue 10, item 10): a store cut at a frame boundary, cut to its head
//! or to nothing, a store that cannot be read at all, and garbage, cut or missing
//! `outputs.jsonl` / `admin.jsonl` are each reported as an incomplete recording, never
//! as complete (book: running/record-and-replay.md: a torn last frame marks the recording
//! incomplete).
//!
//! Every recording here is made by a real run: a processor group with a [`Recorder`],
//! fed lines and admin commands, closed cleanly. The damage is then done to the files.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use mongoose_control::memory::MemoryFeeds;
use mongoose_control::{ControlConfig, ControlPlane, GroupRecorder};
use mongoose_core::{Processor, ProcessorError, ProcessorId, StartContext};
use mongoose_replay::cli::{replay_report, ReplayOutcome, ReplayReport};
use mongoose_replay::{
    Clock, FeedCodecs, Incomplete, OutputSink, RecordConfig, Recorder, Recording, RecordingHandle,
    Replayer, ADMIN_REPLIES_FILE, FRAME_HEAD_LEN, HEADER_LEN, OUTPUTS_FILE, RECORDING_FILE,
};
use mongoose_testkit::Tmpfs;

mod support;
use support::{assert_eventually, close_groups, read_recording, recording_group, WAIT};

const LINES: usize = 40;

/// Applies `account,amount` lines and reports each; `balance ACCOUNT` answers with the
/// balance and the time it read.
struct Teller {
    balances: BTreeMap<String, i64>,
    clock: Clock,
    sink: OutputSink,
}

impl Teller {
    #[allow(clippy::ptr_arg)] // a feed of String hands handlers &String
    fn on_line(&mut self, line: &String) -> Result<(), ProcessorError> {
        let (account, amount) = line.split_once(',').ok_or("expected account,amount")?;
        let amount: i64 = amount.parse().map_err(|_| "not an amount")?;
        let balance = self.balances.entry(account.to_owned()).or_insert(0);
        *balance += amount;
        self.sink.send(format!("{account}={balance}"));
        Ok(())
    }

    fn balance(&mut self, args: &[String]) -> Result<String, ProcessorError> {
        let [account] = args else {
            return Err("usage: balance ACCOUNT".into());
        };
        let at = self.clock.now();
        Ok(format!(
            "{account}={} at {at}",
            self.balances.get(account).copied().unwrap_or(0)
        ))
    }
}

impl Processor for Teller {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("lines", Teller::on_line)?;
        context.register_command("balance", Teller::balance);
        Ok(())
    }
}

fn teller(sink: OutputSink) -> Teller {
    let next = Arc::new(AtomicI64::new(1_000));
    Teller {
        balances: BTreeMap::new(),
        clock: Clock::from_fn(move || next.fetch_add(1, Ordering::AcqRel)),
        sink,
    }
}

fn codecs() -> FeedCodecs {
    FeedCodecs::new().feed::<String>("lines")
}

/// The lines of an ordinary run.
fn ordinary_lines() -> Vec<String> {
    (0..LINES)
        .map(|index| format!("acc{},{}", index % 3, index as i64 - 7))
        .collect()
}

/// Records a real run into `dir`: `LINES` lines, a `balance` command after every tenth,
/// then a clean close of the group.
fn record(dir: &Path) {
    record_lines(dir, &ordinary_lines());
}

/// Records a real run of `script` into `dir` (a `balance` command after every tenth
/// line), then closes the group cleanly.
fn record_lines(dir: &Path, script: &[String]) -> RecordingHandle {
    let feeds = MemoryFeeds::default();
    let lines = feeds.feed::<String>("lines");
    let plane = ControlPlane::new(ControlConfig::default(), Arc::new(feeds.clone()));
    let handle = recording_group(&plane, dir, "bank", &["teller"], codecs());
    let (sink, _sent) = OutputSink::collecting("out");
    let added = plane
        .add_processor("bank", "teller", move || teller(sink))
        .reply
        .wait_for(WAIT)
        .expect("added");
    assert!(added.applied(), "{added:?}");
    for (index, line) in script.iter().enumerate() {
        lines.publish(line.clone());
        assert_eventually(|| feeds.dispatched("lines", "bank") == index as u64 + 1);
        if index % 10 == 9 {
            let account = line.split_once(',').map_or("", |(account, _)| account);
            let reply = plane
                .invoke_admin_command("bank", "teller", "balance", vec![account.to_owned()])
                .wait_for(WAIT)
                .expect("answered");
            assert!(reply.output.is_some(), "{reply:?}");
        }
    }
    close_groups(&plane);
    assert!(handle.closed());
    handle
}

fn report(dir: &Path) -> ReplayReport {
    let replayer = Replayer::open(dir, codecs())
        .processor("teller", || teller(OutputSink::new("out", |_| {})));
    replay_report(dir, replayer)
}

/// A recording made by a real run, in a temporary folder.
fn recorded() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("dir");
    record(dir.path());
    dir
}

/// Where each frame of the store starts, and its body's first byte (the frame kind:
/// 0 stream, 1 delivery, 2 entry, 3 closing).
fn frames(store: &[u8]) -> Vec<(usize, u8)> {
    let mut frames = Vec::new();
    let mut offset = HEADER_LEN;
    while offset + FRAME_HEAD_LEN <= store.len() {
        let length = u32::from_le_bytes(store[offset..offset + 4].try_into().unwrap()) as usize;
        frames.push((offset, store[offset + FRAME_HEAD_LEN]));
        offset += FRAME_HEAD_LEN + length;
    }
    assert_eq!(offset, store.len(), "the store ends at a frame boundary");
    frames
}

fn cut(path: &Path, length: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open")
        .set_len(length)
        .expect("cut");
}

/// What every damaged recording must give: no "recording: complete", no processor
/// replayed "complete", a summary that is NOT reproduced, and the incomplete outcome
/// (`mongoose replay` exits 4 on it).
fn assert_reported_incomplete(report: &ReplayReport, why: &str) -> String {
    let text = report.to_string();
    assert!(!report.reproduced(), "{why}: reproduced\n{text}");
    assert!(
        !text
            .lines()
            .any(|line| line.starts_with("recording: complete")),
        "{why}: the report says complete\n{text}"
    );
    assert!(
        text.lines()
            .any(|line| line.starts_with("recording: INCOMPLETE")
                || line.starts_with("recording: UNREADABLE")),
        "{why}: the report does not say the recording is incomplete\n{text}"
    );
    assert!(
        !text
            .lines()
            .any(|line| line.starts_with("processor ") && line.contains(": complete")),
        "{why}: a processor's replay is called complete\n{text}"
    );
    let summary = text
        .lines()
        .find(|line| line.starts_with("summary:"))
        .unwrap_or_else(|| panic!("{why}: no summary\n{text}"));
    assert!(summary.contains("NOT reproduced"), "{why}: {summary}");
    assert_eq!(
        report.outcome(),
        ReplayOutcome::RecordingIncomplete,
        "{why}\n{text}"
    );
    text
}

// the control: a recording closed cleanly and left alone is complete and reproduced
#[test]
fn a_recording_closed_cleanly_is_complete_and_reproduced() {
    let dir = recorded();
    let report = report(dir.path());
    let text = report.to_string();
    assert!(report.reproduced(), "{text}");
    assert_eq!(report.outcome(), ReplayOutcome::Reproduced, "{text}");
    assert!(text.contains("recording: complete"), "{text}");
    let recording = read_recording(dir.path());
    assert!(recording.complete(), "{:?}", recording.incomplete());
    let closing = recording.closing().expect("a closing frame");
    // LINES inputs and LINES / 10 admin commands
    assert_eq!(closing.entries(), (LINES + LINES / 10) as u64);
}

// issue 10 item 10: "a recording store cut at a frame boundary (half its frames) still
// reports recording: complete ... reproduced, exit 0"
#[test]
fn a_store_cut_at_a_frame_boundary_after_half_its_frames_is_incomplete() {
    let dir = recorded();
    let path = dir.path().join(RECORDING_FILE);
    let store = std::fs::read(&path).expect("store");
    let frames = frames(&store);
    // the first entry frame past the middle ends where the cut goes: a boundary between
    // whole appends, so nothing torn and no delivery without its input is left
    let half = frames.len() / 2;
    let (index, _) = frames
        .iter()
        .enumerate()
        .skip(half)
        .find(|(_, (_, kind))| *kind == 2)
        .expect("an entry frame past the middle");
    let boundary = frames[index + 1].0;
    cut(&path, boundary as u64);
    let recording = Recording::read(&path).expect("readable");
    assert!(!recording.complete(), "a cut store reads as complete");
    let text = assert_reported_incomplete(&report(dir.path()), "cut at a frame boundary");
    assert!(text.contains("no closing frame"), "{text}");
    // what it holds is still replayed, as a partial replay
    assert!(text.contains("partial"), "{text}");
}

// issue 10 item 10: "... to 12 bytes ..."
#[test]
fn a_store_cut_to_its_head_is_incomplete() {
    let dir = recorded();
    let path = dir.path().join(RECORDING_FILE);
    cut(&path, HEADER_LEN as u64);
    assert!(!Recording::read(&path).expect("readable").complete());
    let text = assert_reported_incomplete(&report(dir.path()), "cut to 12 bytes");
    assert!(text.contains("no closing frame"), "{text}");
}

// issue 10 item 10: "... or to 0 bytes ..."
#[test]
fn a_store_cut_to_nothing_is_incomplete() {
    let dir = recorded();
    let path = dir.path().join(RECORDING_FILE);
    cut(&path, 0);
    assert!(!Recording::read(&path).expect("readable").complete());
    let text = assert_reported_incomplete(&report(dir.path()), "cut to 0 bytes");
    assert!(text.contains("empty"), "{text}");
}

// issue 10 item 10: "recording: complete is never printed next to could not be read"
#[test]
fn a_store_that_cannot_be_read_is_never_reported_complete() {
    let dir = recorded();
    std::fs::write(
        dir.path().join(RECORDING_FILE),
        b"this is not a replay store",
    )
    .expect("write");
    let text = assert_reported_incomplete(&report(dir.path()), "a store that is not a store");
    assert!(text.contains("could not be read"), "{text}");
}

fn garbage_line(dir: &Path, file: &str, line: usize) {
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).expect("sidecar");
    let mut lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() > line, "{file} has only {} lines", lines.len());
    lines[line - 1] = "{\"stream\": \"teller\", garbage";
    std::fs::write(&path, lines.join("\n") + "\n").expect("write");
}

// issue 10 item 10: "garbage outputs.jsonl ... is ignored"
#[test]
fn garbage_in_outputs_jsonl_is_an_error_naming_the_file_and_line() {
    let dir = recorded();
    garbage_line(dir.path(), OUTPUTS_FILE, 3);
    let text = assert_reported_incomplete(&report(dir.path()), "garbage outputs.jsonl");
    assert!(text.contains("outputs.jsonl line 3"), "{text}");
}

// issue 10 item 10: "garbage ... admin.jsonl is ignored"
#[test]
fn garbage_in_admin_jsonl_is_an_error_naming_the_file_and_line() {
    let dir = recorded();
    garbage_line(dir.path(), ADMIN_REPLIES_FILE, 2);
    let text = assert_reported_incomplete(&report(dir.path()), "garbage admin.jsonl");
    assert!(text.contains("admin.jsonl line 2"), "{text}");
}

// the closing frame seals the sidecars: one cut at a line boundary is a damaged
// recording, not a run that differs
#[test]
fn outputs_jsonl_cut_at_a_line_boundary_is_incomplete() {
    let dir = recorded();
    let path = dir.path().join(OUTPUTS_FILE);
    let text = std::fs::read_to_string(&path).expect("outputs");
    let kept: String = text
        .lines()
        .take(LINES / 2)
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&path, kept).expect("write");
    let text = assert_reported_incomplete(&report(dir.path()), "outputs.jsonl cut");
    assert!(text.contains("outputs.jsonl"), "{text}");
}

// a sidecar the closing frame seals is never taken as "not recorded"
#[test]
fn a_deleted_sidecar_of_a_closed_recording_is_an_error() {
    for file in [OUTPUTS_FILE, ADMIN_REPLIES_FILE] {
        let dir = recorded();
        std::fs::remove_file(dir.path().join(file)).expect("remove");
        let text = assert_reported_incomplete(&report(dir.path()), file);
        assert!(text.contains(&format!("{file}: missing")), "{text}");
    }
}

// a closing frame vouches for every write: a recording whose write failed (a real full
// disk: a 64 KiB tmpfs) is closed without it, and reads as incomplete
#[test]
fn a_recording_whose_write_failed_on_a_full_disk_gets_no_closing_frame() {
    let disk = Tmpfs::mount("64k");
    let dir = disk.path().join("recording");
    let padding = "x".repeat(900);
    let script: Vec<String> = (0..120)
        .map(|index| format!("acc{}{padding},{index}", index % 3))
        .collect();
    let handle = record_lines(&dir, &script);
    let error = handle.error().expect("the full disk failed a write");
    assert!(error.contains("No space left"), "{error}");
    let recording = read_recording(&dir);
    assert!(recording.closing().is_none());
    assert!(!recording.complete());
    let text = assert_reported_incomplete(&report(&dir), "a full disk");
    assert!(
        text.contains("no closing frame") || text.contains("torn"),
        "{text}"
    );
}

// a recorder dropped without its group closing (a group that died) is no clean close
#[test]
fn a_recorder_dropped_without_its_group_closing_gets_no_closing_frame() {
    let dir = tempfile::tempdir().expect("dir");
    let mut recorder =
        Recorder::create(dir.path(), RecordConfig::new(["teller"], codecs())).expect("recorder");
    let teller = ProcessorId(1);
    recorder.processor_built(teller, "teller", std::any::type_name::<Teller>());
    recorder.item_begins();
    recorder.dispatched(teller, "lines", &"acc0,5".to_owned(), Ok(()));
    recorder.item_finished();
    drop(recorder);
    let recording = read_recording(dir.path());
    assert_eq!(
        recording
            .stream("teller")
            .expect("recorded")
            .entries()
            .len(),
        1,
        "what it was given is written"
    );
    assert!(matches!(
        recording.incomplete(),
        [Incomplete::NotClosed { .. }]
    ));
    assert_reported_incomplete(&report(dir.path()), "a dropped recorder");
}
