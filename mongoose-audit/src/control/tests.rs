//! Unit tests of the ring, the export and its verification.

use std::fs;
use std::io::Write;

use mongoose_core::EvidenceStatus;

use super::*;

fn audit_with(records: usize, capacity: usize) -> ControlAudit {
    let audit = ControlAudit::new(capacity, None);
    for request in 0..records as u64 {
        let input = audit.write(NewRecord::new(RecordType::Input, Some(request), "Add"));
        audit.write(
            NewRecord::new(RecordType::Reply, Some(request), "Reply")
                .cause(input)
                .outcome("APPLIED"),
        );
    }
    audit
}

// book: guarantees/control-plane.md: seq gap-free, completeness
#[test]
fn records_carry_gap_free_seqs_and_the_ring_marks_drops_incomplete() {
    let audit = audit_with(3, 4);
    let records = audit.records();
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, vec![3, 4, 5, 6]);
    let counts = audit.counts();
    assert_eq!((counts.total, counts.retained, counts.dropped), (6, 4, 2));
    assert!(!audit.is_complete());
    assert!(audit_with(2, 4).is_complete());
}

// book: guarantees/control-plane.md
#[test]
fn a_complete_export_verifies_complete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pricing.jsonl");
    audit_with(2, 100).export(&path).expect("exported");
    assert_eq!(verify(&path), Verification::Complete);
}

#[test]
fn an_export_of_a_ring_that_dropped_records_verifies_incomplete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pricing.jsonl");
    audit_with(5, 3).export(&path).expect("exported");
    assert_eq!(verify(&path), Verification::Incomplete);
}

#[test]
fn an_export_whose_bytes_changed_verifies_unknown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pricing.jsonl");
    audit_with(2, 100).export(&path).expect("exported");
    let mut text = fs::read_to_string(&path).expect("read");
    text = text.replacen("APPLIED", "REFUSED", 1);
    fs::write(&path, text).expect("tampered");
    assert_eq!(verify(&path), Verification::Unknown);
}

#[test]
fn an_export_without_a_manifest_or_with_a_malformed_one_verifies_unknown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pricing.jsonl");
    audit_with(2, 100).export(&path).expect("exported");
    fs::write(manifest_path(&path), b"{ not json").expect("broken");
    assert_eq!(verify(&path), Verification::Unknown);
    fs::remove_file(manifest_path(&path)).expect("removed");
    assert_eq!(verify(&path), Verification::Unknown);
}

#[test]
fn a_manifest_that_contradicts_its_counts_verifies_unknown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pricing.jsonl");
    audit_with(5, 3).export(&path).expect("exported");
    let manifest = manifest_path(&path);
    let mut body: Manifest =
        serde_json::from_slice(&fs::read(&manifest).expect("read")).expect("parsed");
    body.complete = true; // claims completeness despite drops
    fs::write(&manifest, serde_json::to_vec(&body).expect("json")).expect("written");
    assert_eq!(verify(&path), Verification::Unknown);
}

// book: guarantees/control-plane.md: "An export started again on the same path deletes the old sidecar first"
#[test]
fn a_re_export_that_fails_leaves_no_old_manifest_claiming_completeness() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pricing.jsonl");
    let audit = audit_with(2, 100);
    audit.export(&path).expect("exported");
    assert!(manifest_path(&path).exists());
    // the export file becomes a directory: the next export fails writing it
    fs::remove_file(&path).expect("removed");
    fs::create_dir(&path).expect("dir");
    audit
        .export(&path)
        .expect_err("cannot write over a directory");
    assert!(!manifest_path(&path).exists());
    assert_eq!(verify(&path), Verification::Unknown);
}

#[test]
fn reading_an_export_by_root_id_returns_only_that_requests_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pricing.jsonl");
    audit_with(3, 100).export(&path).expect("exported");
    let records = read_request(&path, Some(1)).expect("read");
    assert_eq!(records.len(), 2);
    assert!(records.iter().all(|r| r.root_id == Some(1)));
    assert_eq!(records[1].cause_seq, Some(records[0].seq));
}

