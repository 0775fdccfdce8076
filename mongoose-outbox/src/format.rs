//! The bytes on disk: segment headers and records (described in the crate docs).

use serde::Serialize;

/// The first eight bytes of every segment.
pub(crate) const MAGIC: [u8; 8] = *b"MGOUTBOX";
/// The version of the segment format this crate writes: version 2 carries the owner's
/// identity in its header. Version 1 (no owner) is still read.
pub(crate) const FORMAT_VERSION: u32 = 2;
/// The first format version, without an owner: read, never written.
pub(crate) const FORMAT_VERSION_1: u32 = 1;
/// A version 1 segment header: magic (8), version (u32 LE), first sequence (u64 LE),
/// CRC32 of the 20 bytes before it (u32 LE).
pub(crate) const HEADER_LEN_V1: usize = 24;
/// A version 2 segment header: magic (8), version (u32 LE), first sequence (u64 LE),
/// owner (16 bytes), CRC32 of the 36 bytes before it (u32 LE).
pub(crate) const HEADER_LEN: usize = 40;
/// A record's frame: payload length (u32 LE), CRC32 of the payload (u32 LE).
pub(crate) const FRAME_LEN: usize = 8;
/// The payload's fixed prefix: kind (1 byte), sequence (u64 LE).
pub(crate) const PAYLOAD_PREFIX_LEN: usize = 9;
/// The largest payload a record may have.
pub(crate) const MAX_PAYLOAD_LEN: usize = 1 << 30;
/// The kind byte of an admission record.
pub(crate) const KIND_ADMISSION: u8 = 1;
/// The kind byte of an outcome record.
pub(crate) const KIND_OUTCOMES: u8 = 2;

/// The name of the segment whose first record has sequence `first_seq`.
pub(crate) fn segment_file_name(first_seq: u64) -> String {
    format!("outbox-{first_seq:020}.log")
}

/// The first sequence a segment file name carries, if it is one.
pub(crate) fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("outbox-")?.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The (version 2) header of the segment that starts at `first_seq`, written by `owner`.
pub(crate) fn segment_header(first_seq: u64, owner: [u8; 16]) -> [u8; HEADER_LEN] {
    let mut header = [0u8; HEADER_LEN];
    header[0..8].copy_from_slice(&MAGIC);
    header[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    header[12..20].copy_from_slice(&first_seq.to_le_bytes());
    header[20..36].copy_from_slice(&owner);
    let crc = crc32fast::hash(&header[0..36]);
    header[36..40].copy_from_slice(&crc.to_le_bytes());
    header
}

/// A segment header read back: its length and its owner (`None` for a version 1
/// segment, which has none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    /// Where its first record starts.
    pub(crate) len: usize,
    /// The owner it was written for (version 2).
    pub(crate) owner: Option<[u8; 16]>,
}

/// Whether `bytes` (the whole of a segment file) can be a header cut short while it was
/// written: a prefix of a header of `first_seq` (any owner), or zeros.
pub(crate) fn is_torn_header(bytes: &[u8], first_seq: u64) -> bool {
    if bytes.len() >= HEADER_LEN {
        return false;
    }
    if bytes.iter().all(|&byte| byte == 0) {
        return true;
    }
    let expected = segment_header(first_seq, [0; 16]);
    // magic, version and first sequence are known; the owner and the checksum are not
    let known = bytes.len().min(20);
    bytes[..known] == expected[..known]
}

/// Checks a segment header against the sequence its file name carries; the header, or
/// the reason it is not right.
pub(crate) fn check_segment_header(
    header: &[u8],
    name_first_seq: u64,
) -> Result<SegmentHeader, String> {
    if header.len() < 12 {
        return Err(format!(
            "the segment header is cut short ({} bytes)",
            header.len()
        ));
    }
    if header[0..8] != MAGIC {
        return Err("the segment does not start with the outbox magic (MGOUTBOX)".into());
    }
    let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
    let len = match version {
        FORMAT_VERSION_1 => HEADER_LEN_V1,
        FORMAT_VERSION => HEADER_LEN,
        _ => {
            // a flipped version byte fails the checksum too; say that first
            return Err(format!(
                "the segment has format version {version}, this build reads versions {FORMAT_VERSION_1} and {FORMAT_VERSION} (or the header is damaged)"
            ));
        }
    };
    if header.len() < len {
        return Err(format!(
            "the segment header is cut short ({} of {len} bytes)",
            header.len()
        ));
    }
    let crc = u32::from_le_bytes(header[len - 4..len].try_into().expect("4 bytes"));
    if crc != crc32fast::hash(&header[0..len - 4]) {
        return Err("the segment header fails its checksum".into());
    }
    let first_seq = u64::from_le_bytes(header[12..20].try_into().expect("8 bytes"));
    if first_seq != name_first_seq {
        return Err(format!(
            "the segment header says it starts at sequence {first_seq}, its name says {name_first_seq}"
        ));
    }
    let owner = (version == FORMAT_VERSION).then(|| header[20..36].try_into().expect("16 bytes"));
    Ok(SegmentHeader { len, owner })
}

