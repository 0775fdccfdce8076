//! The crate's error.

/// Why a sink could not be set up (a bad setting, a file that cannot be opened).
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// A setting is wrong; the message says which and what to give instead.
    #[error("sink '{sink}': {message}")]
    Settings {
        /// The sink's name.
        sink: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// An I/O error while opening the sink's target.
    #[error("sink '{sink}': {action}: {source}")]
    Io {
        /// The sink's name.
        sink: String,
        /// What was being done (`opening /var/log/out.log`).
        action: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}
