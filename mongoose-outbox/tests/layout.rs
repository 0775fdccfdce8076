//! The outbox's segments on the durable layer (issue 38): a segment is a record log of
//! `mongoose-durable` (its header names the format, the version and the owner; its
//! records are the layer's frames), and segments of the earlier layouts (versions 1
//! and 2: an `MGOUTBOX` header, frames whose checksum covers only the payload) are
//! still read, never appended to.

use std::fs;
use std::path::{Path, PathBuf};

use mongoose_core::sink::OutputKey;
use mongoose_core::Epoch;
use mongoose_durable::header::Header;
use mongoose_outbox::{
    Admission, AdmittedOutput, AdmittedPosition, Outbox, OutboxConfig, OutboxError, OutboxOwner,
};

fn admission(number: u64) -> Admission {
    Admission {
        state: number.to_le_bytes().to_vec(),
        positions: vec![AdmittedPosition {
            feed: "lines".into(),
            epoch: Epoch(1),
            lane: 0,
            position: number,
        }],
        outputs: vec![AdmittedOutput {
            sink: "out".into(),
            key: OutputKey::new("lines", Epoch(1), 0, number, 0, 1),
            payload: format!("output of {number}").into_bytes(),
        }],
    }
}

fn number_of(admission: &Admission) -> u64 {
    u64::from_le_bytes(admission.state[..8].try_into().expect("8 bytes"))
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)
        .expect("the folder")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .collect();
    paths.sort();
    paths
}

const OWNER: [u8; 16] = [7; 16];

fn owned(dir: &Path) -> OutboxConfig {
    let mut config = OutboxConfig::new(dir);
    config.owner = OutboxOwner::Is(OWNER);
    config
}

fn write_admissions(config: OutboxConfig, numbers: std::ops::RangeInclusive<u64>) {
    let (mut outbox, _) = Outbox::open(config).expect("open");
    for number in numbers {
        outbox.admit(&admission(number)).expect("admit");
    }
    outbox.close().expect("close");
}

/// The header a segment starting at `first_seq` carries: the layer's, owned by the
/// outbox's owner and the segment's first sequence.
fn segment_header(first_seq: u64) -> Header {
    let mut owner = OWNER.to_vec();
    owner.extend_from_slice(&first_seq.to_le_bytes());
    Header::new("mongoose-outbox-segment", 3, owner)
}

fn admitted(dir: &Path) -> Vec<u64> {
    let (outbox, recovery) = Outbox::open(owned(dir)).expect("open");
    outbox.close().expect("close");
    recovery
        .admissions
        .iter()
        .map(|(_, admission)| number_of(admission))
        .collect()
}

#[test]
fn a_segment_is_a_record_log_of_the_durable_layer() {
    let dir = tempfile::tempdir().expect("folder");
    write_admissions(owned(dir.path()), 1..=5);
    let segment = segments(dir.path()).pop().expect("a segment");
    // the layer's own reader reads it: its header, and one record per admission
    let read = mongoose_durable::log::read(&segment, &segment_header(1)).expect("a layer log");
    assert_eq!(read.torn_tail, None);
    assert_eq!(read.records.len(), 5);
    for (index, record) in read.records.iter().enumerate() {
        assert_eq!(record[0], 1, "an admission's kind byte");
        assert_eq!(
            record[1..9],
            (index as u64 + 1).to_le_bytes(),
            "its sequence"
        );
    }
    // another owner's header is named as such by the layer
    let mut theirs = segment_header(1);
    theirs.owner[0] = 9;
    assert!(matches!(
        mongoose_durable::log::read(&segment, &theirs),
        Err(mongoose_durable::DurableError::WrongOwner { .. })
    ));
}

