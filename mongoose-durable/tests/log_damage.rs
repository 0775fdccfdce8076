//! A log's damage on real files: a changed byte in the middle is refused with the file
//! and the offset, a torn tail is cut and reported (issue 38.2).

use std::path::{Path, PathBuf};

use mongoose_durable::header::Header;
use mongoose_durable::log::{RecordLog, TornTail};
use mongoose_durable::DurableError;

fn header() -> Header {
    Header::new("damage-test-log", 1, b"owner".to_vec())
}

/// A log of `records`, synced; returns its path and where each record's frame starts
/// (and, last, where the log ends).
fn write_log(folder: &Path, records: &[&[u8]]) -> (PathBuf, Vec<u64>) {
    let path = folder.join("events.log");
    let (mut log, _) = RecordLog::open_or_create(&path, &header()).expect("create");
    let mut offsets = vec![std::fs::metadata(&path).expect("meta").len()];
    for record in records {
        log.append(record).expect("append");
        offsets.push(offsets.last().unwrap() + 8 + record.len() as u64);
    }
    log.sync().expect("sync");
    assert_eq!(
        std::fs::metadata(&path).expect("meta").len(),
        *offsets.last().unwrap()
    );
    (path, offsets)
}

const RECORDS: [&[u8]; 5] = [
    b"alpha",
    b"bravo-bravo",
    b"charlie",
    b"delta",
    b"echo-echo-echo",
];

#[test]
fn a_damaged_record_in_the_middle_of_a_log_is_refused_not_skipped() {
    let folder = tempfile::tempdir().expect("folder");
    let (path, offsets) = write_log(folder.path(), &RECORDS);
    let clean = std::fs::read(&path).expect("read");
    // a byte of the second record's payload, of its checksum, of its length
    for (what, at) in [
        ("payload", offsets[1] + 8 + 3),
        ("checksum", offsets[1] + 5),
        ("length", offsets[1]),
        ("length, high byte", offsets[1] + 3),
    ] {
        let mut damaged = clean.clone();
        damaged[at as usize] ^= 0x5a;
        std::fs::write(&path, &damaged).expect("damage");
        match RecordLog::open_or_create(&path, &header()) {
            Err(DurableError::DamagedRecord {
                path: named,
                offset,
                ..
            }) => {
                assert_eq!(named, path, "{what}");
                assert_eq!(offset, offsets[1], "{what}: the damaged record's offset");
                let message = DurableError::DamagedRecord {
                    path: named,
                    offset,
                    reason: "x",
                }
                .to_string();
                assert!(
                    message.contains("events.log") && message.contains(&offsets[1].to_string()),
                    "{message}"
                );
            }
            Ok((_, recovery)) => panic!(
                "{what}: damage at byte {at} opened as {} records, torn tail {:?}: skipped or cut",
                recovery.records.len(),
                recovery.torn_tail
            ),
            Err(other) => panic!("{what}: {other}"),
        }
        assert_eq!(
            std::fs::read(&path).expect("read"),
            damaged,
            "{what}: a refused log is left as it is"
        );
    }
}

#[test]
fn a_torn_tail_is_cut_and_reported() {
    let folder = tempfile::tempdir().expect("folder");
    let (path, offsets) = write_log(folder.path(), &RECORDS);
    let clean = std::fs::read(&path).expect("read");
    let last = offsets[RECORDS.len() - 1];
    let end = offsets[RECORDS.len()];
    // the file truncated inside the last record, at every length
    for kept in last + 1..end {
        std::fs::write(&path, &clean[..kept as usize]).expect("truncate");
        let (_, recovery) = RecordLog::open_or_create(&path, &header()).expect("open");
        assert_eq!(
            recovery.records.len(),
            RECORDS.len() - 1,
            "truncated at {kept}"
        );
        assert_eq!(
            recovery.torn_tail,
            Some(TornTail {
                offset: last,
                bytes_cut: kept - last
            }),
            "truncated at {kept}"
        );
        assert_eq!(
            std::fs::metadata(&path).expect("meta").len(),
            last,
            "the tail is cut from the file"
        );
    }
    // a changed byte in the last record: cut too (it is the last)
    let mut damaged = clean.clone();
    damaged[(last + 9) as usize] ^= 0xff;
    std::fs::write(&path, &damaged).expect("damage");
    let (mut log, recovery) = RecordLog::open_or_create(&path, &header()).expect("open");
    assert_eq!(
        recovery.torn_tail,
        Some(TornTail {
            offset: last,
            bytes_cut: end - last
        })
    );
    assert_eq!(recovery.records.len(), RECORDS.len() - 1);
    // the log goes on after the cut
    log.append(b"foxtrot").expect("append");
    log.sync().expect("sync");
    drop(log);
    let (_, recovery) = RecordLog::open_or_create(&path, &header()).expect("reopen");
    assert_eq!(recovery.torn_tail, None);
    assert_eq!(
        recovery.records.last().map(Vec::as_slice),
        Some(&b"foxtrot"[..])
    );
    assert_eq!(recovery.records.len(), RECORDS.len());
}

