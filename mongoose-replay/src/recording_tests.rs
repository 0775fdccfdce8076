//! The store's regression tests, reading side: deliveries read back onto their inputs,
//! torn, damaged, unclosed and old-format stores (book: running/record-and-replay.md,
//! "Delivery metadata is recorded and replayed"; book: running/record-and-replay.md). The writing side's are in `store_tests.rs`; the shared fixtures in
//! `store::tests_support`.

use crate::format::{header, push_frame, WireDelivery, WireEntry, WireFrame, FORMAT_VERSION};
use crate::store::tests_support::{
    delivery, entries_of, every_kind, file_len, frames, indexed, inline, provenance, store_path,
    truncate,
};
use crate::{Incomplete, Recording, ReplayError, ReplayStore};

// book: running/record-and-replay.md: the delivery of each positioned
// input is stored with it and read back onto it
#[test]
fn a_delivery_is_read_back_onto_its_input() {
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    let counter = store.begin("counter", Some(&provenance())).unwrap();
    let other = store.begin("counter#2", None).unwrap();
    store
        .append(counter, &indexed(1, Some(delivery(1, 10))))
        .unwrap();
    store
        .append(other, &indexed(1, Some(delivery(1, 10))))
        .unwrap();
    store
        .append(counter, &inline("b", Some(delivery(2, 20))))
        .unwrap();
    store.append(counter, &indexed(3, None)).unwrap();
    store.close().unwrap();
    drop(store);

    let recording = Recording::read(&path).unwrap();
    assert!(recording.complete(), "{:?}", recording.incomplete());
    let entries = entries_of(&recording, "counter");
    assert_eq!(entries.len(), 3);
    assert_eq!(entries[0], indexed(1, Some(delivery(1, 10))));
    assert_eq!(entries[1], inline("b", Some(delivery(2, 20))));
    assert_eq!(entries[2].delivery(), None);
    assert_eq!(
        entries_of(&recording, "counter#2")[0].delivery(),
        Some(&delivery(1, 10))
    );
    assert_eq!(
        recording.stream("counter").unwrap().provenance(),
        Some(&provenance())
    );
    let kinds: Vec<_> = frames(&std::fs::read(&path).unwrap())
        .into_iter()
        .map(|(_, kind, _)| kind)
        .collect();
    assert_eq!(
        kinds,
        [
            "Stream", "Stream", "Delivery", "Entry", "Delivery", "Entry", "Delivery", "Entry",
            "Entry", "Close"
        ]
    );
}

// book: running/record-and-replay.md: a delivery whose input was never written adds nothing
// and marks the recording incomplete, as a torn last frame does
#[test]
fn a_delivery_with_no_input_after_it_adds_nothing() {
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    let counter = store.begin("counter", None).unwrap();
    store
        .append(counter, &indexed(1, Some(delivery(1, 10))))
        .unwrap();
    let before_second = file_len(&path) as usize;
    store
        .append(counter, &indexed(2, Some(delivery(2, 20))))
        .unwrap();
    drop(store);
    let bytes = std::fs::read(&path).unwrap();
    let tail = frames(&bytes)
        .into_iter()
        .find(|(offset, _, _)| *offset == before_second)
        .expect("a frame at the second input");
    assert_eq!(tail.1, "Delivery", "the fixture holds a delivery frame");
    truncate(&path, tail.2 as u64);

    let recording = Recording::read(&path).unwrap();
    assert_eq!(
        entries_of(&recording, "counter"),
        &[indexed(1, Some(delivery(1, 10)))]
    );
    assert!(!recording.complete());
    assert_eq!(
        recording.incomplete(),
        &[
            Incomplete::OrphanDelivery {
                offset: before_second as u64,
                stream: "counter".into()
            },
            Incomplete::NotClosed {
                offset: tail.2 as u64
            }
        ]
    );
}

