//! Processor-owned admin commands run through a control plane (see [`crate::admin`]).

use std::time::{Duration, Instant};

use mongoose_core::FailureKind;

use crate::group::{Admission, Envelope, ProcessorGroup, Request};
use crate::reply::{ControlReply, ReplyHandle, ReplyOutcome};

use super::{refused, ControlPlane};

/// Processor-owned admin commands (see [`crate::admin`]).
impl ControlPlane {
    fn admin_envelope(
        &self,
        group: &str,
        processor: &str,
        command: &str,
        args: Vec<String>,
    ) -> Result<(ProcessorGroup, Envelope, ReplyHandle), ControlReply> {
        let Some(found) = self.group(group) else {
            return Err(refused(
                ReplyOutcome::Refused,
                FailureKind::RefusedState,
                &format!("no such group '{group}'"),
                None,
                Some(processor),
            ));
        };
        let (envelope, reply) = self.envelope(Request::Admin {
            name: processor.to_owned(),
            command: command.to_owned(),
            args,
        });
        Ok((found, envelope, reply))
    }

    /// Runs `processor`'s admin command `command` with `args` on its group's thread,
    /// through the group's control mailbox (between items, never while a handler
    /// runs), and returns the reply handle at once, without backing off on a full
    /// mailbox. The reply is APPLIED with the command's [`ControlReply::output`], FAILED
    /// when the command returned an error or panicked, REFUSED for an unknown group,
    /// processor or command (the reason lists what there is). Every request that
    /// reaches the group is written to its control audit. See [`crate::admin`].
    pub fn invoke_admin_command(
        &self,
        group: &str,
        processor: &str,
        command: &str,
        args: Vec<String>,
    ) -> ReplyHandle {
        let (found, envelope, reply) = match self.admin_envelope(group, processor, command, args) {
            Ok(parts) => parts,
            Err(refusal) => return ReplyHandle::completed(refusal),
        };
        if let Err((envelope, refusal)) = found.admit(envelope, Admission::Immediate) {
            let answer = Self::refusal_reply(&found, refusal, None, processor);
            ProcessorGroup::answer_refused(envelope, answer);
        }
        reply
    }

    /// [`ControlPlane::invoke_admin_command`], waiting for the reply: one deadline,
    /// `wait` from the call, covers admission (backing off on a full mailbox) and the
    /// reply. `None` when the caller may not wait (an agent thread, a group not
    /// started) or no reply came in time: the command still runs.
    pub fn invoke_admin_command_wait(
        &self,
        group: &str,
        processor: &str,
        command: &str,
        args: Vec<String>,
        wait: Duration,
    ) -> Option<ControlReply> {
        let deadline = Instant::now() + wait;
        let (found, envelope, reply) = match self.admin_envelope(group, processor, command, args) {
            Ok(parts) => parts,
            Err(refusal) => return Some(refusal),
        };
        if let Err((envelope, refusal)) =
            found.admit(envelope, self.backoff_admission(&found, deadline))
        {
            let answer = Self::refusal_reply(&found, refusal, None, processor);
            ProcessorGroup::answer_refused(envelope, answer.clone());
            return Some(answer);
        }
        if !self.may_wait(&found) {
            return None;
        }
        reply.wait(deadline).ok()
    }

    /// The admin commands the running processor `processor` of `group` registered,
    /// sorted; `None` when there is no such group or running processor.
    pub fn admin_commands(&self, group: &str, processor: &str) -> Option<Vec<String>> {
        self.group(group)?.admin_commands(processor)
    }
}
