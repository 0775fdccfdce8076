//! Audit capture in the control plane (book: guarantees/control-plane.md, "Open
//! and resource limits", "Generated processor failure containment"): the open on an
//! I/O helper thread, the install between event cycles, the open timeout, the limits,
//! start/stop no-ops, names across groups, and a quarantined processor's capture.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{new_log, plane_with_feed, wait_until, Scripted, WAIT};
use mongoose_audit::capture::{
    CaptureFailure, CaptureIdentity, CaptureRecord, CaptureResources, CaptureSettings,
    CaptureWriter,
};
use mongoose_control::{ControlError, ControlPlane, ReplyOutcome};
use mongoose_core::{audit, FailureKind};
use parking_lot::{Condvar, Mutex};

/// What the test storage saw.
#[derive(Default)]
struct Seen {
    /// The thread each open ran on.
    open_threads: Vec<String>,
    /// Records written, by capture id.
    records: Vec<(String, Vec<u8>)>,
    /// Capture ids closed.
    closed: Vec<String>,
}

/// Test storage: an open may wait for a gate; writers keep records in memory.
#[derive(Default)]
struct TestResources {
    seen: Arc<Mutex<Seen>>,
    /// While true, opens wait.
    gate: Arc<(Mutex<bool>, Condvar)>,
    opens_begun: AtomicUsize,
}

impl TestResources {
    fn gated() -> Arc<Self> {
        let resources = TestResources::default();
        *resources.gate.0.lock() = true;
        Arc::new(resources)
    }

    fn open_gate(&self) {
        *self.gate.0.lock() = false;
        self.gate.1.notify_all();
    }

    fn records_of(&self, id: &str) -> Vec<CaptureRecord> {
        self.seen
            .lock()
            .records
            .iter()
            .filter(|(of, _)| of == id)
            .map(|(_, bytes)| CaptureRecord::decode(bytes).expect("a capture record"))
            .collect()
    }

    fn closed(&self, id: &str) -> bool {
        self.seen.lock().closed.iter().any(|closed| closed == id)
    }
}

struct TestWriter {
    id: String,
    seen: Arc<Mutex<Seen>>,
}

