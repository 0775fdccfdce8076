//! Recording segment files: checksummed records, one file per `segment_bytes`.
//!
//! A recording `id` lives in the directory `<archive>/<id as 16 hex digits>/`; its
//! segments are named after the stream position of their first record
//! (`<position as 20 digits>.seg`). A segment (format version 2) is a record log of the
//! durable layer ([`mongoose_durable::log`]): the layer's header (format
//! `mongoose-archive-segment`, version 2, owner the recording's identity and the
//! segment's first position, 80 bytes), then one layer frame per record:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | frame length L (16 + the payload's length) |
//! | 4 | 4 | CRC-32 of the 4 length bytes, then bytes 8..8+L |
//! | 8 | 8 | stream position of the record's start |
//! | 16 | 4 | kind: 1 message, 2 gap (payload: the gap's end, `u64`), 3 stop |
//! | 20 | 4 | reserved (0) |
//! | 24 | n | payload |
//!
//! The owner (40 bytes, little-endian) is the recording id (`u64`), stream (`u32`),
//! session (`u32`), start position (`u64`) and start time (`u64`, ms since the Unix
//! epoch), as the catalog's `Started` event has them, then the segment's first
//! position (`u64`, as in its name).
//!
//! Segments of the earlier layout (version 1: a 32-byte header, magic `MGARSEG1`, then
//! records whose 24-byte header is the payload length, a CRC-32 of bytes 8..24 and the
//! payload, then the same position, kind and reserved fields) are still read, and never
//! appended to: the archiver continues a recording whose last segment is of that layout
//! in a new segment (replacing it whole when it holds no record).
//!
//! A record takes 24 bytes plus its payload in both layouts. A message at position `p`
//! with a payload of `n` bytes covers `[p, p + 4 + n)`, as its frame did in the
//! publication; a gap covers `[p, end)`; the next record starts where the previous one
//! ended. Positions are the stream's, carried in each record: nothing outside the
//! archive sees an offset in a segment. A new segment is created only after the
//! previous one holds all its records, so a reader that finds the segment named after
//! its position knows the previous one is complete.

use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use mongoose_durable::disk::Disk;
use mongoose_durable::header::Header;
use mongoose_durable::log::{self, FRAME_HEADER, MAX_RECORD};

use crate::catalog::RecordingDescriptor;
use crate::error::{ArchiveError, Result};

/// The format name in a segment's header.
pub(crate) const FORMAT: &str = "mongoose-archive-segment";
/// The segment format version this crate writes (a record log of the durable layer).
pub(crate) const VERSION: u32 = 2;
/// The owner field of a segment's header: recording id, stream, session, start
/// position, start time, the segment's first position.
const OWNER_LEN: usize = 8 + 4 + 4 + 8 + 8 + 8;
/// A segment's header length (the durable layer's: magic 4, length 2, version 4, name
/// length 1, name, owner length 1, owner, CRC-32 4).
pub(crate) const SEGMENT_HEADER_LEN: u64 =
    (4 + 2 + 4 + 1 + FORMAT.len() + 1 + OWNER_LEN + 4) as u64;
/// The magic of a segment of the earlier layout (version 1).
const EARLIER_MAGIC: &[u8; 8] = b"MGARSEG1";
/// The earlier layout's version.
const EARLIER_VERSION: u32 = 1;
/// The earlier layout's header length.
const EARLIER_HEADER_LEN: u64 = 32;
/// The bytes a record takes besides its payload, in both layouts.
pub(crate) const RECORD_HEADER_LEN: usize = 24;
/// A record's fields inside the layer's frame: position, kind, reserved.
const RECORD_FIELDS_LEN: usize = 16;
const _: () = assert!(FRAME_HEADER + RECORD_FIELDS_LEN == RECORD_HEADER_LEN);
/// The largest record payload of the earlier layout accepted when reading (a guard
/// against a damaged length).
const EARLIER_MAX_RECORD: usize = 64 << 20;

