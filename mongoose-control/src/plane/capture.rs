//! Audit capture through a control plane: naming the processor (`name` or
//! `group/name`), start and stop requests to its group, the sessions' status and
//! the capture resources a shutdown waits for (book: guarantees/control-plane.md).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::error::ControlError;
use crate::group::{CaptureStart, ProcessorGroup, Request};
use crate::reply::{ControlReply, ReplyHandle};
use mongoose_audit::capture::{CaptureIdentity, CaptureSettings, CaptureStatus, ProcessorSelector};

use super::Plane;

/// How long a caller waits, beyond the open timeout, for a start to be claimed by its
/// group ("Group begins applying the request: 5 s").
const CLAIM_WAIT: Duration = Duration::from_secs(5);

impl Plane {
    /// See [`crate::ControlPlane::enable_capture`].
    pub(crate) fn enable_capture(&self, settings: CaptureSettings) {
        *self.capture.lock() = Some(settings);
    }

    /// The processor `selector` names now: its group, name and registration.
    pub(crate) fn resolve_processor(
        &self,
        selector: &str,
    ) -> Result<(ProcessorGroup, String, u64), ControlError> {
        // parsing fails only for a bad selector
        let parsed = ProcessorSelector::parse(selector).map_err(|_| ControlError::BadSelector {
            selector: selector.to_owned(),
        })?;
        match parsed {
            ProcessorSelector::Qualified { group, name } => {
                let found = self.group(&group);
                let generation = found
                    .as_ref()
                    .and_then(|found| found.admitted_generation(&name));
                match (found, generation) {
                    (Some(found), Some(generation)) => Ok((found, name, generation)),
                    _ => Err(ControlError::NoSuchProcessor { group, name }),
                }
            }
            ProcessorSelector::Name(name) => {
                let groups: Vec<ProcessorGroup> = self.groups.lock().values().cloned().collect();
                let mut admitting: Vec<(ProcessorGroup, u64)> = groups
                    .iter()
                    .filter_map(|group| {
                        group
                            .admitted_generation(&name)
                            .map(|generation| (group.clone(), generation))
                    })
                    .collect();
                match admitting.len() {
                    0 => Err(ControlError::UnknownProcessor {
                        name,
                        groups: groups.iter().map(|group| group.name().to_owned()).collect(),
                    }),
                    1 => {
                        let (group, generation) = admitting.remove(0);
                        Ok((group, name, generation))
                    }
                    _ => Err(ControlError::AmbiguousProcessor {
                        name,
                        groups: admitting
                            .iter()
                            .map(|(group, _)| group.name().to_owned())
                            .collect(),
                    }),
                }
            }
        }
    }

    fn capture_settings(&self) -> Result<CaptureSettings, ControlError> {
        self.capture
            .lock()
            .clone()
            .ok_or(ControlError::CaptureDisabled)
    }

    /// Sends `request` to `group` without backing off on a full mailbox.
    fn send_capture_request(
        &self,
        group: &ProcessorGroup,
        request: Request,
        generation: u64,
        name: &str,
    ) -> ReplyHandle {
        let (letter, reply) = self.letter(request);
        let deadline = Instant::now() + group.full_timeout();
        if let Err((letter, refusal)) = group.admit(letter, self.backoff_admission(group, deadline))
        {
            let answer = Self::refusal_reply(group, refusal, Some(generation), name);
            ProcessorGroup::answer_refused(letter, answer);
        }
        reply
    }

    /// See [`crate::ControlPlane::start_capture`].
    pub(crate) fn start_capture(&self, selector: &str) -> Result<ReplyHandle, ControlError> {
        let settings = self.capture_settings()?;
        let (group, name, generation) = self.resolve_processor(selector)?;
        let capture_id = format!(
            "{}-{}-{}",
            mongoose_audit::capture::now_millis(),
            std::process::id(),
            self.next_capture.fetch_add(1, Ordering::Relaxed)
        );
        let identity = CaptureIdentity {
            group: group.name().to_owned(),
            name: name.clone(),
            generation,
            capture_id,
        };
        Ok(self.send_capture_request(
            &group,
            Request::CaptureStart(Box::new(CaptureStart { identity, settings })),
            generation,
            &name,
        ))
    }

    /// See [`crate::ControlPlane::start_capture_wait`].
    pub(crate) fn start_capture_wait(&self, selector: &str) -> Result<ControlReply, ControlError> {
        let wait = self.capture_settings()?.open_timeout + CLAIM_WAIT;
        let reply = self.start_capture(selector)?;
        reply.wait(Instant::now() + wait)
    }

    /// See [`crate::ControlPlane::stop_capture`].
    pub(crate) fn stop_capture(&self, selector: &str) -> Result<ReplyHandle, ControlError> {
        self.capture_settings()?;
        let (group, name, generation) = self.resolve_processor(selector)?;
        Ok(self.send_capture_request(
            &group,
            Request::CaptureStop {
                name: name.clone(),
                generation,
            },
            generation,
            &name,
        ))
    }

    /// See [`crate::ControlPlane::stop_capture_wait`].
    pub(crate) fn stop_capture_wait(&self, selector: &str) -> Result<ControlReply, ControlError> {
        let reply = self.stop_capture(selector)?;
        reply.wait(Instant::now() + CLAIM_WAIT + self.config.control_wait)
    }

    /// See [`crate::ControlPlane::capture_statuses`].
    pub(crate) fn capture_statuses(&self) -> Vec<CaptureStatus> {
        let groups: Vec<ProcessorGroup> = self.groups.lock().values().cloned().collect();
        groups
            .iter()
            .flat_map(ProcessorGroup::capture_statuses)
            .collect()
    }

    /// See [`crate::ControlPlane::await_captures_resolved`].
    pub(crate) fn await_captures_resolved(&self, deadline: Instant) -> Vec<String> {
        let groups: Vec<ProcessorGroup> = self.groups.lock().values().cloned().collect();
        loop {
            let mut unresolved = Vec::new();
            let mut only_failures = true;
            for group in &groups {
                let (held, failures) = group.capture_resources_held();
                if held == 0 {
                    continue;
                }
                only_failures &= held == failures.len();
                unresolved.push(format!(
                    "capture:{} <audit capture stopping>: {held} capture resources unresolved{}",
                    group.name(),
                    if failures.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", failures.join("; "))
                    }
                ));
            }
            // failed closes are never retried: waiting longer changes nothing
            if unresolved.is_empty() || only_failures || Instant::now() >= deadline {
                return unresolved;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}
