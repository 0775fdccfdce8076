//! The pointer file, epochs and the input file's identity (book: guarantees/epochs-and-identity.md).

mod common;

use std::fs;
use std::time::{Duration, SystemTime};

use common::*;
use mongoose_core::{EventSource, SourceState};
use mongoose_delivery::SourceDriver;
use mongoose_source_file::ReadStrategy;

// book: guarantees/epochs-and-identity.md
#[test]
fn the_pointer_counts_bytes_so_a_restart_after_non_ascii_lines_resumes_at_a_line_start() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, "héllo\nwörld ✓\nçava\n".as_bytes());
    run_and_process(&path, 3, 2);
    let processed_bytes = "héllo\nwörld ✓\n".len() as u64;
    assert_eq!(pointer_of(&path).offset, processed_bytes);

    let (output, _source) = caught_up_source(&path);
    assert_eq!(output.items(), strings(&["çava"]));
}

// book: guarantees/epochs-and-identity.md (thePointerIsTheByteOffsetEvenForBytesThatAreNotUtf8)
#[test]
fn the_pointer_is_the_byte_offset_even_for_bytes_that_are_not_utf8() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"caf\xe9\nna\xefve\nend\n");
    let (output, mut source) = committed_source(&path);
    drive_until(&mut source, &output, || output.items().len() == 3);
    // the bytes as they were on disk (issue 11, item 3), the old lossy text on request
    assert_eq!(output.items()[0].as_bytes(), b"caf\xe9");
    assert!(output.items()[0].to_str().is_err());
    assert_eq!(output.items()[0].text(), "caf\u{fffd}");
    assert_eq!(output.items()[1].as_bytes(), b"na\xefve");
    assert_eq!(output.items()[0].path(), path.as_path());
    assert_eq!(output.positions(), vec![5, 11, 15]);
    output.process(2);
    SourceDriver::stop_source(&mut source, &output).expect("stop");
    assert_eq!(pointer_of(&path).offset, 11);

    let (output, _source) = caught_up_source(&path);
    assert_eq!(output.items(), strings(&["end"]));
}

// book: guarantees/epochs-and-identity.md
#[test]
fn a_commit_after_a_replacement_never_fingerprints_the_new_file() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"a1\na2\n");
    let (output, mut source) = committed_source(&path);
    drive_until(&mut source, &output, || output.items().len() == 2);
    // the old file grows (so a commit grows its fingerprint), then is replaced before
    // the source notices
    append(&path, b"a3\n");
    replace_with(&path, b"b1\nb2\nb3\nb4\n");
    output.process(2);
    output.poll_acknowledgements_for_test();
    SourceDriver::stop_source(&mut source, &output).expect("stop");
    assert_eq!(pointer_of(&path).offset, 6);

    let (restarted, _source) = caught_up_source(&path);
    assert_eq!(restarted.items(), strings(&["b1", "b2", "b3", "b4"]));
    assert_ne!(pointer_of(&path).epoch, 0);
}

// book: guarantees/epochs-and-identity.md:
// the old file's acknowledgements never reach the new file's pointer. Since issue 11
// (a rotation just before a kill) the source waits at the old file's end until its
// lines are committed into the old file's pointer, and only then resets the pointer to
// the new file: the old offsets cannot be committed into it.
#[test]
fn an_old_file_acknowledgement_is_not_committed_after_a_live_replacement() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"a1\na2\na3\n");
    let (output, mut source) = committed_source(&path);
    drive_until(&mut source, &output, || output.items().len() == 3);
    let old_epoch = source.epoch();
    replace_with(&path, b"b1\n");
    drive(&mut source, &output, 20);
    assert_eq!(
        output.items().len(),
        3,
        "the new file waits for the old one's commit"
    );
    assert_eq!(pointer_of(&path).epoch, old_epoch.get());
    output.process(3);
    drive_until(&mut source, &output, || output.items().len() == 4);
    assert_ne!(
        source.epoch(),
        old_epoch,
        "a replacement starts a new epoch"
    );
    let pointer = pointer_of(&path);
    assert_eq!(
        pointer.offset, 0,
        "an old-file offset in the new file's pointer"
    );
    assert_eq!(pointer.epoch, source.epoch().get());
    output.process(4);
    drive(&mut source, &output, 2);
    assert_eq!(pointer_of(&path).offset, 3);
}

