//! Taking a partition over: the new owner's marker (in its transaction, with
//! transactions), the read of the partition up to it, and the fold into its state; and
//! the read a tool makes to a probe.

use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver};
use mongoose_core::state_store::WriteFailure;
use mongoose_core::Epoch;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use tracing::{info, warn};

use super::transactions::{Transactions, TxnPartition};
use super::{
    decode, fold, ChangelogCore, Opaque, RecordKind, RestoredPartition, StoredRecord, MARKER_KEY,
    PROBE_KEY,
};
use crate::error::KafkaConnectorError;
use crate::topic_id::TopicId;

/// How many times a takeover fenced while it marks the partition is tried.
const TAKEOVER_ATTEMPTS: u32 = 4;

impl ChangelogCore {
    /// Writes a marker (or a probe) into `partition` and waits for its offset. A marker
    /// carries the input topic's id `input` (see `identity.rs`).
    fn mark(
        &self,
        partition: i32,
        kind: RecordKind,
        epoch: Epoch,
        input: Option<TopicId>,
    ) -> Result<i64, KafkaConnectorError> {
        let (reply, answer) = bounded(1);
        let payload = Self::marker_payload(kind, epoch, partition, input);
        let opaque = Box::new(Opaque::Marker(reply));
        match &self.transactions {
            Some(transactions) if kind == RecordKind::Marker => {
                // the new owner's producer first: the broker aborts what an earlier
                // owner left open and fences it; then the marker, committed
                transactions.retire(partition);
                let fresh = self.transactional_producer(partition, &transactions.config)?;
                let producer = transactions.install(partition, TxnPartition::new(fresh, epoch));
                let mut producer = producer.lock();
                self.mark_in_transaction(transactions, partition, &mut producer, &payload, opaque)?;
            }
            _ => {
                let key = if kind == RecordKind::Probe {
                    PROBE_KEY
                } else {
                    MARKER_KEY
                };
                let target = (self.config.topic.as_str(), Some(partition));
                self.send(&self.producer, target, key, &payload, opaque)?;
            }
        }
        self.marker_offset(partition, &answer)
    }

    /// Writes the marker of `producer`'s epoch into `partition` on `producer` (a new
    /// producer put in place of one the broker left mid-transaction: `heal.rs`), in a
    /// transaction of its own, and waits for its offset.
    pub(super) fn mark_replaced(
        &self,
        transactions: &Transactions,
        partition: i32,
        producer: &mut TxnPartition,
    ) -> Result<i64, KafkaConnectorError> {
        let (reply, answer) = bounded(1);
        let payload = Self::marker_payload(
            RecordKind::Marker,
            producer.epoch(),
            partition,
            self.input_identity(),
        );
        let opaque = Box::new(Opaque::Marker(reply));
        self.mark_in_transaction(transactions, partition, producer, &payload, opaque)?;
        self.marker_offset(partition, &answer)
    }

    /// A marker's (or probe's) payload.
    fn marker_payload(
        kind: RecordKind,
        epoch: Epoch,
        partition: i32,
        input: Option<TopicId>,
    ) -> Vec<u8> {
        let id = input.map(TopicId::to_bytes);
        Self::encode(
            kind,
            epoch,
            partition,
            0,
            id.as_ref().map_or(&[][..], |id| &id[..]),
        )
    }

    /// Sends a marker (`payload`, its delivery reported to `opaque`) on `producer` in a
    /// transaction of its own, and commits it.
    ///
    /// # Errors
    /// [`KafkaConnectorError::TakenOver`] when another producer of the partition's
    /// transactional id fenced this one; the reason otherwise.
    fn mark_in_transaction(
        &self,
        transactions: &Transactions,
        partition: i32,
        producer: &mut TxnPartition,
        payload: &[u8],
        opaque: Box<Opaque>,
    ) -> Result<(), KafkaConnectorError> {
        let target = (self.config.topic.as_str(), Some(partition));
        let refused = |why: String| KafkaConnectorError::Changelog {
            name: self.config.name.clone(),
            message: format!("the marker of partition {partition}: {why}"),
        };
        // another owner that took the partition over meanwhile fenced this one:
        // the partition is not this owner's (not a failure: the caller drops it)
        let taken_over = |failure: &WriteFailure| {
            matches!(failure, WriteFailure::Fenced { .. }).then(|| KafkaConnectorError::TakenOver {
                name: self.config.name.clone(),
                failure: failure.clone(),
            })
        };
        if let Err(failure) = producer.begin(partition) {
            return Err(taken_over(&failure).unwrap_or_else(|| refused(failure.to_string())));
        }
        self.send(&producer.producer, target, MARKER_KEY, payload, opaque)?;
        // a marker's transaction is not written again: its reply went out
        producer.not_replayable();
        // (the commit retries what may still succeed, for six request timeouts)
        if !transactions.commit(partition, producer) {
            if let Some(error) = producer.dead().and_then(taken_over) {
                return Err(error);
            }
            return Err(refused(producer.dead().map_or_else(
                || {
                    format!(
                        "its transaction was aborted: check that the broker at {} answers",
                        self.config.brokers
                    )
                },
                ToString::to_string,
            )));
        }
        Ok(())
    }

