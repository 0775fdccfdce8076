//! Sinks: where processors' outputs go, and what a sink says happened to each one.
//!
//! Every output is a prepared command ([`Output`]): its payload, the [`OutputKey`] that
//! names it for good (the input that caused it and its index within that input's
//! delivery, plus the writer that made it) and the attempt count.
//! A sink answers each attempt with a [`SinkOutcome`]:
//!
//! - [`SinkOutcome::Published`]: the target holds it (with what proves it: a file's
//!   durable length, an HTTP status, a broker's offset);
//! - [`SinkOutcome::NotPublished`]: verified not held: refused before the target took
//!   ownership (a connection refused, a 4xx), or a permanent error. `retryable` says
//!   whether another attempt may succeed (a 5xx, a connection refused) or not (a 4xx,
//!   an output the target can never take);
//! - [`SinkOutcome::Uncertain`]: the target may or may not hold it: a timeout after the
//!   request was sent, a lost acknowledgement, a broken connection, a crash after the
//!   hand-off. It stays uncertain until recovery attaches verified evidence; it is
//!   never turned into "not published" because the target looks empty. Another
//!   attempt sends it again with the same key, so a target that de-duplicates by key
//!   (an HTTP `Idempotency-Key`, a file sink's key index) holds it once.
//!
//! Attempts are bounded by a retry budget and an expiry ([`RetryBudget`]); what an
//! exhausted or expired output does is the operator's policy ([`ExhaustedPolicy`]):
//! hold the feed (the default: its position is not committed past the input) or count
//! it lost and go on.
//!
//! ```
//! use mongoose_core::sink::{Output, OutputKey, Sink, SinkOutcome};
//! use mongoose_core::Epoch;
//!
//! /// Keeps what it is given: every output is published.
//! #[derive(Default)]
//! struct Memory(Vec<Vec<u8>>);
//! impl Sink for Memory {
//!     fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
//!         for output in outputs {
//!             self.0.push(output.payload.clone());
//!             outcomes.push(SinkOutcome::Published { evidence: format!("#{}", self.0.len()) });
//!         }
//!     }
//! }
//!
//! let key = OutputKey::new("lines", Epoch(3), 0, 120, 0, 1);
//! assert_eq!(key.to_string(), "lines/3/0/120/0/1");
//! let mut sink = Memory::default();
//! let mut outcomes = Vec::new();
//! sink.publish(&[Output::new(key, b"alert".to_vec())], &mut outcomes);
//! assert!(outcomes[0].is_published());
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::delivery::Delivery;
use crate::position::Epoch;

/// Names one output for good: the input that caused it (`feed`, `epoch`, `lane`,
/// `position`), its index among the outputs of that input's delivery, and the writer
/// that made it (a stable id of the processor: [`writer_id`] of its group and name). The
/// same input re-delivered after a crash makes the same keys, so a sink can drop a key
/// it already holds; two processors writing outputs of one input into one sink make
/// different keys, so neither is taken for the other's.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OutputKey {
    /// The input's feed.
    pub feed: Arc<str>,
    /// The input's epoch.
    pub epoch: Epoch,
    /// The input's lane (0 for a single-lane feed).
    pub lane: u32,
    /// The input's source position (offset within the lane).
    pub position: u64,
    /// The output's index within the delivery of the input (0, 1, ...).
    pub index: u32,
    /// The writer that made it: [`writer_id`] of its name (the server names a
    /// processor's writer `group/processor`), 0 for a writer given no name. Never a
    /// position in a configuration, so keys survive a change of the configuration.
    pub writer: u64,
}

/// The stable 64-bit id of the writer named `name` (FNV-1a: the same on every build and
/// machine; never 0, which is the id of a writer given no name).
///
/// ```
/// use mongoose_core::sink::writer_id;
/// assert_eq!(writer_id("forward/copy"), writer_id("forward/copy"));
/// assert_ne!(writer_id("forward/copy-e"), writer_id("forward/copy-w"));
/// assert_ne!(writer_id(""), 0);
/// ```
pub fn writer_id(name: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = name.bytes().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    });
    hash.max(1)
}

impl OutputKey {
    /// A key from its parts.
    pub fn new(
        feed: &str,
        epoch: Epoch,
        lane: u32,
        position: u64,
        index: u32,
        writer: u64,
    ) -> Self {
        OutputKey {
            feed: Arc::from(feed),
            epoch,
            lane,
            position,
            index,
            writer,
        }
    }

    /// The key of output `index` of `delivery`, made by `writer`.
    pub fn for_delivery(delivery: &Delivery, index: u32, writer: u64) -> Self {
        let position = delivery.position();
        OutputKey {
            feed: Arc::clone(delivery.feed_arc()),
            epoch: delivery.epoch(),
            lane: position.lane,
            position: position.offset,
            index,
            writer,
        }
    }
}

impl fmt::Display for OutputKey {
    /// `feed/epoch/lane/position/index/writer`: what a sink sends as a
    /// de-duplication key (an HTTP `Idempotency-Key`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}/{}/{}/{}",
            self.feed, self.epoch.0, self.lane, self.position, self.index, self.writer
        )
    }
}

