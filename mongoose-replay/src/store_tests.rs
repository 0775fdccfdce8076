//! The store's regression tests (feed-delivery-guarantees §8a, "Delivery metadata is
//! recorded and replayed"; control-plane-contracts "Record and replay").

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mongoose_core::{Delivery, Epoch, PositionValue};
use tempfile::TempDir;

use crate::format::{
    decode_frame, header, push_frame, read_frame, FrameRead, WireDelivery, WireEntry, WireFrame,
    FORMAT_VERSION, HEADER_LEN,
};
use crate::store::tests_support::every_kind;
use crate::{Entry, Incomplete, Provenance, Recording, ReplayError, ReplayStore};

fn delivery(sequence: u64, position: u64) -> Delivery {
    Delivery::new(
        Arc::from("lines"),
        sequence,
        Epoch(0xE1),
        PositionValue::at(position),
        0,
    )
}

fn indexed(sequence: u64, delivery: Option<Delivery>) -> Entry {
    Entry::Indexed {
        feed: "lines".into(),
        sequence,
        route: "onLine".into(),
        delivery,
        clock: vec![sequence as i64 * 10],
    }
}

fn inline(text: &str, delivery: Option<Delivery>) -> Entry {
    Entry::Inline {
        payload: text.as_bytes().to_vec(),
        route: "onLine".into(),
        delivery,
        clock: vec![],
    }
}

fn provenance() -> Provenance {
    Provenance {
        processor_type: "Counter".into(),
        handler_type: "LineHandler".into(),
        ordinal: 1,
    }
}

fn store_path() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("run.replay");
    (dir, path)
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).expect("metadata").len()
}

fn truncate(path: &Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open to truncate")
        .set_len(len)
        .expect("truncate");
}

/// The kind of each whole frame in `bytes` with its offset, and its end.
fn frames(bytes: &[u8]) -> Vec<(usize, &'static str, usize)> {
    let mut found = Vec::new();
    let mut offset = HEADER_LEN;
    while let FrameRead::Frame { body, next } = read_frame(bytes, offset) {
        let kind = match decode_frame(body).expect("decodable") {
            WireFrame::Stream { .. } => "Stream",
            WireFrame::Delivery { .. } => "Delivery",
            WireFrame::Entry { .. } => "Entry",
            WireFrame::Close { .. } => "Close",
        };
        found.push((offset, kind, next));
        offset = next;
    }
    found
}

fn entries_of<'a>(recording: &'a Recording, key: &str) -> &'a [Entry] {
    recording.stream(key).expect("stream recorded").entries()
}

// feed-delivery-guarantees §8a, independent review R3: the delivery of each positioned
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

// feed-delivery-guarantees §8a: a delivery whose input was never written adds nothing
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

// feed-delivery-guarantees §8a: recordings of feeds without positions are unchanged: no
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

// feed-delivery-guarantees §8a, delta review of PR #98 finding 3: before, a reopened store
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

// feed-delivery-guarantees §8a, delta review of PR #98 finding 3: a store with an orphan
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
    // the reference: assert the fixture holds a delivery row before truncating it
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

    let recording = reopened.read().unwrap();
    assert!(recording.holds_recording());
    assert!(!recording.complete());
    assert_eq!(entries_of(&recording, "counter"), &[indexed(1, None)]);
}

// control-plane-contracts "Record and replay" (a reader from an older version refuses a
// newer file); feed-delivery-guarantees §8a (refuse rather than replay without metadata)
#[test]
fn a_reader_refuses_a_store_of_a_newer_format_version_and_says_what_to_do() {
    let (_dir, path) = store_path();
    let mut store = ReplayStore::open_for_record(&path).unwrap();
    let counter = store.begin("counter", None).unwrap();
    store.append(counter, &indexed(1, None)).unwrap();
    drop(store);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
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

// control-plane-contracts "Record and replay", ReplayConfig: RECORD refuses a store that
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

// feed-delivery-guarantees §8a: a torn last frame marks the recording incomplete
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

// feed-delivery-guarantees §8a: a torn input after its delivery frame adds neither
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

// feed-delivery-guarantees §8a: an incomplete store is read, never appended to
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

/// `bytes` with the head of format version 1 (which has no closing frame).
fn as_version_1(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    bytes
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

// feed-delivery-guarantees §8a: the delivery frame and its input are written in the same
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
