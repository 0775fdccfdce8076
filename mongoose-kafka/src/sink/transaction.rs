//! Where a transactional [`KafkaSink`]'s producer stands in librdkafka's transaction
//! protocol, and how it comes back by itself from a broker that stopped answering in
//! the middle of a transaction (issue 37.3).
//!
//! librdkafka's rules: a `commit_transaction` or `abort_transaction` that returns a
//! retriable error (a timeout) goes on in the background, and the application must
//! call the *same* function again until it succeeds or fails for good; any other
//! transactional call meanwhile fails with "Conflicting ... API call is already in
//! progress". An error that requires an abort is left with `abort_transaction`; a
//! fatal one (or a state the producer cannot leave) only with a new producer: the
//! same `transactional.id` fences the old one, and its `init_transactions` has the
//! broker finish what the old one left open (a transaction whose commit the
//! coordinator had taken is committed, any other aborted).
//!
//! | the end of a batch's transaction | the batch's outcomes | before the next transaction |
//! |---|---|---|
//! | committed | `Published` | nothing |
//! | a record failed, or the commit needs an abort: aborted | `NotPublished`, retryable | nothing |
//! | the same, the abort timed out | `NotPublished`, retryable (an abort never commits) | the abort, again, until it answers |
//! | the commit timed out | `Uncertain` | the commit, again; its answer decides: committed outputs sent again are answered `Published` without being written, aborted ones are written in a new transaction |
//! | a fatal error, or a call the producer refuses | `Uncertain` after a commit, else `NotPublished` | a new producer; after a commit, the positions topic read again tells whether it committed |
//!
//! While the broker does not answer, every batch is answered `NotPublished`
//! (retryable, nothing was handed over) with what the sink waits for, and a WARN says
//! it (every 10 s at most): the runner's retries and `hold` policy keep the outputs,
//! and the feed's commit stays before them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::sink::{OutputKey, SinkOutcome};
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;
use rdkafka::TopicPartitionList;
use tracing::{info, warn};

use super::positions::{LaneKey, LaneState, Positions};
use super::KafkaSink;

/// How often at most the sink warns that it still waits for the broker.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// How many times a timed-out commit or abort is resumed, each for the delivery
/// timeout, before the producer is given up for a new one with the same transactional
/// id. librdkafka asks to call again until it answers, but after an 11 s broker pause
/// a resumed commit timed out again and again with the broker back (chaos kafka seed
/// 1796645212000: 90 s and more, nothing committed); a new producer's
/// `init_transactions` has the broker finish what the old one left open, and the
/// positions topic then tells whether it committed.
const RESUMES_BEFORE_A_NEW_PRODUCER: u32 = 1;

/// The longest an abort, or a resumed commit or abort, is waited for: a broker that
/// answers does in milliseconds, and one that does not is not waited out for the whole
/// delivery timeout twice (a broker pause under the CI's load: records timed out, the
/// abort and its resume 30 s each, 100 s before the new producer; chaos kafka seed
/// 1796645212000 in `cargo xtask chaos`).
const RESUME_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the producer stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// `init_transactions` is due (a new producer, or one whose call timed out).
    Init,
    /// No transaction open: the next one may begin.
    Ready,
    /// A commit timed out: `commit_transaction` again.
    Commit,
    /// An abort timed out: `abort_transaction` again.
    Abort,
    /// The producer cannot go on: a new one with the same `transactional.id`.
    Replace,
    /// A new producer finished what the old one left open: the positions topic tells
    /// whether the transaction of [`Unresolved`] committed.
    Verify,
}

/// A transaction whose commit was asked and whose fate was unknown when its batch
/// was answered (`Uncertain`).
#[derive(Debug)]
pub(super) struct Unresolved {
    /// Its outputs (not those answered from earlier commits).
    pub(super) keys: Vec<OutputKey>,
    /// The lanes' positions it wrote (with a positions topic).
    pub(super) lanes: Option<Vec<(LaneKey, LaneState)>>,
}

