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

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use mongoose_durable::disk::{Disk, RealDisk};
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

/// What [`SegmentWriter::recover`] found in a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Recovered {
    /// The position after the last valid record.
    pub(crate) end: u64,
    /// Whether the last record is a stop record.
    pub(crate) stopped: bool,
    /// Bytes of a torn tail that were cut.
    pub(crate) torn_bytes: u64,
}

/// Appends records to a recording's segments (the archiver's side).
#[derive(Debug)]
pub(crate) struct SegmentWriter {
    archive: PathBuf,
    identity: RecordingIdentity,
    segment_bytes: u64,
    file: File,
    path: PathBuf,
    /// The current segment's framing: [`Framing::Earlier`] only for the last segment of
    /// the earlier layout a recovery found, never appended to.
    framing: Framing,
    file_len: u64,
    records_in_segment: u64,
    pending: Vec<u8>,
    /// The position after the last record appended (pending or written).
    end: u64,
}

impl SegmentWriter {
    /// Starts a new recording (at `identity`'s start position).
    pub(crate) fn create(
        archive: &Path,
        identity: RecordingIdentity,
        segment_bytes: u64,
    ) -> Result<Self> {
        let dir = recording_dir(archive, identity.id);
        let new_folder = !dir.exists();
        fs::create_dir_all(&dir)
            .map_err(ArchiveError::io("create the recording directory", &dir))?;
        if new_folder {
            // the recording's folder is named durably before its first segment
            mongoose_durable::disk::sync_folder(archive)
                .map_err(ArchiveError::io("sync the archive folder", archive))?;
        }
        let start = identity.start_position;
        let (file, path) = SegmentWriter::new_segment(archive, &identity, start)?;
        Ok(SegmentWriter {
            archive: archive.to_path_buf(),
            identity,
            segment_bytes,
            file,
            path,
            framing: Framing::Layer,
            file_len: SEGMENT_HEADER_LEN,
            records_in_segment: 0,
            pending: Vec::with_capacity(256 << 10),
            end: start,
        })
    }

    /// Creates a segment: written under a temporary name and renamed into place, so
    /// a reader never finds a segment without its header.
    fn new_segment(
        archive: &Path,
        identity: &RecordingIdentity,
        start: u64,
    ) -> Result<(File, PathBuf)> {
        let path = segment_path(archive, identity.id, start);
        create_segment_on(&mut RealDisk, &path, &identity.segment_header(start))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(ArchiveError::io("open a new segment", &path))?;
        Ok((file, path))
    }

    /// Reopens a recording after a crash: checks every record of the last segment,
    /// cuts a torn tail (an incomplete or invalid last record with no whole record
    /// after it, reported) and appends after the last valid record; refuses damage in
    /// the middle (a bad record with a whole one after it), cutting nothing.
    pub(crate) fn recover(
        archive: &Path,
        identity: RecordingIdentity,
        segment_bytes: u64,
    ) -> Result<(SegmentWriter, Recovered)> {
        let id = identity.id;
        remove_temporary_segments(archive, id);
        let starts = segment_starts(archive, id)?;
        let Some(&last_start) = starts.last() else {
            let start = identity.start_position;
            let writer = SegmentWriter::create(archive, identity, segment_bytes)?;
            return Ok((
                writer,
                Recovered {
                    end: start,
                    stopped: false,
                    torn_bytes: 0,
                },
            ));
        };
        let path = segment_path(archive, id, last_start);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(ArchiveError::io("open a segment", &path))?;
        let len = file
            .metadata()
            .map_err(ArchiveError::io("read the size of a segment", &path))?
            .len();
        if len < EARLIER_HEADER_LEN {
            // created by an earlier release, its header never written: start the
            // segment again (this release names a segment only once its header is
            // synced)
            drop(file);
            let (file, path) = SegmentWriter::new_segment(archive, &identity, last_start)?;
            let writer = SegmentWriter {
                archive: archive.to_path_buf(),
                identity,
                segment_bytes,
                file,
                path,
                framing: Framing::Layer,
                file_len: SEGMENT_HEADER_LEN,
                records_in_segment: 0,
                pending: Vec::with_capacity(256 << 10),
                end: last_start,
            };
            return Ok((
                writer,
                Recovered {
                    end: last_start,
                    stopped: false,
                    torn_bytes: len,
                },
            ));
        }
        let format = check_segment_header(&file, &path, &identity, last_start)?;
        let header_len = format.header_len;
        let mut bytes = vec![0u8; len.saturating_sub(header_len) as usize];
        file.read_exact_at(&mut bytes, header_len)
            .map_err(ArchiveError::io("read a segment", &path))?;
        let mut offset = 0usize;
        let mut end = last_start;
        let mut stopped = false;
        let mut records = 0;
        while offset < bytes.len() {
            let bad = match format.framing.decode(&bytes[offset..]) {
                Decoded::Record(record) if record.position == end => {
                    end = record.end();
                    stopped = record.kind == RecordKind::Stop;
                    offset += record.stored_len();
                    records += 1;
                    continue;
                }
                Decoded::Record(record) => format!(
                    "a record at position {} where {end} was expected",
                    record.position
                ),
                Decoded::Incomplete { .. } => "a record cut short".to_string(),
                Decoded::Invalid(detail) => detail,
            };
            // a bad record with a whole record anywhere after it is damage in the
            // middle, not a torn tail: refused, never cut (what follows is recorded)
            if (offset + 1..bytes.len())
                .any(|later| matches!(format.framing.decode(&bytes[later..]), Decoded::Record(_)))
            {
                return Err(ArchiveError::Corrupt {
                    recording: id,
                    position: end,
                    path,
                    detail: format!(
                        "{bad} at byte {}, and whole records follow it: refusing to cut them",
                        header_len + offset as u64
                    ),
                });
            }
            tracing::warn!(recording = id, position = end, byte = header_len + offset as u64,
                %bad, "a bad record at the tail of the recording, nothing whole after it: a torn write");
            break;
        }
        let valid_len = header_len + offset as u64;
        let torn_bytes = len - valid_len;
        if torn_bytes > 0 {
            tracing::warn!(
                recording = id,
                segment = %path.display(),
                torn_bytes,
                position = end,
                "cutting the torn tail of a recording"
            );
            file.set_len(valid_len)
                .map_err(ArchiveError::io("cut the torn tail of a segment", &path))?;
            file.sync_all()
                .map_err(ArchiveError::io("sync a segment", &path))?;
        }
        if format.framing == Framing::Earlier {
            tracing::info!(recording = id, segment = %path.display(), records, position = end,
                "the last segment is of the earlier layout (MGARSEG1): it is read, never appended to; the recording continues in a new segment");
        }
        let writer = SegmentWriter {
            archive: archive.to_path_buf(),
            identity,
            segment_bytes,
            file,
            path,
            framing: format.framing,
            file_len: valid_len,
            records_in_segment: records,
            pending: Vec::with_capacity(256 << 10),
            end,
        };
        Ok((
            writer,
            Recovered {
                end,
                stopped,
                torn_bytes,
            },
        ))
    }