impl CaptureWriter for TestWriter {
    fn write(&mut self, record: &[u8]) -> Result<(), CaptureFailure> {
        self.seen
            .lock()
            .records
            .push((self.id.clone(), record.to_vec()));
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<(), CaptureFailure> {
        self.seen.lock().closed.push(self.id.clone());
        Ok(())
    }
}

impl CaptureResources for TestResources {
    fn open(
        &self,
        identity: &CaptureIdentity,
        _dir: &std::path::Path,
    ) -> Result<Box<dyn CaptureWriter>, CaptureFailure> {
        self.opens_begun.fetch_add(1, Ordering::SeqCst);
        let thread = std::thread::current().name().unwrap_or("").to_owned();
        self.seen.lock().open_threads.push(thread);
        let mut closed = self.gate.0.lock();
        while *closed {
            self.gate.1.wait(&mut closed);
        }
        Ok(Box::new(TestWriter {
            id: identity.capture_id.clone(),
            seen: Arc::clone(&self.seen),
        }))
    }
}

fn enable(
    plane: &ControlPlane,
    root: &std::path::Path,
    resources: &Arc<TestResources>,
    tune: impl FnOnce(&mut CaptureSettings),
) {
    let mut settings = CaptureSettings::new(root, Arc::clone(resources) as Arc<_>);
    tune(&mut settings);
    plane.enable_capture(settings);
}

/// A processor that writes an audit record `item:<n>` for each item (and fails on 0).
fn recording(name: &str, log: &common::Log) -> Scripted {
    Scripted::new(name, log).on_item(|_, item| {
        audit::record(format!("item:{item}").as_bytes());
        if item == 0 {
            return Err("a zero item".into());
        }
        Ok(())
    })
}

fn add(plane: &ControlPlane, group: &str, processor: Scripted) {
    let name = processor.name.clone();
    let added = plane.add_processor(group, &name, move || processor);
    let reply = added.reply.wait_for(WAIT).expect("add reply");
    assert!(reply.applied(), "{reply:?}");
}

fn capture_id(plane: &ControlPlane, selector: &str) -> String {
    plane
        .capture_statuses()
        .into_iter()
        .rev()
        .find(|status| status.selector == selector)
        .map(|status| status.id)
        .expect("a session of the selector")
}

// book: guarantees/control-plane.md: start on a recording processor is APPLIED
// "already recording"; stopping a processor that is not recording is a no-op
#[test]
fn start_twice_is_already_recording_and_stop_when_not_recording_is_a_noop() {
    let dir = tempfile::tempdir().expect("dir");
    let (plane, numbers, _feeds) = plane_with_feed();
    let resources = Arc::new(TestResources::default());
    enable(&plane, dir.path(), &resources, |_| {});
    let log = new_log();
    add(&plane, "pricing", recording("pricer", &log));

    let stopped = plane.stop_capture_wait("pricer").expect("stop reply");
    assert_eq!(
        (stopped.outcome, stopped.reason.as_str()),
        (ReplyOutcome::Applied, "not recording")
    );
    let started = plane.start_capture_wait("pricer").expect("start reply");
    assert_eq!(
        (started.outcome, started.reason.as_str()),
        (ReplyOutcome::Applied, "recording")
    );
    let again = plane
        .start_capture_wait("pricing/pricer")
        .expect("start reply");
    assert_eq!(
        (again.outcome, again.reason.as_str()),
        (ReplyOutcome::Applied, "already recording")
    );
    assert_eq!(resources.opens_begun.load(Ordering::SeqCst), 1, "one open");
    let id = capture_id(&plane, "pricing/pricer");
    numbers.publish(5);
    assert!(wait_until(|| resources.records_of(&id).len() == 1));
    assert_eq!(
        resources.records_of(&id)[0],
        CaptureRecord::Record {
            at_micros: match &resources.records_of(&id)[0] {
                CaptureRecord::Record { at_micros, .. } => *at_micros,
                other => panic!("{other:?}"),
            },
            bytes: b"item:5".to_vec()
        }
    );

    let stopped = plane.stop_capture_wait("pricer").expect("stop reply");
    assert_eq!(
        (stopped.outcome, stopped.reason.as_str()),
        (ReplyOutcome::Applied, "stopped recording")
    );
    assert!(
        wait_until(|| resources.closed(&id)),
        "closed after the stop"
    );
    let again = plane.stop_capture_wait("pricer").expect("stop reply");
    assert_eq!(
        (again.outcome, again.reason.as_str()),
        (ReplyOutcome::Applied, "not recording")
    );
    // nothing more is recorded
    numbers.publish(6);
    assert!(wait_until(|| common::count(&log, "pricer:6") == 1));
    assert_eq!(resources.records_of(&id).len(), 1);
    let status = plane.capture_statuses();
    assert_eq!(status.len(), 1, "{status:?}");
    assert!(!status[0].recording);
    assert_eq!(status[0].records_written, 1);
}

// book: guarantees/control-plane.md: a name
// admitted in several groups is ambiguous; the error names the groups
#[test]
fn an_ambiguous_processor_name_is_refused_naming_the_groups() {
    let dir = tempfile::tempdir().expect("dir");
    let (plane, _numbers, _feeds) = plane_with_feed();
    let resources = Arc::new(TestResources::default());
    enable(&plane, dir.path(), &resources, |_| {});
    let log = new_log();
    add(&plane, "west", recording("pricer", &log));
    add(&plane, "east", recording("pricer", &log));

    let error = plane.start_capture("pricer").expect_err("ambiguous");
    assert!(
        matches!(&error, ControlError::AmbiguousProcessor { groups, .. } if groups == &["east", "west"]),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("east, west") && message.contains("GROUP/NAME"),
        "{message}"
    );
    assert!(plane.stop_capture("pricer").is_err(), "stop too");
    let unknown = plane.start_capture("nobody").expect_err("unknown");
    assert!(
        unknown.to_string().contains("no processor 'nobody'"),
        "{unknown}"
    );
    let reply = plane.start_capture_wait("east/pricer").expect("reply");
    assert!(reply.applied(), "{reply:?}");
    let status = plane.capture_statuses();
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].selector, "east/pricer");
    assert_eq!(resources.opens_begun.load(Ordering::SeqCst), 1);
}

