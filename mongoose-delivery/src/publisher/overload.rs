//! Overload: each queue's effective policy (its override, the feed's default, or the
//! source's pause-by-default), the loss accounting of a drop or a refusal, the
//! per-group health (up, degraded, latched, removed) with its observers, and the
//! kill-switch hook a latch may run.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mongoose_core::{
    EvidenceStatus, FailureKind, OverloadPolicy, OverloadSettings, Position, PublishRefused,
};
use tracing::{error, info, warn};

use super::{Publisher, State};
use crate::queue::{DropEvidence, HealthRecord, OverloadChange, OverloadObserver, OverloadState};

/// Called once per latch of a BLOCK_WITH_DEADLINE queue whose settings ask for it, on
/// a thread of its own (never an agent thread). Arguments: feed, queue.
pub type KillSwitch = Arc<dyn Fn(&str, &str) + Send + Sync>;

fn wall_clock_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

/// The overload part of the feed's state: the policies and each group's health.
pub(super) struct Overload {
    /// The health of each group's queue (kept after it is removed while latched).
    pub(super) health: HashMap<String, HealthRecord>,
    /// The feed's default settings, when the builder gave them (`explicit_default`).
    pub(super) default_settings: OverloadSettings,
    /// The builder gave the feed's default settings.
    pub(super) explicit_default: bool,
    /// Without explicit settings, queues pause (a re-readable source) instead of dropping.
    pub(super) pause_by_default: bool,
    /// The source said whether the feed's default is PAUSE (it started): a queue
    /// subscribed before it logs its policy then.
    pub(super) default_decided: bool,
    /// The settings of each group that has its own.
    pub(super) overrides: HashMap<String, OverloadSettings>,
}

impl Overload {
    pub(super) fn new(
        default_settings: Option<OverloadSettings>,
        overrides: HashMap<String, OverloadSettings>,
    ) -> Self {
        Overload {
            health: HashMap::new(),
            explicit_default: default_settings.is_some(),
            default_settings: default_settings.unwrap_or_default(),
            pause_by_default: false,
            default_decided: false,
            overrides,
        }
    }
}

