//! A torn tail (a crash in the middle of an append, or a damaged last excerpt) is never
//! read as data, and the next appender resumes after the last whole excerpt.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use common::{append_payloads, open_small, payload, read_all_checked};
use mongoose_journal::{DumpEntry, Journal};

const EXCERPTS: u64 = 3000;

/// How a test damages the last excerpt.
#[derive(Debug, Clone, Copy)]
enum Damage {
    /// The segment file is cut in the middle of the excerpt's payload.
    TruncateMidExcerpt,
    /// The excerpt's length and checksum are zeroes (the header was never written).
    ZeroedHeader,
    /// Only the checksum is zero (a partial header).
    ZeroedChecksum,
    /// One bit of the payload is flipped.
    FlippedPayloadByte,
}

fn last_entry(journal: &Journal) -> DumpEntry {
    let entries: Vec<DumpEntry> = journal
        .dump()
        .expect("dump")
        .map(|entry| entry.expect("a dump entry"))
        .collect();
    assert_eq!(
        entries.len() as u64,
        EXCERPTS,
        "the dump lists every excerpt"
    );
    assert!(entries.iter().all(|entry| entry.checksum_ok));
    entries.last().cloned().expect("a last excerpt")
}

fn damage(journal: &Journal, entry: &DumpEntry, damage: Damage) {
    let path = journal.segment_path(entry.segment);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("the segment file");
    let payload_at = entry.offset + 8;
    match damage {
        Damage::TruncateMidExcerpt => file
            .set_len(payload_at + u64::from(entry.len) / 2)
            .expect("truncate"),
        Damage::ZeroedHeader => file.write_all_at(&[0; 8], entry.offset).expect("zero"),
        Damage::ZeroedChecksum => file.write_all_at(&[0; 4], entry.offset + 4).expect("zero"),
        Damage::FlippedPayloadByte => {
            let at = payload_at + u64::from(entry.len) / 2;
            let mut byte = [0u8];
            file.read_exact_at(&mut byte, at).expect("read a byte");
            file.write_all_at(&[byte[0] ^ 0x40], at)
                .expect("flip a bit");
        }
    }
}

fn a_damaged_last_excerpt_is_not_read_and_is_replaced(kind: Damage) {
    let dir = tempfile::tempdir().expect("dir");
    let journal = open_small(dir.path());
    append_payloads(&journal, 0..EXCERPTS);
    let last = last_entry(&journal);
    assert!(last.len > 2, "the last excerpt has a payload to damage");
    assert!(last.segment > 0, "the journal rolled");
    damage(&journal, &last, kind);

    // a reader (in any process) stops before the damaged excerpt, however often it asks
    let journal = open_small(dir.path());
    let mut stopped = journal.tailer();
    let mut read = 0;
    while let Some(excerpt) = stopped.next().expect("read") {
        assert_eq!(
            excerpt.bytes(),
            &payload(read)[..],
            "{kind:?}: excerpt {read}"
        );
        read += 1;
    }
    assert_eq!(
        read,
        EXCERPTS - 1,
        "{kind:?}: the reader stops before the damage"
    );
    for _ in 0..3 {
        assert!(
            stopped.next().expect("read").is_none(),
            "{kind:?}: never read"
        );
    }
    assert_eq!(stopped.index(), EXCERPTS - 1);
    let dumped = journal
        .dump()
        .expect("dump")
        .last()
        .expect("an entry")
        .expect("ok");
    assert_eq!(dumped.index, EXCERPTS - 1);
    assert!(
        !dumped.checksum_ok,
        "{kind:?}: the dump flags the damaged excerpt"
    );

    // the next appender cuts the torn tail and resumes at its index
    let mut appender = journal.appender().expect("the appender after damage");
    assert_eq!(appender.next_index(), EXCERPTS - 1, "{kind:?}");
    assert_eq!(
        appender.append(&payload(EXCERPTS - 1)).expect("append"),
        EXCERPTS - 1
    );
    assert_eq!(
        appender.append(&payload(EXCERPTS)).expect("append"),
        EXCERPTS
    );
    drop(appender);

    // the stopped reader goes on with the new excerpts; a fresh one reads them all
    for index in EXCERPTS - 1..=EXCERPTS {
        let excerpt = stopped.next().expect("read").expect("the appended excerpt");
        assert_eq!(excerpt.index(), index);
        assert_eq!(excerpt.bytes(), &payload(index)[..], "{kind:?}");
    }
    assert!(stopped.next().expect("read").is_none());
    assert_eq!(read_all_checked(&journal), EXCERPTS + 1, "{kind:?}");
    assert_eq!(journal.last_index().expect("last index"), Some(EXCERPTS));
}

