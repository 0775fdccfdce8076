//! The file-backed capture storage: one file per session, [`CAPTURE_FILE`], in the
//! session's folder. The file begins with [`MAGIC`]; each record is its length (u32
//! LE), the CRC-32 of its bytes (u32 LE), then its bytes, written through to the file
//! as the processor writes it (no fsync until the close). A reader stops at a torn or
//! damaged tail and says so; it never reads one as a record.
//!
//! ```
//! use mongoose_control::capture::file::{read_capture, FileCaptureResources};
//! use mongoose_control::capture::{
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
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::{CaptureFailure, CaptureIdentity, CaptureRecord, CaptureResources, CaptureWriter};
use crate::error::ControlError;

/// The records file in a session folder.
pub const CAPTURE_FILE: &str = "capture.records";

/// The first bytes of a records file (format version 1).
pub const MAGIC: &[u8; 8] = b"MGCAPT01";

/// The largest record accepted (a longer length is read as damage): 16 MiB.
pub const MAX_RECORD: usize = 16 * 1024 * 1024;

/// Opens [`FileCaptureWriter`]s: the default storage of a server's captures.
#[derive(Clone, Copy, Debug, Default)]
pub struct FileCaptureResources;

impl CaptureResources for FileCaptureResources {
    fn open(
        &self,
        _identity: &CaptureIdentity,
        dir: &Path,
    ) -> Result<Box<dyn CaptureWriter>, CaptureFailure> {
        Ok(Box::new(FileCaptureWriter::create(dir)?))
    }
}

/// Writes a session's records to [`CAPTURE_FILE`].
#[derive(Debug)]
pub struct FileCaptureWriter {
    path: PathBuf,
    file: BufWriter<File>,
}

impl FileCaptureWriter {
    /// Creates the records file in `dir` (it must not exist).
    ///
    /// # Errors
    /// The file exists or cannot be created.
    pub fn create(dir: &Path) -> Result<Self, CaptureFailure> {
        let path = dir.join(CAPTURE_FILE);
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|error| format!("cannot create {}: {error}", path.display()))?;
        let mut file = BufWriter::new(file);
        file.write_all(MAGIC)
            .and_then(|()| file.flush())
            .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
        Ok(FileCaptureWriter { path, file })
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
        let mut head = [0u8; 8];
        head[..4].copy_from_slice(&(record.len() as u32).to_le_bytes());
        head[4..].copy_from_slice(&crc32fast::hash(record).to_le_bytes());
        self.file
            .write_all(&head)
            .and_then(|()| self.file.write_all(record))
            .and_then(|()| self.file.flush())
            .map_err(|error| format!("cannot write {}: {error}", self.path.display()).into())
    }

    fn close(self: Box<Self>) -> Result<(), CaptureFailure> {
        let path = self.path.clone();
        let file = self
            .file
            .into_inner()
            .map_err(|error| format!("cannot flush {}: {}", path.display(), error.error()))?;
        file.sync_all()
            .map_err(|error| format!("cannot sync {}: {error}", path.display()).into())
    }
}

/// What [`read_capture`] found in a session folder.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct CaptureRead {
    /// The session's identity, from its sidecar.
    pub sidecar: super::CaptureSidecar,
    /// Every whole, intact record, in order.
    pub records: Vec<CaptureRecord>,
    /// Why reading stopped before the end of the file (a torn or damaged tail), with
    /// its byte offset; `None` when the file ended on a record boundary.
    pub torn_tail: Option<String>,
}

/// Reads the session folder `dir`: its sidecar and its records.
///
/// # Errors
/// [`ControlError::Capture`] when the sidecar or the records file is missing, or the
/// file is not a capture.
pub fn read_capture(dir: &Path) -> Result<CaptureRead, ControlError> {
    let sidecar = super::CaptureSidecar::read(dir).ok();
    let path = dir.join(CAPTURE_FILE);
    let bytes = std::fs::read(&path).map_err(|error| ControlError::Capture {
        reason: format!("cannot read {}: {error}", path.display()),
    })?;
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(ControlError::Capture {
            reason: format!(
                "{} is not a capture records file (no {:?} magic)",
                path.display(),
                std::str::from_utf8(MAGIC).unwrap_or_default()
            ),
        });
    }
    let mut records = Vec::new();
    let mut offset = MAGIC.len();
    let mut torn_tail = None;
    while offset < bytes.len() {
        let Some(head) = bytes.get(offset..offset + 8) else {
            torn_tail = Some(format!("a torn record head at byte {offset}"));
            break;
        };
        let length = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        if length > MAX_RECORD {
            torn_tail = Some(format!("a damaged record length at byte {offset}"));
            break;
        }
        let Some(body) = bytes.get(offset + 8..offset + 8 + length) else {
            torn_tail = Some(format!("a torn record at byte {offset}"));
            break;
        };
        if crc32fast::hash(body) != crc {
            torn_tail = Some(format!("a record failing its checksum at byte {offset}"));
            break;
        }
        match CaptureRecord::decode(body) {
            Ok(record) => records.push(record),
            Err(error) => {
                torn_tail = Some(format!("at byte {offset}: {error}"));
                break;
            }
        }
        offset += 8 + length;
    }
    let sidecar = sidecar.ok_or_else(|| ControlError::Capture {
        reason: format!(
            "{} has no readable {}: not a capture session folder",
            dir.display(),
            super::SIDECAR_FILE
        ),
    })?;
    Ok(CaptureRead {
        sidecar,
        records,
        torn_tail,
    })
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
        assert!(read.torn_tail.unwrap().contains("checksum"));
    }
}
