//! A small header naming a file's format, its version and its owner, checked when the
//! file is opened: a file of another format, of a version this build does not read, or
//! of another owner (another input, journal, sink, run) is refused with an error that
//! says which, never applied.
//!
//! Layout (little-endian), [`MAGIC`] first and a CRC-32 of every byte before it last:
//!
//! ```text
//! offset  size  field
//! 0       4     magic "MGDH"
//! 4       2     header length in bytes, this field's 6 bytes and the checksum included
//! 6       4     format version
//! 10      1     format name length N (1..=64)
//! 11      N     format name (UTF-8)
//! 11+N    1     owner length M (0..=255)
//! 12+N    M     owner identity (bytes)
//! 12+N+M  4     CRC-32 (crc32fast) of bytes 0..12+N+M
//! ```

use std::fmt::Write as _;
use std::path::Path;

use crate::DurableError;

/// The first bytes of every header.
pub const MAGIC: [u8; 4] = *b"MGDH";

/// The longest format name.
pub const MAX_FORMAT_NAME: usize = 64;

/// The longest owner identity.
pub const MAX_OWNER: usize = 255;

/// A file's format, version and owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The format's name (`"mongoose-outbox-segment"`...).
    pub format: String,
    /// The format's version.
    pub version: u32,
    /// Whom the file belongs to (a file identity, a journal's id, a run...); empty when
    /// any owner may read it.
    pub owner: Vec<u8>,
}

impl Header {
    /// A header for `format` version `version` owned by `owner`.
    pub fn new(format: impl Into<String>, version: u32, owner: impl Into<Vec<u8>>) -> Header {
        Header {
            format: format.into(),
            version,
            owner: owner.into(),
        }
    }

    /// The header's bytes.
    ///
    /// # Errors
    /// [`DurableError::TooLarge`] when the name is empty or over [`MAX_FORMAT_NAME`]
    /// bytes, or the owner over [`MAX_OWNER`].
    pub fn encode(&self) -> Result<Vec<u8>, DurableError> {
        let name = self.format.as_bytes();
        if name.is_empty() || name.len() > MAX_FORMAT_NAME {
            return Err(DurableError::TooLarge {
                what: "a format name",
                len: name.len(),
                max: MAX_FORMAT_NAME,
                context: "header (and at least 1)",
            });
        }
        if self.owner.len() > MAX_OWNER {
            return Err(DurableError::TooLarge {
                what: "an owner identity",
                len: self.owner.len(),
                max: MAX_OWNER,
                context: "header",
            });
        }
        let len = 4 + 2 + 4 + 1 + name.len() + 1 + self.owner.len() + 4;
        let mut bytes = Vec::with_capacity(len);
        bytes.extend_from_slice(&MAGIC);
        bytes.extend_from_slice(&(len as u16).to_le_bytes());
        bytes.extend_from_slice(&self.version.to_le_bytes());
        bytes.push(name.len() as u8);
        bytes.extend_from_slice(name);
        bytes.push(self.owner.len() as u8);
        bytes.extend_from_slice(&self.owner);
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(bytes.len(), len);
        Ok(bytes)
    }