// book: guarantees/epochs-and-identity.md
#[test]
fn a_rotated_file_is_read_to_its_end_before_the_new_one() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"1\n2\n");
    let (output, mut source) = caught_up_source(&path);
    // the writer appends to the old file, then rotates it, between two duty cycles
    append(&path, b"3\n");
    fs::rename(&path, dir.path().join("input.log.1")).expect("rotate");
    fs::write(&path, b"4\n").expect("new file");
    drive_until(&mut source, &output, || {
        output.process_all();
        output.items().len() == 4
    });
    assert_eq!(output.items(), strings(&["1", "2", "3", "4"]));
    drive_until_state(&mut source, &output, SourceState::CaughtUp);
    assert!(output
        .states()
        .iter()
        .any(|(state, detail)| *state == SourceState::Behind
            && detail.as_deref().is_some_and(|d| d.contains("replaced"))));
}

// book: guarantees/epochs-and-identity.md
#[test]
fn a_partial_line_is_read_once_across_a_reopen() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"a\nb\npart");
    let (output, mut source) = caught_up_source(&path);
    assert_eq!(output.items(), strings(&["a", "b"]));
    let epoch = source.epoch();
    // a writer that appends by writing a copy and renaming it into place: a new file
    // key, the same leading bytes, so the source reopens and keeps its epoch
    replace_with(&path, b"a\nb\npartial\nc\n");
    // the old file's lines are processed and committed before the reopen
    drive_until(&mut source, &output, || {
        output.process_all();
        output.items().len() >= 4
    });
    drive_until_state(&mut source, &output, SourceState::CaughtUp);
    assert_eq!(output.items(), strings(&["a", "b", "partial", "c"]));
    assert_eq!(source.epoch(), epoch);
    assert_eq!(source.status().reopens, 1);
}

// book: guarantees/epochs-and-identity.md
#[test]
fn a_pointer_file_too_short_for_an_offset_reads_from_the_start() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"x\ny\n");
    fs::write(pointer_path(&path), [0u8, 0, 0, 0, 9]).expect("short pointer");
    let (output, mut source) = caught_up_source(&path);
    assert_eq!(output.items(), strings(&["x", "y"]));
    assert_eq!(
        pointer_len(&path),
        FULL_POINTER,
        "the pointer file is extended"
    );
    output.process_all();
    drive(&mut source, &output, 1);
    assert_eq!(pointer_of(&path).offset, 4);
}

// book: guarantees/epochs-and-identity.md
#[test]
fn an_empty_pointer_file_reads_from_the_start() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"x\ny\n");
    fs::write(pointer_path(&path), []).expect("empty pointer");
    let (output, _source) = caught_up_source(&path);
    assert_eq!(output.items(), strings(&["x", "y"]));
    assert_eq!(
        pointer_len(&path),
        FULL_POINTER,
        "the pointer file is extended"
    );
    assert_ne!(pointer_of(&path).epoch, 0, "it gets an epoch");
}

// book: guarantees/epochs-and-identity.md: a pointer file holding only the
// offset keeps it and is upgraded
#[test]
fn a_pointer_file_holding_only_the_offset_is_upgraded() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"x\ny\nz\n");
    fs::write(pointer_path(&path), 4u64.to_be_bytes()).expect("8-byte pointer");
    let (output, _source) = caught_up_source(&path);
    assert_eq!(output.items(), strings(&["z"]));
    assert_eq!(pointer_len(&path), FULL_POINTER);
    assert_eq!(pointer_of(&path).offset, 4);
    assert_ne!(pointer_of(&path).epoch, 0);
}