/// What the transaction of an [`Unresolved`] turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Committed,
    Aborted,
    /// Not known (a new producer, and no positions topic to read): its outputs are
    /// written again, and a `read_committed` reader may see them twice.
    Unknown,
}

/// What an error of a transactional call asks for next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// The same call again (it goes on in the background).
    Again,
    /// `abort_transaction`.
    Abort,
    /// A new producer.
    Replace,
}

fn next_after(error: &KafkaError) -> Next {
    match error {
        KafkaError::Transaction(error) if error.is_fatal() => Next::Replace,
        KafkaError::Transaction(error) if error.is_retriable() => Next::Again,
        KafkaError::Transaction(error) if error.txn_requires_abort() => Next::Abort,
        // `commit_transaction` flushes first: records still in flight at its timeout
        KafkaError::Flush(_) => Next::Again,
        // a conflicting or refused call: a state this producer cannot leave
        _ => Next::Replace,
    }
}

/// The sink's transaction state, beside its producer.
#[derive(Debug)]
pub(super) struct TxnState {
    pub(super) phase: Phase,
    pub(super) unresolved: Option<Unresolved>,
    /// Outputs of a transaction answered `Uncertain` that turned out committed: sent
    /// again, they are answered `Published` without being written.
    pub(super) confirmed: std::collections::HashSet<OutputKey>,
    /// Since when the sink waits for the broker, and when it last warned.
    waiting: Option<(Instant, Instant)>,
    /// Resumes of the timed-out commit or abort that timed out again.
    resumed: u32,
}

impl TxnState {
    pub(super) fn new() -> Self {
        TxnState {
            phase: Phase::Init,
            unresolved: None,
            confirmed: std::collections::HashSet::new(),
            waiting: None,
            resumed: 0,
        }
    }
}

impl KafkaSink {
    /// Brings the producer to [`Phase::Ready`], making the calls librdkafka asks for;
    /// `Err` says what it still waits for (a call timed out again: the broker does not
    /// answer yet).
    pub(super) fn recover(&mut self) -> Result<(), String> {
        let timeout = self.config.delivery_timeout;
        let resume_timeout = timeout.min(RESUME_TIMEOUT);
        let mut replaced = false;
        loop {
            match self.txn.phase {
                Phase::Ready => return Ok(()),
                Phase::Init => match self.producer.init_transactions(timeout) {
                    Ok(()) => {
                        self.txn.phase = if self.txn.unresolved.is_some() {
                            Phase::Verify
                        } else {
                            Phase::Ready
                        }
                    }
                    Err(error) => match next_after(&error) {
                        Next::Replace if !replaced => self.replace_producer(&error),
                        _ => {
                            return Err(format!(
                                "initialising transactions (tried again: {error})"
                            ))
                        }
                    },
                },
                Phase::Commit => match self.producer.commit_transaction(resume_timeout) {
                    Ok(()) => {
                        self.resolve(Fate::Committed);
                        self.txn.phase = Phase::Ready;
                        self.txn.resumed = 0;
                    }
                    Err(error) => match next_after(&error) {
                        Next::Again if self.resumed_too_often() => self.replace_producer(&error),
                        Next::Again => {
                            return Err(format!(
                                "the commit of a transaction that timed out, resumed (tried again: {error})"
                            ))
                        }
                        Next::Abort => self.txn.phase = Phase::Abort,
                        Next::Replace => self.replace_producer(&error),
                    },
                },
                Phase::Abort => match self.producer.abort_transaction(resume_timeout) {
                    Ok(()) => {
                        self.resolve(Fate::Aborted);
                        self.txn.phase = Phase::Ready;
                        self.txn.resumed = 0;
                    }
                    Err(error) => match next_after(&error) {
                        Next::Again if self.resumed_too_often() => self.replace_producer(&error),
                        Next::Again => {
                            return Err(format!(
                                "the abort of a transaction that timed out, resumed (tried again: {error})"
                            ))
                        }
                        Next::Abort | Next::Replace => self.replace_producer(&error),
                    },
                },
                Phase::Replace => {
                    if replaced {
                        return Err("a new producer for the transactional id".to_owned());
                    }
                    match super::create_producer(&self.config) {
                        Ok(producer) => {
                            self.context = Arc::clone(producer.context());
                            // the old one is purged and closed (its transaction is the
                            // broker's to finish, at the new one's init)
                            self.producer = producer;
                            self.txn.phase = Phase::Init;
                            replaced = true;
                        }
                        Err(error) => return Err(format!("a new producer: {error}")),
                    }
                }
                Phase::Verify => {
                    let fate = self.fate_from_positions()?;
                    self.resolve(fate);
                    self.txn.phase = Phase::Ready;
                }
            }
        }
    }

