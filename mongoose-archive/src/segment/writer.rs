//! [`SegmentWriter`]: the archiver's side of a recording's segments (create, recover,
//! append, roll).

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use mongoose_durable::disk::RealDisk;

use super::{
    check_segment_header, create_segment_on, encode_record, recording_dir,
    remove_temporary_segments, segment_path, segment_starts, Decoded, Framing, RecordKind,
    RecordingIdentity, EARLIER_HEADER_LEN, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use crate::error::{ArchiveError, Result};

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
