//! Committing a partition's transaction: retried while the broker asks for it, written
//! again in a new one when the broker makes it abort, and, when the broker stopped
//! answering, handed to a new producer of the same transactional id (`heal.rs`).

use std::sync::Weak;
use std::time::{Duration, Instant};

use mongoose_core::state_store::WriteFailure;
use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;
use tracing::{debug, info, warn};

use super::{
    commit_deadline, failure_from, failure_of, requires_abort, retriable, Replaced, Transactions,
    TxnPartition, REPLAYS,
};

impl Transactions {
    /// Commits `partition`'s open transaction with the input offsets it covers; its tags
    /// are durable then. A retriable error is retried (the partition's writes wait) for
    /// up to six request timeouts; an error that requires an abort aborts it (its tags
    /// are given up); a fatal one (fenced), or retries that never end, end the producer.
    /// Returns whether the transaction committed (true when none was open on a live
    /// producer).
    pub(in crate::changelog) fn commit(&self, partition: i32, producer: &mut TxnPartition) -> bool {
        self.commit_or_replace(partition, producer, false)
    }

    /// [`Transactions::commit`], and with `replace`, a transaction that could neither
    /// commit nor abort because the broker did not answer (the error is no fence) is not
    /// given up: its producer is replaced by a new one of the same transactional id once
    /// the broker answers again ([`ReplaceProducer`], within
    /// [`TransactionsConfig::broker_patience`]), which commits it once.
    pub(super) fn commit_or_replace(
        &self,
        partition: i32,
        producer: &mut TxnPartition,
        replace: bool,
    ) -> bool {
        if producer.dead.is_some() {
            return false;
        }
        if !producer.open {
            return true;
        }
        // set at the first replacement: the broker's patience runs from there
        let mut until: Option<Instant> = None;
        loop {
            let error = match self.try_commit(partition, producer) {
                Ok(()) => {
                    self.committed(producer);
                    return true;
                }
                Err(error) => error,
            };
            let why = if requires_abort(&error) {
                match producer.producer.abort_transaction(self.request_timeout) {
                    Ok(()) => {
                        warn!(changelog = %self.name, partition, %error, "a transaction could not commit and is aborted: its changes are given up");
                        self.give_up(producer, &WriteFailure::GivenUp(error.to_string()));
                        return false;
                    }
                    Err(abort) if replace && self.may_replace(partition, producer, &abort) => {
                        format!("{error}; its abort: {abort}")
                    }
                    Err(abort) => {
                        warn!(changelog = %self.name, partition, %error, %abort, "a transaction could not commit, nor be aborted: its changes are given up");
                        producer.dead = Some(failure_of(partition, producer.epoch, &abort));
                        self.give_up(producer, &WriteFailure::GivenUp(error.to_string()));
                        return false;
                    }
                }
            } else if replace && self.may_replace(partition, producer, &error) {
                error.to_string()
            } else {
                let failure = failure_of(partition, producer.epoch, &error);
                info!(changelog = %self.name, partition, %error, "a transaction's producer ends: {failure}");
                producer.dead = Some(failure);
                self.fail_open(partition, producer);
                return false;
            };
            let Some(replacer) = self.replacer.get().and_then(Weak::upgrade) else {
                // the changelog is gone: nobody to replace the producer
                producer.dead = Some(WriteFailure::GivenUp(why));
                self.fail_open(partition, producer);
                return false;
            };
            let until = *until.get_or_insert_with(|| Instant::now() + self.config.broker_patience);
            match replacer.replace_producer(partition, producer, &why, until) {
                Ok(Replaced::Committed) => {
                    self.committed(producer);
                    return true;
                }
                // the new producer's transaction holds it again: committed next
                Ok(Replaced::Reopened) => {}
                Err(failure) => {
                    producer.dead = Some(failure);
                    self.fail_open(partition, producer);
                    return false;
                }
            }
        }
    }

    /// Whether the failure `error` of `partition`'s transaction may be healed with a new
    /// producer of the same transactional id: not when the broker fenced the producer (a
    /// newer owner took the partition over: stays fenced), nor for a transaction that
    /// cannot be written again (a takeover's marker).
    fn may_replace(&self, partition: i32, producer: &TxnPartition, error: &KafkaError) -> bool {
        let fenced = |failure: WriteFailure| matches!(failure, WriteFailure::Fenced { .. });
        if !producer.replayable
            || self.replacer.get().is_none()
            || fenced(failure_of(partition, producer.epoch, error))
        {
            return false;
        }
        // a client made fatal by the broker's fence answers later calls with other errors
        !producer
            .producer
            .client()
            .fatal_error()
            .is_some_and(|(code, message)| {
                fenced(failure_from(partition, producer.epoch, Some(code), message))
            })
    }

    /// The open transaction committed: its tags are durable.
    fn committed(&self, producer: &mut TxnPartition) {
        producer.open = false;
        producer.through = None;
        for tag in producer.tags.drain(..) {
            (self.on_durable)(tag, Ok(()));
        }
    }

    /// The open transaction never commits: its tags are reported `failure`.
    fn give_up(&self, producer: &mut TxnPartition, failure: &WriteFailure) {
        producer.open = false;
        producer.through = None;
        for tag in producer.tags.drain(..) {
            (self.on_durable)(tag, Err(failure.clone()));
        }
    }

    /// Commits the open transaction: a retriable failure is retried (holding the
    /// partition: librdkafka takes no new record into a transaction whose commit is
    /// under way) until the commit's deadline, and a transaction the broker makes abort
    /// is written again in a new one [`REPLAYS`] times at most.
    fn try_commit(&self, partition: i32, producer: &mut TxnPartition) -> Result<(), KafkaError> {
        let deadline = commit_deadline(
            Instant::now(),
            producer.opened,
            self.request_timeout,
            self.config.transaction_timeout,
        );
        let mut offsets_sent = false;
        let mut replays = 0;
        loop {
            let attempt = if offsets_sent {
                Ok(())
            } else {
                self.send_offsets(partition, producer)
            }
            .and_then(|()| {
                offsets_sent = true;
                producer.producer.commit_transaction(self.request_timeout)
            });
            match attempt {
                Err(error) if retriable(&error) && Instant::now() < deadline => {
                    debug!(changelog = %self.name, partition, %error, "a transaction's commit is retried");
                    std::thread::sleep(Duration::from_millis(100));
                }
                // a broker failing over (a coordinator still loading) makes the
                // transaction abort though nothing is wrong with its records: they are
                // written again in a new one, with the same offsets
                Err(error)
                    if requires_abort(&error)
                        && producer.replayable
                        && replays < REPLAYS
                        && Instant::now() < deadline =>
                {
                    replays += 1;
                    warn!(changelog = %self.name, partition, %error, records = producer.sent.len(), replay = replays,
                        "a transaction could not commit: aborted, and its records are written again in a new one");
                    self.replay(producer)?;
                    offsets_sent = false;
                }
                other => return other,
            }
        }
    }

    /// Aborts the open transaction and sends its records again in a new one.
    fn replay(&self, producer: &mut TxnPartition) -> Result<(), KafkaError> {
        producer.producer.abort_transaction(self.request_timeout)?;
        producer.producer.begin_transaction()?;
        for sent in &producer.sent {
            super::super::send_record(
                &producer.producer,
                (&sent.topic, sent.partition),
                &sent.key,
                &sent.payload,
                Box::new(super::super::Opaque::InTransaction),
            )?;
        }
        Ok(())
    }
}
