//! Audit capture in a group (see [`crate::capture`]): a start opens the capture on an
//! I/O helper thread and answers once the group installed it on its own thread; a
//! stop uninstalls it and hands the writer to a closer thread; the group's counters
//! bound the opens in flight and the resource slots held.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::FailureKind;
use parking_lot::Mutex;

use super::{write_reply_record, GroupShared, GroupState, Runtime};
use crate::audit::{NewRecord, RecordType};
use crate::capture::routing::{ActiveCapture, SessionCounters};
use crate::capture::{
    create_session_folder, CaptureIdentity, CaptureSettings, CaptureState, CaptureStatus,
    CaptureWriter,
};
use crate::reply::{ControlReply, ReplyOutcome, ReplySender};

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
/// status readers.
#[derive(Default)]
pub(crate) struct CaptureShared {
    ledger: Mutex<CaptureLedger>,
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

    fn close_now(&self, id: &str, writer: Box<dyn CaptureWriter>) {
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

    fn open_returned(&self) {
        let mut ledger = self.ledger.lock();
        ledger.opens_in_flight = ledger.opens_in_flight.saturating_sub(1);
    }

    fn release_slot(&self, id: &str, state: CaptureState, error: Option<String>) {
        let mut ledger = self.ledger.lock();
        ledger.slots_in_use = ledger.slots_in_use.saturating_sub(1);
        ledger.set_state(id, state, error);
    }
}

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

impl Runtime {
    /// A start: APPLIED "already recording", or an open joined or begun (answered once
    /// installed: `None` here), or refused with the reason.
    pub(super) fn apply_capture_start(
        &mut self,
        request_id: Option<u64>,
        input: u64,
        identity: CaptureIdentity,
        settings: CaptureSettings,
    ) -> Option<ControlReply> {
        let generation = identity.generation;
        let name = identity.name.clone();
        let signed = Some(generation);
        let refuse = |outcome, kind, reason: String| {
            Some(ControlReply::not_applied(
                request_id,
                outcome,
                kind,
                reason,
                signed,
                Some(name.clone()),
            ))
        };
        let quarantined = match self.processors.get(&generation) {
            Some(slot) => slot.quarantined.clone(),
            None => {
                self.decision(
                    request_id,
                    input,
                    "captureNoProcessor",
                    signed,
                    &name,
                    ("ABSENT", "ABSENT"),
                    &[],
                );
                let why = if self.shared.names.lock().get(&name) == Some(&generation) {
                    "is not started yet: try again once its add is applied"
                } else {
                    "has left its group"
                };
                return refuse(
                    ReplyOutcome::Refused,
                    FailureKind::RefusedState,
                    format!(
                        "processor '{name}' (generation {generation}) of group '{}' {why}",
                        self.shared.name
                    ),
                );
            }
        };
        if let Some(reason) = quarantined {
            self.decision(
                request_id,
                input,
                "captureQuarantined",
                signed,
                &name,
                ("QUARANTINED", "QUARANTINED"),
                &[],
            );
            return refuse(
                ReplyOutcome::Refused,
                FailureKind::Quarantined,
                format!("quarantined: no capture is installed on it ({reason})"),
            );
        }
        if self.captures.installed.contains_key(&generation) {
            self.decision(
                request_id,
                input,
                "captureAlreadyRecording",
                signed,
                &name,
                ("RECORDING", "RECORDING"),
                &[],
            );
            return Some(ControlReply::applied_with(
                request_id,
                "already recording",
                signed,
                Some(name),
            ));
        }
        if self.captures.opening.contains_key(&generation) {
            self.decision(
                request_id,
                input,
                "captureJoinsOpen",
                signed,
                &name,
                ("OPENING", "OPENING"),
                &[],
            );
            let (sender, input) = self.in_flight.take()?;
            if let Some(opening) = self.captures.opening.get_mut(&generation) {
                opening.waiters.push(Waiter { sender, input });
            }
            return None;
        }
        // the limits, then claim a permit and a slot
        let claimed = {
            let mut ledger = self.shared.captures.ledger.lock();
            if ledger.opens_in_flight >= settings.open_limit {
                Err(format!(
                    "unresolved capture open limit reached: {} opens in flight in group '{}' (limit {}); try again once they finish or time out",
                    ledger.opens_in_flight, self.shared.name, settings.open_limit
                ))
            } else if ledger.slots_in_use >= settings.resource_limit {
                Err(format!(
                    "capture resource limit reached: {} capture resources held in group '{}' (limit {}: opening, recording, closing and failed closes); stop captures, or resolve failed closes",
                    ledger.slots_in_use, self.shared.name, settings.resource_limit
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
        };
        if let Err(reason) = claimed {
            self.decision(
                request_id,
                input,
                "captureLimitReached",
                signed,
                &name,
                ("NOT_RECORDING", "NOT_RECORDING"),
                &[],
            );
            return refuse(ReplyOutcome::Failed, FailureKind::FailedRule, reason);
        }
        self.decision(
            request_id,
            input,
            "captureOpening",
            signed,
            &name,
            ("NOT_RECORDING", "OPENING"),
            &["OpenCapture"],
        );
        self.captures.next_op += 1;
        let op = self.captures.next_op;
        let group = Arc::clone(&self.shared);
        let helper_identity = identity.clone();
        let open_timeout = settings.open_timeout;
        let spawned = std::thread::Builder::new()
            .name(format!("mongoose-capture-open-{}", self.shared.name))
            .spawn(move || open_on_helper(&group, op, &helper_identity, &settings));
        if let Err(error) = spawned {
            let reason = format!("cannot start the capture's I/O helper thread: {error}");
            self.shared.captures.open_returned();
            self.shared.captures.release_slot(
                &identity.capture_id,
                CaptureState::OpenFailed,
                Some(reason.clone()),
            );
            return refuse(ReplyOutcome::Failed, FailureKind::FailedEffect, reason);
        }
        let (sender, input) = self.in_flight.take()?;
        self.captures.opening.insert(
            generation,
            Opening {
                op,
                identity,
                deadline: Instant::now() + open_timeout,
                open_timeout,
                waiters: vec![Waiter { sender, input }],
            },
        );
        None
    }

    /// A stop: uninstalls the capture (the writer goes to the closer), or cancels an
    /// open in progress, or does nothing when the processor does not record.
    pub(super) fn apply_capture_stop(
        &mut self,
        request_id: Option<u64>,
        input: u64,
        name: String,
        generation: u64,
    ) -> ControlReply {
        let signed = Some(generation);
        if self.captures.installed.contains_key(&generation) {
            self.decision(
                request_id,
                input,
                "captureStop",
                signed,
                &name,
                ("RECORDING", "NOT_RECORDING"),
                &["UninstallCapture"],
            );
            self.end_capture_of(generation, "stopped");
            self.effect(request_id, input, "UninstallCapture", &Ok(()), signed);
            return ControlReply::applied_with(request_id, "stopped recording", signed, Some(name));
        }
        if self.captures.opening.contains_key(&generation) {
            self.decision(
                request_id,
                input,
                "captureStopCancelsOpen",
                signed,
                &name,
                ("OPENING", "NOT_RECORDING"),
                &[],
            );
            self.end_capture_of(generation, "stopped before its open completed");
            return ControlReply::applied_with(
                request_id,
                "stopped: the open in progress was cancelled (its capture is closed when the open returns)",
                signed,
                Some(name),
            );
        }
        self.decision(
            request_id,
            input,
            "captureStopNotRecording",
            signed,
            &name,
            ("NOT_RECORDING", "NOT_RECORDING"),
            &[],
        );
        ControlReply::applied_with(request_id, "not recording", signed, Some(name))
    }

    /// Ends processor `generation`'s capture without calling it: an installed capture
    /// is taken off its host and closed on the closer; an open in progress is
    /// cancelled (its waiters answered FAILED with `why`; its writer closed when the
    /// helper returns).
    pub(super) fn end_capture_of(&mut self, generation: u64, why: &str) {
        if let Some(identity) = self.captures.installed.remove(&generation) {
            let active = self
                .processors
                .get_mut(&generation)
                .and_then(|slot| slot.host.take_capture());
            {
                let mut ledger = self.shared.captures.ledger.lock();
                ledger.set_state(&identity.capture_id, CaptureState::Closing, None);
            }
            match active {
                Some(active) => self
                    .shared
                    .captures
                    .close_later(identity.capture_id.clone(), active.into_writer()),
                None => {
                    // installed but not on its host: cannot happen; keep the slot held
                    tracing::error!(capture = %identity.capture_id, "an installed capture was not found on its processor");
                }
            }
            tracing::info!(group = %self.shared.name, processor = %identity.name, capture = %identity.capture_id, why, "audit capture ended");
        }
        if let Some(opening) = self.captures.opening.remove(&generation) {
            let reason = format!("the capture open was cancelled: the processor was {why}");
            self.shared.captures.ledger.lock().set_state(
                &opening.identity.capture_id,
                CaptureState::OpenFailed,
                Some(format!("cancelled: the processor was {why}")),
            );
            self.fail_waiters(
                opening,
                ReplyOutcome::Failed,
                FailureKind::FailedEffect,
                &reason,
            );
        }
    }

    fn fail_waiters(
        &mut self,
        opening: Opening,
        outcome: ReplyOutcome,
        kind: FailureKind,
        reason: &str,
    ) {
        let Opening {
            identity, waiters, ..
        } = opening;
        for waiter in waiters {
            let reply = ControlReply::not_applied(
                waiter.sender.request_id,
                outcome,
                kind,
                reason,
                Some(identity.generation),
                Some(identity.name.clone()),
            );
            self.answer_waiter(waiter, reply);
        }
    }

    fn answer_waiter(&self, waiter: Waiter, mut reply: ControlReply) {
        reply.evidence = self.audit().evidence();
        write_reply_record(self.audit(), &reply, waiter.input, None);
        waiter.sender.complete_on(&self.shared.executor, reply);
    }

    /// Opens that ran past their timeout: answered FAILED "open timed out"; their
    /// helpers keep their permits until they return, and a late writer is closed.
    pub(super) fn expire_capture_opens(&mut self) -> usize {
        if self.captures.opening.is_empty() {
            return 0;
        }
        let now = Instant::now();
        let expired: Vec<u64> = self
            .captures
            .opening
            .iter()
            .filter(|(_, opening)| opening.deadline <= now)
            .map(|(generation, _)| *generation)
            .collect();
        for generation in &expired {
            if let Some(opening) = self.captures.opening.remove(generation) {
                let reason = format!(
                    "open timed out after {} ms: nothing was installed; the open still holds its permit until it returns, and its capture is then closed",
                    opening.open_timeout.as_millis()
                );
                tracing::error!(group = %self.shared.name, processor = %opening.identity.name, capture = %opening.identity.capture_id, "audit capture open timed out");
                self.audit().write(
                    NewRecord::new(RecordType::Fallback, None, "CaptureOpenTimedOut")
                        .generation(Some(*generation))
                        .name(Some(&opening.identity.name))
                        .reason(reason.clone()),
                );
                {
                    let mut ledger = self.shared.captures.ledger.lock();
                    ledger.set_state(
                        &opening.identity.capture_id,
                        CaptureState::OpenFailed,
                        Some("open timed out".to_owned()),
                    );
                }
                self.fail_waiters(
                    opening,
                    ReplyOutcome::Failed,
                    FailureKind::FailedEffect,
                    &reason,
                );
            }
        }
        expired.len()
    }

    /// Takes the opens their helpers handed back: installs each still wanted on its
    /// processor and answers its starts; closes a late one.
    pub(super) fn take_opened_captures(&mut self) -> usize {
        // one plain atomic load per cycle when no open came back (a helper sets the
        // flag under the mailbox lock after its push, so clearing it before taking
        // the lock loses nothing)
        if !self
            .shared
            .captures_opened
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return 0;
        }
        self.shared
            .captures_opened
            .store(false, std::sync::atomic::Ordering::Release);
        let opened = {
            let mut mailbox = self.shared.mailbox.lock();
            if mailbox.opened.is_empty() {
                return 0;
            }
            std::mem::take(&mut mailbox.opened)
        };
        let count = opened.len();
        for OpenedCapture { op, id, result } in opened {
            self.capture_opened(op, id, result);
        }
        count
    }

    fn capture_opened(
        &mut self,
        op: u64,
        id: String,
        result: Result<Box<dyn CaptureWriter>, String>,
    ) {
        let found = self
            .captures
            .opening
            .iter()
            .find(|(_, opening)| opening.op == op)
            .map(|(generation, _)| *generation);
        let Some(generation) = found else {
            // timed out, cancelled, or its processor left: never installed
            self.discard_late_open(id, result);
            return;
        };
        let Some(opening) = self.captures.opening.remove(&generation) else {
            return;
        };
        let writer = match result {
            Ok(writer) => writer,
            Err(reason) => {
                self.shared.captures.release_slot(
                    &id,
                    CaptureState::OpenFailed,
                    Some(reason.clone()),
                );
                let reason = format!("open failed: {reason}");
                self.fail_waiters(
                    opening,
                    ReplyOutcome::Failed,
                    FailureKind::FailedEffect,
                    &reason,
                );
                return;
            }
        };
        let counters = {
            let mut ledger = self.shared.captures.ledger.lock();
            let counters = ledger
                .session(&id)
                .map(|entry| Arc::clone(&entry.counters))
                .unwrap_or_default();
            ledger.set_state(&id, CaptureState::Recording, None);
            counters
        };
        let Some(slot) = self
            .processors
            .get_mut(&generation)
            .filter(|slot| slot.quarantined.is_none())
        else {
            // it left, or was quarantined, while the open ran
            self.shared
                .captures
                .ledger
                .lock()
                .set_state(&id, CaptureState::Closing, None);
            self.shared.captures.close_later(id, writer);
            self.fail_waiters(
                opening,
                ReplyOutcome::Failed,
                FailureKind::FailedEffect,
                "the processor left or was quarantined while its capture opened: the capture is closed, not installed",
            );
            return;
        };
        slot.host
            .install_capture(Box::new(ActiveCapture::new(writer, counters)));
        let Opening {
            identity, waiters, ..
        } = opening;
        tracing::info!(group = %self.shared.name, processor = %identity.name, capture = %identity.capture_id, "audit capture recording");
        self.audit().write(
            NewRecord::new(RecordType::EffectOutcome, None, "InstallCapture")
                .generation(Some(generation))
                .name(Some(&identity.name))
                .outcome("succeeded"),
        );
        for waiter in waiters {
            let reply = ControlReply::applied_with(
                waiter.sender.request_id,
                "recording",
                Some(generation),
                Some(identity.name.clone()),
            );
            self.answer_waiter(waiter, reply);
        }
        self.captures.installed.insert(generation, identity);
    }

    fn discard_late_open(&mut self, id: String, result: Result<Box<dyn CaptureWriter>, String>) {
        match result {
            Ok(writer) => {
                tracing::warn!(group = %self.shared.name, capture = %id, "a late capture open returned: its capture is closed, never installed");
                self.audit().write(
                    NewRecord::new(RecordType::Fallback, None, "CaptureOpenedStale")
                        .reason(format!("capture {id}: closed, not installed")),
                );
                self.shared
                    .captures
                    .ledger
                    .lock()
                    .set_state(&id, CaptureState::Closing, None);
                self.shared.captures.close_later(id, writer);
            }
            Err(reason) => {
                self.shared
                    .captures
                    .release_slot(&id, CaptureState::OpenFailed, Some(reason));
            }
        }
    }

    /// The group closes: opens in progress are answered NOT_RUNNING and their late
    /// writers closed; installed captures were ended with their processors.
    pub(super) fn close_captures(&mut self) {
        let generations: Vec<u64> = self.captures.installed.keys().copied().collect();
        for generation in generations {
            self.end_capture_of(generation, "in a group that closed");
        }
        let opening: Vec<u64> = self.captures.opening.keys().copied().collect();
        for generation in opening {
            if let Some(opening) = self.captures.opening.remove(&generation) {
                self.fail_waiters(
                    opening,
                    ReplyOutcome::NotRunning,
                    FailureKind::FailedShutdown,
                    "group closed while the capture opened: its capture is closed when the open returns",
                );
            }
        }
        self.take_opened_captures();
    }
}

/// On an I/O helper thread: makes the session folder and its sidecar, opens the
/// capture, gives its permit back and hands the result to the group, or closes it
/// itself when the group no longer runs.
fn open_on_helper(
    group: &Arc<GroupShared>,
    op: u64,
    identity: &CaptureIdentity,
    settings: &CaptureSettings,
) {
    let result = create_session_folder(&settings.root, identity)
        .and_then(|dir| settings.resources.open(identity, &dir))
        .map_err(|error| error.to_string());
    group.captures.open_returned();
    let refused = {
        let mut mailbox = group.mailbox.lock();
        if mailbox.close_requested
            || !matches!(mailbox.state, GroupState::NotStarted | GroupState::Running)
        {
            Some(result)
        } else {
            mailbox.opened.push(OpenedCapture {
                op,
                id: identity.capture_id.clone(),
                result,
            });
            group
                .captures_opened
                .store(true, std::sync::atomic::Ordering::Release);
            None
        }
    };
    match refused {
        None => {
            if let Some(thread) = group.thread.lock().as_ref() {
                thread.unpark();
            }
        }
        Some(Ok(writer)) => {
            group.captures.ledger.lock().set_state(
                &identity.capture_id,
                CaptureState::Closing,
                None,
            );
            group.captures.close_now(&identity.capture_id, writer);
        }
        Some(Err(reason)) => {
            group.captures.release_slot(
                &identity.capture_id,
                CaptureState::OpenFailed,
                Some(reason),
            );
        }
    }
}
