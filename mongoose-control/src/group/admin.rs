//! Admin commands: a running processor's commands, listed for the operator and run on
//! the group's thread through its control mailbox (see [`crate::admin`]).

use mongoose_core::FailureKind;

use super::{ProcessorGroup, Runtime};
use crate::reply::{ControlReply, ReplyOutcome};
use mongoose_audit::{NewRecord, RecordType};

/// Admin commands (see [`crate::admin`]).
impl ProcessorGroup {
    /// The admin commands the running processor `name` registered, sorted; `None`
    /// when no running processor has that name (a quarantined one has none).
    pub fn admin_commands(&self, name: &str) -> Option<Vec<String>> {
        let status = self.shared.status.lock();
        if !status.running.iter().any(|running| running.name == name) {
            return None;
        }
        Some(status.commands.get(name).cloned().unwrap_or_default())
    }
}

impl Runtime {
    /// Runs processor `name`'s admin command on the group's thread, between items,
    /// and answers with its output (see [`crate::admin`] for every reply).
    pub(super) fn apply_admin(
        &mut self,
        request_id: Option<u64>,
        input: u64,
        name: String,
        command: String,
        args: Vec<String>,
    ) -> ControlReply {
        let command_line = std::iter::once(command.as_str())
            .chain(args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        let found = self
            .processors
            .iter()
            .find(|(_, slot)| slot.name == name)
            .map(|(generation, slot)| (*generation, slot.quarantined.clone()));
        let Some((generation, quarantined)) = found else {
            self.admin_decision(
                request_id,
                input,
                "adminNoSuchProcessor",
                None,
                &name,
                &command_line,
            );
            let running: Vec<&str> = self
                .processors
                .values()
                .filter(|slot| slot.quarantined.is_none())
                .map(|slot| slot.name.as_str())
                .collect();
            let running = if running.is_empty() {
                "none".to_owned()
            } else {
                running.join(", ")
            };
            return ControlReply::not_applied(
                request_id,
                ReplyOutcome::Refused,
                FailureKind::RefusedState,
                format!(
                    "no such processor '{name}' in group '{}' (running: {running})",
                    self.shared.name
                ),
                None,
                Some(name),
            );
        };
        let signed = Some(generation);
        if let Some(reason) = quarantined {
            self.admin_decision(
                request_id,
                input,
                "adminQuarantined",
                signed,
                &name,
                &command_line,
            );
            return ControlReply::not_applied(
                request_id,
                ReplyOutcome::Refused,
                FailureKind::Quarantined,
                format!("processor '{name}' is quarantined ({reason}): its admin commands were removed with its routes"),
                signed,
                Some(name),
            );
        }
        let listing = match self.processors.get(&generation) {
            Some(slot) if !slot.host.has_command(&command) => Some(slot.host.command_listing()),
            _ => None,
        };
        if let Some(listing) = listing {
            self.admin_decision(
                request_id,
                input,
                "adminNoSuchCommand",
                signed,
                &name,
                &command_line,
            );
            return ControlReply::not_applied(
                request_id,
                ReplyOutcome::Refused,
                FailureKind::RefusedState,
                format!(
                    "processor '{name}' has no admin command '{command}' (its commands: {listing})"
                ),
                signed,
                Some(name),
            );
        }
        self.admin_decision(
            request_id,
            input,
            "adminInvoke",
            signed,
            &name,
            &command_line,
        );
        let Some(slot) = self.processors.get_mut(&generation) else {
            unreachable!("the processor was found above");
        };
        // Ok(answer) when the command returned, Err(reason) when it panicked
        let ran = slot
            .host
            .invoke_admin(&command, &args, self.recorder.as_deref_mut());
        let effect = match &ran {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => Err(error.clone()),
            Err(reason) => Err(reason.clone()),
        };
        self.effect(request_id, input, "AdminCommand", &effect, signed);
        match ran {
            Ok(Ok(output)) => {
                let mut reply = ControlReply::applied_with(
                    request_id,
                    format!("admin command '{command}' ran"),
                    signed,
                    Some(name),
                );
                reply.output = Some(output);
                reply
            }
            Ok(Err(error)) => ControlReply::not_applied(
                request_id,
                ReplyOutcome::Failed,
                FailureKind::FailedEffect,
                format!("admin command '{command}' failed: {error}"),
                signed,
                Some(name),
            ),
            Err(reason) => {
                // a panic is a failure of the processor, contained like a handler's
                self.contain(
                    generation,
                    &format!("admin command '{command}'"),
                    reason.clone(),
                );
                let quarantined = self
                    .processors
                    .get(&generation)
                    .is_some_and(|slot| slot.quarantined.is_some());
                ControlReply::not_applied(
                    request_id,
                    ReplyOutcome::Failed,
                    if quarantined {
                        FailureKind::Quarantined
                    } else {
                        FailureKind::FailedEffect
                    },
                    format!("admin command '{command}' {reason}"),
                    signed,
                    Some(name),
                )
            }
        }
    }

    /// A decision record of an admin request, with its command line.
    fn admin_decision(
        &self,
        request_id: Option<u64>,
        input: u64,
        rule: &str,
        generation: Option<u64>,
        name: &str,
        command_line: &str,
    ) {
        // the state the rule found and kept, and the effect it requests (as decision())
        let (state, effects): (&str, &[&str]) = match rule {
            "adminInvoke" => ("RUNNING", &["AdminCommand"]),
            "adminNoSuchCommand" => ("RUNNING", &[]),
            "adminQuarantined" => ("QUARANTINED", &[]),
            _ => ("ABSENT", &[]),
        };
        let effects = self.effect_ops(request_id, generation, effects);
        self.audit().write(
            NewRecord::new(RecordType::Decision, request_id, rule)
                .cause(input)
                .generation(generation)
                .name(Some(name))
                .reason(format!("command: {command_line}"))
                .transition(state, state)
                .effects(effects),
        );
    }
}
