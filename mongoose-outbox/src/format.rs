//! The bytes on disk: segment headers and records (described in the crate docs).
//!
//! A segment of this build (format version 3) is a record log of the durable layer
//! (`mongoose_durable::log`): the layer's header (format [`SEGMENT_FORMAT`], version
//! [`FORMAT_VERSION`], owner the outbox's owner and the segment's first sequence), then
//! the layer's frames. Segments of versions 1 and 2 (an `MGOUTBOX` header, frames whose
//! checksum covers the payload only) are still read, and never appended to.

use std::path::Path;

use mongoose_durable::header::Header;
use mongoose_durable::log::{self, FrameFault};
use serde::Serialize;

/// The format name in a segment's header.
pub(crate) const SEGMENT_FORMAT: &str = "mongoose-outbox-segment";
/// The version of the segment format this crate writes: version 3 is a record log of
/// the durable layer. Versions 1 and 2 are still read.
pub(crate) const FORMAT_VERSION: u32 = 3;
/// The first eight bytes of a segment of the earlier layout (versions 1 and 2).
pub(crate) const MAGIC: [u8; 8] = *b"MGOUTBOX";
/// The earlier layout with the owner's identity in its header: read, never written.
pub(crate) const FORMAT_VERSION_2: u32 = 2;
/// The first format version, without an owner: read, never written.
pub(crate) const FORMAT_VERSION_1: u32 = 1;
/// A version 1 segment header: magic (8), version (u32 LE), first sequence (u64 LE),
/// CRC32 of the 20 bytes before it (u32 LE).
pub(crate) const HEADER_LEN_V1: usize = 24;
/// A version 2 segment header: magic (8), version (u32 LE), first sequence (u64 LE),
/// owner (16 bytes), CRC32 of the 36 bytes before it (u32 LE).
pub(crate) const HEADER_LEN_V2: usize = 40;
/// The owner field of a version 3 header: the owner (16 bytes), then the segment's
/// first sequence (u64 LE).
const OWNER_FIELD_LEN: usize = 24;
/// A version 3 segment header: the layer's (magic 4, length 2, version 4, name length
/// 1, name, owner length 1, owner 24, CRC-32 4).
pub(crate) const HEADER_LEN: usize = 4 + 2 + 4 + 1 + SEGMENT_FORMAT.len() + 1 + OWNER_FIELD_LEN + 4;
/// Where the owner field starts in a version 3 header.
const OWNER_AT: usize = HEADER_LEN - 4 - OWNER_FIELD_LEN;
/// A record's frame: payload length (u32 LE), CRC32 (u32 LE).
pub(crate) const FRAME_LEN: usize = log::FRAME_HEADER;
/// The payload's fixed prefix: kind (1 byte), sequence (u64 LE).
pub(crate) const PAYLOAD_PREFIX_LEN: usize = 9;
/// The largest payload a record of the earlier layout may have.
const MAX_PAYLOAD_LEN_V2: usize = 1 << 30;
/// The largest payload a record may have (the layer's limit).
pub(crate) const MAX_PAYLOAD_LEN: usize = log::MAX_RECORD;
/// The kind byte of an admission record.
pub(crate) const KIND_ADMISSION: u8 = 1;
/// The kind byte of an outcome record.
pub(crate) const KIND_OUTCOMES: u8 = 2;

/// How a segment's records are framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// The durable layer's frames (version 3): the checksum covers the length and the
    /// payload.
    Layer,
    /// The earlier layout's frames (versions 1 and 2): the checksum covers the payload.
    Earlier,
}

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

/// The layer's header of the segment that starts at `first_seq`, written by `owner`.
fn layer_header(first_seq: u64, owner: [u8; 16]) -> Header {
    let mut field = Vec::with_capacity(OWNER_FIELD_LEN);
    field.extend_from_slice(&owner);
    field.extend_from_slice(&first_seq.to_le_bytes());
    Header::new(SEGMENT_FORMAT, FORMAT_VERSION, field)
}

/// The (version 3) header of the segment that starts at `first_seq`, written by `owner`.
pub(crate) fn segment_header(first_seq: u64, owner: [u8; 16]) -> [u8; HEADER_LEN] {
    let bytes = layer_header(first_seq, owner)
        .encode()
        .expect("a format name and an owner within the layer's limits");
    bytes.try_into().expect("HEADER_LEN bytes")
}

/// A segment header read back: its length, its owner (`None` for a version 1 segment,
/// which has none) and how its records are framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    /// Where its first record starts.
    pub(crate) len: usize,
    /// The owner it was written for (versions 2 and 3).
    pub(crate) owner: Option<[u8; 16]>,
    /// Its records' framing.
    pub(crate) framing: Framing,
}