    /// Waits for the offset of the marker (or probe) of `partition` whose delivery
    /// report goes to `answer`.
    fn marker_offset(
        &self,
        partition: i32,
        answer: &Receiver<Result<i64, String>>,
    ) -> Result<i64, KafkaConnectorError> {
        let waited = self.config.delivery_timeout + self.config.request_timeout;
        match answer.recv_timeout(waited) {
            Ok(Ok(offset)) => Ok(offset),
            Ok(Err(error)) => Err(KafkaConnectorError::Changelog {
                name: self.config.name.clone(),
                message: format!(
                    "the broker did not take the marker of partition {partition}: {error}"
                ),
            }),
            Err(_) => Err(KafkaConnectorError::Changelog {
                name: self.config.name.clone(),
                message: format!(
                    "no acknowledgement of the marker of partition {partition} within {waited:?}: check that the broker at {} answers",
                    self.config.brokers
                ),
            }),
        }
    }

    /// [`Changelog::restore`]'s work.
    pub(super) fn restore(
        &self,
        partition: i32,
        epoch: Epoch,
        counted: impl FnMut(&StoredRecord),
    ) -> Result<RestoredPartition, KafkaConnectorError> {
        let started = Instant::now();
        // a partition the input gained since the changelog was made: grown first
        self.ensure_partition(partition)?;
        // the input topic's incarnation the marker records (the position check compares
        // offsets of one topic only)
        let input = self.input_identity();
        let mut attempt = 0;
        let (records, marked) = loop {
            attempt += 1;
            if self.transactions.is_some() {
                self.refuse_a_stale_takeover(partition, epoch)?;
            }
            let marker = match self.mark(partition, RecordKind::Marker, epoch, input) {
                // another producer fenced this one while it marked: a newer owner (the
                // check above says so next time) or a stale one, whose fence is undone
                Err(KafkaConnectorError::TakenOver { failure, .. })
                    if self.transactions.is_some() && attempt < TAKEOVER_ATTEMPTS =>
                {
                    info!(changelog = %self.config.topic, partition, %epoch, %failure, attempt,
                        "fenced while taking the partition over: the newest marker decides, taken over again");
                    continue;
                }
                // fenced again and again with no newer owner's marker in sight: no
                // skipping of the partition's lines on that, tried again later
                Err(KafkaConnectorError::TakenOver { failure, .. })
                    if self.transactions.is_some() =>
                {
                    return Err(KafkaConnectorError::Changelog {
                        name: self.config.name.clone(),
                        message: format!(
                            "partition {partition} was fenced {attempt} times while this member took it over, with no newer owner's marker: tried again with its next record ({failure})"
                        ),
                    });
                }
                marked => marked?,
            };
            // what an earlier epoch's producer kept (its retirement above included) is
            // not this epoch's to write again
            if let Some(transactions) = &self.transactions {
                transactions.forget_stash(partition);
            }
            let marked = started.elapsed();
            let records = self.read_through(partition, marker, false)?;
            if self.transactions.is_some() {
                self.refuse_a_newer_marker(partition, epoch, &records)?;
            }
            break (records, marked);
        };
        let mut restored = fold(&records, counted);
        self.check_position_identity(partition, input, &records, &mut restored);
        info!(changelog = %self.config.topic, partition, %epoch, records = records.len(),
            counted = restored.counted, fenced = restored.fenced, keys = restored.entries.len(),
            through = ?restored.position.map(|(_, offset)| offset),
            marker_millis = marked.as_millis() as u64,
            millis = started.elapsed().as_millis() as u64, "partition state restored from the changelog");
        Ok(restored)
    }

