//! The source driver: runs an [`EventSource`] on its own thread against its feed, so a
//! connector only reads and publishes.
//!
//! The driver does, for every source, what each one had to remember before:
//! * marks the thread as the source's agent thread (`source:<name>`), so a blocking
//!   publish on it is refused instead of waiting on itself;
//! * starts the source through [`SourceDriver::start_source`]: applies what its
//!   `start` returned ([`SourceStart`]: epoch, PAUSE by default, committer) to the
//!   feed ([`DrivenOutput::apply_start`]);
//! * runs each duty cycle through [`SourceDriver::cycle`]: gives what the consumers
//!   processed to the source's committer ([`DrivenOutput::poll_acknowledgements`]), replays
//!   what a full queue paused ([`DrivenOutput::flush_paused`]), calls `do_work`, and, after a
//!   cycle that did work, polls the acknowledgements once more (the commit lag: what the
//!   consumers processed during the cycle is committed now, not a cycle later);
//! * idles by the feed's [`IdleStrategy`] after a cycle that did nothing, parking with
//!   the feed's wakeup ([`DrivenOutput::source_wakeup`]), which a reader wakes when it
//!   made room in a queue; after a cycle that published it wakes the consumers' threads
//!   that are parked ([`DrivenOutput::wake_consumers`]), so neither side of the hand-off
//!   waits for its park to end;
//! * retries a failing cycle every 100 ms, logging it once and then as a count at most
//!   every 10 s (no flood); after [`STALL_AFTER_FAILURES`] failures in a row the feed
//!   reports itself stalled with the error, until a cycle works again;
//! * stops the source through [`SourceDriver::stop_source`]: polls the
//!   acknowledgements BEFORE `stop` (what was processed is committed while the source's
//!   committer is still fully open: a file source writes its pointer back and unmaps
//!   it in `stop`) and once more after it (what was processed meanwhile; the server's
//!   ordered shutdown commits again after the groups drained, on the shutdown thread).
//!
//! The contract for a source is in its types: its [`SourceOutput`](mongoose_core::SourceOutput) cannot poll the
//! acknowledgements nor flush paused items ([`SourceDriver`] is the one place that
//! does, through the feed's [`DrivenOutput`]); a source that must commit before it
//! gives input up calls [`SourceOutput::commit_processed`](mongoose_core::SourceOutput::commit_processed). Whoever drives a source by
//! hand (a test, a benchmark) calls [`SourceDriver::start_source`] instead of `start`,
//! [`SourceDriver::cycle`] instead of `do_work` and [`SourceDriver::stop_source`]
//! instead of `stop`, or its committer is never registered and the positions it
//! published are never committed. What a
//! source waits for that needs commits (a file's rotation settling, a slot handed
//! over) progresses because every cycle polls before `do_work`.
//!
//! What stays the source's job: publish with positions, keep an item a full queue
//! paused (`TryPublish::Paused`) and offer it again, treat `Retry` (a nested publish)
//! unlike a pause, return its committer, epoch and PAUSE default from `start`, report
//! BEHIND and CAUGHT_UP.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::{agent, CoreError, EventSource, IdleStrategy, Position, SourceStart, WorkDone};
use tracing::{error, info};

use crate::publisher::Publisher;
use crate::registry::AnyFeed;
use mongoose_core::{Idler, Wakeup};

/// How long a failing duty cycle waits before the next try.
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(100);
/// How often a failing cycle is logged at most (with a count of the others).
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(10);
/// Consecutive failed duty cycles after which the feed reports itself stalled with the
/// error (about 3 s of tries): a source that cannot go on (a pointer inside a frame,
/// a damaged input) is then visible as a stall with its reason, not only in the log,
/// and a run waiting to settle can end.
pub const STALL_AFTER_FAILURES: u64 = 30;

