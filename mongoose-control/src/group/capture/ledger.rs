//! What a group's captures share with its helper and closer threads and with the
//! status readers: the sessions, the opens in flight and the resource slots held.

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::capture::routing::SessionCounters;
use crate::capture::{CaptureIdentity, CaptureState, CaptureStatus, CaptureWriter};

/// Sessions kept in the status once they ended (the newest ones).
const ENDED_SESSIONS_KEPT: usize = 256;

/// One session as the status shows it.
pub(super) struct SessionEntry {
    pub(super) identity: CaptureIdentity,
    pub(super) path: PathBuf,
    pub(super) state: CaptureState,
    pub(super) counters: Arc<SessionCounters>,
    pub(super) error: Option<String>,
}

/// What a group's captures share with its helper and closer threads and with the
/// status readers.
#[derive(Default)]
pub(crate) struct CaptureShared {
    pub(super) ledger: Mutex<CaptureLedger>,
}

#[derive(Default)]
pub(super) struct CaptureLedger {
    /// Opens whose helper has not returned (timed-out ones included).
    pub(super) opens_in_flight: usize,
    /// Resources held: opening, installed, closing, failed close.
    pub(super) slots_in_use: usize,
    /// Closes that failed (their slots stay held).
    pub(super) close_failures: Vec<String>,
    pub(super) sessions: Vec<SessionEntry>,
}

impl CaptureLedger {
    pub(super) fn session(&mut self, id: &str) -> Option<&mut SessionEntry> {
        self.sessions
            .iter_mut()
            .find(|entry| entry.identity.capture_id == id)
    }

    pub(super) fn set_state(&mut self, id: &str, state: CaptureState, error: Option<String>) {
        if let Some(entry) = self.session(id) {
            entry.state = state;
            if error.is_some() {
                entry.error = error;
            }
        }
        self.forget_old_sessions();
    }

    pub(super) fn forget_old_sessions(&mut self) {
        let ended = |entry: &SessionEntry| {
            matches!(entry.state, CaptureState::Closed | CaptureState::OpenFailed)
        };
        let mut excess = self
            .sessions
            .iter()
            .filter(|entry| ended(entry))
            .count()
            .saturating_sub(ENDED_SESSIONS_KEPT);
        self.sessions.retain(|entry| {
            if excess > 0 && ended(entry) {
                excess -= 1;
                false
            } else {
                true
            }
        });
    }
}

impl CaptureShared {
    /// Every session this group knows, oldest first.
    pub(crate) fn statuses(&self) -> Vec<CaptureStatus> {
        let ledger = self.ledger.lock();
        ledger
            .sessions
            .iter()
            .map(|entry| CaptureStatus {
                id: entry.identity.capture_id.clone(),
                selector: entry.identity.selector(),
                generation: entry.identity.generation,
                path: entry.path.clone(),
                recording: entry.state == CaptureState::Recording,
                state: entry.state,
                records_written: entry
                    .counters
                    .written
                    .load(std::sync::atomic::Ordering::Relaxed),
                error: entry
                    .error
                    .clone()
                    .or_else(|| entry.counters.write_error.lock().clone()),
            })
            .collect()
    }

    /// Resource slots held (opening, installed, closing, failed close), and the
    /// failed closes among them.
    pub(crate) fn unresolved(&self) -> (usize, Vec<String>) {
        let ledger = self.ledger.lock();
        (ledger.slots_in_use, ledger.close_failures.clone())
    }

    /// Closes `writer` of session `id` on a closer thread (one attempt): a confirmed
    /// close returns its slot, a failed one keeps it and is reported.
    pub(crate) fn close_later(self: &Arc<Self>, id: String, writer: Box<dyn CaptureWriter>) {
        let shared = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("mongoose-capture-close".into())
            .spawn(move || shared.close_now(&id, writer));
        if let Err(error) = spawned {
            // the writer went with the closure: its close never ran
            tracing::error!(%error, "cannot start a capture closer thread: the capture's resource stays unresolved");
            self.ledger
                .lock()
                .close_failures
                .push(format!("a closer thread could not start: {error}"));
        }
    }

    pub(super) fn close_now(&self, id: &str, writer: Box<dyn CaptureWriter>) {
        let closed = writer.close();
        let mut ledger = self.ledger.lock();
        match closed {
            Ok(()) => {
                ledger.slots_in_use = ledger.slots_in_use.saturating_sub(1);
                ledger.set_state(id, CaptureState::Closed, None);
            }
            Err(error) => {
                let reason = format!("capture {id}: the close failed: {error}");
                tracing::error!(capture = id, %error, "an audit capture's close failed: its resource stays unresolved and the close is not retried");
                ledger.close_failures.push(reason.clone());
                ledger.set_state(id, CaptureState::CloseFailed, Some(reason));
            }
        }
    }

    pub(super) fn open_returned(&self) {
        let mut ledger = self.ledger.lock();
        ledger.opens_in_flight = ledger.opens_in_flight.saturating_sub(1);
    }

    pub(super) fn release_slot(&self, id: &str, state: CaptureState, error: Option<String>) {
        let mut ledger = self.ledger.lock();
        ledger.slots_in_use = ledger.slots_in_use.saturating_sub(1);
        ledger.set_state(id, state, error);
    }
}