    /// [`Changelog::retake`]'s work.
    pub(super) fn retake(&self, partition: i32, epoch: Epoch) -> Result<bool, KafkaConnectorError> {
        let Some(transactions) = &self.transactions else {
            return Ok(false);
        };
        let Some(stash) = transactions.take_stash(partition, epoch) else {
            return Ok(false);
        };
        let keep = |stash, error| {
            transactions.keep_stash(partition, stash);
            Err(error)
        };
        // a newer owner's marker, before this member's new one or after it, decides
        let checked = self
            .refuse_a_stale_takeover(partition, epoch)
            .and_then(|()| {
                // fenced again while marking: undecided, asked again next time
                self.mark(partition, RecordKind::Marker, epoch, self.input_identity())
                    .map_err(|error| match error {
                        KafkaConnectorError::TakenOver { failure, .. } => {
                            KafkaConnectorError::Changelog {
                                name: self.config.name.clone(),
                                message: format!(
                                    "fenced again while taking partition {partition} back: {failure}"
                                ),
                            }
                        }
                        error => error,
                    })
            })
            .and_then(|marker| self.read_through(partition, marker, true))
            .and_then(|records| self.refuse_a_newer_marker(partition, epoch, &records));
        match checked {
            Ok(()) => {}
            Err(KafkaConnectorError::TakenOver { .. }) => return Ok(false),
            Err(error) => return keep(stash, error),
        }
        let Some(producer) = transactions.partition(partition) else {
            return keep(stash, self.not_taken_over(partition));
        };
        let (records, tags) = (stash.sent.len(), stash.tags.len());
        let reopened = producer.lock().reopen(partition, stash);
        match reopened {
            Ok(()) => {
                info!(changelog = %self.config.topic, partition, %epoch, records, tags,
                    "fenced by a stale owner: the partition is taken back and its open transaction written again");
                Ok(true)
            }
            Err((failure, stash)) => keep(
                stash,
                KafkaConnectorError::Changelog {
                    name: self.config.name.clone(),
                    message: format!(
                        "taking partition {partition} back after a stale owner's fence: {failure}"
                    ),
                },
            ),
        }
    }

    /// A marker of a newer epoch than `epoch` among `records` (read before a takeover's
    /// fence, or through its own marker after it) means a newer owner took the
    /// partition first, and this member (its lines of `epoch` queued before it was
    /// revoked) is the stale one: it applies nothing (a marker it wrote after the newer
    /// owner's records is undone by that owner's next one).
    pub(super) fn refuse_a_newer_marker(
        &self,
        partition: i32,
        epoch: Epoch,
        records: &[StoredRecord],
    ) -> Result<(), KafkaConnectorError> {
        let newer = records
            .iter()
            .filter(|record| record.kind == RecordKind::Marker && record.epoch > epoch)
            .map(|record| record.epoch)
            .max();
        let Some(newer) = newer else {
            return Ok(());
        };
        info!(changelog = %self.config.topic, partition, %epoch, %newer,
            "a newer owner marked the partition: lines of an earlier assignment are not applied here");
        Err(KafkaConnectorError::TakenOver {
            name: self.config.name.clone(),
            failure: WriteFailure::Fenced {
                partition,
                epoch,
                message: format!(
                    "the partition was given to an owner of epoch {newer} after this assignment"
                ),
            },
        })
    }

    /// Before a takeover's producer fences the partition's earlier one: a marker of a
    /// newer epoch (epochs increase along a partition's history: a changelog ledger's
    /// feed has no epoch file, so every assignment mints a new one) means the group gave
    /// the partition to another owner after the assignment `epoch` came from, and this
    /// member's lines of `epoch` were queued before it was revoked. Taking it over now
    /// would fence the current owner, whose open transaction would abort while its
    /// consumer still commits the partition: its lines would be committed unapplied
    /// (`kafka_broker.rs`'s killed broker, 130 records of one partition lost). The
    /// stale lines are left: they are never committed (the feed ignores acknowledgements
    /// of an epoch it no longer holds).
    pub(super) fn refuse_a_stale_takeover(
        &self,
        partition: i32,
        epoch: Epoch,
    ) -> Result<(), KafkaConnectorError> {
        let probe = self.mark(partition, RecordKind::Probe, Epoch(0), None)?;
        // what is written, open transactions included: the current owner's may stay
        // open until its next commit, and a marker in one counts
        let records = self.read_through(partition, probe, true)?;
        self.refuse_a_newer_marker(partition, epoch, &records)
    }

