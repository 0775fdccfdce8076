//! Status: what the source reports about itself (its state, unterminated bytes,
//! rotated inputs left unread, its files, earlier runs' losses), the in-band status
//! events offered to the queues in order with the items (held behind the startup cache
//! and a full PAUSE queue), and the feed's delivery status (book: guarantees/status.md): `drained`, `settled`,
//! `lossless`, `stalled` with its reason, and the counters behind them.

use std::sync::atomic::Ordering;

use mongoose_core::{OverloadPolicy, Position, SourceState};
use tracing::warn;

use super::{Deferred, Publisher, State};
use mongoose_core::FeedStatusEvent;

use crate::queue::{OverloadState, QueueEntry};
use crate::status::{FeedStatus, SubscriberStatus};

/// The loss and pause counters of the feed's state.
#[derive(Default)]
pub(super) struct Counts {
    /// Items lost (queue drops and operator releases).
    pub(super) dropped: u64,
    /// Blocking publishes refused.
    pub(super) refused: u64,
    /// Drops of a never-drop queue (a fallback).
    pub(super) downgraded: u64,
    /// Inputs the data mapper or the source filtered.
    pub(super) filtered: u64,
    /// Times a positioned publish paused.
    pub(super) pauses: u64,
    /// Completion failures of queues removed since.
    pub(super) completion_failures_of_removed: u64,
}

/// The in-band status events part of the feed's state.
pub(super) struct StatusEvents {
    /// The feed sends status events to its queues.
    pub(super) enabled: bool,
    /// A status not yet offered to the queues.
    pub(super) waiting: Option<SourceState>,
    /// The status the queues were last given.
    pub(super) published: Option<SourceState>,
    /// A status reported during startup waits for the startup cache.
    pub(super) startup_pending: bool,
}

impl StatusEvents {
    pub(super) fn new(enabled: bool) -> Self {
        StatusEvents {
            enabled,
            waiting: None,
            published: None,
            startup_pending: false,
        }
    }
}

/// What the source reported about itself.
pub(super) struct SourceReport {
    /// The source's state ([`SourceOutput::report_state`](mongoose_core::SourceOutput::report_state)).
    pub(super) state: SourceState,
    /// The detail of that state.
    pub(super) detail: Option<String>,
    /// Changes of state or detail.
    pub(super) version: u64,
    /// The source is bounded (or reached its end of stream).
    pub(super) bounded: bool,
    /// Bytes read after the last complete input.
    pub(super) unterminated: u64,
    /// Bytes of rotated inputs proven unread (see `report_rotated_unread`).
    pub(super) rotated_unread_bytes: u64,
    /// Rotated inputs that held, or may have held, unread bytes.
    pub(super) rotated_unread_files: u64,
    /// Loss records of earlier runs reported at this start.
    pub(super) earlier_losses: u64,
    /// Losses the source reported (`report_loss`), and their bytes when known.
    pub(super) losses: u64,
    pub(super) lost_bytes: u64,
    /// The input files of a many-file source (`report_files`).
    pub(super) files: Vec<mongoose_core::FileLag>,
    /// The status warned once that the source never reported a state.
    pub(super) fallback_warned: bool,
    /// The source's duty cycle keeps failing: why (set and cleared by the driver).
    pub(super) failing: Option<String>,
}

impl SourceReport {
    pub(super) fn new(bounded: bool) -> Self {
        SourceReport {
            state: SourceState::Starting,
            detail: None,
            version: 0,
            bounded,
            unterminated: 0,
            rotated_unread_bytes: 0,
            rotated_unread_files: 0,
            earlier_losses: 0,
            losses: 0,
            lost_bytes: 0,
            files: Vec::new(),
            fallback_warned: false,
            failing: None,
        }
    }
}

