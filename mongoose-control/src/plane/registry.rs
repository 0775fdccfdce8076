//! The service registry of a control plane (book: guarantees/control-plane.md,
//! "removeService"): versioned registrations, withdrawals confirmed by every group,
//! and the services shutdown stops.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use mongoose_core::agent;
use parking_lot::{Condvar, Mutex};

use crate::error::ControlError;
use crate::group::{Admission, ProcessorGroup, Request};
use crate::reply::{ReplyHandle, ReplyOutcome};
use crate::services::{Service, ServiceBroadcast, ServiceChange, ShutdownStops};

use super::Plane;

struct ServiceEntry {
    version: u64,
    service: Arc<dyn Service>,
    published: bool,
}

struct Withdrawal {
    name: String,
    service: Arc<dyn Service>,
    state: Mutex<WithdrawalState>,
    done: Condvar,
}

struct WithdrawalState {
    remaining: usize,
    unconfirmed: bool,
    caller_waiting: bool,
    settled: bool,
}

#[derive(Default)]
struct RegistryState {
    entries: HashMap<String, ServiceEntry>,
    versions: HashMap<String, u64>,
    withdrawing: Vec<Arc<Withdrawal>>,
    retained: Vec<(String, Arc<dyn Service>)>,
}

#[derive(Default)]
pub(super) struct Registry {
    state: Mutex<RegistryState>,
    /// The stops shutdown started (outside the service lock: they are awaited).
    shutdown: ShutdownStops,
}

impl Registry {
    pub(super) fn snapshot(&self) -> Vec<ServiceBroadcast> {
        let state = self.state.lock();
        state
            .entries
            .iter()
            .filter(|(_, entry)| entry.published)
            .map(|(name, entry)| ServiceBroadcast {
                name: name.clone(),
                version: entry.version,
                change: ServiceChange::Registered(Arc::clone(&entry.service)),
            })
            .collect()
    }

    fn next_version(state: &mut RegistryState, name: &str) -> u64 {
        let version = state.versions.entry(name.to_owned()).or_insert(0);
        *version += 1;
        *version
    }

    /// Settles a withdrawal once: stops the service when every group confirmed it,
    /// otherwise keeps owning it until shutdown.
    fn settle(&self, withdrawal: &Arc<Withdrawal>) {
        let confirmed = {
            let mut state = withdrawal.state.lock();
            if state.settled || state.remaining > 0 {
                return;
            }
            state.settled = true;
            !state.unconfirmed
        };
        {
            let mut registry = self.state.lock();
            registry
                .withdrawing
                .retain(|other| !Arc::ptr_eq(other, withdrawal));
            if !confirmed {
                registry
                    .retained
                    .push((withdrawal.name.clone(), Arc::clone(&withdrawal.service)));
            }
        }
        if confirmed {
            if let Err(error) = withdrawal.service.stop() {
                tracing::error!(service = %withdrawal.name, %error, "service stop failed");
            }
        } else {
            tracing::warn!(service = %withdrawal.name, "service '{}' remains owned until shutdown", withdrawal.name);
        }
    }
}

