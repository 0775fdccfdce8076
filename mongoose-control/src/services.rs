//! Services: shared objects registered with the control plane and given to processors.
//!
//! A processor that wants services asks for them in `start`
//! ([`mongoose_core::StartContext::services`]) with a handler of [`ServiceEvent`]; it is
//! then told, on its own group thread, of every service registered (once per service
//! registration) and removed.

use std::fmt;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::contain::contained;

pub use mongoose_core::{Service, ServiceEvent};

/// A versioned registration or removal, broadcast to every group.
#[derive(Clone, Debug)]
pub struct ServiceBroadcast {
    /// The service name.
    pub name: String,
    /// The version of this change (each change of a name gets the next).
    pub version: u64,
    /// The change.
    pub change: ServiceChange,
}

/// A registration or a removal.
#[derive(Clone)]
pub enum ServiceChange {
    /// Registered.
    Registered(Arc<dyn Service>),
    /// Removed.
    Deregistered,
}

impl fmt::Debug for ServiceChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ServiceChange::Registered(_) => "Registered",
            ServiceChange::Deregistered => "Deregistered",
        })
    }
}

impl ServiceBroadcast {
    pub(crate) fn event(&self) -> ServiceEvent {
        match &self.change {
            ServiceChange::Registered(service) => ServiceEvent::Registered {
                name: self.name.clone(),
                version: self.version,
                service: Arc::clone(service),
            },
            ServiceChange::Deregistered => ServiceEvent::Deregistered {
                name: self.name.clone(),
                version: self.version,
            },
        }
    }
}

/// What became of a service's stop at shutdown.
#[derive(Clone, Debug, PartialEq, Eq)]
enum StopOutcome {
    /// Its helper still runs `stop()` (or could not be started yet).
    Running,
    /// `stop()` returned normally.
    Stopped,
    /// `stop()` failed or panicked: its side effects are unknown, so it is never
    /// called again and the service stays unconfirmed.
    Failed(String),
}

/// One service's stop at shutdown, run on its own helper thread.
struct ShutdownStop {
    name: String,
    /// The service, until its helper is started (kept only while spawning fails).
    unstarted: Option<Arc<dyn Service>>,
    outcome: Arc<(Mutex<StopOutcome>, Condvar)>,
    helper: Option<JoinHandle<()>>,
}

impl ShutdownStop {
    /// Starts the helper that calls `stop()` once; a failure to spawn leaves the
    /// service unstarted, to be tried again by the next (resumed) attempt.
    fn start_helper(&mut self) {
        let Some(service) = self.unstarted.take() else {
            return;
        };
        let outcome = Arc::clone(&self.outcome);
        let name = self.name.clone();
        let kept = Arc::clone(&service);
        let spawned = std::thread::Builder::new()
            .name(format!("mongoose-service-stop-{name}"))
            .spawn(move || {
                let result = contained(|| service.stop());
                // the helper's reference goes before the outcome is told, so nothing
                // of the service runs here once the stop is confirmed
                drop(service);
                let settled = match result {
                    Ok(()) => {
                        tracing::info!(service = %name, "service stopped");
                        StopOutcome::Stopped
                    }
                    Err(reason) => {
                        tracing::error!(service = %name, %reason, "service stop failed at shutdown: its side effects are unknown, so it is not called again and the service stays listed in services_left_running; check the service's resources by hand");
                        StopOutcome::Failed(reason)
                    }
                };
                let (state, done) = &*outcome;
                *state.lock() = settled;
                done.notify_all();
            });
        match spawned {
            Ok(helper) => self.helper = Some(helper),
            Err(error) => {
                tracing::error!(service = %self.name, %error, "cannot start the helper thread of a service stop: the service stays unconfirmed; call shutdown again to retry");
                self.unstarted = Some(kept);
            }
        }
    }
}

/// The service stops of a shutdown: each on its own helper thread, awaited under the
/// shutdown's deadline (book: guarantees/control-plane.md, phase 5). A stop that
/// outlasts the deadline keeps running on its helper and is re-joined by the next
/// attempt; a stop that failed is never called again and its service stays
/// unconfirmed ("Resuming an incomplete stop").
#[derive(Default)]
pub(crate) struct ShutdownStops {
    stops: Mutex<Vec<ShutdownStop>>,
}

impl ShutdownStops {
    /// Starts the stop of each service on its own helper thread (once per service).
    pub(crate) fn start(&self, services: Vec<(String, Arc<dyn Service>)>) {
        let mut stops = self.stops.lock();
        for (name, service) in services {
            let mut stop = ShutdownStop {
                name,
                unstarted: Some(service),
                outcome: Arc::new((Mutex::new(StopOutcome::Running), Condvar::new())),
                helper: None,
            };
            stop.start_helper();
            stops.push(stop);
        }
        // a resumed attempt retries helpers that could not be spawned before
        for stop in stops.iter_mut() {
            stop.start_helper();
        }
    }

    /// Waits, until `deadline` at the latest, for every stop started; forgets the ones
    /// confirmed stopped (joining their helpers) and returns the names of the others,
    /// sorted: still running, or failed.
    pub(crate) fn await_stopped(&self, deadline: Instant) -> Vec<String> {
        // the waits run outside the list's lock, so the names stay readable
        let outcomes: Vec<Arc<(Mutex<StopOutcome>, Condvar)>> = self
            .stops
            .lock()
            .iter()
            .map(|stop| Arc::clone(&stop.outcome))
            .collect();
        for outcome in outcomes {
            let (state, done) = &*outcome;
            let mut state = state.lock();
            while *state == StopOutcome::Running {
                if done.wait_until(&mut state, deadline).timed_out() {
                    break;
                }
            }
        }
        let mut stops = self.stops.lock();
        let mut confirmed = Vec::new();
        stops.retain_mut(|stop| {
            let stopped = *stop.outcome.0.lock() == StopOutcome::Stopped;
            if stopped {
                confirmed.extend(stop.helper.take());
            }
            !stopped
        });
        let mut unconfirmed = Vec::new();
        for stop in stops.iter() {
            match &*stop.outcome.0.lock() {
                StopOutcome::Failed(reason) => {
                    tracing::warn!(service = %stop.name, %reason, "the service's stop failed: not confirmed stopped, and never called again");
                }
                _ => {
                    tracing::warn!(service = %stop.name, "the service's stop is still running on its helper: call shutdown again to re-join it");
                }
            }
            unconfirmed.push(stop.name.clone());
        }
        drop(stops);
        for helper in confirmed {
            // it has told its outcome: all that is left of it is returning
            if helper.join().is_err() {
                tracing::error!("a service stop helper panicked after its stop returned");
            }
        }
        unconfirmed.sort();
        unconfirmed
    }

    /// The services whose stop is not confirmed: running, failed, or not started.
    pub(crate) fn unconfirmed(&self) -> Vec<String> {
        self.stops
            .lock()
            .iter()
            .filter(|stop| *stop.outcome.0.lock() != StopOutcome::Stopped)
            .map(|stop| stop.name.clone())
            .collect()
    }
}