    /// Reads `partition` from its start through changelog offset `last` (inclusive).
    /// `uncommitted`: records of open and aborted transactions too (`read_uncommitted`).
    pub(super) fn read_through(
        &self,
        partition: i32,
        last: i64,
        uncommitted: bool,
    ) -> Result<Vec<StoredRecord>, KafkaConnectorError> {
        let mut reader = if uncommitted {
            self.peek_reader.lock()
        } else {
            self.reader.lock()
        };
        if reader.is_none() {
            let mut client = ClientConfig::new();
            if uncommitted {
                client.set("isolation.level", "read_uncommitted");
            }
            client
                .set("bootstrap.servers", &self.config.brokers)
                .set(
                    "metadata.recovery.rebootstrap.trigger.ms",
                    crate::REBOOTSTRAP_AFTER_MS,
                )
                .set("group.id", format!("{}-restore", self.config.name))
                .set("client.id", format!("{}-restore", self.config.name))
                .set("enable.auto.commit", "false")
                .set("enable.auto.offset.store", "false")
                .set("enable.partition.eof", "false")
                .set("auto.offset.reset", "earliest")
                // a restore waits on each fetch: ask the broker not to hold it back
                .set("fetch.wait.max.ms", "10")
                .set_log_level(RDKafkaLogLevel::Warning);
            for (key, value) in &self.config.properties {
                client.set(key, value);
            }
            *reader = Some(
                client
                    .create()
                    .map_err(|error| KafkaConnectorError::Config {
                        name: self.config.name.clone(),
                        error: Box::new(error),
                    })?,
            );
        }
        let Some(consumer) = reader.as_ref() else {
            unreachable!("made above");
        };
        // from offset 0, not `Offset::Beginning`: the test broker answers the offset
        // lookup that needs after about 500 ms, a restore's whole cost otherwise; a log
        // whose start was removed (retention) is out of range at 0 and the consumer
        // resets to its earliest offset (`auto.offset.reset`)
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(&self.config.topic, partition, Offset::Offset(0))
            .map_err(|error| self.broker_error("assigning the changelog partition", error))?;
        consumer
            .assign(&assignment)
            .map_err(|error| self.broker_error("assigning the changelog partition", error))?;
        let deadline = Instant::now() + self.config.restore_timeout;
        let mut records = Vec::new();
        let mut result = Ok(());
        loop {
            if Instant::now() > deadline {
                result = Err(KafkaConnectorError::Changelog {
                    name: self.config.name.clone(),
                    message: format!(
                        "reading changelog partition {partition} to offset {last} took longer than {:?} (read {} records): check the broker, or raise restore_timeout",
                        self.config.restore_timeout,
                        records.len()
                    ),
                });
                break;
            }
            let Some(polled) = consumer.poll(Duration::from_millis(100)) else {
                continue;
            };
            let message = match polled {
                Ok(message) => message,
                Err(error) => {
                    warn!(changelog = %self.config.topic, partition, %error, "reading the changelog (retried)");
                    continue;
                }
            };
            if message.partition() != partition {
                continue;
            }
            let log_offset = message.offset();
            if let Some(record) = decode(
                log_offset,
                message.key().unwrap_or_default(),
                message.payload().unwrap_or_default(),
            ) {
                records.push(record);
            } else {
                warn!(changelog = %self.config.topic, partition, log_offset,
                    "a changelog record this version does not read (another format, or not written by mongoose): skipped");
            }
            if log_offset >= last {
                break;
            }
        }
        let _ = consumer.unassign();
        result.map(|()| records)
    }

    /// [`Changelog::read`]'s work.
    pub(super) fn read(&self, partition: i32) -> Result<Vec<StoredRecord>, KafkaConnectorError> {
        let probe = self.mark(partition, RecordKind::Probe, Epoch(0), None)?;
        self.read_through(partition, probe, false)
    }
}
