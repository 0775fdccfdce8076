//! The ordered shutdown with a source that stops late (book:
//! guarantees/commit-after-processing.md, "A clean stop") and delivery completion
//! on a booted server (book: guarantees/completion-hooks.md).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use mongoose_core::{
    AnyCommitter, CompletionKey, CoreError, Delivery, DeliveryContext, Epoch, EventSource,
    Processor, ProcessorError, SourceCommitter, SourceOutput, SourceStart, SourceState,
    StartContext, TryPublish, WorkDone,
};
use mongoose_delivery::{Feed, Publisher};
use mongoose_server::config::ServerConfig;
use mongoose_server::Server;

#[derive(Default)]
struct Watch {
    stopping: AtomicBool,
    source_thread: Mutex<Option<ThreadId>>,
    commits_elsewhere_while_stopping: AtomicU64,
    committed: AtomicU64,
}

struct Committer {
    watch: Arc<Watch>,
    pending: u64,
}

impl SourceCommitter<u64> for Committer {
    fn acknowledged(&mut self, _: u64, _: Epoch, position: u64) {
        self.pending = position;
    }
    fn commit(&mut self) -> Result<(), CoreError> {
        let on_source =
            *self.watch.source_thread.lock().unwrap() == Some(std::thread::current().id());
        if self.watch.stopping.load(Ordering::Acquire) && !on_source {
            self.watch
                .commits_elsewhere_while_stopping
                .fetch_add(1, Ordering::AcqRel);
        }
        self.watch
            .committed
            .fetch_max(self.pending, Ordering::AcqRel);
        Ok(())
    }
    fn commits_after_stop(&self) -> bool {
        true
    }
}

/// Publishes 1..=items at positions 1..=items; its stop takes `stop_takes`.
struct SlowStop {
    output: Arc<Publisher<u64, u64>>,
    next: u64,
    items: u64,
    stop_takes: Duration,
    watch: Arc<Watch>,
}

impl EventSource for SlowStop {
    fn name(&self) -> &str {
        "numbers"
    }
    fn start(&mut self) -> Result<SourceStart, CoreError> {
        *self.watch.source_thread.lock().unwrap() = Some(std::thread::current().id());
        Ok(SourceStart {
            epoch: Epoch::NONE,
            pause_by_default: true,
            committer: Some(AnyCommitter::new(Committer {
                watch: Arc::clone(&self.watch),
                pending: 0,
            })),
        })
    }
    // the source driver polls the acknowledgements around each cycle and its stop
    fn do_work(&mut self) -> Result<WorkDone, CoreError> {
        if self.next > self.items {
            self.output.report_state(SourceState::CaughtUp, None);
            return Ok(WorkDone(0));
        }
        match self.output.try_publish(self.next, self.next) {
            TryPublish::Published => {
                self.next += 1;
                Ok(WorkDone(1))
            }
            _ => Ok(WorkDone(0)),
        }
    }
    fn stop(&mut self) -> Result<(), CoreError> {
        self.watch.stopping.store(true, Ordering::Release);
        std::thread::sleep(self.stop_takes);
        self.watch.stopping.store(false, Ordering::Release);
        Ok(())
    }
}

struct Slow {
    handled: Arc<AtomicU64>,
}

impl Slow {
    fn on_number(&mut self, number: &u64) -> Result<(), ProcessorError> {
        std::thread::sleep(Duration::from_micros(200));
        self.handled.store(*number, Ordering::Release);
        Ok(())
    }
}

impl Processor for Slow {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("numbers", Slow::on_number)
    }
}

#[test]
fn the_final_commit_waits_for_a_late_source_stop() {
    // third review item 5: the commit after stop runs only once every source stopped;
    // if the feed phase runs out of its bound it is skipped, and made once the late stop
    // is joined
    let config = ServerConfig::parse(
        "shutdown_timeout_millis = 300\nshutdown_drain_timeout_millis = 50\n",
        std::path::Path::new("."),
    )
    .expect("config");
    let watch = Arc::new(Watch::default());
    let feed: Arc<Publisher<u64, u64>> = Feed::builder("numbers").queue_capacity(64).build();
    let handled = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&handled);
    let server = Server::builder(config)
        .source(
            Arc::clone(&feed),
            SlowStop {
                output: Arc::clone(&feed),
                next: 1,
                items: 1_000_000,
                stop_takes: Duration::from_millis(800),
                watch: Arc::clone(&watch),
            },
        )
        .processor("slow", "slow", move || Slow { handled: seen })
        .build()
        .expect("built");
    server.start().expect("started");
    while handled.load(Ordering::Acquire) < 100 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let first = server.shutdown();
    assert!(
        !first.complete,
        "the source's stop outlasts the deadline: {first:?}"
    );
    assert!(
        first
            .groups_running
            .contains(&"<event sources stopping>".to_owned()),
        "{first:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut result = first;
    while !result.complete {
        assert!(
            Instant::now() < deadline,
            "the resumed stop never completed: {result:?}"
        );
        result = server.shutdown();
    }
    assert_eq!(
        watch
            .commits_elsewhere_while_stopping
            .load(Ordering::Acquire),
        0,
        "no commit after stop ran while the source was still stopping"
    );
    assert_eq!(
        watch.committed.load(Ordering::Acquire),
        handled.load(Ordering::Acquire),
        "the final commit covers exactly what the group processed"
    );
}

