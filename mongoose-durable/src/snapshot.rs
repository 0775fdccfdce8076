//! A snapshot: a whole state written at once, replaced whole ([`crate::replace`]),
//! beside a log whose records after it a restart applies again. It names its format,
//! version and owner ([`crate::header`]), the last log record it holds, and carries a
//! CRC-32 of its body: a body that fails it was changed after it was written (a crash
//! never does that: the file is renamed into place whole), and is refused.
//!
//! Layout (little-endian):
//!
//! ```text
//! header    the durable header (format, version, owner)
//! through   8  u64: the last log record the snapshot holds
//! crc       4  CRC-32 (crc32fast) of the body
//! body         the state's bytes (the format's own encoding)
//! ```
//!
//! ```
//! use mongoose_durable::header::Header;
//! use mongoose_durable::snapshot;
//!
//! let folder = tempfile::tempdir().unwrap();
//! let path = folder.path().join("state.snapshot");
//! let header = Header::new("example-state", 1, b"run-7".to_vec());
//! snapshot::write(&path, &header, 42, b"the state").unwrap();
//! let read = snapshot::read(&path, "example-state", 1).unwrap().unwrap();
//! assert_eq!((read.header.owner.as_slice(), read.through, read.body.as_slice()), (&b"run-7"[..], 42, &b"the state"[..]));
//! ```

use std::path::Path;

use crate::header::Header;
use crate::DurableError;

/// A snapshot read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Its header (its owner is the caller's to check).
    pub header: Header,
    /// The last log record it holds.
    pub through: u64,
    /// The state's bytes.
    pub body: Vec<u8>,
}

/// The bytes of a snapshot.
///
/// # Errors
/// [`DurableError::TooLarge`] for a header that does not encode.
pub fn encode(header: &Header, through: u64, body: &[u8]) -> Result<Vec<u8>, DurableError> {
    let mut bytes = header.encode()?;
    bytes.reserve(12 + body.len());
    bytes.extend_from_slice(&through.to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    bytes.extend_from_slice(body);
    Ok(bytes)
}

/// Writes a snapshot at `path`, replacing the one there whole (synced).
///
/// # Errors
/// As [`encode`] and [`crate::replace::replace`].
pub fn write(path: &Path, header: &Header, through: u64, body: &[u8]) -> Result<(), DurableError> {
    crate::replace::replace(path, &encode(header, through, body)?)
}

/// Reads the snapshot at `path` (`None` when there is none), checking its format,
/// version and checksum.
///
/// # Errors
/// [`DurableError::Io`] when it cannot be read; [`DurableError::DamagedHeader`],
/// [`DurableError::WrongFormat`], [`DurableError::WrongVersion`]; and
/// [`DurableError::DamagedSnapshot`] when it ends before its body or its body fails
/// its checksum.
pub fn read(path: &Path, format: &str, version: u32) -> Result<Option<Snapshot>, DurableError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(DurableError::Io {
                action: "read",
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let (header, length) = Header::decode(path, &bytes)?;
    Header::new(format, version, header.owner.clone()).check(path, &header)?;
    let damaged = |reason| DurableError::DamagedSnapshot {
        path: path.to_path_buf(),
        reason,
    };
    let rest = &bytes[length..];
    let (Some(through), Some(crc)) = (rest.get(..8), rest.get(8..12)) else {
        return Err(damaged("it ends before its body"));
    };
    let through = u64::from_le_bytes(through.try_into().unwrap_or_default());
    let crc = u32::from_le_bytes(crc.try_into().unwrap_or_default());
    let body = &rest[12..];
    if crc32fast::hash(body) != crc {
        return Err(damaged(
            "its body fails its checksum: it was changed after it was written (a crash never does that: snapshots are renamed into place whole)",
        ));
    }
    Ok(Some(Snapshot {
        header,
        through,
        body: body.to_vec(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_byte_or_a_cut_is_refused_and_another_format_named() {
        let folder = tempfile::tempdir().expect("a folder");
        let path = folder.path().join("s");
        let header = Header::new("test-state", 3, vec![1, 2]);
        write(&path, &header, 9, b"body").expect("written");
        let bytes = std::fs::read(&path).expect("read");
        let mut changed = bytes.clone();
        *changed.last_mut().expect("a byte") ^= 1;
        std::fs::write(&path, &changed).expect("written");
        let error = read(&path, "test-state", 3).expect_err("refused");
        assert!(error.to_string().contains("checksum"), "{error}");
        std::fs::write(&path, &bytes[..bytes.len() - 10]).expect("written");
        assert!(read(&path, "test-state", 3).is_err());
        std::fs::write(&path, &bytes).expect("written");
        let error = read(&path, "other-state", 3).expect_err("refused");
        assert!(matches!(error, DurableError::WrongFormat { .. }), "{error}");
        assert_eq!(
            read(&folder.path().join("none"), "test-state", 3).expect("ok"),
            None
        );
    }
}
