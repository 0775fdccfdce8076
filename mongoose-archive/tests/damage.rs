//! Damage to the archive's files, made for real (a changed byte, a torn or zero-filled
//! tail): a torn tail is cut and reported, damage in the middle (whole records after
//! the bad one) is refused with the file and the byte named, and nothing is cut.

mod common;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use mongoose_archive::{list, Archiver, ArchiverConfig, IpcPublication, Offer, Publication};

const DEADLINE: Duration = Duration::from_secs(120);

/// A segment's header: the durable layer's, format `mongoose-archive-segment` (24
/// bytes), an owner of 40 bytes.
const SEGMENT_HEADER_LEN: u64 = 4 + 2 + 4 + 1 + 24 + 1 + 40 + 4;

fn ipc_config(archive: &Path, ipc: &Path) -> ArchiverConfig {
    let mut config = ArchiverConfig::new(archive);
    config.ipc_dir = Some(ipc.to_path_buf());
    config.segment_bytes = 1 << 20;
    config
}

fn offer(publication: &mut IpcPublication, archiver: &mut Archiver, index: u64) {
    loop {
        match publication.offer(&message(index)).expect("offer") {
            Offer::Accepted { .. } => return,
            Offer::BackPressured => {
                archiver.do_work().expect("work");
            }
        }
    }
}

/// An archive holding one recording of `count` messages: stopped (the publication
/// closed) when `close`, else still active when the archiver is dropped (a crash).
fn one_recording(archive: &Path, ipc: &Path, count: u64, close: bool) {
    let mut archiver = Archiver::open(ipc_config(archive, ipc)).expect("open");
    let mut publication = IpcPublication::create(ipc, 5, 9).expect("create");
    for index in 0..count {
        offer(&mut publication, &mut archiver, index);
    }
    if close {
        publication.close().expect("close");
    }
    wait_until("the recording to hold every message", DEADLINE, || {
        archiver.do_work().expect("work");
        let recorded = segments(archive)
            .iter()
            .map(|path| fs::metadata(path).map_or(0, |m| m.len()))
            .sum::<u64>();
        let stopped = list(archive)
            .expect("list")
            .iter()
            .any(|r| r.stop_position.is_some());
        recorded >= SEGMENT_HEADER_LEN + count * (24 + MESSAGE_LEN as u64) && (stopped || !close)
    });
    drop(archiver);
}

/// Every segment of the archive, in order.
fn segments(archive: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in fs::read_dir(archive).expect("the archive").flatten() {
        if entry.path().is_dir() {
            for segment in fs::read_dir(entry.path()).expect("a recording").flatten() {
                if segment.path().extension().is_some_and(|ext| ext == "seg") {
                    found.push(segment.path());
                }
            }
        }
    }
    found.sort();
    found
}

/// Changes the byte at `at` of `path`.
fn flip(path: &Path, at: usize) {
    let mut bytes = fs::read(path).expect("read");
    bytes[at] ^= 0x20;
    fs::write(path, bytes).expect("write");
}

// storage.md gap 5: a byte changed in the first catalog record (the recording's start,
// a stop record whole after it) was read as the end of the catalog, and the archiver
// cut the catalog to its header: the recording was gone from the catalog.
#[test]
fn a_damaged_catalog_record_in_the_middle_is_refused_not_cut() {
    let dir = tempfile::tempdir().expect("a directory");
    let archive = dir.path().join("archive");
    let ipc = dir.path().join("ipc");
    one_recording(&archive, &ipc, 10, true);
    assert_eq!(list(&archive).expect("list").len(), 1);
    let catalog = archive.join("catalog");
    let bytes = fs::read(&catalog).expect("the catalog");
    let source = bytes
        .windows(3)
        .position(|window| window == b"ipc")
        .expect("the first record names its source");
    flip(&catalog, source);
    let damaged = fs::read(&catalog).expect("the catalog");

    let read = list(&archive).expect_err("a reader refuses a damaged catalog");
    let message = read.to_string();
    assert!(
        message.contains("catalog") && message.contains("at byte"),
        "{message}"
    );
    let open = Archiver::open(ipc_config(&archive, &ipc))
        .map(|_| ())
        .expect_err("the archiver refuses a damaged catalog");
    assert!(open.to_string().contains("at byte"), "{open}");
    assert_eq!(
        fs::read(&catalog).expect("the catalog"),
        damaged,
        "nothing was cut"
    );
}