/// What only the [`SourceDriver`] does to a source's feed, at start and around its
/// duty cycles: every feed ([`AnyFeed`], a [`Publisher`]) is one; an output of a source
/// driven by hand (a test's recording output) implements it too. A source never holds
/// one: it publishes into a [`SourceOutput`](mongoose_core::SourceOutput).
pub trait DrivenOutput {
    /// Applies what the source registered at start ([`SourceStart`]: its epoch, PAUSE
    /// by default, its committer).
    ///
    /// # Errors
    /// When the feed cannot take the committer (its positions are of another type).
    fn apply_start(&self, start: SourceStart) -> Result<(), CoreError>;
    /// Gives what was processed to the source's committer
    /// ([`Publisher::poll_acknowledgements`]); returns the commits made.
    fn poll_acknowledgements(&self) -> usize;
    /// Replays items a full queue paused ([`Publisher::flush_paused`]); true when none
    /// is left paused.
    fn flush_paused(&self) -> bool;
    /// The source's duty cycle keeps failing (`Some(why)`: the feed reports itself
    /// stalled with it), or works again (`None`). Only the driver calls it.
    fn report_cycle_failing(&self, _failing: Option<String>) {}
    /// Wakes the consumers' threads parked on the feed's queues; after a cycle that
    /// published. None to wake by default.
    fn wake_consumers(&self) {}
    /// What wakes the source's thread when the driver parked it (a reader that made
    /// room wakes it); `None`: the driver's idler has a wakeup of its own nobody wakes.
    fn source_wakeup(&self) -> Option<Arc<Wakeup>> {
        None
    }
    /// True when nothing published waits to be processed or committed: the driver may
    /// park the source's thread deeply ([`EventSource::quiet_for`]). False by default
    /// (the driver polls).
    fn nothing_in_flight(&self) -> bool {
        false
    }
}

impl<O: DrivenOutput + ?Sized> DrivenOutput for Arc<O> {
    fn apply_start(&self, start: SourceStart) -> Result<(), CoreError> {
        (**self).apply_start(start)
    }
    fn poll_acknowledgements(&self) -> usize {
        (**self).poll_acknowledgements()
    }
    fn flush_paused(&self) -> bool {
        (**self).flush_paused()
    }
    fn report_cycle_failing(&self, failing: Option<String>) {
        (**self).report_cycle_failing(failing);
    }
    fn wake_consumers(&self) {
        (**self).wake_consumers();
    }
    fn source_wakeup(&self) -> Option<Arc<Wakeup>> {
        (**self).source_wakeup()
    }
    fn nothing_in_flight(&self) -> bool {
        (**self).nothing_in_flight()
    }
}

impl<T: Send + Sync + 'static, P: Position> DrivenOutput for Publisher<T, P> {
    fn apply_start(&self, start: SourceStart) -> Result<(), CoreError> {
        Publisher::apply_start(self, start)
    }
    fn poll_acknowledgements(&self) -> usize {
        Publisher::poll_acknowledgements(self)
    }
    fn flush_paused(&self) -> bool {
        Publisher::flush_paused(self)
    }
    fn report_cycle_failing(&self, failing: Option<String>) {
        self.record_cycle_failing(failing);
    }
    fn wake_consumers(&self) {
        Publisher::wake_consumers(self);
    }
    fn source_wakeup(&self) -> Option<Arc<Wakeup>> {
        Some(Publisher::source_wakeup(self))
    }
    fn nothing_in_flight(&self) -> bool {
        Publisher::nothing_in_flight(self)
    }
}

/// Asks a running [`SourceDriver`] to stop after its current cycle.
#[derive(Clone, Debug, Default)]
pub struct DriverStop(Arc<DriverStopState>);

#[derive(Debug, Default)]
struct DriverStopState {
    requested: AtomicBool,
    /// The driver's wakeup, once it runs: a stop ends its park.
    wakeup: std::sync::OnceLock<Arc<Wakeup>>,
}

impl DriverStop {
    /// Asks the driver to stop (and wakes its thread if parked).
    pub fn stop(&self) {
        self.0.requested.store(true, Ordering::Release);
        if let Some(wakeup) = self.0.wakeup.get() {
            wakeup.wake();
        }
    }

    /// True once asked.
    pub fn requested(&self) -> bool {
        self.0.requested.load(Ordering::Acquire)
    }
}

/// Runs one source against its feed until stopped. See the module documentation.
#[derive(Debug)]
pub struct SourceDriver {
    name: String,
    idle: IdleStrategy,
    stop: DriverStop,
}

impl SourceDriver {
    /// A driver for the source of feed `name`, idling by `idle`.
    pub fn new(name: impl Into<String>, idle: IdleStrategy) -> Self {
        SourceDriver {
            name: name.into(),
            idle,
            stop: DriverStop::default(),
        }
    }

    /// The handle that stops [`SourceDriver::run`] after its current cycle.
    pub fn stop_handle(&self) -> DriverStop {
        self.stop.clone()
    }

