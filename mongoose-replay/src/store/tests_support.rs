//! Fixtures of the store's unit tests (`store_tests.rs`, `recording_tests.rs`): entries
//! of every kind, deliveries, a store path in a temporary folder, and what the tests
//! read back (frames, a stream's entries) or damage (a file cut to a length).

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mongoose_core::{Delivery, Epoch, PositionValue};
use tempfile::TempDir;

use crate::entry::{Entry, Provenance};
use crate::format::{decode_frame, read_frame, FrameRead, WireFrame, HEADER_LEN};
use crate::store::Recording;

/// One entry of every kind; the inputs carry `delivery`.
pub(crate) fn every_kind(delivery: Option<Delivery>) -> Vec<Entry> {
    vec![
        Entry::Indexed {
            feed: "prices".into(),
            sequence: 7,
            route: "onPrice".into(),
            delivery: delivery.clone(),
            clock: vec![1_000, 1_001],
        },
        Entry::Inline {
            payload: b"line a".to_vec(),
            route: "onLine".into(),
            delivery,
            clock: vec![-5],
        },
        Entry::TimerFired {
            schedule: 3,
            clock: vec![2_000],
        },
        Entry::AdminInvoked {
            command: "reset".into(),
            args: vec!["all".into(), "now".into()],
            clock: vec![],
        },
        Entry::ServiceChanged {
            service: "cache".into(),
            version: 4,
            delivered: true,
            clock: vec![3_000],
        },
        Entry::ControlCall {
            call: "stopService".into(),
            args: vec!["cache".into()],
            outcome: crate::ControlOutcome::Failed("no such service".into()),
        },
        Entry::ControlCall {
            call: "startService".into(),
            args: vec![],
            outcome: crate::ControlOutcome::Ok,
        },
        Entry::Dropped {
            feed: "prices".into(),
            sequence: 8,
        },
        Entry::Failed {
            reason: "handler panicked".into(),
        },
        Entry::Stopped { clock: vec![4_000] },
    ]
}

pub(crate) fn delivery(sequence: u64, position: u64) -> Delivery {
    Delivery::new(
        Arc::from("lines"),
        sequence,
        Epoch(0xE1),
        PositionValue::at(position),
        0,
    )
}

pub(crate) fn indexed(sequence: u64, delivery: Option<Delivery>) -> Entry {
    Entry::Indexed {
        feed: "lines".into(),
        sequence,
        route: "onLine".into(),
        delivery,
        clock: vec![sequence as i64 * 10],
    }
}

pub(crate) fn inline(text: &str, delivery: Option<Delivery>) -> Entry {
    Entry::Inline {
        payload: text.as_bytes().to_vec(),
        route: "onLine".into(),
        delivery,
        clock: vec![],
    }
}

pub(crate) fn provenance() -> Provenance {
    Provenance {
        processor_type: "Counter".into(),
        handler_type: "LineHandler".into(),
        ordinal: 1,
    }
}

pub(crate) fn store_path() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("run.replay");
    (dir, path)
}

pub(crate) fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).expect("metadata").len()
}

pub(crate) fn truncate(path: &Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open to truncate")
        .set_len(len)
        .expect("truncate");
}

/// The kind of each whole frame in `bytes` with its offset, and its end.
pub(crate) fn frames(bytes: &[u8]) -> Vec<(usize, &'static str, usize)> {
    let mut found = Vec::new();
    let mut offset = match crate::format::check_head(bytes) {
        Ok(crate::format::Head::Store { len, .. }) => len,
        _ => HEADER_LEN,
    };
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

pub(crate) fn entries_of<'a>(recording: &'a Recording, key: &str) -> &'a [Entry] {
    recording.stream(key).expect("stream recorded").entries()
}
