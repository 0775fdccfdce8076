//! Recording segment files: checksummed records, one file per `segment_bytes`.
//!
//! A recording `id` lives in the directory `<archive>/<id as 16 hex digits>/`; its
//! segments are named after the stream position of their first record
//! (`<position as 20 digits>.seg`). A segment starts with a 32-byte header
//! (magic `MGARSEG1`, version, recording id, start position) followed by records,
//! each a 24-byte little-endian header and a payload:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | payload length |
//! | 4 | 4 | CRC-32 of bytes 8..24 and the payload |
//! | 8 | 8 | stream position of the record's start |
//! | 16 | 4 | kind: 1 message, 2 gap (payload: the gap's end, `u64`), 3 stop |
//! | 20 | 4 | reserved (0) |
//!
//! A message at position `p` with a payload of `n` bytes covers `[p, p + 4 + n)`, as
//! its frame did in the publication; a gap covers `[p, end)`; the next record starts
//! where the previous one ended. A new segment is created only after the previous one
//! holds all its records, so a reader that finds the segment named after its position
//! knows the previous one is complete.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use mongoose_durable::disk::{Disk, DiskFile, RealDisk};

use crate::error::{ArchiveError, Result};

const MAGIC: &[u8; 8] = b"MGARSEG1";
const VERSION: u32 = 1;
/// The segment file header length.
pub(crate) const SEGMENT_HEADER_LEN: u64 = 32;
/// A record header's length.
pub(crate) const RECORD_HEADER_LEN: usize = 24;
/// The largest record payload accepted when reading (a guard against a damaged length).
const MAX_RECORD: usize = 64 << 20;

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

/// Encodes a record into `out`.
pub(crate) fn encode_record(out: &mut Vec<u8>, kind: RecordKind, position: u64, payload: &[u8]) {
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

    /// The bytes the record takes in the segment.
    pub(crate) fn stored_len(&self) -> usize {
        RECORD_HEADER_LEN + self.payload.len()
    }
}

/// What [`decode_record`] found.
#[derive(Debug)]
pub(crate) enum Decoded<'a> {
    /// A whole, valid record.
    Record(Record<'a>),
    /// The buffer ends inside the record (or before it).
    Incomplete {
        /// The bytes the record needs, when its header was read.
        needed: Option<usize>,
    },
    /// The bytes are there but do not form a valid record.
    Invalid(String),
}