/// Registers a completion for every line and checks, when it runs, that the feed has
/// not committed the line yet.
struct Completes {
    completed: Arc<AtomicU64>,
    committed_too_early: Arc<AtomicU64>,
    watch: Arc<Watch>,
}

impl Completes {
    fn on_number(&mut self, _number: &u64) -> Result<(), ProcessorError> {
        assert!(
            DeliveryContext::on_complete(CompletionKey::SAVE),
            "a positioned delivery"
        );
        Ok(())
    }
}

impl Processor for Completes {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("numbers", Completes::on_number)
    }
    fn on_delivery_complete(
        &mut self,
        _: CompletionKey,
        delivery: &Delivery,
    ) -> Result<(), ProcessorError> {
        if self.watch.committed.load(Ordering::Acquire) >= delivery.position().offset {
            self.committed_too_early.fetch_add(1, Ordering::AcqRel);
        }
        self.completed.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}

#[test]
fn a_completion_runs_before_the_feed_commits_its_line() {
    // book: guarantees/completion-hooks.md: the callback runs before the feed can
    // acknowledge or commit the item
    let config = ServerConfig::parse("", std::path::Path::new(".")).expect("config");
    let watch = Arc::new(Watch::default());
    let feed: Arc<Publisher<u64, u64>> = Feed::builder("numbers").queue_capacity(64).build();
    let completed = Arc::new(AtomicU64::new(0));
    let too_early = Arc::new(AtomicU64::new(0));
    let (seen, early) = (Arc::clone(&completed), Arc::clone(&too_early));
    let watched = Arc::clone(&watch);
    let server = Server::builder(config)
        .source(
            Arc::clone(&feed),
            SlowStop {
                output: Arc::clone(&feed),
                next: 1,
                items: 5_000,
                stop_takes: Duration::ZERO,
                watch: Arc::clone(&watch),
            },
        )
        .processor("g", "completes", move || Completes {
            completed: seen,
            committed_too_early: early,
            watch: watched,
        })
        .build()
        .expect("built");
    server.start().expect("started");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !server.status().settled {
        assert!(Instant::now() < deadline, "never settled");
        std::thread::sleep(Duration::from_micros(200));
    }
    assert!(server.shutdown().complete);
    assert_eq!(completed.load(Ordering::Acquire), 5_000);
    assert_eq!(
        too_early.load(Ordering::Acquire),
        0,
        "no line was committed before its completion ran"
    );
    assert_eq!(watch.committed.load(Ordering::Acquire), 5_000);
}

/// Calls the server's shutdown from its own handler: an agent thread.
struct StopsTheServer {
    server: Arc<std::sync::OnceLock<Server>>,
    result: Arc<Mutex<Option<mongoose_server::StopResult>>>,
}

impl StopsTheServer {
    fn on_number(&mut self, _: &u64) -> Result<(), ProcessorError> {
        if let Some(server) = self.server.get() {
            let mut result = self.result.lock().unwrap();
            if result.is_none() {
                *result = Some(server.shutdown());
            }
        }
        Ok(())
    }
}

impl Processor for StopsTheServer {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("numbers", StopsTheServer::on_number)
    }
}

#[test]
fn a_shutdown_called_on_an_agent_thread_is_handed_off() {
    // book: guarantees/control-plane.md: called on one of the server's own threads, the
    // stop runs on a mongoose-server-stop thread and returns handedOff
    let config = ServerConfig::parse("", std::path::Path::new(".")).expect("config");
    let watch = Arc::new(Watch::default());
    let feed: Arc<Publisher<u64, u64>> = Feed::builder("numbers").queue_capacity(64).build();
    let slot = Arc::new(std::sync::OnceLock::new());
    let result = Arc::new(Mutex::new(None));
    let (server_slot, seen) = (Arc::clone(&slot), Arc::clone(&result));
    let server = Server::builder(config)
        .source(
            Arc::clone(&feed),
            SlowStop {
                output: Arc::clone(&feed),
                next: 1,
                items: 10,
                stop_takes: Duration::ZERO,
                watch,
            },
        )
        .processor("g", "stopper", move || StopsTheServer {
            server: server_slot,
            result: seen,
        })
        .build()
        .expect("built");
    slot.set(server.clone()).expect("set once");
    server.start().expect("started");
    assert!(
        server.await_stopped(Duration::from_secs(60)),
        "the handed-off stop completed"
    );
    let handed = result
        .lock()
        .unwrap()
        .clone()
        .expect("the handler called shutdown");
    assert!(handed.handed_off && !handed.complete, "{handed:?}");
    assert!(server.last_stop_result().expect("a result").complete);
}