/// One prepared output: its key, its payload and how many attempts came before this
/// one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Output {
    /// Its key.
    pub key: OutputKey,
    /// What is written (a line sink adds the newline).
    pub payload: Vec<u8>,
    /// Earlier attempts (0 for the first).
    pub attempt: u32,
}

impl Output {
    /// A first attempt of `payload` under `key`.
    pub fn new(key: OutputKey, payload: Vec<u8>) -> Self {
        Output {
            key,
            payload,
            attempt: 0,
        }
    }
}

/// What a sink says happened to one attempt of an output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SinkOutcome {
    /// The target holds it.
    Published {
        /// What proves it (a durable length, a status, an offset).
        evidence: String,
    },
    /// Verified not held by the target.
    NotPublished {
        /// Why (the refusal, the error).
        evidence: String,
        /// True when another attempt may succeed (a 5xx, a refused connection); false
        /// for a permanent error (a 4xx, an output the target can never take), which
        /// ends the retries.
        retryable: bool,
    },
    /// The target may or may not hold it (a timeout after the hand-off, a lost
    /// acknowledgement, a broken connection, a crash after the hand-off).
    Uncertain {
        /// Where the uncertainty lies (`"request sent, no response within 5 s"`).
        evidence: String,
    },
}

impl SinkOutcome {
    /// True for [`SinkOutcome::Published`].
    pub fn is_published(&self) -> bool {
        matches!(self, SinkOutcome::Published { .. })
    }

    /// True when another attempt may change it: uncertain, or not published but
    /// retryable.
    pub fn may_retry(&self) -> bool {
        match self {
            SinkOutcome::Published { .. } => false,
            SinkOutcome::NotPublished { retryable, .. } => *retryable,
            SinkOutcome::Uncertain { .. } => true,
        }
    }

    /// The evidence text.
    pub fn evidence(&self) -> &str {
        match self {
            SinkOutcome::Published { evidence }
            | SinkOutcome::NotPublished { evidence, .. }
            | SinkOutcome::Uncertain { evidence } => evidence,
        }
    }
}

/// A sink of outputs: a file, a socket, an HTTP endpoint, a broker.
///
/// A sink runs on its own thread (its runner's), is given outputs in order, in
/// batches, and answers one outcome per output it tried, in order. It never panics on
/// a bad output (that is [`SinkOutcome::NotPublished`] with `retryable: false`) and
/// never blocks without a bound (a timeout is [`SinkOutcome::Uncertain`] when the
/// output may have been handed over).
pub trait Sink: Send {
    /// Publishes `outputs` in order, pushing one outcome per output onto `outcomes`,
    /// in the same order. A sink that makes outputs durable (a file's fsync) does so
    /// before it answers [`SinkOutcome::Published`].
    ///
    /// A sink may stop early, after an output whose attempt failed, when going on is
    /// pointless (its target does not answer): it answers the outputs it tried (at
    /// least the first) and nothing for the rest. The rest were **not sent**: an
    /// outcome is an attempt, and an output that was never sent is charged none; the
    /// runner gives them again, unchanged, once the failed one's retry falls due.
    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>);

    /// True when the last [`Sink::publish`] ended on an output whose target did not
    /// answer (nothing could be sent to it, or it did not answer in time), whether
    /// or not outputs were left unsent: the runner then sends nothing more until that
    /// output's retry falls due, so a target that is down costs one attempt per
    /// backoff, charged to one output. The default is false (every failure concerns
    /// its own output).
    fn target_not_answering(&self) -> bool {
        false
    }

    /// The error of the last [`Sink::publish`] when it could not reach its target at
    /// all (a connection refused, a TLS handshake that failed): nothing can be
    /// delivered. `None` when it reached the target, or the sink does not tell. The
    /// runner keeps it as the sink's "cannot deliver" condition until a delivery
    /// succeeds; meanwhile the server is not ready (`/ready` is 503 naming the sink).
    fn cannot_reach(&self) -> Option<&str> {
        None
    }

    /// What the sink can verify of `key` after a restart: `Some(Published)` when it
    /// holds it (a file sink that finds the key below its durable length), `None`
    /// when it cannot tell (the output is then sent again with the same key).
    fn verify(&mut self, key: &OutputKey) -> Option<SinkOutcome> {
        let _ = key;
        None
    }

    /// What the sink holds per input lane, as found when it was opened: for a sink that
    /// records the keys it wrote (the file sink), one entry per (feed, lane, writer,
    /// epoch) it holds outputs of, in the order the lanes were first written (so the
    /// last entry of a (feed, lane, writer) is its newest epoch). The writers report
    /// them to their feeds' sources ([`crate::Processor::written_positions`]). The
    /// default (a sink that cannot tell) holds nothing.
    fn written_lanes(&self) -> Vec<WrittenLane> {
        Vec::new()
    }
}

