//! A changelog record's layout (its value: [`StoredValue`]), decoding ([`decode`]) and
//! the fold of a partition's records into its state ([`fold`]).

use mongoose_core::state_store::{RecordKind, RestoredPartition, StoredRecord};
use mongoose_core::Epoch;
use serde::{Deserialize, Serialize};

/// The version of the record layout this store writes (and the only one it reads).
pub const FORMAT: u8 = 1;

/// The value of a changelog record: the layout version, what it is, the input
/// position it follows, and the state's value.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct StoredValue<'a> {
    pub(super) format: u8,
    pub(super) kind: RecordKind,
    pub(super) epoch: u64,
    pub(super) partition: i32,
    pub(super) offset: u64,
    #[serde(borrow)]
    pub(super) value: &'a [u8],
}

/// The key of markers (a state key may not start with a zero byte).
pub const MARKER_KEY: &[u8] = b"\0mongoose.marker";

/// The key of a reader's end probes: not the markers' key, so compaction (which keeps the
/// newest record of each key) never removes the newest marker for a probe.
pub const PROBE_KEY: &[u8] = b"\0mongoose.probe";

/// Folds a changelog partition's records, in log order: after each marker only the
/// records of the marker's epoch count; an entry sets its key's value (an empty value
/// removes it) and the position; probes count for nothing. `counted` sees each counted
/// entry in order (a processor keeps what it needs of the history, such as outputs to
/// publish again).
pub fn fold<'a>(
    records: impl IntoIterator<Item = &'a StoredRecord>,
    mut counted: impl FnMut(&StoredRecord),
) -> RestoredPartition {
    let mut restored = RestoredPartition::default();
    let mut fence: Option<Epoch> = None;
    for record in records {
        match record.kind {
            RecordKind::Probe => {}
            RecordKind::Marker => {
                fence = Some(record.epoch);
                restored.markers += 1;
            }
            RecordKind::Entry => {
                if fence.is_some_and(|epoch| epoch != record.epoch) {
                    restored.fenced += 1;
                    continue;
                }
                if record.value.is_empty() {
                    restored.entries.remove(&record.key);
                } else {
                    restored.entries.insert(
                        record.key.clone(),
                        (record.log_offset, record.value.clone()),
                    );
                }
                restored.position = Some((record.epoch, record.offset));
                restored.counted += 1;
                counted(record);
            }
        }
    }
    restored
}

/// Decodes one changelog record; `None` for a layout this version does not read.
pub fn decode(log_offset: i64, key: &[u8], payload: &[u8]) -> Option<StoredRecord> {
    let envelope: StoredValue<'_> = postcard::from_bytes(payload).ok()?;
    if envelope.format != FORMAT {
        return None;
    }
    Some(StoredRecord {
        log_offset,
        kind: envelope.kind,
        epoch: Epoch(envelope.epoch),
        partition: envelope.partition,
        offset: envelope.offset,
        key: key.to_vec(),
        value: envelope.value.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::changelog::ChangelogCore;

    fn entry(log_offset: i64, epoch: u64, offset: u64, key: &str, value: &str) -> StoredRecord {
        StoredRecord {
            log_offset,
            kind: RecordKind::Entry,
            epoch: Epoch(epoch),
            partition: 0,
            offset,
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
        }
    }

    fn marker(log_offset: i64, epoch: u64) -> StoredRecord {
        StoredRecord {
            log_offset,
            kind: RecordKind::Marker,
            epoch: Epoch(epoch),
            partition: 0,
            offset: 0,
            key: MARKER_KEY.to_vec(),
            value: Vec::new(),
        }
    }

    #[test]
    fn the_last_value_of_each_key_and_the_last_position_are_restored() {
        let records = [
            marker(0, 1),
            entry(1, 1, 10, "a", "1"),
            entry(2, 1, 20, "b", "2"),
            entry(3, 1, 30, "a", "3"),
        ];
        let restored = fold(&records, |_| {});
        assert_eq!(restored.entries[b"a".as_slice()], (3, b"3".to_vec()));
        assert_eq!(restored.entries[b"b".as_slice()], (2, b"2".to_vec()));
        assert_eq!(restored.position, Some((Epoch(1), 30)));
        assert_eq!(restored.last_entry(), Some(b"3".as_slice()));
        assert_eq!(
            (restored.counted, restored.fenced, restored.markers),
            (3, 0, 1)
        );
    }

    #[test]
    fn writes_of_an_old_owner_behind_a_newer_marker_are_fenced_off() {
        // owner 1 applied through 30; owner 2 took over having restored through 20 (its
        // marker came before owner 1's last write); owner 1's late write is fenced off
        let records = [
            marker(0, 1),
            entry(1, 1, 10, "a", "1"),
            entry(2, 1, 20, "b", "2"),
            marker(3, 2),
            entry(4, 1, 30, "a", "stale"),
            entry(5, 2, 30, "a", "3"),
            entry(6, 2, 40, "c", "4"),
        ];
        let mut seen = Vec::new();
        let restored = fold(&records, |record| seen.push(record.log_offset));
        assert_eq!(restored.entries[b"a".as_slice()], (5, b"3".to_vec()));
        assert_eq!(restored.position, Some((Epoch(2), 40)));
        assert_eq!(
            (restored.counted, restored.fenced, restored.markers),
            (4, 1, 2)
        );
        assert_eq!(seen, vec![1, 2, 5, 6]);
    }

    #[test]
    fn an_empty_value_removes_the_key_and_probes_count_for_nothing() {
        let mut probe = marker(2, 0);
        probe.kind = RecordKind::Probe;
        let records = [entry(0, 1, 10, "a", "1"), entry(1, 1, 20, "a", ""), probe];
        let restored = fold(&records, |_| {});
        assert!(restored.entries.is_empty());
        assert_eq!(restored.position, Some((Epoch(1), 20)));
        assert_eq!(restored.markers, 0);
    }

    #[test]
    fn records_round_trip_and_other_layouts_are_not_read() {
        let payload = ChangelogCore::encode(RecordKind::Entry, Epoch(9), 2, 77, b"value");
        let record = decode(5, b"key", &payload).expect("decodes");
        assert_eq!(record.epoch, Epoch(9));
        assert_eq!(
            (record.partition, record.offset, record.log_offset),
            (2, 77, 5)
        );
        assert_eq!(record.value, b"value");
        let mut other = payload.clone();
        other[0] = FORMAT + 1;
        assert_eq!(decode(5, b"key", &other), None);
        assert_eq!(decode(5, b"key", b"not a record"), None);
    }
}