/// Whether `bytes` (the whole of a segment file) can be a header cut short while it was
/// written: a prefix of a header of `first_seq` (any owner; of this version or of
/// version 2, which the build before wrote), or zeros.
pub(crate) fn is_torn_header(bytes: &[u8], first_seq: u64) -> bool {
    if bytes.iter().all(|&byte| byte == 0) {
        return bytes.len() < HEADER_LEN;
    }
    if bytes.len() < HEADER_LEN_V2 && bytes.len().min(MAGIC.len()) > 0 {
        let known = bytes.len().min(MAGIC.len());
        if bytes[..known] == MAGIC[..known] {
            // magic, version and first sequence are known; the owner and the checksum
            // are not
            let mut expected = Vec::with_capacity(20);
            expected.extend_from_slice(&MAGIC);
            expected.extend_from_slice(&FORMAT_VERSION_2.to_le_bytes());
            expected.extend_from_slice(&first_seq.to_le_bytes());
            let known = bytes.len().min(20);
            return bytes[..known] == expected[..known];
        }
    }
    if bytes.len() >= HEADER_LEN {
        return false;
    }
    // everything but the owner and the checksum is known
    let expected = segment_header(first_seq, [0; 16]);
    let unknown = |at: usize| (OWNER_AT..OWNER_AT + 16).contains(&at) || at >= HEADER_LEN - 4;
    bytes
        .iter()
        .zip(&expected)
        .enumerate()
        .all(|(at, (byte, wanted))| unknown(at) || byte == wanted)
}