/// One input lane a sink holds outputs of ([`Sink::written_lanes`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrittenLane {
    /// The inputs' feed.
    pub feed: String,
    /// The inputs' lane (0 for a single-lane feed).
    pub lane: u32,
    /// The writer that made the outputs ([`writer_id`]).
    pub writer: u64,
    /// The inputs' epoch.
    pub epoch: Epoch,
    /// The last key written: the input's position and the output's index.
    pub last: (u64, u32),
    /// True when some key below `last` is not held (an output refused and overtaken,
    /// waiting for its retry): the inputs before `last` are not all written.
    pub has_gaps: bool,
}

/// Holds the commit of an input until the outputs it made are over: what makes outputs
/// part of processing (an input's position is committed only after every output it
/// produced is published, or given up by the operator's policy).
///
/// The writer of an output calls [`CommitGate::pending`] on the processor's thread,
/// while the processor handles the input, before the output leaves for its sink; the
/// sink's runner calls [`CommitGate::complete`] from its own thread once the output is
/// over. Tags increase in the order `pending` is called; `complete` may come in any
/// order. The delivery engine's implementation is a participant in the processing
/// checkpoint of the input's feed and group (`mongoose_delivery::CheckpointParticipant`).
pub trait CommitGate: Send + Sync {
    /// The input being handled may not be committed until `complete(tag)`.
    fn pending(&self, tag: u64);

    /// The output tagged `tag` is over (published, or given up by policy).
    fn complete(&self, tag: u64);

    /// Every pending tag up to `tag` is over (an outbox's group commit made them
    /// durable together).
    fn complete_through(&self, tag: u64);

    /// The output tagged `tag` is held by the `hold` policy (it stays pending): the
    /// feed should report why its commit does not advance.
    fn held(&self, tag: u64, reason: &str) {
        let _ = (tag, reason);
    }
}

/// How many attempts an output gets and until when (under
/// [`ExhaustedPolicy::Hold`]: until it is reported held; it is tried on after that).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryBudget {
    /// Attempts after the first (0: one attempt only).
    pub max_retries: u32,
    /// The wait before the first retry; doubled for each further one.
    pub initial_backoff: Duration,
    /// The longest wait.
    pub max_backoff: Duration,
    /// How long after its first attempt an output expires (no further attempt).
    pub expire_after: Duration,
}

impl Default for RetryBudget {
    fn default() -> Self {
        RetryBudget {
            max_retries: 10,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            expire_after: Duration::from_secs(300),
        }
    }
}

impl RetryBudget {
    /// The wait before retry number `retry` (1-based).
    pub fn backoff(&self, retry: u32) -> Duration {
        crate::dispatch::doubling_backoff(self.initial_backoff, self.max_backoff, retry)
    }

    /// When an output first tried at `first` expires.
    pub fn expire_at(&self, first: SystemTime) -> SystemTime {
        first + self.expire_after
    }
}

/// What an output whose retries are spent (or that expired, or failed permanently)
/// does to its input's feed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExhaustedPolicy {
    /// Hold the feed: its position is not committed past the input, the feed reports
    /// `stalled` naming the sink and the output, and the sink goes on trying it at its
    /// longest backoff (an output refused for good: when an operator asks, or after a
    /// restart), so that an outage longer than the budget heals by itself.
    #[default]
    Hold,
    /// Count the output lost (`lossless: false`) and go on.
    CountLoss,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::position::PositionValue;

    #[test]
    fn a_delivery_keys_its_outputs_by_input_and_index() {
        let delivery = Delivery::new(Arc::from("lines"), 9, Epoch(4), PositionValue::at(77), 0);
        let first = OutputKey::for_delivery(&delivery, 0, 2);
        let second = OutputKey::for_delivery(&delivery, 1, 2);
        assert_eq!(first.to_string(), "lines/4/0/77/0/2");
        assert!(first < second);
        assert_eq!(first, OutputKey::new("lines", Epoch(4), 0, 77, 0, 2));
    }

    #[test]
    fn only_uncertain_and_retryable_outcomes_may_be_retried() {
        let published = SinkOutcome::Published {
            evidence: "200".into(),
        };
        let refused = SinkOutcome::NotPublished {
            evidence: "400".into(),
            retryable: false,
        };
        let busy = SinkOutcome::NotPublished {
            evidence: "503".into(),
            retryable: true,
        };
        let unknown = SinkOutcome::Uncertain {
            evidence: "timeout".into(),
        };
        assert!(!published.may_retry() && !refused.may_retry());
        assert!(busy.may_retry() && unknown.may_retry());
        assert_eq!(unknown.evidence(), "timeout");
    }

    #[test]
    fn the_budget_backs_off_and_expires() {
        let budget = RetryBudget {
            max_retries: 5,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(50),
            expire_after: Duration::from_secs(2),
        };
        assert_eq!(budget.backoff(1), Duration::from_millis(10));
        assert_eq!(budget.backoff(3), Duration::from_millis(40));
        assert_eq!(budget.backoff(9), Duration::from_millis(50));
        let first = SystemTime::UNIX_EPOCH;
        assert_eq!(budget.expire_at(first), first + Duration::from_secs(2));
    }
}
