//! The capture requests a group applies on its thread: a start, a stop, a capture
//! ended with its processor, the group's close.

use std::sync::Arc;
use std::time::Instant;

use mongoose_core::FailureKind;

use crate::group::{write_reply_record, Runtime};
use crate::reply::{ControlReply, ReplyOutcome};
use mongoose_audit::capture::{CaptureIdentity, CaptureSettings, CaptureState};

use super::opens::open_on_helper;
use super::{Opening, Waiter};

impl Runtime {
    /// A start: APPLIED "already recording", or an open joined or begun (answered once
    /// installed: `None` here), or refused with the reason.
    pub(in crate::group) fn apply_capture_start(
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
        let claimed = self
            .shared
            .captures
            .claim(&identity, &settings, &self.shared.name);
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
    pub(in crate::group) fn apply_capture_stop(
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
    pub(in crate::group) fn end_capture_of(&mut self, generation: u64, why: &str) {
        if let Some(identity) = self.captures.installed.remove(&generation) {
            let active = self
                .processors
                .get_mut(&generation)
                .and_then(|slot| slot.host.take_capture());
            self.shared
                .captures
                .set_state(&identity.capture_id, CaptureState::Closing, None);
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
            self.shared.captures.set_state(
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

    pub(super) fn fail_waiters(
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

    pub(super) fn answer_waiter(&self, waiter: Waiter, mut reply: ControlReply) {
        reply.evidence = self.audit().evidence();
        write_reply_record(self.audit(), &reply, waiter.input, None);
        waiter.sender.complete_on(&self.shared.executor, reply);
    }

    /// The group closes: opens in progress are answered NOT_RUNNING and their late
    /// writers closed; installed captures were ended with their processors.
    pub(in crate::group) fn close_captures(&mut self) {
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
