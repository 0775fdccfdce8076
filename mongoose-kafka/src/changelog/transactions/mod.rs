//! The changelog's transactions: one transactional producer per partition taken over,
//! whose transaction holds the partition's state changes, the outputs written with them
//! and the input offsets they cover, committed together every commit interval.
//!
//! * **One transactional id per partition** (`<changelog topic>-<partition>`), the same
//!   on every member: the member that takes a partition over initialises its producer
//!   with it, so the broker aborts what an earlier owner left open (a member killed
//!   mid-transaction) and fences that owner's producer for good (a member paused past
//!   its session and resumed: its next commit fails, and nothing it wrote counts). This
//!   is Kafka's per-input-partition exactly-once; the fence needs no consumer generation.
//! * **Durable means committed.** A write's tag reaches `on_durable` when its transaction
//!   commits (or never will: [`WriteFailure`]), so the input's own commit (the feed's
//!   commit gate) follows the transaction, which already holds the offsets: a crash
//!   between the two loses nothing and the new owner's position check skips what the
//!   transaction holds.
//! * **A broker that stops answering mid-transaction** (a pause) is waited out, within
//!   [`TransactionsConfig::broker_patience`]: a transaction that can neither commit nor
//!   abort gets a new producer of the same transactional id, and is committed once
//!   (`heal.rs`). A fence stays a fence: a producer the broker fenced is never replaced
//!   here.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use mongoose_core::state_store::{OnDurable, WriteFailure};
use mongoose_core::Epoch;
use parking_lot::Mutex;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use tracing::warn;

use super::ChangelogContext;

mod commit;

/// How a changelog commits in transactions.
#[derive(Clone, Debug)]
pub struct TransactionsConfig {
    /// The input's consumer group: the input offsets a transaction covers are committed
    /// in it for this group. `None`: the offsets are left to the input's own commit
    /// (the server's choice). With a group, a commit waits on the group's coordinator:
    /// librdkafka's `send_offsets_to_transaction` can wait forever, past its timeout,
    /// once that broker dies (librdkafka issues 5456 and 5511), and the partition's
    /// commits wait with it.
    pub group: Option<String>,
    /// How often the open transactions are committed (Kafka Streams' default under
    /// exactly-once is 100 ms): the latency a change adds to its input's commit.
    pub commit_interval: Duration,
    /// `transaction.timeout.ms`: how long the broker keeps a transaction of a member that
    /// stopped answering open before it aborts it (a takeover aborts it at once). When
    /// the broker aborts it, it fences the producer exactly as a takeover does, though
    /// the member may still hold the partition, so a member never keeps one open that
    /// long: a commit that cannot finish within it (less two request timeouts) is given
    /// up. Keep it above the feed's session timeout, so that a member
    /// stopped long enough for it is out of the group (its commits refused) first.
    pub transaction_timeout: Duration,
    /// How long a partition whose transaction could neither commit nor abort because the
    /// broker did not answer (a broker paused or cut off) waits for the broker to come
    /// back: its producer is then replaced by a new one of the same transactional id,
    /// and what its transaction held is committed once (`heal.rs`). Its writes wait
    /// meanwhile; past it, its changes are given up ([`WriteFailure::GivenUp`]) and
    /// their lines are read again after a restart.
    pub broker_patience: Duration,
}

impl TransactionsConfig {
    /// Transactions committing the offsets of `group`, every 100 ms, a 120 s timeout
    /// (above a commit's retries, 6 request timeouts of 10 s, with room to spare), and
    /// 60 s of patience with a broker that stopped answering mid-transaction.
    pub fn new(group: Option<&str>) -> Self {
        TransactionsConfig {
            group: group.map(str::to_owned),
            commit_interval: Duration::from_millis(100),
            transaction_timeout: Duration::from_secs(120),
            broker_patience: Duration::from_secs(60),
        }
    }
}

