//! The publisher of one feed: sequence numbers, one binding per subscriber queue, the
//! overload policies, the acknowledgement window, the startup cache and in-band status.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::{
    agent, BatchEnd, Epoch, FailureKind, OverloadSettings, Position, PublishRefused, Refusal,
    SourceCommitter, SourceOutput, SourceState, TryPublish,
};
use parking_lot::Mutex;
use tracing::{error, warn};

use crate::checkpoint::HoldCell;
use crate::feed::{DataMapper, FeedBuilder};
use crate::queue::{Binding, HealthRecord, OverloadObserver, RetainedPoint};
use crate::window::{Window, WindowEntry};

mod acknowledge;
mod cache;
mod overload;
mod publish;
mod status;
mod subscriptions;

use cache::{Cached, Deferred};
pub use overload::KillSwitch;
use publish::Chunk;
pub use subscriptions::{Released, Subscription};

struct State<T, P: Position> {
    sequence: u64,
    epoch: Epoch,
    positioned: bool,
    started: bool,
    stopping: bool,
    bindings: Vec<Binding<T>>,
    retained: Vec<RetainedPoint>,
    window: Window<P>,
    cache: VecDeque<Cached<T, P>>,
    /// The shared items of a fan-out, oldest first, reused once every queue released
    /// them (see [`Publisher::share`]).
    shared_pool: VecDeque<Arc<T>>,
    waiting_status: Option<SourceState>,
    published_status: Option<SourceState>,
    startup_status_pending: bool,
    holds: HashMap<String, Arc<HoldCell>>,
    health: HashMap<String, HealthRecord>,
    default_settings: OverloadSettings,
    explicit_default: bool,
    pause_by_default: bool,
    overrides: HashMap<String, OverloadSettings>,
    dropped: u64,
    refused: u64,
    downgraded: u64,
    filtered: u64,
    pauses: u64,
    paused_now: bool,
    completion_failures_of_removed: u64,
    /// A committer is registered ([`SourceOutput::acknowledge_with`]).
    has_committer: bool,
    /// The highest sequence a successful commit covered (issue 9, item 8).
    committed: u64,
    source_state: SourceState,
    detail: Option<String>,
    version: u64,
    unterminated: u64,
    /// Bytes of rotated inputs proven unread (see `report_rotated_unread`).
    rotated_unread_bytes: u64,
    /// Rotated inputs that held, or may have held, unread bytes.
    rotated_unread_files: u64,
    /// Loss records of earlier runs reported at this start.
    earlier_losses: u64,
    /// The input files of a many-file source (`report_files`).
    files: Vec<mongoose_core::FileLag>,
    bounded: bool,
    status_events: bool,
    fallback_warned: bool,
    next_id: u64,
}

/// The publisher of one feed of items `T` with source positions `P`.
///
/// It implements [`SourceOutput`]: a source publishes with
/// [`SourceOutput::try_publish`] and commits what [`SourceOutput::poll_acknowledgements`]
/// reports. Groups subscribe with [`Publisher::subscribe`] and read with the
/// [`QueueReader`](crate::QueueReader) they get.
pub struct Publisher<T, P: Position = u64> {
    name: Arc<str>,
    queue_capacity: usize,
    mapper: Option<DataMapper<T>>,
    fan_out_clone: Option<fn(&T) -> T>,
    state: Mutex<State<T, P>>,
    committer: Mutex<Option<Box<dyn SourceCommitter<P>>>>,
    acknowledged_scratch: Mutex<Vec<WindowEntry<P>>>,
    committing_thread: AtomicU64,
    deferred: Mutex<Vec<Deferred<T, P>>>,
    has_deferred: AtomicBool,
    kill_switch: Mutex<Option<KillSwitch>>,
    /// What the consumers that store positions hold, reported at their start.
    saved_positions: Mutex<Vec<mongoose_core::ConsumerPosition>>,
    stopping: AtomicBool,
    overload_observers: Mutex<Vec<OverloadObserver>>,
}

impl<T, P: Position> std::fmt::Debug for Publisher<T, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("feed", &self.name)
            .finish()
    }
}