// book: guarantees/epochs-and-identity.md: a pointer without an epoch inside a
// line resumes after that line's terminator (between \r and \n included)
#[test]
fn a_pointer_without_an_epoch_inside_a_line_resumes_at_the_next_line_start() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"first\r\nsecond\nthird\n");
    // offset 6 sits between the \r and the \n of the first line's terminator
    fs::write(pointer_path(&path), 6u64.to_be_bytes()).expect("8-byte pointer");
    let (output, _source) = caught_up_source(&path);
    assert_eq!(output.items(), strings(&["second", "third"]));
    assert_eq!(
        pointer_of(&path).offset,
        7,
        "the aligned offset is committed at once"
    );

    let path = dir.path().join("other.log");
    fs::write(&path, b"abc\ndef\n").expect("write");
    fs::write(pointer_path(&path), 2u64.to_be_bytes()).expect("8-byte pointer");
    let (output, _source) = caught_up_source(&path);
    assert_eq!(output.items(), strings(&["def"]));
}

// book: guarantees/epochs-and-identity.md
#[test]
fn an_acknowledgement_of_the_old_file_is_not_committed_after_a_reset() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"a1\na2\na3\n");
    let (output, mut source) = committed_source(&path);
    drive_until(&mut source, &output, || output.items().len() == 3);
    SourceDriver::stop_source(&mut source, &output).expect("stop");
    replace_with(&path, b"b1\n");
    // a restart on the same feed: the old items are still in its window
    let mut source = started_source(&path, ReadStrategy::Committed, &output);
    drive_until(&mut source, &output, || output.items().len() == 4);
    output.process(3);
    drive(&mut source, &output, 2);
    assert_eq!(pointer_of(&path).offset, 0);
    assert_eq!(pointer_of(&path).epoch, source.epoch().get());
    output.process(4);
    drive(&mut source, &output, 2);
    assert_eq!(pointer_of(&path).offset, 3);
}

// book: guarantees/epochs-and-identity.md:
// the acknowledgement reaches the committer before the reset and the commit after it.
// Since issue 11 the reopen waits for that commit, which lands in the old file's
// pointer; the new file's pointer starts at 0.
#[test]
fn an_acknowledgement_of_the_old_file_is_not_committed_after_a_mid_run_reopen() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"a1\na2\n");
    let (output, mut source) = committed_source(&path);
    drive_until(&mut source, &output, || output.items().len() == 2);
    let old_epoch = source.epoch();
    replace_with(&path, b"b1\nb2\nb3\n");
    output.hold_commits(true);
    output.process(2);
    output.poll_acknowledgements_for_test(); // acknowledged, of the current epoch, not committed
    drive(&mut source, &output, 20);
    assert_eq!(
        source.epoch(),
        old_epoch,
        "no reopen before the old file's commit"
    );
    output.commit_now();
    assert_eq!(
        pointer_of(&path).offset,
        6,
        "committed into the old file's pointer"
    );
    assert_eq!(pointer_of(&path).epoch, old_epoch.get());
    output.hold_commits(false);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while source.epoch() == old_epoch {
        assert!(std::time::Instant::now() < deadline, "no reopen");
        SourceDriver::cycle(&mut source, &output).expect("duty cycle");
    }
    assert_eq!(
        pointer_of(&path).offset,
        0,
        "the old file's offset was committed"
    );
    assert_eq!(pointer_of(&path).epoch, source.epoch().get());
}

// book: guarantees/epochs-and-identity.md
#[test]
fn a_header_only_first_open_then_an_in_place_rewrite_with_the_same_header_is_a_replacement() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"HEADER\n");
    let (output, mut source) = caught_up_source(&path);
    append(&path, b"l1\nl2\n");
    drive_until(&mut source, &output, || output.items().len() == 3);
    output.process_all();
    SourceDriver::stop_source(&mut source, &output).expect("stop");
    let first_epoch = pointer_of(&path).epoch;
    assert_eq!(pointer_of(&path).offset, 13);
    // rewritten in place: the same file key, the same header, other lines
    fs::write(&path, b"HEADER\nx1\nx2\nx3\n").expect("rewrite in place");

    let (restarted, source) = caught_up_source(&path);
    assert_eq!(restarted.items(), strings(&["HEADER", "x1", "x2", "x3"]));
    assert_ne!(source.epoch().get(), first_epoch);
}

