//! Audit capture in a group (see [`mongoose_audit::capture`]): a start opens the capture on an
//! I/O helper thread and answers once the group installed it on its own thread; a
//! stop uninstalls it and hands the writer to a closer thread; the group's counters
//! bound the opens in flight and the resource slots held.
//!
//! * what the captures share with the helper and closer threads and the status
//!   readers (sessions, opens in flight, resource slots) is the group's
//!   [`CaptureSessions`](mongoose_audit::capture::CaptureSessions);
//! * `requests`: a start, a stop, a capture ended with its processor, a group that
//!   closes;
//! * `opens`: an open on its helper thread, and what the group does when it returns
//!   or times out.

mod opens;
mod requests;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::reply::ReplySender;
use mongoose_audit::capture::{CaptureIdentity, CaptureWriter};

/// What an open's helper thread hands back to its group, through the mailbox.
pub(crate) struct OpenedCapture {
    op: u64,
    /// The session's id.
    id: String,
    result: Result<Box<dyn CaptureWriter>, String>,
}

/// A start waiting for its open.
struct Waiter {
    sender: ReplySender,
    input: u64,
}

struct Opening {
    op: u64,
    identity: CaptureIdentity,
    deadline: Instant,
    open_timeout: Duration,
    waiters: Vec<Waiter>,
}

/// The group thread's capture state.
#[derive(Default)]
pub(super) struct Captures {
    next_op: u64,
    /// Opens in progress, by the processor's generation.
    opening: HashMap<u64, Opening>,
    /// The session installed on each captured processor, by generation.
    installed: HashMap<u64, CaptureIdentity>,
}

impl Captures {
    /// When the group must next look at its opens (the earliest open deadline).
    pub(super) fn next_deadline_in(&self) -> Option<Duration> {
        self.opening
            .values()
            .map(|opening| opening.deadline.saturating_duration_since(Instant::now()))
            .min()
    }
}
