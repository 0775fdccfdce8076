//! The store's regression tests, writing side: RECORD into a new, reopened, closed,
//! incomplete or buffered store (book: running/record-and-replay.md, "Delivery metadata is
//! recorded and replayed"; book: running/record-and-replay.md). The reading
//! side's are in `recording_tests.rs`; the shared fixtures in `store::tests_support`.

use crate::format::{header, push_frame, WireEntry, WireFrame, HEADER_LEN};
use crate::store::tests_support::{
    delivery, entries_of, file_len, frames, indexed, inline, store_path, truncate,
};
use crate::{Entry, Incomplete, Recording, ReplayError, ReplayStore};

// book: running/record-and-replay.md: before, a reopened store
// gave the orphan delivery to the next input appended for that processor, so an
// unpositioned input replayed with the interrupted input's feed, epoch and position
#[test]
fn an_interrupted_delivery_cannot_attach_to_a_later_unpositioned_input() {
    // the store refuses to append after the interruption
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    let counter = store.begin("counter", None).unwrap();
    let interrupted_at = file_len(&path) as usize;
    store
        .append(counter, &indexed(1, Some(delivery(1, 10))))
        .unwrap();
    drop(store);
    let bytes = std::fs::read(&path).unwrap();
    let (_, kind, delivery_end) = frames(&bytes)[1];
    assert_eq!(kind, "Delivery");
    truncate(&path, delivery_end as u64);
    let mut reopened = ReplayStore::open(&path).unwrap();
    let handle = reopened.stream("counter").expect("stream continues");
    let refused = reopened.append(handle, &inline("later", None)).unwrap_err();
    assert!(matches!(refused, ReplayError::ReadOnly { .. }), "{refused}");
    assert_eq!(file_len(&path), delivery_end as u64, "nothing appended");

    // and a reader never attaches it even to an unpositioned input that a writer without
    // the refusal appended right after it
    let mut crafted = bytes[..delivery_end].to_vec();
    assert_eq!(interrupted_at, frames(&bytes)[1].0);
    push_frame(
        &mut crafted,
        &WireFrame::Entry {
            stream: 0,
            entry: WireEntry::of(&inline("later", None)),
        },
    )
    .unwrap();
    let recording = Recording::from_bytes(&crafted).unwrap();
    assert_eq!(entries_of(&recording, "counter"), &[inline("later", None)]);
    assert_eq!(
        recording.incomplete(),
        &[
            Incomplete::OrphanDelivery {
                offset: interrupted_at as u64,
                stream: "counter".into()
            },
            Incomplete::NotClosed {
                offset: crafted.len() as u64
            }
        ]
    );
}

// book: running/record-and-replay.md: a store with an orphan
// delivery is read, never appended to (append and begin refuse), and it holds a
// recording, so it is never reused as an empty one
#[test]
fn a_store_with_an_orphan_delivery_row_is_read_but_never_appended_to() {
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    let counter = store.begin("counter", None).unwrap();
    store.append(counter, &indexed(1, None)).unwrap();
    let before = file_len(&path) as usize;
    store
        .append(counter, &indexed(2, Some(delivery(2, 20))))
        .unwrap();
    drop(store);
    let bytes = std::fs::read(&path).unwrap();
    let delivery_frame = frames(&bytes)
        .into_iter()
        .find(|(offset, _, _)| *offset == before)
        .unwrap();
    // book: running/record-and-replay.md: assert the fixture holds a delivery row before truncating it
    assert_eq!(delivery_frame.1, "Delivery");
    truncate(&path, delivery_frame.2 as u64);
    let orphaned = std::fs::read(&path).unwrap();

    let mut reopened = ReplayStore::open(&path).unwrap();
    assert!(reopened.holds_recording());
    let reason = reopened.read_only_reason().expect("read-only").to_owned();
    assert!(reason.contains("whose input was never written"), "{reason}");
    let handle = reopened.stream("counter").unwrap();
    let append = reopened.append(handle, &indexed(3, None)).unwrap_err();
    assert!(
        append.to_string().contains("is read-only")
            && append.to_string().contains("record into a new store"),
        "{append}"
    );
    let begin = reopened.begin("other", None).unwrap_err();
    assert!(matches!(begin, ReplayError::ReadOnly { .. }), "{begin}");
    let recording = reopened.read().unwrap();
    drop(reopened); // one opener at a time
    let record = ReplayStore::open_for_record(&path).unwrap_err();
    assert!(
        matches!(record, ReplayError::AlreadyHoldsRecording { .. }),
        "{record}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        orphaned,
        "the file is unchanged"
    );

    assert!(recording.holds_recording());
    assert!(!recording.complete());
    assert_eq!(entries_of(&recording, "counter"), &[indexed(1, None)]);
}