fn serialized_bytes(audit: &ControlAudit) -> usize {
    audit
        .records()
        .iter()
        .map(|record| serde_json::to_string(record).map_or(0, |line| line.len()))
        .sum()
}

// issue 10, item 3: one 1.9 MB admin command argument pinned about 7 MB in the ring
// (the decision's command line, the failed effect's reason, the reply's reason), so
// repeated requests grew memory without bound
#[test]
fn giant_fields_are_truncated_so_repeated_requests_pin_a_bounded_number_of_bytes() {
    let audit = ControlAudit::new(0, None);
    let giant = "a".repeat(1_900_000);
    for request in 0..30 {
        let input = audit.write(NewRecord::new(RecordType::Input, Some(request), "Admin"));
        for _ in 0..3 {
            audit.write(
                NewRecord::new(RecordType::Decision, Some(request), "adminInvoke")
                    .cause(input)
                    .reason(format!("command: balance {giant}")),
            );
        }
    }
    let retained = serialized_bytes(&audit);
    assert!(
        retained <= DEFAULT_AUDIT_BYTES,
        "120 records of 1.9 MB each pin {retained} bytes"
    );
    let first = &audit.records()[1];
    let reason = first.reason.as_deref().unwrap_or_default();
    assert!(
        reason.len() < MAX_AUDIT_FIELD_BYTES + 64,
        "{}",
        reason.len()
    );
    assert!(
        reason.ends_with("…[truncated: 1900017 bytes]"),
        "the marker gives the full length: {} bytes",
        reason.len()
    );
    let counts = audit.counts();
    assert_eq!(counts.truncated, 90);
    assert!(counts.complete, "truncated records are kept, not dropped");
}

// issue 10, item 3: the ring's bytes are bounded, not only its records; what it
// drops for bytes is counted like what it drops for records
#[test]
fn the_ring_is_bounded_in_bytes_and_a_drop_for_bytes_makes_it_incomplete() {
    let audit = ControlAudit::with_limits(10_000, 64 * 1024, None);
    for request in 0..100 {
        audit.write(
            NewRecord::new(RecordType::Input, Some(request), "Admin").reason("x".repeat(3000)),
        );
    }
    let counts = audit.counts();
    assert!(counts.bytes <= 64 * 1024, "{counts:?}");
    assert!(counts.dropped > 0 && !counts.complete, "{counts:?}");
    assert_eq!(counts.total, counts.retained + counts.dropped, "{counts:?}");
    let seqs: Vec<u64> = audit.records().iter().map(|r| r.seq).collect();
    assert_eq!(seqs.last(), Some(&100), "the newest are kept");
    assert!(seqs.windows(2).all(|pair| pair[1] == pair[0] + 1));
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bank.jsonl");
    audit.export(&path).expect("exported");
    assert_eq!(verify(&path), Verification::Incomplete);
}

struct FailingMirror;
impl Write for FailingMirror {
    fn write(&mut self, _buf: &[u8]) -> std::io::Result<usize> {
        Err(std::io::Error::other("disk full"))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// book: guarantees/control-plane.md: evidence UNVERIFIED while a write failure is unacknowledged
#[test]
fn a_failed_mirror_write_degrades_evidence_until_acknowledged_and_keeps_the_audit_incomplete() {
    let audit = ControlAudit::new(100, Some(Box::new(FailingMirror)));
    audit.write(NewRecord::new(RecordType::Input, Some(1), "Add"));
    assert_eq!(audit.evidence(), EvidenceStatus::Unverified);
    assert!(audit
        .records()
        .iter()
        .any(|r| r.record == RecordType::Fallback && r.what == "SinkWriteFailed"));
    audit.acknowledge_failures();
    assert_eq!(audit.evidence(), EvidenceStatus::NotDegraded);
    assert!(!audit.is_complete());
}
