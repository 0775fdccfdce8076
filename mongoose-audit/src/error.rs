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
    /// An audit capture could not be read.
    #[error("audit capture: {reason}")]
    Capture {
        /// Why, and what to do.
        reason: String,
    },
    /// A processor selector that is neither `name` nor `group/name`.
    #[error("'{selector}' is not a processor selector: write NAME or GROUP/NAME, percent-encoding a '/' or '%' inside a part (%2F, %25)")]
    BadSelector {
        /// What was given.
        selector: String,
    },
}
