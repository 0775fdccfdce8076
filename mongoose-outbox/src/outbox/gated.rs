//! One admission of a stateful processor's delivery behind its feed's commit gate: the
//! ledger's and the aggregate's save, written once.

use mongoose_core::sink::CommitGate;

use super::Outbox;
use crate::{AdmissionRef, AdmittedOutput, AdmittedOutputRef, AdmittedPositionRef, OutboxError};

impl Outbox {
    /// Admits one record (`state`, the delivery's `position` and its `outputs`) for a
    /// processor whose feed commits behind `gate`. The record's sequence is registered
    /// as pending on the gate before the record can become durable (the group commit
    /// completes it once it is), and completed at once when the admission fails: there
    /// is nothing to wait for, and a retry admits the record again. The record's
    /// sequence. Without a gate, the caller syncs the outbox before the delivery counts
    /// as processed ([`Outbox::sync`]).
    ///
    /// # Errors
    /// The record could not be written.
    pub fn admit_gated(
        &mut self,
        gate: Option<&dyn CommitGate>,
        state: &[u8],
        position: &AdmittedPositionRef<'_>,
        outputs: &[AdmittedOutput],
    ) -> Result<u64, OutboxError> {
        // the tag is the record's sequence, registered before the record can become
        // durable (one writer: the next sequence is the one after the last)
        let tag = self.last_seq() + 1;
        if let Some(gate) = gate {
            gate.pending(tag);
        }
        let outputs: Vec<AdmittedOutputRef<'_>> = outputs
            .iter()
            .map(|output| AdmittedOutputRef {
                sink: &output.sink,
                key: &output.key,
                payload: &output.payload,
            })
            .collect();
        let admitted = self.admit_ref(&AdmissionRef {
            state,
            positions: std::slice::from_ref(position),
            outputs: &outputs,
        });
        let seq = match admitted {
            Ok(seq) => seq,
            Err(error) => {
                // not admitted: nothing to wait for; the retry admits it again
                if let Some(gate) = gate {
                    gate.complete(tag);
                }
                return Err(error);
            }
        };
        debug_assert_eq!(seq, tag, "the outbox has one writer");
        Ok(seq)
    }
}