// book: running/record-and-replay.md, ReplayConfig: RECORD refuses a store that
// already holds a recording
#[test]
fn record_refuses_a_store_that_already_holds_a_recording() {
    let (_dir, path) = store_path();
    let store = ReplayStore::open_for_record(&path).unwrap();
    assert!(!store.holds_recording());
    drop(store);
    // a store with only its head is still empty
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    store.begin("counter", None).unwrap();
    assert!(store.holds_recording());
    drop(store);
    // a stream begun with no entries is already a recording
    let error = ReplayStore::open_for_record(&path).unwrap_err();
    assert!(matches!(error, ReplayError::AlreadyHoldsRecording { .. }));
    assert!(
        error.to_string().contains("record into a new path"),
        "{error}"
    );
}

// book: running/record-and-replay.md: an incomplete store is read, never appended to
#[test]
fn a_store_with_a_torn_last_frame_is_never_appended_to() {
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    let counter = store.begin("counter", None).unwrap();
    store.append(counter, &indexed(1, None)).unwrap();
    drop(store);
    let torn_len = file_len(&path) - 2;
    truncate(&path, torn_len);
    let mut reopened = ReplayStore::open(&path).unwrap();
    assert!(reopened.holds_recording());
    assert!(reopened
        .read_only_reason()
        .unwrap()
        .contains("interrupted while writing"));
    let handle = reopened.stream("counter").unwrap();
    assert!(matches!(
        reopened.append(handle, &indexed(2, None)),
        Err(ReplayError::ReadOnly { .. })
    ));
    assert_eq!(file_len(&path), torn_len);
}

#[test]
fn a_head_torn_while_the_store_was_created_is_an_empty_store() {
    let (_dir, path) = store_path();
    for len in 0..HEADER_LEN {
        std::fs::write(&path, &header()[..len]).unwrap();
        let recording = Recording::read(&path).unwrap();
        // read as an empty store, and never as a complete recording
        assert!(!recording.holds_recording() && !recording.complete());
        assert_eq!(
            recording.incomplete(),
            &[Incomplete::NoHead { length: len as u64 }]
        );
        let mut store = ReplayStore::open_for_record(&path).unwrap();
        let handle = store.begin("counter", None).unwrap();
        store.append(handle, &indexed(1, None)).unwrap();
        drop(store);
        let recording = Recording::read(&path).unwrap();
        assert_eq!(entries_of(&recording, "counter"), &[indexed(1, None)]);
    }
}

// a closed store is read-only; a store dropped without close() is incomplete
#[test]
fn only_a_closed_store_reads_complete_and_a_closed_store_refuses_appends() {
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    let counter = store.begin("counter", None).unwrap();
    store.append(counter, &indexed(1, None)).unwrap();
    store.sync().unwrap();
    let recording = Recording::read(&path).unwrap();
    assert!(matches!(
        recording.incomplete(),
        [Incomplete::NotClosed { .. }]
    ));
    store.close().unwrap();
    assert!(Recording::read(&path).unwrap().complete());
    assert!(matches!(
        store.append(counter, &indexed(2, None)),
        Err(ReplayError::ReadOnly { .. })
    ));
    assert!(matches!(store.close(), Err(ReplayError::ReadOnly { .. })));
    // a closed recording of nothing is still a recording
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    store.close().unwrap();
    drop(store);
    assert!(Recording::read(&path).unwrap().complete());
    assert!(matches!(
        ReplayStore::open_for_record(&path),
        Err(ReplayError::AlreadyHoldsRecording { .. })
    ));
}