/// Decodes the record at the start of `buf`.
pub(crate) fn decode_record(buf: &[u8]) -> Decoded<'_> {
    if buf.len() < RECORD_HEADER_LEN {
        return Decoded::Incomplete { needed: None };
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
    if len > MAX_RECORD {
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
    let code = u32::from_le_bytes(buf[16..20].try_into().expect("4 bytes"));
    let Some(kind) = RecordKind::from_code(code) else {
        return Decoded::Invalid(format!("an unknown record kind {code}"));
    };
    Decoded::Record(Record {
        kind,
        position: u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes")),
        payload: &buf[RECORD_HEADER_LEN..total],
    })
}

fn segment_header(id: u64, start: u64) -> [u8; SEGMENT_HEADER_LEN as usize] {
    let mut header = [0u8; SEGMENT_HEADER_LEN as usize];
    header[0..8].copy_from_slice(MAGIC);
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    header[16..24].copy_from_slice(&id.to_le_bytes());
    header[24..32].copy_from_slice(&start.to_le_bytes());
    header
}

/// Checks a segment's header.
pub(crate) fn check_segment_header(file: &File, path: &Path, id: u64, start: u64) -> Result<()> {
    let mut header = [0u8; SEGMENT_HEADER_LEN as usize];
    file.read_exact_at(&mut header, 0)
        .map_err(ArchiveError::io("read the segment header", path))?;
    if header != segment_header(id, start) {
        return Err(ArchiveError::BadFormat {
            path: path.to_path_buf(),
            what: "mongoose-archive segment",
            detail: format!("the header does not name recording {id} at position {start}"),
        });
    }
    Ok(())
}

/// Creates the segment `path` of recording `id` starting at `start` on `disk`: its
/// header written under the temporary name `.seg.new` and synced, renamed into place,
/// and the recording's folder synced, so that a power loss never leaves the name
/// without its header, nor loses the name once records follow it. Once per segment.
fn create_segment_on<D: Disk>(disk: &mut D, path: &Path, id: u64, start: u64) -> Result<D::File> {
    let temporary = path.with_extension("seg.new");
    let mut file = disk
        .create(&temporary)
        .map_err(ArchiveError::io("create a segment", &temporary))?;
    file.write_all(&segment_header(id, start))
        .map_err(ArchiveError::io("write a segment header", &temporary))?;
    file.sync()
        .map_err(ArchiveError::io("sync a segment header", &temporary))?;
    disk.rename(&temporary, path)
        .map_err(ArchiveError::io("name a new segment", path))?;
    let folder = path.parent().unwrap_or(Path::new("."));
    disk.sync_folder(folder)
        .map_err(ArchiveError::io("sync the recording's folder", folder))?;
    Ok(file)
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
    id: u64,
    segment_bytes: u64,
    file: File,
    path: PathBuf,
    file_len: u64,
    records_in_segment: u64,
    pending: Vec<u8>,
    /// The position after the last record appended (pending or written).
    end: u64,
}

impl SegmentWriter {
    /// Starts a new recording at `start`.
    pub(crate) fn create(archive: &Path, id: u64, start: u64, segment_bytes: u64) -> Result<Self> {
        let dir = recording_dir(archive, id);
        let new_folder = !dir.exists();
        fs::create_dir_all(&dir)
            .map_err(ArchiveError::io("create the recording directory", &dir))?;
        if new_folder {
            // the recording's folder is named durably before its first segment
            mongoose_durable::disk::sync_folder(archive)
                .map_err(ArchiveError::io("sync the archive folder", archive))?;
        }
        let (file, path) = SegmentWriter::new_segment(archive, id, start)?;
        Ok(SegmentWriter {
            archive: archive.to_path_buf(),
            id,
            segment_bytes,
            file,
            path,
            file_len: SEGMENT_HEADER_LEN,
            records_in_segment: 0,
            pending: Vec::with_capacity(256 << 10),
            end: start,
        })
    }

    /// Creates a segment: written under a temporary name and renamed into place, so
    /// a reader never finds a segment without its header.
    fn new_segment(archive: &Path, id: u64, start: u64) -> Result<(File, PathBuf)> {
        let path = segment_path(archive, id, start);
        let file = create_segment_on(&mut RealDisk, &path, id, start)?;
        Ok((file, path))
    }

    /// Reopens a recording after a crash: checks every record of the last segment,
    /// cuts a torn tail (an incomplete or invalid last record) and appends after the
    /// last valid record.
    pub(crate) fn recover(
        archive: &Path,
        id: u64,
        start: u64,
        segment_bytes: u64,
    ) -> Result<(SegmentWriter, Recovered)> {
        remove_temporary_segments(archive, id);
        let starts = segment_starts(archive, id)?;
        let Some(&last_start) = starts.last() else {
            let writer = SegmentWriter::create(archive, id, start, segment_bytes)?;
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
        if len < SEGMENT_HEADER_LEN {
            // created but its header never written: start the segment again
            drop(file);
            let (file, path) = SegmentWriter::new_segment(archive, id, last_start)?;
            let writer = SegmentWriter {
                archive: archive.to_path_buf(),
                id,
                segment_bytes,
                file,
                path,
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
        check_segment_header(&file, &path, id, last_start)?;
        let mut bytes = vec![0u8; (len - SEGMENT_HEADER_LEN) as usize];
        file.read_exact_at(&mut bytes, SEGMENT_HEADER_LEN)
            .map_err(ArchiveError::io("read a segment", &path))?;
        let mut offset = 0usize;
        let mut end = last_start;
        let mut stopped = false;
        let mut records = 0;
        while offset < bytes.len() {
            let bad = match decode_record(&bytes[offset..]) {
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
                .any(|later| matches!(decode_record(&bytes[later..]), Decoded::Record(_)))
            {
                return Err(ArchiveError::Corrupt {
                    recording: id,
                    position: end,
                    path,
                    detail: format!(
                        "{bad} at byte {}, and whole records follow it: refusing to cut them",
                        SEGMENT_HEADER_LEN + offset as u64
                    ),
                });
            }
            tracing::warn!(recording = id, position = end, byte = SEGMENT_HEADER_LEN + offset as u64,
                %bad, "a bad record at the tail of the recording, nothing whole after it: a torn write");
            break;
        }
        let valid_len = SEGMENT_HEADER_LEN + offset as u64;
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
        let writer = SegmentWriter {
            archive: archive.to_path_buf(),
            id,
            segment_bytes,
            file,
            path,
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
        encode_record(&mut self.pending, RecordKind::Message, position, payload);
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
        encode_record(&mut self.pending, RecordKind::Gap, from, &to.to_le_bytes());
        self.end = to;
        self.records_in_segment += 1;
        Ok(())
    }

    /// Appends the stop record and writes everything, synchronously.
    pub(crate) fn stop(&mut self) -> Result<()> {
        encode_record(&mut self.pending, RecordKind::Stop, self.end, &[]);
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

    fn roll_if_full(&mut self, record_len: usize) -> Result<()> {
        let len = self.file_len + self.pending.len() as u64;
        if self.records_in_segment == 0 || len + record_len as u64 <= self.segment_bytes {
            return Ok(());
        }
        self.sync()?;
        let (file, path) = SegmentWriter::new_segment(&self.archive, self.id, self.end)?;
        self.file = file;
        self.path = path;
        self.file_len = SEGMENT_HEADER_LEN;
        self.records_in_segment = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // the record layout the module documents: a 24-byte little-endian header
    #[test]
    fn a_record_has_the_documented_layout() {
        let mut bytes = Vec::new();
        encode_record(
            &mut bytes,
            RecordKind::Message,
            0x0102_0304_0506_0708,
            b"abc",
        );
        assert_eq!(bytes.len(), RECORD_HEADER_LEN + 3);
        assert_eq!(bytes[0..4], 3u32.to_le_bytes());
        assert_eq!(bytes[8..16], 0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(bytes[16..20], 1u32.to_le_bytes());
        assert_eq!(bytes[20..24], [0; 4]);
        let crc = crc32fast::hash(&bytes[8..]);
        assert_eq!(bytes[4..8], crc.to_le_bytes());
        match decode_record(&bytes) {
            Decoded::Record(record) => {
                assert_eq!(record.payload, b"abc");
                assert_eq!(record.end(), 0x0102_0304_0506_0708 + 7);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_flipped_byte_or_a_short_record_is_never_a_record() {
        let mut bytes = Vec::new();
        encode_record(&mut bytes, RecordKind::Gap, 10, &20u64.to_le_bytes());
        assert!(matches!(
            decode_record(&bytes[..bytes.len() - 1]),
            Decoded::Incomplete { needed: Some(32) }
        ));
        bytes[RECORD_HEADER_LEN] ^= 1;
        assert!(matches!(decode_record(&bytes), Decoded::Invalid(_)));
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
        let mut disk = RecordingDisk::default();
        create_segment_on(&mut disk, &path, 7, 4096).expect("create");
        let operations = disk.operations();
        for crash in crash_states(&BTreeMap::new(), &operations) {
            if crash.after < operations.len() {
                continue;
            }
            assert_eq!(
                crash.files.get(&path).map(Vec::as_slice),
                Some(&segment_header(7, 4096)[..]),
                "after {} of {} operations ({})",
                crash.after,
                operations.len(),
                crash.how
            );
        }
    }

    #[test]
    fn a_segment_header_is_32_bytes_with_magic_id_and_start() {
        let header = segment_header(7, 99);
        assert_eq!(&header[0..8], MAGIC);
        assert_eq!(header[16..24], 7u64.to_le_bytes());
        assert_eq!(header[24..32], 99u64.to_le_bytes());
    }
}
