//! The crate's one error type.

use std::io;
use std::path::PathBuf;

/// What can go wrong writing, locking or recovering a durable file. Every variant names
/// the file, and the message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    /// A system call on a file or folder failed.
    #[error("cannot {action} {}: {source} (check the disk and that the server may write there)", path.display())]
    Io {
        /// What was being done (`"create"`, `"sync"`, `"rename into place"`...).
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// Another open file (another process, or another part of this one) holds the lock.
    #[error("{} is locked by {}: stop it, or give this one another folder", path.display(), holder.as_deref().unwrap_or("another process"))]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// Who holds it, when the holder wrote itself into the file
        /// ([`FileLock::record_holder`](crate::lock::FileLock::record_holder)), as
        /// `"the process <pid>"`.
        holder: Option<String>,
    },
    /// A record in the middle of a log is damaged: valid records follow it, so it is no
    /// torn tail, and skipping it would lose it silently.
    #[error("{} is damaged at byte {offset} ({reason}) and valid records follow: refusing to skip them; restore the file from a backup, or move it away to start over (what it held is then lost)", path.display())]
    DamagedRecord {
        /// The log.
        path: PathBuf,
        /// Where the damaged record starts.
        offset: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A file's header cannot be read: it is not a header this layer wrote, or a byte of
    /// it changed.
    #[error("{} has a damaged header ({reason}): it is not a file this server wrote, or it was changed; move it away to start over", path.display())]
    DamagedHeader {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A snapshot ([`crate::snapshot`]) that ends before its body, or whose body fails
    /// its checksum.
    #[error("{} is damaged: {reason}", path.display())]
    DamagedSnapshot {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A file holds another format than the one asked for.
    #[error("{} is a {found} file, not a {expected} file: check the path (two things share it?)", path.display())]
    WrongFormat {
        /// The file.
        path: PathBuf,
        /// The format asked for.
        expected: String,
        /// The format the header names.
        found: String,
    },
    /// A file holds a version of its format this build does not read.
    #[error("{} is {format} version {found}, this build reads version {expected}: run the server version that wrote it, or move the file away", path.display())]
    WrongVersion {
        /// The file.
        path: PathBuf,
        /// The format.
        format: String,
        /// The version this build reads.
        expected: u32,
        /// The version in the header.
        found: u32,
    },
    /// A file belongs to another owner (another input, journal, sink, run...).
    #[error("{} ({format}) belongs to {found}, not to {expected}: it is another one's state; it is not applied (move it away, or point the server at its owner)", path.display())]
    WrongOwner {
        /// The file.
        path: PathBuf,
        /// The format.
        format: String,
        /// The owner asked for.
        expected: String,
        /// The owner in the header.
        found: String,
    },
    /// A header field or a record is larger than the format allows.
    #[error("{what} is {len} bytes, more than the {max} a {context} may hold")]
    TooLarge {
        /// What is too large.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The largest allowed.
        max: usize,
        /// Where.
        context: &'static str,
    },
}

impl DurableError {
    /// A closure turning an [`io::Error`] into [`DurableError::Io`] for `path`.
    pub(crate) fn io(
        action: &'static str,
        path: &std::path::Path,
    ) -> impl FnOnce(io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| DurableError::Io {
            action,
            path,
            source,
        }
    }
}

/// For callers whose own errors are [`io::Error`]s: the kind is kept (a missing file
/// stays `NotFound`), the message is this error's.
impl From<DurableError> for io::Error {
    fn from(error: DurableError) -> Self {
        let kind = match &error {
            DurableError::Io { source, .. } => source.kind(),
            DurableError::Locked { .. } => io::ErrorKind::WouldBlock,
            DurableError::TooLarge { .. } => io::ErrorKind::InvalidInput,
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, error)
    }
}
