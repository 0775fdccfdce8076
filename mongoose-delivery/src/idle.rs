//! Idling between duty cycles by an [`IdleStrategy`]: used by processor groups and by
//! the [`SourceDriver`](crate::SourceDriver).

use std::time::Duration;

use mongoose_core::IdleStrategy;

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
