//! What a group's captures share with its helper and closer threads and with the
//! status readers: the sessions, the opens in flight and the resource slots held
//! ([`CaptureSessions`]).

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;

use super::routing::SessionCounters;
use super::{CaptureIdentity, CaptureSettings, CaptureState, CaptureStatus, CaptureWriter};

/// Sessions kept in the status once they ended (the newest ones).
const ENDED_SESSIONS_KEPT: usize = 256;

/// One session as the status shows it.
struct SessionEntry {
    identity: CaptureIdentity,
    path: PathBuf,
    state: CaptureState,
    counters: Arc<SessionCounters>,
    error: Option<String>,
}

/// What a group's captures share with its helper and closer threads and with the
/// status readers: every session it knows, the opens in flight and the resource slots
/// held (opening, installed, closing, failed close), bounded by its
/// [`CaptureSettings`]. The group claims a session before its open
/// ([`CaptureSessions::claim`]); whatever ends it gives the slot back, except a failed
/// close, which keeps it.
#[derive(Default)]
pub struct CaptureSessions {
    ledger: Mutex<CaptureLedger>,
}

impl std::fmt::Debug for CaptureSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ledger = self.ledger.lock();
        f.debug_struct("CaptureSessions")
            .field("opens_in_flight", &ledger.opens_in_flight)
            .field("slots_in_use", &ledger.slots_in_use)
            .field("sessions", &ledger.sessions.len())
            .finish()
    }
}

#[derive(Default)]
struct CaptureLedger {
    /// Opens whose helper has not returned (timed-out ones included).
    opens_in_flight: usize,
    /// Resources held: opening, installed, closing, failed close.
    slots_in_use: usize,
    /// Closes that failed (their slots stay held).
    close_failures: Vec<String>,
    sessions: Vec<SessionEntry>,
}

impl CaptureLedger {
    fn session(&mut self, id: &str) -> Option<&mut SessionEntry> {
        self.sessions
            .iter_mut()
            .find(|entry| entry.identity.capture_id == id)
    }

    fn set_state(&mut self, id: &str, state: CaptureState, error: Option<String>) {
        if let Some(entry) = self.session(id) {
            entry.state = state;
            if error.is_some() {
                entry.error = error;
            }
        }
        self.forget_old_sessions();
    }

    fn forget_old_sessions(&mut self) {
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

impl CaptureSessions {
    /// Every session this group knows, oldest first.
    pub fn statuses(&self) -> Vec<CaptureStatus> {
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
    pub fn unresolved(&self) -> (usize, Vec<String>) {
        let ledger = self.ledger.lock();
        (ledger.slots_in_use, ledger.close_failures.clone())
    }

    /// Claims an open permit and a resource slot for the new session `identity` of
    /// group `group` (its status [`CaptureState::Opening`], its folder below
    /// `settings.root`), or says which of `settings`' limits is reached.
    ///
    /// # Errors
    /// The reason, when [`CaptureSettings::open_limit`] opens are in flight or
    /// [`CaptureSettings::resource_limit`] slots are held: nothing is claimed.
    pub fn claim(
        &self,
        identity: &CaptureIdentity,
        settings: &CaptureSettings,
        group: &str,
    ) -> Result<(), String> {
        let mut ledger = self.ledger.lock();
        if ledger.opens_in_flight >= settings.open_limit {
            Err(format!(
                "unresolved capture open limit reached: {} opens in flight in group '{}' (limit {}); try again once they finish or time out",
                ledger.opens_in_flight, group, settings.open_limit
            ))
        } else if ledger.slots_in_use >= settings.resource_limit {
            Err(format!(
                "capture resource limit reached: {} capture resources held in group '{}' (limit {}: opening, recording, closing and failed closes); stop captures, or resolve failed closes",
                ledger.slots_in_use, group, settings.resource_limit
            ))
        } else {
            ledger.opens_in_flight += 1;
            ledger.slots_in_use += 1;
            ledger.sessions.push(SessionEntry {
                identity: identity.clone(),
                path: settings.root.join(identity.folder_name()),
                state: CaptureState::Opening,
                counters: Arc::new(SessionCounters::default()),
                error: None,
            });
            Ok(())
        }
    }

    /// Sets session `id`'s state (and its error, when one is given).
    pub fn set_state(&self, id: &str, state: CaptureState, error: Option<String>) {
        self.ledger.lock().set_state(id, state, error);
    }

    /// Session `id` records: its state is [`CaptureState::Recording`]; returns the
    /// counters its [`ActiveCapture`](super::routing::ActiveCapture) writes to.
    pub fn set_recording(&self, id: &str) -> Arc<SessionCounters> {
        let mut ledger = self.ledger.lock();
        let counters = ledger
            .session(id)
            .map(|entry| Arc::clone(&entry.counters))
            .unwrap_or_default();
        ledger.set_state(id, CaptureState::Recording, None);
        counters
    }

    /// Closes `writer` of session `id` on a closer thread (one attempt): a confirmed
    /// close returns its slot, a failed one keeps it and is reported.
    pub fn close_later(self: &Arc<Self>, id: String, writer: Box<dyn CaptureWriter>) {
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

    /// Closes `writer` of session `id` on this thread (one attempt): a confirmed close
    /// returns its slot, a failed one keeps it and is reported.
    pub fn close_now(&self, id: &str, writer: Box<dyn CaptureWriter>) {
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

    /// An open's helper returned (with or without a writer): its permit is free.
    pub fn open_returned(&self) {
        let mut ledger = self.ledger.lock();
        ledger.opens_in_flight = ledger.opens_in_flight.saturating_sub(1);
    }

    /// Session `id` ended holding nothing (its open failed or was refused): its slot
    /// is free, its state `state`.
    pub fn release_slot(&self, id: &str, state: CaptureState, error: Option<String>) {
        let mut ledger = self.ledger.lock();
        ledger.slots_in_use = ledger.slots_in_use.saturating_sub(1);
        ledger.set_state(id, state, error);
    }
}
