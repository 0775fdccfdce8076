//! The control audit of a group, group status, and a concurrency hammer
//! (book: guarantees/control-plane.md).

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use common::*;
use mongoose_audit::{read_request, verify, RecordType, Verification};
use mongoose_control::{GroupOptions, IdleStrategy, ReplyHandle, Service};
use mongoose_core::{EvidenceStatus, ProcessorError};

// Control audit: "Control-processor records for one request share its rootId"
#[test]
fn every_record_of_a_request_shares_its_root_id_and_the_export_returns_them_by_root_id() {
    let (plane, _numbers, _) = plane_with_feed();
    let added = plane.add_processor("pricing", "pricer", || Scripted::new("p", &new_log()));
    let reply = added.reply.wait_for(WAIT).expect("added");
    plane
        .stop_processor(added.handle.as_ref().expect("handle"))
        .wait_for(WAIT)
        .expect("stopped");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pricing.jsonl");
    let group = plane.group("pricing").expect("group");
    group.audit().export(&path).expect("exported");
    assert_eq!(verify(&path), Verification::Complete);
    let records = read_request(&path, reply.request_id).expect("read");
    let kinds: Vec<RecordType> = records.iter().map(|r| r.record).collect();
    assert_eq!(
        kinds,
        vec![
            RecordType::Input,
            RecordType::Decision,
            RecordType::EffectOutcome,
            RecordType::EffectOutcome,
            RecordType::Reply
        ]
    );
    let input = records[0].seq;
    assert!(records[1..].iter().all(|r| r.cause_seq == Some(input)));
    assert_eq!(
        records[2].op_id.as_deref(),
        Some(format!("{}.1", reply.request_id.expect("reached the group")).as_str()),
        "effects carry opId requestId.n"
    );
    assert_eq!(
        (records[2].what.as_str(), records[3].what.as_str()),
        ("Build", "Start")
    );
    assert_eq!(
        records[3].op_id.as_deref(),
        Some(format!("{}.2", reply.request_id.expect("reached the group")).as_str())
    );
    assert_eq!(records[4].outcome.as_deref(), Some("APPLIED"));
    // "Decision: rule, from and to states, effects (each as opId Effect(generation))";
    // "records caused by an effect carry causeOp"
    let decision = &records[1];
    assert_eq!(decision.what, "addStarting");
    assert_eq!(
        (decision.from.as_deref(), decision.to.as_deref()),
        (Some("ABSENT"), Some("RUNNING"))
    );
    let request = reply.request_id.expect("reached the group");
    let generation = reply.generation.expect("about one registration");
    assert_eq!(
        decision.effects,
        vec![
            format!("{request}.1 Build({generation})"),
            format!("{request}.2 Start({generation})")
        ],
        "the decision names the effects it requests, numbered as their outcomes"
    );
    assert_eq!(
        records[4].cause_op.as_deref(),
        Some(format!("{request}.2").as_str()),
        "the reply follows the last effect that ran"
    );
}

// Control audit, Limits: "When it drops records, isComplete() is false and the manifest says so"
#[test]
fn a_group_whose_audit_ring_dropped_records_reports_it_incomplete_and_exports_incomplete() {
    let (plane, _numbers, _) = plane_with_feed();
    plane
        .create_group(
            "pricing",
            GroupOptions {
                audit_capacity: 5,
                idle: IdleStrategy::SleepingMillis(1),
                ..GroupOptions::default()
            },
        )
        .expect("group");
    let group = plane.group("pricing").expect("group");
    assert!(group.status().audit.complete);
    for index in 0..3 {
        plane
            .add_processor("pricing", &format!("p{index}"), || {
                Scripted::new("p", &new_log()).no_feed()
            })
            .reply
            .wait_for(WAIT)
            .expect("added");
    }
    assert!(!group.audit().is_complete());
    assert!(!group.status().audit.complete);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pricing.jsonl");
    group.audit().export(&path).expect("exported");
    assert_eq!(verify(&path), Verification::Incomplete);
}

struct FailsOnce {
    failed: Arc<AtomicBool>,
}

