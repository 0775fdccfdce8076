//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong in the archive library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArchiveError {
    /// An I/O operation on an archive, recording or ring file failed.
    #[error("{action} {path}: {source} (check that the path exists, is writable and the file system has space)")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A socket operation failed.
    #[error("{action}: {source} (check the address and that the port is free)")]
    Socket {
        /// What was being done.
        action: &'static str,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Another archiver holds the archive directory.
    #[error(
        "the archive {0} is in use by another archiver (stop it first, or use another directory)"
    )]
    ArchiveLocked(PathBuf),
    /// A file is not in the expected format (wrong magic or version).
    #[error("{path} is not a {what} of this version ({detail}); it was not written by this release of mongoose-archive")]
    BadFormat {
        /// The file.
        path: PathBuf,
        /// The kind of file expected.
        what: &'static str,
        /// What did not match.
        detail: String,
    },
    /// Recorded data is damaged in the middle of a recording (not a torn tail).
    #[error("recording {recording} is damaged at position {position} in {path}: {detail} (the data before it can be replayed; copy the archive aside before repairing it)")]
    Corrupt {
        /// The recording id.
        recording: u64,
        /// The stream position of the damaged record.
        position: u64,
        /// The segment file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// No recording has this id.
    #[error("no recording {0} in the archive (list the recordings with `mongoose archive list`)")]
    NoSuchRecording(u64),
    /// No recording exists yet for the stream.
    #[error("no recording of stream {0} in the archive yet (is a publication running and the archiver serving?)")]
    NoRecordingForStream(u32),
    /// A replay was asked to start at a position that is not a message boundary.
    #[error("position {position} is not a message boundary of recording {recording} (start {start}); resume only from a position the reader gave")]
    NotABoundary {
        /// The recording id.
        recording: u64,
        /// The requested position.
        position: u64,
        /// The recording's start position.
        start: u64,
    },
    /// A message is larger than a publication or ring can carry.
    #[error("a message of {len} bytes is larger than the limit of {max} bytes; split it")]
    MessageTooLarge {
        /// The message length.
        len: usize,
        /// The largest accepted length.
        max: usize,
    },
    /// A durable-layer file (the catalog) cannot be read or written: damaged in the
    /// middle (refused, never cut), of another format, or an I/O error.
    #[error(transparent)]
    Durable(#[from] mongoose_durable::DurableError),
    /// A configuration value is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
}

impl ArchiveError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> ArchiveError {
        let path = path.into();
        move |source| ArchiveError::Io {
            action,
            path,
            source,
        }
    }

    pub(crate) fn socket(action: &'static str) -> impl FnOnce(std::io::Error) -> ArchiveError {
        move |source| ArchiveError::Socket { action, source }
    }
}

/// The crate's result type.
pub type Result<T, E = ArchiveError> = std::result::Result<T, E>;