/// The kind of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordKind {
    Message,
    Gap,
    Stop,
}

impl RecordKind {
    fn code(self) -> u32 {
        match self {
            RecordKind::Message => 1,
            RecordKind::Gap => 2,
            RecordKind::Stop => 3,
        }
    }

    fn from_code(code: u32) -> Option<RecordKind> {
        match code {
            1 => Some(RecordKind::Message),
            2 => Some(RecordKind::Gap),
            3 => Some(RecordKind::Stop),
            _ => None,
        }
    }
}

/// Whom a segment belongs to: the recording as the catalog's `Started` event names it.
/// An archive made again at the same path numbers its recordings from 1 again, but they
/// start at another time, in another session: their segments are another owner's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordingIdentity {
    pub(crate) id: u64,
    pub(crate) stream: u32,
    pub(crate) session: u32,
    pub(crate) start_position: u64,
    pub(crate) started_unix_ms: u64,
}

impl RecordingIdentity {
    /// The identity of the recording `descriptor` describes.
    pub(crate) fn of(descriptor: &RecordingDescriptor) -> RecordingIdentity {
        RecordingIdentity {
            id: descriptor.id,
            stream: descriptor.stream,
            session: descriptor.session,
            start_position: descriptor.start_position,
            started_unix_ms: descriptor.started_unix_ms,
        }
    }

    /// The header of this recording's segment that starts at `start`.
    fn segment_header(&self, start: u64) -> Header {
        let mut owner = Vec::with_capacity(OWNER_LEN);
        owner.extend_from_slice(&self.id.to_le_bytes());
        owner.extend_from_slice(&self.stream.to_le_bytes());
        owner.extend_from_slice(&self.session.to_le_bytes());
        owner.extend_from_slice(&self.start_position.to_le_bytes());
        owner.extend_from_slice(&self.started_unix_ms.to_le_bytes());
        owner.extend_from_slice(&start.to_le_bytes());
        Header::new(FORMAT, VERSION, owner)
    }
}

/// How a segment's records are framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// The durable layer's frames (version 2): the checksum covers the length too.
    Layer,
    /// The earlier layout's records (version 1): read, never written.
    Earlier,
}

impl Framing {
    /// Decodes the record at the start of `buf`.
    pub(crate) fn decode(self, buf: &[u8]) -> Decoded<'_> {
        match self {
            Framing::Layer => decode_record(buf),
            Framing::Earlier => decode_earlier_record(buf),
        }
    }
}

/// A segment's header, checked: how its records are framed and where the first starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentFormat {
    pub(crate) framing: Framing,
    pub(crate) header_len: u64,
}

/// The directory of a recording.
pub(crate) fn recording_dir(archive: &Path, id: u64) -> PathBuf {
    archive.join(format!("{id:016x}"))
}

/// The path of the segment of `id` that starts at `position`.
pub(crate) fn segment_path(archive: &Path, id: u64, position: u64) -> PathBuf {
    recording_dir(archive, id).join(format!("{position:020}.seg"))
}

/// The start positions of the segments of a recording, in order.
pub(crate) fn segment_starts(archive: &Path, id: u64) -> Result<Vec<u64>> {
    let dir = recording_dir(archive, id);
    let mut starts = Vec::new();
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(starts),
        Err(error) => return Err(ArchiveError::io("list the recording", &dir)(error)),
    };
    for entry in entries {
        let entry = entry.map_err(ArchiveError::io("list the recording", &dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(stem) = name.strip_suffix(".seg") {
            if let Ok(start) = stem.parse::<u64>() {
                starts.push(start);
            }
        }
    }
    starts.sort_unstable();
    Ok(starts)
}

/// Removes segments a crash left under their temporary name (never read).
fn remove_temporary_segments(archive: &Path, id: u64) {
    let Ok(entries) = fs::read_dir(recording_dir(archive, id)) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.to_str().is_some_and(|name| name.ends_with(".seg.new")) {
            if let Err(error) = fs::remove_file(&path) {
                tracing::warn!(segment = %path.display(), %error, "cannot remove a temporary segment");
            }
        }
    }
}

