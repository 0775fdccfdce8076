//! The input topic's identity while the source reads it: a topic deleted and made again
//! under the same name is a new incarnation (a new topic id, offsets from 0 again).
//!
//! librdkafka notices a new topic id in its metadata and keeps its fetch positions (its
//! own source says so: "FIXME: an offset reset must be triggered"): the consumer went on
//! at the old topic's offsets in the new one, and the records before them were never
//! read, or it reset to offset 0 in the same epoch. Two looks at the id tell it:
//!
//! * **librdkafka's notice, in order with the records.** It fetches by topic id (Fetch
//!   v13 and later, Kafka 3.1 and later): a fetch with the old id fails, its metadata
//!   brings the new id and it logs "Topic T changed id from A to B" (a `metadata` debug
//!   line, which the source turns on) before it fetches with the new id. Its log lines
//!   come through the same queue as the records ([`IdNotice`]), so the notice is heard
//!   before any record of the new topic is read; the record polled after it is held
//!   until the broker is asked which topic this is. librdkafka's *first* id of the topic
//!   is such a notice too: the source's own look at start can have seen the topic
//!   before it was deleted and made again, and librdkafka only the new one, with no
//!   change to tell (chaos kafka seed 1796683247015: 1,498 and 4,436 records of the new
//!   topic read under the old topic's epochs, then again from offset 0 when the next
//!   look saw the new id: written twice). One question to the broker per consumer.
//! * **The source's own look** (`rd_kafka_DescribeTopics`, [`crate::topic_id`]) every
//!   `metadata_refresh` (and soon after a consumer error), on its own thread, never per
//!   record: for a topic deleted and not made again yet, and for brokers that fetch by
//!   name (older than 3.1), where a topic made again within one look can still be read
//!   from the old offsets.
//!
//! What the source does then:
//!
//! * **Deleted.** The topic is missing: the source stops publishing (what it reads, from
//!   either incarnation, is dropped), pauses its assignment and says why (`BEHIND`,
//!   "stalled: the input topic was deleted"), asking again every 500 ms.
//! * **Made again** (a new id, with or without the deletion seen): every assigned
//!   partition gets a new epoch (written to the epoch file before any record of it is
//!   published) and is read from its start; the records of the old topic that were not
//!   read are gone with it (the operator deleted them): they cannot be counted, and a
//!   WARN says so. A new consumer reads the new topic: librdkafka keeps the old topic's
//!   partition state, and a leader epoch of the old topic higher than the new one's (a
//!   broker restarted before the deletion) made it ignore every metadata answer as
//!   outdated and fail each fetch with UNKNOWN_LEADER_EPOCH, reading nothing of the new
//!   topic (chaos kafka seed 1796658157013). The old consumer leaves the group with
//!   nothing committed of the new topic; the new one starts each re-created partition at
//!   its beginning.

use std::sync::atomic::{AtomicBool, Ordering};
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

/// librdkafka's notice that the input topic's id changed, heard by the consumer's log
/// callback (inside `poll`, on the source's thread, in order with the records).
#[derive(Debug)]
pub(super) struct IdNotice {
    /// `"Topic <topic> changed id from "`: the start of librdkafka's line.
    prefix: String,
    heard: AtomicBool,
}

impl IdNotice {
    pub(super) fn new(topic: &str) -> Self {
        IdNotice {
            prefix: format!("Topic {topic} changed id from "),
            heard: AtomicBool::new(false),
        }
    }

    /// Whether the log line is librdkafka's metadata notice of a new id for the topic,
    /// its first one included (then it is remembered until [`IdNotice::take`]).
    pub(super) fn hear(&self, facility: &str, message: &str) -> bool {
        if facility != "METADATA" {
            return false;
        }
        // librdkafka starts its lines with the thread: "[thrd:main]: Topic ..."
        if !message.contains(self.prefix.as_str()) {
            return false;
        }
        self.heard.store(true, Ordering::SeqCst);
        true
    }

    /// True once after a notice was heard.
    pub(super) fn take(&self) -> bool {
        self.heard.load(Ordering::Relaxed) && self.heard.swap(false, Ordering::SeqCst)
    }

    /// Hears the notice again (the broker could not say which topic this is yet).
    fn keep(&self) {
        self.heard.store(true, Ordering::SeqCst);
    }
}