    /// The producer is given up for a new one (at the next [`KafkaSink::recover`]).
    pub(super) fn replace_producer(&mut self, error: impl std::fmt::Display) {
        warn!(sink = %self.config.name, %error, phase = ?self.txn.phase, resumed = self.txn.resumed,
            "the transactional producer cannot go on: a new one with the same transactional id takes its place (the broker finishes the transaction it left open)");
        self.txn.phase = Phase::Replace;
        self.txn.resumed = 0;
    }

    /// A resumed commit or abort timed out again: true once
    /// [`RESUMES_BEFORE_A_NEW_PRODUCER`] resumes did (the producer is then replaced).
    fn resumed_too_often(&mut self) -> bool {
        self.txn.resumed += 1;
        self.txn.resumed >= RESUMES_BEFORE_A_NEW_PRODUCER
    }

    /// After a new producer's `init_transactions`: whether the unresolved transaction
    /// committed, from its lanes' positions as a `read_committed` reader sees them.
    fn fate_from_positions(&mut self) -> Result<Fate, String> {
        let (Some(topic), Some(lanes)) = (
            self.config.positions_topic.as_deref(),
            self.txn.unresolved.as_ref().and_then(|u| u.lanes.as_ref()),
        ) else {
            return Ok(Fate::Unknown);
        };
        let read = Positions::load(
            &self.config.name,
            &self.config.brokers,
            topic,
            &self.config.properties,
            self.config.delivery_timeout,
        )
        .map_err(|error| format!("reading the positions topic again: {error}"))?;
        let committed = lanes
            .iter()
            .all(|(lane, state)| read.committed_state(lane) == Some(state));
        Ok(if committed {
            Fate::Committed
        } else {
            Fate::Aborted
        })
    }

    /// The unresolved transaction (if any) turned out `fate`.
    fn resolve(&mut self, fate: Fate) {
        let Some(unresolved) = self.txn.unresolved.take() else {
            return;
        };
        let outputs = unresolved.keys.len();
        match fate {
            Fate::Committed => {
                info!(sink = %self.config.name, outputs,
                    "a transaction whose commit timed out committed: its outputs, sent again, are answered published");
                if let (Some(positions), Some(lanes)) = (self.positions.as_mut(), unresolved.lanes)
                {
                    positions.committed(lanes);
                }
                self.txn.confirmed.extend(unresolved.keys);
            }
            Fate::Aborted | Fate::Unknown => {
                if fate == Fate::Aborted {
                    info!(sink = %self.config.name, outputs,
                        "a transaction whose commit timed out was aborted: its outputs are written again");
                } else {
                    warn!(sink = %self.config.name, outputs,
                        "whether a transaction whose commit timed out committed is unknown (no positions topic): its outputs are written again, and a read_committed reader may see them twice");
                }
                if let Some(positions) = self.positions.as_mut() {
                    positions.failed(&unresolved.keys);
                }
            }
        }
    }

    /// Says (every [`WARN_EVERY`] at most) that the sink waits for `what`.
    pub(super) fn waiting(&mut self, what: &str) {
        let now = Instant::now();
        let (since, warned) = self.txn.waiting.get_or_insert((now, now - WARN_EVERY));
        if now.duration_since(*warned) >= WARN_EVERY {
            *warned = now;
            warn!(sink = %self.config.name, brokers = %self.config.brokers, waiting_for = %what,
                stalled_for = ?now.duration_since(*since),
                "the transactional sink waits for the broker before its next transaction: its outputs are held and tried again");
        }
    }

