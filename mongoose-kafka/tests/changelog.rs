//! The changelog state store against the test broker (issue 15, stateful scale-out):
//! a new owner restores the last value of each key and the position of the last write,
//! and writes an old owner makes behind the new owner's marker are fenced off.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{broker_or_skip, create_topic, unique, wait_for};
use mongoose_core::Epoch;
use mongoose_kafka::changelog::{Changelog, ChangelogConfig, OnDurable, RecordKind};
use parking_lot::Mutex;

/// A changelog member whose acknowledged tags are collected.
fn member(brokers: &str, input: &str, topic: &str) -> (Changelog, Arc<Mutex<Vec<u64>>>) {
    let durable = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&durable);
    let on_durable: OnDurable = Arc::new(move |tag, result| {
        result.expect("the write is acknowledged");
        seen.lock().push(tag);
    });
    let changelog = Changelog::open(
        ChangelogConfig::new("test", brokers, topic),
        input,
        on_durable,
    )
    .expect("the changelog opens");
    (changelog, durable)
}

fn wait_durable(durable: &Mutex<Vec<u64>>, count: usize) {
    wait_for("every write acknowledged", 60, || {
        durable.lock().len() >= count
    });
}

#[test]
fn a_new_owner_restores_the_last_value_of_each_key_and_the_last_position() {
    let Some(brokers) = broker_or_skip("changelog restore") else {
        return;
    };
    let input = unique("changelog-input");
    create_topic(&brokers, &input, 2, &[]);
    let topic = format!("{input}-changelog");
    let (first, durable) = member(&brokers, &input, &topic);
    let restored = first.restore(1, Epoch(10), |_| {}).expect("restores");
    assert_eq!(restored.position, None, "a new changelog holds nothing");
    let mut expected = BTreeMap::new();
    for offset in 1..=600u64 {
        let key = format!("key{}", offset % 7);
        let value = format!("value{offset}");
        first
            .write(
                1,
                Epoch(10),
                offset,
                key.as_bytes(),
                value.as_bytes(),
                offset,
            )
            .expect("written");
        expected.insert(key.into_bytes(), value.into_bytes());
    }
    wait_durable(&durable, 600);
    assert_eq!(
        *durable.lock(),
        (1..=600).collect::<Vec<_>>(),
        "acknowledged in order"
    );

    let (second, _) = member(&brokers, &input, &topic);
    let mut counted = 0;
    let restored = second
        .restore(1, Epoch(20), |_| counted += 1)
        .expect("restores");
    let values: BTreeMap<Vec<u8>, Vec<u8>> = restored
        .entries
        .iter()
        .map(|(key, (_, value))| (key.clone(), value.clone()))
        .collect();
    assert_eq!(values, expected);
    assert_eq!(restored.position, Some((Epoch(10), 600)));
    assert_eq!((restored.counted, counted, restored.fenced), (600, 600, 0));
    assert_eq!(restored.last_entry(), Some(b"value600".as_slice()));
    // the other partition is its own state
    let other = second.restore(0, Epoch(20), |_| {}).expect("restores");
    assert_eq!(other.position, None);
}

#[test]
fn writes_of_an_old_owner_behind_a_new_owners_marker_are_fenced_off() {
    let Some(brokers) = broker_or_skip("changelog fence") else {
        return;
    };
    let input = unique("changelog-fence");
    create_topic(&brokers, &input, 1, &[]);
    let topic = format!("{input}-changelog");
    let (old, old_durable) = member(&brokers, &input, &topic);
    old.restore(0, Epoch(1), |_| {}).expect("restores");
    for offset in 1..=10u64 {
        old.write(
            0,
            Epoch(1),
            offset,
            b"balance",
            offset.to_string().as_bytes(),
            offset,
        )
        .expect("written");
    }
    wait_durable(&old_durable, 10);

    // a new owner takes the partition over; the old one goes on writing (its last
    // records in flight, or it stopped answering and was replaced)
    let (new, new_durable) = member(&brokers, &input, &topic);
    let taken = new.restore(0, Epoch(2), |_| {}).expect("restores");
    assert_eq!(taken.position, Some((Epoch(1), 10)));
    for offset in 11..=15u64 {
        old.write(0, Epoch(1), offset, b"balance", b"stale", offset)
            .expect("written");
    }
    wait_durable(&old_durable, 15);
    for offset in 11..=13u64 {
        new.write(
            0,
            Epoch(2),
            offset,
            b"balance",
            offset.to_string().as_bytes(),
            offset,
        )
        .expect("written");
    }
    wait_durable(&new_durable, 3);

    let (third, _) = member(&brokers, &input, &topic);
    let restored = third.restore(0, Epoch(3), |_| {}).expect("restores");
    assert_eq!(restored.position, Some((Epoch(2), 13)));
    assert_eq!(restored.entries[b"balance".as_slice()].1, b"13".to_vec());
    assert_eq!(
        (restored.counted, restored.fenced, restored.markers),
        (13, 5, 3)
    );

    // the raw partition holds all of it, with the third owner's marker last
    let records = third.read(0).expect("reads");
    let kinds: Vec<RecordKind> = records.iter().map(|record| record.kind).collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|kind| **kind == RecordKind::Entry)
            .count(),
        18
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|kind| **kind == RecordKind::Marker)
            .count(),
        3
    );
    assert_eq!(kinds.last(), Some(&RecordKind::Probe));
}