impl<T: Send + Sync + 'static, P: Position> Publisher<T, P> {
    pub(super) fn effective_settings(state: &State<T, P>, group: &str) -> (OverloadSettings, bool) {
        if let Some(settings) = state.overload.overrides.get(group) {
            return (*settings, true);
        }
        (
            Self::default_settings(state),
            state.overload.explicit_default,
        )
    }

    pub(super) fn default_settings(state: &State<T, P>) -> OverloadSettings {
        if state.overload.explicit_default {
            state.overload.default_settings
        } else if state.overload.pause_by_default {
            OverloadSettings::pause()
        } else {
            OverloadSettings::drop_after_spin()
        }
    }

    /// Sets the hook run once per latch of a BLOCK queue with `kill_switch` on.
    pub fn set_kill_switch(&self, hook: KillSwitch) {
        *self.kill_switch.lock() = Some(hook);
    }

    /// Clears latched and degraded overload states (the admin `overload.clear`).
    pub fn clear_overload(&self) {
        let mut state = self.state.lock();
        for (group, record) in state.overload.health.iter() {
            if record.state != OverloadState::Up {
                self.overload_changed(group, record.state, OverloadState::Up, "cleared");
            }
        }
        state
            .overload
            .health
            .retain(|_, record| record.state != OverloadState::Removed);
        for record in state.overload.health.values_mut() {
            record.state = OverloadState::Up;
            record.last_loss = None;
        }
        info!(feed = %self.name, "overload states cleared");
    }

    /// Adds an observer told of every change of a group queue's overload state (the
    /// control plane writes them into the group's control audit). It is called under
    /// the feed's publish lock: it must be quick and must not call back into the feed.
    pub fn observe_overload(&self, observer: OverloadObserver) {
        self.overload_observers.lock().push(observer);
    }

    pub(super) fn overload_changed(
        &self,
        group: &str,
        from: OverloadState,
        to: OverloadState,
        cause: &'static str,
    ) {
        let mut observers = self.overload_observers.lock();
        if observers.is_empty() {
            return;
        }
        let change = OverloadChange {
            feed: self.name.to_string(),
            group: group.to_owned(),
            from,
            to,
            cause,
        };
        observers.retain(|observer| observer(&change));
    }

    /// Overload health per group queue (removed latches included).
    pub fn overload_states(&self) -> Vec<(String, OverloadState)> {
        let mut state = self.state.lock();
        let now = Instant::now();
        let quiet: HashMap<String, Duration> = state
            .bindings
            .iter()
            .map(|binding| {
                (
                    binding.shared.group.to_string(),
                    binding.settings.quiet_period,
                )
            })
            .collect();
        let mut states: Vec<(String, OverloadState)> = state
            .overload
            .health
            .iter_mut()
            .map(|(group, record)| {
                if record.state == OverloadState::Degraded {
                    let period = quiet
                        .get(group)
                        .copied()
                        .unwrap_or(OverloadSettings::DEFAULT_QUIET_PERIOD);
                    if record
                        .last_loss
                        .is_some_and(|at| now.duration_since(at) >= period)
                    {
                        record.state = OverloadState::Up;
                        self.overload_changed(
                            group,
                            OverloadState::Degraded,
                            OverloadState::Up,
                            "quiet period",
                        );
                    }
                }
                (format!("{group}/{}", self.name), record.state)
            })
            .collect();
        states.sort();
        states
    }

    /// The first drop of each queue binding that dropped.
    pub fn first_drops(&self) -> Vec<DropEvidence> {
        let state = self.state.lock();
        state
            .bindings
            .iter()
            .filter_map(|binding| binding.first_drop.clone())
            .collect()
    }

    /// Copies dropped for the queue of `group` (live queues only).
    pub fn dropped_for(&self, group: &str) -> u64 {
        let state = self.state.lock();
        state
            .bindings
            .iter()
            .find(|binding| &*binding.shared.group == group)
            .map_or(0, |binding| binding.dropped)
    }

    pub(super) fn count_drop(
        &self,
        state: &mut State<T, P>,
        index: usize,
        sequence: u64,
        downgraded: bool,
    ) {
        let feed = self.name.to_string();
        let binding = &mut state.bindings[index];
        binding.dropped += 1;
        binding.shared.record_drop(binding.produced, sequence);
        let queue = binding.shared.name.to_string();
        let group = binding.shared.group.to_string();
        let never_drop = binding.settings.policy.never_drops();
        let kill_switch = binding.settings.kill_switch;
        if binding.first_drop.is_none() {
            let evidence = DropEvidence {
                feed: feed.clone(),
                queue: queue.clone(),
                group: group.clone(),
                sequence,
                count: 1,
                wall_clock_millis: wall_clock_millis(),
            };
            warn!(feed = %feed, queue = %queue, sequence, "first drop of this queue binding: dropping publish to slow/contended queue");
            binding.first_drop = Some(evidence);
        }
        state.counts.dropped += 1;
        if downgraded {
            state.counts.downgraded += 1;
        }
        let record = state.overload.health.entry(group.clone()).or_default();
        record.last_loss = Some(Instant::now());
        if never_drop {
            if record.state != OverloadState::Latched {
                let from = record.state;
                record.state = OverloadState::Latched;
                self.overload_changed(&group, from, OverloadState::Latched, "loss");
                error!(feed = %feed, queue = %queue, "a never-drop queue lost an item: latched until overload.clear");
                if kill_switch {
                    self.run_kill_switch(&feed, &queue);
                }
            }
        } else if record.state == OverloadState::Up {
            record.state = OverloadState::Degraded;
            self.overload_changed(&group, OverloadState::Up, OverloadState::Degraded, "loss");
        }
    }

    fn run_kill_switch(&self, feed: &str, queue: &str) {
        if self.stopping.load(Ordering::Acquire) {
            return;
        }
        let Some(hook) = self.kill_switch.lock().clone() else {
            return;
        };
        let feed = feed.to_owned();
        let queue = queue.to_owned();
        let spawned = std::thread::Builder::new()
            .name(format!("mongoose-kill-switch-{feed}"))
            .spawn(move || hook(&feed, &queue));
        if let Err(error) = spawned {
            error!(%error, "could not start the overload kill-switch thread");
        }
    }

    pub(super) fn blocking_deadline(state: &State<T, P>) -> Option<Duration> {
        state
            .bindings
            .iter()
            .filter(|binding| binding.settings.policy == OverloadPolicy::BlockWithDeadline)
            .filter_map(|binding| binding.settings.block_deadline)
            .min()
    }

    pub(super) fn blocking_queue_without_room(state: &State<T, P>) -> Option<String> {
        state
            .bindings
            .iter()
            .find(|binding| {
                binding.settings.policy == OverloadPolicy::BlockWithDeadline && !binding.room_now()
            })
            .map(|binding| binding.shared.name.to_string())
    }

    pub(super) fn refuse(
        &self,
        state: &mut State<T, P>,
        kind: FailureKind,
        reason: String,
    ) -> PublishRefused {
        state.counts.refused += 1;
        let mut latched = Vec::new();
        for binding in state.bindings.iter_mut() {
            if binding.settings.policy == OverloadPolicy::BlockWithDeadline && !binding.room_now() {
                binding.refused += 1;
                latched.push((
                    binding.shared.group.to_string(),
                    binding.shared.name.to_string(),
                    binding.settings.kill_switch,
                ));
            }
        }
        for (group, queue, kill_switch) in latched {
            let record = state.overload.health.entry(group.clone()).or_default();
            record.last_loss = Some(Instant::now());
            if record.state != OverloadState::Latched {
                let from = record.state;
                record.state = OverloadState::Latched;
                self.overload_changed(&group, from, OverloadState::Latched, "refused");
                error!(feed = %self.name, queue = %queue, "a blocking publish was refused: latched until overload.clear");
                if kill_switch {
                    self.run_kill_switch(&self.name, &queue);
                }
            }
        }
        PublishRefused {
            feed: self.name.to_string(),
            kind,
            evidence: EvidenceStatus::NotDegraded,
            reason,
        }
    }

    /// Takes new overload settings (a reload): the feed's default (`None`: the one it
    /// has, or pause/drop by default) and each group's override; every queue's
    /// settings are worked out again at once, under the lock every offer takes, so an
    /// offer runs under the old settings or the new, never a mix. A queue's health
    /// (latched, degraded) and its counts stay.
    pub fn retune_overload(
        &self,
        default: Option<OverloadSettings>,
        overrides: HashMap<String, OverloadSettings>,
    ) {
        let mut state = self.state.lock();
        if let Some(settings) = default {
            state.overload.default_settings = settings;
            state.overload.explicit_default = true;
        }
        state.overload.overrides = overrides;
        let mut bindings = std::mem::take(&mut state.bindings);
        for binding in &mut bindings {
            let (settings, explicit) = Self::effective_settings(&state, &binding.shared.group);
            binding.settings = settings;
            binding.explicit = explicit;
        }
        state.bindings = bindings;
        info!(feed = %self.name, "overload settings changed (a reload)");
    }

    /// Queues without an explicit policy pause (a re-readable source) or drop ([`Publisher::set_pause_by_default`]).
    pub(super) fn default_to_pause(&self, pause: bool) {
        let mut state = self.state.lock();
        state.overload.pause_by_default = pause;
        state.overload.default_decided = true;
        let settings = Self::default_settings(&state);
        for binding in state
            .bindings
            .iter_mut()
            .filter(|binding| !binding.explicit)
        {
            let changed = binding.settings.policy != settings.policy;
            binding.settings = settings;
            if !binding.announced {
                // the policy the queue really has, now that the source said it
                binding.announced = true;
                info!(feed = %self.name, queue = %binding.shared.name, policy = %settings.policy, "subscribed");
            } else if changed {
                info!(feed = %self.name, queue = %binding.shared.name, policy = %settings.policy,
                    "the queue takes the feed's default policy, set by its source");
            }
        }
    }
}