impl KafkaSource {
    /// librdkafka said the topic's id changed, and `(partition, offset)` is the first
    /// record polled after that: asks the broker which topic this is. True when the
    /// record is of the topic the source knows (it is read); false when it is not
    /// (a new incarnation starts, each partition read from its start) or the broker did
    /// not say (the topic is gone again, or no answer: the partition is moved back to the
    /// record, read again after the next look).
    pub(super) fn confirm_topic(
        &mut self,
        consumer: &BaseConsumer<SourceContext>,
        (partition, offset): (i32, i64),
    ) -> Result<bool, CoreError> {
        let timeout = self.config.request_timeout.min(Duration::from_secs(5));
        match describe(consumer.client(), &self.config.topic, timeout) {
            Ok(TopicIdentity::Exists(id)) => match self.incarnation.known {
                Some(known) if known != id => {
                    self.start_new_incarnation(consumer, known, id)?;
                    Ok(false)
                }
                _ => {
                    self.incarnation.known = Some(id);
                    Ok(true)
                }
            },
            other => {
                // deleted again, or the broker did not answer: the record waits (read
                // again after the next look; while the topic is gone nothing is read)
                if let Err(error) = other {
                    debug!(feed = %self.config.name, %error, "the input topic's id could not be read after librdkafka saw a new one (asked again)");
                }
                self.shared.id_notice.keep();
                self.incarnation.check_soon();
                if let Err(error) = consumer.seek(
                    &self.config.topic,
                    partition,
                    Offset::Offset(offset),
                    self.shared.request_timeout,
                ) {
                    warn!(feed = %self.config.name, partition, offset, %error,
                        "could not move the partition back to a record held until the topic's id is known");
                }
                Ok(false)
            }
        }
    }

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
                        self.check_epoch_file_topic(id)?;
                        self.incarnation.known = Some(id);
                    }
                    Some(known) if known == id => self.incarnation.gone = false,
                    Some(known) => {
                        self.start_new_incarnation(consumer, known, id)?;
                    }
                },
            }
        }
        if self.incarnation.known.is_none() && self.shared.epochs.is_some() {
            // the epoch file's slots hold for the topic they were written for: nothing
            // is read before the topic's id says they still do
            self.incarnation.next_check =
                self.incarnation.next_check.min(Instant::now() + WHILE_GONE);
            self.report(
                SourceState::Behind,
                Some("checking the input topic's id before reading (its epoch file holds for one topic)"),
            );
            return Ok(Some(WorkDone(0)));
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

    /// The first id of the topic this process sees, against the one the epoch file's
    /// slots were written for: another id means the topic was deleted and made again
    /// while the feed was stopped, and its slots are cleared (each partition a new
    /// epoch) before the new id is recorded.
    fn check_epoch_file_topic(&self, id: TopicId) -> Result<(), CoreError> {
        let Some(epochs) = &self.shared.epochs else {
            return Ok(());
        };
        let failed = |what: &str, error| self.shared.epoch_file_error(epochs, what, error);
        let recorded = epochs
            .recorded_topic()
            .map_err(|error| failed("reading the topic id beside", error))?;
        match recorded {
            Some(recorded) if recorded == id => return Ok(()),
            Some(recorded) => {
                warn!(feed = %self.config.name, topic = %self.config.topic, old_id = %recorded, new_id = %id,
                    "the input topic was deleted and made again while the feed was stopped: every partition is a new epoch, read from the group's committed offsets (none: from its start); records of the old topic not read before it was deleted are gone with it and cannot be counted");
                epochs.clear().map_err(|error| failed("clearing", error))?;
            }
            None => {}
        }
        epochs
            .record_topic(id)
            .map_err(|error| failed("recording the topic id beside", error))
    }

    /// The topic is a new incarnation (`old` -> `new`): every assigned partition gets a
    /// new epoch and is read from its start, and `new` is the id known from now on.
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
        shared.log_starts.forget_reported();
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
                    epochs
                        .write(partition, slot)
                        .map_err(|error| shared.epoch_file_error(epochs, "writing", error))?;
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
        if let Some(epochs) = &shared.epochs {
            // the slots written above are the new topic's: a restart keeps them
            epochs.record_topic(new).map_err(|error| {
                shared.epoch_file_error(epochs, "recording the topic id beside", error)
            })?;
        }
        {
            // read from their start by the new consumer (librdkafka keeps the old
            // topic's leader epochs in this one: chaos kafka seed 1796658157013)
            let mut partitions = shared.partitions.lock();
            for (partition, epoch) in reset {
                partitions.from_start.insert(partition);
                info!(feed = %self.config.name, partition, %epoch, "partition of the re-created topic: new epoch, read from its start");
            }
        }
        self.reconnect = true;
        self.resume(consumer);
        self.incarnation.known = Some(new);
        self.incarnation.gone = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::IdNotice;

    #[test]
    fn only_a_change_of_this_topics_id_is_a_notice() {
        let notice = IdNotice::new("in.put");
        // librdkafka learning the id the first time: a notice too (the source's own
        // look may have seen the topic before it was made again: chaos kafka seed
        // 1796683247015)
        assert!(notice.hear(
            "METADATA",
            "[thrd:main]: Topic in.put changed id from AAAAAAAAAAAAAAAAAAAAAA to m2Ws0YiFSdOkYOp1w6rJUA"
        ));
        assert!(notice.take());
        // another topic, another facility, another line: not ours
        assert!(!notice.hear(
            "METADATA",
            "Topic in.put2 changed id from m2Ws0YiFSdOkYOp1w6rJUA to q3Ws0YiFSdOkYOp1w6rJUA"
        ));
        assert!(!notice.hear(
            "TOPIC",
            "Topic in.put changed id from m2Ws0YiFSdOkYOp1w6rJUA to q3Ws0YiFSdOkYOp1w6rJUA"
        ));
        assert!(!notice.hear("METADATA", "Topic in.put partition 0 Leader 1"));
        assert!(!notice.take());
        assert!(notice.hear(
            "METADATA",
            "[thrd:main]: Topic in.put changed id from m2Ws0YiFSdOkYOp1w6rJUA to q3Ws0YiFSdOkYOp1w6rJUA"
        ));
        assert!(notice.take());
        assert!(!notice.take(), "taken once");
        notice.keep();
        assert!(notice.take(), "kept for the next record");
    }
}
