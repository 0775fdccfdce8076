//! The wait between reopens of an input that fails to open or to read, and a warning
//! that is logged once and then counted while the failure repeats.

use std::time::{Duration, Instant};

/// The wait before the first reopen of an input that failed to open or to read (other
/// than not existing yet); it doubles with each failure in a row up to
/// [`REOPEN_BACKOFF_MAX`], and starts again once a read succeeds. Without it a path
/// that is a directory (which opens, then fails every read) was reopened in a busy
/// loop (issue 10, item 8).
const REOPEN_BACKOFF_MIN: Duration = Duration::from_millis(10);

/// The longest wait between two reopen attempts of a failing input.
const REOPEN_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// A warning that repeats (the input still cannot be opened or read) is logged the
/// first time, then as a count of the repeats at most this often.
const REPEATED_WARNING_INTERVAL: Duration = Duration::from_secs(10);

/// The wait between reopen attempts of a failing input: none until it fails, then
/// [`REOPEN_BACKOFF_MIN`] doubling up to [`REOPEN_BACKOFF_MAX`].
#[derive(Debug)]
pub(super) struct ReopenBackoff {
    delay: Duration,
    next_attempt: Option<Instant>,
}

impl Default for ReopenBackoff {
    fn default() -> Self {
        ReopenBackoff {
            delay: REOPEN_BACKOFF_MIN,
            next_attempt: None,
        }
    }
}

impl ReopenBackoff {
    /// Whether an attempt may be made now.
    pub(super) fn ready(&self) -> bool {
        self.next_attempt
            .is_none_or(|next_attempt| Instant::now() >= next_attempt)
    }

    /// An attempt failed: the next waits longer.
    pub(super) fn failed(&mut self) {
        self.next_attempt = Some(Instant::now() + self.delay);
        self.delay = (self.delay * 2).min(REOPEN_BACKOFF_MAX);
    }

    /// The input works again.
    pub(super) fn succeeded(&mut self) {
        *self = ReopenBackoff::default();
    }
}

/// A warning that may repeat every attempt: logged the first time, then counted, and
/// the count logged at most every [`REPEATED_WARNING_INTERVAL`].
#[derive(Debug, Default)]
pub(super) struct RepeatedWarning {
    last_logged: Option<Instant>,
    /// Occurrences since the last one logged.
    unlogged: u64,
    /// Occurrences since the condition began.
    pub(super) total: u64,
}

impl RepeatedWarning {
    /// Another occurrence: `Some(unlogged)` when it is to be logged now (with the
    /// number of occurrences not logged since the last one), `None` to stay quiet.
    pub(super) fn occurred(&mut self) -> Option<u64> {
        self.total += 1;
        let now = Instant::now();
        let due = self
            .last_logged
            .is_none_or(|last| now.duration_since(last) >= REPEATED_WARNING_INTERVAL);
        if !due {
            self.unlogged += 1;
            return None;
        }
        self.last_logged = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }

    /// The condition is over: how many times it occurred, if it did.
    pub(super) fn cleared(&mut self) -> Option<u64> {
        let total = self.total;
        *self = RepeatedWarning::default();
        (total > 0).then_some(total)
    }
}