/// Until when a commit of a transaction opened at `opened` is retried: six request
/// timeouts from `now`, and never past the transaction's timeout less two request
/// timeouts (an attempt under way at the deadline, and the abort after it). Past its
/// timeout the broker aborts the transaction and fences the producer: a member that
/// still holds the partition would take that for a takeover, skip the partition's
/// lines and let its consumer commit them unapplied. Given up before it, the
/// transaction's lines are held and read again after a restart.
pub(super) fn commit_deadline(
    now: Instant,
    opened: Instant,
    request_timeout: Duration,
    transaction_timeout: Duration,
) -> Instant {
    let retries = now + request_timeout * 6;
    let limit = opened + transaction_timeout.saturating_sub(request_timeout * 2);
    retries.min(limit)
}

/// The transactional id of `partition`'s producer.
pub(super) fn transactional_id(topic: &str, partition: i32) -> String {
    format!("{topic}-{partition}")
}

/// One partition's producer and its open transaction.
pub(super) struct TxnPartition {
    pub(super) producer: ThreadedProducer<ChangelogContext>,
    /// The epoch the partition was taken over in.
    epoch: Epoch,
    /// A transaction is open (begun, not committed nor aborted).
    open: bool,
    /// The tags written in the open transaction.
    tags: Vec<u64>,
    /// The input offset (the next to read) the open transaction covers.
    through: Option<u64>,
    /// Why this producer writes no more (fenced, or a fatal error).
    dead: Option<WriteFailure>,
    /// Outputs waiting for the change they go with (`(key, payload)`).
    outputs: Vec<(Vec<u8>, Vec<u8>)>,
    /// The records sent in the open transaction, to send again in a new one when the
    /// broker makes it abort.
    sent: Vec<SentRecord>,
    /// Every record of the open transaction is in `sent` (a takeover's marker is not:
    /// its transaction is never written again).
    replayable: bool,
    /// When the open transaction was begun: the broker aborts it
    /// `transaction_timeout` after.
    opened: Instant,
}

/// What a fenced producer's open transaction held (its records, tags and input
/// offset), kept for [`super::Changelog::retake`] to write again when the fencer was a
/// stale owner.
pub(super) struct Stash {
    pub(super) epoch: Epoch,
    pub(super) sent: Vec<SentRecord>,
    pub(super) tags: Vec<u64>,
    pub(super) through: Option<u64>,
}

impl Stash {
    /// The kept transaction of `partition` in `epoch`: an earlier epoch's, never
    /// retaken, is replaced.
    fn of(stashes: &mut HashMap<i32, Stash>, partition: i32, epoch: Epoch) -> &mut Stash {
        let stash = stashes.entry(partition).or_insert_with(|| Stash {
            epoch,
            sent: Vec::new(),
            tags: Vec::new(),
            through: None,
        });
        if stash.epoch != epoch {
            *stash = Stash {
                epoch,
                sent: Vec::new(),
                tags: Vec::new(),
                through: None,
            };
        }
        stash
    }

    /// Records that the kept transaction holds `tag` (if any) and input offset `through`.
    fn holds(&mut self, tag: Option<u64>, through: Option<u64>) {
        self.tags.extend(tag);
        if let Some(through) = through {
            self.through = Some(self.through.map_or(through, |held| held.max(through)));
        }
    }
}

/// A record to send: its target (topic and partition), key and payload.
pub(super) type PendingRecord<'a> = ((&'a str, Option<i32>), &'a [u8], &'a [u8]);

/// A record sent in an open transaction.
pub(super) struct SentRecord {
    pub(super) topic: String,
    pub(super) partition: Option<i32>,
    pub(super) key: Vec<u8>,
    pub(super) payload: Vec<u8>,
}

/// Replaces a partition's producer whose transaction could neither commit nor abort
/// because the broker did not answer (the changelog does: `heal.rs`).
pub(super) trait ReplaceProducer: Send + Sync {
    /// Waits (until `until`) for the broker, puts a new producer of the partition's
    /// transactional id in `producer`'s place and decides what its open transaction
    /// (which failed with `why`) became. `Ok`: it committed (its tags are back in
    /// `producer`, durable), or it was aborted and is written again in a new open
    /// transaction. `Err`: the failure its tags are reported with (they are back in
    /// `producer`): a newer owner holds the partition (fenced), or the broker did not
    /// come back in time (given up).
    fn replace_producer(
        &self,
        partition: i32,
        producer: &mut TxnPartition,
        why: &str,
        until: Instant,
    ) -> Result<Replaced, WriteFailure>;
}