/// Rewrites a segment of this build as format version 2 wrote it: the 40-byte
/// `MGOUTBOX` header, and frames whose checksum covers only the payload.
fn as_version_2(segment: &Path, first_seq: u64) {
    let read = mongoose_durable::log::read(segment, &segment_header(first_seq)).expect("read");
    let mut bytes = Vec::new();
    bytes.extend_from_slice(b"MGOUTBOX");
    bytes.extend_from_slice(&2u32.to_le_bytes());
    bytes.extend_from_slice(&first_seq.to_le_bytes());
    bytes.extend_from_slice(&OWNER);
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    for record in &read.records {
        bytes.extend_from_slice(&(record.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&crc32fast::hash(record).to_le_bytes());
        bytes.extend_from_slice(record);
    }
    fs::write(segment, bytes).expect("rewrite");
}

#[test]
fn a_segment_of_the_earlier_layout_is_read_and_new_records_go_to_a_layer_segment() {
    let dir = tempfile::tempdir().expect("folder");
    write_admissions(owned(dir.path()), 1..=4);
    let old = segments(dir.path()).pop().expect("a segment");
    as_version_2(&old, 1);
    let version_2 = fs::read(&old).expect("read");
    assert_eq!(admitted(dir.path()), vec![1, 2, 3, 4]);
    assert_eq!(fs::read(&old).expect("read"), version_2, "not rewritten");

    // appended after it in a new segment of the layer: the old one is never appended to
    write_admissions(owned(dir.path()), 5..=6);
    assert_eq!(fs::read(&old).expect("read"), version_2, "not appended to");
    let all = segments(dir.path());
    assert_eq!(all.len(), 2, "{all:?}");
    let read = mongoose_durable::log::read(&all[1], &segment_header(5)).expect("a layer log");
    assert_eq!(read.records.len(), 2);
    assert_eq!(admitted(dir.path()), vec![1, 2, 3, 4, 5, 6]);

    // a damaged byte in the middle of the old segment is refused, nothing changed
    let mut damaged = version_2.clone();
    damaged[40 + 8 + 3] ^= 0x20;
    fs::write(&old, &damaged).expect("damage");
    match Outbox::open(owned(dir.path())) {
        Err(OutboxError::Damaged { file, offset, .. }) => {
            assert_eq!((file, offset), (old.clone(), 40));
        }
        other => panic!("expected damage, got {other:?}"),
    }
    assert_eq!(fs::read(&old).expect("read"), damaged);
}

#[test]
fn a_torn_tail_of_an_earlier_layout_segment_is_cut_and_reported() {
    let dir = tempfile::tempdir().expect("folder");
    write_admissions(owned(dir.path()), 1..=4);
    let old = segments(dir.path()).pop().expect("a segment");
    as_version_2(&old, 1);
    let length = fs::metadata(&old).expect("meta").len();
    // the last record cut short, after what the watermark says was durable
    fs::OpenOptions::new()
        .write(true)
        .open(&old)
        .expect("open")
        .set_len(length - 3)
        .expect("cut");
    fs::remove_file(dir.path().join("DURABLE")).expect("no watermark");
    let (outbox, recovery) = Outbox::open(owned(dir.path())).expect("open");
    let torn = recovery.torn.clone().expect("a torn tail");
    assert_eq!(torn.file, old);
    assert_eq!(recovery.admissions.len(), 3);
    assert_eq!(fs::metadata(&old).expect("meta").len(), torn.offset);
    outbox.close().expect("close");
    assert_eq!(admitted(dir.path()), vec![1, 2, 3]);
}

#[test]
fn an_empty_segment_of_the_earlier_layout_is_replaced_by_a_layer_segment() {
    let dir = tempfile::tempdir().expect("folder");
    Outbox::open(owned(dir.path()))
        .expect("open")
        .0
        .close()
        .expect("close");
    let old = segments(dir.path()).pop().expect("a segment");
    as_version_2(&old, 1);
    assert_eq!(fs::metadata(&old).expect("meta").len(), 40);
    write_admissions(owned(dir.path()), 1..=2);
    assert_eq!(segments(dir.path()), vec![old.clone()]);
    let read = mongoose_durable::log::read(&old, &segment_header(1)).expect("a layer log");
    assert_eq!(read.records.len(), 2);
    assert_eq!(admitted(dir.path()), vec![1, 2]);
}