// book: running/record-and-replay.md: recordings of feeds without positions are unchanged: no
// delivery frame is written and every input reads back with none
#[test]
fn a_store_written_without_deliveries_reads_none() {
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    let counter = store.begin("counter", None).unwrap();
    store.append(counter, &indexed(1, None)).unwrap();
    store.append(counter, &inline("a", None)).unwrap();
    store.close().unwrap();
    drop(store);

    let kinds: Vec<_> = frames(&std::fs::read(&path).unwrap())
        .into_iter()
        .map(|(_, kind, _)| kind)
        .collect();
    assert_eq!(kinds, ["Stream", "Entry", "Entry", "Close"]);
    let recording = Recording::read(&path).unwrap();
    assert!(recording.complete());
    let entries = entries_of(&recording, "counter");
    assert_eq!(entries, &[indexed(1, None), inline("a", None)]);
    assert!(entries.iter().all(|entry| entry.delivery().is_none()));
}

// book: running/record-and-replay.md (a reader from an older version refuses a
// newer file); book: running/record-and-replay.md (refuse rather than replay without metadata)
#[test]
fn a_reader_refuses_a_store_of_a_newer_format_version_and_says_what_to_do() {
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    let counter = store.begin("counter", None).unwrap();
    store.append(counter, &indexed(1, None)).unwrap();
    drop(store);
    let bytes = std::fs::read(&path).unwrap();
    // the durable layer's header, naming a newer version
    let mut newer =
        mongoose_durable::header::Header::new(crate::FORMAT_NAME, FORMAT_VERSION + 1, Vec::new())
            .encode()
            .unwrap();
    newer.extend_from_slice(&bytes[crate::HEADER_LEN..]);
    let bytes = newer;
    std::fs::write(&path, &bytes).unwrap();

    let error = Recording::read(&path).unwrap_err();
    match &error {
        ReplayError::NewerFormat {
            found, supported, ..
        } => assert_eq!((*found, *supported), (FORMAT_VERSION + 1, FORMAT_VERSION)),
        other => panic!("not a version refusal: {other}"),
    }
    let message = error.to_string();
    assert!(
        message.contains(&format!("format version {}", FORMAT_VERSION + 1))
            && message.contains("newer one"),
        "{message}"
    );
    assert!(matches!(
        ReplayStore::open(&path),
        Err(ReplayError::NewerFormat { .. })
    ));
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "a refused store is left alone"
    );
}

// book: running/record-and-replay.md: a torn last frame marks the recording incomplete
#[test]
fn a_torn_last_frame_marks_the_recording_incomplete_and_keeps_the_frames_before_it() {
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    let counter = store.begin("counter", None).unwrap();
    store
        .append(counter, &indexed(1, Some(delivery(1, 10))))
        .unwrap();
    store.append(counter, &indexed(2, None)).unwrap();
    let last_start = file_len(&path);
    store.append(counter, &indexed(3, None)).unwrap();
    let end = file_len(&path);
    drop(store);
    let whole = std::fs::read(&path).unwrap();

    for cut in last_start + 1..end {
        std::fs::write(&path, &whole[..cut as usize]).unwrap();
        let recording = Recording::read(&path).unwrap();
        assert_eq!(
            entries_of(&recording, "counter"),
            &[indexed(1, Some(delivery(1, 10))), indexed(2, None)],
            "cut at {cut}"
        );
        assert_eq!(
            recording.incomplete(),
            &[
                Incomplete::TornFrame { offset: last_start },
                Incomplete::NotClosed { offset: last_start }
            ],
            "cut at {cut}"
        );
    }
    // cut exactly at the boundary: the two inputs, and incomplete all the same (issue 10
    // item 10: before the closing frame, such a cut read as a complete recording)
    std::fs::write(&path, &whole[..last_start as usize]).unwrap();
    let recording = Recording::read(&path).unwrap();
    assert_eq!(entries_of(&recording, "counter").len(), 2);
    assert_eq!(
        recording.incomplete(),
        &[Incomplete::NotClosed { offset: last_start }]
    );
}

// book: running/record-and-replay.md: a torn input after its delivery frame adds neither
#[test]
fn a_torn_input_after_its_delivery_adds_neither() {
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    let counter = store.begin("counter", None).unwrap();
    let start = file_len(&path) as usize;
    store
        .append(counter, &inline("a", Some(delivery(1, 10))))
        .unwrap();
    drop(store);
    let whole = std::fs::read(&path).unwrap();
    let (_, _, input_start) = frames(&whole)[1];
    let recording = Recording::from_bytes(&whole[..whole.len() - 1]).unwrap();
    assert!(entries_of(&recording, "counter").is_empty());
    assert_eq!(
        recording.incomplete(),
        &[
            Incomplete::TornFrame {
                offset: input_start as u64
            },
            Incomplete::OrphanDelivery {
                offset: start as u64,
                stream: "counter".into()
            },
            Incomplete::NotClosed {
                offset: input_start as u64
            }
        ]
    );
}

