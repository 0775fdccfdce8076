//! The file capture store's records file and sidecar on disk (book:
//! reference/storage.md, "The audit capture"): a torn tail is reported, damage in the
//! middle refused (never skipped), a changed sidecar byte refused, and a capture of the
//! earlier layout still read.

use std::path::{Path, PathBuf};

use mongoose_audit::capture::file::{read_capture, FileCaptureResources, CAPTURE_FILE, MAGIC};
use mongoose_audit::capture::{
    create_session_folder, CaptureIdentity, CaptureRecord, CaptureResources, SIDECAR_FILE,
};

fn identity() -> CaptureIdentity {
    CaptureIdentity {
        group: "bank".into(),
        name: "ledger".into(),
        generation: 3,
        capture_id: "7".into(),
    }
}

fn record(number: u64) -> CaptureRecord {
    CaptureRecord::Record {
        at_micros: number,
        bytes: format!("record {number}").into_bytes(),
    }
}

/// A session folder of three records, written by the file store; returns it.
fn session(root: &Path) -> PathBuf {
    let folder = create_session_folder(root, &identity()).expect("folder");
    let mut writer = FileCaptureResources
        .open(&identity(), &folder)
        .expect("open");
    for number in 1..=3 {
        writer.write(&record(number).encode()).expect("write");
    }
    writer.close().expect("close");
    folder
}

/// The bytes of one record's frame (8 bytes of length and checksum, then the record).
fn frame_bytes(number: u64) -> usize {
    8 + record(number).encode().len()
}

// storage.md gap 6: a record failing its checksum with whole records after it was
// reported as a torn tail, and the records after it were not read (silently: the read
// succeeded with 1 of 3 records).
#[test]
fn a_damaged_record_in_the_middle_of_a_capture_is_refused_not_skipped() {
    let root = tempfile::tempdir().expect("root");
    let folder = session(root.path());
    let path = folder.join(CAPTURE_FILE);
    let mut bytes = std::fs::read(&path).expect("read");
    // the last byte of the second record
    let at = bytes.len() - frame_bytes(3) - 1;
    bytes[at] ^= 0x40;
    std::fs::write(&path, &bytes).expect("damage");
    match read_capture(&folder) {
        Err(error) => {
            let message = error.to_string();
            assert!(
                message.contains("damaged at byte") && message.contains("refusing to skip"),
                "{message}"
            );
        }
        Ok(read) => panic!(
            "damage in the middle read as {} of 3 records, torn tail {:?}",
            read.records.len(),
            read.torn_tail
        ),
    }
}

#[test]
fn a_torn_tail_of_a_capture_is_reported_and_the_records_before_it_read() {
    let root = tempfile::tempdir().expect("root");
    let folder = session(root.path());
    let path = folder.join(CAPTURE_FILE);
    let bytes = std::fs::read(&path).expect("read");
    for cut in [1, 5, frame_bytes(3) - 1] {
        std::fs::write(&path, &bytes[..bytes.len() - cut]).expect("cut");
        let read = read_capture(&folder).expect("a torn tail is read");
        assert_eq!(read.records, [record(1), record(2)], "cut {cut}");
        let torn = read.torn_tail.expect("reported");
        assert!(torn.contains("torn record at byte"), "{torn}");
    }
    // zeros where the last record should be (a power loss before the close's sync)
    let mut zeroed = bytes.clone();
    let len = zeroed.len();
    zeroed[len - frame_bytes(3)..].fill(0);
    std::fs::write(&path, &zeroed).expect("zeros");
    let read = read_capture(&folder).expect("zeros are a torn tail");
    assert_eq!(read.records, [record(1), record(2)]);
    assert!(read.torn_tail.is_some());
}

// storage.md gap 15 (the sidecar): a changed digit of the generation was read as the
// session's identity (generation 3 read as 4).
#[test]
fn a_changed_byte_of_a_capture_sidecar_is_refused() {
    let root = tempfile::tempdir().expect("root");
    let folder = session(root.path());
    let path = folder.join(SIDECAR_FILE);
    let mut bytes = std::fs::read(&path).expect("read");
    let at = bytes
        .windows(15)
        .position(|window| window == b"\"generation\": 3")
        .expect("the generation")
        + 14;
    bytes[at] = b'4';
    std::fs::write(&path, &bytes).expect("damage");
    match read_capture(&folder) {
        Err(error) => assert!(error.to_string().contains("no readable"), "{error}"),
        Ok(read) => panic!(
            "a changed sidecar read as generation {}",
            read.sidecar.generation
        ),
    }
    let error = mongoose_audit::capture::CaptureSidecar::read(&folder).expect_err("refused");
    assert!(error.to_string().contains("is damaged"), "{error}");
}

/// A session folder as an earlier release wrote it: bare JSON sidecar, `MGCAPT01` and
/// frames of `length | crc32 of the bytes | bytes`.
fn old_session(root: &Path) -> PathBuf {
    let folder = root.join("capture-old");
    std::fs::create_dir(&folder).expect("folder");
    std::fs::write(
        folder.join(SIDECAR_FILE),
        "{\n  \"group\": \"bank\",\n  \"name\": \"ledger\",\n  \"generation\": 3,\n  \"capture_id\": \"7\",\n  \"started_at_millis\": 1700000000000\n}",
    )
    .expect("sidecar");
    let mut bytes = MAGIC.to_vec();
    for number in 1..=3 {
        let body = record(number).encode();
        bytes.extend_from_slice(&(body.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        bytes.extend_from_slice(&body);
    }
    std::fs::write(folder.join(CAPTURE_FILE), &bytes).expect("records");
    folder
}

#[test]
fn a_capture_of_the_earlier_layout_is_read_by_the_same_rules() {
    let root = tempfile::tempdir().expect("root");
    let folder = old_session(root.path());
    let read = read_capture(&folder).expect("read");
    assert_eq!(read.records, [record(1), record(2), record(3)]);
    assert_eq!(read.sidecar.generation, 3);
    assert_eq!(read.sidecar.capture_id, "7");
    assert!(read.torn_tail.is_none());
    let path = folder.join(CAPTURE_FILE);
    let bytes = std::fs::read(&path).expect("read");
    // a torn tail: reported
    std::fs::write(&path, &bytes[..bytes.len() - 3]).expect("cut");
    let read = read_capture(&folder).expect("torn");
    assert_eq!(read.records, [record(1), record(2)]);
    assert!(read.torn_tail.expect("reported").contains("torn record"));
    // damage in the middle: refused
    let mut damaged = bytes.clone();
    let at = damaged.len() - frame_bytes(3) - 1;
    damaged[at] ^= 0x40;
    std::fs::write(&path, &damaged).expect("damage");
    let error = read_capture(&folder).expect_err("refused");
    assert!(error.to_string().contains("damaged at byte"), "{error}");
}