/// What a replaced producer's transaction turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Replaced {
    /// It had committed: its tags are durable.
    Committed,
    /// It was aborted (or never committed): a new transaction holds it again.
    Reopened,
}

/// How many times a transaction the broker made abort is written again.
const REPLAYS: u32 = 3;

impl TxnPartition {
    pub(super) fn new(producer: ThreadedProducer<ChangelogContext>, epoch: Epoch) -> Self {
        TxnPartition {
            producer,
            epoch,
            open: false,
            tags: Vec::new(),
            through: None,
            dead: None,
            outputs: Vec::new(),
            sent: Vec::new(),
            replayable: true,
            opened: Instant::now(),
        }
    }

    /// The epoch the partition was taken over in.
    pub(super) fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// Opens a transaction on a new producer holding what `stash` held: its records
    /// sent again, its tags reported when it commits.
    pub(super) fn reopen(
        &mut self,
        partition: i32,
        stash: Stash,
    ) -> Result<(), (WriteFailure, Stash)> {
        if let Err(failure) = self.begin(partition) {
            return Err((failure, stash));
        }
        for sent in &stash.sent {
            if let Err(error) = super::send_record(
                &self.producer,
                (&sent.topic, sent.partition),
                &sent.key,
                &sent.payload,
                Box::new(super::Opaque::InTransaction),
            ) {
                let failure = failure_of(partition, self.epoch, &error);
                self.dead = Some(failure.clone());
                return Err((failure, stash));
            }
        }
        self.tags.extend_from_slice(&stash.tags);
        if let Some(through) = stash.through {
            self.holds(None, Some(through));
        }
        self.sent = stash.sent;
        Ok(())
    }

    /// Takes what the open transaction holds (its records, tags and input offset) out of
    /// it, to decide its fate on a new producer: the transaction counts as ended here.
    pub(super) fn take_transaction(&mut self) -> Stash {
        self.open = false;
        Stash {
            epoch: self.epoch,
            sent: std::mem::take(&mut self.sent),
            tags: std::mem::take(&mut self.tags),
            through: self.through.take(),
        }
    }

    /// Gives back what [`TxnPartition::take_transaction`] took, when its fate stays
    /// undecided (the caller reports its tags).
    pub(super) fn give_back(&mut self, stash: Stash) {
        self.sent = stash.sent;
        self.tags.extend_from_slice(&stash.tags);
        if let Some(through) = stash.through {
            self.holds(None, Some(through));
        }
        self.replayable = true;
    }

    /// Puts in `fresh`, a new producer of the partition's transactional id, initialised
    /// (it fenced this one's old producer): no transaction is open on it.
    pub(super) fn replace(&mut self, fresh: ThreadedProducer<ChangelogContext>) {
        self.producer = fresh;
        self.dead = None;
        self.open = false;
        self.sent.clear();
        self.replayable = true;
    }

    /// Keeps a record sent in the open transaction, to send again if it aborts.
    pub(super) fn remember(
        &mut self,
        (topic, partition): (&str, Option<i32>),
        key: &[u8],
        payload: &[u8],
    ) {
        self.sent.push(SentRecord {
            topic: topic.to_owned(),
            partition,
            key: key.to_vec(),
            payload: payload.to_vec(),
        });
    }

    /// The open transaction holds a record that is not kept (a takeover's marker): it
    /// is not written again.
    pub(super) fn not_replayable(&mut self) {
        self.replayable = false;
    }

    /// Holds an output until the next change is written.
    pub(super) fn hold_output(&mut self, key: &[u8], payload: &[u8]) {
        self.outputs.push((key.to_vec(), payload.to_vec()));
    }

    /// The outputs held for the change being written.
    pub(super) fn take_outputs(&mut self) -> Vec<(Vec<u8>, Vec<u8>)> {
        std::mem::take(&mut self.outputs)
    }

