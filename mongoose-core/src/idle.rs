//! Idle strategies: what an agent thread (a processor group's, a source's) does after a
//! duty cycle that found no work ([`IdleStrategy`]), and the [`Idler`] that waits by one
//! (it spins, yields or parks the calling thread; the core starts no thread).
//!
//! A parked thread is woken early by its [`Wakeup`]: a source's feed wakes its group's
//! thread when it published to it, a group's thread wakes the feed's source when it
//! made room in a queue the source waited on. A wake costs a fence and one load when the other
//! thread is not parked, so the hand-off between the two threads of a flow neither
//! waits for a park to end nor keeps a core busy.
//!
//! A thread whose every kind of work arrives through its [`Wakeup`] (a group whose
//! queues and mailbox wake it, a file source whose inotify watch wakes it) may park
//! *deeply* once it was idle for [`DEEP_IDLE_AFTER`] ([`Idler::idle_quiet`]): until a
//! wake or a deadline, not a millisecond at a time. Such a park cannot miss a wake: the
//! idler marks the thread parked first, the caller looks for work once more (one more
//! duty cycle), and only then does the thread park; a waker publishes its work before
//! it looks at the mark (both sides fenced), so either the look sees the work or the
//! waker sees the mark and unparks (an unpark before the park makes it return at once).

use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// What an agent thread does after a duty cycle that did no work.
///
/// A group's parking strategies are woken early by a new control request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum IdleStrategy {
    /// Spin (lowest latency, one core at 100 %).
    BusySpin,
    /// Yield the core to other threads.
    Yield,
    /// Park for this many milliseconds.
    SleepingMillis(u64),
    /// Spin, then yield, then park for a doubling time up to `max_park`.
    ///
    /// The yielding lasts a time, not a count of yields: a yield returns at once on a
    /// free core and after another thread's time slice on a busy one, so a count would
    /// mean a few microseconds on one machine and milliseconds on another. Between the
    /// batches of a steady flow (a source reading its next buffer, a consumer draining
    /// the queue) the thread keeps its core and sees the next batch at once; only after
    /// `yield_for` without work does it park (and is woken by its park's end).
    Backoff {
        /// Idle cycles spent spinning.
        max_spins: u32,
        /// How long the thread yields after spinning, counted from the first idle cycle.
        yield_for: Duration,
        /// The first park.
        min_park: Duration,
        /// The longest park.
        max_park: Duration,
    },
}

impl Default for IdleStrategy {
    fn default() -> Self {
        IdleStrategy::Backoff {
            max_spins: 10,
            yield_for: DEFAULT_YIELD_FOR,
            min_park: Duration::from_micros(50),
            max_park: Duration::from_millis(1),
        }
    }
}

/// How long the default [`IdleStrategy::Backoff`] yields before it parks: about the
/// gap between two batches of a steady flow (a source reading its next buffer while
/// its consumer drained the queue), so a busy pipeline seldom parks, and short enough
/// that a burst costs little CPU after it. A parked thread of a flow is woken by its
/// [`Wakeup`] when the other side has work for it, so a longer yield buys little; an
/// idle thread parks 1 ms at a time.
pub const DEFAULT_YIELD_FOR: Duration = Duration::from_micros(50);

/// How long a thread idles by its strategy (parks of at most `max_park`) before
/// [`Idler::idle_quiet`] parks it deeply: a flow that pauses for less keeps the short
/// parks of its back-off, an idle one stops waking.
pub const DEEP_IDLE_AFTER: Duration = Duration::from_millis(100);

/// Wakes an agent thread its [`Idler`] parked, when another thread has work for it.
///
/// The idler marks it parked just before it parks and clears the mark when the park
/// ends; [`Wakeup::wake`] unparks the thread only when marked (a fence and one load otherwise).
/// In a short park, a wake that comes between the idler's last look for work and its
/// mark is missed: the thread then sleeps to the end of its park (at most `max_park`),
/// as without a wakeup, so a missed wake costs latency, never an item. A deep park
/// ([`Idler::idle_quiet`]) marks first and looks after, so it misses none.
#[derive(Debug, Default)]
pub struct Wakeup {
    parked: AtomicBool,
    thread: Mutex<Option<Thread>>,
}

impl Wakeup {
    /// A wakeup of no thread yet: the first [`Idler`] that parks with it is its thread.
    pub fn new() -> Arc<Self> {
        Arc::new(Wakeup::default())
    }