/// `bytes` with the head of format version 1 (which has no closing frame).
fn as_version_1(bytes: Vec<u8>) -> Vec<u8> {
    let mut old = crate::MAGIC.to_vec();
    old.extend_from_slice(&1u32.to_le_bytes());
    old.extend_from_slice(&bytes[crate::HEADER_LEN..]);
    old
}

// issue 10 item 10: a store of format 1 (no closing frame) is still read, and reads as
// incomplete, never complete
#[test]
fn a_version_1_store_is_read_as_incomplete_for_want_of_a_closing_frame() {
    let mut bytes = header().to_vec();
    push_frame(
        &mut bytes,
        &WireFrame::Stream {
            id: 0,
            key: "counter".into(),
            provenance: None,
        },
    )
    .unwrap();
    push_frame(
        &mut bytes,
        &WireFrame::Entry {
            stream: 0,
            entry: WireEntry::of(&indexed(1, None)),
        },
    )
    .unwrap();
    let old = as_version_1(bytes);
    let recording = Recording::from_bytes(&old).unwrap();
    assert_eq!(entries_of(&recording, "counter"), &[indexed(1, None)]);
    assert_eq!(
        recording.incomplete(),
        &[Incomplete::NotClosed {
            offset: old.len() as u64
        }]
    );
    let reason = recording.incomplete()[0].to_string();
    assert!(
        reason
            .contains("no closing frame (written by an older version or the recorder was killed)"),
        "{reason}"
    );
    // it is never appended to, so it never gets a closing frame of format 2
    let (_dir, path) = store_path();
    std::fs::write(&path, &old).unwrap();
    let store = ReplayStore::open(&path).unwrap();
    assert!(store.read_only_reason().is_some());
    // and a closing frame inside a format-1 store is damage, not a close
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    store.begin("counter", None).unwrap();
    store.close().unwrap();
    let recording = Recording::from_bytes(&as_version_1(std::fs::read(&path).unwrap())).unwrap();
    assert!(matches!(
        recording.incomplete(),
        [Incomplete::DamagedFrame { reason, .. }] if reason.contains("format version 1")
    ));
}

// issue 10 item 10: the closing frame counts the frames and entries before it and
// checksums them, so frames removed or changed at frame boundaries are found
#[test]
fn a_closing_frame_that_does_not_match_the_frames_before_it_is_incomplete() {
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    let counter = store.begin("counter", None).unwrap();
    for sequence in 1..=3 {
        store.append(counter, &indexed(sequence, None)).unwrap();
    }
    store.close().unwrap();
    let whole = std::fs::read(&path).unwrap();
    let found = frames(&whole);
    assert_eq!(found.last().map(|(_, kind, _)| *kind), Some("Close"));
    let recording = Recording::from_bytes(&whole).unwrap();
    let closing = recording.closing().expect("closed");
    assert_eq!((closing.frames(), closing.entries()), (4, 3));

    // the second entry frame removed, at its boundaries
    let (start, _, end) = found[2];
    let mut removed = whole[..start].to_vec();
    removed.extend_from_slice(&whole[end..]);
    let recording = Recording::from_bytes(&removed).unwrap();
    assert!(recording.closing().is_none());
    assert!(
        matches!(
            recording.incomplete(),
            [Incomplete::ClosingMismatch { reason, .. }]
                if reason.contains("counts 4 frames, the store holds 3")
                    && reason.contains("counts 3 entries, the store holds 2")
        ),
        "{:?}",
        recording.incomplete()
    );

    // two entry frames swapped: the counts hold, the checksum does not
    let (a_start, _, a_end) = found[1];
    let (_, _, b_end) = found[2];
    let mut swapped = whole[..a_start].to_vec();
    swapped.extend_from_slice(&whole[a_end..b_end]);
    swapped.extend_from_slice(&whole[a_start..a_end]);
    swapped.extend_from_slice(&whole[b_end..]);
    let recording = Recording::from_bytes(&swapped).unwrap();
    assert!(
        matches!(
            recording.incomplete(),
            [Incomplete::ClosingMismatch { reason, .. }] if reason.contains("checksum")
        ),
        "{:?}",
        recording.incomplete()
    );

    // a frame after the closing frame
    let mut after = whole.clone();
    push_frame(
        &mut after,
        &WireFrame::Entry {
            stream: 0,
            entry: WireEntry::of(&indexed(4, None)),
        },
    )
    .unwrap();
    let recording = Recording::from_bytes(&after).unwrap();
    assert!(matches!(
        recording.incomplete(),
        [Incomplete::DamagedFrame { reason, .. }] if reason.contains("after the closing frame")
    ));
}