fn same_instance(a: &Arc<dyn Service>, b: &Arc<dyn Service>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

impl Plane {
    /// See [`ControlPlane::send_service_broadcast`].
    pub(crate) fn send_service_broadcast(
        &self,
        group: &ProcessorGroup,
        broadcast: ServiceBroadcast,
    ) -> ReplyHandle {
        let name = broadcast.name.clone();
        let (letter, reply) = self.letter(Request::Service(broadcast));
        if let Err((letter, refusal)) = group.admit(letter, Admission::Immediate) {
            let answer = Self::refusal_reply(group, refusal, None, &name);
            ProcessorGroup::answer_refused(letter, answer);
        }
        reply
    }

    /// Publishes a broadcast to every group without waiting. Returns the replies to
    /// expect, how many groups missed it (mailbox full), and whether a group that
    /// has not started got it (nobody may wait for that one).
    fn broadcast(&self, broadcast: &ServiceBroadcast) -> (Vec<ReplyHandle>, usize, bool) {
        let groups: Vec<ProcessorGroup> = self.groups.lock().values().cloned().collect();
        let mut handles = Vec::new();
        let mut missed = 0;
        let mut unstarted = false;
        for group in groups {
            unstarted |= !group.is_started();
            let reply = self.send_service_broadcast(&group, broadcast.clone());
            match reply.try_get() {
                Some(answer) if answer.request_id.is_none() => {
                    if answer.outcome == ReplyOutcome::Refused {
                        missed += 1;
                        tracing::error!(group = group.name(), service = %broadcast.name, version = broadcast.version, "group missed a service broadcast: mailbox full");
                    }
                }
                _ => handles.push(reply),
            }
        }
        (handles, missed, unstarted)
    }

    /// See [`ControlPlane::register_service`].
    pub(crate) fn register_service(
        &self,
        name: &str,
        service: Arc<dyn Service>,
    ) -> Result<(), ControlError> {
        let deadline = Instant::now() + self.config.control_wait;
        if self.stopping.load(Ordering::Acquire) {
            return Err(ControlError::ServerStopping);
        }
        let registration_error = |reason: &str| ControlError::ServiceRegistration {
            name: name.to_owned(),
            reason: reason.to_owned(),
        };
        // 1. reserve the name under the lock
        let (version, others) = {
            let mut state = self.registry.state.lock();
            if state.entries.contains_key(name) {
                return Err(registration_error("name in use"));
            }
            let stopping_instance = state
                .withdrawing
                .iter()
                .any(|w| same_instance(&w.service, &service));
            if stopping_instance {
                return Err(registration_error(
                    "the same instance is being stopped by an earlier removal",
                ));
            }
            let version = Registry::next_version(&mut state, name);
            state.entries.insert(
                name.to_owned(),
                ServiceEntry {
                    version,
                    service: Arc::clone(&service),
                    published: false,
                },
            );
            let others: Vec<(String, Arc<dyn Service>)> = state
                .entries
                .iter()
                .filter(|(other, entry)| entry.published && other.as_str() != name)
                .map(|(other, entry)| (other.clone(), Arc::clone(&entry.service)))
                .collect();
            (version, others)
        };
        // 2. inject and start outside the lock
        for (other_name, other) in &others {
            service.inject(other_name, other);
            other.inject(name, &service);
        }
        if let Err(error) = service.start() {
            let mut state = self.registry.state.lock();
            if state
                .entries
                .get(name)
                .is_some_and(|e| e.version == version)
            {
                state.entries.remove(name);
            }
            return Err(registration_error(&format!("start failed: {error}")));
        }
        // 3. publish under the lock, unless a removal overtook the registration
        let (handles, _missed, unstarted) = {
            let mut state = self.registry.state.lock();
            match state.entries.get_mut(name) {
                Some(entry) if entry.version == version => entry.published = true,
                _ => {
                    drop(state);
                    if let Err(error) = service.stop() {
                        tracing::error!(service = name, %error, "service stop failed");
                    }
                    return Err(registration_error(
                        "removed before its registration was published",
                    ));
                }
            }
            self.broadcast(&ServiceBroadcast {
                name: name.to_owned(),
                version,
                change: ServiceChange::Registered(Arc::clone(&service)),
            })
        };
        // 4. off an agent thread, wait for every group under one deadline (not for a
        // group that has not started: it cannot answer yet)
        if !agent::is_agent_thread() && !unstarted {
            for handle in handles {
                if handle.wait(deadline).is_err() {
                    tracing::warn!(
                        service = name,
                        "not every group answered the registration within control_wait"
                    );
                    break;
                }
            }
        }
        Ok(())
    }

    /// See [`ControlPlane::remove_service`].
    pub(crate) fn remove_service(&self, name: &str) {
        let deadline = Instant::now() + self.config.control_wait;
        if self.stopping.load(Ordering::Acquire) {
            tracing::info!(
                service = name,
                "removeService during a stop is ignored; the stop stops the service"
            );
            return;
        }
        let (withdrawal, handles) = {
            let mut state = self.registry.state.lock();
            let Some(entry) = state.entries.remove(name) else {
                return;
            };
            let version = Registry::next_version(&mut state, name);
            if !entry.published {
                // the registering call sees the removal and stops its service itself
                return;
            }
            let (handles, missed, unstarted) = self.broadcast(&ServiceBroadcast {
                name: name.to_owned(),
                version,
                change: ServiceChange::Deregistered,
            });
            let withdrawal = Arc::new(Withdrawal {
                name: name.to_owned(),
                service: entry.service,
                state: Mutex::new(WithdrawalState {
                    remaining: handles.len(),
                    unconfirmed: missed > 0,
                    caller_waiting: !agent::is_agent_thread() && !unstarted,
                    settled: false,
                }),
                done: Condvar::new(),
            });
            state.withdrawing.push(Arc::clone(&withdrawal));
            (withdrawal, handles)
        };
        // outside the service lock: a reply already in may settle at once, which
        // takes the lock again
        for handle in handles {
            let registry = Arc::clone(&self.registry);
            let arrived = Arc::clone(&withdrawal);
            handle.on_reply(move |reply| {
                let settle_here = {
                    let mut state = arrived.state.lock();
                    state.remaining -= 1;
                    if !reply.applied() {
                        state.unconfirmed = true;
                    }
                    arrived.done.notify_all();
                    state.remaining == 0 && !state.caller_waiting
                };
                if settle_here {
                    registry.settle(&arrived);
                }
            });
        }
        let mut state = withdrawal.state.lock();
        while state.caller_waiting && state.remaining > 0 {
            if withdrawal.done.wait_until(&mut state, deadline).timed_out() {
                tracing::warn!(service = name, "not every group confirmed the withdrawal within control_wait; the stop waits for them");
                break;
            }
        }
        state.caller_waiting = false;
        let settle_now = state.remaining == 0;
        drop(state);
        if settle_now {
            self.registry.settle(&withdrawal);
        }
    }

    /// See [`ControlPlane::owned_services`].
    pub(crate) fn owned_services(&self) -> Vec<String> {
        let mut names: Vec<String> = {
            let state = self.registry.state.lock();
            let mut names: Vec<String> = state.entries.keys().cloned().collect();
            names.extend(state.withdrawing.iter().map(|w| w.name.clone()));
            names.extend(state.retained.iter().map(|(name, _)| name.clone()));
            names
        };
        names.extend(self.registry.shutdown.unconfirmed());
        names.sort();
        names
    }

    /// See [`ControlPlane::stop_services`].
    pub(crate) fn stop_services(&self, deadline: Instant) -> Vec<String> {
        let services: Vec<(String, Arc<dyn Service>)> = {
            let mut state = self.registry.state.lock();
            let mut owned: Vec<(String, Arc<dyn Service>)> = state
                .entries
                .drain()
                .filter(|(_, entry)| entry.published)
                .map(|(name, entry)| (name, entry.service))
                .collect();
            for withdrawal in state.withdrawing.drain(..) {
                let mut claim = withdrawal.state.lock();
                if !claim.settled {
                    claim.settled = true;
                    owned.push((withdrawal.name.clone(), Arc::clone(&withdrawal.service)));
                }
            }
            owned.append(&mut state.retained);
            owned
        };
        // outside the service lock: the stops run on helpers and are awaited
        self.registry.shutdown.start(services);
        self.registry.shutdown.await_stopped(deadline)
    }
}