    /// After a failed send: when the producer hit a fatal error (fenced by the
    /// partition's new owner, most often), it writes no more, and the failure says
    /// why; `None` when it still works (the send's error is the caller's).
    pub(super) fn fatal(&mut self, partition: i32) -> Option<WriteFailure> {
        let (code, message) = self.producer.client().fatal_error()?;
        let failure = failure_from(partition, self.epoch, Some(code), message);
        self.dead = Some(failure.clone());
        Some(failure)
    }

    /// Why the partition takes no writes, if it does not.
    pub(super) fn dead(&self) -> Option<&WriteFailure> {
        self.dead.as_ref()
    }

    /// Opens a transaction if none is.
    pub(super) fn begin(&mut self, partition: i32) -> Result<(), WriteFailure> {
        if let Some(dead) = &self.dead {
            return Err(dead.clone());
        }
        if !self.open {
            if let Err(error) = self.producer.begin_transaction() {
                let failure = failure_of(partition, self.epoch, &error);
                self.dead = Some(failure.clone());
                return Err(failure);
            }
            self.open = true;
            self.opened = Instant::now();
            self.sent.clear();
            self.replayable = true;
        }
        Ok(())
    }

    /// Records that the open transaction holds `tag` (if any) and input offset `through`.
    pub(super) fn holds(&mut self, tag: Option<u64>, through: Option<u64>) {
        if let Some(tag) = tag {
            self.tags.push(tag);
        }
        if let Some(through) = through {
            self.through = Some(self.through.map_or(through, |held| held.max(through)));
        }
    }
}

/// What a failed transactional call means for the partition.
fn failure_of(partition: i32, epoch: Epoch, error: &KafkaError) -> WriteFailure {
    failure_from(
        partition,
        epoch,
        error.rdkafka_error_code(),
        error.to_string(),
    )
}

/// A failure of code `code` with `message`: the partition is fenced (another producer
/// of its transactional id took over) or its writes are given up.
fn failure_from(
    partition: i32,
    epoch: Epoch,
    code: Option<RDKafkaErrorCode>,
    message: String,
) -> WriteFailure {
    let fenced = matches!(
        code,
        Some(
            RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch
                | RDKafkaErrorCode::Fenced
                | RDKafkaErrorCode::InvalidProducerIdMapping
        )
    );
    if fenced {
        WriteFailure::Fenced {
            partition,
            epoch,
            message,
        }
    } else {
        WriteFailure::GivenUp(message)
    }
}

/// Whether the transaction may simply be committed again later.
pub(super) fn retriable(error: &KafkaError) -> bool {
    match error {
        KafkaError::Transaction(error) => error.is_retriable(),
        // `commit_transaction` flushes first: records still in flight at its timeout
        KafkaError::Flush(_) => true,
        _ => false,
    }
}

/// Whether the transaction must be aborted (the producer itself still works).
fn requires_abort(error: &KafkaError) -> bool {
    matches!(error, KafkaError::Transaction(error) if error.txn_requires_abort())
}

/// The transactional partitions of one changelog and the thread that commits them.
pub(super) struct Transactions {
    pub(super) config: TransactionsConfig,
    pub(super) partitions: Mutex<HashMap<i32, Arc<Mutex<TxnPartition>>>>,
    name: String,
    input_topic: String,
    on_durable: OnDurable,
    /// The metadata of `config.group` (no member, no generation: the transactional id
    /// fences, not the consumer generation).
    group: Option<ConsumerGroupMetadata>,
    request_timeout: Duration,
    /// Per partition, the open transaction of its fenced producer, kept for a retake.
    stashes: Mutex<HashMap<i32, Stash>>,
    /// What replaces a partition's producer when the broker stopped answering in the
    /// middle of its transaction (the changelog, set once it is made).
    replacer: std::sync::OnceLock<Weak<dyn ReplaceProducer>>,
    /// Dropped (or sent to) to stop the committer thread at once.
    stop: Mutex<Option<Sender<()>>>,
    committer: Mutex<Option<JoinHandle<()>>>,
}

