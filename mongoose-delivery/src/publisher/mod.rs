//! The publisher of one feed: sequence numbers, one binding per subscriber queue, the
//! overload policies, the acknowledgement window, the startup cache and in-band status.
//!
//! One file per job, each an `impl Publisher` block working on its part of the one
//! locked [`State`]:
//!
//! - `subscriptions`: subscribe, unsubscribe, retire a queue, the operator release;
//! - `publish`: the holds of a positioned publish, the batch fast path, delivering an
//!   item to every queue, the push publish;
//! - `cache`: the startup cache and the operations deferred by a data mapper;
//! - `overload`: the queues' policies, drops and refusals, health, the kill switch;
//! - `acknowledge`: the acknowledgement poll and commit, checkpoint holds, epochs;
//! - `status`: the in-band status events and the feed's status (book: guarantees/status.md);
//! - `tap`: the operator's live sample of the published items.
//!
//! This file holds the types, the constructor, the commit reservation (a publish nested
//! in a data mapper is deferred, not deadlocked) and the [`SourceOutput`] implementation,
//! each method of which delegates to its job's file. One `Mutex<State>` guards what a
//! publish touches; the committer's lock is taken before it, never while it is held.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use mongoose_core::context::thread_token;
use mongoose_core::{
    BatchEnd, CoreError, Epoch, Position, PublishRefused, SourceCommitter, SourceOutput,
    SourceStart, SourceState, TryPublish,
};
use parking_lot::Mutex;

use crate::feed::{DataMapper, FeedBuilder};
use crate::queue::{Binding, OverloadObserver, RetainedPoint};
use crate::window::WindowEntry;

mod acknowledge;
mod cache;
mod overload;
mod publish;
mod status;
mod subscriptions;
mod tap;
mod wake;

use acknowledge::AckState;
use cache::{CacheState, Cached, Deferred};
pub use overload::KillSwitch;
use overload::Overload;
use status::{Counts, SourceReport, StatusEvents};
pub use subscriptions::{Released, Subscription};
pub use tap::TapText;

/// The feed's state under its one publish lock: the queues and the numbering every
/// job reads, then one part per job.
struct State<T, P: Position> {
    /// The last sequence number given (an item, a filtered input).
    sequence: u64,
    /// The epoch of the positions published now ([`SourceOutput::set_epoch`]).
    epoch: Epoch,
    /// The feed has a source with positions (a positioned publish or a committer).
    positioned: bool,
    /// The startup completed ([`Publisher::start_complete`]).
    started: bool,
    /// The server began to stop ([`Publisher::begin_stop`]).
    stopping: bool,
    /// The next id of a subscription or a queue.
    next_id: u64,
    /// One binding per live subscriber queue.
    bindings: Vec<Binding<T>>,
    /// What removed queues were given and did not process.
    retained: Vec<RetainedPoint>,
    /// The shared items of a fan-out, oldest first, reused once every queue released
    /// them (see [`Publisher::share`]).
    shared_pool: VecDeque<Arc<T>>,
    /// The last positioned publish found a hold (counted once per pause in `pauses`).
    paused_now: bool,
    /// The acknowledgement window, checkpoint holds and commit progress.
    ack: AckState<P>,
    /// The startup cache.
    cache: CacheState<T, P>,
    /// The queues' policies and overload health.
    overload: Overload,
    /// Loss and pause counters.
    counts: Counts,
    /// The in-band status events.
    events: StatusEvents,
    /// What the source reported about itself.
    source: SourceReport,
}