// storage.md gap 5: a byte changed in the first record of the last segment of an
// active recording (9 whole records after it) was cut by the archiver's recovery with
// every record after it.
#[test]
fn a_damaged_record_in_the_middle_of_the_last_segment_is_refused_not_cut() {
    let dir = tempfile::tempdir().expect("a directory");
    let archive = dir.path().join("archive");
    let ipc = dir.path().join("ipc");
    one_recording(&archive, &ipc, 10, false);
    let segment = segments(&archive).pop().expect("a segment");
    flip(&segment, SEGMENT_HEADER_LEN as usize + 24 + 10);
    let damaged = fs::read(&segment).expect("the segment");

    let open = Archiver::open(ipc_config(&archive, &ipc))
        .map(|_| ())
        .expect_err("the archiver refuses a damaged recording");
    let message = open.to_string();
    assert!(
        message.contains(".seg") && message.contains(&format!("at byte {SEGMENT_HEADER_LEN}")),
        "{message}"
    );
    assert_eq!(
        fs::read(&segment).expect("the segment"),
        damaged,
        "nothing was cut"
    );
}

// A torn tail (half a record) and a zero-filled tail (a power loss after the file grew)
// of the last segment are cut and counted in the catalog; the records before stay.
#[test]
fn a_torn_or_zero_tail_of_the_last_segment_is_cut_and_reported() {
    for tail in [torn_record(), vec![0u8; 4096]] {
        let dir = tempfile::tempdir().expect("a directory");
        let archive = dir.path().join("archive");
        let ipc = dir.path().join("ipc");
        one_recording(&archive, &ipc, 10, false);
        let segment = segments(&archive).pop().expect("a segment");
        let whole = fs::metadata(&segment).expect("the segment").len();
        OpenOptions::new()
            .append(true)
            .open(&segment)
            .expect("open")
            .write_all(&tail)
            .expect("a torn tail");
        let archiver = Archiver::open(ipc_config(&archive, &ipc)).expect("open again");
        drop(archiver);
        assert_eq!(fs::metadata(&segment).expect("the segment").len(), whole);
        let recordings = list(&archive).expect("list");
        assert_eq!(
            recordings[0].torn_tails_cut,
            vec![(10 * FRAME_LEN, tail.len() as u64)]
        );
    }
}

/// The first 40 bytes of a record whose header announces a 100-byte payload.
fn torn_record() -> Vec<u8> {
    let mut bytes = vec![0u8; 40];
    bytes[0..4].copy_from_slice(&100u32.to_le_bytes());
    bytes[4..8].copy_from_slice(&0xDEAD_BEEFu32.to_le_bytes());
    bytes[16..20].copy_from_slice(&1u32.to_le_bytes());
    bytes
}

