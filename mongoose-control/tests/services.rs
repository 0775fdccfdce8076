//! Services: registration, versioned broadcasts, removal and retained ownership
//! (book: guarantees/control-plane.md).

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use common::*;
use mongoose_control::{
    ControlError, ControlPlane, GroupOptions, IdleStrategy, ReplyOutcome, Service,
    ServiceBroadcast, ServiceChange,
};
use mongoose_core::ProcessorError;

struct Cache {
    log: Log,
    stop_thread: parking_lot::Mutex<Option<String>>,
    starts: AtomicU32,
    stops: AtomicU32,
    on_start: Option<Box<dyn Fn() + Send + Sync>>,
}

impl Cache {
    fn new(log: &Log) -> Arc<Cache> {
        Arc::new(Cache {
            log: Arc::clone(log),
            starts: AtomicU32::new(0),
            stops: AtomicU32::new(0),
            on_start: None,
            stop_thread: parking_lot::Mutex::new(None),
        })
    }
}

impl Service for Cache {
    fn start(&self) -> Result<(), ProcessorError> {
        self.starts.fetch_add(1, Ordering::SeqCst);
        if let Some(hook) = &self.on_start {
            hook();
        }
        Ok(())
    }

    fn stop(&self) -> Result<(), ProcessorError> {
        self.stops.fetch_add(1, Ordering::SeqCst);
        *self.stop_thread.lock() = std::thread::current().name().map(str::to_owned);
        self.log.lock().push("cache:stop".to_owned());
        Ok(())
    }
}

fn add(plane: &ControlPlane, group: &str, name: &str, processor: Scripted) {
    let reply = plane
        .add_processor(group, name, move || processor)
        .reply
        .wait_for(WAIT)
        .expect("reply");
    assert!(reply.applied(), "{reply:?}");
}

/// Processor `name` in `group`, reading no feed, taking services and logging what it
/// is given into `log`.
fn add_service_user(plane: &ControlPlane, group: &str, name: &str, log: &Log) {
    add(
        plane,
        group,
        name,
        Scripted::new(name, log).no_feed().with_services(),
    );
}

/// Processor `a` in group `pricing` and `b` in group `risk`, both taking services.
fn add_two_service_users(plane: &ControlPlane, log: &Log) {
    add_service_user(plane, "pricing", "a", log);
    add_service_user(plane, "risk", "b", log);
}

// Services, registerService Guaranteed 1: running processors receive it on their own thread, once
#[test]
fn running_processors_receive_a_registered_service_once_on_their_own_agent_thread() {
    let (plane, _numbers, _) = plane_with_feed();
    let log = new_log();
    add_two_service_users(&plane, &log);
    let cache = Cache::new(&log);
    plane
        .register_service("cache", cache.clone())
        .expect("registered");
    // the void call waited for every group's reply
    assert_eq!(count(&log, "a:service:+cache:agent"), 1);
    assert_eq!(count(&log, "b:service:+cache:agent"), 1);
    assert_eq!(cache.starts.load(Ordering::SeqCst), 1);
}

// Services, registerService Guaranteed 2
#[test]
fn a_processor_added_later_is_given_the_registrys_services_when_it_is_built() {
    let (plane, _numbers, _) = plane_with_feed();
    let log = new_log();
    plane
        .register_service("cache", Cache::new(&log))
        .expect("registered");
    let seen = Arc::new(parking_lot::Mutex::new(None));
    let slot = Arc::clone(&seen);
    add(
        &plane,
        "pricing",
        "late",
        Scripted::new("late", &log)
            .no_feed()
            .with_services()
            .on_service(move |event| {
                *slot.lock() = Some(event.service_as::<Cache>().is_some());
                Ok(())
            }),
    );
    assert_eq!(count(&log, "late:service:+cache:agent"), 1);
    assert_eq!(
        *seen.lock(),
        Some(true),
        "the service downcasts to its type"
    );
}

