//! The broker calls of the comparison: topics, producing the records, the group's
//! committed offsets and members, reading a topic back, and the live alert watcher.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::truth::record;

/// How long one broker call may take.
const CALL: Duration = Duration::from_secs(30);

/// Milliseconds since the epoch, the clock the broker's append times use (it runs on
/// this machine).
pub(super) fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}

/// Creates `topic` with `partitions` partitions whose records carry the broker's
/// append time (`message.timestamp.type=LogAppendTime`).
pub(super) fn create_topic(brokers: &str, topic: &str, partitions: i32) -> Result<(), String> {
    mongoose_kafka::admin::create_topic(
        brokers,
        topic,
        partitions,
        &[("message.timestamp.type", "LogAppendTime")],
        CALL,
    )
    .map_err(|error| format!("creating topic {topic}: {error}"))
    .and_then(|created| {
        if created {
            Ok(())
        } else {
            Err(format!("topic {topic} existed already"))
        }
    })
}

/// Produces records `indexes` ([`record`]) to `topic`, keyed by account: batched
/// (`linger.ms=5`) with no `rate`, else one at a time at `rate` records/s.
pub(super) fn produce(
    brokers: &str,
    topic: &str,
    indexes: std::ops::Range<u64>,
    rate: Option<u64>,
) -> Result<(), String> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("linger.ms", if rate.is_some() { "0" } else { "5" })
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .map_err(|error| format!("the producer: {error}"))?;
    let started = Instant::now();
    let first = indexes.start;
    for index in indexes {
        if let Some(rate) = rate {
            let due = started + Duration::from_secs_f64((index - first) as f64 / rate as f64);
            while Instant::now() < due {
                producer.poll(due.saturating_duration_since(Instant::now()));
            }
        }
        let (key, value) = record(index);
        let mut sent = BaseRecord::to(topic).key(&key).payload(&value);
        loop {
            match producer.send(sent) {
                Ok(()) => break,
                Err((_, returned)) => {
                    sent = returned;
                    producer.poll(Duration::from_millis(5));
                }
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer
        .flush(Duration::from_secs(120))
        .map_err(|error| format!("producing to {topic}: not every record acknowledged: {error}"))
}

/// A client of `group` that reads its committed offsets and members without joining.
pub(super) fn watcher(brokers: &str, group: &str) -> Result<BaseConsumer, String> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|error| format!("a watcher of group {group}: {error}"))
}

/// The records of `topic` the group has committed, over all partitions (0 while the
/// broker does not answer).
pub(super) fn committed(consumer: &BaseConsumer, topic: &str, partitions: i32) -> i64 {
    mongoose_kafka::admin::committed_offsets_of(consumer, topic, partitions, CALL)
        .map_or(0, |offsets| {
            offsets.iter().map(|offset| (*offset).max(0)).sum()
        })
}

/// The group's state and member count, if the broker lists it.
pub(super) fn group_state(consumer: &BaseConsumer, group: &str) -> Option<(String, usize)> {
    let list = consumer
        .fetch_group_list(Some(group), Duration::from_secs(5))
        .ok()?;
    list.groups()
        .iter()
        .find(|found| found.name() == group)
        .map(|found| (found.state().to_owned(), found.members().len()))
}

/// Each partition's high watermark.
pub(super) fn ends(brokers: &str, topic: &str, partitions: i32) -> Result<Vec<i64>, String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(|error| format!("a client: {error}"))?;
    (0..partitions)
        .map(|partition| {
            consumer
                .fetch_watermarks(topic, partition, CALL)
                .map(|(_, high)| high)
                .map_err(|error| format!("the end of {topic}/{partition}: {error}"))
        })
        .collect()
}

/// A record read back.
#[derive(Clone, Debug)]
pub(super) struct Read {
    /// Its offset.
    pub(super) offset: i64,
    /// Its key.
    pub(super) key: Option<Vec<u8>>,
    /// Its value.
    pub(super) value: Option<Vec<u8>>,
    /// Its timestamp (the broker's append time on the topics the comparison creates).
    pub(super) timestamp: Option<i64>,
}