#[test]
fn a_complete_store_reopened_continues_its_streams() {
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    let counter = store.begin("counter", None).unwrap();
    store
        .append(counter, &indexed(1, Some(delivery(1, 10))))
        .unwrap();
    store.close().unwrap();
    drop(store);
    let closed = std::fs::read(&path).unwrap();
    let mut reopened = ReplayStore::open(&path).unwrap();
    assert!(reopened.read_only_reason().is_none());
    assert_eq!(
        std::fs::read(&path).unwrap(),
        closed,
        "opening alone leaves a closed store as it was"
    );
    let handle = reopened.stream("counter").unwrap();
    reopened
        .append(handle, &indexed(2, Some(delivery(2, 20))))
        .unwrap();
    let later = reopened.begin("counter#2", None).unwrap();
    reopened.append(later, &indexed(1, None)).unwrap();
    assert!(matches!(
        reopened.begin("counter", None),
        Err(ReplayError::StreamAlreadyBegun { .. })
    ));
    // continued: not closed until closed again
    let recording = reopened.read().unwrap();
    assert!(recording.closing().is_none());
    assert!(!recording.complete());
    reopened.close().unwrap();
    let recording = Recording::read(&path).unwrap();
    assert!(recording.complete(), "{:?}", recording.incomplete());
    assert_eq!(
        recording.closing().map(|closing| closing.entries()),
        Some(3)
    );
    assert_eq!(
        entries_of(&recording, "counter"),
        &[
            indexed(1, Some(delivery(1, 10))),
            indexed(2, Some(delivery(2, 20)))
        ]
    );
    assert_eq!(entries_of(&recording, "counter#2"), &[indexed(1, None)]);
}

