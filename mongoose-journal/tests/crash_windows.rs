//! The crash windows of a roll, and files that are not segments.

mod common;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;

use common::{append_payloads, open_small, payload, read_all_checked};
use mongoose_journal::{Journal, JournalConfig, JournalError};

/// The offset of index slot `slot` in a segment file (crate docs, "Format": a 4 KiB
/// header page, then 4-byte slots).
fn slot_offset(slot: u64) -> u64 {
    4096 + slot * 4
}

#[test]
fn a_crash_between_the_end_mark_and_the_next_segment_is_repaired_by_the_next_appender() {
    let dir = tempfile::tempdir().expect("dir");
    let journal = open_small(dir.path());
    append_payloads(&journal, 0..1000);
    let last = journal
        .dump()
        .expect("dump")
        .last()
        .expect("entry")
        .expect("ok");
    let segments = journal.segment_numbers().expect("segments");
    assert_eq!(last.segment, *segments.last().expect("a segment"));
    // the appender wrote the end mark after the last excerpt and died before creating
    // the next segment
    let first_of_segment = journal
        .dump()
        .expect("dump")
        .map(|entry| entry.expect("ok"))
        .find(|entry| entry.segment == last.segment)
        .expect("the segment's first excerpt")
        .index;
    let end_slot = last.index + 1 - first_of_segment;
    OpenOptions::new()
        .write(true)
        .open(journal.segment_path(last.segment))
        .expect("segment")
        .write_all_at(&u32::MAX.to_le_bytes(), slot_offset(end_slot))
        .expect("end mark");

    // readers read everything and wait at the end
    let mut tailer = journal.tailer();
    let mut read = 0;
    while let Some(excerpt) = tailer.next().expect("read") {
        assert_eq!(excerpt.bytes(), &payload(read)[..]);
        read += 1;
    }
    assert_eq!(read, 1000);
    assert!(tailer.next().expect("read").is_none());
    assert_eq!(journal.last_index().expect("last"), Some(999));

    // the next appender creates the missing segment and goes on; the waiting reader too
    let mut appender = journal.appender().expect("appender");
    assert_eq!(appender.next_index(), 1000);
    assert_eq!(appender.append(&payload(1000)).expect("append"), 1000);
    assert_eq!(
        journal.segment_numbers().expect("segments").len(),
        segments.len() + 1
    );
    let excerpt = tailer.next().expect("read").expect("the new excerpt");
    assert_eq!(
        (excerpt.index(), excerpt.bytes()),
        (1000, &payload(1000)[..])
    );
    drop(appender);
    assert_eq!(read_all_checked(&journal), 1001);
}

#[test]
fn a_half_created_segment_is_never_read_and_is_removed() {
    let dir = tempfile::tempdir().expect("dir");
    let journal = open_small(dir.path());
    append_payloads(&journal, 0..10);
    // a crash while creating the next segment leaves it under its temporary name
    let temporary = dir.path().join("00000000000000000001.segment.tmp");
    fs::write(&temporary, vec![0xEE; 10_000]).expect("a half-made segment");
    assert_eq!(read_all_checked(&journal), 10);
    assert_eq!(journal.segment_numbers().expect("segments"), vec![0]);
    append_payloads(&journal, 10..20);
    assert!(!temporary.exists(), "the next appender removed it");
    assert_eq!(read_all_checked(&journal), 20);
}

#[test]
fn a_file_that_is_not_a_segment_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().expect("dir");
    let journal = open_small(dir.path());
    append_payloads(&journal, 0..10);
    let path = journal.segment_path(0);
    let mut bytes = fs::read(&path).expect("segment");
    bytes[0..8].copy_from_slice(b"NOTMINE!");
    fs::write(&path, &bytes).expect("overwrite");
    let refused = Journal::open(dir.path(), JournalConfig::default()).expect_err("refused");
    assert!(
        matches!(refused, JournalError::BadSegment { .. }),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("move it out"), "{refused}");
    assert!(journal.tailer().next().is_err(), "a tailer says so too");
    assert!(journal.appender().is_err(), "and so does an appender");
}

/// The first excerpt index of segment `number`, from a dump.
fn first_index_of(journal: &Journal, number: u64) -> u64 {
    journal
        .dump()
        .expect("dump")
        .map(|entry| entry.expect("ok"))
        .find(|entry| entry.segment == number)
        .expect("the segment's first excerpt")
        .index
}

// storage.md gap 8: a power loss after a roll, before the next sync, can leave the new
// last segment with a zero header (none of its excerpts was synced: a sync writes the
// header page too). It was refused ("is not a readable journal segment"); it is a torn
// creation: the appender removes it and makes it again from the previous segment's end.
#[test]
fn a_last_segment_with_a_zero_header_is_a_torn_creation() {
    let dir = tempfile::tempdir().expect("dir");
    let journal = open_small(dir.path());
    append_payloads(&journal, 0..1000);
    let segments = journal.segment_numbers().expect("segments");
    assert!(segments.len() >= 3, "{segments:?}");
    let last = *segments.last().expect("a segment");
    let first = first_index_of(&journal, last);
    let path = journal.segment_path(last);
    OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("segment")
        .write_all_at(&[0u8; 4096], 0)
        .expect("a zero header page");

    let journal = Journal::open(dir.path(), common::small_segments())
        .expect("a zero last header is a torn creation, not refused");
    // a reader reads to the end of the segment before it and waits there
    let mut tailer = journal.tailer();
    let mut read = 0;
    while let Some(excerpt) = tailer.next().expect("a reader waits at a torn creation") {
        assert_eq!(excerpt.bytes(), &payload(read)[..]);
        read += 1;
    }
    assert_eq!(read, first);
    assert_eq!(journal.last_index().expect("last"), first.checked_sub(1));
    let mut appender = journal.appender().expect("the appender");
    assert_eq!(
        appender.next_index(),
        first,
        "the torn segment's unsynced excerpts are gone, nothing before them"
    );
    for index in first..first + 100 {
        assert_eq!(appender.append(&payload(index)).expect("append"), index);
    }
    drop(appender);
    assert_eq!(read_all_checked(&journal), first + 100);
    let excerpt = tailer
        .next()
        .expect("read")
        .expect("the waiting reader goes on");
    assert_eq!(
        (excerpt.index(), excerpt.bytes()),
        (first, &payload(first)[..])
    );
}

// A zero header of a segment that is not the last one is damage: refused.
#[test]
fn a_zero_header_of_a_segment_that_is_not_last_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let journal = open_small(dir.path());
    append_payloads(&journal, 0..1000);
    let segments = journal.segment_numbers().expect("segments");
    let path = journal.segment_path(segments[segments.len() - 2]);
    OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("segment")
        .write_all_at(&[0u8; 4096], 0)
        .expect("a zero header page");
    let mut tailer = journal.tailer();
    let refused = loop {
        match tailer.next() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("read to the end past a zero header"),
            Err(error) => break error,
        }
    };
    assert!(
        matches!(refused, JournalError::BadSegment { .. }),
        "{refused:?}"
    );
    let mut appender = journal.appender().expect("the last segment is whole");
    appender.append(&payload(1000)).expect("append");
    drop(appender);
    assert!(path.exists(), "the damaged segment is left as it is");
    assert_eq!(journal.segment_numbers().expect("segments"), segments);
}