/// Appends a record's frame (the durable layer's) to `out`, framed in place
/// ([`log::begin_frame`], [`log::finish_frame`]: no allocation per record).
///
/// # Errors
/// [`ArchiveError::Durable`] (`TooLarge`) for a payload over the layer's
/// [`MAX_RECORD`]; `out` is then as it was.
pub(crate) fn encode_record(
    out: &mut Vec<u8>,
    kind: RecordKind,
    position: u64,
    payload: &[u8],
) -> Result<()> {
    let frame = log::begin_frame(out);
    out.extend_from_slice(&position.to_le_bytes());
    out.extend_from_slice(&kind.code().to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(payload);
    log::finish_frame(out, frame)?;
    Ok(())
}

/// A record decoded from a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record<'a> {
    pub(crate) kind: RecordKind,
    pub(crate) position: u64,
    pub(crate) payload: &'a [u8],
}

impl Record<'_> {
    /// The stream position after the record.
    pub(crate) fn end(&self) -> u64 {
        match self.kind {
            RecordKind::Message => self.position + 4 + self.payload.len() as u64,
            RecordKind::Gap => u64::from_le_bytes(
                self.payload
                    .get(..8)
                    .and_then(|bytes| bytes.try_into().ok())
                    .unwrap_or([0; 8]),
            )
            .max(self.position),
            RecordKind::Stop => self.position,
        }
    }

    /// The bytes the record takes in the segment (the same in both layouts).
    pub(crate) fn stored_len(&self) -> usize {
        RECORD_HEADER_LEN + self.payload.len()
    }
}

/// What [`Framing::decode`] found.
#[derive(Debug)]
pub(crate) enum Decoded<'a> {
    /// A whole, valid record.
    Record(Record<'a>),
    /// The buffer ends inside the record (or before it).
    Incomplete {
        /// The bytes the record needs, when its length was read.
        needed: Option<usize>,
    },
    /// The bytes are there but do not form a valid record.
    Invalid(String),
}

/// Decodes the record (a layer frame) at the start of `buf`.
pub(crate) fn decode_record(buf: &[u8]) -> Decoded<'_> {
    if buf.len() < FRAME_HEADER {
        return Decoded::Incomplete { needed: None };
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
    if len > MAX_RECORD {
        return Decoded::Invalid(format!("a record length of {len} bytes"));
    }
    let total = FRAME_HEADER + len;
    if buf.len() < total {
        return Decoded::Incomplete {
            needed: Some(total),
        };
    }
    let frame = match log::read_frame(buf, 0) {
        Ok(frame) => frame,
        Err(fault) => return Decoded::Invalid(fault.reason().to_string()),
    };
    let Some((fields, payload)) = frame.payload.split_at_checked(RECORD_FIELDS_LEN) else {
        return Decoded::Invalid(format!(
            "a record of {len} bytes, shorter than its position and kind"
        ));
    };
    decode_fields(fields, payload)
}

/// A record from its position, kind and reserved fields (16 bytes) and its payload.
fn decode_fields<'a>(fields: &[u8], payload: &'a [u8]) -> Decoded<'a> {
    let code = u32::from_le_bytes(fields[8..12].try_into().expect("4 bytes"));
    let Some(kind) = RecordKind::from_code(code) else {
        return Decoded::Invalid(format!("an unknown record kind {code}"));
    };
    Decoded::Record(Record {
        kind,
        position: u64::from_le_bytes(fields[0..8].try_into().expect("8 bytes")),
        payload,
    })
}

