//! Partitions added to a topic the group already reads are read from their start.
//!
//! A partition without a committed offset starts where `auto.offset.reset` says: with
//! `start_from = "earliest"` (the default) at its start, which is right. With `latest`,
//! a partition added to the topic would start at its end when the member sees it, and
//! the records written to it before (up to the feed's metadata refresh) would never be
//! read. `latest` is meant for the group's first start: so when the group has committed
//! some partition of the topic, an assigned partition with nothing committed is one the
//! topic gained since, and it is read from its start.

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use tracing::{info, warn};

use super::{Shared, SourceContext};

/// Before `assigned` is handed to librdkafka (the rebalance callback): each partition of
/// a topic made again ([`super::incarnation`]) starts from its beginning, whatever the
/// group committed of the old topic under the same name.
pub(super) fn read_recreated_partitions_from_their_start(
    shared: &Shared,
    assigned: &TopicPartitionList,
) {
    let mut partitions = shared.partitions.lock();
    if partitions.from_start.is_empty() {
        return;
    }
    for mut element in assigned.elements_for_topic(&shared.topic) {
        let partition = element.partition();
        if partitions.from_start.remove(&partition)
            && element.set_offset(Offset::Beginning).is_err()
        {
            warn!(feed = %shared.name, partition,
                "could not start the partition of the re-created topic at its beginning: it starts where the group's offset says");
        }
    }
}

/// Before `assigned` is handed to librdkafka (the rebalance callback): under
/// `start_from = "latest"`, sets each partition the group has committed nothing of, while
/// it has committed another partition of the topic, to start from its beginning.
pub(super) fn read_added_partitions_from_their_start(
    shared: &Shared,
    consumer: &BaseConsumer<SourceContext>,
    assigned: &TopicPartitionList,
) {
    if !shared.start_from_latest {
        return; // `earliest`: a partition with nothing committed starts at 0 anyway
    }
    let mut elements = assigned.elements_for_topic(&shared.topic);
    if elements.is_empty() {
        return;
    }
    let count = match consumer.fetch_metadata(Some(&shared.topic), shared.request_timeout) {
        Ok(metadata) => metadata
            .topics()
            .iter()
            .find(|topic| topic.name() == shared.topic)
            .map_or(0, |topic| topic.partitions().len()),
        Err(error) => {
            warn!(feed = %shared.name, %error,
                "could not read the topic's partitions: a partition added to it starts where start_from says (latest)");
            return;
        }
    };
    let highest = elements
        .iter()
        .map(|element| element.partition() + 1)
        .max()
        .unwrap_or(0);
    let partitions = i32::try_from(count).unwrap_or(i32::MAX).max(highest);
    let committed = match crate::admin::committed_offsets_of(
        consumer,
        &shared.topic,
        partitions,
        shared.request_timeout,
    ) {
        Ok(committed) => committed,
        Err(error) => {
            warn!(feed = %shared.name, %error,
                "could not read the group's committed offsets: a partition added to the topic starts where start_from says (latest)");
            return;
        }
    };
    if committed.iter().all(|offset| *offset < 0) {
        return; // the group's first start: `latest` applies
    }
    for element in &mut elements {
        let partition = element.partition();
        let nothing_committed = usize::try_from(partition)
            .ok()
            .and_then(|index| committed.get(index))
            .is_none_or(|offset| *offset < 0);
        if nothing_committed && element.set_offset(Offset::Beginning).is_ok() {
            info!(feed = %shared.name, partition,
                "a partition the group has committed nothing of, while it has committed others of the topic (added to the topic): read from its start, not from start_from = latest");
        }
    }
}