#[test]
fn a_torn_tail_is_never_read_as_data() {
    for kind in [
        Damage::TruncateMidExcerpt,
        Damage::ZeroedHeader,
        Damage::ZeroedChecksum,
        Damage::FlippedPayloadByte,
    ] {
        a_damaged_last_excerpt_is_not_read_and_is_replaced(kind);
    }
}

/// Issue 25, item 4: only an excerpt at the very end is a torn write. A damaged excerpt
/// with whole ones after it (in its segment, or in a later segment) is refused by a
/// tailer (every time it reaches it, naming the segment and offset); in the last segment
/// (the one an appender walks when it opens) also by the next appender, which changes
/// nothing. The excerpts before it are read.
#[test]
fn a_damaged_excerpt_in_the_middle_is_refused_by_appender_and_tailer() {
    let dir = tempfile::tempdir().expect("dir");
    let journal = open_small(dir.path());
    append_payloads(&journal, 0..EXCERPTS);
    let entries: Vec<DumpEntry> = journal
        .dump()
        .expect("dump")
        .map(|entry| entry.expect("a dump entry"))
        .collect();
    // one in the middle of the last segment, one last in its segment (a later one follows)
    let last_segment: Vec<&DumpEntry> = entries
        .iter()
        .filter(|entry| entry.segment == entries[entries.len() - 1].segment)
        .collect();
    assert!(last_segment.len() > 10, "the last segment has excerpts");
    let middle = last_segment[last_segment.len() / 2].clone();
    let last_of_segment = entries
        .windows(2)
        .find(|pair| pair[0].segment != pair[1].segment && pair[0].len > 2)
        .map(|pair| pair[0].clone())
        .expect("a segment boundary");
    for damaged in [middle, last_of_segment] {
        let dir = tempfile::tempdir().expect("dir");
        let journal = open_small(dir.path());
        append_payloads(&journal, 0..EXCERPTS);
        damage(&journal, &damaged, Damage::FlippedPayloadByte);
        let path = journal.segment_path(damaged.segment);
        let before = std::fs::read(&path).expect("segment");

        let mut tailer = journal.tailer();
        let mut read = 0;
        let error = loop {
            match tailer.next() {
                Ok(Some(excerpt)) => {
                    assert_eq!(excerpt.bytes(), &payload(read)[..]);
                    read += 1;
                }
                Ok(None) => panic!("the tailer waits at {read} as if it were a torn tail"),
                Err(error) => break error,
            }
        };
        assert_eq!(
            read, damaged.index,
            "the excerpts before the damage are read"
        );
        let said = error.to_string();
        assert!(
            said.contains(&path.display().to_string())
                && said.contains(&format!("offset {}", damaged.offset)),
            "the error names the segment and the offset: {said}"
        );
        assert!(tailer.next().is_err(), "and again at the next read");
        assert_eq!(tailer.index(), damaged.index, "the tailer stays before it");

        let last_segment = damaged.segment == entries[entries.len() - 1].segment;
        if last_segment {
            let refused = journal.appender().expect_err("the appender refuses");
            assert!(
                refused
                    .to_string()
                    .contains(&format!("offset {}", damaged.offset)),
                "{refused}"
            );
        } else {
            // an appender does not read the segments before the last: it cuts nothing
            drop(journal.appender().expect("an appender at the end"));
        }
        assert_eq!(
            std::fs::read(&path).expect("segment"),
            before,
            "the appender changed nothing"
        );
        assert_eq!(
            journal.last_index().expect("last index"),
            Some(EXCERPTS - 1),
            "nothing was cut"
        );
    }
}
