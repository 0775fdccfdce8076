//! Seeking by index across many segments, and rolling by size and by time.

mod common;

use std::fs;
use std::thread;
use std::time::Duration;

use common::{append_payloads, open_small, payload, read_all_checked};
use mongoose_journal::{Journal, JournalConfig};

#[test]
fn seek_by_index_across_segments() {
    let dir = tempfile::tempdir().expect("dir");
    let journal = open_small(dir.path());
    let total = 20_000;
    append_payloads(&journal, 0..total);
    let segments = journal.segment_numbers().expect("segments");
    assert!(
        segments.len() > 20,
        "many rolls: {} segments",
        segments.len()
    );

    let mut tailer = journal.tailer();
    // a small deterministic pseudo-random walk over the indexes, both directions
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..5_000 {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let index = (state >> 33) % total;
        assert!(tailer.seek(index).expect("seek"), "{index} exists");
        assert_eq!(tailer.index(), index);
        let excerpt = tailer.next().expect("read").expect("the excerpt sought");
        assert_eq!(excerpt.index(), index);
        assert_eq!(excerpt.bytes(), &payload(index)[..], "excerpt {index}");
        // and it reads on from there, across a segment boundary if there is one
        let after = tailer.next().expect("read");
        if index + 1 < total {
            let after = after.expect("the next excerpt");
            assert_eq!(after.index(), index + 1);
            assert_eq!(after.bytes(), &payload(index + 1)[..]);
        } else {
            assert!(after.is_none());
        }
    }
    // the first excerpt of every segment, and the last one of the one before it
    for window in 0..total {
        if window % 997 == 0 {
            assert!(tailer.seek(window).expect("seek"));
            assert_eq!(
                tailer.next().expect("read").expect("excerpt").index(),
                window
            );
        }
    }

    // the end: `total` is the next index, beyond it is refused and leaves the tailer at
    // the end
    assert!(
        tailer.seek(total).expect("seek"),
        "the next index to append"
    );
    assert!(tailer.next().expect("read").is_none());
    assert!(!tailer.seek(total + 10).expect("seek"), "beyond the end");
    assert_eq!(tailer.index(), total, "left at the end");
    append_payloads(&journal, total..total + 5);
    for index in total..total + 5 {
        let excerpt = tailer
            .next()
            .expect("read")
            .expect("appended after the seek");
        assert_eq!(excerpt.index(), index);
        assert_eq!(excerpt.bytes(), &payload(index)[..]);
    }
    // and back to the start
    assert!(tailer.seek(0).expect("seek"));
    assert_eq!(
        tailer.next().expect("read").expect("first").bytes(),
        &payload(0)[..]
    );
}

#[test]
fn rolls_by_size_and_time() {
    // by size: every segment file has the configured size and holds whole excerpts
    let dir = tempfile::tempdir().expect("dir");
    let journal = open_small(dir.path());
    let big = vec![7u8; 1000];
    {
        let mut appender = journal.appender().expect("appender");
        for index in 0..300u64 {
            assert_eq!(appender.append(&big).expect("append"), index);
        }
    }
    let segments = journal.segment_numbers().expect("segments");
    // 300 KB of 1000-byte excerpts into 64 KiB segments (less their header and index)
    assert!(segments.len() >= 5, "{} segments", segments.len());
    assert_eq!(segments, (0..segments.len() as u64).collect::<Vec<_>>());
    for number in &segments {
        let size = fs::metadata(journal.segment_path(*number))
            .expect("segment")
            .len();
        assert_eq!(size, 64 * 1024, "segment {number} has the configured size");
    }
    let mut tailer = journal.tailer();
    let mut read = 0;
    while let Some(excerpt) = tailer.next().expect("read") {
        assert_eq!(excerpt.bytes(), &big[..]);
        read += 1;
    }
    assert_eq!(read, 300);
    // an excerpt that cannot fit in any segment is refused, and nothing is appended
    let mut appender = journal.appender().expect("appender");
    let error = appender
        .append(&vec![0u8; 64 * 1024])
        .expect_err("too large");
    assert!(error.to_string().contains("segment_bytes"), "{error}");
    assert_eq!(appender.next_index(), 300);
    drop(appender);

    // by time: a segment older than the interval is rolled at the next append, also
    // after a reopen; an empty segment is never rolled
    let dir = tempfile::tempdir().expect("dir");
    let config = JournalConfig {
        roll_interval: Some(Duration::from_millis(300)),
        ..JournalConfig::default()
    };
    let journal = Journal::open(dir.path(), config.clone()).expect("journal");
    let mut appender = journal.appender().expect("appender");
    assert_eq!(appender.append(&payload(0)).expect("append"), 0);
    assert_eq!(appender.append(&payload(1)).expect("append"), 1);
    assert_eq!(journal.segment_numbers().expect("segments"), vec![0]);
    thread::sleep(Duration::from_millis(400));
    assert_eq!(appender.append(&payload(2)).expect("append"), 2);
    assert_eq!(journal.segment_numbers().expect("segments"), vec![0, 1]);
    drop(appender);
    thread::sleep(Duration::from_millis(400));
    let journal = Journal::open(dir.path(), config).expect("reopened");
    let mut appender = journal.appender().expect("appender");
    assert_eq!(journal.segment_numbers().expect("segments"), vec![0, 1]);
    assert_eq!(appender.append(&payload(3)).expect("append"), 3);
    assert_eq!(journal.segment_numbers().expect("segments"), vec![0, 1, 2]);
    drop(appender);
    assert_eq!(read_all_checked(&journal), 4);
}