    /// The sink writes again after it waited.
    pub(super) fn not_waiting(&mut self) {
        if let Some((since, _)) = self.txn.waiting.take() {
            info!(sink = %self.config.name, waited = ?since.elapsed(),
                "the transactional sink writes again: the broker answered");
        }
    }

    /// Commits the transaction (with the offsets), or aborts it when a record failed:
    /// an aborted transaction's records are invisible to `read_committed` consumers.
    /// Returns whether the transaction's fate is known (`false`: its commit timed
    /// out or failed without an answer, its outcomes are `Uncertain`, and the next
    /// [`KafkaSink::recover`] finds it out).
    pub(super) fn end(
        &mut self,
        outcomes: &mut [SinkOutcome],
        offsets: Option<(&TopicPartitionList, &ConsumerGroupMetadata)>,
    ) -> bool {
        let timeout = self.config.delivery_timeout;
        let all_published = outcomes.iter().all(SinkOutcome::is_published);
        let mut failure: Option<String> = None;
        if all_published {
            if let Some((offsets, group)) = offsets {
                if let Err(error) = self
                    .producer
                    .send_offsets_to_transaction(offsets, group, timeout)
                {
                    failure = Some(format!("sending the offsets: {error}"));
                }
            }
        } else {
            failure = Some("a record of the transaction failed".to_owned());
        }
        if failure.is_none() {
            match self.producer.commit_transaction(timeout) {
                Ok(()) => return true,
                Err(error) => {
                    let next = next_after(&error);
                    if next == Next::Abort {
                        failure = Some(format!("committing the transaction: {error}"));
                    } else {
                        // fate of the commit unknown until the commit is resumed (or
                        // a new producer's init finishes it)
                        warn!(sink = %self.config.name, %error,
                            "a transaction's commit did not answer: its outputs are uncertain until the commit is resumed before the next transaction");
                        if next == Next::Again {
                            self.txn.phase = Phase::Commit;
                        } else {
                            self.replace_producer(&error);
                        }
                        for outcome in outcomes.iter_mut() {
                            *outcome = SinkOutcome::Uncertain {
                                evidence: format!("committing the transaction: {error} (resumed before the next transaction)"),
                            };
                        }
                        return false;
                    }
                }
            }
        }
        let reason = failure.unwrap_or_default();
        // no commit was asked, or the commit was refused: the transaction never commits
        let evidence = match self.producer.abort_transaction(timeout.min(RESUME_TIMEOUT)) {
            Ok(()) if !all_published => {
                // records failed (their delivery timed out): after a broker pause the
                // producer's records failed again and again, each retry aborted without
                // a word (chaos kafka seed 1796645212000: 200 s, nothing published). A
                // new producer of the same transactional id starts clean
                warn!(sink = %self.config.name, reason = %reason,
                    "a transaction's records failed: it was aborted, and a new producer with the same transactional id writes them again");
                self.txn.phase = Phase::Replace;
                format!("transaction aborted ({reason}); a new producer writes them again")
            }
            Ok(()) => format!("transaction aborted ({reason})"),
            Err(error) => {
                if next_after(&error) == Next::Again {
                    self.txn.phase = Phase::Abort;
                } else {
                    self.replace_producer(&error);
                }
                format!("transaction aborted ({reason}); the abort did not answer ({error}): it is resumed before the next transaction")
            }
        };
        for outcome in outcomes.iter_mut() {
            *outcome = SinkOutcome::NotPublished {
                evidence: evidence.clone(),
                retryable: true,
            };
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::error::RDKafkaErrorCode;

    #[test]
    fn a_flush_timeout_is_retried_and_another_error_replaces_the_producer() {
        assert_eq!(
            next_after(&KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut)),
            Next::Again
        );
        assert_eq!(
            next_after(&KafkaError::MessageProduction(RDKafkaErrorCode::State)),
            Next::Replace
        );
    }
}
