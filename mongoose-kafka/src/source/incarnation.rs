//! The input topic's identity while the source reads it: a topic deleted and made again
//! under the same name is a new incarnation (a new topic id, offsets from 0 again).
//!
//! librdkafka notices a new topic id in its metadata and keeps its fetch positions (its
//! own source says so: "FIXME: an offset reset must be triggered"): the consumer went on
//! at the old topic's offsets in the new one, and the records before them were never
//! read. So the source asks the broker for the topic's id (`rd_kafka_DescribeTopics`,
//! [`crate::topic_id`]) every `metadata_refresh` (and soon after a consumer error), on
//! its own thread, never per record:
//!
//! * **Deleted.** The topic is missing: the source stops publishing (what it reads, from
//!   either incarnation, is dropped), pauses its assignment and says why (`BEHIND`,
//!   "stalled: the input topic was deleted"), asking again every 500 ms.
//! * **Made again** (a new id, with or without the deletion seen): every assigned
//!   partition gets a new epoch (written to the epoch file before any record of it is
//!   published) and is read from its start; the records of the old topic that were not
//!   read are gone with it (the operator deleted them): they cannot be counted, and a
//!   WARN says so.

use std::time::{Duration, Instant};

use mongoose_core::{CoreError, SourceState, WorkDone};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::Offset;
use tracing::{debug, info, warn};

use super::{KafkaSource, SourceContext};
use crate::epoch::{mint_epoch, EpochSlot};
use crate::topic_id::{describe, TopicId, TopicIdentity};

/// How often a deleted topic is asked for again.
const WHILE_GONE: Duration = Duration::from_millis(500);

/// What the source knows of its topic's identity.
#[derive(Debug)]
pub(super) struct Incarnation {
    /// The id last seen (`None` until the first answer).
    known: Option<TopicId>,
    /// The topic was seen missing after it was known.
    gone: bool,
    next_check: Instant,
    interval: Duration,
}

impl Incarnation {
    pub(super) fn new(interval: Duration) -> Self {
        Incarnation {
            known: None,
            gone: false,
            next_check: Instant::now(),
            interval,
        }
    }

    /// Asks again at the next cycle (a consumer error may say the topic went away).
    pub(super) fn check_soon(&mut self) {
        self.next_check = Instant::now();
    }
}

impl KafkaSource {
    /// Called at the start of each duty cycle: `Some(work)` when the cycle is over (the
    /// topic is deleted: nothing is published), `None` to go on reading.
    pub(super) fn watch_topic(
        &mut self,
        consumer: &BaseConsumer<SourceContext>,
    ) -> Result<Option<WorkDone>, CoreError> {
        let now = Instant::now();
        if now >= self.incarnation.next_check {
            let timeout = self.config.request_timeout.min(Duration::from_secs(5));
            let asked = describe(consumer.client(), &self.config.topic, timeout);
            self.incarnation.next_check = Instant::now()
                + if self.incarnation.gone {
                    WHILE_GONE
                } else {
                    self.incarnation.interval
                };
            match asked {
                Err(error) => {
                    debug!(feed = %self.config.name, %error, "the input topic's id could not be read (asked again)");
                }
                Ok(TopicIdentity::Missing) => {
                    if self.incarnation.known.is_some() && !self.incarnation.gone {
                        warn!(feed = %self.config.name, topic = %self.config.topic,
                            "the input topic was deleted: nothing is read until it is made again (then it is read from its start, in new epochs); records of it not read yet are gone with it and cannot be counted");
                        self.incarnation.gone = true;
                        self.incarnation.next_check = Instant::now() + WHILE_GONE;
                    }
                }
                Ok(TopicIdentity::Exists(id)) => match self.incarnation.known {
                    None => {
                        info!(feed = %self.config.name, topic = %self.config.topic, topic_id = %id, "input topic identified");
                        self.incarnation.known = Some(id);
                    }
                    Some(known) if known == id => self.incarnation.gone = false,
                    Some(known) => {
                        self.start_new_incarnation(consumer, known, id)?;
                        self.incarnation.known = Some(id);
                        self.incarnation.gone = false;
                    }
                },
            }
        }
        if !self.incarnation.gone {
            return Ok(None);
        }
        // deleted: keep polling (the group sees this member alive), publish nothing
        self.tail.clear();
        self.pause(consumer);
        let _ = self.read(consumer)?;
        self.tail.clear();
        self.report(
            SourceState::Behind,
            Some("stalled: the input topic was deleted; waiting for it to be made again"),
        );
        Ok(Some(WorkDone(0)))
    }

    /// The topic is a new incarnation (`old` -> `new`): every assigned partition gets a
    /// new epoch and is read from its start.
    fn start_new_incarnation(
        &mut self,
        consumer: &BaseConsumer<SourceContext>,
        old: TopicId,
        new: TopicId,
    ) -> Result<(), CoreError> {
        warn!(feed = %self.config.name, topic = %self.config.topic, old_id = %old, new_id = %new,
            "the input topic was deleted and made again: every partition is a new epoch, read from offset 0; records of the old topic not read before it was deleted are gone with it and cannot be counted");
        self.tail.clear();
        let shared = &self.shared;
        let mut reset = Vec::new();
        {
            let mut partitions = shared.partitions.lock();
            partitions.committed.clear();
            let numbers: Vec<i32> = partitions.assigned.keys().copied().collect();
            for partition in numbers {
                partitions.next_assignment += 1;
                let assignment = partitions.next_assignment;
                let seen = partitions.seen.get(&partition).copied();
                let slot = shared
                    .epochs
                    .as_ref()
                    .and_then(|epochs| epochs.read(partition));
                let previous = match (slot.map(|slot| slot.epoch), seen) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
                let epoch = mint_epoch(previous);
                if let Some(epochs) = &shared.epochs {
                    // nothing of the new topic is committed: the slot says so, and a
                    // restart of this owner keeps the epoch while that holds
                    let slot = EpochSlot {
                        epoch,
                        previous: -1,
                        offset: -1,
                    };
                    epochs.write(partition, slot).map_err(|error| {
                        CoreError::io(
                            format!(
                                "kafka '{}': writing the epoch file {} (check its directory and disk)",
                                shared.name,
                                epochs.path().display()
                            ),
                            error,
                        )
                    })?;
                }
                partitions.seen.insert(partition, epoch);
                if let Some(assigned) = partitions.assigned.get_mut(&partition) {
                    assigned.assignment = assignment;
                    assigned.epoch = Some(epoch);
                    assigned.high = None;
                    assigned.pending = None;
                    assigned.committed_at = None;
                    // read again from its start: nothing read of the new topic yet
                    assigned.first_read = None;
                    assigned.next = None;
                    assigned.at_end = false;
                }
                reset.push((partition, epoch));
            }
        }
        for (partition, epoch) in reset {
            match consumer.seek(
                &self.config.topic,
                partition,
                Offset::Beginning,
                shared.request_timeout,
            ) {
                Ok(()) => {
                    info!(feed = %self.config.name, partition, %epoch, "partition of the re-created topic: new epoch, read from its start")
                }
                Err(error) => warn!(feed = %self.config.name, partition, %error,
                    "could not move the partition of the re-created topic to its start: it is read from where the consumer is"),
            }
        }
        self.resume(consumer);
        Ok(())
    }
}
