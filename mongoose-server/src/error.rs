//! The server's error type.

use thiserror::Error;

/// Errors of the server: configuration, wiring and lifecycle.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ServerError {
    /// A configuration key is missing, unknown or has a bad value.
    #[error("config error at {path}: {message}")]
    Config {
        /// The key path (`feeds[0].overload.policy`).
        path: String,
        /// What is wrong and what is expected.
        message: String,
    },
    /// An I/O error.
    #[error("{context}: {error}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        error: std::io::Error,
    },
    /// A journal could not be opened, read or appended to.
    #[error(transparent)]
    Journal(#[from] mongoose_journal::JournalError),
    /// The delivery engine refused something.
    #[error(transparent)]
    Delivery(#[from] mongoose_delivery::DeliveryError),
    /// The control plane refused something.
    #[error(transparent)]
    Control(#[from] mongoose_control::ControlError),
    /// A processor kind is not registered.
    #[error("unknown processor kind '{kind}' at {path}: registered kinds are {known}")]
    UnknownProcessorKind {
        /// The key path.
        path: String,
        /// The kind asked for.
        kind: String,
        /// The kinds registered.
        known: String,
    },
    /// A processor factory refused its settings.
    #[error("processor '{name}' ({kind}): {message}")]
    ProcessorSettings {
        /// The processor.
        name: String,
        /// Its kind.
        kind: String,
        /// What is wrong.
        message: String,
    },
    /// The server is not in a state for this.
    #[error("{0}")]
    State(String),
    /// A durable state the server would start on does not match what it belongs to (a
    /// file sink's `.sinkstate` damaged, older than its file, another file's, or
    /// missing beside a file that holds outputs): the run is refused and nothing was
    /// changed. The message names the file, what is wrong and what to do.
    #[error("{what}: {message}")]
    StateRefused {
        /// What refused (`sinks.out`).
        what: String,
        /// The refusal.
        message: String,
    },
    /// Another server holds the data folder's lock: two servers on one data folder
    /// would write the same pointers and sink states.
    #[error("the data folder {folder} is in use by {holder} (its lock file is held): stop that server, or give this one another data_dir")]
    DataFolderLocked {
        /// The data folder.
        folder: String,
        /// Who holds it: `the process <pid>`, or `another process`.
        holder: String,
    },
}

impl ServerError {
    /// A config error at `path`.
    pub fn invalid(path: impl Into<String>, message: impl Into<String>) -> Self {
        ServerError::Config {
            path: path.into(),
            message: message.into(),
        }
    }
}
