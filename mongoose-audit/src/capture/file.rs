//! The file-backed capture storage: one file per session, [`CAPTURE_FILE`], in the
//! session's folder. The file is a record log of the durable layer
//! ([`mongoose_durable::log`]): a header (format [`FORMAT`], version [`VERSION`], owned
//! by the session's capture id, so a records file is never read under another session's
//! sidecar), then one checksummed frame per record, written through to the file as the
//! processor writes it (no fsync until the close). The file is created complete through
//! the atomic replace. A reader cuts nothing: it reports a torn tail (the last write, cut
//! by a crash) and refuses damage in the middle (a bad record with whole records after
//! it), never skipping a record. A file of an earlier release ([`MAGIC`], then `length
//! u32 | crc32 of the bytes u32 | bytes`) is read by the same rules.
//!
//! ```
//! use mongoose_audit::capture::file::{read_capture, FileCaptureResources};
//! use mongoose_audit::capture::{
//!     create_session_folder, CaptureIdentity, CaptureRecord, CaptureResources,
//! };
//!
//! let root = tempfile::tempdir().unwrap();
//! let identity = CaptureIdentity {
//!     group: "bank".into(),
//!     name: "ledger".into(),
//!     generation: 1,
//!     capture_id: "1".into(),
//! };
//! let dir = create_session_folder(root.path(), &identity).unwrap();
//! let mut writer = FileCaptureResources.open(&identity, &dir).unwrap();
//! let record = CaptureRecord::Record { at_micros: 1, bytes: b"hello".to_vec() };
//! writer.write(&record.encode()).unwrap();
//! writer.close().unwrap();
//! let read = read_capture(&dir).unwrap();
//! assert_eq!(read.records, [record]);
//! assert_eq!(read.sidecar.name, "ledger");
//! assert!(read.torn_tail.is_none());
//! ```

use std::fs::File;
use std::path::Path;

use mongoose_durable::disk::RealDisk;
use mongoose_durable::header::Header;
use mongoose_durable::log::RecordLog;
use mongoose_durable::DurableError;

use super::{CaptureFailure, CaptureIdentity, CaptureRecord, CaptureResources, CaptureWriter};
use crate::error::AuditError;

/// The records file in a session folder.
pub const CAPTURE_FILE: &str = "capture.records";

/// The records file's format name in its durable-layer header.
pub const FORMAT: &str = "mongoose-audit-capture";

/// The records file's format version in its header.
pub const VERSION: u32 = 2;

/// The first bytes of a records file of an earlier release (format version 1, no
/// header: still read).
pub const MAGIC: &[u8; 8] = b"MGCAPT01";

/// The largest record accepted (a longer length is read as damage): 16 MiB.
pub const MAX_RECORD: usize = 16 * 1024 * 1024;

/// The header of the records file of the session `capture_id`.
fn header(capture_id: &str) -> Header {
    Header::new(FORMAT, VERSION, capture_id.as_bytes().to_vec())
}

/// Opens [`FileCaptureWriter`]s: the default storage of a server's captures.
#[derive(Clone, Copy, Debug, Default)]
pub struct FileCaptureResources;

impl CaptureResources for FileCaptureResources {
    fn open(
        &self,
        identity: &CaptureIdentity,
        dir: &Path,
    ) -> Result<Box<dyn CaptureWriter>, CaptureFailure> {
        Ok(Box::new(FileCaptureWriter::create(dir, identity)?))
    }
}

/// Writes a session's records to [`CAPTURE_FILE`].
#[derive(Debug)]
pub struct FileCaptureWriter {
    log: RecordLog<File>,
}

