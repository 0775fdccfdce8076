//! The crate's one error type.

/// What can go wrong in the aggregate's core: a setting that does not load, or a saved
/// state that does not belong to this config.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AggregateError {
    /// A setting is wrong: `at` is its key path
    /// (`processors[alerts].settings.rules[0].when`), `message` what is wrong and what
    /// to do (for an expression, with the column and a caret line).
    #[error("{at}: {message}")]
    Config {
        /// The key path of the setting.
        at: String,
        /// What is wrong, and what to do.
        message: String,
    },
    /// Saved state bytes that cannot be read (damaged, another program's, a newer
    /// version).
    #[error("the aggregate state cannot be read: {0}")]
    State(String),
    /// A saved state written for another aggregate config (its aggregates differ):
    /// applying lines to it would add them to the wrong aggregates.
    #[error("the aggregate state was written for another config (its aggregates, group_by and window were {saved:?}, the config's are {current:?}): restore the config it was written with, or move the state away to start over")]
    OtherConfig {
        /// The saved state's aggregate specs.
        saved: String,
        /// This config's.
        current: String,
    },
}

impl AggregateError {
    pub(crate) fn config(at: impl Into<String>, message: impl Into<String>) -> Self {
        AggregateError::Config {
            at: at.into(),
            message: message.into(),
        }
    }
}
