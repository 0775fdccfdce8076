//! What an audit record holds ([`AuditRecord`], [`RecordType`]) and the builder a
//! group writes one with ([`NewRecord`]).

use mongoose_core::FailureKind;
use serde::{Deserialize, Serialize};

/// What a record is.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum RecordType {
    /// A request or completion the control logic received.
    Input,
    /// A rule that fired, before the effects it requests.
    Decision,
    /// The result of an effect, pending or final.
    EffectOutcome,
    /// The final reply to a request.
    Reply,
    /// A record the group writes itself (quarantine, death, refusals at close).
    Fallback,
}

/// One control audit record.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Group-local, gap-free sequence.
    pub seq: u64,
    /// What the record is.
    pub record: RecordType,
    /// The request (`None` for records not caused by a request; `-1` in an export).
    #[serde(with = "crate::sentinel")]
    pub request_id: Option<u64>,
    /// The request this record belongs to, shared by all its records (`-1` in an
    /// export when `None`).
    #[serde(with = "crate::sentinel")]
    pub root_id: Option<u64>,
    /// The record that caused this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause_seq: Option<u64>,
    /// The effect's operation id, `requestId.n` (EffectOutcome records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_id: Option<String>,
    /// Input: the fact (Add, Stop, ...); Decision: the rule; EffectOutcome: the
    /// effect; Fallback: its kind (ProcessorQuarantined, NotRunning, ...).
    pub what: String,
    /// Outcome (Reply, EffectOutcome).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Human detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The registration concerned, if any (`-1` in an export when `None`).
    #[serde(with = "crate::sentinel")]
    pub generation: Option<u64>,
    /// The processor or service name, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The failure kind of a reply or failed outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<FailureKind>,
    /// Decision: the state the rule found (`ABSENT`, `RUNNING`, `QUARANTINED`,
    /// `STOPPED`, or a service's version `vN`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Decision: the state the rule leads to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Decision: the effects it requests, each as `opId Effect(generation)`, in the
    /// order they run; their outcomes are the EffectOutcome records with those opIds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub effects: Vec<String>,
    /// The effect that caused this record (a reply that follows an effect carries the
    /// last effect's opId).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause_op: Option<String>,
}

/// A record to write: what the control logic of a group (`mongoose-control`) fills in
/// with the builder methods; [`ControlAudit::write`](super::ControlAudit::write) gives it
/// its `seq` and bounds its texts. The fields mean what [`AuditRecord`]'s do.
#[derive(Clone, Debug)]
pub struct NewRecord {
    pub(super) record: RecordType,
    pub(super) request_id: Option<u64>,
    pub(super) root_id: Option<u64>,
    pub(super) cause_seq: Option<u64>,
    pub(super) op_id: Option<String>,
    pub(super) what: String,
    pub(super) outcome: Option<String>,
    pub(super) reason: Option<String>,
    pub(super) generation: Option<u64>,
    pub(super) name: Option<String>,
    pub(super) kind: Option<FailureKind>,
    pub(super) from: Option<String>,
    pub(super) to: Option<String>,
    pub(super) effects: Vec<String>,
    pub(super) cause_op: Option<String>,
}

impl NewRecord {
    /// A record of type `record` for `request_id` (also its `root_id`): `what` it is.
    pub fn new(record: RecordType, request_id: Option<u64>, what: impl Into<String>) -> Self {
        NewRecord {
            record,
            request_id,
            root_id: request_id,
            cause_seq: None,
            op_id: None,
            what: what.into(),
            outcome: None,
            reason: None,
            generation: None,
            name: None,
            kind: None,
            from: None,
            to: None,
            effects: Vec::new(),
            cause_op: None,
        }
    }

    /// A decision's states: the one the rule found and the one it leads to.
    pub fn transition(mut self, from: &str, to: &str) -> Self {
        self.from = Some(from.to_owned());
        self.to = Some(to.to_owned());
        self
    }

    /// A decision's effects, each as `opId Effect(generation)`, in the order they run.
    pub fn effects(mut self, effects: Vec<String>) -> Self {
        self.effects = effects;
        self
    }

    /// The effect that caused this record.
    pub fn cause_op(mut self, op: Option<String>) -> Self {
        self.cause_op = op;
        self
    }

    /// The record that caused this one.
    pub fn cause(mut self, cause_seq: u64) -> Self {
        self.cause_seq = Some(cause_seq);
        self
    }

    /// The effect's operation id (`requestId.n`).
    pub fn op(mut self, op_id: String) -> Self {
        self.op_id = Some(op_id);
        self
    }

    /// The registration concerned.
    pub fn generation(mut self, generation: Option<u64>) -> Self {
        self.generation = generation;
        self
    }

    /// The processor or service name.
    pub fn name(mut self, name: Option<&str>) -> Self {
        self.name = name.map(str::to_owned);
        self
    }

    /// The outcome (a reply's, an effect's).
    pub fn outcome(mut self, outcome: impl Into<String>) -> Self {
        self.outcome = Some(outcome.into());
        self
    }

    /// Human detail.
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// The failure kind of a reply or a failed outcome.
    pub fn kind(mut self, kind: FailureKind) -> Self {
        self.kind = Some(kind);
        self
    }
}