// Services, "Versions and the service lock": an older broadcast changes nothing
#[test]
fn a_stale_service_broadcast_changes_nothing() {
    let (plane, _numbers, _) = plane_with_feed();
    let log = new_log();
    add_service_user(&plane, "pricing", "a", &log);
    let cache: Arc<dyn Service> = Cache::new(&log);
    plane
        .register_service("cache", Arc::clone(&cache))
        .expect("registered"); // version 1
    plane.remove_service("cache"); // version 2
    assert_eq!(count(&log, "a:service:-cache:agent"), 1);
    let group = plane.group("pricing").expect("group");
    let stale = plane
        .send_service_broadcast(
            &group,
            ServiceBroadcast {
                name: "cache".to_owned(),
                version: 1,
                change: ServiceChange::Registered(cache),
            },
        )
        .wait_for(WAIT)
        .expect("answered");
    assert_eq!(
        (stale.outcome, stale.reason.as_str()),
        (ReplyOutcome::Applied, "ignored: stale version 1")
    );
    assert_eq!(
        count(&log, "a:service:+cache:agent"),
        1,
        "not given the removed service again"
    );
}

// Services, removeService step 3: unbind before stop
#[test]
fn a_removed_service_is_withdrawn_from_every_processor_before_it_is_stopped() {
    let (plane, _numbers, _) = plane_with_feed();
    let log = new_log();
    add_two_service_users(&plane, &log);
    let cache = Cache::new(&log);
    plane
        .register_service("cache", cache.clone())
        .expect("registered");
    plane.remove_service("cache");
    let entries = log.lock().clone();
    let stop = entries
        .iter()
        .position(|e| e == "cache:stop")
        .expect("stopped");
    let a = entries
        .iter()
        .position(|e| e == "a:service:-cache:agent")
        .expect("a withdrew");
    let b = entries
        .iter()
        .position(|e| e == "b:service:-cache:agent")
        .expect("b withdrew");
    assert!(a < stop && b < stop, "{entries:?}");
    assert_eq!(cache.stops.load(Ordering::SeqCst), 1);
    assert!(plane.owned_services().is_empty());
}

// Services, "Retained ownership"; Not guaranteed: stopped only by shutdown
#[test]
fn a_service_whose_withdrawal_was_not_confirmed_stays_owned_until_shutdown() {
    let (plane, _numbers, _) = plane_with_feed();
    let log = new_log();
    // retry-safe: a failing service callback is reported and the processor keeps running
    add(
        &plane,
        "pricing",
        "clingy",
        Scripted::new("clingy", &log)
            .no_feed()
            .with_services()
            .retry_safe()
            .on_service(|event| match event {
                mongoose_control::ServiceEvent::Deregistered { .. } => {
                    Err(ProcessorError::new("still using it"))
                }
                _ => Ok(()),
            }),
    );
    let cache = Cache::new(&log);
    plane
        .register_service("cache", cache.clone())
        .expect("registered");
    plane.remove_service("cache");
    assert_eq!(
        cache.stops.load(Ordering::SeqCst),
        0,
        "never stopped while possibly held"
    );
    assert_eq!(plane.owned_services(), vec!["cache".to_owned()]);
    assert!(plane
        .group_status("pricing")
        .expect("status")
        .quarantined
        .is_empty());
    // a later service of the same name is unaffected by the retained one
    let successor = Cache::new(&log);
    plane
        .register_service("cache", successor.clone())
        .expect("a new registration");
    assert!(plane.close_groups(Instant::now() + WAIT).is_empty());
    assert!(plane.stop_services(Instant::now() + WAIT).is_empty());
    assert_eq!(
        cache.stops.load(Ordering::SeqCst),
        1,
        "stopped once, by shutdown"
    );
    assert_eq!(successor.stops.load(Ordering::SeqCst), 1);
}

// Services, "Retained ownership": a group that missed the broadcast did not confirm
#[test]
fn a_group_that_missed_the_withdrawal_because_its_mailbox_was_full_keeps_the_service_owned() {
    let (plane, numbers, _) = plane_with_feed();
    plane
        .create_group(
            "pricing",
            GroupOptions {
                mailbox_capacity: 1,
                idle: IdleStrategy::SleepingMillis(1),
                ..GroupOptions::default()
            },
        )
        .expect("group");
    let log = new_log();
    add_service_user(&plane, "pricing", "a", &log);
    let cache = Cache::new(&log);
    plane
        .register_service("cache", cache.clone())
        .expect("registered");
    let gate = block_group(&plane, &numbers, "pricing");
    plane.add_processor("pricing", "filler", || {
        Scripted::new("f", &new_log()).no_feed()
    });
    plane.remove_service("cache");
    gate.open();
    assert_eq!(cache.stops.load(Ordering::SeqCst), 0);
    assert_eq!(plane.owned_services(), vec!["cache".to_owned()]);
}

