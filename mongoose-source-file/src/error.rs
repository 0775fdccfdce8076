//! The crate's error type.

use mongoose_core::CoreError;
use thiserror::Error;

/// Errors of the file source's configuration and files.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum FileSourceError {
    /// A read strategy name that does not exist.
    #[error(
        "unknown read strategy '{0}': use COMMITTED, EARLIEST, LATEST, ONCE_EARLIEST or ONCE_LATEST"
    )]
    UnknownStrategy(String),
    /// A glob feed's lane registry that cannot be read, while pointer files of the
    /// glob record no lane to rebuild it from (written by an older release).
    #[error(
        "the lane registry {path} is damaged ({line}), and the pointer files of {unknown} record no lane to rebuild it from (written by an older release): restore the registry from a backup (it belongs with the pointers); or, to start over, move it, the feed's pointer files and the consumers' saved state away"
    )]
    DamagedLaneRegistry {
        /// The registry file.
        path: std::path::PathBuf,
        /// What is damaged (the line that could not be read, a cut, a checksum).
        line: String,
        /// The files whose pointers record no lane.
        unknown: String,
    },
    /// A glob whose folder part holds wildcards.
    #[error(
        "the glob {0} has wildcards in its folder: only the file name may hold '*', '?' or '[' (e.g. logs/*.log)"
    )]
    WildcardFolder(String),
    /// A `rotated` glob that matches every file of the glob feed's own pattern: every
    /// file would be taken for a rotation, none read.
    #[error(
        "the rotated glob '{rotated}' matches every file of the feed's glob '{pattern}': each would be taken for a rotation and none read; give the pattern of the rotated names only, or no rotated glob"
    )]
    RotatedCoversGlob {
        /// The `rotated` glob.
        rotated: String,
        /// The feed's file-name glob.
        pattern: String,
    },
    /// An I/O error on the input or pointer file.
    #[error("{context}: {error}: check the path and its permissions")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The error.
        #[source]
        error: std::io::Error,
    },
}

impl From<FileSourceError> for CoreError {
    fn from(error: FileSourceError) -> Self {
        match error {
            FileSourceError::Io { context, error } => CoreError::io(context, error),
            other => CoreError::Source {
                source_name: "file".to_owned(),
                message: other.to_string(),
            },
        }
    }
}