    /// The position after the last record appended.
    pub(crate) fn end(&self) -> u64 {
        self.end
    }

    /// Appends a message that starts at `position` (buffered until [`Self::flush`]).
    pub(crate) fn append_message(&mut self, position: u64, payload: &[u8]) -> Result<()> {
        debug_assert_eq!(position, self.end, "records are appended in stream order");
        self.roll_if_full(RECORD_HEADER_LEN + payload.len())?;
        encode_record(&mut self.pending, RecordKind::Message, position, payload)?;
        self.end = position + 4 + payload.len() as u64;
        self.records_in_segment += 1;
        if self.pending.len() >= 1 << 20 {
            self.flush()?;
        }
        Ok(())
    }

    /// Appends a gap marker `[from, to)`.
    pub(crate) fn append_gap(&mut self, from: u64, to: u64) -> Result<()> {
        debug_assert_eq!(from, self.end);
        self.roll_if_full(RECORD_HEADER_LEN + 8)?;
        encode_record(&mut self.pending, RecordKind::Gap, from, &to.to_le_bytes())?;
        self.end = to;
        self.records_in_segment += 1;
        Ok(())
    }

    /// Appends the stop record and writes everything, synchronously.
    pub(crate) fn stop(&mut self) -> Result<()> {
        if self.framing == Framing::Earlier {
            self.roll()?;
        }
        encode_record(&mut self.pending, RecordKind::Stop, self.end, &[])?;
        self.flush()?;
        self.file
            .sync_all()
            .map_err(ArchiveError::io("sync a segment", &self.path))
    }

    /// Writes the buffered records (readers see them from now on).
    pub(crate) fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.file
            .write_all_at(&self.pending, self.file_len)
            .map_err(ArchiveError::io("append to a segment", &self.path))?;
        self.file_len += self.pending.len() as u64;
        self.pending.clear();
        Ok(())
    }

    /// Forces the written records to the device.
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.flush()?;
        self.file
            .sync_data()
            .map_err(ArchiveError::io("sync a segment", &self.path))
    }

    /// Continues in a new segment when the record would take the segment past its size
    /// (unless it holds no record yet), or when it is of the earlier layout.
    fn roll_if_full(&mut self, record_len: usize) -> Result<()> {
        let len = self.file_len + self.pending.len() as u64;
        let fits = self.records_in_segment == 0 || len + record_len as u64 <= self.segment_bytes;
        if fits && self.framing == Framing::Layer {
            return Ok(());
        }
        self.roll()
    }

    /// Syncs the segment and continues in a new one named after the end. A segment of
    /// the earlier layout that holds no record has that name: it is replaced whole (a
    /// reader waiting in it follows the replacement).
    fn roll(&mut self) -> Result<()> {
        self.sync()?;
        let (file, path) = SegmentWriter::new_segment(&self.archive, &self.identity, self.end)?;
        self.file = file;
        self.path = path;
        self.framing = Framing::Layer;
        self.file_len = SEGMENT_HEADER_LEN;
        self.records_in_segment = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
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
}