impl Transactions {
    /// Starts the committer thread.
    pub(super) fn start(
        config: TransactionsConfig,
        name: &str,
        input_topic: &str,
        on_durable: OnDurable,
        group: Option<ConsumerGroupMetadata>,
        request_timeout: Duration,
    ) -> Arc<Self> {
        let (stop, stopped) = bounded(1);
        let transactions = Arc::new(Transactions {
            config,
            partitions: Mutex::new(HashMap::new()),
            name: name.to_owned(),
            input_topic: input_topic.to_owned(),
            on_durable,
            group,
            request_timeout,
            stashes: Mutex::new(HashMap::new()),
            replacer: std::sync::OnceLock::new(),
            stop: Mutex::new(Some(stop)),
            committer: Mutex::new(None),
        });
        let weak = Arc::downgrade(&transactions);
        let interval = transactions.config.commit_interval;
        let spawned = std::thread::Builder::new()
            .name(format!("{name}-txn"))
            .spawn(move || commit_loop(&weak, interval, &stopped));
        match spawned {
            Ok(handle) => *transactions.committer.lock() = Some(handle),
            Err(error) => {
                warn!(changelog = %name, %error, "could not start the transaction committer: transactions commit at flush only");
            }
        }
        transactions
    }

    /// Sets what replaces a partition's producer when the broker stopped answering
    /// mid-transaction (without it, that partition's changes are given up).
    pub(super) fn replace_through(&self, replacer: Weak<dyn ReplaceProducer>) {
        let _ = self.replacer.set(replacer);
    }

    /// Whether the changelog is closing (its committer stopped).
    pub(super) fn stopping(&self) -> bool {
        self.stop.lock().is_none()
    }

    /// The partition's producer, if it was taken over.
    pub(super) fn partition(&self, partition: i32) -> Option<Arc<Mutex<TxnPartition>>> {
        self.partitions.lock().get(&partition).cloned()
    }

    /// Retires `partition`'s producer, if it has one, before a new one is made for a new
    /// epoch: what it holds (writes of this member's earlier ownership) is committed
    /// first, or reported never durable.
    pub(super) fn retire(&self, partition: i32) {
        let previous = self.partitions.lock().remove(&partition);
        if let Some(previous) = previous {
            let mut previous = previous.lock();
            // what does not commit is reported never durable
            let _ = self.commit(partition, &mut previous);
            self.fail_open(partition, &mut previous);
        }
    }

    /// Puts in `partition`'s new producer (after [`Transactions::retire`]) and gives it
    /// back.
    pub(super) fn install(&self, partition: i32, fresh: TxnPartition) -> Arc<Mutex<TxnPartition>> {
        let producer = Arc::new(Mutex::new(fresh));
        self.partitions
            .lock()
            .insert(partition, Arc::clone(&producer));
        producer
    }

    /// Commits every open transaction.
    pub(super) fn commit_all(&self) {
        let partitions: Vec<(i32, Arc<Mutex<TxnPartition>>)> = self
            .partitions
            .lock()
            .iter()
            .map(|(partition, producer)| (*partition, Arc::clone(producer)))
            .collect();
        for (partition, producer) in partitions {
            // a failure reached the tags' callback; the next round goes on
            let _ = self.commit_or_replace(partition, &mut producer.lock(), true);
        }
    }

    /// Whether some transaction is still open.
    pub(super) fn any_open(&self) -> bool {
        self.partitions
            .lock()
            .values()
            .any(|producer| producer.lock().open)
    }