/// Checks a segment header against the sequence its file name carries; the header, or
/// the reason it is not right.
pub(crate) fn check_segment_header(
    header: &[u8],
    name_first_seq: u64,
) -> Result<SegmentHeader, String> {
    if header.starts_with(&mongoose_durable::header::MAGIC) {
        return check_layer_header(header, name_first_seq);
    }
    if header.len() < 12 {
        return Err(format!(
            "the segment header is cut short ({} bytes)",
            header.len()
        ));
    }
    if header[0..8] != MAGIC {
        return Err(
            "the segment starts with neither the durable layer's header (MGDH) nor the earlier outbox magic (MGOUTBOX)"
                .into(),
        );
    }
    let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
    let len = match version {
        FORMAT_VERSION_1 => HEADER_LEN_V1,
        FORMAT_VERSION_2 => HEADER_LEN_V2,
        _ => {
            // a flipped version byte fails the checksum too; say that first
            return Err(format!(
                "the segment has format version {version} in an MGOUTBOX header, this build reads versions {FORMAT_VERSION_1} and {FORMAT_VERSION_2} there (or the header is damaged)"
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
    let owner = (version == FORMAT_VERSION_2).then(|| header[20..36].try_into().expect("16 bytes"));
    Ok(SegmentHeader {
        len,
        owner,
        framing: Framing::Earlier,
    })
}

/// Checks a version 3 header (the durable layer's).
fn check_layer_header(bytes: &[u8], name_first_seq: u64) -> Result<SegmentHeader, String> {
    let (found, len) = Header::decode(Path::new(""), bytes).map_err(|error| match error {
        mongoose_durable::DurableError::DamagedHeader { reason, .. } => {
            format!("the segment header is damaged ({reason})")
        }
        other => other.to_string(),
    })?;
    if found.format != SEGMENT_FORMAT {
        return Err(format!(
            "the segment is a {} file, not an outbox segment ({SEGMENT_FORMAT})",
            found.format
        ));
    }
    if found.version != FORMAT_VERSION {
        return Err(format!(
            "the segment has format version {}, this build reads versions {FORMAT_VERSION_1} to {FORMAT_VERSION}",
            found.version
        ));
    }
    if found.owner.len() != OWNER_FIELD_LEN {
        return Err(format!(
            "the segment header's owner has {} bytes where an outbox segment's has {OWNER_FIELD_LEN}",
            found.owner.len()
        ));
    }
    let first_seq = u64::from_le_bytes(found.owner[16..24].try_into().expect("8 bytes"));
    if first_seq != name_first_seq {
        return Err(format!(
            "the segment header says it starts at sequence {first_seq}, its name says {name_first_seq}"
        ));
    }
    Ok(SegmentHeader {
        len,
        owner: Some(found.owner[..16].try_into().expect("16 bytes")),
        framing: Framing::Layer,
    })
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

/// Appends one record (the layer's frame around kind, sequence and postcard body) to
/// `buffer`. On error `buffer` is left as it was.
pub(crate) fn encode_record<T: Serialize + ?Sized>(
    buffer: &mut Vec<u8>,
    kind: u8,
    seq: u64,
    body: &T,
) -> Result<(), EncodeError> {
    let start = buffer.len();
    let frame = log::begin_frame(buffer);
    buffer.push(kind);
    buffer.extend_from_slice(&seq.to_le_bytes());
    if let Err(error) = postcard::to_io(body, &mut *buffer) {
        buffer.truncate(start);
        return Err(EncodeError::Postcard(error));
    }
    let payload_len = buffer.len() - start - FRAME_LEN;
    log::finish_frame(buffer, frame).map_err(|_| EncodeError::TooLarge(payload_len))?;
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

/// Reads the record at `offset` of `bytes`, framed as `framing` says.
pub(crate) fn read_frame(bytes: &[u8], offset: usize, framing: Framing) -> Frame<'_> {
    let (payload, next) = match framing {
        Framing::Layer => match log::read_frame(bytes, offset) {
            Ok(frame) => (frame.payload, frame.next),
            Err(FrameFault::CutShort(reason)) => return Frame::CutShort(reason.to_owned()),
            Err(FrameFault::Bad(reason)) => return Frame::Bad(reason.to_owned()),
        },
        Framing::Earlier => match read_earlier_frame(bytes, offset) {
            Ok(found) => found,
            Err(frame) => return frame,
        },
    };
    if payload.len() < PAYLOAD_PREFIX_LEN {
        return Frame::Bad(format!(
            "a record of {} bytes, too short for its kind and sequence",
            payload.len()
        ));
    }
    let kind = payload[0];
    if kind != KIND_ADMISSION && kind != KIND_OUTCOMES {
        return Frame::Bad(format!("a record has an unknown kind ({kind})"));
    }
    Frame::Whole {
        kind,
        seq: u64::from_le_bytes(payload[1..9].try_into().expect("8 bytes")),
        body: &payload[PAYLOAD_PREFIX_LEN..],
        next,
    }
}

/// The payload and the end of the earlier layout's frame at `offset` (its checksum
/// covers the payload only), or what is wrong with it.
fn read_earlier_frame(bytes: &[u8], offset: usize) -> Result<(&[u8], usize), Frame<'_>> {
    let remaining = bytes.len() - offset;
    if remaining < FRAME_LEN {
        return Err(Frame::CutShort(format!(
            "a record frame is cut short ({remaining} of {FRAME_LEN} bytes)"
        )));
    }
    let payload_len =
        u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(bytes[offset + 4..offset + 8].try_into().expect("4 bytes"));
    if !(PAYLOAD_PREFIX_LEN..=MAX_PAYLOAD_LEN_V2).contains(&payload_len) {
        return Err(Frame::Bad(format!(
            "a record has an impossible length ({payload_len})"
        )));
    }
    if remaining - FRAME_LEN < payload_len {
        return Err(Frame::CutShort(format!(
            "a record of {payload_len} bytes is cut short ({} bytes there)",
            remaining - FRAME_LEN
        )));
    }
    let payload = &bytes[offset + FRAME_LEN..offset + FRAME_LEN + payload_len];
    if crc32fast::hash(payload) != crc {
        return Err(Frame::Bad("a record fails its checksum".into()));
    }
    Ok((payload, offset + FRAME_LEN + payload_len))
}

/// Looks for a whole record after `offset` (a damaged record followed by whole ones
/// is damage, not a torn write) whose sequence could follow `expected_seq`: the first
/// offset where one starts.
pub(crate) fn find_whole_record_after(
    bytes: &[u8],
    offset: usize,
    expected_seq: u64,
    framing: Framing,
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
        if let Frame::Whole { .. } = read_frame(bytes, candidate, framing) {
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
        match read_frame(&buffer, 0, Framing::Layer) {
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
            read_frame(&buffer[..buffer.len() - 1], 0, Framing::Layer),
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
        match read_frame(&first, 0, Framing::Layer) {
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
        let header = segment_header(42, owner);
        assert_eq!(
            check_segment_header(&header, 42),
            Ok(SegmentHeader {
                len: HEADER_LEN,
                owner: Some(owner),
                framing: Framing::Layer,
            })
        );
        // the durable layer's header, naming the format, its version and the owner
        let (found, len) = Header::decode(Path::new("segment"), &header).unwrap();
        assert_eq!(
            (found.format.as_str(), found.version, len),
            (SEGMENT_FORMAT, 3, HEADER_LEN)
        );
        assert_eq!(found.owner[..16], owner);
        assert!(check_segment_header(&header, 43).is_err());
        for at in 0..HEADER_LEN {
            let mut header = segment_header(42, owner);
            header[at] ^= 1;
            assert!(check_segment_header(&header, 42).is_err(), "byte {at}");
        }
        // a version 1 header (no owner) and a version 2 header are still read
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
                owner: None,
                framing: Framing::Earlier,
            })
        );
        let mut v2 = [0u8; HEADER_LEN_V2];
        v2[0..8].copy_from_slice(&MAGIC);
        v2[8..12].copy_from_slice(&FORMAT_VERSION_2.to_le_bytes());
        v2[12..20].copy_from_slice(&42u64.to_le_bytes());
        v2[20..36].copy_from_slice(&owner);
        let crc = crc32fast::hash(&v2[0..36]);
        v2[36..40].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            check_segment_header(&v2, 42),
            Ok(SegmentHeader {
                len: HEADER_LEN_V2,
                owner: Some(owner),
                framing: Framing::Earlier,
            })
        );
        for cut in 0..HEADER_LEN {
            assert!(
                is_torn_header(&segment_header(42, owner)[..cut], 42),
                "{cut}"
            );
        }
        assert!(!is_torn_header(&segment_header(42, owner), 42));
        assert!(is_torn_header(&v2[..30], 42));
        assert!(is_torn_header(&[0u8; 10], 42));
        assert!(!is_torn_header(&segment_header(43, owner)[..55], 42));
        assert!(!is_torn_header(&v2[..30], 43));
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
