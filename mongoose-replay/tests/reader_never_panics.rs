//! The store reader never panics, whatever bytes it is given, and a store cut short or
//! with a flipped bit reads as a prefix of what was written, or is refused, and never as
//! complete (book: running/record-and-replay.md: a torn last frame marks the recording
//! incomplete; issue 10 item 10: so does a cut at a frame boundary, which loses the
//! closing frame).

use std::sync::Arc;

use mongoose_core::{Delivery, Epoch, PositionValue};
use mongoose_replay::{Entry, Incomplete, Recording, ReplayStore, HEADER_LEN, MAGIC};
use proptest::prelude::*;

/// A valid store with two streams, and the file length after each write.
fn valid_store() -> (Vec<u8>, Vec<usize>, Vec<Entry>, Vec<Entry>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store.replay");
    let mut store = ReplayStore::open_for_record(&path).expect("store");
    let mut boundaries = vec![HEADER_LEN];
    let length = |path: &std::path::Path| std::fs::metadata(path).expect("metadata").len() as usize;
    let first = store.begin("p", None).expect("begin");
    boundaries.push(length(&path));
    let second = store.begin("p##2", None).expect("begin");
    boundaries.push(length(&path));
    let (mut first_entries, mut second_entries) = (Vec::new(), Vec::new());
    for sequence in 1..=6u64 {
        let delivery = (sequence % 2 == 1).then(|| {
            Delivery::new(
                Arc::from("lines"),
                sequence,
                Epoch(3),
                PositionValue::at(sequence * 100),
                0,
            )
        });
        let entry = Entry::Indexed {
            feed: "lines".into(),
            sequence,
            route: "onLine".into(),
            delivery: delivery.clone(),
            clock: vec![sequence as i64],
        };
        store.append(first, &entry).expect("append");
        boundaries.push(length(&path));
        first_entries.push(entry);
        let other = Entry::Inline {
            payload: vec![sequence as u8; sequence as usize],
            route: "onBytes".into(),
            delivery,
            clock: vec![],
        };
        store.append(second, &other).expect("append");
        boundaries.push(length(&path));
        second_entries.push(other);
    }
    store.close().expect("close");
    drop(store);
    (
        std::fs::read(&path).expect("read"),
        boundaries,
        first_entries,
        second_entries,
    )
}

fn assert_prefix_of(read: &Recording, first: &[Entry], second: &[Entry]) {
    for stream in read.streams() {
        let written = match stream.key() {
            "p" => first,
            "p##2" => second,
            other => panic!("a stream never written: {other:?}"),
        };
        assert!(
            written.starts_with(stream.entries()),
            "stream {} is not a prefix of what was written",
            stream.key()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_the_reader(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = Recording::from_bytes(&bytes);
    }

    #[test]
    fn arbitrary_frames_after_a_valid_head_never_panic_the_reader(
        tail in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&tail);
        let recording = Recording::from_bytes(&bytes).expect("a valid head is read");
        prop_assert_eq!(recording.holds_recording(), !tail.is_empty());
    }
}

#[test]
fn every_truncation_of_a_valid_store_reads_as_a_prefix_and_only_the_whole_store_is_complete() {
    let (bytes, boundaries, first, second) = valid_store();
    for cut in 0..=bytes.len() {
        let recording = Recording::from_bytes(&bytes[..cut]).expect("a truncation is read");
        assert_prefix_of(&recording, &first, &second);
        assert_eq!(recording.complete(), cut == bytes.len(), "cut at {cut}");
        // a cut at a write boundary lacks only the closing frame (a cut between a
        // delivery frame and its input is no write boundary)
        if cut < HEADER_LEN {
            assert_eq!(
                recording.incomplete(),
                &[Incomplete::NoHead { length: cut as u64 }]
            );
        } else if boundaries.contains(&cut) {
            assert_eq!(
                recording.incomplete(),
                &[Incomplete::NotClosed { offset: cut as u64 }],
                "cut at {cut}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn a_flipped_bit_in_a_valid_store_is_refused_or_read_as_an_incomplete_prefix(
        position in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let (mut bytes, _, first, second) = valid_store_cached();
        let at = position.index(bytes.len());
        bytes[at] ^= 1 << bit;
        if let Ok(recording) = Recording::from_bytes(&bytes) {
            assert_prefix_of(&recording, &first, &second);
            prop_assert!(!recording.complete(), "a flip at byte {} went unnoticed", at);
        }
    }
}

fn valid_store_cached() -> (Vec<u8>, Vec<usize>, Vec<Entry>, Vec<Entry>) {
    use std::sync::OnceLock;
    type Fixture = (Vec<u8>, Vec<usize>, Vec<Entry>, Vec<Entry>);
    static STORE: OnceLock<Fixture> = OnceLock::new();
    STORE.get_or_init(valid_store).clone()
}
