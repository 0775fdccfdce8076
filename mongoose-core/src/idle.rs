//! Idle strategies: what an agent thread (a processor group's, a source's) does after a
//! duty cycle that found no work ([`IdleStrategy`]), and the [`Idler`] that waits by one
//! (it spins, yields or parks the calling thread; the core starts no thread).

use std::time::Duration;

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
    Backoff {
        /// Idle cycles spent spinning.
        max_spins: u32,
        /// Idle cycles spent yielding after spinning.
        max_yields: u32,
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
            max_yields: 5,
            min_park: Duration::from_micros(50),
            max_park: Duration::from_millis(1),
        }
    }
}

#[derive(Debug)]
/// Idles an agent thread between duty cycles by its [`IdleStrategy`]: a cycle that
/// did work resets the back-off.
pub struct Idler {
    strategy: IdleStrategy,
    spins: u32,
    yields: u32,
    park: Duration,
}

impl Idler {
    /// An idler for `strategy`.
    pub fn new(strategy: IdleStrategy) -> Self {
        Idler {
            strategy,
            spins: 0,
            yields: 0,
            park: Duration::ZERO,
        }
    }

    /// Idles after a cycle that did `work` units, at most until `wake_by`.
    pub fn idle(&mut self, work: usize, wake_by: Option<Duration>) {
        if work > 0 {
            self.spins = 0;
            self.yields = 0;
            self.park = Duration::ZERO;
            return;
        }
        let park = |duration: Duration| {
            let duration = wake_by.map_or(duration, |limit| duration.min(limit));
            std::thread::park_timeout(duration);
        };
        match self.strategy {
            IdleStrategy::BusySpin => std::hint::spin_loop(),
            IdleStrategy::Yield => std::thread::yield_now(),
            IdleStrategy::SleepingMillis(millis) => park(Duration::from_millis(millis.max(1))),
            IdleStrategy::Backoff {
                max_spins,
                max_yields,
                min_park,
                max_park,
            } => {
                if self.spins < max_spins {
                    self.spins += 1;
                    std::hint::spin_loop();
                } else if self.yields < max_yields {
                    self.yields += 1;
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