    /// Unparks the thread if its idler parked it; a fence and one load when it did not.
    #[inline]
    pub fn wake(&self) {
        // the work the caller published is ordered before the look at the mark (the
        // deep park's look for work comes after its mark: one of the two sees the other)
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::Relaxed) {
            self.wake_parked();
        }
    }

    #[cold]
    fn wake_parked(&self) {
        if self.parked.swap(false, Ordering::AcqRel) {
            let thread = self
                .thread
                .lock()
                .unwrap_or_else(|poison| poison.into_inner());
            if let Some(thread) = thread.as_ref() {
                thread.unpark();
            }
        }
    }

    /// True while its thread is parked by its idler.
    pub fn is_parked(&self) -> bool {
        self.parked.load(Ordering::Acquire)
    }

    /// Marks the calling thread parked (it becomes the wakeup's thread) before a park.
    fn parking(&self) {
        let mut thread = self
            .thread
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let current = std::thread::current();
        if thread.as_ref().map(Thread::id) != Some(current.id()) {
            *thread = Some(current);
        }
        drop(thread);
        // SeqCst: ordered before the waker's look at the work it published and this
        // thread's later look, as far as one flag can (see the type's documentation)
        self.parked.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// The park ended (a wake, or its time).
    fn unparked(&self) {
        self.parked.store(false, Ordering::Relaxed);
    }
}

#[derive(Debug)]
/// Idles an agent thread between duty cycles by its [`IdleStrategy`]: a cycle that
/// did work resets the back-off.
pub struct Idler {
    strategy: IdleStrategy,
    spins: u32,
    /// When the current run of idle cycles began yielding.
    yielding_since: Option<Instant>,
    park: Duration,
    wakeup: Arc<Wakeup>,
    /// When the current run of idle cycles began.
    idle_since: Option<Instant>,
    /// Marked parked for a deep park; the caller's next cycle is the last look.
    armed: bool,
    /// Parks that ended (by a wake or their time), counted for the wake-up metrics.
    parks: Arc<AtomicU64>,
}

impl Idler {
    /// An idler for `strategy`, with a [`Wakeup`] of its own ([`Idler::wakeup`]).
    pub fn new(strategy: IdleStrategy) -> Self {
        Idler::with_wakeup(strategy, Wakeup::new())
    }

    /// An idler for `strategy` whose parks `wakeup` ends early (a feed's wakeup of its
    /// source: the source driver's idler parks with it).
    pub fn with_wakeup(strategy: IdleStrategy, wakeup: Arc<Wakeup>) -> Self {
        Idler {
            strategy,
            spins: 0,
            yielding_since: None,
            park: Duration::ZERO,
            wakeup,
            idle_since: None,
            armed: false,
            parks: Arc::new(AtomicU64::new(0)),
        }
    }

    /// How many times this idler parked its thread (each park ends by a wake or its
    /// time: a thread's wake-ups while idle). Shared, to be read from other threads.
    pub fn parks(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.parks)
    }

    /// What wakes the thread this idler parks: give it to whoever has work for it.
    pub fn wakeup(&self) -> &Arc<Wakeup> {
        &self.wakeup
    }

    /// Idles after a cycle that did `work` units, at most until `wake_by`.
    pub fn idle(&mut self, work: usize, wake_by: Option<Duration>) {
        self.idle_quiet(work, wake_by, None);
    }

    /// Idles after a cycle that did `work` units, at most until `wake_by`; with
    /// `quiet_for`, the caller's work arrives only through the [`Wakeup`] (or when
    /// `quiet_for` passed): after [`DEEP_IDLE_AFTER`] of idling, the idler marks the
    /// thread parked and returns (the caller's next cycle is the last look for work),
    /// then, after that cycle found nothing, parks until a wake, `wake_by` or
    /// `quiet_for`. Spinning and yielding strategies never park deeply.
    pub fn idle_quiet(
        &mut self,
        work: usize,
        wake_by: Option<Duration>,
        quiet_for: Option<Duration>,
    ) {
        if work > 0 {
            self.disarm();
            self.spins = 0;
            self.yielding_since = None;
            self.idle_since = None;
            self.park = Duration::ZERO;
            return;
        }
        let idle_since = *self.idle_since.get_or_insert_with(Instant::now);
        let parks_deeply = matches!(
            self.strategy,
            IdleStrategy::SleepingMillis(_) | IdleStrategy::Backoff { .. }
        );
        match quiet_for {
            Some(quiet_for) if parks_deeply && idle_since.elapsed() >= DEEP_IDLE_AFTER => {
                if !self.armed {
                    // the mark before the caller's last look (see the module's documentation)
                    self.wakeup.parking();
                    self.armed = true;
                    return;
                }
                let duration = wake_by.map_or(quiet_for, |limit| quiet_for.min(limit));
                std::thread::park_timeout(duration);
                self.disarm();
                self.parks.fetch_add(1, Ordering::Relaxed);
                return;
            }
            _ => self.disarm(),
        }
        let wakeup = &self.wakeup;
        let parks = &self.parks;
        let park = |duration: Duration| {
            let duration = wake_by.map_or(duration, |limit| duration.min(limit));
            wakeup.parking();
            std::thread::park_timeout(duration);
            wakeup.unparked();
            parks.fetch_add(1, Ordering::Relaxed);
        };
        match self.strategy {
            IdleStrategy::BusySpin => std::hint::spin_loop(),
            IdleStrategy::Yield => std::thread::yield_now(),
            IdleStrategy::SleepingMillis(millis) => park(Duration::from_millis(millis.max(1))),
            IdleStrategy::Backoff {
                max_spins,
                yield_for,
                min_park,
                max_park,
            } => {
                if self.spins < max_spins {
                    self.spins += 1;
                    std::hint::spin_loop();
                } else if self.park.is_zero()
                    && self
                        .yielding_since
                        .get_or_insert_with(Instant::now)
                        .elapsed()
                        < yield_for
                {
                    std::thread::yield_now();
                } else {
                    self.park = if self.park.is_zero() {
                        min_park
                    } else {
                        (self.park * 2).min(max_park)
                    };
                    park(self.park);
                }
            }
        }
    }
}