// book: guarantees/epochs-and-identity.md
#[test]
fn the_same_content_under_a_new_file_key_keeps_the_pointer() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"a\nb\n");
    let epoch = run_and_process(&path, 2, 2);
    replace_with(&path, b"a\nb\nc\n");
    let (output, source) = caught_up_source(&path);
    assert_eq!(output.items(), strings(&["c"]));
    assert_eq!(source.epoch(), epoch);
}

// book: guarantees/epochs-and-identity.md
#[test]
fn a_new_file_with_other_content_at_the_same_path_is_a_replacement() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"a\nb\n");
    let epoch = run_and_process(&path, 2, 2);
    replace_with(&path, b"x\ny\nz\n");
    let (output, source) = caught_up_source(&path);
    assert_eq!(output.items(), strings(&["x", "y", "z"]));
    assert_ne!(source.epoch(), epoch);
    assert_eq!(source.status().resets, 1);
}

// book: guarantees/epochs-and-identity.md (a truncated input, shorter than the pointer, resets it
// to 0 under a new epoch even when its fingerprinted first 4 KB are unchanged)
#[test]
fn a_file_truncated_below_the_pointer_is_read_from_the_start_under_a_new_epoch() {
    let dir = tempfile::tempdir().expect("dir");
    let line = format!("{}\n", "l".repeat(99));
    let path = input(&dir, line.repeat(50).as_bytes());
    let epoch = run_and_process(&path, 50, 50);
    assert_eq!(pointer_of(&path).offset, 5000);
    let file = fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open");
    file.set_len(4500).expect("truncate in place");
    drop(file);
    let (output, source) = caught_up_source(&path);
    assert_eq!(output.items().len(), 45);
    assert_ne!(source.epoch(), epoch);
}

// book: guarantees/epochs-and-identity.md: truncated while tailed, read under a new epoch
#[test]
fn a_file_truncated_while_tailed_is_read_again_under_a_new_epoch() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"aaaa\nbbbb\n");
    let (output, mut source) = caught_up_source(&path);
    let epoch = source.epoch();
    fs::write(&path, b"cc\n").expect("truncate in place");
    drive_until(&mut source, &output, || output.items().len() == 3);
    assert_eq!(output.items()[2], "cc");
    assert_ne!(source.epoch(), epoch);
}

// book: guarantees/epochs-and-identity.md
#[test]
fn committed_resumes_and_is_caught_up_at_its_pointer() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"one\ntwo\n");
    run_and_process(&path, 2, 2);
    let (output, mut source) = caught_up_source(&path);
    assert!(
        output.items().is_empty(),
        "re-delivered {:?}",
        output.items()
    );
    assert_eq!(source.status().read_position, 8);
    append(&path, b"three\n");
    drive_until(&mut source, &output, || output.items().len() == 1);
    assert_eq!(output.items(), strings(&["three"]));
    assert_eq!(output.positions(), vec![14]);
}

// book: guarantees/epochs-and-identity.md
#[test]
fn an_append_that_moves_the_file_times_keeps_the_pointer_and_epoch() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"a\n");
    let epoch = run_and_process(&path, 1, 1);
    append(&path, b"b\n");
    let file = fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open");
    let later = SystemTime::now() + Duration::from_secs(3600);
    file.set_times(fs::FileTimes::new().set_modified(later).set_accessed(later))
        .expect("set times");
    drop(file);
    let (output, source) = caught_up_source(&path);
    assert_eq!(output.items(), strings(&["b"]));
    assert_eq!(source.epoch(), epoch);
    assert_eq!(pointer_of(&path).epoch, epoch.get());
}

// book: guarantees/where-a-feed-resumes.md (invariant 9): the epoch is the
// input file's identity, never a counter a lost pointer bumps, so a re-read after a
// lost pointer gives every line the `(epoch, position)` of its first read, and its
// outputs the same keys. Before: a new epoch, and every output under a second key.
#[test]
fn deleting_the_pointer_reads_the_input_again_under_the_same_epoch() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"a\nb\n");
    let epoch = run_and_process(&path, 2, 2);
    fs::remove_file(pointer_path(&path)).expect("delete pointer");
    let (output, source) = caught_up_source(&path);
    assert_eq!(output.items(), strings(&["a", "b"]));
    assert_eq!(source.epoch(), epoch);
    // another file at the path (another identity) is another epoch
    fs::remove_file(&path).expect("deleted");
    fs::remove_file(pointer_path(&path)).expect("delete pointer");
    fs::write(&path, b"c\n").expect("a new file");
    let (output, source) = caught_up_source(&path);
    assert_eq!(output.items(), strings(&["c"]));
    assert_ne!(source.epoch(), epoch);
}