/// The publisher of one feed of items `T` with source positions `P`.
///
/// It implements [`SourceOutput`]: a source publishes with
/// [`SourceOutput::try_publish`]; the source driver applies what the source registered
/// at start ([`Publisher::apply_start`]) and gives its committer what was processed
/// ([`Publisher::poll_acknowledgements`]). Groups subscribe with [`Publisher::subscribe`] and read with the
/// [`QueueReader`](crate::QueueReader) they get.
pub struct Publisher<T, P: Position = u64> {
    name: Arc<str>,
    queue_capacity: usize,
    mapper: Option<DataMapper<T>>,
    fan_out_clone: Option<fn(&T) -> T>,
    state: Mutex<State<T, P>>,
    committer: Mutex<Option<Box<dyn SourceCommitter<P>>>>,
    acknowledged_scratch: Mutex<Vec<WindowEntry<P>>>,
    /// Debug builds: the last position handed to the committer per lane, with its
    /// epoch, to check it never goes backwards within an epoch and lane (invariant 1).
    #[cfg(debug_assertions)]
    last_handed: Mutex<std::collections::HashMap<u32, (mongoose_core::Epoch, u64)>>,
    committing_thread: AtomicU64,
    deferred: Mutex<Vec<Deferred<T, P>>>,
    has_deferred: AtomicBool,
    kill_switch: Mutex<Option<KillSwitch>>,
    /// What each consumer holds of the feed, reported at its start
    /// (`note_consumer_position`).
    consumer_positions: Mutex<Vec<mongoose_core::ConsumerPosition>>,
    stopping: AtomicBool,
    overload_observers: Mutex<Vec<OverloadObserver>>,
    /// Wakes the feed's source thread, parked by its driver, when a reader made room.
    source_wakeup: Arc<mongoose_core::Wakeup>,
    /// The operator's taps of the published items (one relaxed load a publish while
    /// none is attached).
    tap: mongoose_core::tap::TapPoint,
    /// How an item reads as text for a tap (none: the feed cannot be tapped).
    tap_text: std::sync::OnceLock<TapText<T>>,
    /// Keeps each loss the source reports durably the moment it is reported
    /// ([`Publisher::set_loss_keeper`]).
    loss_keeper: std::sync::OnceLock<LossKeeper>,
}

/// Keeps a loss a source reported (its words) where the next start finds it, before
/// the source may commit past it: a run killed right after cannot forget it.
pub type LossKeeper = Box<dyn Fn(&str) + Send + Sync>;

impl<T, P: Position> std::fmt::Debug for Publisher<T, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("feed", &self.name)
            .finish()
    }
}

/// Clears the commit reservation when the outer operation ends, even on a panic.
struct Reservation<'a> {
    owner: &'a AtomicU64,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.owner.store(0, Ordering::Release);
    }
}

impl<T: Send + Sync + 'static, P: Position> Publisher<T, P> {
    pub(crate) fn from_builder(builder: FeedBuilder<T, P>) -> Self {
        let state: State<T, P> = State {
            sequence: 0,
            epoch: Epoch::NONE,
            positioned: false,
            started: false,
            stopping: false,
            next_id: 1,
            bindings: Vec::new(),
            retained: Vec::new(),
            shared_pool: VecDeque::new(),
            paused_now: false,
            ack: AckState::new(),
            cache: CacheState::new(),
            overload: Overload::new(builder.overload, builder.overrides),
            counts: Counts::default(),
            events: StatusEvents::new(builder.status_events),
            source: SourceReport::new(builder.bounded),
        };
        Publisher {
            name: Arc::from(builder.name.as_str()),
            queue_capacity: builder.queue_capacity,
            mapper: builder.mapper,
            fan_out_clone: builder.fan_out_clone,
            state: Mutex::new(state),
            committer: Mutex::new(None),
            acknowledged_scratch: Mutex::new(Vec::new()),
            #[cfg(debug_assertions)]
            last_handed: Mutex::new(std::collections::HashMap::new()),
            committing_thread: AtomicU64::new(0),
            deferred: Mutex::new(Vec::new()),
            has_deferred: AtomicBool::new(false),
            kill_switch: Mutex::new(None),
            consumer_positions: Mutex::new(Vec::new()),
            overload_observers: Mutex::new(Vec::new()),
            source_wakeup: mongoose_core::Wakeup::new(),
            stopping: AtomicBool::new(false),
            tap: mongoose_core::tap::TapPoint::default(),
            tap_text: std::sync::OnceLock::new(),
            loss_keeper: std::sync::OnceLock::new(),
        }
    }

    /// Sets where each loss the source reports ([`SourceOutput::report_loss`]) is kept
    /// durably, in the source's thread before the report returns (once; the first one
    /// set stays). A source whose losses it keeps itself (a file source, in its loss
    /// file) has none.
    pub fn set_loss_keeper(&self, keeper: LossKeeper) {
        let _ = self.loss_keeper.set(keeper);
    }

    /// The feed's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn nested(&self) -> bool {
        self.committing_thread.load(Ordering::Acquire) == thread_token()
    }

    /// Locks the state and reserves the commit for this thread, so that a publish nested
    /// in it (from the data mapper) is told to retry or deferred instead of deadlocking.
    fn reserve(&self) -> (parking_lot::MutexGuard<'_, State<T, P>>, Reservation<'_>) {
        let guard = self.state.lock();
        self.committing_thread
            .store(thread_token(), Ordering::Release);
        (
            guard,
            Reservation {
                owner: &self.committing_thread,
            },
        )
    }

    /// The server began to stop: blocked publishes are refused and no kill-switch hook
    /// starts.
    pub fn begin_stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.state.lock().stopping = true;
    }
}

