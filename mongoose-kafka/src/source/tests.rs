//! The committer's unit tests.

use std::sync::Weak;

use mongoose_core::SourceCommitter;

use super::*;

fn committer_with(partitions: Partitions) -> KafkaCommitter {
    KafkaCommitter {
        shared: Arc::new(Shared {
            name: "kafka".into(),
            topic: "t".into(),
            brokers: "nowhere".into(),
            epochs: None,
            request_timeout: Duration::from_secs(1),
            start_from_latest: false,
            partitions: Mutex::new(partitions),
            counters: Arc::default(),
            health: ClientHealth::default(),
            log_starts: LogStarts::new("t", "earliest"),
            id_notice: super::incarnation::IdNotice::new("t"),
            operator_debug: false,
            consumer: Mutex::new(Weak::new()),
            forgotten: crate::forgotten::ForgottenBrokers::default(),
        }),
    }
}

// the SourceCommitter contract: acknowledgements of an earlier epoch (ownership) or of
// a partition no longer assigned are ignored; within an epoch, never backwards
#[test]
fn the_committer_takes_only_the_current_ownerships_positions_and_never_goes_back() {
    let mut partitions = Partitions::default();
    partitions.assigned.insert(
        0,
        Assigned {
            epoch: Some(Epoch(20)),
            high: Some(10),
            committed_at: Some(10),
            ..Assigned::new(1)
        },
    );
    let mut committer = committer_with(partitions);
    let at = |lane: u32, offset: u64| PositionValue { lane, offset };
    committer.acknowledged(1, Epoch(19), at(0, 50)); // an earlier ownership
    committer.acknowledged(2, Epoch(20), at(0, 8)); // read again after a rebalance
    committer.acknowledged(3, Epoch(20), at(1, 70)); // a partition not assigned
    assert_eq!(
        committer.shared.partitions.lock().assigned[&0].pending,
        None
    );
    committer.acknowledged(4, Epoch(20), at(0, 12));
    committer.acknowledged(5, Epoch(20), at(0, 11)); // never backwards
    assert_eq!(
        committer.shared.partitions.lock().assigned[&0].pending,
        Some(12)
    );
    // the consumer is gone: what is pending is not committed, and says so
    let error = committer.commit().expect_err("closed");
    assert!(
        error.to_string().contains("read again at the next start"),
        "{error}"
    );
    committer.shared.partitions.lock().assigned.clear();
    committer.commit().expect("nothing pending");
}

#[test]
fn a_record_prints_its_place_not_its_bytes() {
    let record = KafkaRecord {
        key: Some(Bytes::from_static(b"k")),
        payload: Bytes::from_static(b"secret"),
        partition: 2,
        offset: 41,
        timestamp: None,
    };
    let text = format!("{record:?}");
    assert!(text.contains("partition: 2") && text.contains("offset: 41"));
    assert!(!text.contains("secret"));
}