#[test]
fn a_file_that_is_not_a_store_is_refused_and_left_alone() {
    let (_dir, path) = store_path();
    std::fs::write(&path, b"timestamp,kind,stream\n").unwrap();
    let error = ReplayStore::open_for_record(&path).unwrap_err();
    assert!(matches!(error, ReplayError::NotAStore { .. }), "{error}");
    assert!(matches!(
        Recording::read(&path),
        Err(ReplayError::NotAStore { .. })
    ));
    assert_eq!(std::fs::read(&path).unwrap(), b"timestamp,kind,stream\n");
}

#[test]
fn a_damaged_frame_stops_reading_there_and_marks_the_recording_incomplete() {
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    let counter = store.begin("counter", None).unwrap();
    store.append(counter, &indexed(1, None)).unwrap();
    let second = file_len(&path) as usize;
    store.append(counter, &indexed(2, None)).unwrap();
    store.append(counter, &indexed(3, None)).unwrap();
    drop(store);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[second + 12] ^= 0x10;
    let recording = Recording::from_bytes(&bytes).unwrap();
    assert_eq!(entries_of(&recording, "counter"), &[indexed(1, None)]);
    assert!(matches!(
        recording.incomplete(),
        [Incomplete::DamagedFrame { offset, .. }] if *offset == second as u64
    ));
}

#[test]
fn an_input_marked_delivered_without_its_delivery_frame_is_damaged() {
    let mut bytes = header().to_vec();
    push_frame(
        &mut bytes,
        &WireFrame::Stream {
            id: 0,
            key: "counter".into(),
            provenance: None,
        },
    )
    .unwrap();
    let positioned = indexed(1, Some(delivery(1, 10)));
    let at = bytes.len();
    push_frame(
        &mut bytes,
        &WireFrame::Entry {
            stream: 0,
            entry: WireEntry::of(&positioned),
        },
    )
    .unwrap();
    let recording = Recording::from_bytes(&bytes).unwrap();
    assert!(entries_of(&recording, "counter").is_empty());
    assert!(matches!(
        recording.incomplete(),
        [Incomplete::DamagedFrame { offset, .. }] if *offset == at as u64
    ));
}

#[test]
fn a_delivery_is_not_attached_to_an_input_of_another_stream() {
    let mut bytes = header().to_vec();
    for (id, key) in ["a", "b"].into_iter().enumerate() {
        push_frame(
            &mut bytes,
            &WireFrame::Stream {
                id: id as u32,
                key: key.into(),
                provenance: None,
            },
        )
        .unwrap();
    }
    let the_delivery = delivery(1, 10);
    push_frame(
        &mut bytes,
        &WireFrame::Delivery {
            stream: 0,
            delivery: WireDelivery::of(&the_delivery),
        },
    )
    .unwrap();
    push_frame(
        &mut bytes,
        &WireFrame::Entry {
            stream: 1,
            entry: WireEntry::of(&indexed(1, None)),
        },
    )
    .unwrap();
    let recording = Recording::from_bytes(&bytes).unwrap();
    assert_eq!(entries_of(&recording, "b"), &[indexed(1, None)]);
    assert!(entries_of(&recording, "a").is_empty());
    assert!(matches!(
        recording.incomplete(),
        [Incomplete::OrphanDelivery { stream, .. }, Incomplete::NotClosed { .. }] if stream == "a"
    ));
}