    /// Adds records, and the tag and input offset of their change, to the kept
    /// transaction of `partition`'s producer fenced in `epoch` (kept from now on if
    /// nothing was: a producer fenced while it held no open transaction).
    pub(super) fn stash(
        &self,
        partition: i32,
        epoch: Epoch,
        records: &[PendingRecord<'_>],
        change: Option<(u64, u64)>,
    ) {
        let mut stashes = self.stashes.lock();
        let stash = Stash::of(&mut stashes, partition, epoch);
        for ((topic, target), key, payload) in records {
            stash.sent.push(SentRecord {
                topic: (*topic).to_owned(),
                partition: *target,
                key: key.to_vec(),
                payload: payload.to_vec(),
            });
        }
        stash.holds(
            change.map(|(tag, _)| tag),
            change.map(|(_, through)| through),
        );
    }

    /// Takes the kept transaction of `partition`'s producer fenced in `epoch`.
    pub(super) fn take_stash(&self, partition: i32, epoch: Epoch) -> Option<Stash> {
        let mut stashes = self.stashes.lock();
        if stashes.get(&partition)?.epoch != epoch {
            return None;
        }
        stashes.remove(&partition)
    }

    /// Keeps `stash` again (a retake that could not finish: tried again later).
    pub(super) fn keep_stash(&self, partition: i32, stash: Stash) {
        self.stashes.lock().insert(partition, stash);
    }

    /// Forgets what a producer of `partition` fenced in an earlier epoch kept (the
    /// partition is taken over in a new one).
    pub(super) fn forget_stash(&self, partition: i32) {
        self.stashes.lock().remove(&partition);
    }

    /// Reports every tag of a transaction that will never commit.
    pub(super) fn fail_open(&self, partition: i32, producer: &mut TxnPartition) {
        let failure = producer
            .dead
            .clone()
            .unwrap_or_else(|| WriteFailure::Fenced {
                partition,
                epoch: producer.epoch,
                message: "the partition was taken over again by this member before its transaction committed".to_owned(),
            });
        producer.open = false;
        let through = producer.through.take();
        // a fenced producer's transaction is kept: the fencer may be a stale owner
        // (a member whose lines of an earlier assignment were still queued), and this
        // member, still the partition's owner, writes it again (`Changelog::retake`)
        if matches!(failure, WriteFailure::Fenced { .. })
            && producer.replayable
            && !(producer.sent.is_empty() && producer.tags.is_empty())
        {
            let mut stashes = self.stashes.lock();
            let stash = Stash::of(&mut stashes, partition, producer.epoch);
            stash.sent.append(&mut producer.sent);
            stash.tags.extend_from_slice(&producer.tags);
            stash.holds(None, through);
        }
        for tag in producer.tags.drain(..) {
            (self.on_durable)(tag, Err(failure.clone()));
        }
    }

    fn send_offsets(&self, partition: i32, producer: &TxnPartition) -> Result<(), KafkaError> {
        let (Some(group), Some(through)) = (&self.group, producer.through) else {
            return Ok(());
        };
        let mut offsets = TopicPartitionList::with_capacity(1);
        offsets.add_partition_offset(
            &self.input_topic,
            partition,
            Offset::Offset(i64::try_from(through).unwrap_or(i64::MAX)),
        )?;
        producer
            .producer
            .send_offsets_to_transaction(&offsets, group, self.request_timeout)
    }

    /// Stops the committer thread (what is open stays open: the next owner aborts it).
    pub(super) fn stop(&self) {
        self.stop.lock().take();
        if let Some(handle) = self.committer.lock().take() {
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
    }
}

fn commit_loop(transactions: &Weak<Transactions>, interval: Duration, stopped: &Receiver<()>) {
    loop {
        match stopped.recv_timeout(interval) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        let Some(transactions) = transactions.upgrade() else {
            return;
        };
        transactions.commit_all();
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{commit_deadline, TransactionsConfig};

    // The kafka_broker test's killed broker: a commit retried for six request timeouts
    // (60 s) kept a transaction open past the broker's 30 s timeout; the broker aborted
    // it and fenced the producer though this member still held the partition, which
    // skipped the partition's later lines and let its consumer commit them unapplied.
    #[test]
    fn a_commit_is_never_retried_past_the_transaction_s_timeout() {
        let request = Duration::from_secs(10);
        let opened = Instant::now();
        // a transaction opened long ago: the limit is its timeout less two requests
        let late = opened + Duration::from_secs(25);
        assert_eq!(
            commit_deadline(late, opened, request, Duration::from_secs(30)),
            opened + Duration::from_secs(10)
        );
        // a fresh one: six request timeouts, within the default timeout's limit
        let config = TransactionsConfig::new(None);
        let deadline = commit_deadline(opened, opened, request, config.transaction_timeout);
        assert_eq!(deadline, opened + request * 6);
        assert!(
            deadline + request * 2 <= opened + config.transaction_timeout,
            "the default timeout leaves a commit its six retries, an attempt under way and an abort"
        );
    }
}