fn thread_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TOKEN: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    TOKEN.with(|token| *token)
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
        let explicit_default = builder.overload.is_some();
        let state = State {
            sequence: 0,
            epoch: Epoch::NONE,
            positioned: false,
            started: false,
            stopping: false,
            bindings: Vec::new(),
            retained: Vec::new(),
            window: Window::new(),
            cache: VecDeque::new(),
            waiting_status: None,
            published_status: None,
            startup_status_pending: false,
            holds: HashMap::new(),
            health: HashMap::new(),
            default_settings: builder.overload.unwrap_or_default(),
            explicit_default,
            pause_by_default: false,
            overrides: builder.overrides,
            shared_pool: VecDeque::new(),
            dropped: 0,
            refused: 0,
            downgraded: 0,
            filtered: 0,
            pauses: 0,
            paused_now: false,
            completion_failures_of_removed: 0,
            has_committer: false,
            committed: 0,
            source_state: SourceState::Starting,
            detail: None,
            version: 0,
            unterminated: 0,
            rotated_unread_bytes: 0,
            rotated_unread_files: 0,
            earlier_losses: 0,
            files: Vec::new(),
            bounded: builder.bounded,
            status_events: builder.status_events,
            fallback_warned: false,
            next_id: 1,
        };
        Publisher {
            name: Arc::from(builder.name.as_str()),
            queue_capacity: builder.queue_capacity,
            mapper: builder.mapper,
            fan_out_clone: builder.fan_out_clone,
            state: Mutex::new(state),
            committer: Mutex::new(None),
            acknowledged_scratch: Mutex::new(Vec::new()),
            committing_thread: AtomicU64::new(0),
            deferred: Mutex::new(Vec::new()),
            has_deferred: AtomicBool::new(false),
            kill_switch: Mutex::new(None),
            saved_positions: Mutex::new(Vec::new()),
            overload_observers: Mutex::new(Vec::new()),
            stopping: AtomicBool::new(false),
        }
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

