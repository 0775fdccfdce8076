//! The core error type and the failure vocabulary shared by publishers and the control
//! plane.

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Errors of the core traits.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CoreError {
    /// Overload settings that contradict each other.
    #[error("invalid overload settings: {0}")]
    InvalidOverload(String),
    /// A source failed.
    #[error("source '{source_name}': {message}")]
    Source {
        /// The source.
        source_name: String,
        /// What went wrong.
        message: String,
    },
    /// An I/O error of a source or committer.
    #[error("{context}: {error}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        error: std::io::Error,
    },
    /// A state store's partition was taken over by another owner while this one was
    /// taking it (the store fenced this owner: a
    /// [`WriteFailure::Fenced`](crate::state_store::WriteFailure::Fenced)): the partition
    /// is not this owner's any more, and its lines in that epoch must not be applied
    /// here. Not a failure of the processor.
    #[error("{0}")]
    TakenOver(crate::state_store::WriteFailure),
    /// A state store failed (a partition's changelog, for example): the store's own
    /// error, which says what to do.
    #[error("{error}")]
    StateStore {
        /// Where the state lives (a topic).
        store: String,
        /// The store's error.
        #[source]
        error: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl CoreError {
    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>, error: std::io::Error) -> Self {
        CoreError::Io {
            context: context.into(),
            error,
        }
    }
}

/// Why a processor's handler, start, stop or completion failed. A processor returns
/// one; the group quarantines (or, for a retry-safe processor, retries) it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessorError {
    message: String,
    busy: bool,
}

impl ProcessorError {
    /// An error with a message.
    pub fn new(message: impl Into<String>) -> Self {
        ProcessorError {
            message: message.into(),
            busy: false,
        }
    }

    /// The processor cannot take the item now (a sink's queue is full): not a failure.
    /// Its group offers the item again a little later, as often as it takes, and never
    /// skips it or quarantines the processor; meanwhile the feed's queue fills and a
    /// re-readable source pauses. Return it only before the handler changed anything
    /// (a retry calls the handler again with the same item).
    pub fn busy(message: impl Into<String>) -> Self {
        ProcessorError {
            message: message.into(),
            busy: true,
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// True for [`ProcessorError::busy`].
    pub fn is_busy(&self) -> bool {
        self.busy
    }
}

impl fmt::Display for ProcessorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ProcessorError {}

impl From<CoreError> for ProcessorError {
    fn from(error: CoreError) -> Self {
        ProcessorError::new(error.to_string())
    }
}

impl From<std::io::Error> for ProcessorError {
    fn from(error: std::io::Error) -> Self {
        ProcessorError::new(error.to_string())
    }
}

impl From<String> for ProcessorError {
    fn from(message: String) -> Self {
        ProcessorError::new(message)
    }
}

impl From<&str> for ProcessorError {
    fn from(message: &str) -> Self {
        ProcessorError::new(message)
    }
}

/// Why a control request or a publish was not applied, beside its outcome.
/// [`FailureKind::None`] exactly when the outcome is APPLIED.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FailureKind {
    /// Nothing failed: the outcome is APPLIED.
    None,
    /// Not admitted: the group's mailbox was full or closed to new requests.
    RefusedAdmission,
    /// The target is not in a state that allows the request: no such group or
    /// processor, a name already taken, a quarantined processor, a stopping server.
    RefusedState,
    /// The request (or a BLOCK_WITH_DEADLINE publish) could not be done before its
    /// deadline.
    RefusedDeadline,
    /// The request itself is invalid (a bad name, bad arguments): nothing was tried.
    RefusedInvalid,
    /// The processor that decides the request failed (returned an error or panicked).
    FailedRule,
    /// The decision was made but carrying it out failed (a build, a start, a stop).
    FailedEffect,
    /// The group died while the request was being carried out.
    FailedDead,
    /// The server shut down before the request was answered.
    FailedShutdown,
    /// The processor was quarantined by the failure.
    Quarantined,
    /// A replay stopped: the recorded run made no such request here.
    ReplayStopped,
}

/// Whether the evidence behind a reply is degraded (an audit write failed).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EvidenceStatus {
    /// No unacknowledged audit write failure when the reply was made.
    NotDegraded,
    /// The audit had an unacknowledged write failure.
    Unverified,
}

/// A BLOCK_WITH_DEADLINE publish that could not be delivered to every blocking queue:
/// no queue holds the item and no sequence number was used.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("publish to feed '{feed}' refused ({kind:?}): {reason}")]
pub struct PublishRefused {
    /// The feed.
    pub feed: String,
    /// Why: REFUSED_DEADLINE (no room in time), REFUSED_STATE (stopping, target gone).
    pub kind: FailureKind,
    /// The evidence status when refused.
    pub evidence: EvidenceStatus,
    /// Human detail: which queue had no room.
    pub reason: String,
}
