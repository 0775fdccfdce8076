//! The audit trail of a decision: the Decision record of the rule that decided a
//! request, the EffectOutcome of each effect it requested (numbered `request.op`), and
//! the Reply record written before the one reply is sent (book: guarantees/control-plane.md
//! ).

use mongoose_core::FailureKind;

use super::Runtime;
use crate::reply::ControlReply;
use mongoose_audit::sentinel;
use mongoose_audit::{ControlAudit, NewRecord, RecordType};

impl Runtime {
    pub(super) fn audit(&self) -> &ControlAudit {
        &self.shared.audit
    }

    pub(super) fn answer(&mut self, mut reply: ControlReply) {
        let Some((sender, input)) = self.in_flight.take() else {
            return;
        };
        reply.evidence = self.audit().evidence();
        let cause_op = self.last_op(reply.request_id);
        write_reply_record(self.audit(), &reply, input, cause_op);
        sender.complete_on(&self.shared.executor, reply);
    }

    /// Writes the Decision record of `rule`: the state it found and the one it leads
    /// to, and the effects it requests (as `opId Effect(generation)`, numbered as
    /// [`Self::effect`] will number their outcomes), before any of them runs.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn decision(
        &self,
        request_id: Option<u64>,
        input: u64,
        rule: &str,
        generation: Option<u64>,
        name: &str,
        (from, to): (&str, &str),
        effects: &[&str],
    ) {
        let effects = self.effect_ops(request_id, generation, effects);
        self.audit().write(
            NewRecord::new(RecordType::Decision, request_id, rule)
                .cause(input)
                .generation(generation)
                .name(Some(name))
                .transition(from, to)
                .effects(effects),
        );
    }

    /// The effects a decision requests, as `opId Effect(generation)`, numbered as
    /// [`Self::effect`] will number their outcomes.
    pub(super) fn effect_ops(
        &self,
        request_id: Option<u64>,
        generation: Option<u64>,
        effects: &[&str],
    ) -> Vec<String> {
        effects
            .iter()
            .enumerate()
            .map(|(index, effect)| {
                let op = self.effects_of_request + 1 + index as u32;
                format!(
                    "{}.{op} {effect}({})",
                    sentinel::text(request_id),
                    sentinel::text(generation)
                )
            })
            .collect()
    }

    /// The opId of the last effect of the request being decided, if it had one.
    pub(super) fn last_op(&self, request_id: Option<u64>) -> Option<String> {
        (self.effects_of_request > 0)
            .then(|| format!("{}.{}", sentinel::text(request_id), self.effects_of_request))
    }

    pub(super) fn effect(
        &mut self,
        request_id: Option<u64>,
        input: u64,
        effect: &str,
        result: &Result<(), String>,
        generation: Option<u64>,
    ) {
        self.effects_of_request += 1;
        let record = NewRecord::new(RecordType::EffectOutcome, request_id, effect)
            .cause(input)
            .op(format!(
                "{}.{}",
                sentinel::text(request_id),
                self.effects_of_request
            ))
            .generation(generation);
        let record = match result {
            Ok(()) => record.outcome("succeeded"),
            Err(reason) => record
                .outcome("failed")
                .reason(reason.clone())
                .kind(FailureKind::FailedEffect),
        };
        self.audit().write(record);
    }
}

pub(super) fn write_reply_record(
    audit: &ControlAudit,
    reply: &ControlReply,
    cause: u64,
    cause_op: Option<String>,
) {
    let mut record = NewRecord::new(RecordType::Reply, reply.request_id, "Reply")
        .cause(cause)
        .cause_op(cause_op)
        .outcome(reply.outcome.to_string())
        .reason(reply.reason.clone())
        .generation(reply.generation)
        .name(reply.name.as_deref());
    if reply.kind != FailureKind::None {
        record = record.kind(reply.kind);
    }
    audit.write(record);
}