// book: guarantees/control-plane.md: the open runs on an I/O helper thread,
// never on the processor's thread; a late open is closed, never installed
#[test]
fn the_open_runs_off_the_processor_thread_and_a_slow_open_times_out_without_installing() {
    let dir = tempfile::tempdir().expect("dir");
    let (plane, numbers, _feeds) = plane_with_feed();
    let resources = TestResources::gated();
    enable(&plane, dir.path(), &resources, |settings| {
        settings.open_timeout = Duration::from_millis(300);
    });
    let log = new_log();
    add(&plane, "pricing", recording("pricer", &log));

    let reply = plane.start_capture("pricer").expect("sent");
    assert!(wait_until(
        || resources.opens_begun.load(Ordering::SeqCst) == 1
    ));
    // the open blocks on its gate; the processor keeps processing meanwhile
    for item in 1..=3 {
        numbers.publish(item);
    }
    assert!(
        wait_until(|| common::count(&log, "pricer:3") == 1),
        "the processor went on while its capture opened: {:?}",
        log.lock()
    );
    let answer = reply.wait_for(WAIT).expect("reply");
    assert_eq!(answer.outcome, ReplyOutcome::Failed, "{answer:?}");
    assert!(
        answer.reason.starts_with("open timed out"),
        "{}",
        answer.reason
    );
    let thread = resources.seen.lock().open_threads[0].clone();
    assert!(
        thread.starts_with("mongoose-capture-open"),
        "the open ran on {thread}"
    );
    let id = capture_id(&plane, "pricing/pricer");
    // the open completes late: its writer is closed, never installed
    resources.open_gate();
    assert!(
        wait_until(|| resources.closed(&id)),
        "the late writer is closed"
    );
    numbers.publish(4);
    assert!(wait_until(|| common::count(&log, "pricer:4") == 1));
    assert!(
        resources.records_of(&id).is_empty(),
        "nothing was recorded: {:?}",
        resources.records_of(&id)
    );
    let status = plane.capture_statuses();
    assert!(!status[0].recording, "{status:?}");
    assert_eq!(status[0].error.as_deref(), Some("open timed out"));
    // its slot came back once closed
    let group = plane.group("pricing").expect("group");
    assert!(wait_until(|| group.capture_resources_held().0 == 0));
}

