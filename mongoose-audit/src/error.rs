//! The crate's error type.

use std::path::PathBuf;

use thiserror::Error;

/// Errors of the control audit and audit capture. Each message says what to do.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum AuditError {
    /// An audit export could not be written or read.
    #[error("control audit file {path}: {error}: check the directory exists and is writable")]
    AuditIo {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        error: std::io::Error,
    },
}