/// Decodes a record of the earlier layout at the start of `buf`.
fn decode_earlier_record(buf: &[u8]) -> Decoded<'_> {
    if buf.len() < RECORD_HEADER_LEN {
        return Decoded::Incomplete { needed: None };
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
    if len > EARLIER_MAX_RECORD {
        return Decoded::Invalid(format!("a record length of {len} bytes"));
    }
    let total = RECORD_HEADER_LEN + len;
    if buf.len() < total {
        return Decoded::Incomplete {
            needed: Some(total),
        };
    }
    let stored_crc = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
    let mut crc = crc32fast::Hasher::new();
    crc.update(&buf[8..total]);
    if crc.finalize() != stored_crc {
        return Decoded::Invalid("a checksum mismatch".into());
    }
    decode_fields(&buf[8..RECORD_HEADER_LEN], &buf[RECORD_HEADER_LEN..total])
}

/// The header of a segment of the earlier layout.
fn earlier_segment_header(id: u64, start: u64) -> [u8; EARLIER_HEADER_LEN as usize] {
    let mut header = [0u8; EARLIER_HEADER_LEN as usize];
    header[0..8].copy_from_slice(EARLIER_MAGIC);
    header[8..12].copy_from_slice(&EARLIER_VERSION.to_le_bytes());
    header[16..24].copy_from_slice(&id.to_le_bytes());
    header[24..32].copy_from_slice(&start.to_le_bytes());
    header
}

/// Checks the header of the segment `file` (at `path`) of the recording `identity`
/// that starts at `start`: the durable layer's header naming this recording and
/// position, or one of the earlier layout naming its id and position.
///
/// # Errors
/// [`ArchiveError::Durable`] for a layer header that is damaged, of another format or
/// version, or of another owner (another recording, or this one at another position);
/// [`ArchiveError::BadFormat`] for an earlier header that does not name the recording
/// and position, or a file that has neither.
pub(crate) fn check_segment_header(
    file: &File,
    path: &Path,
    identity: &RecordingIdentity,
    start: u64,
) -> Result<SegmentFormat> {
    // the longest header the layer writes: a name of 64 bytes, an owner of 255
    let mut bytes = vec![0u8; 4 + 2 + 4 + 1 + 64 + 1 + 255 + 4];
    let mut read = 0;
    while read < bytes.len() {
        let more = file
            .read_at(&mut bytes[read..], read as u64)
            .map_err(ArchiveError::io("read the segment header", path))?;
        if more == 0 {
            break;
        }
        read += more;
    }
    let bytes = &bytes[..read];
    if bytes.starts_with(&mongoose_durable::header::MAGIC) {
        let header_len = identity.segment_header(start).verify(path, bytes)?;
        return Ok(SegmentFormat {
            framing: Framing::Layer,
            header_len: header_len as u64,
        });
    }
    if !bytes.starts_with(EARLIER_MAGIC) {
        return Err(ArchiveError::BadFormat {
            path: path.to_path_buf(),
            what: "mongoose-archive segment",
            detail: "it starts with neither the durable layer's header (MGDH) nor the earlier segment magic (MGARSEG1)".into(),
        });
    }
    if bytes.get(..EARLIER_HEADER_LEN as usize)
        != Some(&earlier_segment_header(identity.id, start)[..])
    {
        return Err(ArchiveError::BadFormat {
            path: path.to_path_buf(),
            what: "mongoose-archive segment",
            detail: format!(
                "the header does not name recording {} at position {start}",
                identity.id
            ),
        });
    }
    Ok(SegmentFormat {
        framing: Framing::Earlier,
        header_len: EARLIER_HEADER_LEN,
    })
}

/// Creates the segment `path` holding `header` on `disk`, by the durable layer's atomic
/// replace through the temporary name `.seg.new` (the name earlier releases used): the
/// header written and synced, renamed into place, and the recording's folder synced, so
/// that a power loss never leaves the name without its header, nor loses the name once
/// records follow it. Once per segment.
fn create_segment_on<D: Disk>(disk: &mut D, path: &Path, header: &Header) -> Result<()> {
    let temporary = path.with_extension("seg.new");
    mongoose_durable::replace::replace_via(disk, path, &temporary, &header.encode()?)?;
    Ok(())
}

mod writer;

pub(crate) use writer::SegmentWriter;

#[cfg(test)]
mod tests;