/// The driver's side of the feed: what only the source driver (and a test or benchmark
/// standing in for it) calls. A source holds the feed as a [`SourceOutput`], which has
/// none of these.
impl<T: Send + Sync + 'static, P: Position> Publisher<T, P> {
    /// Computes what has been processed and gives it to the committer, outside the
    /// publish lock. Returns the number of items acknowledged.
    ///
    /// The committer is told the last acknowledged item of each run of one epoch and
    /// lane ([`SourceCommitter::acknowledged`] means "everything up to and including
    /// this one"), not every item: once per run and poll, in publish order.
    pub fn poll_acknowledgements(&self) -> usize {
        self.acknowledge_processed()
    }

    /// Replays cached items a full queue paused. Returns true when nothing is left.
    pub fn flush_paused(&self) -> bool {
        self.resume_paused()
    }

    /// Registers how the feed's source commits ([`SourceStart::committer`]). A source
    /// without a committer pays nothing.
    pub fn acknowledge_with(&self, committer: Box<dyn SourceCommitter<P>>) {
        self.register_committer(committer)
    }

    /// Makes PAUSE the feed's default policy (an explicit policy still wins,
    /// [`SourceStart::pause_by_default`]).
    pub fn set_pause_by_default(&self, pause: bool) {
        self.default_to_pause(pause)
    }

    /// Applies what the feed's source registered at start: its epoch, PAUSE by default
    /// and its committer, in that order.
    ///
    /// # Errors
    /// [`CoreError::Source`] when the committer commits another position type than the
    /// feed's (a wiring error: the source and the feed disagree).
    pub fn apply_start(&self, start: SourceStart) -> Result<(), CoreError> {
        let SourceStart {
            epoch,
            pause_by_default,
            committer,
        } = start;
        let committer = committer
            .map(|committer| {
                committer.into_typed::<P>().map_err(|committer| CoreError::Source {
                    source_name: self.name.to_string(),
                    message: format!(
                        "the source's committer commits positions of type {} but its feed carries {}: wire the source to a feed of its own position type",
                        committer.position_type(),
                        std::any::type_name::<P>()
                    ),
                })
            })
            .transpose()?;
        self.enter_epoch(epoch);
        self.default_to_pause(pause_by_default);
        if let Some(committer) = committer {
            self.register_committer(committer);
        }
        Ok(())
    }
}

impl<T: Send + Sync + 'static, P: Position> SourceOutput<T, P> for Publisher<T, P> {
    fn try_publish(&self, item: T, position: P) -> TryPublish<T> {
        self.try_publish_at(item, position)
    }

    fn try_publish_batch(&self, next: &mut dyn FnMut() -> Option<(T, P)>) -> BatchEnd<T, P> {
        self.try_publish_from(next)
    }

    fn publish(&self, item: T) -> Result<(), PublishRefused> {
        self.publish_push(item)
    }

    fn cache(&self, item: T, position: P) {
        self.cache_at(item, position)
    }

    fn filtered(&self, position: P, reason: &str) {
        self.filter_at(position, reason)
    }

    fn commit_processed(&self) -> usize {
        self.acknowledge_processed()
    }

    fn set_epoch(&self, epoch: Epoch) {
        self.enter_epoch(epoch)
    }

    fn report_state(&self, source_state: SourceState, detail: Option<&str>) {
        self.record_source_state(source_state, detail)
    }

    fn set_unterminated_bytes(&self, bytes: u64) {
        self.record_unterminated_bytes(bytes)
    }

    fn report_rotated_unread(&self, file: &str, bytes: Option<u64>) {
        self.record_rotated_unread(file, bytes)
    }

    fn report_loss(&self, what: &str, bytes: Option<u64>) {
        self.record_loss(what, bytes);
        if let Some(keep) = self.loss_keeper.get() {
            keep(what);
        }
    }

    fn report_files(&self, files: &[mongoose_core::FileLag]) {
        self.record_files(files)
    }

    fn consumer_positions(&self) -> Vec<mongoose_core::ConsumerPosition> {
        self.consumer_positions.lock().clone()
    }
}
