//! The outbox's `DURABLE` watermark after a power loss: it is rewritten in place
//! without a sync, so a torn one is a lagging value, never a reason to stop.

use std::fs;
use std::path::Path;

use mongoose_core::sink::OutputKey;
use mongoose_core::Epoch;
use mongoose_outbox::{Admission, AdmittedOutput, AdmittedPosition, Outbox, OutboxConfig};

fn admission(number: u64) -> Admission {
    Admission {
        state: number.to_le_bytes().to_vec(),
        positions: vec![AdmittedPosition {
            feed: "lines".into(),
            epoch: Epoch(1),
            lane: 0,
            position: number,
        }],
        outputs: vec![AdmittedOutput {
            sink: "out".into(),
            key: OutputKey::new("lines", Epoch(1), 0, number, 0, 1),
            payload: format!("output of {number}").into_bytes(),
        }],
    }
}

fn write_admissions(dir: &Path, count: u64) {
    let (mut outbox, _) = Outbox::open(OutboxConfig::new(dir)).expect("open");
    for number in 1..=count {
        outbox.admit(&admission(number)).expect("admit");
    }
    outbox.close().expect("close");
}

// storage.md gap 9: a DURABLE torn by a power loss (here a byte of its sequence changed,
// so it fails its checksum) was refused as damage and stopped the start. The segments
// are synced before it is written, so it can only lag them: it is taken as absent (an
// outbox written before watermarks), reported, and written again.
#[test]
fn a_torn_watermark_is_taken_as_absent_and_the_outbox_opens_whole() {
    let dir = tempfile::tempdir().expect("dir");
    write_admissions(dir.path(), 20);
    let path = dir.path().join("DURABLE");
    let mut bytes = fs::read(&path).expect("the watermark");
    assert_eq!(bytes.len(), 24);
    bytes[12] ^= 0x01;
    fs::write(&path, &bytes).expect("a torn watermark");

    let (outbox, recovery) = Outbox::open(OutboxConfig::new(dir.path()))
        .expect("a torn watermark lags, it is no damage");
    assert_eq!(recovery.watermark, None, "taken as absent");
    assert_eq!(recovery.last_seq, 20);
    let numbers: Vec<u64> = recovery
        .admissions
        .iter()
        .map(|(_, admission)| u64::from_le_bytes(admission.state[..8].try_into().expect("8")))
        .collect();
    assert_eq!(numbers, (1..=20).collect::<Vec<_>>(), "every record read");
    assert!(recovery.torn.is_none());
    outbox.close().expect("close");
    let (_, recovery) = Outbox::open(OutboxConfig::new(dir.path())).expect("open again");
    assert_eq!(recovery.watermark, Some(20), "written again whole");
}

// A watermark of another length, magic or version is not a torn rewrite: still refused.
#[test]
fn a_watermark_that_is_not_one_is_still_refused() {
    let dir = tempfile::tempdir().expect("dir");
    write_admissions(dir.path(), 3);
    let path = dir.path().join("DURABLE");
    fs::write(&path, b"not a watermark at all").expect("write");
    let refused = Outbox::open(OutboxConfig::new(dir.path()))
        .map(|_| ())
        .expect_err("refused");
    assert!(refused.to_string().contains("watermark"), "{refused}");
}
