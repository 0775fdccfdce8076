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
        recorded >= 32 + count * (24 + MESSAGE_LEN as u64) && (stopped || !close)
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
    flip(&segment, 32 + 24 + 10);
    let damaged = fs::read(&segment).expect("the segment");

    let open = Archiver::open(ipc_config(&archive, &ipc))
        .map(|_| ())
        .expect_err("the archiver refuses a damaged recording");
    let message = open.to_string();
    assert!(
        message.contains(".seg") && message.contains("at byte 32"),
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
