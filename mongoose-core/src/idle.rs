//! Idle strategies: what an agent thread (a processor group's, a source's) does after a
//! duty cycle that found no work. The type only: the waiting is done by the engine
//! (`mongoose_delivery::Idler`), as the core starts no thread.

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
