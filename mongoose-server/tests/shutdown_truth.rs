//! Shutdown truthfulness for services (book: guarantees/control-plane.md: phases,
//! StopResult, resuming an incomplete stop; "Failure containment": a quarantined
//! processor retains its instance and shutdown stays incomplete with dependent services
//! retained). Issue 9, item 9.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mongoose_control::{GroupState, Service, ServiceEvent};
use mongoose_core::{Processor, ProcessorError, SourceOutput, StartContext};
use mongoose_delivery::{Feed, Publisher};
use mongoose_server::config::ServerConfig;
use mongoose_server::{Server, StopResult};

/// Generous: the machine is shared and noisy; tests wait for conditions, not times.
const WAIT: Duration = Duration::from_secs(60);

fn config(toml: &str) -> ServerConfig {
    ServerConfig::parse(toml, std::path::Path::new(".")).expect("config")
}

fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Runs `shutdown` on a helper thread and fails the test if it never returns (the
/// guard is generous: this asserts that it returned, not how fast).
fn shutdown_returns(server: &Server) -> StopResult {
    let (sender, receiver) = mpsc::channel();
    let stopping = server.clone();
    std::thread::spawn(move || {
        let _ = sender.send(stopping.shutdown());
    });
    receiver
        .recv_timeout(WAIT)
        .expect("shutdown() returned: it must not block past its deadline")
}

/// A service that counts its stops; its stop fails, or waits on a gate first.
struct Counted {
    stops: AtomicU32,
    stops_finished: AtomicU32,
    fail_stop: bool,
    gate: Option<Mutex<mpsc::Receiver<()>>>,
}

impl Counted {
    fn new(fail_stop: bool) -> Arc<Counted> {
        Arc::new(Counted {
            stops: AtomicU32::new(0),
            stops_finished: AtomicU32::new(0),
            fail_stop,
            gate: None,
        })
    }

    /// Its stop blocks until the sender sends (or is dropped, as when a test fails).
    fn gated() -> (Arc<Counted>, mpsc::Sender<()>) {
        let (sender, receiver) = mpsc::channel();
        let service = Arc::new(Counted {
            stops: AtomicU32::new(0),
            stops_finished: AtomicU32::new(0),
            fail_stop: false,
            gate: Some(Mutex::new(receiver)),
        });
        (service, sender)
    }
}

impl Service for Counted {
    fn stop(&self) -> Result<(), ProcessorError> {
        self.stops.fetch_add(1, Ordering::SeqCst);
        if let Some(gate) = &self.gate {
            let _ = gate.lock().unwrap().recv();
        }
        self.stops_finished.fetch_add(1, Ordering::SeqCst);
        if self.fail_stop {
            return Err(ProcessorError::new("flush failed: the disk is full"));
        }
        Ok(())
    }
}

/// Takes every service it is given and keeps it; its item handler fails, which
/// quarantines it (it is not retry-safe) with the services still held.
struct Holder {
    held: Vec<Arc<dyn Service>>,
    given: Arc<AtomicU32>,
}

impl Holder {
    fn on_number(&mut self, _: &u64) -> Result<(), ProcessorError> {
        Err(ProcessorError::new("broken handler"))
    }

    fn on_service(&mut self, event: &ServiceEvent) -> Result<(), ProcessorError> {
        if let ServiceEvent::Registered { service, .. } = event {
            self.held.push(Arc::clone(service));
            self.given.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

impl Processor for Holder {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("numbers", Holder::on_number)?;
        context.services(Holder::on_service);
        Ok(())
    }
}

#[test]
fn a_resumed_shutdown_after_a_failed_service_stop_is_not_complete() {
    // book: guarantees/control-plane.md: a resumed stop "does not
    // call a service stop() that already failed again. Its side effects are unknown, so
    // it stays in servicesLeftRunning" (issue 9, item 9)
    let server = Server::builder(config("")).build().expect("built");
    server.start().expect("started");
    let journal = Counted::new(true);
    server
        .control()
        .register_service("journal", journal.clone())
        .expect("registered");

    let first = shutdown_returns(&server);
    assert!(!first.complete, "{first:?}");
    assert_eq!(first.services_left_running, vec!["journal".to_owned()]);
    assert_eq!(journal.stops.load(Ordering::SeqCst), 1);

    let resumed = shutdown_returns(&server);
    assert!(
        !resumed.complete,
        "a failed stop stays unconfirmed: {resumed:?}"
    );
    assert_eq!(resumed.services_left_running, vec!["journal".to_owned()]);
    assert_eq!(
        journal.stops.load(Ordering::SeqCst),
        1,
        "a failed stop() is never called again"
    );
    assert!(!server.await_stopped(Duration::ZERO));
}

/// A server whose group `group` hosts a [`Holder`] that was given the service `cache`.
fn server_with_a_holder(group: &str) -> (Server, Arc<Publisher<u64, u64>>, Arc<Counted>) {
    let numbers: Arc<Publisher<u64, u64>> = Feed::builder("numbers").queue_capacity(64).build();
    let given = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&given);
    let server = Server::builder(config(
        "shutdown_timeout_millis = 5000\nshutdown_drain_timeout_millis = 100\n",
    ))
    .feed(Arc::clone(&numbers))
    .processor(group, "holder", move || Holder {
        held: Vec::new(),
        given: seen,
    })
    .build()
    .expect("built");
    server.start().expect("started");
    let cache = Counted::new(false);
    server
        .control()
        .register_service("cache", cache.clone())
        .expect("registered");
    wait_until("the holder was given the service", || {
        given.load(Ordering::SeqCst) == 1
    });
    (server, numbers, cache)
}

#[test]
fn services_held_by_a_quarantined_processor_are_not_stopped() {
    // book: guarantees/control-plane.md: a quarantined processor's instance
    // is retained, "shutdown remains incomplete with dependent services retained";
    // "Shutdown" phase 5: services are stopped "only if every processor group closed"
    let (server, numbers, cache) = server_with_a_holder("pricing");
    numbers.publish(1).expect("published");
    wait_until("the holder is quarantined", || {
        server
            .group_statuses()
            .iter()
            .any(|status| !status.quarantined.is_empty())
    });

    let result = shutdown_returns(&server);
    assert_eq!(
        cache.stops.load(Ordering::SeqCst),
        0,
        "the quarantined holder may still use the service: {result:?}"
    );
    assert!(!result.complete, "{result:?}");
    assert_eq!(result.services_left_running, vec!["cache".to_owned()]);
    assert!(
        result
            .groups_running
            .contains(&"processor:pricing/holder".to_owned()),
        "the holder is named: {result:?}"
    );

    // resuming changes nothing: no restart or retry turns the retained instance into
    // a closed one
    let resumed = shutdown_returns(&server);
    assert!(!resumed.complete, "{resumed:?}");
    assert_eq!(resumed.services_left_running, vec!["cache".to_owned()]);
    assert_eq!(cache.stops.load(Ordering::SeqCst), 0);
}

#[test]
fn services_held_by_a_dead_groups_processor_are_not_stopped() {
    // book: guarantees/control-plane.md: a dead group fences every
    // processor, instances and names stay owned; so their services stay retained
    let (server, _numbers, cache) = server_with_a_holder("risk");
    let group = server.control().group("risk").expect("group");
    group.inject_control_fault();
    // the fault fires while the group decides its next request
    let _ = server
        .control()
        .add_processor("risk", "trigger", || Holder {
            held: Vec::new(),
            given: Arc::new(AtomicU32::new(0)),
        });
    wait_until("the group died", || group.state() == GroupState::Dead);

    let result = shutdown_returns(&server);
    assert_eq!(
        cache.stops.load(Ordering::SeqCst),
        0,
        "the dead group's holder may still use the service: {result:?}"
    );
    assert!(!result.complete, "{result:?}");
    assert_eq!(result.services_left_running, vec!["cache".to_owned()]);
    assert!(
        result
            .groups_running
            .contains(&"processor:risk/holder".to_owned()),
        "the holder is named: {result:?}"
    );
}

#[test]
fn a_hanging_service_stop_does_not_block_shutdown_past_its_deadline() {
    // book: guarantees/control-plane.md: each service is stopped "on a helper
    // thread"; "shutdown() returns by the deadline ... with a truthful StopResult"; a
    // resumed stop "re-joins helpers still running"
    let server = Server::builder(config(
        "shutdown_timeout_millis = 300\nshutdown_drain_timeout_millis = 50\n",
    ))
    .build()
    .expect("built");
    server.start().expect("started");
    let (archive, release) = Counted::gated();
    server
        .control()
        .register_service("archive", archive.clone())
        .expect("registered");

    let first = shutdown_returns(&server);
    assert!(!first.complete, "{first:?}");
    assert_eq!(first.services_left_running, vec!["archive".to_owned()]);
    assert_eq!(
        archive.stops_finished.load(Ordering::SeqCst),
        0,
        "the stop is still blocked"
    );

    release.send(()).expect("the stop is waiting on the gate");
    wait_until("the stop finished", || {
        archive.stops_finished.load(Ordering::SeqCst) == 1
    });
    // the helper may still be returning from stop(): resume until the stop is
    // confirmed (each attempt is bounded by its own deadline)
    let deadline = Instant::now() + WAIT;
    let mut resumed = shutdown_returns(&server);
    while !resumed.complete {
        assert_eq!(
            resumed.services_left_running,
            vec!["archive".to_owned()],
            "{resumed:?}"
        );
        assert!(
            Instant::now() < deadline,
            "the helper was never re-joined: {resumed:?}"
        );
        resumed = shutdown_returns(&server);
    }
    assert!(resumed.services_left_running.is_empty(), "{resumed:?}");
    assert_eq!(
        archive.stops.load(Ordering::SeqCst),
        1,
        "stop() ran once, on its helper"
    );
    assert!(server.await_stopped(Duration::ZERO));
}