// book: guarantees/epochs-and-identity.md (COMMITED):
// the file is rotated between the open and the read of the opened file's identity
#[test]
fn a_rotation_during_the_open_of_a_committed_source_still_reaches_the_new_file() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"a1\na2\n");
    let first_epoch = run_and_process(&path, 2, 2);
    append(&path, b"a3\n");
    let output = RecordingOutput::new();
    let mut source = unstarted_source(&path, ReadStrategy::Committed, &output);
    let rotate_path = path.clone();
    let rotated = dir.path().join("input.log.1");
    let mut fired = false;
    source.set_open_hook(move || {
        if !fired {
            fired = true;
            fs::rename(&rotate_path, &rotated).expect("rotate");
            fs::write(&rotate_path, b"b1\nb2\n").expect("new file");
        }
    });
    SourceDriver::start_source(&mut source, &output).expect("start");
    drive_until(&mut source, &output, || {
        output.process_all();
        output.items().len() == 3
    });
    drive_until_state(&mut source, &output, SourceState::CaughtUp);
    assert_eq!(output.items(), strings(&["a3", "b1", "b2"]));
    let entries = output.entries();
    assert_eq!(
        entries[0].epoch, first_epoch,
        "the old file keeps its epoch"
    );
    assert_ne!(
        entries[1].epoch, first_epoch,
        "the new file is a replacement"
    );
}

// book: guarantees/epochs-and-identity.md (EARLIEST)
#[test]
fn a_rotation_during_the_open_of_an_earliest_source_still_reaches_the_new_file() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"a1\na2\n");
    let output = RecordingOutput::new();
    let mut source = unstarted_source(&path, ReadStrategy::Earliest, &output);
    let rotate_path = path.clone();
    let rotated = dir.path().join("input.log.1");
    let mut fired = false;
    source.set_open_hook(move || {
        if !fired {
            fired = true;
            fs::rename(&rotate_path, &rotated).expect("rotate");
            fs::write(&rotate_path, b"b1\n").expect("new file");
        }
    });
    SourceDriver::start_source(&mut source, &output).expect("start");
    drive_until(&mut source, &output, || output.items().len() == 3);
    assert_eq!(output.items(), strings(&["a1", "a2", "b1"]));
    assert!(!output.has_committer(), "EARLIEST has no pointer");
    assert!(!pointer_path(&path).exists());
}

// issue 12, item 4: the source driver is the one place that polls the acknowledgements;
// the file source's own cycles and stop commit nothing, the driver's cycle and stop do
#[test]
fn a_file_source_commits_only_through_the_driver() {
    let dir = tempfile::tempdir().expect("dir");
    let path = input(&dir, b"a\nb\nc\nd\n");
    let (output, mut source) = committed_source(&path);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while output.items().len() < 4 {
        assert!(std::time::Instant::now() < deadline, "never read");
        source.do_work().expect("a cycle");
    }
    output.process(2);
    for _ in 0..5 {
        source.do_work().expect("a cycle");
    }
    assert_eq!(pointer_of(&path).offset, 0, "do_work alone commits nothing");
    SourceDriver::cycle(&mut source, &output).expect("a driver cycle");
    assert_eq!(pointer_of(&path).offset, 4, "the driver's cycle commits");
    output.process(3);
    source.stop().expect("stop");
    assert_eq!(pointer_of(&path).offset, 4, "stop alone commits nothing");
    // a late commit re-maps the pointer: the driver's stop still commits
    SourceDriver::stop_source(&mut source, &output).expect("stop");
    assert_eq!(pointer_of(&path).offset, 6, "the driver's stop commits");
}
