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
    /// A sink's state does not match its target (damaged, older than the target,
    /// another target's, missing beside a target that holds outputs): the sink refuses
    /// to start on it and changed nothing.
    #[error("sink '{sink}': refusing to start on {state}: {problem}. What to do: {fix}")]
    State {
        /// The sink's name.
        sink: String,
        /// The state file.
        state: String,
        /// What is wrong.
        problem: String,
        /// What the operator can do.
        fix: String,
    },
    /// Another sink writes the same file (another `[[sinks]]` entry or a ledger's
    /// alerts file on the same path, or another process).
    #[error("sink '{sink}': {path} is the same file another file sink is writing (another [[sinks]] entry or a ledger's alerts file on this path, or another mongoose process): two writers would overwrite each other's lines; give each sink a file of its own")]
    InUse {
        /// The sink's name.
        sink: String,
        /// The file.
        path: String,
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