impl<T: Send + Sync + 'static, P: Position> Publisher<T, P> {
    /// Losses of earlier runs found at this start (records a run that was not lossless
    /// left beside the feed's position): the feed is reported not lossless in this run,
    /// once.
    pub fn note_earlier_losses(&self, records: u64) {
        self.state.lock().source.earlier_losses += records;
    }

    /// Offers the waiting status: to PAUSE queues only when every one has room; to the
    /// others with drop-after-spin semantics.
    pub(super) fn offer_waiting_status(&self, state: &mut State<T, P>) -> bool {
        let Some(status) = state.events.waiting else {
            state.events.startup_pending = false;
            return true;
        };
        let pause_full = state
            .bindings
            .iter_mut()
            .any(|binding| binding.settings.policy == OverloadPolicy::Pause && !binding.has_room());
        if pause_full {
            return false;
        }
        let event = FeedStatusEvent {
            feed: self.name.to_string(),
            state: status,
            sequence: state.sequence,
        };
        let holds_from = state.sequence + 1;
        let mut losses = Vec::new();
        for (index, binding) in state.bindings.iter_mut().enumerate() {
            let room = binding.has_room() || Self::spin_for_room(binding);
            if !room
                || binding
                    .push(QueueEntry::Status(Box::new(event.clone())), holds_from)
                    .is_err()
            {
                losses.push(index);
            }
        }
        for index in losses {
            self.count_drop(state, index, holds_from, false);
        }
        state.events.published = Some(status);
        state.events.waiting = None;
        state.events.startup_pending = false;
        true
    }

    pub(super) fn report_status(&self, state: &mut State<T, P>, status: SourceState) {
        if let Some(waiting) = state.events.waiting {
            if waiting == status {
                return;
            }
            if state.events.published == Some(status) {
                // subscribers already hold it: the waiting one is dropped, nothing sent
                state.events.waiting = None;
                if !state.started {
                    return;
                }
                state.events.startup_pending = false;
                return;
            }
        } else if state.events.published == Some(status) {
            return;
        }
        state.events.waiting = Some(status);
        if !state.started {
            state.events.startup_pending = true;
            return;
        }
        if state.cache.items.is_empty() {
            self.offer_waiting_status(state);
        }
    }

    /// The feed's delivery status (book: guarantees/status.md).
    pub fn status(&self) -> FeedStatus {
        let mut state = self.state.lock();
        state
            .retained
            .retain(|point| point.done_through() != u64::MAX);
        let subscribers: Vec<SubscriberStatus> = state
            .bindings
            .iter()
            .map(|binding| {
                let dispatched = binding.shared.dispatched();
                SubscriberStatus {
                    queue: binding.shared.name.to_string(),
                    position: binding.produced,
                    dispatched,
                    drained: dispatched >= binding.produced,
                    overload: state
                        .overload
                        .health
                        .get(&*binding.shared.group)
                        .map_or(OverloadState::Up, |record| record.state),
                }
            })
            .collect();
        let completion_failures = state.counts.completion_failures_of_removed
            + state
                .bindings
                .iter()
                .map(|binding| binding.shared.completion_failures.load(Ordering::Acquire))
                .sum::<u64>()
            + state
                .retained
                .iter()
                .map(|point| point.shared.completion_failures.load(Ordering::Acquire))
                .sum::<u64>();
        let consumers = state
            .bindings
            .iter()
            .filter(|binding| !binding.shared.fenced_or_dead())
            .count() as u64;
        let held = if state.positioned {
            Self::stalled_reason(&state)
        } else {
            None
        };
        // a source whose cycle keeps failing cannot complete either, positioned or not
        let stalled = match (state.source.failing.clone(), held) {
            (Some(failing), Some(held)) => Some(format!("{failing}; {held}")),
            (failing, held) => failing.or(held),
        };
        let drained = subscribers.iter().all(|subscriber| subscriber.drained)
            && state.cache.items.is_empty()
            && state.events.waiting.is_none()
            && !state.events.startup_pending;
        let pending_acks = state.ack.window.len() as u64;
        let lossless = state.counts.dropped == 0
            && state.counts.refused == 0
            && completion_failures == 0
            && state.source.earlier_losses == 0
            && state.source.losses == 0
            && state.source.rotated_unread_bytes == 0
            && state.source.rotated_unread_files == 0;
        let source_done = matches!(
            state.source.state,
            SourceState::CaughtUp | SourceState::EndOfStream
        );
        let fallback = state.source.state == SourceState::Starting;
        if fallback && !state.source.fallback_warned {
            state.source.fallback_warned = true;
            warn!(feed = %self.name, "the feed's source never reported a state: its settled verdict rests on drained alone");
        }
        let paused = state.paused_now;
        let acknowledged = state.ack.window.acknowledged();
        let committed = if state.ack.has_committer {
            state.ack.committed
        } else {
            acknowledged
        };
        let settled = (source_done || fallback)
            && drained
            && stalled.is_none()
            && !paused
            && (!state.positioned || pending_acks == 0)
            && committed >= acknowledged;
        // invariant 4: every loss a queue counted is in the feed's count that makes
        // `lossless` false, and a drop of a never-drop queue is a drop; `settled` leaves
        // nothing published behind a live queue
        debug_assert!(
            state.counts.downgraded <= state.counts.dropped
                && state.bindings.iter().map(|b| b.dropped).sum::<u64>() <= state.counts.dropped,
            "invariant 4: feed '{}' counts {} drops ({} downgraded) but its queues {}",
            self.name,
            state.counts.dropped,
            state.counts.downgraded,
            state.bindings.iter().map(|b| b.dropped).sum::<u64>()
        );
        debug_assert!(
            !settled
                || subscribers
                    .iter()
                    .all(|subscriber| subscriber.dispatched >= subscriber.position),
            "invariant 4: feed '{}' settled with an unprocessed item in a queue",
            self.name
        );
        FeedStatus {
            feed: self.name.to_string(),
            state: state.source.state.as_str().to_owned(),
            bounded: state.source.bounded,
            sequence: state.sequence,
            version: state.source.version,
            detail: state.source.detail.clone(),
            drained,
            settled,
            lossless,
            policy: Self::default_settings(&state).policy.as_str().to_owned(),
            dropped: state.counts.dropped,
            refused: state.counts.refused,
            downgraded: state.counts.downgraded,
            paused,
            pauses: state.counts.pauses,
            acknowledged,
            committed,
            pending_acks,
            subscribers,
            consumers,
            stalled,
            unterminated: state.source.unterminated,
            earlier_losses: state.source.earlier_losses,
            rotated_unread_bytes: state.source.rotated_unread_bytes,
            rotated_unread_files: state.source.rotated_unread_files,
            losses: state.source.losses,
            lost_bytes: state.source.lost_bytes,
            completion_failures,
            files: state.source.files.clone(),
        }
    }

    /// Why a positioned feed holds its position and cannot complete (book: guarantees/status.md `stalled`):
    /// no live consumer, a fenced or dead one, or a removed one with a backlog, then
    /// every queue hold (a quarantine, a skipped completion) with its reason.
    fn stalled_reason(state: &State<T, P>) -> Option<String> {
        let consumers = if state.bindings.is_empty() {
            Some("no live consumer".to_owned())
        } else if let Some(fenced) = state
            .bindings
            .iter()
            .find(|binding| binding.shared.fenced_or_dead())
        {
            Some(format!("consumer {} fenced or dead", fenced.shared.name))
        } else {
            state.retained.first().map(|point| {
                format!(
                    "a removed consumer left unprocessed items ({}: {} items)",
                    point.shared.name,
                    point.backlog()
                )
            })
        };
        let held: Vec<String> = state
            .bindings
            .iter()
            .map(|binding| &binding.shared)
            .chain(state.retained.iter().map(|point| &point.shared))
            .filter_map(|shared| {
                let reason = shared.held_reason()?;
                Some(format!("queue {} holds: {reason}", shared.name))
            })
            .collect();
        if held.is_empty() {
            return consumers;
        }
        let held = held.join("; ");
        Some(match consumers {
            Some(reason) => format!("{reason}; {held}"),
            None => held,
        })
    }

    /// Items the data mapper or the source filtered.
    pub fn filtered_count(&self) -> u64 {
        self.state.lock().counts.filtered
    }

    /// The source's state, and its in-band status event ([`SourceOutput::report_state`](mongoose_core::SourceOutput::report_state)).
    pub(super) fn record_source_state(&self, source_state: SourceState, detail: Option<&str>) {
        if self.nested() {
            self.defer(Deferred::Status(source_state));
            return;
        }
        let (mut state, _reservation) = self.reserve();
        let changed =
            state.source.state != source_state || state.source.detail.as_deref() != detail;
        state.source.state = source_state;
        state.source.detail = detail.map(str::to_owned);
        if changed {
            state.source.version += 1;
        }
        if source_state == SourceState::EndOfStream {
            state.source.bounded = true;
        }
        if state.events.enabled {
            self.report_status(&mut state, source_state);
        }
        self.drain_deferred(&mut state);
    }

    /// The driver's report that the source's duty cycle keeps failing (or works again).
    pub(crate) fn record_cycle_failing(&self, failing: Option<String>) {
        let mut state = self.state.lock();
        if state.source.failing != failing {
            state.source.failing = failing;
            state.source.version += 1;
        }
    }

    /// Bytes the source read after its last complete input ([`SourceOutput::set_unterminated_bytes`](mongoose_core::SourceOutput::set_unterminated_bytes)).
    pub(super) fn record_unterminated_bytes(&self, bytes: u64) {
        self.state.lock().source.unterminated = bytes;
    }

    /// A rotated input that was not read to its end ([`SourceOutput::report_rotated_unread`](mongoose_core::SourceOutput::report_rotated_unread)).
    pub(super) fn record_rotated_unread(&self, file: &str, bytes: Option<u64>) {
        let mut state = self.state.lock();
        state.source.rotated_unread_files += 1;
        state.source.rotated_unread_bytes += bytes.unwrap_or(0);
        warn!(feed = %self.name, file, bytes = ?bytes,
            "a rotated input was not read to its end (compressed or deleted first): the feed is not lossless");
    }

    /// A loss the source knows of ([`SourceOutput::report_loss`](mongoose_core::SourceOutput::report_loss)).
    pub(super) fn record_loss(&self, what: &str, bytes: Option<u64>) {
        let mut state = self.state.lock();
        state.source.losses += 1;
        state.source.lost_bytes += bytes.unwrap_or(0);
        state.source.version += 1;
        warn!(feed = %self.name, what, bytes = ?bytes,
            "the source reported a loss (input it will never deliver): the feed is not lossless");
    }

    /// The input files of a many-file source ([`SourceOutput::report_files`](mongoose_core::SourceOutput::report_files)).
    pub(super) fn record_files(&self, files: &[mongoose_core::FileLag]) {
        let mut state = self.state.lock();
        state.source.files.clear();
        state.source.files.extend_from_slice(files);
    }
}
