//! [`LogEvery`]: a message that repeats is logged once, then at most once per interval
//! with the count of the times it was not logged in between. A disk that stays full
//! made one warning 544 times in a run (and 54 MB of log); the operator needs the first
//! one, and then to know it goes on.

use std::time::{Duration, Instant};

/// When a repeating message is due: the first time at once, then at most once per
/// interval with the count of the times it was not logged in between.
///
/// ```
/// use std::time::Duration;
/// use mongoose_core::LogEvery;
///
/// let mut every = LogEvery::new(Duration::from_secs(10));
/// assert_eq!(every.due(), Some(0)); // the first time: log it
/// assert_eq!(every.due(), None); // again at once: counted, not logged
/// assert_eq!(every.due(), None);
/// assert_eq!(every.suppressed(), 2);
/// ```
#[derive(Clone, Debug)]
pub struct LogEvery {
    interval: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl LogEvery {
    /// Logs at most once per `interval` (the first time at once).
    pub const fn new(interval: Duration) -> Self {
        LogEvery {
            interval,
            last: None,
            suppressed: 0,
        }
    }

    /// `Some(n)` when the message is due now (`n`: the times it was not logged since
    /// the last time it was), `None` when it is counted instead.
    pub fn due(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < self.interval)
        {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }

    /// The times it was not logged since the last time it was.
    pub fn suppressed(&self) -> u64 {
        self.suppressed
    }

    /// Forgets the history: the next occurrence is logged at once (the condition
    /// ended, and a new one is news).
    pub fn reset(&mut self) {
        self.last = None;
        self.suppressed = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_due_again_after_its_interval_with_the_count_between() {
        let mut every = LogEvery::new(Duration::ZERO);
        assert_eq!(every.due(), Some(0));
        assert_eq!(every.due(), Some(0), "a zero interval logs every time");
        let mut every = LogEvery::new(Duration::from_secs(3600));
        assert_eq!(every.due(), Some(0));
        assert_eq!(every.due(), None);
        every.reset();
        assert_eq!(every.due(), Some(0), "a reset makes the next one news");
    }
}
