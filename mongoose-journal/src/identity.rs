//! The journal's identity: a random number written once, when the journal is created,
//! in the file `identity` of its directory. A journal removed and made again at the same
//! path has another identity, so a reader's committed index (a [`TailerStore`] records
//! the identity it belongs to) or a consumer's saved position (a source makes the
//! identity part of its epoch) is never applied to the new journal's excerpts, which have
//! the same indexes as the old one's.
//!
//! Layout (little-endian), 32 bytes:
//!
//! ```text
//!  0  magic     b"MGJRNID\0"
//!  8  version   u32 = 1
//! 12  reserved  u32 = 0
//! 16  identity  u64  never 0
//! 24  reserved  u32 = 0
//! 28  crc       u32  CRC-32 of bytes 0..28
//! ```
//!
//! It is written to a temporary file, synced, and linked into place (`link`, which fails
//! if the file exists), so two processes opening a new journal at once agree on one
//! identity, and a crash never leaves a half-written one.
//!
//! [`TailerStore`]: crate::TailerStore

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;

use crate::error::{JournalError, Result};

/// The file holding the identity, in the journal directory.
pub(crate) const IDENTITY_FILE: &str = "identity";
const IDENTITY_MAGIC: [u8; 8] = *b"MGJRNID\0";
const IDENTITY_VERSION: u32 = 1;
const IDENTITY_BYTES: usize = 32;

/// Reads the identity of the journal in `dir`, creating it if the journal has none yet
/// (a new journal, or one written by an older version, which then becomes a journal with
/// an identity from now on).
pub(crate) fn load_or_create(dir: &Path) -> Result<u64> {
    let path = dir.join(IDENTITY_FILE);
    match fs::read(&path) {
        Ok(bytes) => return decode(&bytes, &path),
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(JournalError::io("cannot read the identity", &path, error)),
    }
    let identity = new_identity();
    let temporary = dir.join(format!(
        "{IDENTITY_FILE}.{}.{identity:016x}.tmp",
        std::process::id()
    ));
    let written = File::create(&temporary)
        .and_then(|mut file| {
            file.write_all(&encode(identity))?;
            file.sync_all()
        })
        .map_err(|error| JournalError::io("cannot write the identity", &temporary, error));
    let linked = written.and_then(|()| match fs::hard_link(&temporary, &path) {
        Ok(()) => Ok(true),
        // another process made it first: its identity is the journal's
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(error) => Err(JournalError::io(
            "cannot link the identity into place",
            &path,
            error,
        )),
    });
    let _ = fs::remove_file(&temporary);
    if linked? {
        File::open(dir)
            .and_then(|directory| directory.sync_all())
            .map_err(|error| JournalError::io("cannot sync the directory", dir, error))?;
        return Ok(identity);
    }
    let bytes = fs::read(&path)
        .map_err(|error| JournalError::io("cannot read the identity", &path, error))?;
    decode(&bytes, &path)
}

fn encode(identity: u64) -> [u8; IDENTITY_BYTES] {
    let mut bytes = [0u8; IDENTITY_BYTES];
    bytes[0..8].copy_from_slice(&IDENTITY_MAGIC);
    bytes[8..12].copy_from_slice(&IDENTITY_VERSION.to_le_bytes());
    bytes[16..24].copy_from_slice(&identity.to_le_bytes());
    let crc = crc32fast::hash(&bytes[0..28]);
    bytes[28..32].copy_from_slice(&crc.to_le_bytes());
    bytes
}

fn decode(bytes: &[u8], path: &Path) -> Result<u64> {
    let damaged = |reason: &str| JournalError::IdentityDamaged {
        path: path.to_path_buf(),
        reason: reason.to_owned(),
    };
    if bytes.len() != IDENTITY_BYTES {
        return Err(damaged(&format!(
            "{} bytes instead of {IDENTITY_BYTES}",
            bytes.len()
        )));
    }
    if bytes[0..8] != IDENTITY_MAGIC {
        return Err(damaged("no identity magic"));
    }
    let crc = u32::from_le_bytes(bytes[28..32].try_into().expect("4 bytes"));
    if crc != crc32fast::hash(&bytes[0..28]) {
        return Err(damaged("checksum mismatch"));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != IDENTITY_VERSION {
        return Err(damaged(&format!(
            "format version {version} (this build reads version {IDENTITY_VERSION})"
        )));
    }
    let identity = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    if identity == 0 {
        return Err(damaged("identity 0"));
    }
    Ok(identity)
}

/// A new identity, never 0: unique through the clock, the process id and the process's
/// random hasher keys (not a secret).
fn new_identity() -> u64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(crate::appender::now_unix_nanos());
    hasher.write_u32(std::process::id());
    hasher.finish().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_layout_is_fixed() {
        let bytes = encode(0x1122_3344_5566_7788);
        assert_eq!(&bytes[0..8], b"MGJRNID\0");
        assert_eq!(bytes[8..12], 1u32.to_le_bytes());
        assert_eq!(bytes[12..16], [0; 4]);
        assert_eq!(bytes[16..24], 0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(bytes[24..28], [0; 4]);
        assert_eq!(bytes[28..32], crc32fast::hash(&bytes[0..28]).to_le_bytes());
        assert_eq!(
            decode(&bytes, Path::new("i")).expect("whole"),
            0x1122_3344_5566_7788
        );
        let mut damaged = bytes;
        damaged[17] ^= 1;
        assert!(decode(&damaged, Path::new("i")).is_err());
        assert!(decode(&bytes[..31], Path::new("i")).is_err());
    }

    #[test]
    fn a_journal_keeps_its_identity_and_a_new_one_gets_another() {
        let dir = tempfile::tempdir().expect("dir");
        let first = load_or_create(dir.path()).expect("created");
        assert_eq!(load_or_create(dir.path()).expect("read"), first);
        fs::remove_file(dir.path().join(IDENTITY_FILE)).expect("removed");
        assert_ne!(load_or_create(dir.path()).expect("made again"), first);
    }
}