/// The name of the watermark file in an outbox folder: the highest sequence reported
/// durable, rewritten in place after each group.
pub(crate) const WATERMARK_FILE: &str = "DURABLE";
/// The watermark's magic.
pub(crate) const WATERMARK_MAGIC: [u8; 8] = *b"MGDURABL";
/// The watermark's layout version.
pub(crate) const WATERMARK_VERSION: u32 = 1;
/// The watermark: magic (8), version (u32 LE), sequence (u64 LE), CRC32 of the 20
/// bytes before it (u32 LE).
pub(crate) const WATERMARK_LEN: usize = 24;

/// The watermark bytes for `seq`.
pub(crate) fn watermark(seq: u64) -> [u8; WATERMARK_LEN] {
    let mut bytes = [0u8; WATERMARK_LEN];
    bytes[0..8].copy_from_slice(&WATERMARK_MAGIC);
    bytes[8..12].copy_from_slice(&WATERMARK_VERSION.to_le_bytes());
    bytes[12..20].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32fast::hash(&bytes[0..20]);
    bytes[20..24].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// The sequence a watermark file holds: `Ok(None)` when it holds nothing (empty, or
/// zeros: created but never written before a power loss), or what is wrong with it.
pub(crate) fn parse_watermark(bytes: &[u8]) -> Result<Option<u64>, String> {
    if bytes.iter().all(|&byte| byte == 0) {
        return Ok(None);
    }
    if bytes.len() != WATERMARK_LEN {
        return Err(format!(
            "it has {} bytes where a watermark has {WATERMARK_LEN}",
            bytes.len()
        ));
    }
    if bytes[0..8] != WATERMARK_MAGIC {
        return Err("it does not start with the watermark magic (MGDURABL)".into());
    }
    let crc = u32::from_le_bytes(bytes[20..24].try_into().expect("4 bytes"));
    if crc != crc32fast::hash(&bytes[0..20]) {
        return Err("it fails its checksum".into());
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != WATERMARK_VERSION {
        return Err(format!(
            "it has version {version}, this build reads version {WATERMARK_VERSION}"
        ));
    }
    Ok(Some(u64::from_le_bytes(
        bytes[12..20].try_into().expect("8 bytes"),
    )))
}

/// Whether `bytes`, which [`parse_watermark`] refused, are a watermark torn by a power
/// loss: its length and magic, and a checksum that fails (a rewrite in place, never
/// synced, that reached the disk in part). Its value can only lag the segments, which
/// are synced before it is written.
pub(crate) fn is_torn_watermark(bytes: &[u8]) -> bool {
    bytes.len() == WATERMARK_LEN
        && bytes[0..8] == WATERMARK_MAGIC
        && u32::from_le_bytes(bytes[20..24].try_into().expect("4 bytes"))
            != crc32fast::hash(&bytes[0..20])
}

/// Why a record could not be encoded.
#[derive(Debug)]
pub(crate) enum EncodeError {
    /// postcard refused the value.
    Postcard(postcard::Error),
    /// The payload would be longer than [`MAX_PAYLOAD_LEN`].
    TooLarge(usize),
}

/// Appends one record (frame, kind, sequence, postcard body) to `buffer`. On error
/// `buffer` is left as it was.
pub(crate) fn encode_record<T: Serialize + ?Sized>(
    buffer: &mut Vec<u8>,
    kind: u8,
    seq: u64,
    body: &T,
) -> Result<(), EncodeError> {
    let start = buffer.len();
    buffer.extend_from_slice(&[0u8; FRAME_LEN]);
    buffer.push(kind);
    buffer.extend_from_slice(&seq.to_le_bytes());
    if let Err(error) = postcard::to_io(body, &mut *buffer) {
        buffer.truncate(start);
        return Err(EncodeError::Postcard(error));
    }
    let payload_len = buffer.len() - start - FRAME_LEN;
    if payload_len > MAX_PAYLOAD_LEN {
        buffer.truncate(start);
        return Err(EncodeError::TooLarge(payload_len));
    }
    let crc = crc32fast::hash(&buffer[start + FRAME_LEN..]);
    buffer[start..start + 4].copy_from_slice(&(payload_len as u32).to_le_bytes());
    buffer[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// What is found at an offset of a segment.
#[derive(Debug)]
pub(crate) enum Frame<'a> {
    /// A whole record whose checksum holds.
    Whole {
        /// Its kind byte.
        kind: u8,
        /// Its sequence.
        seq: u64,
        /// Its postcard body.
        body: &'a [u8],
        /// The offset just after it.
        next: usize,
    },
    /// A record that runs past the end of the bytes.
    CutShort(String),
    /// A record that is all there but wrong (checksum, length, kind).
    Bad(String),
}

/// Reads the record at `offset` of `bytes`.
pub(crate) fn read_frame(bytes: &[u8], offset: usize) -> Frame<'_> {
    let remaining = bytes.len() - offset;
    if remaining < FRAME_LEN {
        return Frame::CutShort(format!(
            "a record frame is cut short ({remaining} of {FRAME_LEN} bytes)"
        ));
    }
    let payload_len =
        u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(bytes[offset + 4..offset + 8].try_into().expect("4 bytes"));
    if !(PAYLOAD_PREFIX_LEN..=MAX_PAYLOAD_LEN).contains(&payload_len) {
        return Frame::Bad(format!("a record has an impossible length ({payload_len})"));
    }
    if remaining - FRAME_LEN < payload_len {
        return Frame::CutShort(format!(
            "a record of {payload_len} bytes is cut short ({} bytes there)",
            remaining - FRAME_LEN
        ));
    }
    let payload = &bytes[offset + FRAME_LEN..offset + FRAME_LEN + payload_len];
    if crc32fast::hash(payload) != crc {
        return Frame::Bad("a record fails its checksum".into());
    }
    let kind = payload[0];
    if kind != KIND_ADMISSION && kind != KIND_OUTCOMES {
        return Frame::Bad(format!("a record has an unknown kind ({kind})"));
    }
    Frame::Whole {
        kind,
        seq: u64::from_le_bytes(payload[1..9].try_into().expect("8 bytes")),
        body: &payload[PAYLOAD_PREFIX_LEN..],
        next: offset + FRAME_LEN + payload_len,
    }
}

/// Looks for a whole record after `offset` (a damaged record followed by whole ones
/// is damage, not a torn write) whose sequence could follow `expected_seq`: the first
/// offset where one starts.
pub(crate) fn find_whole_record_after(
    bytes: &[u8],
    offset: usize,
    expected_seq: u64,
) -> Option<usize> {
    let end = bytes.len();
    let most_records = (end - offset) as u64 / (FRAME_LEN + PAYLOAD_PREFIX_LEN) as u64 + 1;
    for candidate in offset + 1..end.saturating_sub(FRAME_LEN + PAYLOAD_PREFIX_LEN - 1) {
        // The cheap fields first (kind, a plausible sequence, a length that fits),
        // then the checksum.
        let kind = bytes[candidate + FRAME_LEN];
        if kind != KIND_ADMISSION && kind != KIND_OUTCOMES {
            continue;
        }
        let seq_at = candidate + FRAME_LEN + 1;
        let seq = u64::from_le_bytes(bytes[seq_at..seq_at + 8].try_into().expect("8 bytes"));
        if seq < expected_seq || seq > expected_seq.saturating_add(most_records) {
            continue;
        }
        if let Frame::Whole { .. } = read_frame(bytes, candidate) {
            return Some(candidate);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written() {
        let mut buffer = Vec::new();
        encode_record(&mut buffer, KIND_ADMISSION, 7, &(1u8, "x")).unwrap();
        match read_frame(&buffer, 0) {
            Frame::Whole {
                kind,
                seq,
                body,
                next,
            } => {
                assert_eq!((kind, seq, next), (KIND_ADMISSION, 7, buffer.len()));
                assert_eq!(postcard::from_bytes::<(u8, &str)>(body).unwrap(), (1, "x"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            read_frame(&buffer[..buffer.len() - 1], 0),
            Frame::CutShort(_)
        ));
    }

    #[test]
    fn a_borrowed_admission_encodes_to_the_same_bytes_as_an_owned_one() {
        use crate::{
            Admission, AdmissionRef, AdmittedOutput, AdmittedOutputRef, AdmittedPosition,
            AdmittedPositionRef,
        };
        use mongoose_core::sink::OutputKey;
        use mongoose_core::Epoch;
        let key = OutputKey::new("lines", Epoch(2), 1, 99, 0, 3);
        let owned = Admission {
            state: b"state".to_vec(),
            positions: vec![AdmittedPosition {
                feed: "lines".into(),
                epoch: Epoch(2),
                lane: 1,
                position: 99,
            }],
            outputs: vec![AdmittedOutput {
                sink: "out".into(),
                key: key.clone(),
                payload: b"payload".to_vec(),
            }],
        };
        let borrowed = AdmissionRef {
            state: b"state",
            positions: &[AdmittedPositionRef {
                feed: "lines",
                epoch: Epoch(2),
                lane: 1,
                position: 99,
            }],
            outputs: &[AdmittedOutputRef {
                sink: "out",
                key: &key,
                payload: b"payload",
            }],
        };
        let (mut first, mut second) = (Vec::new(), Vec::new());
        encode_record(&mut first, KIND_ADMISSION, 1, &owned).unwrap();
        encode_record(&mut second, KIND_ADMISSION, 1, &borrowed).unwrap();
        assert_eq!(first, second);
        // Byte fields are written in one piece, in the format of a sequence of u8.
        let as_sequences = postcard::to_stdvec(&(b"state"
            .to_vec()
            .into_iter()
            .collect::<std::collections::VecDeque<u8>>(),))
        .unwrap();
        assert_eq!(postcard::to_stdvec(&owned).unwrap()[..6], as_sequences[..]);
        match read_frame(&first, 0) {
            Frame::Whole { body, .. } => {
                assert_eq!(postcard::from_bytes::<Admission>(body).unwrap(), owned)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_segment_header_and_name_carry_the_first_sequence_and_the_owner() {
        assert_eq!(segment_file_name(42), "outbox-00000000000000000042.log");
        assert_eq!(parse_segment_file_name(&segment_file_name(42)), Some(42));
        assert_eq!(parse_segment_file_name("outbox-42.log"), None);
        let owner = [7u8; 16];
        assert_eq!(
            check_segment_header(&segment_header(42, owner), 42),
            Ok(SegmentHeader {
                len: HEADER_LEN,
                owner: Some(owner)
            })
        );
        assert!(check_segment_header(&segment_header(42, owner), 43).is_err());
        for at in 0..HEADER_LEN {
            let mut header = segment_header(42, owner);
            header[at] ^= 1;
            assert!(check_segment_header(&header, 42).is_err(), "byte {at}");
        }
        // a version 1 header (no owner) is still read
        let mut v1 = [0u8; HEADER_LEN_V1];
        v1[0..8].copy_from_slice(&MAGIC);
        v1[8..12].copy_from_slice(&FORMAT_VERSION_1.to_le_bytes());
        v1[12..20].copy_from_slice(&42u64.to_le_bytes());
        let crc = crc32fast::hash(&v1[0..20]);
        v1[20..24].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            check_segment_header(&v1, 42),
            Ok(SegmentHeader {
                len: HEADER_LEN_V1,
                owner: None
            })
        );
        assert!(is_torn_header(&segment_header(42, owner)[..30], 42));
        assert!(is_torn_header(&[0u8; 10], 42));
        assert!(!is_torn_header(&segment_header(43, owner)[..30], 42));
    }

    #[test]
    fn a_watermark_reads_back_and_damage_is_named() {
        assert_eq!(parse_watermark(&watermark(1234)), Ok(Some(1234)));
        assert_eq!(parse_watermark(&[]), Ok(None));
        assert_eq!(parse_watermark(&[0u8; WATERMARK_LEN]), Ok(None));
        assert!(parse_watermark(&watermark(1234)[..20]).is_err());
        for at in 0..WATERMARK_LEN {
            let mut bytes = watermark(1234);
            bytes[at] ^= 0x10;
            assert!(parse_watermark(&bytes).is_err(), "byte {at}");
            // a changed magic is no torn rewrite; any other byte fails the checksum
            assert_eq!(is_torn_watermark(&bytes), at >= 8, "byte {at}");
        }
        assert!(!is_torn_watermark(&watermark(1234)[..20]));
    }
}