#[test]
fn a_handle_of_another_store_and_an_ambiguous_key_are_refused() {
    let (_dir, path) = store_path();
    let (_other_dir, other_path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    let mut other = ReplayStore::open_for_record(&other_path).unwrap();
    let handle = other.begin("counter", None).unwrap();
    store.begin("counter", None).unwrap();
    assert!(matches!(
        store.append(handle, &indexed(1, None)),
        Err(ReplayError::UnknownStream { .. })
    ));
    assert!(matches!(
        store.begin("p#x", None),
        Err(ReplayError::InvalidStreamKey { .. })
    ));
}

#[test]
fn an_entry_larger_than_a_frame_is_refused_and_the_store_stays_usable() {
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    let counter = store.begin("counter", None).unwrap();
    let huge = Entry::Inline {
        payload: vec![0u8; crate::MAX_FRAME_LEN + 1],
        route: "r".into(),
        delivery: Some(delivery(1, 10)),
        clock: vec![],
    };
    let before = file_len(&path);
    assert!(matches!(
        store.append(counter, &huge),
        Err(ReplayError::FrameTooLarge { .. })
    ));
    assert_eq!(file_len(&path), before, "neither frame was written");
    store.append(counter, &indexed(1, None)).unwrap();
    store.close().unwrap();
    let recording = store.read().unwrap();
    assert!(recording.complete(), "{:?}", recording.incomplete());
    assert_eq!(entries_of(&recording, "counter"), &[indexed(1, None)]);
}

// book: running/record-and-replay.md: the delivery frame and its input are written in the same
// write, buffered or not
#[test]
fn a_buffered_store_writes_whole_appends_only_when_flushed_or_dropped() {
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    store.set_write_buffer(1 << 20).unwrap();
    let counter = store.begin("counter", None).unwrap();
    for sequence in 1..=3 {
        store
            .append(
                counter,
                &indexed(sequence, Some(delivery(sequence, sequence * 10))),
            )
            .unwrap();
    }
    assert!(store.holds_recording());
    assert_eq!(
        file_len(&path),
        HEADER_LEN as u64,
        "nothing written before a flush"
    );
    store.flush().unwrap();
    let flushed = file_len(&path);
    assert_eq!(
        Recording::read(&path).unwrap().streams()[0].entries().len(),
        3
    );
    store
        .append(counter, &inline("d", Some(delivery(4, 40))))
        .unwrap();
    assert_eq!(file_len(&path), flushed);
    drop(store);
    let recording = Recording::read(&path).unwrap();
    // dropped, not closed: every append written, and no closing frame
    assert_eq!(
        recording.incomplete(),
        &[Incomplete::NotClosed {
            offset: file_len(&path)
        }]
    );
    assert_eq!(
        entries_of(&recording, "counter").last(),
        Some(&inline("d", Some(delivery(4, 40))))
    );
}

#[test]
fn a_write_buffer_smaller_than_an_append_writes_each_append_whole() {
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    store.set_write_buffer(1).unwrap();
    let counter = store.begin("counter", None).unwrap();
    let mut lengths = vec![file_len(&path)];
    for sequence in 1..=3 {
        store
            .append(
                counter,
                &indexed(sequence, Some(delivery(sequence, sequence * 10))),
            )
            .unwrap();
        lengths.push(file_len(&path));
    }
    let bytes = std::fs::read(&path).unwrap();
    // every append ended at a point where the file holds nothing torn: only the
    // closing frame is missing
    for length in lengths {
        let recording = Recording::from_bytes(&bytes[..length as usize]).unwrap();
        assert_eq!(
            recording.incomplete(),
            &[Incomplete::NotClosed { offset: length }],
            "at {length}"
        );
    }
}

// storage.md gap 12's last part: the store took no lock, so a second writer of one store
// opened it too and both appended, interleaving their frames. Now the second writer is
// refused, naming the store, until the first lets go.
#[test]
fn a_second_writer_of_a_store_is_refused_while_the_first_holds_it() {
    let (_dir, path) = store_path();
    let mut first = ReplayStore::open_for_record(&path).unwrap();
    let counter = first.begin("counter", None).unwrap();
    first.append(counter, &inline("one", None)).unwrap();
    let refused = ReplayStore::open(&path).expect_err("a second writer is refused");
    assert!(matches!(refused, ReplayError::InUse { .. }), "{refused:?}");
    assert!(
        refused.to_string().contains(&path.display().to_string()),
        "{refused}"
    );
    first.close().unwrap();
    drop(first);
    let reopened = ReplayStore::open(&path).expect("free once the first let go");
    assert!(reopened.holds_recording());
}

// issue 38: the store's frames are the durable layer's frames (length, CRC-32 of the
// length then the body, body), so the layer's reader reads every frame of a store, and
// a store written before the store framed through the layer reads the same
#[test]
fn a_stores_frames_are_the_durable_layers_frames() {
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    let counter = store.begin("counter", None).unwrap();
    store
        .append(counter, &indexed(1, Some(delivery(1, 10))))
        .unwrap();
    store.append(counter, &inline("two", None)).unwrap();
    store.close().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let ours = frames(&bytes);
    let mut at = HEADER_LEN;
    let mut layer = Vec::new();
    while at < bytes.len() {
        let frame = mongoose_durable::log::read_frame(&bytes, at).expect("a layer frame");
        layer.push(at);
        at = frame.next;
    }
    assert_eq!(at, bytes.len());
    assert_eq!(
        layer,
        ours.iter()
            .map(|(offset, _, _)| *offset)
            .collect::<Vec<_>>()
    );
    assert_eq!(ours.last().unwrap().1, "Close");
    // a changed body byte fails the layer's checksum as it fails the store's
    let mut changed = bytes.clone();
    changed[layer[1] + 9] ^= 0x10;
    assert!(mongoose_durable::log::read_frame(&changed, layer[1]).is_err());
}

// issue 38: a store begins with the durable layer's header, naming its format and
// version (a store has no owner: any reader may read it)
#[test]
fn a_new_store_begins_with_the_durable_layers_header() {
    let (_dir, path) = store_path();
    let store = ReplayStore::open_for_record(&path).unwrap();
    drop(store);
    let bytes = std::fs::read(&path).unwrap();
    let (found, len) = mongoose_durable::header::Header::decode(&path, &bytes).expect("a header");
    assert_eq!(
        (
            found.format.as_str(),
            found.version,
            found.owner.as_slice(),
            len
        ),
        ("mongoose-replay-store", 3, &[][..], HEADER_LEN)
    );
    assert_eq!(bytes.len(), HEADER_LEN);
}

// issue 38: a store of the earlier head (MGREPLAY, format version 2) is still read,
// complete, and continued as it is (its frames are the same bytes)
#[test]
fn a_store_of_the_earlier_head_is_read_and_continued() {
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    let counter = store.begin("counter", None).unwrap();
    store
        .append(counter, &indexed(1, Some(delivery(1, 10))))
        .unwrap();
    store.append(counter, &inline("two", None)).unwrap();
    store.close().unwrap();
    drop(store);
    let written = std::fs::read(&path).unwrap();
    let mut earlier = b"MGREPLAY".to_vec();
    earlier.extend_from_slice(&2u32.to_le_bytes());
    earlier.extend_from_slice(&written[HEADER_LEN..]);
    std::fs::write(&path, &earlier).unwrap();

    let recording = Recording::read(&path).unwrap();
    assert!(recording.complete(), "{:?}", recording.incomplete());
    assert_eq!(entries_of(&recording, "counter").len(), 2);

    let mut store = ReplayStore::open(&path).unwrap();
    let counter = store.stream("counter").expect("the stream continues");
    store.append(counter, &inline("three", None)).unwrap();
    store.close().unwrap();
    drop(store);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes[..12], earlier[..12], "the earlier head is kept");
    let recording = Recording::read(&path).unwrap();
    assert!(recording.complete(), "{:?}", recording.incomplete());
    assert_eq!(entries_of(&recording, "counter").len(), 3);
}
