//! Adding and stopping processors through a control plane (book: guarantees/control-plane.md).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mongoose_core::FailureKind;

use crate::error::ControlError;
use crate::group::{Admission, NotAdmitted, ProcessorGroup, Request};
use crate::handle::ProcessorHandle;
use crate::reply::{ControlReply, ReplyHandle, ReplyOutcome};
use crate::supplier::ProcessorSupplier;

use super::{refused, AddFailurePolicy, Plane};
use crate::handle::AddedProcessor;

impl Plane {
    fn add_request(name: &str, generation: u64, supplier: ProcessorSupplier) -> Request {
        let (type_name, supplier) = supplier.into_parts();
        Request::Add {
            name: name.to_owned(),
            generation,
            type_name,
            supplier,
        }
    }

    /// See [`ControlPlane::add_processor`].
    pub(crate) fn add_processor(
        &self,
        group: &str,
        name: &str,
        supplier: impl Into<ProcessorSupplier>,
    ) -> AddedProcessor {
        let supplier = supplier.into();
        let refused_now = |reply: ControlReply| AddedProcessor {
            handle: None,
            reply: ReplyHandle::completed(reply),
        };
        if self.stopping.load(Ordering::Acquire) {
            return refused_now(refused(
                ReplyOutcome::NotRunning,
                FailureKind::FailedShutdown,
                "server is stopping",
                None,
                Some(name),
            ));
        }
        let group = match self.group_or_create(group) {
            Ok(group) => group,
            Err(error) => {
                return refused_now(refused(
                    ReplyOutcome::NotRunning,
                    FailureKind::FailedShutdown,
                    &error.to_string(),
                    None,
                    Some(name),
                ))
            }
        };
        let Some(generation) = group.reserve(name) else {
            return refused_now(refused(
                ReplyOutcome::Refused,
                FailureKind::RefusedState,
                "name in use",
                None,
                Some(name),
            ));
        };
        let (letter, reply) = self.letter(Self::add_request(name, generation, supplier));
        match group.admit(letter, Admission::Immediate) {
            Ok(()) => AddedProcessor {
                handle: Some(ProcessorHandle {
                    server: self.server,
                    group: group.name().to_owned(),
                    name: name.to_owned(),
                    generation,
                }),
                reply,
            },
            Err((letter, refusal)) => {
                group.release_reservation(name, generation);
                let answer = Self::refusal_reply(&group, refusal, Some(generation), name);
                ProcessorGroup::answer_refused(letter, answer);
                AddedProcessor {
                    handle: None,
                    reply,
                }
            }
        }
    }

    /// See [`ControlPlane::add_event_processor`].
    pub(crate) fn add_event_processor(
        &self,
        group: &str,
        name: &str,
        supplier: impl Into<ProcessorSupplier>,
    ) -> Result<(), ControlError> {
        let supplier = supplier.into();
        let deadline = Instant::now() + self.config.control_wait;
        if self.stopping.load(Ordering::Acquire) {
            return Err(ControlError::ServerStopping);
        }
        let group = self.group_or_create(group)?;
        let Some(generation) = group.reserve(name) else {
            return Err(ControlError::NameInUse {
                group: group.name().to_owned(),
                name: name.to_owned(),
            });
        };
        let (letter, reply) = self.letter(Self::add_request(name, generation, supplier));
        if let Err((letter, refusal)) =
            group.admit(letter, self.backoff_admission(&group, deadline))
        {
            group.release_reservation(name, generation);
            let answer = Self::refusal_reply(&group, refusal, Some(generation), name);
            ProcessorGroup::answer_refused(letter, answer);
            return Err(match refusal {
                NotAdmitted::Full | NotAdmitted::Deadline => ControlError::MailboxFull {
                    group: group.name().to_owned(),
                    capacity: group.capacity(),
                },
                NotAdmitted::ServerStopping | NotAdmitted::NotRunning(_) => {
                    ControlError::ServerStopping
                }
            });
        }
        if !self.may_wait(&group) {
            log_outcome(&reply, "add");
            return Ok(());
        }
        match reply.wait(deadline) {
            Ok(answer) if answer.applied() => Ok(()),
            Ok(answer) => match self.config.add_failure_policy {
                AddFailurePolicy::Report => {
                    tracing::warn!(group = group.name(), processor = name, outcome = %answer.outcome, kind = ?answer.kind, reason = %answer.reason, "processor not added");
                    Ok(())
                }
                AddFailurePolicy::Throw => Err(ControlError::NotApplied(Box::new(answer))),
            },
            Err(_) => {
                tracing::warn!(
                    group = group.name(),
                    processor = name,
                    "no add reply within control_wait; the add still applies"
                );
                Ok(())
            }
        }
    }

    /// See [`ControlPlane::processor_handle`].
    pub(crate) fn processor_handle(&self, group: &str, name: &str) -> Option<ProcessorHandle> {
        let group = self.group(group)?;
        let generation = group.admitted_generation(name)?;
        Some(ProcessorHandle {
            server: self.server,
            group: group.name().to_owned(),
            name: name.to_owned(),
            generation,
        })
    }