// Services, registerService Guaranteed 3: a removed service is never resurrected
#[test]
fn a_service_removed_before_its_registration_was_published_is_never_given_to_processors() {
    let (plane, _numbers, _) = plane_with_feed();
    let plane = Arc::new(plane);
    let log = new_log();
    add_service_user(&plane, "pricing", "a", &log);
    let remover = Arc::downgrade(&plane);
    let cache = Arc::new(Cache {
        log: Arc::clone(&log),
        starts: AtomicU32::new(0),
        stops: AtomicU32::new(0),
        stop_thread: parking_lot::Mutex::new(None),
        // removed between the reservation and the publication
        on_start: Some(Box::new(move || {
            if let Some(plane) = remover.upgrade() {
                plane.remove_service("cache");
            }
        })),
    });
    let error = plane
        .register_service("cache", cache.clone())
        .expect_err("overtaken by the removal");
    assert!(matches!(error, ControlError::ServiceRegistration { .. }));
    assert_eq!(count(&log, "a:service:+cache:agent"), 0);
    assert_eq!(
        cache.stops.load(Ordering::SeqCst),
        1,
        "its registering call stopped it"
    );
    assert!(plane.owned_services().is_empty());
}

// Services, registerService failure modes
#[test]
fn registering_a_name_in_use_or_while_stopping_fails_and_removing_while_stopping_is_ignored() {
    let (plane, _numbers, _) = plane_with_feed();
    let log = new_log();
    plane
        .register_service("cache", Cache::new(&log))
        .expect("registered");
    let in_use = plane.register_service("cache", Cache::new(&log));
    assert!(matches!(
        in_use,
        Err(ControlError::ServiceRegistration { .. })
    ));
    plane.begin_stopping();
    let stopping = plane.register_service("other", Cache::new(&log));
    assert!(matches!(stopping, Err(ControlError::ServerStopping)));
    plane.remove_service("cache");
    assert_eq!(
        plane.owned_services(),
        vec!["cache".to_owned()],
        "ignored: the stop stops it"
    );
}

// Services, registerService failure modes: the same instance being stopped by a removal
#[test]
fn an_instance_still_being_withdrawn_cannot_be_registered_again() {
    let (plane, numbers, _) = plane_with_feed();
    let log = new_log();
    add_service_user(&plane, "pricing", "a", &log);
    let cache: Arc<dyn Service> = Cache::new(&log);
    plane
        .register_service("cache", Arc::clone(&cache))
        .expect("registered");
    let gate = block_group(&plane, &numbers, "pricing");
    let plane = Arc::new(plane);
    let remover = Arc::clone(&plane);
    let removal = std::thread::spawn(move || remover.remove_service("cache"));
    // the withdrawal broadcast waits in the blocked group's mailbox
    assert!(wait_until(|| plane
        .group_status("pricing")
        .expect("status")
        .mailbox_depth
        == 1));
    let again = plane.register_service("cache2", Arc::clone(&cache));
    assert!(
        matches!(again, Err(ControlError::ServiceRegistration { .. })),
        "{again:?}"
    );
    gate.open();
    removal.join().expect("removed");
}

// Services, registerService failure modes: a throwing handler is reported, others still receive
#[test]
fn a_throwing_service_handler_is_reported_and_the_other_processors_still_receive_the_service() {
    let (plane, _numbers, _) = plane_with_feed();
    let log = new_log();
    add(
        &plane,
        "pricing",
        "thrower",
        Scripted::new("thrower", &log)
            .no_feed()
            .with_services()
            .retry_safe()
            .on_service(|_| Err(ProcessorError::new("no thanks"))),
    );
    add_service_user(&plane, "pricing", "fine", &log);
    plane
        .register_service("cache", Cache::new(&log))
        .expect("registered");
    assert_eq!(count(&log, "fine:service:+cache:agent"), 1);
    let status = plane.group_status("pricing").expect("status");
    assert!(
        status.running.iter().any(|p| p.name == "thrower"),
        "keeps running"
    );
}

// Services, removeService Guaranteed: "never stopped while a processor that was given it may still hold it"
#[test]
fn a_quarantined_processor_that_was_given_a_service_keeps_it_owned_on_removal() {
    let (plane, numbers, _) = plane_with_feed();
    let log = new_log();
    add(
        &plane,
        "pricing",
        "holder",
        Scripted::new("holder", &log)
            .with_services()
            .on_item(|_, _| Err(ProcessorError::new("broken"))),
    );
    let cache = Cache::new(&log);
    plane
        .register_service("cache", cache.clone())
        .expect("registered");
    assert_eq!(count(&log, "holder:service:+cache:agent"), 1);
    numbers.publish(1);
    assert!(wait_until(|| !plane
        .group_status("pricing")
        .expect("status")
        .quarantined
        .is_empty()));
    plane.remove_service("cache");
    assert_eq!(
        cache.stops.load(Ordering::SeqCst),
        0,
        "the quarantined holder may still use it"
    );
    assert_eq!(plane.owned_services(), vec!["cache".to_owned()]);
}

