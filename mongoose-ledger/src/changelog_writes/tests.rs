//! [`ChangelogWrites`] against a store in memory (our own trait, written here) and a
//! commit gate that records what it was told.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use mongoose_core::sink::CommitGate;
use mongoose_core::state_store::{
    OnDurable, PartitionStateStore, RestoredPartition, StoredRecord, WriteFailure,
};
use mongoose_core::{CoreError, Epoch};
use parking_lot::Mutex;

use super::ChangelogWrites;

/// A commit gate that keeps the tags still pending.
#[derive(Debug, Default)]
struct Gate {
    pending: Mutex<BTreeSet<u64>>,
}

impl Gate {
    fn pending(&self) -> Vec<u64> {
        self.pending.lock().iter().copied().collect()
    }
}

impl CommitGate for Gate {
    fn pending(&self, tag: u64) {
        self.pending.lock().insert(tag);
    }

    fn complete(&self, tag: u64) {
        self.pending.lock().remove(&tag);
    }

    fn complete_through(&self, tag: u64) {
        self.pending.lock().retain(|pending| *pending > tag);
    }
}

/// A state store in memory: it keeps the tags it was given per partition, reports them
/// through its [`OnDurable`] when the test says, and answers `retake` from a script
/// (writing the partition's fenced writes again, as the Kafka changelog does, on
/// `Ok(true)`).
struct Memory {
    on_durable: OnDurable,
    written: Mutex<Vec<(i32, Epoch, u64, u64)>>,
    retakes: Mutex<VecDeque<Result<bool, CoreError>>>,
    asked: Mutex<Vec<(i32, Epoch)>>,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory").finish_non_exhaustive()
    }
}

impl Memory {
    fn new(on_durable: OnDurable) -> Self {
        Memory {
            on_durable,
            written: Mutex::new(Vec::new()),
            retakes: Mutex::new(VecDeque::new()),
            asked: Mutex::new(Vec::new()),
        }
    }

    /// The broker fenced `partition`'s producer: each of its writes is reported fenced.
    fn fence(&self, partition: i32) {
        let written: Vec<_> = self.written.lock().clone();
        for (written_partition, epoch, _, tag) in written {
            if written_partition == partition {
                (self.on_durable)(
                    tag,
                    Err(WriteFailure::Fenced {
                        partition,
                        epoch,
                        message: "fenced by the test".into(),
                    }),
                );
            }
        }
    }

    fn answer_retake(&self, answer: Result<bool, CoreError>) {
        self.retakes.lock().push_back(answer);
    }

    fn asked(&self) -> Vec<(i32, Epoch)> {
        self.asked.lock().clone()
    }
}

impl PartitionStateStore for Memory {
    fn location(&self) -> &str {
        "memory"
    }

    fn write(
        &self,
        partition: i32,
        epoch: Epoch,
        offset: u64,
        _key: &[u8],
        _value: &[u8],
        tag: u64,
    ) -> Result<(), CoreError> {
        self.written.lock().push((partition, epoch, offset, tag));
        Ok(())
    }

    fn restore(
        &self,
        _partition: i32,
        _epoch: Epoch,
        _counted: &mut dyn FnMut(&StoredRecord),
    ) -> Result<RestoredPartition, CoreError> {
        Ok(RestoredPartition::default())
    }

    fn retake(&self, partition: i32, epoch: Epoch) -> Result<bool, CoreError> {
        self.asked.lock().push((partition, epoch));
        let answer = self.retakes.lock().pop_front().unwrap_or(Ok(false));
        if let Ok(true) = answer {
            // written again: durable this time
            let written: Vec<_> = self.written.lock().clone();
            for (written_partition, _, _, tag) in written {
                if written_partition == partition {
                    (self.on_durable)(tag, Ok(()));
                }
            }
        }
        answer
    }

    fn flush(&self, _timeout: Duration) -> Result<(), CoreError> {
        Ok(())
    }
}

fn store_error() -> CoreError {
    CoreError::StateStore {
        store: "memory".into(),
        error: "the broker did not answer".into(),
    }
}

/// Writes with a gate: the bookkeeping, its gate and its store.
fn opened() -> (ChangelogWrites, Arc<Gate>, Memory) {
    let gate = Arc::new(Gate::default());
    let writes = ChangelogWrites::new("test", Some(Arc::clone(&gate) as Arc<dyn CommitGate>));
    let store = Memory::new(writes.on_durable());
    (writes, gate, store)
}

/// Two lines of partition 3 written in epoch 7: tags 1 and 2, pending at the gate.
fn two_lines_of_partition_3(writes: &mut ChangelogWrites, store: &Memory) {
    for offset in [10, 20] {
        writes
            .write(store, 3, Epoch(7), offset, b"key", b"value")
            .expect("written");
    }
}