// book: guarantees/control-plane.md: existing capture
// is detached without calling the failed processor; new installation is refused
#[test]
fn a_quarantined_processors_capture_is_detached_without_calling_it() {
    let dir = tempfile::tempdir().expect("dir");
    let (plane, numbers, _feeds) = plane_with_feed();
    let resources = Arc::new(TestResources::default());
    enable(&plane, dir.path(), &resources, |_| {});
    let log = new_log();
    add(&plane, "pricing", recording("pricer", &log));
    let started = plane.start_capture_wait("pricer").expect("reply");
    assert!(started.applied(), "{started:?}");
    let id = capture_id(&plane, "pricing/pricer");
    numbers.publish(1);
    numbers.publish(0); // fails: quarantined
    let group = plane.group("pricing").expect("group");
    assert!(wait_until(|| !group.status().quarantined.is_empty()));
    assert!(wait_until(|| resources.closed(&id)), "detached and closed");
    let calls_after_quarantine = log.lock().len();
    numbers.publish(2);
    let status = plane.capture_statuses();
    assert!(!status[0].recording, "{status:?}");
    // the records before the failure are kept, the failing call's own record too
    let kept: Vec<Vec<u8>> = resources
        .records_of(&id)
        .into_iter()
        .map(|record| match record {
            CaptureRecord::Record { bytes, .. } => bytes,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(kept, [b"item:1".to_vec(), b"item:0".to_vec()]);
    // never called again: no item, no stop
    assert_eq!(common::count(&log, "pricer:stop"), 0);
    let again = plane.start_capture_wait("pricer").expect("reply");
    assert_eq!(again.kind, FailureKind::Quarantined, "{again:?}");
    let stopped = plane.stop_capture_wait("pricer").expect("reply");
    assert_eq!(stopped.reason, "not recording");
    assert_eq!(log.lock().len(), calls_after_quarantine, "{:?}", log.lock());
    assert!(wait_until(|| group.capture_resources_held().0 == 0));
}

// book: guarantees/control-plane.md: past the open limit a start is
// FAILED "unresolved capture open limit reached"; past the resource limit, with its
// reason too
#[test]
fn the_open_limit_refuses_with_its_reason() {
    let dir = tempfile::tempdir().expect("dir");
    let (plane, _numbers, _feeds) = plane_with_feed();
    let resources = TestResources::gated();
    enable(&plane, dir.path(), &resources, |settings| {
        settings.open_limit = 2;
    });
    let log = new_log();
    for name in ["a", "b", "c"] {
        add(&plane, "pricing", recording(name, &log));
    }
    let first = plane.start_capture("a").expect("sent");
    let second = plane.start_capture("b").expect("sent");
    assert!(wait_until(
        || resources.opens_begun.load(Ordering::SeqCst) == 2
    ));
    let third = plane.start_capture_wait("c").expect("reply");
    assert_eq!(third.outcome, ReplyOutcome::Failed, "{third:?}");
    assert!(
        third
            .reason
            .starts_with("unresolved capture open limit reached: 2 opens in flight"),
        "{}",
        third.reason
    );
    resources.open_gate();
    assert!(first.wait_for(WAIT).expect("reply").applied());
    assert!(second.wait_for(WAIT).expect("reply").applied());
    // the resource limit counts installed captures too
    enable(&plane, dir.path(), &resources, |settings| {
        settings.resource_limit = 2;
    });
    let refused = plane.start_capture_wait("c").expect("reply");
    assert_eq!(refused.outcome, ReplyOutcome::Failed, "{refused:?}");
    assert!(
        refused
            .reason
            .starts_with("capture resource limit reached: 2 capture resources held"),
        "{}",
        refused.reason
    );
    assert!(plane.stop_capture_wait("a").expect("reply").applied());
    let group = plane.group("pricing").expect("group");
    assert!(wait_until(|| group.capture_resources_held().0 == 1));
    let now = plane.start_capture_wait("c").expect("reply");
    assert_eq!(now.reason, "recording", "{now:?}");
}

// book: guarantees/control-plane.md: the request is bound to the processor
// admitted under the name when it is sent; a late open never installs on a
// replacement processor, it is closed instead
#[test]
fn a_late_open_never_installs_on_a_replacement_processor() {
    let dir = tempfile::tempdir().expect("dir");
    let (plane, numbers, _feeds) = plane_with_feed();
    let resources = TestResources::gated();
    enable(&plane, dir.path(), &resources, |_| {});
    let log = new_log();
    add(&plane, "pricing", recording("pricer", &log));
    let first = plane
        .processor_handle("pricing", "pricer")
        .expect("admitted");

    let reply = plane.start_capture("pricer").expect("sent");
    assert!(wait_until(
        || resources.opens_begun.load(Ordering::SeqCst) == 1
    ));
    let stopped = plane.stop_processor(&first).wait_for(WAIT).expect("reply");
    assert!(stopped.applied(), "{stopped:?}");
    let answer = reply.wait_for(WAIT).expect("reply");
    assert_eq!(answer.outcome, ReplyOutcome::Failed, "{answer:?}");
    assert!(answer.reason.contains("cancelled"), "{}", answer.reason);
    add(&plane, "pricing", recording("pricer", &log));
    let id = capture_id(&plane, "pricing/pricer");

    resources.open_gate();
    assert!(
        wait_until(|| resources.closed(&id)),
        "the late writer is closed"
    );
    numbers.publish(7);
    assert!(wait_until(|| common::count(&log, "pricer:7") == 1));
    assert!(resources.records_of(&id).is_empty(), "never installed");
    let status = plane.capture_statuses();
    assert_eq!(status.len(), 1, "{status:?}");
    assert!(!status[0].recording);
    // the replacement starts its own session
    let own = plane.start_capture_wait("pricer").expect("reply");
    assert_eq!(own.reason, "recording", "{own:?}");
    assert_ne!(own.generation, Some(first.generation()));
}