impl Idler {
    /// Clears the mark of a deep park that did not happen (work was found, or the
    /// caller no longer allows it).
    fn disarm(&mut self) {
        if self.armed {
            self.armed = false;
            self.wakeup.unparked();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backoff(yield_for: Duration) -> IdleStrategy {
        IdleStrategy::Backoff {
            max_spins: 2,
            yield_for,
            min_park: Duration::from_micros(1),
            max_park: Duration::from_micros(4),
        }
    }

    #[test]
    fn a_backoff_spins_then_yields_for_its_time_then_parks_longer_each_time_up_to_the_most() {
        let mut idler = Idler::new(backoff(Duration::from_secs(3600)));
        for _ in 0..2 {
            idler.idle(0, None);
        }
        assert_eq!(idler.spins, 2);
        assert!(idler.yielding_since.is_none(), "spinning first");
        for _ in 0..10 {
            idler.idle(0, None);
        }
        assert!(idler.yielding_since.is_some());
        assert!(idler.park.is_zero(), "still within its hour of yielding");

        let mut idler = Idler::new(backoff(Duration::ZERO));
        let parks: Vec<Duration> = (0..6)
            .map(|_| {
                idler.idle(0, None);
                idler.park
            })
            .collect();
        let micros = Duration::from_micros;
        assert_eq!(
            parks,
            [
                Duration::ZERO,
                Duration::ZERO,
                micros(1),
                micros(2),
                micros(4),
                micros(4)
            ]
        );
    }

    #[test]
    fn a_cycle_that_did_work_starts_the_backoff_again() {
        let mut idler = Idler::new(backoff(Duration::ZERO));
        for _ in 0..5 {
            idler.idle(0, None);
        }
        assert!(!idler.park.is_zero());
        idler.idle(1, None);
        assert_eq!(idler.spins, 0);
        assert!(idler.yielding_since.is_none());
        assert!(idler.park.is_zero());
    }

    #[test]
    fn a_wake_ends_the_park_of_the_idlers_thread_and_is_one_load_when_it_is_not_parked() {
        let wakeup = Wakeup::new();
        wakeup.wake(); // nobody parked: nothing happens
        assert!(!wakeup.is_parked());
        let parked = Arc::clone(&wakeup);
        let thread = std::thread::spawn(move || {
            let mut idler =
                Idler::with_wakeup(IdleStrategy::SleepingMillis(3_600_000), Arc::clone(&parked));
            idler.idle(0, None);
            assert!(
                !parked.is_parked(),
                "the mark is cleared when the park ends"
            );
        });
        while !wakeup.is_parked() && !thread.is_finished() {
            std::thread::yield_now();
        }
        wakeup.wake(); // ends an hour's park
        thread.join().expect("the idler's thread");
    }

    #[test]
    fn a_deep_park_marks_the_thread_before_the_last_look_so_a_wake_after_it_is_not_missed() {
        let (done, finished) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let mut idler = Idler::new(IdleStrategy::default());
            idler.idle_since = Some(Instant::now() - DEEP_IDLE_AFTER);
            let hour = Some(Duration::from_secs(3600));
            // the first idle call only marks the thread parked: the caller looks again
            idler.idle_quiet(0, None, hour);
            assert!(idler.wakeup().is_parked(), "marked before the last look");
            // a waker that published after that look sees the mark and unparks...
            idler.wakeup().wake();
            // ...so the hour's park that follows returns at once
            idler.idle_quiet(0, None, hour);
            assert!(!idler.wakeup().is_parked());
            assert_eq!(idler.parks().load(Ordering::Relaxed), 1);
            // a look that found work clears the mark: no park
            idler.idle_quiet(0, None, hour);
            assert!(idler.wakeup().is_parked());
            idler.idle_quiet(1, None, hour);
            assert!(!idler.wakeup().is_parked());
            done.send(()).expect("the test waits");
        });
        finished
            .recv_timeout(Duration::from_secs(60))
            .expect("the deep park ended on the wake that came before it");
        thread.join().expect("the idler's thread");
    }

    #[test]
    fn the_default_yields_before_it_parks_and_parks_at_most_a_millisecond() {
        let IdleStrategy::Backoff {
            yield_for,
            max_park,
            ..
        } = IdleStrategy::default()
        else {
            panic!("the default is a back-off");
        };
        assert_eq!(yield_for, DEFAULT_YIELD_FOR);
        assert!(max_park <= Duration::from_millis(1));
    }
}