#[test]
fn every_entry_kind_reads_back_as_written_in_its_own_stream() {
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    let first = store.begin("p", Some(&provenance())).unwrap();
    let escaped = store.begin("p##2", None).unwrap();
    let with = every_kind(Some(delivery(5, 50)));
    let without = every_kind(None);
    for (a, b) in with.iter().zip(&without) {
        store.append(first, a).unwrap();
        store.append(escaped, b).unwrap();
    }
    store.close().unwrap();
    drop(store);
    let recording = Recording::read(&path).unwrap();
    assert!(recording.complete());
    assert_eq!(entries_of(&recording, "p"), with.as_slice());
    assert_eq!(entries_of(&recording, "p##2"), without.as_slice());
    assert!(recording.stream("p#2").is_none());
    let keys: Vec<_> = recording.streams().iter().map(|s| s.key()).collect();
    assert_eq!(keys, ["p", "p##2"]);
}

mod frames_with_valid_checksums {
    use super::*;
    use proptest::prelude::*;

    /// A frame that passes its checksum: a well-formed wire frame with arbitrary stream
    /// numbers and delivery flags, or an arbitrary body.
    fn encoded(frame: &WireFrame<'_>) -> Vec<u8> {
        let mut bytes = Vec::new();
        push_frame(&mut bytes, frame).expect("encodable");
        bytes
    }

    fn frame() -> impl Strategy<Value = Vec<u8>> {
        let stream = 0u32..4;
        prop_oneof![
            (stream.clone(), "[p#2]{0,3}").prop_map(|(id, key)| encoded(&WireFrame::Stream {
                id,
                key: key.into(),
                provenance: None,
            })),
            (stream.clone(), 0u64..4).prop_map(|(stream, sequence)| {
                let the_delivery = delivery(sequence, sequence * 10);
                encoded(&WireFrame::Delivery {
                    stream,
                    delivery: WireDelivery::of(&the_delivery),
                })
            }),
            (stream, 0u64..4, any::<bool>(), any::<bool>()).prop_map(
                |(stream, sequence, positioned, as_inline)| {
                    let the_delivery = positioned.then(|| delivery(sequence, sequence * 10));
                    let entry = if as_inline {
                        inline("x", the_delivery)
                    } else {
                        indexed(sequence, the_delivery)
                    };
                    encoded(&WireFrame::Entry {
                        stream,
                        entry: WireEntry::of(&entry),
                    })
                }
            ),
            (0u64..6, 0u64..4, any::<bool>()).prop_map(|(frames, entries, zero)| {
                encoded(&WireFrame::Close {
                    frames,
                    entries,
                    checksum: if zero { 0 } else { u32::MAX },
                    sealed: Vec::new(),
                })
            }),
            proptest::collection::vec(any::<u8>(), 1..48).prop_map(|body| {
                let mut bytes = Vec::new();
                crate::format::push_raw_frame_for_tests(&mut bytes, &body);
                bytes
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        // the reader's pairing and stream rules never panic, whatever whole frames hold
        #[test]
        fn any_sequence_of_whole_frames_is_read_without_a_panic(
            frames in proptest::collection::vec(frame(), 0..24),
        ) {
            let mut bytes = header().to_vec();
            for frame in &frames {
                bytes.extend_from_slice(frame);
            }
            let recording = Recording::from_bytes(&bytes).expect("a valid head is read");
            prop_assert_eq!(recording.complete(), recording.incomplete().is_empty());
            let inputs: usize = recording
                .streams()
                .iter()
                .map(|stream| stream.entries().len())
                .sum();
            prop_assert!(inputs <= frames.len());
        }
    }
}

// a closing frame only seals files beside the store: a damaged or crafted name never
// makes the reader open a file elsewhere
#[test]
fn a_sealed_name_that_is_not_a_file_name_beside_the_store_is_refused() {
    let (dir, _path) = store_path();
    for name in ["../secret", "a/b", "", "..", "c:\\x"] {
        let sealed = crate::SealedFile::from_parts(name.to_owned(), 0, 0);
        let refused = sealed.verify_in(dir.path()).unwrap_err();
        assert!(refused.contains("not a file name"), "{name}: {refused}");
    }
    std::fs::write(dir.path().join("outputs.jsonl"), b"x\n").unwrap();
    let sealed = crate::SealedFile::of_file(dir.path().join("outputs.jsonl")).unwrap();
    assert_eq!((sealed.name(), sealed.length()), ("outputs.jsonl", 2));
    assert_eq!(sealed.verify_in(dir.path()), Ok(()));
}
