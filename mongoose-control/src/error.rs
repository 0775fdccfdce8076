//! The crate's error type.

use thiserror::Error;

use crate::reply::ControlReply;

/// Errors of the control plane. Each message says what to do.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ControlError {
    /// A processor name is already admitted in the group.
    #[error("processor '{name}' is already admitted in group '{group}': wait for the reply of the stop that frees it, or choose another name")]
    NameInUse {
        /// The group.
        group: String,
        /// The name.
        name: String,
    },
    /// The server (control plane) has begun to stop.
    #[error("server is stopping: no control request is admitted once a stop has begun")]
    ServerStopping,
    /// The group's mailbox stayed full.
    #[error("request refused: mailbox full (capacity {capacity}) in group '{group}': retry later, or raise the group's mailbox capacity")]
    MailboxFull {
        /// The group.
        group: String,
        /// The mailbox capacity.
        capacity: usize,
    },
    /// A reply was awaited on an agent thread, which must never wait.
    #[error("waiting for a control reply on agent thread '{agent}' is refused: agent threads never wait; attach a callback with on_reply instead")]
    WaitOnAgentThread {
        /// The agent the thread runs.
        agent: String,
    },
    /// No reply came by the deadline (the request still applies).
    #[error("no control reply by the deadline: the request still applies; wait again or attach a callback")]
    ReplyTimeout,
    /// A request was answered with an outcome other than APPLIED and the caller asked to
    /// be told (add failure policy THROW).
    #[error("control request not applied: {} ({:?}): {}", .0.outcome, .0.kind, .0.reason)]
    NotApplied(Box<ControlReply>),
    /// A service name is in use, or the instance is still being stopped by a removal.
    #[error("service '{name}' cannot be registered: {reason}")]
    ServiceRegistration {
        /// The service name.
        name: String,
        /// Why.
        reason: String,
    },
    /// A feed subscription failed (no such feed, a type mismatch).
    #[error("subscription to feed '{feed}' failed: {reason}")]
    Subscription {
        /// The feed.
        feed: String,
        /// Why.
        reason: String,
    },
    /// A processor's control request named a processor that is not admitted.
    #[error("no processor '{name}' is admitted in group '{group}': check the group and processor names (a stopped processor's name is free)")]
    NoSuchProcessor {
        /// The group.
        group: String,
        /// The name.
        name: String,
    },
    /// A processor's control request was refused where it was made: in a replay (which
    /// never executes control requests), or on a thread that runs no group.
    #[error("control request {call} refused: {reason}")]
    ControlCallRefused {
        /// The request ([`crate::controller::STOP_PROCESSOR`], ...).
        call: String,
        /// Why, and what to do.
        reason: String,
    },
    /// The group thread could not be spawned.
    #[error("could not start the thread of group '{group}': {error}")]
    Spawn {
        /// The group.
        group: String,
        /// The error.
        #[source]
        error: std::io::Error,
    },
    /// A processor selector that is neither `name` nor `group/name`.
    #[error("'{selector}' is not a processor selector: write NAME or GROUP/NAME, percent-encoding a '/' or '%' inside a part (%2F, %25)")]
    BadSelector {
        /// What was given.
        selector: String,
    },
    /// A processor name admitted in several groups, given without its group.
    #[error("processor name '{name}' is admitted in several groups ({}): address one as GROUP/NAME, e.g. '{}/{name}'", .groups.join(", "), .groups[0])]
    AmbiguousProcessor {
        /// The name.
        name: String,
        /// The groups that admit it (at least two).
        groups: Vec<String>,
    },
    /// A processor name admitted in no group.
    #[error("no processor '{name}' is admitted in any group (groups: {}): check the name with GET /groups", if .groups.is_empty() { "none".to_owned() } else { .groups.join(", ") })]
    UnknownProcessor {
        /// The name.
        name: String,
        /// The groups there are.
        groups: Vec<String>,
    },
    /// Audit capture was asked of a control plane that has none.
    #[error("audit capture is not enabled on this control plane: give it CaptureSettings (the server does, with [audit] capture_dir)")]
    CaptureDisabled,
}