// issue 38: a segment is a record log of the durable layer: it opens with the layer's
// header naming its format, its version and its owner (the recording's identity, as the
// catalog has it, and the segment's first position), so a segment of another recording
// (an archive made again at the same path numbers its recordings from 1 again) is
// refused, never read as this one's.
#[test]
fn a_new_segment_opens_with_the_durable_layers_header_naming_its_recording() {
    let dir = tempfile::tempdir().expect("a directory");
    let archive = dir.path().join("archive");
    let ipc = dir.path().join("ipc");
    one_recording(&archive, &ipc, 10, true);
    let recording = list(&archive).expect("list").remove(0);
    let segment = segments(&archive).pop().expect("a segment");
    let bytes = fs::read(&segment).expect("the segment");
    let (header, len) =
        mongoose_durable::header::Header::decode(&segment, &bytes).expect("the layer's header");
    assert_eq!(header.format, "mongoose-archive-segment");
    assert_eq!(header.version, 2);
    let mut owner = Vec::new();
    owner.extend_from_slice(&recording.id.to_le_bytes());
    owner.extend_from_slice(&recording.stream.to_le_bytes());
    owner.extend_from_slice(&recording.session.to_le_bytes());
    owner.extend_from_slice(&recording.start_position.to_le_bytes());
    owner.extend_from_slice(&recording.started_unix_ms.to_le_bytes());
    owner.extend_from_slice(&recording.start_position.to_le_bytes());
    assert_eq!(header.owner, owner);
    assert_eq!(len as u64, SEGMENT_HEADER_LEN);
    // then the layer's frames: 10 messages and the stop record, nothing else
    let mut at = len;
    let mut frames = 0;
    while at < bytes.len() {
        let frame = mongoose_durable::log::read_frame(&bytes, at).expect("a whole frame");
        at = frame.next;
        frames += 1;
    }
    assert_eq!(frames, 11);
}

// issue 38: a reader at the live tail reads while the archiver appends, so a frame cut
// short there is one being written: the reader waits on it (no error, no damage, the
// file unchanged) and reads it once it is whole. Only the archiver's recovery cuts.
#[test]
fn a_live_reader_waits_on_a_partial_frame_and_reads_it_once_whole() {
    let dir = tempfile::tempdir().expect("a directory");
    let archive = dir.path().join("archive");
    let ipc = dir.path().join("ipc");
    one_recording(&archive, &ipc, 10, false);
    let recording = list(&archive).expect("list").remove(0);
    let mut reader = mongoose_archive::RecordingReader::open(
        &archive,
        mongoose_archive::RecordingSelector::Id(recording.id),
        None,
    )
    .expect("open");
    let seen = read_until(&mut reader, DEADLINE, |seen| seen.indexes.len() == 10);
    assert_each_once_in_order(&seen.indexes, 10);

    // the next message's frame, as the archiver writes it: position, kind 1, reserved
    let mut frame = Vec::new();
    let start = mongoose_durable::log::begin_frame(&mut frame);
    frame.extend_from_slice(&(10 * FRAME_LEN).to_le_bytes());
    frame.extend_from_slice(&1u32.to_le_bytes());
    frame.extend_from_slice(&0u32.to_le_bytes());
    frame.extend_from_slice(&message(10));
    mongoose_durable::log::finish_frame(&mut frame, start).expect("a frame");
    let segment = segments(&archive).pop().expect("a segment");
    let mut written = 0;
    for part in [3, 8, 30, frame.len() - 1] {
        OpenOptions::new()
            .append(true)
            .open(&segment)
            .expect("open")
            .write_all(&frame[written..part])
            .expect("a part of the frame");
        written = part;
        let partial = fs::read(&segment).expect("the segment");
        for _ in 0..3 {
            let events = reader
                .poll(100, |event| panic!("nothing whole yet: {event:?}"))
                .expect("a partial frame at the live tail is waited on, not damage");
            assert_eq!(events, 0);
        }
        assert!(!reader.is_ended());
        assert_eq!(
            fs::read(&segment).expect("the segment"),
            partial,
            "nothing cut"
        );
    }
    OpenOptions::new()
        .append(true)
        .open(&segment)
        .expect("open")
        .write_all(&frame[written..])
        .expect("the rest of the frame");
    let more = read_until(&mut reader, DEADLINE, |seen| !seen.indexes.is_empty());
    assert_eq!(more.indexes, vec![10]);
    assert_eq!(more.positions, vec![11 * FRAME_LEN]);
}