#[test]
fn a_durable_write_completes_its_tag_at_the_gate() {
    let (mut writes, gate, store) = opened();
    two_lines_of_partition_3(&mut writes, &store);
    assert_eq!(gate.pending(), vec![1, 2]);
    (writes.on_durable())(1, Ok(()));
    assert_eq!(gate.pending(), vec![2]);
}

#[test]
fn a_fenced_partition_still_held_and_retaken_is_kept_and_its_writes_written_again() {
    let (mut writes, gate, store) = opened();
    two_lines_of_partition_3(&mut writes, &store);
    store.fence(3);
    assert_eq!(
        gate.pending(),
        vec![1, 2],
        "a fenced write's commit is held"
    );
    store.answer_retake(Ok(true));

    let dropped = writes.settle(&store, |lane, epoch| (lane, epoch) == (3, 7), Some((3, 7)));

    assert!(dropped.is_empty(), "nothing dropped: {dropped:?}");
    assert_eq!(store.asked(), vec![(3, Epoch(7))]);
    assert_eq!(
        gate.pending(),
        Vec::<u64>::new(),
        "written again and durable"
    );
    assert!(!writes.is_fenced_off(3, 7));
    // settled: the store is not asked again
    let dropped = writes.settle(&store, |_, _| true, None);
    assert!(dropped.is_empty());
    assert_eq!(store.asked().len(), 1);
}

#[test]
fn a_fenced_partition_the_store_cannot_answer_for_stays_held_and_is_asked_again() {
    let (mut writes, gate, store) = opened();
    two_lines_of_partition_3(&mut writes, &store);
    store.fence(3);
    store.answer_retake(Err(store_error()));

    let dropped = writes.settle(&store, |lane, epoch| (lane, epoch) == (3, 7), None);

    assert!(dropped.is_empty());
    assert_eq!(gate.pending(), vec![1, 2], "the commits stay held");
    assert!(!writes.is_fenced_off(3, 7));
    // asked again at the next settle (the fence timer, the next line)
    store.answer_retake(Ok(true));
    let dropped = writes.settle(&store, |lane, epoch| (lane, epoch) == (3, 7), None);
    assert!(dropped.is_empty());
    assert_eq!(store.asked(), vec![(3, Epoch(7)), (3, Epoch(7))]);
    assert_eq!(gate.pending(), Vec::<u64>::new());
}

#[test]
fn a_fenced_partition_a_newer_owner_holds_is_dropped_and_its_epoch_skipped() {
    let (mut writes, gate, store) = opened();
    two_lines_of_partition_3(&mut writes, &store);
    store.fence(3);
    store.answer_retake(Ok(false));

    let dropped = writes.settle(&store, |lane, epoch| (lane, epoch) == (3, 7), None);

    assert_eq!(dropped, vec![3]);
    assert!(
        writes.is_fenced_off(3, 7),
        "its lines in epoch 7 are skipped"
    );
    assert!(!writes.is_fenced_off(3, 8), "a later epoch is not");
    assert_eq!(
        gate.pending(),
        Vec::<u64>::new(),
        "the newer owner holds it: this member's commits of the epoch are over"
    );
    // restored again in a new epoch: no longer skipped
    writes.restored(3);
    assert!(!writes.is_fenced_off(3, 7));
}

#[test]
fn a_fenced_partition_no_longer_held_in_that_epoch_is_not_asked_for() {
    let (mut writes, gate, store) = opened();
    two_lines_of_partition_3(&mut writes, &store);
    store.fence(3);

    // a line of a later epoch of the lane: the fenced epoch is over here
    let dropped = writes.settle(&store, |_, _| true, Some((3, 8)));

    assert!(
        dropped.is_empty(),
        "what it holds now is not the fenced epoch"
    );
    assert!(store.asked().is_empty());
    assert!(!writes.is_fenced_off(3, 7));
    assert_eq!(gate.pending(), Vec::<u64>::new());
}

#[test]
fn the_first_write_the_store_gives_up_is_kept_and_fails_the_next_lines() {
    let (mut writes, gate, store) = opened();
    two_lines_of_partition_3(&mut writes, &store);
    assert!(writes.check_given_up(&store).is_ok());

    (writes.on_durable())(1, Err(WriteFailure::GivenUp("first".into())));
    (writes.on_durable())(2, Err(WriteFailure::GivenUp("second".into())));

    assert_eq!(
        gate.pending(),
        vec![1, 2],
        "a given-up line is never committed"
    );
    let error = writes
        .check_given_up(&store)
        .expect_err("later lines fail")
        .to_string();
    assert!(error.contains("first"), "{error}");
    assert!(!error.contains("second"), "{error}");
    assert!(error.contains("memory"), "names the store: {error}");
}

#[test]
fn a_lane_taken_over_at_its_restore_is_skipped_in_that_epoch() {
    let (mut writes, _gate, _store) = opened();
    writes.skip_epoch(5, 9);
    assert!(writes.is_fenced_off(5, 9));
    assert!(!writes.is_fenced_off(5, 10));
    assert!(!writes.is_fenced_off(4, 9));
}
