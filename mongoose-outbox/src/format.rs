//! The bytes on disk: segment headers and records (described in the crate docs).

use serde::Serialize;

/// The first eight bytes of every segment.
pub(crate) const MAGIC: [u8; 8] = *b"MGOUTBOX";
/// The version of the format this crate writes and reads.
pub(crate) const FORMAT_VERSION: u32 = 1;
/// A segment header: magic (8), version (u32 LE), first sequence (u64 LE), CRC32 of
/// the 20 bytes before it (u32 LE).
pub(crate) const HEADER_LEN: usize = 24;
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

/// The header of the segment that starts at `first_seq`.
pub(crate) fn segment_header(first_seq: u64) -> [u8; HEADER_LEN] {
    let mut header = [0u8; HEADER_LEN];
    header[0..8].copy_from_slice(&MAGIC);
    header[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    header[12..20].copy_from_slice(&first_seq.to_le_bytes());
    let crc = crc32fast::hash(&header[0..20]);
    header[20..24].copy_from_slice(&crc.to_le_bytes());
    header
}

/// Checks a segment header against the sequence its file name carries; the reason
/// when it is not right.
pub(crate) fn check_segment_header(header: &[u8], name_first_seq: u64) -> Result<(), String> {
    if header.len() < HEADER_LEN {
        return Err(format!(
            "the segment header is cut short ({} of {HEADER_LEN} bytes)",
            header.len()
        ));
    }
    if header[0..8] != MAGIC {
        return Err("the segment does not start with the outbox magic (MGOUTBOX)".into());
    }
    let crc = u32::from_le_bytes(header[20..24].try_into().expect("4 bytes"));
    if crc != crc32fast::hash(&header[0..20]) {
        return Err("the segment header fails its checksum".into());
    }
    let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(format!(
            "the segment has format version {version}, this build reads version {FORMAT_VERSION}"
        ));
    }
    let first_seq = u64::from_le_bytes(header[12..20].try_into().expect("8 bytes"));
    if first_seq != name_first_seq {
        return Err(format!(
            "the segment header says it starts at sequence {first_seq}, its name says {name_first_seq}"
        ));
    }
    Ok(())
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
    fn the_segment_header_and_name_carry_the_first_sequence() {
        assert_eq!(segment_file_name(42), "outbox-00000000000000000042.log");
        assert_eq!(parse_segment_file_name(&segment_file_name(42)), Some(42));
        assert_eq!(parse_segment_file_name("outbox-42.log"), None);
        assert!(check_segment_header(&segment_header(42), 42).is_ok());
        assert!(check_segment_header(&segment_header(42), 43).is_err());
        let mut header = segment_header(42);
        header[9] ^= 1;
        assert!(check_segment_header(&header, 42).is_err());
    }
}