impl<T: Send + Sync + 'static, P: Position> SourceOutput<T, P> for Publisher<T, P> {
    fn try_publish(&self, item: T, position: P) -> TryPublish<T> {
        if self.nested() {
            return TryPublish::Retry(item);
        }
        let (mut state, _reservation) = self.reserve();
        state.positioned = true;
        if !state.started {
            let epoch = state.epoch;
            state.cache.push_back(Cached::Positioned {
                item,
                epoch,
                position,
            });
            return TryPublish::Published;
        }
        if !state.cache.is_empty() || state.waiting_status.is_some() {
            self.flush(&mut state);
        }
        if self.hold_reason(&mut state).is_some() {
            Self::note_pause(&mut state);
            return TryPublish::Paused(item);
        }
        state.paused_now = false;
        let epoch = state.epoch;
        self.publish_positioned(&mut state, item, epoch, position);
        self.drain_deferred(&mut state);
        TryPublish::Published
    }

    fn try_publish_batch(&self, next: &mut dyn FnMut() -> Option<(T, P)>) -> BatchEnd<T, P> {
        if self.nested() {
            return match next() {
                Some((item, position)) => BatchEnd::Returned(item, position, Refusal::Retry),
                None => BatchEnd::Exhausted,
            };
        }
        let (mut state, _reservation) = self.reserve();
        state.positioned = true;
        if !state.started {
            while let Some((item, position)) = next() {
                let epoch = state.epoch;
                state.cache.push_back(Cached::Positioned {
                    item,
                    epoch,
                    position,
                });
            }
            return BatchEnd::Exhausted;
        }
        if !state.cache.is_empty() || state.waiting_status.is_some() {
            self.flush(&mut state);
        }
        loop {
            if self.hold_reason(&mut state).is_some() {
                Self::note_pause(&mut state);
                break BatchEnd::Paused;
            }
            let pulled = match self.publish_chunk(&mut state, next) {
                Chunk::Unavailable => next(),
                Chunk::Full => continue,
                Chunk::Exhausted => None,
                Chunk::Deferred(item, position) => Some((item, position)),
                Chunk::Panicked(panic) => std::panic::resume_unwind(panic),
            };
            let Some((item, position)) = pulled else {
                // the feed has room and the source holds nothing: not paused, even if
                // an earlier batch ended "paused" after its last item filled a queue
                state.paused_now = false;
                self.drain_deferred(&mut state);
                break BatchEnd::Exhausted;
            };
            // what the producer did while producing this item (a nested `filtered`, a
            // push publish) happened before it: it goes first, in order
            self.drain_deferred(&mut state);
            if self.hold_reason(&mut state).is_some() {
                Self::note_pause(&mut state);
                break BatchEnd::Returned(item, position, Refusal::Paused);
            }
            state.paused_now = false;
            let epoch = state.epoch;
            self.publish_positioned(&mut state, item, epoch, position);
            self.drain_deferred(&mut state);
        }
    }

    fn publish(&self, item: T) -> Result<(), PublishRefused> {
        if self.nested() {
            self.defer(Deferred::Publish(item));
            return Ok(());
        }
        let on_agent = agent::is_agent_thread();
        let started_waiting = Instant::now();
        loop {
            let (mut state, _reservation) = self.reserve();
            let blocked = if on_agent || !state.started {
                None
            } else {
                Self::blocking_queue_without_room(&state)
            };
            match blocked {
                None => {
                    // on an agent thread a full BLOCK queue drops after the spin, counted
                    // as dropped and downgraded: an agent thread never waits
                    self.publish_locked(&mut state, item);
                    self.drain_deferred(&mut state);
                    return Ok(());
                }
                Some(queue) => {
                    if state.stopping {
                        let reason = format!("server is stopping; queue {queue} had no room");
                        return Err(self.refuse(&mut state, FailureKind::RefusedState, reason));
                    }
                    let deadline = Self::blocking_deadline(&state).unwrap_or_default();
                    if started_waiting.elapsed() >= deadline {
                        let reason = format!(
                            "queue {queue} had no room within {} ms",
                            deadline.as_millis()
                        );
                        return Err(self.refuse(&mut state, FailureKind::RefusedDeadline, reason));
                    }
                }
            }
            // wait for room without holding the publish lock
            drop(state);
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    fn cache(&self, item: T, position: P) {
        if self.nested() {
            self.defer(Deferred::Cache(item, position));
            return;
        }
        let (mut state, _reservation) = self.reserve();
        state.positioned = true;
        let epoch = state.epoch;
        state.cache.push_back(Cached::Positioned {
            item,
            epoch,
            position,
        });
        self.flush(&mut state);
        self.drain_deferred(&mut state);
    }

    fn filtered(&self, position: P, reason: &str) {
        warn!(feed = %self.name, ?position, reason, "input filtered: no item published for it");
        if self.nested() {
            self.defer(Deferred::Filtered(position));
            return;
        }
        Self::filter_locked(&mut self.state.lock(), position);
    }

    fn poll_acknowledgements(&self) -> usize {
        let mut committer = self.committer.lock();
        let mut acknowledged = self.acknowledged_scratch.lock();
        acknowledged.clear();
        // the highest sequence handed to the committer, and whether a commit must cover
        // something (new acknowledgements, or a commit that failed before: retried on
        // every poll until it succeeds, at stop too; issue 9, item 8)
        let (handed, uncommitted) = {
            let mut state = self.state.lock();
            let mut done = u64::MAX;
            for binding in &state.bindings {
                done = done.min(binding.done_through());
            }
            state
                .retained
                .retain(|point| point.done_through() != u64::MAX);
            for point in &state.retained {
                done = done.min(point.done_through());
            }
            state.window.acknowledge_through(done, &mut acknowledged);
            let handed = state.window.acknowledged();
            (handed, state.committed < handed)
        };
        let count = acknowledged.len();
        if let Some(committer) = committer.as_mut() {
            for entry in acknowledged.iter() {
                committer.acknowledged(entry.sequence, entry.epoch, entry.position);
            }
            if uncommitted {
                match committer.commit() {
                    Ok(()) => {
                        let mut state = self.state.lock();
                        state.committed = state.committed.max(handed);
                    }
                    Err(error) => {
                        error!(feed = %self.name, %error, "commit failed: retried on the next poll; until it succeeds the feed is not settled, and a restart re-delivers the items it covers");
                    }
                }
            }
        }
        count
    }

    fn flush_paused(&self) -> bool {
        if self.nested() {
            return false;
        }
        let (mut state, _reservation) = self.reserve();
        let done = self.flush(&mut state);
        self.drain_deferred(&mut state);
        done
    }

    fn acknowledge_with(&self, committer: Box<dyn SourceCommitter<P>>) {
        *self.committer.lock() = Some(committer);
        let mut state = self.state.lock();
        state.positioned = true;
        state.has_committer = true;
        // a new committer (a restarted source) starts from its own durable position:
        // what an earlier one failed to commit is read and published again
        state.committed = state.window.acknowledged();
    }

    fn set_epoch(&self, epoch: Epoch) {
        self.state.lock().epoch = epoch;
    }

    fn set_pause_by_default(&self, pause: bool) {
        let mut state = self.state.lock();
        state.pause_by_default = pause;
        let settings = Self::default_settings(&state);
        for binding in state
            .bindings
            .iter_mut()
            .filter(|binding| !binding.explicit)
        {
            binding.settings = settings;
        }
    }

    fn report_state(&self, source_state: SourceState, detail: Option<&str>) {
        if self.nested() {
            self.defer(Deferred::Status(source_state));
            return;
        }
        let (mut state, _reservation) = self.reserve();
        let changed = state.source_state != source_state || state.detail.as_deref() != detail;
        state.source_state = source_state;
        state.detail = detail.map(str::to_owned);
        if changed {
            state.version += 1;
        }
        if source_state == SourceState::EndOfStream {
            state.bounded = true;
        }
        if state.status_events {
            self.report_status(&mut state, source_state);
        }
        self.drain_deferred(&mut state);
    }

    fn set_unterminated_bytes(&self, bytes: u64) {
        self.state.lock().unterminated = bytes;
    }

    fn report_rotated_unread(&self, file: &str, bytes: Option<u64>) {
        let mut state = self.state.lock();
        state.rotated_unread_files += 1;
        state.rotated_unread_bytes += bytes.unwrap_or(0);
        warn!(feed = %self.name, file, bytes = ?bytes,
            "a rotated input was not read to its end (compressed or deleted first): the feed is not lossless");
    }

    fn report_files(&self, files: &[mongoose_core::FileLag]) {
        let mut state = self.state.lock();
        state.files.clear();
        state.files.extend_from_slice(files);
    }

    fn saved_positions(&self) -> Vec<mongoose_core::ConsumerPosition> {
        self.saved_positions.lock().clone()
    }
}