// Services, removeService step 3: "If the replies arrive after the wait, the stop runs then, on a reply-executor thread"
#[test]
fn a_removal_from_an_agent_thread_stops_the_service_on_a_reply_thread_once_every_group_confirmed() {
    let (plane, numbers, _) = plane_with_feed();
    let plane = Arc::new(plane);
    let log = new_log();
    add_service_user(&plane, "risk", "other", &log);
    let control = Arc::downgrade(&plane);
    add(
        &plane,
        "pricing",
        "remover",
        Scripted::new("remover", &log)
            .with_services()
            .on_item(move |_, _| {
                if let Some(plane) = control.upgrade() {
                    plane.remove_service("cache"); // on an agent thread: returns without waiting
                }
                Ok(())
            }),
    );
    let cache = Cache::new(&log);
    plane
        .register_service("cache", cache.clone())
        .expect("registered");
    numbers.publish(1);
    assert!(wait_until(|| cache.stops.load(Ordering::SeqCst) == 1));
    let thread = cache.stop_thread.lock().clone().expect("named thread");
    assert!(thread.starts_with("mongoose-control-replies-"), "{thread}");
    assert_eq!(count(&log, "remover:service:-cache:agent"), 1);
    assert_eq!(count(&log, "other:service:-cache:agent"), 1);
}

// Threading rules: "Waiting is also skipped ... when the target group has not started (it cannot answer yet)"
#[test]
fn service_changes_do_not_wait_for_a_group_that_has_not_started() {
    let plane = Arc::new(ControlPlane::new_unstarted(
        mongoose_control::ControlConfig {
            control_wait: WAIT * 20,
            ..config()
        },
        Arc::new(mongoose_control::memory::MemoryFeeds::default()),
    ));
    let log = new_log();
    let inner = Arc::clone(&log);
    plane.add_processor("pricing", "a", move || {
        Scripted::new("a", &inner).no_feed().with_services()
    });
    let cache = Cache::new(&log);
    let caller = Arc::clone(&plane);
    let service = cache.clone();
    let changes = std::thread::spawn(move || {
        caller
            .register_service("cache", service)
            .expect("registered");
        caller.remove_service("cache");
    });
    assert!(
        wait_until(|| changes.is_finished()),
        "returned without waiting for the unstarted group"
    );
    assert_eq!(cache.stops.load(Ordering::SeqCst), 0, "not confirmed yet");
    plane.start().expect("started");
    assert!(
        wait_until(|| cache.stops.load(Ordering::SeqCst) == 1),
        "stopped once the group confirmed"
    );
    // broadcasts apply in order once the group runs: given, then withdrawn before the stop
    assert_eq!(count(&log, "a:service:+cache:agent"), 1);
    assert_eq!(count(&log, "a:service:-cache:agent"), 1);
}

/// A service whose stop fails (or panics), counting its calls.
struct FailingStop {
    stops: AtomicU32,
    panics: bool,
}

impl Service for FailingStop {
    fn stop(&self) -> Result<(), ProcessorError> {
        self.stops.fetch_add(1, Ordering::SeqCst);
        if self.panics {
            panic!("the flush thread is gone");
        }
        Err(ProcessorError::new("flush failed"))
    }
}

// Shutdown, "Resuming an incomplete stop": a stop() that failed is not called again; its
// side effects are unknown, so the service stays owned and listed
#[test]
fn a_service_stop_that_failed_at_shutdown_is_never_called_again_and_stays_owned() {
    let (plane, _numbers, _) = plane_with_feed();
    let log = new_log();
    let failing = Arc::new(FailingStop {
        stops: AtomicU32::new(0),
        panics: false,
    });
    let panicking = Arc::new(FailingStop {
        stops: AtomicU32::new(0),
        panics: true,
    });
    let cache = Cache::new(&log);
    plane
        .register_service("failing", failing.clone())
        .expect("registered");
    plane
        .register_service("panicking", panicking.clone())
        .expect("registered");
    plane
        .register_service("cache", cache.clone())
        .expect("registered");
    plane.begin_stopping();
    assert!(plane.close_groups(Instant::now() + WAIT).is_empty());
    let unconfirmed = vec!["failing".to_owned(), "panicking".to_owned()];
    assert_eq!(plane.stop_services(Instant::now() + WAIT), unconfirmed);
    assert_eq!(plane.owned_services(), unconfirmed);
    // resumed: nothing is called again, and nothing is reported stopped that was not
    assert_eq!(plane.stop_services(Instant::now() + WAIT), unconfirmed);
    assert_eq!(plane.owned_services(), unconfirmed);
    assert_eq!(failing.stops.load(Ordering::SeqCst), 1);
    assert_eq!(panicking.stops.load(Ordering::SeqCst), 1);
    assert_eq!(cache.stops.load(Ordering::SeqCst), 1);
}