impl FileCaptureWriter {
    /// Creates the records file of the session `identity` in `dir` (it must not exist),
    /// complete (its header) or not at all.
    ///
    /// # Errors
    /// The file exists or cannot be created.
    pub fn create(dir: &Path, identity: &CaptureIdentity) -> Result<Self, CaptureFailure> {
        let path = dir.join(CAPTURE_FILE);
        if path.symlink_metadata().is_ok() {
            return Err(format!("cannot create {}: it exists", path.display()).into());
        }
        let log = RecordLog::create_on(&mut RealDisk, &path, &header(&identity.capture_id))
            .map_err(|error| format!("cannot create {}: {error}", path.display()))?;
        Ok(FileCaptureWriter { log })
    }
}

impl CaptureWriter for FileCaptureWriter {
    fn write(&mut self, record: &[u8]) -> Result<(), CaptureFailure> {
        if record.len() > MAX_RECORD {
            return Err(format!(
                "a capture record of {} bytes is over the {MAX_RECORD} byte limit",
                record.len()
            )
            .into());
        }
        self.log
            .append(record)
            .map_err(|error| format!("cannot write {}: {error}", self.log.path().display()).into())
    }

    fn close(mut self: Box<Self>) -> Result<(), CaptureFailure> {
        self.log
            .sync()
            .map_err(|error| format!("cannot sync {}: {error}", self.log.path().display()).into())
    }
}

/// What [`read_capture`] found in a session folder.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct CaptureRead {
    /// The session's identity, from its sidecar.
    pub sidecar: super::CaptureSidecar,
    /// Every whole, intact record, in order.
    pub records: Vec<CaptureRecord>,
    /// Why reading stopped before the end of the file (a torn tail: the last write, cut
    /// by a crash), with its byte offset; `None` when the file ended on a record
    /// boundary.
    pub torn_tail: Option<String>,
}

/// Reads the session folder `dir`: its sidecar and its records.
///
/// # Errors
/// [`AuditError::Capture`] when the sidecar or the records file is missing, the file
/// is not a capture (or another session's), or a record in its middle is damaged (a
/// record failing its check with whole records after it: refused, never skipped).
pub fn read_capture(dir: &Path) -> Result<CaptureRead, AuditError> {
    let path = dir.join(CAPTURE_FILE);
    let bytes = std::fs::read(&path).map_err(|error| AuditError::Capture {
        reason: format!("cannot read {}: {error}", path.display()),
    })?;
    let sidecar = super::CaptureSidecar::read(dir).map_err(|_| AuditError::Capture {
        reason: format!(
            "{} has no readable {}: not a capture session folder",
            dir.display(),
            super::SIDECAR_FILE
        ),
    })?;
    let (frames, torn_tail) = if bytes.starts_with(MAGIC) {
        read_version_1(&path, &bytes)?
    } else if bytes.starts_with(&mongoose_durable::header::MAGIC) {
        let read = mongoose_durable::log::read(&path, &header(&sidecar.capture_id))
            .map_err(|error| refused(&path, error))?;
        let torn_tail = read.torn_tail.map(|torn| {
            format!(
                "a torn record at byte {} ({} bytes: the last write, cut short)",
                torn.offset, torn.bytes_cut
            )
        });
        (read.records, torn_tail)
    } else {
        return Err(AuditError::Capture {
            reason: format!(
                "{} is not a capture records file (no {FORMAT} header, no {:?} magic)",
                path.display(),
                std::str::from_utf8(MAGIC).unwrap_or_default()
            ),
        });
    };
    let mut records = Vec::with_capacity(frames.len());
    for (number, frame) in frames.iter().enumerate() {
        // a whole record that passed its checksum and does not decode is no torn tail
        records.push(
            CaptureRecord::decode(frame).map_err(|error| AuditError::Capture {
                reason: format!(
                    "{}: record {number} passes its checksum but does not decode ({error}): \
                     refusing to skip it",
                    path.display()
                ),
            })?,
        );
    }
    Ok(CaptureRead {
        sidecar,
        records,
        torn_tail,
    })
}

