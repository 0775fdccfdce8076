//! The segment format's tests: its layout, its crash points, the earlier layout read,
//! another recording's segment refused.

use mongoose_durable::disk::RealDisk;

use super::writer::Recovered;
use super::*;

fn identity() -> RecordingIdentity {
    RecordingIdentity {
        id: 7,
        stream: 5,
        session: 9,
        start_position: 0,
        started_unix_ms: 1_700_000_000_000,
    }
}

// the record layout the module documents: the durable layer's frame around the
// position, the kind and a reserved field, 24 bytes before the payload
#[test]
fn a_record_has_the_documented_layout() {
    let mut bytes = Vec::new();
    encode_record(
        &mut bytes,
        RecordKind::Message,
        0x0102_0304_0506_0708,
        b"abc",
    )
    .expect("encode");
    assert_eq!(bytes.len(), RECORD_HEADER_LEN + 3);
    assert_eq!(bytes[0..4], 19u32.to_le_bytes());
    assert_eq!(bytes[8..16], 0x0102_0304_0506_0708u64.to_le_bytes());
    assert_eq!(bytes[16..20], 1u32.to_le_bytes());
    assert_eq!(bytes[20..24], [0; 4]);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&bytes[0..4]);
    crc.update(&bytes[8..]);
    assert_eq!(bytes[4..8], crc.finalize().to_le_bytes());
    let frame = log::read_frame(&bytes, 0).expect("a frame of the layer");
    assert_eq!(frame.next, bytes.len());
    match decode_record(&bytes) {
        Decoded::Record(record) => {
            assert_eq!(record.payload, b"abc");
            assert_eq!(record.end(), 0x0102_0304_0506_0708 + 7);
            assert_eq!(record.stored_len(), bytes.len());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_flipped_byte_or_a_short_record_is_never_a_record() {
    let mut bytes = Vec::new();
    encode_record(&mut bytes, RecordKind::Gap, 10, &20u64.to_le_bytes()).expect("encode");
    assert!(matches!(
        decode_record(&bytes[..bytes.len() - 1]),
        Decoded::Incomplete { needed: Some(32) }
    ));
    assert!(matches!(
        decode_record(&bytes[..5]),
        Decoded::Incomplete { needed: None }
    ));
    for at in 0..bytes.len() {
        let mut changed = bytes.clone();
        changed[at] ^= 0x10;
        assert!(
            !matches!(decode_record(&changed), Decoded::Record(_)),
            "byte {at}"
        );
    }
    // zeros a power loss left are no record: the checksum covers the length
    assert!(matches!(decode_record(&[0; 64]), Decoded::Invalid(_)));
}

// storage.md gap 7: once a new segment is created (and records are written to it),
// a power loss must leave it under its name with its whole header, never a name
// without a header, nor no segment where the recording goes on.
#[test]
fn a_new_segment_is_whole_and_named_at_every_crash_point_after_its_creation() {
    use std::collections::BTreeMap;

    use mongoose_durable::crash::{crash_states, RecordingDisk};

    let archive = tempfile::tempdir().expect("folder");
    let path = segment_path(archive.path(), 7, 4096);
    let header = identity().segment_header(4096);
    let mut disk = RecordingDisk::default();
    create_segment_on(&mut disk, &path, &header).expect("create");
    let operations = disk.operations();
    for crash in crash_states(&BTreeMap::new(), &operations) {
        if crash.after < operations.len() {
            continue;
        }
        assert_eq!(
            crash.files.get(&path).map(Vec::as_slice),
            Some(&header.encode().expect("encode")[..]),
            "after {} of {} operations ({})",
            crash.after,
            operations.len(),
            crash.how
        );
    }
}

#[test]
fn a_segment_header_is_the_layers_naming_the_recording_and_the_position() {
    let bytes = identity().segment_header(99).encode().expect("encode");
    assert_eq!(bytes.len() as u64, SEGMENT_HEADER_LEN);
    let (header, _) = Header::decode(Path::new("s"), &bytes).expect("decode");
    assert_eq!((header.format.as_str(), header.version), (FORMAT, VERSION));
    assert_eq!(header.owner[0..8], 7u64.to_le_bytes());
    assert_eq!(header.owner[8..12], 5u32.to_le_bytes());
    assert_eq!(header.owner[12..16], 9u32.to_le_bytes());
    assert_eq!(header.owner[16..24], 0u64.to_le_bytes());
    assert_eq!(header.owner[24..32], 1_700_000_000_000u64.to_le_bytes());
    assert_eq!(header.owner[32..40], 99u64.to_le_bytes());
}

/// A record of the earlier layout (what earlier releases wrote).
fn encode_earlier_record(out: &mut Vec<u8>, kind: RecordKind, position: u64, payload: &[u8]) {
    let mut header = [0u8; RECORD_HEADER_LEN];
    header[0..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    header[8..16].copy_from_slice(&position.to_le_bytes());
    header[16..20].copy_from_slice(&kind.code().to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&header[8..]);
    crc.update(payload);
    header[4..8].copy_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(payload);
}

/// An archive whose catalog holds the recording [`identity`], its first segment of
/// the earlier layout holding the 2-byte messages `m0`.. `m{count - 1}`.
fn archive_of_the_earlier_layout(count: u64) -> (tempfile::TempDir, Vec<u8>) {
    use crate::catalog::{Catalog, CatalogEvent};

    let archive = tempfile::tempdir().expect("folder");
    let identity = identity();
    Catalog::open(archive.path())
        .expect("catalog")
        .append(CatalogEvent::Started {
            id: identity.id,
            stream: identity.stream,
            session: identity.session,
            start_position: identity.start_position,
            source: "ipc ring".into(),
            started_unix_ms: identity.started_unix_ms,
        })
        .expect("started");
    let mut bytes = earlier_segment_header(identity.id, 0).to_vec();
    for index in 0..count {
        let message = format!("m{index}");
        encode_earlier_record(
            &mut bytes,
            RecordKind::Message,
            index * 6,
            message.as_bytes(),
        );
    }
    fs::create_dir_all(recording_dir(archive.path(), identity.id)).expect("folder");
    fs::write(segment_path(archive.path(), identity.id, 0), &bytes).expect("segment");
    (archive, bytes)
}

/// Polls `reader` once: the messages (position after each, text).
fn poll(reader: &mut crate::RecordingReader) -> Vec<(u64, String)> {
    let mut messages = Vec::new();
    reader
        .poll(100, |event| match event {
            crate::ReplayEvent::Message { position, payload } => {
                messages.push((position, String::from_utf8_lossy(payload).into_owned()))
            }
            crate::ReplayEvent::Gap { from, to } => panic!("a gap [{from}, {to})"),
        })
        .expect("poll");
    messages
}

fn owned(messages: &[(u64, &str)]) -> Vec<(u64, String)> {
    messages
        .iter()
        .map(|&(position, text)| (position, text.to_owned()))
        .collect()
}

// issue 38: segments of the earlier layout (MGARSEG1) are still read, by a reader
// and by the archiver's recovery, and never appended to: the recording continues in
// a segment of the layer, which a live reader moves to.
#[test]
fn a_recording_of_the_earlier_layout_is_read_and_continued_in_a_segment_of_the_layer() {
    use crate::{RecordingReader, RecordingSelector};

    let (archive, earlier) = archive_of_the_earlier_layout(3);
    let mut reader = RecordingReader::open(archive.path(), RecordingSelector::Id(7), None)
        .expect("a reader opens a segment of the earlier layout");
    assert_eq!(
        poll(&mut reader),
        owned(&[(6, "m0"), (12, "m1"), (18, "m2")])
    );
    assert!(!reader.is_ended());

    let (mut writer, recovered) =
        SegmentWriter::recover(archive.path(), identity(), 1 << 20).expect("recover");
    assert_eq!(
        recovered,
        Recovered {
            end: 18,
            stopped: false,
            torn_bytes: 0
        }
    );
    writer.append_message(18, b"m3").expect("append");
    writer.flush().expect("flush");
    let first = segment_path(archive.path(), 7, 0);
    assert_eq!(
        fs::read(&first).expect("read"),
        earlier,
        "never appended to"
    );
    let next = fs::read(segment_path(archive.path(), 7, 18)).expect("a new segment");
    assert_eq!(
        identity()
            .segment_header(18)
            .verify(Path::new("next"), &next)
            .expect("the layer's header") as u64,
        SEGMENT_HEADER_LEN
    );
    assert_eq!(poll(&mut reader), owned(&[(24, "m3")]));
    writer.stop().expect("stop");
    assert!(poll(&mut reader).is_empty());
    assert!(reader.is_ended());

    let mut replay = RecordingReader::open(archive.path(), RecordingSelector::Id(7), Some(12))
        .expect("a reader from a committed position");
    assert_eq!(poll(&mut replay), owned(&[(18, "m2"), (24, "m3")]));
    assert!(replay.is_ended());
}

// A last segment of the earlier layout that holds no record has the name the next
// record's segment takes: it is replaced whole, and a reader waiting in it follows.
#[test]
fn an_empty_segment_of_the_earlier_layout_is_replaced_whole_and_a_waiting_reader_follows() {
    use crate::{RecordingReader, RecordingSelector};

    let (archive, _) = archive_of_the_earlier_layout(0);
    let mut reader =
        RecordingReader::open(archive.path(), RecordingSelector::Id(7), None).expect("open");
    assert!(poll(&mut reader).is_empty());
    let (mut writer, recovered) =
        SegmentWriter::recover(archive.path(), identity(), 1 << 20).expect("recover");
    assert_eq!(recovered.end, 0);
    writer.append_message(0, b"m0").expect("append");
    writer.flush().expect("flush");
    let bytes = fs::read(segment_path(archive.path(), 7, 0)).expect("read");
    assert!(bytes.starts_with(&mongoose_durable::header::MAGIC));
    assert_eq!(poll(&mut reader), owned(&[(6, "m0")]));
}

// The earlier layout's recovery keeps the rule: damage in the middle refused, the
// segment left as it is.
#[test]
fn damage_in_the_middle_of_a_segment_of_the_earlier_layout_is_refused() {
    let (archive, mut earlier) = archive_of_the_earlier_layout(3);
    let at = EARLIER_HEADER_LEN as usize + RECORD_HEADER_LEN;
    earlier[at] ^= 0x20;
    let path = segment_path(archive.path(), 7, 0);
    fs::write(&path, &earlier).expect("damage");
    let error = SegmentWriter::recover(archive.path(), identity(), 1 << 20)
        .map(|_| ())
        .expect_err("refused");
    assert!(
        matches!(error, ArchiveError::Corrupt { position: 0, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("at byte 32"), "{error}");
    assert_eq!(fs::read(&path).expect("read"), earlier, "nothing cut");
}

// issue 38 (every file says whose it is): a segment left by another recording with
// the same id and start (an archive made again at the same path numbers its
// recordings from 1 again) is refused, by the archiver and by a reader, never read
// as this recording's. The earlier header named only the id and the start.
#[test]
fn a_segment_of_another_recording_with_the_same_id_is_refused() {
    use crate::{RecordingReader, RecordingSelector};

    let (archive, _) = archive_of_the_earlier_layout(0);
    let path = segment_path(archive.path(), 7, 0);
    let other = RecordingIdentity {
        started_unix_ms: identity().started_unix_ms + 60_000,
        session: 10,
        ..identity()
    };
    let mut foreign = Vec::new();
    create_segment_on(&mut RealDisk, &path, &other.segment_header(0)).expect("create");
    encode_record(&mut foreign, RecordKind::Message, 0, b"m0").expect("encode");
    fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .and_then(|mut file| std::io::Write::write_all(&mut file, &foreign))
        .expect("a record of the other recording");
    let before = fs::read(&path).expect("read");
    for error in [
        SegmentWriter::recover(archive.path(), identity(), 1 << 20)
            .map(|_| ())
            .expect_err("the archiver refuses it"),
        RecordingReader::open(archive.path(), RecordingSelector::Id(7), None)
            .map(|_| ())
            .expect_err("a reader refuses it"),
    ] {
        assert!(
            matches!(
                error,
                ArchiveError::Durable(mongoose_durable::DurableError::WrongOwner { .. })
            ),
            "{error}"
        );
    }
    assert_eq!(fs::read(&path).expect("read"), before, "left as it is");
}
