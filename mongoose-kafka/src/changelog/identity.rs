//! The input topic's identity in the changelog: each takeover's marker carries the
//! input topic's id ([`crate::topic_id`]) in its value, so the consumer-side position
//! check never compares offsets of two different topics.
//!
//! The restored position is the input offset of the last counted change, which was
//! written under the marker before it: that marker's id is the topic the offset belongs
//! to. When it is not the input's id now (the input topic was deleted and made again
//! under its name, stopped or live), the position says nothing about the new topic,
//! whose offsets start again at 0: the restore keeps the state and drops the position,
//! so no record of the new topic is skipped as "already in the restored state". A
//! marker written before ids were recorded (an empty value) carries none: the check is
//! then as before.

use mongoose_core::state_store::{RecordKind, RestoredPartition, StoredRecord};
use mongoose_core::Epoch;
use rdkafka::producer::Producer;
use tracing::warn;

use super::ChangelogCore;
use crate::topic_id::{describe, TopicId, TopicIdentity};

/// The input topic id of the marker under which the last counted change of `records`
/// was written (the fold's rule: after a marker, only changes of its epoch count).
pub fn position_topic(records: &[StoredRecord]) -> Option<TopicId> {
    let mut fence: Option<Epoch> = None;
    let mut marker_topic = None;
    let mut position_topic = None;
    for record in records {
        match record.kind {
            RecordKind::Probe => {}
            RecordKind::Marker => {
                fence = Some(record.epoch);
                marker_topic = TopicId::from_bytes(&record.value);
            }
            RecordKind::Entry => {
                if fence.is_some_and(|epoch| epoch != record.epoch) {
                    continue;
                }
                position_topic = if fence.is_some() { marker_topic } else { None };
            }
        }
    }
    position_topic
}

impl ChangelogCore {
    /// The input topic's id now, for a takeover's marker; `None` (and a WARN) when the
    /// broker cannot say.
    pub(super) fn input_identity(&self) -> Option<TopicId> {
        match describe(
            self.producer.client(),
            &self.input_topic,
            self.config.request_timeout,
        ) {
            Ok(TopicIdentity::Exists(id)) => Some(id),
            Ok(TopicIdentity::Missing) => {
                warn!(changelog = %self.config.topic, input = %self.input_topic,
                    "the input topic is missing at a takeover: its marker carries no topic id");
                None
            }
            Err(error) => {
                warn!(changelog = %self.config.topic, input = %self.input_topic, %error,
                    "the input topic's id could not be read at a takeover: its marker carries none (the position check trusts the offsets)");
                None
            }
        }
    }

    /// Drops the restored position of `partition` when it belongs to another incarnation
    /// of the input topic than `current`.
    pub(super) fn check_position_identity(
        &self,
        partition: i32,
        current: Option<TopicId>,
        records: &[StoredRecord],
        restored: &mut RestoredPartition,
    ) {
        let (Some(current), Some(held)) = (current, position_topic(records)) else {
            return;
        };
        if current == held || restored.position.is_none() {
            return;
        }
        warn!(changelog = %self.config.topic, partition, input = %self.input_topic,
            held_topic_id = %held, input_topic_id = %current,
            through = ?restored.position.map(|(_, offset)| offset),
            "the restored position belongs to an earlier topic of the input's name (deleted and made again): the state is kept, and every record of the new topic is applied (none is skipped as already held)");
        restored.position = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: RecordKind, epoch: u64, offset: u64, value: Vec<u8>) -> StoredRecord {
        StoredRecord {
            log_offset: 0,
            kind,
            epoch: Epoch(epoch),
            partition: 0,
            offset,
            key: b"k".to_vec(),
            value,
        }
    }

    #[test]
    fn the_position_belongs_to_the_topic_of_the_marker_its_change_was_written_under() {
        let old = TopicId(1);
        let new = TopicId(2);
        let records = [
            record(RecordKind::Marker, 1, 0, old.to_bytes().to_vec()),
            record(RecordKind::Entry, 1, 875, b"v".to_vec()),
            record(RecordKind::Marker, 2, 0, new.to_bytes().to_vec()),
        ];
        assert_eq!(position_topic(&records), Some(old));
        let mut more = records.to_vec();
        more.push(record(RecordKind::Entry, 2, 3, b"v".to_vec()));
        assert_eq!(position_topic(&more), Some(new));
        // an old owner's change behind the new marker does not count
        more.push(record(RecordKind::Entry, 1, 900, b"v".to_vec()));
        assert_eq!(position_topic(&more), Some(new));
        // markers without an id (written before ids were recorded): none known
        let legacy = [
            record(RecordKind::Marker, 1, 0, Vec::new()),
            record(RecordKind::Entry, 1, 5, b"v".to_vec()),
        ];
        assert_eq!(position_topic(&legacy), None);
    }
}
