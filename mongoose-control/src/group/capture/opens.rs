//! An open on its I/O helper thread, and what the group does with it when it returns
//! (installs it or closes a late one) or runs past its timeout.

use std::sync::Arc;
use std::time::Instant;

use mongoose_core::FailureKind;

use crate::group::{GroupShared, GroupState, Runtime};
use crate::reply::{ControlReply, ReplyOutcome};
use mongoose_audit::capture::routing::ActiveCapture;
use mongoose_audit::capture::{
    create_session_folder, CaptureIdentity, CaptureSettings, CaptureState, CaptureWriter,
};
use mongoose_audit::{NewRecord, RecordType};

use super::{OpenedCapture, Opening};

impl Runtime {
    /// Opens that ran past their timeout: answered FAILED "open timed out"; their
    /// helpers keep their permits until they return, and a late writer is closed.
    pub(in crate::group) fn expire_capture_opens(&mut self) -> usize {
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
                self.shared.captures.set_state(
                    &opening.identity.capture_id,
                    CaptureState::OpenFailed,
                    Some("open timed out".to_owned()),
                );
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
    pub(in crate::group) fn take_opened_captures(&mut self) -> usize {
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
        let counters = self.shared.captures.set_recording(&id);
        let Some(slot) = self
            .processors
            .get_mut(&generation)
            .filter(|slot| slot.quarantined.is_none())
        else {
            // it left, or was quarantined, while the open ran
            self.shared
                .captures
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
}

/// On an I/O helper thread: makes the session folder and its sidecar, opens the
/// capture, gives its permit back and hands the result to the group, or closes it
/// itself when the group no longer runs.
pub(super) fn open_on_helper(
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
            group
                .captures
                .set_state(&identity.capture_id, CaptureState::Closing, None);
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