    /// Starts the source and runs its duty cycles on the calling thread until the stop
    /// handle is used, then stops it. A source that cannot start returns the error (the
    /// feed can never deliver); a failing cycle is retried.
    pub fn run(&self, source: &mut dyn EventSource, feed: &dyn AnyFeed) -> Result<(), CoreError> {
        let name = &self.name;
        let _agent = agent::mark_current_thread(&format!("source:{name}"));
        let mut idler = match feed.source_wakeup() {
            Some(wakeup) => Idler::with_wakeup(self.idle, wakeup),
            None => Idler::new(self.idle),
        };
        let _ = self.stop.0.wakeup.set(Arc::clone(idler.wakeup()));
        source.set_wakeup(Arc::clone(idler.wakeup()));
        Self::start_source(source, feed)?;
        info!(feed = %name, "source started");
        let mut failures = 0u64;
        let mut unlogged = 0u64;
        let mut last_logged: Option<Instant> = None;
        while !self.stop.requested() {
            match Self::cycle(source, feed) {
                Ok(WorkDone(work)) => {
                    if failures > 0 {
                        info!(feed = %name, failures, "the source works again");
                        if failures >= STALL_AFTER_FAILURES {
                            feed.report_cycle_failing(None);
                        }
                        failures = 0;
                        unlogged = 0;
                        last_logged = None;
                    }
                    // an idle source whose input announces itself parks until it
                    // does (or its safety look), once nothing it published waits
                    let quiet = if work == 0 && feed.nothing_in_flight() {
                        source.quiet_for()
                    } else {
                        None
                    };
                    idler.idle_quiet(work, None, quiet);
                }
                Err(error) => {
                    failures += 1;
                    if failures == STALL_AFTER_FAILURES {
                        feed.report_cycle_failing(Some(format!(
                            "the source's duty cycle failed {failures} times in a row (retried every 100 ms): {error}"
                        )));
                    }
                    let due = last_logged.is_none_or(|last| last.elapsed() >= FAILURE_LOG_EVERY);
                    if due {
                        error!(feed = %name, %error, failures, unlogged,
                            "source duty cycle failed; retrying every 100 ms (this error is repeated at most every 10 s, with a count)");
                        last_logged = Some(Instant::now());
                        unlogged = 0;
                    } else {
                        unlogged += 1;
                    }
                    std::thread::sleep(RETRY_AFTER_FAILURE);
                }
            }
        }
        let stopped = Self::stop_source(source, feed);
        if let Err(error) = &stopped {
            error!(feed = %name, %error, "source stop failed: what it processed may be re-delivered");
        }
        info!(feed = %name, "source stopped");
        stopped
    }

    /// Starts `source` and applies what it registered ([`SourceStart`]) to its `feed`,
    /// before any cycle. [`SourceDriver::run`] uses it; a test or benchmark driving a
    /// source by hand calls it instead of `start`.
    pub fn start_source<S, F>(source: &mut S, feed: &F) -> Result<(), CoreError>
    where
        S: EventSource + ?Sized,
        F: DrivenOutput + ?Sized,
    {
        let start = source.start()?;
        feed.apply_start(start)
    }

    /// One duty cycle of `source` against its `feed`: polls the acknowledgements
    /// (commits what the consumers processed), replays paused items, calls `do_work`,
    /// and, when the cycle did work, wakes the consumers' threads that are parked and
    /// polls the acknowledgements once more (what was processed during the cycle is
    /// committed now). Returns the work of the cycle,
    /// commits included. [`SourceDriver::run`] uses it; a test or benchmark driving a
    /// source by hand calls it instead of `do_work`, which no longer commits.
    pub fn cycle<S, F>(source: &mut S, feed: &F) -> Result<WorkDone, CoreError>
    where
        S: EventSource + ?Sized,
        F: DrivenOutput + ?Sized,
    {
        let mut work = feed.poll_acknowledgements();
        feed.flush_paused();
        let WorkDone(done) = source.do_work()?;
        if done > 0 {
            feed.wake_consumers();
            // commit again after a cycle that published (the commit lag)
            work += done + feed.poll_acknowledgements();
        }
        Ok(WorkDone(work))
    }

    /// Stops `source`: polls the acknowledgements before its `stop` (commits what was
    /// processed while the source's committer is fully open) and once more after it
    /// (what was processed while it stopped). [`SourceDriver::run`] uses it; a test or
    /// benchmark driving a source by hand calls it instead of `stop`.
    pub fn stop_source<S, F>(source: &mut S, feed: &F) -> Result<(), CoreError>
    where
        S: EventSource + ?Sized,
        F: DrivenOutput + ?Sized,
    {
        feed.poll_acknowledgements();
        let stopped = source.stop();
        feed.poll_acknowledgements();
        stopped
    }
}