#[test]
fn a_peeked_excerpt_is_given_again_until_it_is_taken() {
    // a source that cannot hand an excerpt on (PAUSE) keeps its place with `peek`
    let dir = tempfile::tempdir().expect("dir");
    let journal = open_small(dir.path());
    append_payloads(&journal, 0..3);
    let mut tailer = journal.tailer();
    for _ in 0..3 {
        let peeked = tailer.peek().expect("peek").expect("excerpt 0");
        assert_eq!((peeked.index(), peeked.bytes()), (0, &payload(0)[..]));
        assert_eq!(tailer.index(), 0, "a peek does not move the tailer");
    }
    assert_eq!(tailer.next().expect("read").expect("excerpt 0").index(), 0);
    assert_eq!(tailer.peek().expect("peek").expect("excerpt 1").index(), 1);
    assert!(tailer.seek(2).expect("seek"));
    assert_eq!(tailer.peek().expect("peek").expect("excerpt 2").index(), 2);
    assert_eq!(tailer.next().expect("read").expect("excerpt 2").index(), 2);
    assert!(tailer.peek().expect("peek").is_none());
    append_payloads(&journal, 3..4);
    assert_eq!(
        tailer.peek().expect("peek").expect("excerpt 3").bytes(),
        &payload(3)[..]
    );
}

#[test]
fn the_journal_types_move_to_other_threads() {
    fn send<T: Send>() {}
    send::<Journal>();
    send::<mongoose_journal::Appender>();
    send::<mongoose_journal::Tailer>();
    send::<mongoose_journal::TailerStore>();
}

#[test]
fn a_batch_read_gives_what_next_gives_across_segments_and_appends() {
    let dir = tempfile::tempdir().expect("dir");
    let journal = open_small(&dir.path().join("journal"));
    append_payloads(&journal, 0..500);
    let mut tailer = journal.tailer();
    let mut batch = mongoose_journal::ExcerptBatch::default();
    let mut seen = Vec::new();
    let mut appended = 500;
    loop {
        tailer.next_batch(64, &mut batch).expect("a batch");
        if batch.is_empty() {
            if appended == 1_000 {
                break;
            }
            // the appender goes on meanwhile: the tailer's mapping grows or moves on
            append_payloads(&journal, appended..appended + 250);
            appended += 250;
            continue;
        }
        // a batch's excerpts stay readable while the tailer reads on (they hold their
        // own mapping): read the next batch before checking this one
        let held: Vec<(u64, Vec<u8>)> = batch
            .iter()
            .map(|excerpt| (excerpt.index(), excerpt.bytes().to_vec()))
            .collect();
        for (index, bytes) in held {
            assert_eq!(bytes, payload(index), "excerpt {index}");
            seen.push(index);
        }
    }
    assert_eq!(
        seen,
        (0..1_000).collect::<Vec<_>>(),
        "each excerpt once, in order"
    );

    // giving back what was not taken: seek to the first excerpt not handed on
    tailer.seek(900).expect("seek");
    tailer.next_batch(10, &mut batch).expect("a batch");
    assert_eq!(batch.first_index(), Some(900));
    assert_eq!(batch.len(), 10);
    tailer.seek(905).expect("give five back");
    let next = tailer.next().expect("readable").expect("an excerpt");
    assert_eq!(next.index(), 905);
}