/// The refusal of a records file the durable layer would not read.
fn refused(path: &Path, error: DurableError) -> AuditError {
    let reason = match error {
        DurableError::DamagedRecord { .. } => format!(
            "{error} (the capture's records before it are whole: copy the folder aside to keep them)"
        ),
        DurableError::WrongOwner { .. } => format!(
            "{error}: {} belongs to another capture session than its folder's sidecar",
            path.display()
        ),
        other => format!("{} is not a readable capture records file: {other}", path.display()),
    };
    AuditError::Capture { reason }
}

/// The frames of a records file of an earlier release ([`MAGIC`], then `length u32 |
/// crc32 of the bytes u32 | bytes`), and its torn tail: a bad frame with a whole frame
/// anywhere after it is damage, refused.
fn read_version_1(path: &Path, bytes: &[u8]) -> Result<(Vec<Vec<u8>>, Option<String>), AuditError> {
    let mut frames = Vec::new();
    let mut offset = MAGIC.len();
    while offset < bytes.len() {
        match frame_v1(bytes, offset) {
            Ok(end) => {
                frames.push(bytes[offset + 8..end].to_vec());
                offset = end;
            }
            Err(what) => {
                if (offset + 1..bytes.len()).any(|later| frame_v1(bytes, later).is_ok()) {
                    return Err(refused(
                        path,
                        DurableError::DamagedRecord {
                            path: path.to_path_buf(),
                            offset: offset as u64,
                            reason: what,
                        },
                    ));
                }
                let torn = format!(
                    "a torn record at byte {offset} ({what}; {} bytes: the last write, cut short)",
                    bytes.len() - offset
                );
                return Ok((frames, Some(torn)));
            }
        }
    }
    Ok((frames, None))
}

/// The end of the version-1 frame at `at`, or what is wrong with it.
fn frame_v1(bytes: &[u8], at: usize) -> Result<usize, &'static str> {
    let Some(head) = bytes.get(at..at + 8) else {
        return Err("a record head cut short");
    };
    let length = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    if length > MAX_RECORD {
        return Err("a record length over the limit");
    }
    if length == 0 {
        // never written (a record holds at least its tag): zeros a power loss left
        return Err("an empty record");
    }
    let Some(body) = bytes.get(at + 8..at + 8 + length) else {
        return Err("a record longer than the rest of the file");
    };
    if crc32fast::hash(body) != crc {
        return Err("a record failing its checksum");
    }
    Ok(at + 8 + length)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_or_damaged_tail_is_reported_and_never_read_as_a_record() {
        let dir = tempfile::tempdir().unwrap();
        let identity = CaptureIdentity {
            group: "g".into(),
            name: "p".into(),
            generation: 3,
            capture_id: "x".into(),
        };
        let folder = super::super::create_session_folder(dir.path(), &identity).unwrap();
        let mut writer = FileCaptureResources.open(&identity, &folder).unwrap();
        let first = CaptureRecord::Record {
            at_micros: 1,
            bytes: b"one".to_vec(),
        };
        writer.write(&first.encode()).unwrap();
        writer
            .write(
                &CaptureRecord::Record {
                    at_micros: 2,
                    bytes: b"two".to_vec(),
                }
                .encode(),
            )
            .unwrap();
        writer.close().unwrap();
        let path = folder.join(CAPTURE_FILE);
        let whole = std::fs::read(&path).unwrap();
        // cut inside the second record
        std::fs::write(&path, &whole[..whole.len() - 2]).unwrap();
        let read = read_capture(&folder).unwrap();
        assert_eq!(read.records, std::slice::from_ref(&first));
        assert!(read.torn_tail.unwrap().contains("torn record"));
        assert_eq!(read.sidecar.generation, 3);
        // one flipped byte in the second record's body
        let mut flipped = whole.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0x40;
        std::fs::write(&path, &flipped).unwrap();
        let read = read_capture(&folder).unwrap();
        assert_eq!(read.records, [first]);
        assert!(read.torn_tail.unwrap().contains("torn record"));
    }
}