impl Write for FailsOnce {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !self.failed.swap(true, Ordering::SeqCst) {
            return Err(std::io::Error::other("disk full"));
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// Replies and outcomes: "evidence is UNVERIFIED when the reply was made while the group's control audit had an unacknowledged write failure"
#[test]
fn replies_are_unverified_while_the_audit_has_an_unacknowledged_write_failure() {
    let (plane, _numbers, _) = plane_with_feed();
    plane
        .create_group(
            "pricing",
            GroupOptions {
                audit_mirror: Some(Box::new(FailsOnce {
                    failed: Arc::new(AtomicBool::new(false)),
                })),
                idle: IdleStrategy::SleepingMillis(1),
                ..GroupOptions::default()
            },
        )
        .expect("group");
    let degraded = plane
        .add_processor("pricing", "a", || Scripted::new("a", &new_log()).no_feed())
        .reply
        .wait_for(WAIT)
        .expect("answered");
    assert!(
        degraded.applied(),
        "a degraded group still applies requests"
    );
    assert_eq!(degraded.evidence, EvidenceStatus::Unverified);
    let group = plane.group("pricing").expect("group");
    group.audit().acknowledge_failures();
    let later = plane
        .add_processor("pricing", "b", || Scripted::new("b", &new_log()).no_feed())
        .reply
        .wait_for(WAIT)
        .expect("answered");
    assert_eq!(later.evidence, EvidenceStatus::NotDegraded);
    assert!(
        !group.audit().is_complete(),
        "the failure stays on the record"
    );
}

// Group status: running, quarantined with reasons, mailbox depth, audit completeness, as JSON
#[test]
fn group_status_serializes_to_json_with_running_and_quarantined_processors() {
    let (plane, numbers, _) = plane_with_feed();
    for (name, fails) in [("good", false), ("bad", true)] {
        plane
            .add_processor("pricing", name, move || {
                Scripted::new(name, &new_log()).on_item(move |_, _| {
                    if fails {
                        Err(ProcessorError::new("negative price"))
                    } else {
                        Ok(())
                    }
                })
            })
            .reply
            .wait_for(WAIT)
            .expect("added");
    }
    numbers.publish(1);
    assert!(wait_until(|| !plane
        .group_status("pricing")
        .expect("status")
        .quarantined
        .is_empty()));
    let json = serde_json::to_value(plane.group_status("pricing").expect("status")).expect("json");
    assert_eq!(json["group"], "pricing");
    assert_eq!(json["state"], "RUNNING");
    assert_eq!(json["running"][0]["name"], "good");
    assert_eq!(json["quarantined"][0]["name"], "bad");
    assert_eq!(json["quarantined"][0]["reason"], "negative price");
    assert_eq!(json["mailboxDepth"], 0);
    assert_eq!(json["audit"]["complete"], true);
}

/// A reply and how many times its callback ran.
type CountedReply = (ReplyHandle, Arc<AtomicU32>);

struct Noop;
impl Service for Noop {}

// Replies and outcomes, Guaranteed 1 and the audit's gap-free seq, under concurrent callers
#[test]
fn concurrent_adds_stops_and_service_changes_each_get_exactly_one_reply_and_the_audit_is_gap_free()
{
    let (plane, _numbers, _) = plane_with_feed();
    let plane = Arc::new(plane);
    for group in ["g0", "g1"] {
        plane
            .create_group(
                group,
                GroupOptions {
                    mailbox_capacity: 8,
                    idle: IdleStrategy::Yield,
                    audit_capacity: 100_000,
                    ..GroupOptions::default()
                },
            )
            .expect("group");
    }
    let handles: Arc<parking_lot::Mutex<Vec<CountedReply>>> = Arc::default();
    let workers: Vec<_> = (0..4)
        .map(|worker| {
            let plane = Arc::clone(&plane);
            let handles = Arc::clone(&handles);
            std::thread::spawn(move || {
                for round in 0..60 {
                    let group = if round % 2 == 0 { "g0" } else { "g1" };
                    let name = format!("w{worker}-{}", round % 5);
                    let added = plane.add_processor(group, &name, || {
                        Scripted::new("p", &new_log()).no_feed().with_services()
                    });
                    let mut mine = vec![added.reply.clone()];
                    if let Some(handle) = &added.handle {
                        mine.push(plane.stop_processor(handle));
                    }
                    if round % 10 == worker {
                        let service = format!("svc{worker}");
                        let _ = plane.register_service(&service, Arc::new(Noop));
                        plane.remove_service(&service);
                    }
                    if round % 7 == 0 {
                        let _ = plane.stop_processor_by_name(group, &name);
                    }
                    let mut all = handles.lock();
                    for reply in mine {
                        let calls = Arc::new(AtomicU32::new(0));
                        let counter = Arc::clone(&calls);
                        reply.on_reply(move |_| {
                            counter.fetch_add(1, Ordering::SeqCst);
                        });
                        all.push((reply, calls));
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("worker ran");
    }
    let handles = handles.lock();
    for (reply, calls) in handles.iter() {
        reply.wait_for(WAIT).expect("every request answered");
        assert!(wait_until(|| calls.load(Ordering::SeqCst) >= 1));
        assert_eq!(calls.load(Ordering::SeqCst), 1, "exactly one reply");
    }
    assert!(plane.close_groups(Instant::now() + WAIT).is_empty());
    for group in ["g0", "g1"] {
        let records = plane.group(group).expect("group").audit().records();
        for (index, record) in records.iter().enumerate() {
            assert_eq!(record.seq, index as u64 + 1, "gap-free seq in {group}");
        }
        let mut inputs: HashMap<Option<u64>, usize> = HashMap::new();
        let mut replies: HashMap<Option<u64>, usize> = HashMap::new();
        for record in &records {
            match record.record {
                RecordType::Input => *inputs.entry(record.request_id).or_default() += 1,
                RecordType::Reply => *replies.entry(record.request_id).or_default() += 1,
                _ => {}
            }
        }
        assert_eq!(
            inputs, replies,
            "every input of {group} has exactly one reply record"
        );
        assert!(inputs.values().all(|n| *n == 1));
    }
}

// issue 12 item 6: ids are `Option<u64>` in memory and `-1` on the wire, so an audit
// exported before the change (tests/fixtures/audit-v1.jsonl, written by the i64 code:
// a service broadcast with generation -1, a quarantine Fallback with request_id -1)
// still verifies, reads, and writes back byte for byte.
#[test]
fn an_audit_exported_with_minus_one_ids_still_verifies_and_reads_back_byte_for_byte() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audit-v1.jsonl");
    assert_eq!(verify(&path), Verification::Complete);
    let text = std::fs::read_to_string(&path).expect("fixture");
    for line in text.lines() {
        let record: mongoose_audit::AuditRecord = serde_json::from_str(line).expect("reads");
        assert_eq!(serde_json::to_string(&record).expect("writes"), line);
    }
    let service = read_request(&path, Some(4)).expect("read");
    assert_eq!(service.len(), 4);
    assert!(service.iter().all(|r| r.generation.is_none()));
    assert_eq!(
        service[1].effects,
        vec!["4.1 DeliverService(-1)".to_owned()]
    );
    let fallbacks = read_request(&path, None).expect("read");
    assert_eq!(fallbacks.len(), 1);
    assert_eq!(fallbacks[0].what, "ProcessorQuarantined");
    assert_eq!(
        (fallbacks[0].request_id, fallbacks[0].generation),
        (None, Some(2))
    );
}

#[test]
fn missing_ids_are_minus_one_on_the_wire_and_minus_one_reads_back_as_none() {
    let (plane, _numbers, _) = plane_with_feed();
    let added = plane.add_processor("pricing", "pricer", || Scripted::new("p", &new_log()));
    let mut reply = added.reply.wait_for(WAIT).expect("added");
    assert!(reply.request_id.is_some() && reply.generation.is_some());
    for (request_id, generation, wire) in [
        (None, None, (-1, -1)),
        (Some(7), None, (7, -1)),
        (None, Some(3), (-1, 3)),
        (Some(0), Some(u64::from(u32::MAX)), (0, i64::from(u32::MAX))),
    ] {
        reply.request_id = request_id;
        reply.generation = generation;
        let json: serde_json::Value = serde_json::to_value(&reply).expect("writes");
        assert_eq!(
            (json["request_id"].as_i64(), json["generation"].as_i64()),
            (Some(wire.0), Some(wire.1))
        );
        let back: mongoose_control::ControlReply = serde_json::from_value(json).expect("reads");
        assert_eq!(back, reply);
    }
    let mut json = serde_json::to_value(&reply).expect("writes");
    json["request_id"] = serde_json::json!(-2);
    let refused =
        serde_json::from_value::<mongoose_control::ControlReply>(json).expect_err("-2 is no id");
    assert!(refused.to_string().contains("only -1"), "{refused}");
}

// storage.md gap 11: an export the API reported is durable. Every crash point of the
// export's file operations (cut after each, the next write torn) leaves an export that
// verifies COMPLETE with the exported bytes, or UNKNOWN (never a COMPLETE of other
// bytes); once the export returned, every crash leaves it COMPLETE.
#[test]
fn an_export_the_api_reported_survives_a_power_loss_at_every_crash_point() {
    use mongoose_durable::crash::{crash_states, RecordingDisk};
    let (plane, _numbers, _) = plane_with_feed();
    let added = plane.add_processor("pricing", "pricer", || Scripted::new("p", &new_log()));
    added.reply.wait_for(WAIT).expect("added");
    let group = plane.group("pricing").expect("group");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pricing.control-audit.jsonl");
    let mut disk = RecordingDisk::default();
    group.audit().export_on(&mut disk, &path).expect("recorded");
    let operations = disk.operations();
    group.audit().export(&path).expect("exported");
    assert_eq!(verify(&path), Verification::Complete);
    let exported = std::fs::read(&path).expect("read");
    let mut reported_lost = Vec::new();
    for state in crash_states(&std::collections::BTreeMap::new(), &operations) {
        state.materialise(dir.path()).expect("materialise");
        let verification = verify(&path);
        if verification == Verification::Complete {
            assert_eq!(std::fs::read(&path).expect("read"), exported, "{state:?}");
        } else {
            assert_eq!(verification, Verification::Unknown, "{state:?}");
            if state.after == operations.len() {
                reported_lost.push(state.how.clone());
            }
        }
    }
    assert!(
        reported_lost.is_empty(),
        "an export the API reported is lost when {reported_lost:?} (after its {} operations)",
        operations.len()
    );
}