fn reader(brokers: &str, committed_only: bool) -> Result<BaseConsumer, String> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set(
            "group.id",
            format!(
                "versus-kstreams-reader-{}-{}",
                std::process::id(),
                now_millis()
            ),
        )
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("fetch.wait.max.ms", "10")
        .set(
            "isolation.level",
            if committed_only {
                "read_committed"
            } else {
                "read_uncommitted"
            },
        )
        .create()
        .map_err(|error| format!("a reader: {error}"))
}

/// Reads partitions `0..partitions` of `topic` from their start to their end
/// (`read_committed` with `committed_only`: a transaction's records once it committed).
pub(super) fn read_topic(
    brokers: &str,
    topic: &str,
    partitions: i32,
    committed_only: bool,
) -> Result<Vec<Vec<Read>>, String> {
    let consumer = reader(brokers, committed_only)?;
    let mut list = TopicPartitionList::new();
    for partition in 0..partitions {
        list.add_partition_offset(topic, partition, Offset::Beginning)
            .map_err(|error| format!("{topic}/{partition}: {error}"))?;
    }
    consumer
        .assign(&list)
        .map_err(|error| format!("reading {topic}: {error}"))?;
    let mut read: Vec<Vec<Read>> = vec![Vec::new(); partitions as usize];
    let mut at_end = vec![false; partitions as usize];
    let deadline = Instant::now() + Duration::from_secs(300);
    while at_end.iter().any(|done| !done) {
        if Instant::now() > deadline {
            return Err(format!("reading {topic}: its end not reached in 300 s"));
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(message)) => {
                let partition = message.partition() as usize;
                read[partition].push(Read {
                    offset: message.offset(),
                    key: message.key().map(<[u8]>::to_vec),
                    value: message.payload().map(<[u8]>::to_vec),
                    timestamp: message.timestamp().to_millis(),
                });
            }
            Some(Err(KafkaError::PartitionEOF(partition))) => {
                if let Some(done) = at_end.get_mut(partition as usize) {
                    *done = true;
                }
            }
            Some(Err(error)) => return Err(format!("reading {topic}: {error}")),
        }
    }
    Ok(read)
}

/// An alert seen by the live watcher: its text and when it arrived (ms since the
/// epoch).
pub(super) type Seen = (String, i64);

/// A `read_committed` consumer of the alerts topic from `from` (each partition's
/// offset) on, in a thread, noting when each alert arrives, until [`Live::finish`].
pub(super) struct Live {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<Vec<Seen>, String>>,
}

impl Live {
    /// Starts watching `topic` from `from`.
    pub(super) fn start(brokers: &str, topic: &str, from: &[i64]) -> Result<Live, String> {
        let consumer = reader(brokers, true)?;
        let mut list = TopicPartitionList::new();
        for (partition, offset) in from.iter().enumerate() {
            list.add_partition_offset(topic, partition as i32, Offset::Offset(*offset))
                .map_err(|error| format!("{topic}/{partition}: {error}"))?;
        }
        consumer
            .assign(&list)
            .map_err(|error| format!("watching {topic}: {error}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let topic = topic.to_owned();
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut stopped_at: Option<Instant> = None;
            loop {
                match consumer.poll(Duration::from_millis(20)) {
                    Some(Ok(message)) => {
                        let arrived = now_millis();
                        let text = String::from_utf8_lossy(message.payload().unwrap_or_default());
                        seen.push((text.into_owned(), arrived));
                        continue;
                    }
                    Some(Err(KafkaError::PartitionEOF(_))) | None => {}
                    Some(Err(error)) => return Err(format!("watching {topic}: {error}")),
                }
                // once told to stop: what is already on the broker arrives within a
                // second (each side's last alert is out before its last commit)
                if stopping.load(Ordering::Relaxed) {
                    let since = *stopped_at.get_or_insert_with(Instant::now);
                    if since.elapsed() > Duration::from_secs(1) {
                        return Ok(seen);
                    }
                }
            }
        });
        Ok(Live { stop, thread })
    }

    /// Stops watching; what arrived.
    pub(super) fn finish(self) -> Result<Vec<Seen>, String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| "the alert watcher panicked".to_owned())?
    }
}
