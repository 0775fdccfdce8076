//! A broker that stopped answering in the middle of a partition's transaction (a pause,
//! a cut network; issue 37.3, the changelog's side): the partition's producer is
//! replaced, and what its transaction held is committed once.
//!
//! The transaction's records time out, its commit asks for an abort, and the abort
//! times out too while the broker is away: the producer cannot go on (librdkafka's
//! resumed abort was answered with a fatal `INVALID_TXN_STATE` by Apache Kafka 4.1).
//! Before, the partition's changes were given up (the ledger failed, its lines read
//! again after a restart). Now, while the broker stays away no longer than
//! [`TransactionsConfig::broker_patience`](super::TransactionsConfig::broker_patience),
//! the partition's writes wait, and once the broker answers:
//!
//! 1. **Still this member's?** A newer owner's marker (read `read_uncommitted`, as a
//!    takeover reads it) means the group gave the partition to another member while
//!    the broker was away: the changes are reported fenced, exactly as a fence by that
//!    owner would be, and nothing is replaced (a new producer would fence that owner).
//! 2. **A new producer of the partition's transactional id.** Its initialisation
//!    fences the old producer and has the broker finish the old transaction: committed
//!    if the coordinator had taken its commit, aborted otherwise.
//! 3. **The marker of this member's epoch**, in a transaction of its own, committed:
//!    the partition is read `read_committed` up to it, as a takeover reads it. A newer
//!    owner's marker there (one that marked between step 1 and step 2, and was fenced
//!    by the new producer) makes this member step back as in step 1.
//! 4. **The old transaction's fate.** Its change records are in what was read: it
//!    committed, and its changes are durable. They are not: it was aborted, and its
//!    records (changes and outputs) are written again in a new transaction, committed
//!    next. Each change is committed once either way.
//!
//! A step that fails because the broker is still away is tried again, from step 1,
//! until the patience runs out: the changes are then given up, with the reason.

use std::time::{Duration, Instant};

use mongoose_core::state_store::{StoredRecord, WriteFailure};
use tracing::{info, warn};

use super::transactions::{ReplaceProducer, Replaced, Stash, Transactions, TxnPartition};
use super::{decode, ChangelogCore};
use crate::error::KafkaConnectorError;

/// How long a replacement waits before it tries again (each try already waits for the
/// broker for a request or a delivery timeout).
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// Why a try at replacing a producer did not decide the transaction.
enum Undecided {
    /// A newer owner holds the partition: the changes are fenced.
    TakenOver(WriteFailure),
    /// The broker did not answer (yet): tried again.
    Again(String),
}

impl ReplaceProducer for ChangelogCore {
    fn replace_producer(
        &self,
        partition: i32,
        producer: &mut TxnPartition,
        why: &str,
        until: Instant,
    ) -> Result<Replaced, WriteFailure> {
        let epoch = producer.epoch();
        let Some(transactions) = &self.transactions else {
            return Err(WriteFailure::GivenUp(why.to_owned()));
        };
        let mut in_doubt = producer.take_transaction();
        let started = Instant::now();
        warn!(changelog = %self.config.topic, partition, %epoch, error = why,
            changes = in_doubt.tags.len(), records = in_doubt.sent.len(),
            patience = ?until.saturating_duration_since(started),
            "a partition's transaction could neither commit nor abort: the broker did not answer. Its writes wait; a new producer with the same transactional id takes its place once the broker answers");
        let mut tries = 0;
        loop {
            tries += 1;
            let undecided = match self.replace_once(transactions, partition, producer, in_doubt) {
                Ok(replaced) => {
                    info!(changelog = %self.config.topic, partition, %epoch, tries,
                        waited = ?started.elapsed(),
                        outcome = if replaced == Replaced::Committed {
                            "the transaction had committed: its changes are durable"
                        } else {
                            "the transaction was aborted: its changes and outputs are written again in a new one"
                        },
                        "the partition's producer was replaced: the broker answered");
                    return Ok(replaced);
                }
                Err((undecided, kept)) => {
                    in_doubt = kept;
                    undecided
                }
            };
            match undecided {
                Undecided::TakenOver(failure) => {
                    info!(changelog = %self.config.topic, partition, %epoch, %failure,
                        "a newer owner took the partition over while the broker did not answer: its changes here are fenced");
                    producer.give_back(in_doubt);
                    return Err(failure);
                }
                Undecided::Again(error) => {
                    let now = Instant::now();
                    if now >= until || transactions.stopping() {
                        producer.give_back(in_doubt);
                        let waited = started.elapsed();
                        warn!(changelog = %self.config.topic, partition, %epoch, %error, ?waited,
                            "the broker did not come back within the patience: the partition's changes are given up");
                        return Err(WriteFailure::GivenUp(format!(
                            "the broker at {} did not answer for {waited:.1?} after partition {partition}'s transaction could neither commit nor abort ({why}; last try: {error}): its changes are not committed, and their lines are read again after a restart",
                            self.config.brokers
                        )));
                    }
                    warn!(changelog = %self.config.topic, partition, %epoch, %error, tries,
                        waited = ?started.elapsed(),
                        "the partition's producer waits for the broker before it is replaced: tried again");
                    std::thread::sleep(RETRY_AFTER.min(until - now));
                }
            }
        }
    }
}

