//! The harness's own Apache Kafka broker: one combined KRaft node from the jars the
//! tests use (`mongoose_testkit::kafka::Cluster`), started the first time a Kafka
//! scenario needs it and shared by the scenarios of the process (each has topics and a
//! group of its own), killed, paused and restarted as a peer, and stopped when the
//! harness exits ([`stop_broker`], [`BrokerGuard`]; on SIGINT, SIGTERM or SIGHUP its
//! JVM is SIGKILLed before the harness exits, so a `timeout` or a Ctrl-C leaves no
//! broker behind).

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::Duration;

use mongoose_testkit::kafka::Cluster;

/// Set (to anything) to make a Kafka scenario fail when Apache Kafka's jars are not
/// resolved, as the Kafka tests do (CI sets it); without it such a scenario is skipped.
pub const REQUIRE_BROKER_ENV: &str = "MONGOOSE_REQUIRE_BROKER";

/// What to do when the jars are missing.
pub const NO_JARS: &str = "the kafka family runs a broker of its own from Apache Kafka's jars, which are not resolved: run `cargo xtask broker start` once (it resolves them with Maven into ~/.cache/mongoose-kafka, or $MONGOOSE_KAFKA_CACHE; it needs Java 17 and Maven), then `cargo xtask broker stop`";

/// The node of the harness's cluster.
const NODE: u16 = 1;

/// The broker and what was done to it.
struct Broker {
    cluster: Cluster,
    /// SIGKILLed and not restarted yet.
    killed: bool,
    /// SIGSTOPped and not continued yet.
    stopped: bool,
}

static BROKER: Mutex<Option<Broker>> = Mutex::new(None);

/// The broker JVM's pid while it runs (0: none), for the exit signals' handler.
static BROKER_PID: AtomicI32 = AtomicI32::new(0);

/// SIGKILL of the broker's JVM, then the harness's exit (128 + the signal), as the
/// default action would have ended it.
extern "C" fn on_exit_signal(signal: libc::c_int) {
    let pid = BROKER_PID.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill(2) is async-signal-safe; the pid is the broker JVM's, a child
        // of this process not reaped yet (it is reaped only after BROKER_PID is reset)
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    // SAFETY: _exit(2) is async-signal-safe and ends the process at once
    unsafe { libc::_exit(128 + signal) }
}

/// Installs [`on_exit_signal`] for SIGINT, SIGTERM and SIGHUP (once).
fn watch_exit_signals() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: the handler only calls async-signal-safe functions (an atomic
            // load, kill(2), _exit(2))
            unsafe {
                libc::signal(
                    signal,
                    on_exit_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
                );
            }
        }
    });
}

/// Notes the broker JVM's pid (0 while it is down) for the exit signals' handler.
fn note_pid(broker: &Broker) {
    let pid = if broker.killed {
        0
    } else {
        broker.cluster.pid(NODE).map_or(0, |pid| pid as i32)
    };
    BROKER_PID.store(pid, Ordering::SeqCst);
}

fn lock() -> MutexGuard<'static, Option<Broker>> {
    BROKER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether a Kafka scenario can get a broker: `Ok(true)` yes, `Ok(false)` the jars are
/// missing and [`REQUIRE_BROKER_ENV`] is not set (skip it), `Err` they are missing and
/// it is set.
///
/// # Errors
/// The jars are missing and a broker is required (the message says what to do).
pub fn broker_available() -> Result<bool, String> {
    if lock().is_some() || mongoose_testkit::kafka::cached_classpath().is_some() {
        return Ok(true);
    }
    if std::env::var_os(REQUIRE_BROKER_ENV).is_some() {
        Err(format!("{NO_JARS} ({REQUIRE_BROKER_ENV} is set)"))
    } else {
        Ok(false)
    }
}

