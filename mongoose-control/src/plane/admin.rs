//! Processor-owned admin commands run through a control plane (see [`crate::admin`]).

use std::time::{Duration, Instant};

use mongoose_core::FailureKind;

use crate::group::{Admission, Letter, ProcessorGroup, Request};
use crate::reply::{ControlReply, ReplyHandle, ReplyOutcome};

use super::{refused, Plane};

/// Processor-owned admin commands (see [`crate::admin`]).
impl Plane {
    fn admin_letter(
        &self,
        group: &str,
        processor: &str,
        command: &str,
        args: Vec<String>,
    ) -> Result<(ProcessorGroup, Letter, ReplyHandle), ControlReply> {
        let Some(found) = self.group(group) else {
            return Err(refused(
                ReplyOutcome::Refused,
                FailureKind::RefusedState,
                &format!("no such group '{group}'"),
                None,
                Some(processor),
            ));
        };
        let (letter, reply) = self.letter(Request::Admin {
            name: processor.to_owned(),
            command: command.to_owned(),
            args,
        });
        Ok((found, letter, reply))
    }

    /// See [`ControlPlane::invoke_admin_command`].
    pub(crate) fn invoke_admin_command(
        &self,
        group: &str,
        processor: &str,
        command: &str,
        args: Vec<String>,
    ) -> ReplyHandle {
        let (found, letter, reply) = match self.admin_letter(group, processor, command, args) {
            Ok(parts) => parts,
            Err(refusal) => return ReplyHandle::completed(refusal),
        };
        if let Err((letter, refusal)) = found.admit(letter, Admission::Immediate) {
            let answer = Self::refusal_reply(&found, refusal, None, processor);
            ProcessorGroup::answer_refused(letter, answer);
        }
        reply
    }

    /// See [`ControlPlane::invoke_admin_command_wait`].
    pub(crate) fn invoke_admin_command_wait(
        &self,
        group: &str,
        processor: &str,
        command: &str,
        args: Vec<String>,
        wait: Duration,
    ) -> Option<ControlReply> {
        let deadline = Instant::now() + wait;
        let (found, letter, reply) = match self.admin_letter(group, processor, command, args) {
            Ok(parts) => parts,
            Err(refusal) => return Some(refusal),
        };
        if let Err((letter, refusal)) =
            found.admit(letter, self.backoff_admission(&found, deadline))
        {
            let answer = Self::refusal_reply(&found, refusal, None, processor);
            ProcessorGroup::answer_refused(letter, answer.clone());
            return Some(answer);
        }
        if !self.may_wait(&found) {
            return None;
        }
        reply.wait(deadline).ok()
    }

    /// See [`ControlPlane::admin_commands`].
    pub(crate) fn admin_commands(&self, group: &str, processor: &str) -> Option<Vec<String>> {
        self.group(group)?.admin_commands(processor)
    }
}