    /// Reads the header at the start of `bytes` (the content of `path`, named in
    /// errors) and returns it with its length.
    ///
    /// # Errors
    /// [`DurableError::DamagedHeader`] when the bytes are not a whole, intact header.
    pub fn decode(path: &Path, bytes: &[u8]) -> Result<(Header, usize), DurableError> {
        let damaged = |reason| DurableError::DamagedHeader {
            path: path.to_path_buf(),
            reason,
        };
        if bytes.len() < 6 {
            return Err(damaged("shorter than a header"));
        }
        if bytes[..4] != MAGIC {
            return Err(damaged("no header magic"));
        }
        let len = usize::from(u16::from_le_bytes([bytes[4], bytes[5]]));
        if len < 4 + 2 + 4 + 1 + 1 + 1 + 4 {
            return Err(damaged("a header length too small"));
        }
        if bytes.len() < len {
            return Err(damaged("the file ends inside its header"));
        }
        let (body, crc) = bytes[..len].split_at(len - 4);
        if crc32fast::hash(body) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            return Err(damaged("its checksum does not match"));
        }
        let version = u32::from_le_bytes([body[6], body[7], body[8], body[9]]);
        let name_len = usize::from(body[10]);
        let name = body
            .get(11..11 + name_len)
            .ok_or_else(|| damaged("a format name past its end"))?;
        let owner_len = usize::from(
            *body
                .get(11 + name_len)
                .ok_or_else(|| damaged("no owner length"))?,
        );
        let owner = body
            .get(12 + name_len..12 + name_len + owner_len)
            .ok_or_else(|| damaged("an owner past its end"))?;
        if 12 + name_len + owner_len != body.len() {
            return Err(damaged("its fields do not fill its length"));
        }
        let format =
            std::str::from_utf8(name).map_err(|_| damaged("a format name that is not UTF-8"))?;
        Ok((Header::new(format, version, owner), len))
    }

    /// Checks that `found` (read from `path`) is this header: same format, version and
    /// owner.
    ///
    /// # Errors
    /// [`DurableError::WrongFormat`], [`DurableError::WrongVersion`] or
    /// [`DurableError::WrongOwner`], in that order.
    pub fn check(&self, path: &Path, found: &Header) -> Result<(), DurableError> {
        if found.format != self.format {
            return Err(DurableError::WrongFormat {
                path: path.to_path_buf(),
                expected: self.format.clone(),
                found: found.format.clone(),
            });
        }
        if found.version != self.version {
            return Err(DurableError::WrongVersion {
                path: path.to_path_buf(),
                format: self.format.clone(),
                expected: self.version,
                found: found.version,
            });
        }
        if found.owner != self.owner {
            return Err(DurableError::WrongOwner {
                path: path.to_path_buf(),
                format: self.format.clone(),
                expected: show_owner(&self.owner),
                found: show_owner(&found.owner),
            });
        }
        Ok(())
    }

    /// Reads the header at the start of `bytes` (the content of `path`) and checks it
    /// against this one ([`Header::decode`], then [`Header::check`]); returns the
    /// header's length.
    ///
    /// # Errors
    /// As those two.
    pub fn verify(&self, path: &Path, bytes: &[u8]) -> Result<usize, DurableError> {
        let (found, len) = Header::decode(path, bytes)?;
        self.check(path, &found)?;
        Ok(len)
    }
}

/// An owner for a message: its text when it is printable UTF-8, else its hex.
fn show_owner(owner: &[u8]) -> String {
    if owner.is_empty() {
        return "no owner".to_owned();
    }
    match std::str::from_utf8(owner) {
        Ok(text) if text.chars().all(|c| !c.is_control()) => format!("\"{text}\""),
        _ => {
            let mut hex = String::with_capacity(owner.len() * 2 + 2);
            hex.push_str("0x");
            for byte in owner {
                let _ = write!(hex, "{byte:02x}");
            }
            hex
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path() -> &'static Path {
        Path::new("/data/pointer")
    }

    #[test]
    fn a_header_reads_back_as_written() {
        let header = Header::new("pointer", 3, b"input-7".to_vec());
        let mut bytes = header.encode().expect("encode");
        let len = bytes.len();
        bytes.extend_from_slice(b"records");
        assert_eq!(
            Header::decode(path(), &bytes).expect("decode"),
            (header.clone(), len)
        );
        assert_eq!(header.verify(path(), &bytes).expect("verify"), len);
    }

    #[test]
    fn a_wrong_name_version_or_owner_is_refused_saying_which() {
        let header = Header::new("pointer", 3, b"input-7".to_vec());
        let cases = [
            (
                Header::new("loss-file", 3, b"input-7".to_vec()),
                "is a loss-file file, not a pointer file",
            ),
            (
                Header::new("pointer", 4, b"input-7".to_vec()),
                "pointer version 4, this build reads version 3",
            ),
            (
                Header::new("pointer", 3, vec![0, 1]),
                "belongs to 0x0001, not to \"input-7\"",
            ),
        ];
        for (other, message) in cases {
            let bytes = other.encode().expect("encode");
            let error = header
                .verify(path(), &bytes)
                .expect_err("refused")
                .to_string();
            assert!(error.contains(message), "{error}");
        }
    }

    #[test]
    fn a_changed_byte_or_a_short_header_is_damage() {
        let bytes = Header::new("pointer", 3, b"input-7".to_vec())
            .encode()
            .expect("encode");
        for at in 0..bytes.len() {
            let mut changed = bytes.clone();
            changed[at] ^= 0x40;
            assert!(matches!(
                Header::decode(path(), &changed),
                Err(DurableError::DamagedHeader { .. })
            ));
            assert!(matches!(
                Header::decode(path(), &bytes[..at]),
                Err(DurableError::DamagedHeader { .. })
            ));
        }
    }
}
