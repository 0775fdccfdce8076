//! Dispatch: the group side of a feed reader's poll. Gives each item to the feed's
//! subscribed processors in order, contains each handler's failure (quarantine, or a
//! retry for a retry-safe processor), runs their completions and records the first
//! drop of the group's queue.

use std::collections::BTreeMap;

use mongoose_core::engine::{self, PendingCompletion};
use mongoose_core::{
    Delivery, DispatchOutcome, Dispatcher, DroppedRun, Offer, ProcessorError, ProcessorId,
};

use super::Slot;
use crate::record::GroupRecorder;
use mongoose_audit::{ControlAudit, NewRecord, RecordType};

pub(super) struct GroupDispatcher<'a> {
    pub(super) group: &'a str,
    pub(super) feed: &'a str,
    /// The generations subscribed to the feed, in the reader's order.
    pub(super) subscribers: &'a [u64],
    pub(super) handled: &'a mut Vec<u64>,
    pub(super) processors: &'a mut BTreeMap<u64, Slot>,
    pub(super) quarantines: &'a mut Vec<(u64, String)>,
    pub(super) recorder: Option<&'a mut (dyn GroupRecorder + 'static)>,
    pub(super) audit: &'a ControlAudit,
    pub(super) drop_reported: &'a mut bool,
}

impl GroupDispatcher<'_> {
    /// Gives the offered item to every live subscriber that has not handled it, in
    /// order. A non-retry-safe failure quarantines that processor alone and goes on; a
    /// retry-safe one stops here for a retry when `may_retry`, else it is skipped.
    fn run(&mut self, offer: &dyn Offer, may_retry: bool) -> DispatchOutcome {
        let mut quarantined = None;
        for index in 0..offer.len() {
            let generation = offer.processor(index).0;
            if self.handled.contains(&generation) {
                continue;
            }
            let Some(slot) = self.processors.get_mut(&generation) else {
                continue;
            };
            if slot.quarantined.is_some() {
                continue;
            }
            let id = ProcessorId(generation);
            let result =
                slot.host
                    .call_handler(offer, index, self.feed, self.recorder.as_deref_mut());
            let Err(failure) = result else {
                self.handled.push(generation);
                continue;
            };
            // its completions of this attempt go; a retry registers them again
            engine::discard_completions_of(Some(id));
            if failure.busy && may_retry {
                // not a failure: the item is offered to it again later
                return DispatchOutcome::Busy {
                    processor: Some(id),
                };
            }
            let reason = failure.reason;
            if slot.retry_safe && may_retry {
                tracing::warn!(group = self.group, feed = self.feed, processor = %slot.name, %reason, "handler failed; the retry-safe processor is retried alone on a later cycle");
                return DispatchOutcome::Failed {
                    processor: Some(id),
                    retry: true,
                };
            }
            self.handled.push(generation);
            if slot.retry_safe {
                tracing::error!(group = self.group, feed = self.feed, processor = %slot.name, %reason, "the item is skipped for this processor");
            } else {
                slot.quarantined = Some(reason.clone());
                self.quarantines.push((generation, reason));
                quarantined.get_or_insert(id);
            }
        }
        self.handled.clear();
        match quarantined {
            // the others had the item; the reader holds the feed before it, since the
            // quarantined processor's state does not hold it
            Some(id) => DispatchOutcome::Failed {
                processor: Some(id),
                retry: false,
            },
            None => DispatchOutcome::Done,
        }
    }
}

impl Dispatcher<dyn Offer + '_> for GroupDispatcher<'_> {
    fn dropped(&mut self, run: &DroppedRun) {
        if !*self.drop_reported {
            // book: guarantees/control-plane.md: the first drop of each queue
            // binding leaves a QueueDrop record in the group's control fallback audit
            *self.drop_reported = true;
            let at_millis = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.as_millis());
            tracing::warn!(
                group = self.group,
                feed = self.feed,
                first_sequence = run.first_sequence,
                count = run.count,
                "the group's queue lost items (first drop of this queue binding)"
            );
            self.audit.write(
                NewRecord::new(RecordType::Fallback, None, "QueueDrop")
                    .name(Some(self.feed))
                    .reason(format!(
                        "feed {} queue {}/{} group {}: first drop at sequence {} ({} items through \
                         sequence {}), reached by the group at {} ms since the epoch",
                        self.feed,
                        self.group,
                        self.feed,
                        self.group,
                        run.first_sequence,
                        run.count,
                        run.last_sequence,
                        at_millis
                    )),
            );
        }
        if let Some(recorder) = self.recorder.as_deref_mut() {
            for generation in self.subscribers {
                recorder.dropped(
                    ProcessorId(*generation),
                    self.feed,
                    run.first_sequence,
                    run.last_sequence,
                    run.count,
                );
            }
        }
    }

    fn finished(&mut self, _offer: &(dyn Offer + '_)) {
        if let Some(recorder) = self.recorder.as_deref_mut() {
            recorder.item_finished();
        }
    }

    #[inline]
    fn dispatch(&mut self, offer: &(dyn Offer + '_), attempt: u32) -> DispatchOutcome {
        if attempt == 0 {
            // a new item: nobody handled it yet
            self.handled.clear();
            if let Some(recorder) = self.recorder.as_deref_mut() {
                recorder.item_begins();
            }
        }
        self.run(offer, true)
    }

    fn describe(&self, processor: ProcessorId) -> String {
        match self.processors.get(&processor.0) {
            Some(slot) => format!("processor '{}' of group '{}'", slot.name, self.group),
            None => format!("processor #{} of group '{}'", processor.0, self.group),
        }
    }

    fn gave_up(&mut self, offer: &(dyn Offer + '_), processor: Option<ProcessorId>) {
        if let Some(ProcessorId(generation)) = processor {
            self.handled.push(generation);
        }
        let _ = self.run(offer, false);
    }

    fn complete(
        &mut self,
        completion: PendingCompletion,
        delivery: &Delivery,
    ) -> Result<(), ProcessorError> {
        let Some(owner) = completion.owner else {
            return Ok(());
        };
        let Some(slot) = self.processors.get_mut(&owner.0) else {
            return Ok(());
        };
        if slot.quarantined.is_some() {
            return Ok(());
        }
        slot.host
            .complete(completion.key, delivery, self.recorder.as_deref_mut())
            .map_err(ProcessorError::new)
    }
}