/// The broker's bootstrap address, its cluster started first when it is not running
/// yet, and the node restarted or continued when an earlier scenario left it down.
///
/// # Errors
/// The jars are missing, or the node does not start (its log's tail is in the message).
pub fn ensure_broker() -> Result<String, String> {
    let mut broker = lock();
    if broker.is_none() {
        let started = std::panic::catch_unwind(|| {
            Cluster::builder(1)
                // retention is checked every second (not every 5 minutes), from a second
                // after the start (not 30): a `retention` step's records go within
                // seconds
                .property("log.retention.check.interval.ms", "1000")
                .property("log.initial.task.delay.ms", "1000")
                .start()
        })
        .map_err(|panic| {
            format!(
                "the harness's Kafka broker did not start: {}",
                panic_text(&panic)
            )
        })?;
        let cluster = started.ok_or_else(|| NO_JARS.to_owned())?;
        watch_exit_signals();
        *broker = Some(Broker {
            cluster,
            killed: false,
            stopped: false,
        });
    }
    let Some(running) = broker.as_mut() else {
        return Err("the harness's Kafka broker is gone".to_owned());
    };
    heal(running)?;
    Ok(running.cluster.bootstrap())
}

/// The broker's bootstrap address, if one was started.
pub fn bootstrap() -> Option<String> {
    lock().as_ref().map(|broker| broker.cluster.bootstrap())
}

/// Whether the broker is down (killed and not restarted).
pub fn broker_down() -> bool {
    lock().as_ref().is_some_and(|broker| broker.killed)
}

/// SIGKILL of the broker (it stays down until [`restart_broker`]).
pub fn kill_broker() {
    if let Some(broker) = lock().as_mut() {
        if broker.stopped {
            broker.cluster.signal(NODE, "-CONT");
            broker.stopped = false;
        }
        BROKER_PID.store(0, Ordering::SeqCst);
        broker.cluster.kill(NODE);
        broker.killed = true;
    }
}

/// SIGSTOP of the broker.
pub fn stop_broker_process() {
    if let Some(broker) = lock().as_mut() {
        if !broker.killed {
            broker.cluster.signal(NODE, "-STOP");
            broker.stopped = true;
        }
    }
}

/// SIGCONT of the broker.
pub fn continue_broker() {
    if let Some(broker) = lock().as_mut() {
        if broker.stopped {
            broker.cluster.signal(NODE, "-CONT");
            broker.stopped = false;
        }
    }
}

/// Starts a killed broker again on its storage, waiting until it answers.
///
/// # Errors
/// It does not answer within 120 s.
pub fn restart_broker() -> Result<(), String> {
    match lock().as_mut() {
        Some(broker) => heal(broker),
        None => Ok(()),
    }
}

/// The broker running and answering: continued, restarted when killed.
fn heal(broker: &mut Broker) -> Result<(), String> {
    if broker.stopped {
        broker.cluster.signal(NODE, "-CONT");
        broker.stopped = false;
    }
    if broker.killed {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            broker.cluster.restart(NODE);
        }))
        .map_err(|panic| {
            format!(
                "the harness's Kafka broker did not restart: {}",
                panic_text(&panic)
            )
        })?;
        broker.killed = false;
    } else {
        // answering (a continued node may take a moment)
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            broker.cluster.wait_answering(NODE);
        }))
        .map_err(|panic| {
            format!(
                "the harness's Kafka broker does not answer: {}",
                panic_text(&panic)
            )
        })?;
    }
    note_pid(broker);
    Ok(())
}

/// The last lines of the broker's log (for a report).
pub fn broker_log_tail() -> String {
    lock()
        .as_ref()
        .map_or_else(String::new, |broker| broker.cluster.log_tail(NODE))
}

/// Stops the harness's broker, if one was started (its storage goes with it).
pub fn stop_broker() {
    if let Some(broker) = lock().take() {
        BROKER_PID.store(0, Ordering::SeqCst);
        drop(broker.cluster);
    }
}

/// Stops the harness's broker when dropped: `main` holds one, so the broker's JVM
/// ends with the harness (also when it unwinds from a panic).
#[derive(Debug, Default)]
pub struct BrokerGuard;

impl Drop for BrokerGuard {
    fn drop(&mut self) {
        stop_broker();
    }
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|text| (*text).to_owned()))
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// How long a broker call of the harness may take.
pub const BROKER_CALL: Duration = Duration::from_secs(60);