/// A service whose stop waits until the test lets it go (or drops the sender, as a
/// failing test does), and records the thread it ran on.
struct GatedStop {
    gate: parking_lot::Mutex<std::sync::mpsc::Receiver<()>>,
    stops: AtomicU32,
    thread: parking_lot::Mutex<Option<String>>,
}

impl Service for GatedStop {
    fn stop(&self) -> Result<(), ProcessorError> {
        self.stops.fetch_add(1, Ordering::SeqCst);
        *self.thread.lock() = std::thread::current().name().map(str::to_owned);
        let _ = self.gate.lock().recv();
        Ok(())
    }
}

// Shutdown, phase 5: each service is stopped "on a helper thread"; "shutdown() returns
// by the deadline"; a resumed stop "re-joins helpers still running"
#[test]
fn a_hanging_service_stop_at_shutdown_stays_unconfirmed_and_is_rejoined_later() {
    let (plane, _numbers, _) = plane_with_feed();
    let (release, gate) = std::sync::mpsc::channel();
    let slow = Arc::new(GatedStop {
        gate: parking_lot::Mutex::new(gate),
        stops: AtomicU32::new(0),
        thread: parking_lot::Mutex::new(None),
    });
    plane
        .register_service("slow", slow.clone())
        .expect("registered");
    plane.begin_stopping();
    assert!(plane.close_groups(Instant::now() + WAIT).is_empty());
    let plane = Arc::new(plane);
    let stopping = Arc::clone(&plane);
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let short = Instant::now() + std::time::Duration::from_millis(50);
        let _ = sender.send(stopping.stop_services(short));
    });
    let first = receiver
        .recv_timeout(WAIT)
        .expect("stop_services returned by its deadline");
    assert_eq!(first, vec!["slow".to_owned()]);
    assert_eq!(plane.owned_services(), vec!["slow".to_owned()]);
    release.send(()).expect("the stop waits on the gate");
    assert!(
        plane.stop_services(Instant::now() + WAIT).is_empty(),
        "the helper is re-joined and its stop succeeded"
    );
    assert!(plane.owned_services().is_empty());
    assert_eq!(slow.stops.load(Ordering::SeqCst), 1);
    let thread = slow.thread.lock().clone().expect("a named thread");
    assert_eq!(thread, "mongoose-service-stop-slow");
}

// Failure containment: a quarantined processor, and every processor of a dead group,
// is retained with the services it may hold
#[test]
fn quarantined_and_dead_groups_processors_are_named_as_retained() {
    let (plane, numbers, _) = plane_with_feed();
    let log = new_log();
    add(
        &plane,
        "pricing",
        "holder",
        Scripted::new("holder", &log)
            .with_services()
            .on_item(|_, _| Err(ProcessorError::new("broken"))),
    );
    add_service_user(&plane, "risk", "fenced", &log);
    assert!(plane.retained_processors().is_empty());
    numbers.publish(1);
    assert!(wait_until(|| !plane
        .group_status("pricing")
        .expect("status")
        .quarantined
        .is_empty()));
    let risk = plane.group("risk").expect("group");
    risk.inject_control_fault();
    // the fault fires while the group decides its next request
    let _ = plane.add_processor("risk", "trigger", || {
        Scripted::new("trigger", &new_log()).no_feed()
    });
    assert!(wait_until(
        || risk.state() == mongoose_control::GroupState::Dead
    ));
    plane.begin_stopping();
    assert!(plane.close_groups(Instant::now() + WAIT).is_empty());
    assert_eq!(
        plane.retained_processors(),
        vec![
            "processor:pricing/holder".to_owned(),
            "processor:risk/fenced".to_owned()
        ]
    );
}