    /// See [`ControlPlane::stop_processor`].
    pub(crate) fn stop_processor(&self, handle: &ProcessorHandle) -> ReplyHandle {
        let generation = Some(handle.generation);
        if handle.server != self.server {
            return ReplyHandle::completed(refused(
                ReplyOutcome::Refused,
                FailureKind::RefusedInvalid,
                "handle belongs to another server",
                generation,
                Some(&handle.name),
            ));
        }
        let Some(group) = self.group(&handle.group) else {
            return ReplyHandle::completed(refused(
                ReplyOutcome::Refused,
                FailureKind::RefusedState,
                "no such group",
                generation,
                Some(&handle.name),
            ));
        };
        let (letter, reply) = self.letter(Request::Stop {
            name: handle.name.clone(),
            generation: handle.generation,
        });
        if let Err((letter, refusal)) = group.admit(letter, Admission::Immediate) {
            let answer = Self::refusal_reply(&group, refusal, generation, &handle.name);
            ProcessorGroup::answer_refused(letter, answer);
        }
        reply
    }

    /// See [`ControlPlane::stop_processor_by_name`].
    pub(crate) fn stop_processor_by_name(
        &self,
        group: &str,
        name: &str,
    ) -> Result<(), ControlError> {
        let deadline = Instant::now() + self.config.control_wait;
        let Some(group) = self.group(group) else {
            return Ok(());
        };
        let Some(generation) = group.admitted_generation(name) else {
            return Ok(());
        };
        let (letter, reply) = self.letter(Request::Stop {
            name: name.to_owned(),
            generation,
        });
        if let Err((letter, refusal)) =
            group.admit(letter, self.backoff_admission(&group, deadline))
        {
            let answer = Self::refusal_reply(&group, refusal, Some(generation), name);
            ProcessorGroup::answer_refused(letter, answer);
            return match refusal {
                NotAdmitted::Full | NotAdmitted::Deadline => Err(ControlError::MailboxFull {
                    group: group.name().to_owned(),
                    capacity: group.capacity(),
                }),
                NotAdmitted::ServerStopping | NotAdmitted::NotRunning(_) => Ok(()),
            };
        }
        if !self.may_wait(&group) {
            log_outcome(&reply, "stop");
            return Ok(());
        }
        if reply.wait(deadline).is_err() {
            tracing::warn!(
                group = group.name(),
                processor = name,
                "no stop reply within control_wait; the stop still applies"
            );
        }
        Ok(())
    }

    /// See [`ControlPlane::stop_processor_wait`].
    pub(crate) fn stop_processor_wait(
        &self,
        group: &str,
        name: &str,
        wait: Duration,
    ) -> Option<ControlReply> {
        let deadline = Instant::now() + wait;
        let Some(group) = self.group(group) else {
            return Some(refused(
                ReplyOutcome::Refused,
                FailureKind::RefusedState,
                "no such group",
                None,
                Some(name),
            ));
        };
        let Some(generation) = group.admitted_generation(name) else {
            return Some(refused(
                ReplyOutcome::Refused,
                FailureKind::RefusedState,
                "no such processor",
                None,
                Some(name),
            ));
        };
        let (letter, reply) = self.letter(Request::Stop {
            name: name.to_owned(),
            generation,
        });
        if let Err((letter, refusal)) =
            group.admit(letter, self.backoff_admission(&group, deadline))
        {
            let answer = Self::refusal_reply(&group, refusal, Some(generation), name);
            ProcessorGroup::answer_refused(letter, answer.clone());
            return Some(answer);
        }
        if !self.may_wait(&group) {
            return None;
        }
        reply.wait(deadline).ok()
    }

    /// Stops what is admitted under the name at call time, admitted at once (never
    /// backing off, never waiting): what a processor's [`crate::Controller`] does.
    pub(crate) fn stop_processor_now(
        &self,
        group: &str,
        name: &str,
    ) -> Result<ReplyHandle, ControlError> {
        let no_such = || ControlError::NoSuchProcessor {
            group: group.to_owned(),
            name: name.to_owned(),
        };
        let group = self.group(group).ok_or_else(no_such)?;
        let generation = group.admitted_generation(name).ok_or_else(no_such)?;
        let (letter, reply) = self.letter(Request::Stop {
            name: name.to_owned(),
            generation,
        });
        if let Err((letter, refusal)) = group.admit(letter, Admission::Immediate) {
            let answer = Self::refusal_reply(&group, refusal, Some(generation), name);
            ProcessorGroup::answer_refused(letter, answer.clone());
            return Err(match refusal {
                NotAdmitted::Full => ControlError::MailboxFull {
                    group: group.name().to_owned(),
                    capacity: group.capacity(),
                },
                _ => ControlError::NotApplied(Box::new(answer)),
            });
        }
        Ok(reply)
    }
}

fn log_outcome(reply: &ReplyHandle, what: &'static str) {
    reply.on_reply(move |answer| {
        if answer.applied() {
            tracing::debug!(request_id = answer.request_id, "{what} applied");
        } else {
            tracing::warn!(request_id = answer.request_id, outcome = %answer.outcome, kind = ?answer.kind, reason = %answer.reason, "{what} not applied");
        }
    });
}
