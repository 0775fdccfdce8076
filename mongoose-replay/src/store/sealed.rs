//! The files beside a store that its closing frame seals (`outputs.jsonl`,
//! `admin.jsonl`): [`SealedFile`], their name, length and CRC-32 at the close.

use std::path::Path;

use crate::error::ReplayError;

/// A file beside a store that the store's closing frame seals: its name (in the
/// store's folder), and its length and CRC-32 when the recording was closed.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SealedFile {
    pub(super) name: String,
    pub(super) length: u64,
    pub(super) checksum: u32,
}

impl SealedFile {
    pub(crate) fn from_parts(name: String, length: u64, checksum: u32) -> Self {
        SealedFile {
            name,
            length,
            checksum,
        }
    }

    /// Seals the file at `path` as it is now (read in full): its file name, length and
    /// CRC-32. Take it once the file is written in full and made durable.
    pub fn of_file(path: impl AsRef<Path>) -> Result<SealedFile, ReplayError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| ReplayError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let name = path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(SealedFile {
            name,
            length: bytes.len() as u64,
            checksum: crc32fast::hash(&bytes),
        })
    }

    /// The file's name, in the store's folder.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its length in bytes when the recording closed.
    pub fn length(&self) -> u64 {
        self.length
    }

    /// Its CRC-32 when the recording closed.
    pub fn checksum(&self) -> u32 {
        self.checksum
    }

    /// Checks that the file in `dir` is still what was sealed. `Err` says what is wrong
    /// (missing, unreadable, another length or checksum) and what to do, naming the file.
    pub fn verify_in(&self, dir: &Path) -> Result<(), String> {
        let plain_name = !self.name.is_empty()
            && self.name != ".."
            && self.name != "."
            && !self.name.contains(['/', '\\']);
        if !plain_name {
            return Err(format!(
                "the recording's closing frame seals {:?}, which is not a file name beside the \
                 store: the store is damaged; record again",
                self.name
            ));
        }
        let path = dir.join(&self.name);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(format!(
                    "{}: missing, but the recording's closing frame seals it ({} bytes): \
                     restore it from where the recording was copied, or record again",
                    self.name, self.length
                ))
            }
            Err(error) => {
                return Err(format!(
                    "{}: could not be read ({error}): check its permissions",
                    self.name
                ))
            }
        };
        let checksum = crc32fast::hash(&bytes);
        if bytes.len() as u64 != self.length || checksum != self.checksum {
            return Err(format!(
                "{}: {} bytes (CRC-32 {checksum:08x}), but the recording's closing frame sealed \
                 {} bytes (CRC-32 {:08x}): it was cut or changed after the recording closed; \
                 restore it, or record again",
                self.name,
                bytes.len(),
                self.length,
                self.checksum
            ));
        }
        Ok(())
    }
}