/// A log written whole by `encode` (a rewrite through the atomic replace) reads back as
/// its records and is appended to as any log.
#[test]
fn an_encoded_log_reads_back_as_its_records() {
    let folder = tempfile::tempdir().expect("dir");
    let path = folder.path().join("encoded.log");
    let records: [&[u8]; 3] = [b"one", b"", b"three"];
    let bytes = mongoose_durable::log::encode(&header(), records).expect("encoded");
    mongoose_durable::replace::replace(&path, &bytes).expect("written");
    let recovery = mongoose_durable::log::read(&path, &header()).expect("read");
    assert_eq!(
        recovery.records,
        vec![b"one".to_vec(), Vec::new(), b"three".to_vec()]
    );
    assert_eq!(recovery.torn_tail, None);
    let (mut log, _) = RecordLog::open_or_create(&path, &header()).expect("opened");
    log.append(b"four").expect("appended");
    log.sync().expect("synced");
    assert_eq!(
        mongoose_durable::log::read(&path, &header())
            .expect("read")
            .records
            .len(),
        4
    );
}

#[test]
fn a_rewritten_log_is_appended_to_after_its_records_and_a_failed_append_cut_back() {
    let folder = tempfile::tempdir().expect("folder");
    let path = folder.path().join("events.log");
    for synced in [true, false] {
        let mut log = RecordLog::rewrite(&path, &header(), RECORDS[..2].iter().copied(), synced)
            .expect("rewrite");
        assert_eq!(log.len(), std::fs::metadata(&path).expect("meta").len());
        assert!(!log.is_empty());
        // part of a frame an append left behind when the disk filled
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut file| std::io::Write::write_all(&mut file, &[7, 0, 0, 0, 1, 2]))
            .expect("a part of a frame");
        log.cut_back().expect("cut back");
        log.append(RECORDS[2]).expect("append");
        log.sync().expect("sync");
        drop(log);
        let (_, recovery) = RecordLog::open_or_create(&path, &header()).expect("reopen");
        assert_eq!(recovery.torn_tail, None, "synced {synced}");
        assert_eq!(
            recovery.records,
            RECORDS[..3].iter().map(|r| r.to_vec()).collect::<Vec<_>>()
        );
    }
    assert!(!mongoose_durable::replace::temporary_path(&path).exists());
}

/// A writer that frames many records into its own buffer and writes them at once (the
/// outbox's group commit) writes the same bytes as [`RecordLog::append`], and a reader
/// that borrows them sees each payload, a cut-short frame and a bad one told apart.
#[test]
fn frames_built_in_a_callers_buffer_are_the_logs_frames_and_read_back_borrowed() {
    use mongoose_durable::log::{begin_frame, finish_frame, read_frame, FrameFault};
    let folder = tempfile::tempdir().expect("folder");
    let (path, offsets) = write_log(folder.path(), &RECORDS);
    let written = std::fs::read(&path).expect("read");

    let mut buffer = header().encode().expect("header");
    for record in RECORDS {
        let start = begin_frame(&mut buffer);
        buffer.extend_from_slice(record);
        let len = finish_frame(&mut buffer, start).expect("framed");
        assert_eq!(len, 8 + record.len());
    }
    assert_eq!(buffer, written, "the same bytes as appended one by one");

    let mut at = offsets[0] as usize;
    for (index, record) in RECORDS.iter().enumerate() {
        let frame = read_frame(&written, at).expect("a whole frame");
        assert_eq!(
            (frame.payload, frame.next),
            (*record, offsets[index + 1] as usize)
        );
        at = frame.next;
    }
    assert!(matches!(
        read_frame(&written[..written.len() - 1], offsets[4] as usize),
        Err(FrameFault::CutShort(_))
    ));
    let mut damaged = written.clone();
    damaged[offsets[2] as usize + 9] ^= 1;
    assert!(matches!(
        read_frame(&damaged, offsets[2] as usize),
        Err(FrameFault::Bad(_))
    ));

    // a payload over the limit is refused and leaves the buffer as it was
    let mut buffer = b"kept".to_vec();
    let start = begin_frame(&mut buffer);
    buffer.resize(buffer.len() + mongoose_durable::log::MAX_RECORD + 1, 0);
    assert!(matches!(
        finish_frame(&mut buffer, start),
        Err(DurableError::TooLarge { .. })
    ));
    assert_eq!(buffer, b"kept");
}
