//! What a partitioned aggregate (`state = "changelog"`) shows in `/status`: its
//! changelog topic and, per partition this member holds, the epoch it holds it in, the
//! offset its state holds it through and its counters; the totals over them.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use mongoose_aggregate::AggregateState;
use parking_lot::Mutex;

/// One partition's line in `/status`.
#[derive(Clone, Copy, Debug, Default)]
struct PartitionReport {
    epoch: u64,
    through: u64,
    applied: u64,
    rejected: u64,
    headers: u64,
    emits: u64,
    keys: u64,
}

/// The counters of one partitioned aggregate, updated by its thread, read by `/status`.
#[derive(Debug, Default)]
pub struct PartitionedStats {
    changelog: OnceLock<String>,
    partitions: Mutex<BTreeMap<u32, PartitionReport>>,
}

impl PartitionedStats {
    /// Names the changelog topic (once, at open).
    pub fn set_changelog(&self, topic: &str) {
        let _ = self.changelog.set(topic.to_owned());
    }

    /// Takes the counters of partition `lane`'s state, held in `epoch` through input
    /// position `through` (no allocation once the partition is known).
    pub fn update(&self, lane: u32, epoch: u64, through: u64, state: &AggregateState) {
        let counters = &state.counters;
        let mut partitions = self.partitions.lock();
        let report = partitions.entry(lane).or_default();
        *report = PartitionReport {
            epoch,
            through,
            applied: counters.applied,
            rejected: counters.rejected_total(),
            headers: counters.headers,
            emits: counters.emits,
            keys: state.keys.len() as u64,
        };
    }

    /// Partition `lane` is no longer held here (fenced, taken over).
    pub fn forget(&self, lane: u32) {
        self.partitions.lock().remove(&lane);
    }

    /// The counters as JSON: totals over the partitions held, and each partition.
    pub fn to_json(&self) -> serde_json::Value {
        let partitions = self.partitions.lock();
        let total =
            |field: fn(&PartitionReport) -> u64| -> u64 { partitions.values().map(field).sum() };
        serde_json::json!({
            "kind": "aggregate",
            "state": "changelog",
            "changelog": self.changelog.get(),
            "applied": total(|report| report.applied),
            "rejected": total(|report| report.rejected),
            "headers": total(|report| report.headers),
            "emitted": total(|report| report.emits),
            "keys": total(|report| report.keys),
            "partitions": partitions
                .iter()
                .map(|(partition, report)| serde_json::json!({
                    "partition": partition,
                    "epoch": report.epoch,
                    "through": report.through,
                    "applied": report.applied,
                    "rejected": report.rejected,
                    "keys": report.keys,
                }))
                .collect::<Vec<_>>(),
        })
    }
}