impl ChangelogCore {
    /// One try at steps 1 to 4 of the module docs; the undecided transaction comes back
    /// with the reason.
    fn replace_once(
        &self,
        transactions: &Transactions,
        partition: i32,
        producer: &mut TxnPartition,
        in_doubt: Stash,
    ) -> Result<Replaced, (Undecided, Stash)> {
        let epoch = producer.epoch();
        let undecided = |error: KafkaConnectorError| match error {
            KafkaConnectorError::TakenOver { failure, .. } => Undecided::TakenOver(failure),
            error => Undecided::Again(error.to_string()),
        };
        // 1. no newer owner (a new producer would fence it)
        if let Err(error) = self.refuse_a_stale_takeover(partition, epoch) {
            return Err((undecided(error), in_doubt));
        }
        // 2. a new producer: the old one is fenced, its transaction finished
        let fresh = match self.transactional_producer(partition, &transactions.config) {
            Ok(fresh) => fresh,
            Err(error) => return Err((undecided(error), in_doubt)),
        };
        producer.replace(fresh);
        // 3. this member's marker, committed, and the partition read up to it
        let read = self
            .mark_replaced(transactions, partition, producer)
            .and_then(|marker| self.read_through(partition, marker, false))
            .and_then(|records| {
                self.refuse_a_newer_marker(partition, epoch, &records)
                    .map(|()| records)
            });
        let records = match read {
            Ok(records) => records,
            // fenced while it marked: a newer owner, or a stale one (undone next try)
            Err(KafkaConnectorError::TakenOver { failure, .. }) if producer.dead().is_some() => {
                return Err((Undecided::Again(failure.to_string()), in_doubt))
            }
            Err(error) => return Err((undecided(error), in_doubt)),
        };
        // 4. the old transaction's fate
        let ours: Vec<StoredRecord> = in_doubt
            .sent
            .iter()
            .filter(|sent| sent.topic == self.config.topic)
            .filter_map(|sent| decode(0, &sent.key, &sent.payload))
            .collect();
        if committed_in(&ours, &records) {
            producer.give_back(Stash {
                sent: Vec::new(),
                ..in_doubt
            });
            return Ok(Replaced::Committed);
        }
        match producer.reopen(partition, in_doubt) {
            Ok(()) => Ok(Replaced::Reopened),
            Err((failure, kept)) => Err((Undecided::Again(failure.to_string()), kept)),
        }
    }
}

/// Whether any of `ours` (a transaction's change records, decoded) is among `read` (the
/// partition as a `read_committed` reader sees it): a transaction commits whole, so one
/// is enough. A change record names its input position (epoch and offset), so an
/// earlier transaction's record is never taken for one of `ours`.
fn committed_in(ours: &[StoredRecord], read: &[StoredRecord]) -> bool {
    read.iter().any(|seen| {
        ours.iter().any(|mine| {
            StoredRecord {
                log_offset: seen.log_offset,
                ..mine.clone()
            } == *seen
        })
    })
}

#[cfg(test)]
mod tests {
    use mongoose_core::state_store::StoredRecord;
    use mongoose_core::Epoch;

    use super::committed_in;

    fn change(log_offset: i64, epoch: u64, offset: u64, value: &str) -> StoredRecord {
        StoredRecord::entry(
            log_offset,
            Epoch(epoch),
            0,
            offset,
            b"acc",
            value.as_bytes(),
        )
    }

    #[test]
    fn a_transaction_committed_when_one_of_its_changes_is_read_committed() {
        let read = vec![change(0, 1, 5, "5"), change(1, 1, 6, "6")];
        assert!(committed_in(
            &[change(0, 1, 6, "6"), change(0, 1, 7, "7")],
            &read
        ));
        // the same key and value at another position, or in another epoch: not ours
        assert!(!committed_in(&[change(0, 1, 7, "6")], &read));
        assert!(!committed_in(&[change(0, 2, 6, "6")], &read));
        assert!(!committed_in(&[], &read));
    }
}
