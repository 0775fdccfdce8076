//! The crate's error type.

use mongoose_core::CoreError;
use thiserror::Error;

/// Errors of the file source's configuration and files.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum FileSourceError {
    /// A read strategy name that does not exist.
    #[error(
        "unknown read strategy '{0}': use COMMITED, EARLIEST, LATEST, ONCE_EARLIEST or ONCE_LATEST"
    )]
    UnknownStrategy(String),
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
