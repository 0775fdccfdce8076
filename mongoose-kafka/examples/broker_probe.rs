//! Probes what the broker at `MONGOOSE_KAFKA_BROKERS` (default 127.0.0.1:19092)
//! supports, with rdkafka: topic creation, an idempotent producer, consumer groups
//! (join, rebalance between two members), offset commits with metadata, transactions
//! (with offsets), and compaction. Prints one line per feature with the exact error of
//! what fails: `cargo run -p mongoose-kafka --example broker_probe`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

fn consumer(brokers: &str, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .create()
        .expect("consumer")
}

fn report(feature: &str, result: Result<String, String>) {
    match result {
        Ok(detail) => println!("OK    {feature}: {detail}"),
        Err(error) => println!("FAIL  {feature}: {error}"),
    }
}

fn main() {
    let brokers = common::brokers();
    let topic = common::unique("probe");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .create()
        .expect("admin");
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let created = mongoose_kafka::block_on(admin.create_topics(
        [&NewTopic::new(&topic, 2, TopicReplication::Fixed(1))],
        &options,
    ));
    report(
        "create topic (2 partitions)",
        match created {
            Ok(results) => match results.into_iter().next() {
                Some(Ok(name)) => Ok(name),
                Some(Err((name, code))) => Err(format!("{name}: {code:?}")),
                None => Err("no result".into()),
            },
            Err(error) => Err(error.to_string()),
        },
    );

    // idempotent producer
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    for n in 0..20 {
        let key = format!("k{n}");
        producer
            .send(BaseRecord::to(&topic).key(&key).payload("v"))
            .expect("queued");
    }
    report(
        "idempotent producer (enable.idempotence=true, 20 records)",
        producer
            .flush(Duration::from_secs(20))
            .map(|()| "flushed".into())
            .map_err(|error| error.to_string()),
    );

    // consumer group: one member, then a second: a rebalance
    let group = common::unique("probe-group");
    let first = consumer(&brokers, &group);
    first.subscribe(&[&topic]).expect("subscribe");
    let mut read = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while read < 20 && Instant::now() < deadline {
        if let Some(Ok(_)) = first.poll(Duration::from_millis(100)) {
            read += 1;
        }
    }
    report(
        "consumer group join/sync/fetch (one member)",
        if read == 20 {
            Ok(format!(
                "read {read}, assignment {:?}",
                first.assignment().map(|a| a.count())
            ))
        } else {
            Err(format!("read {read} of 20 in 30 s"))
        },
    );

    // offset commit with metadata, read back
    let mut list = TopicPartitionList::new();
    {
        let mut element = list.add_partition(&topic, 0);
        element.set_offset(Offset::Offset(3)).expect("offset");
        element.set_metadata("mongoose:1:ab:probe");
    }
    let committed = first
        .commit(&list, CommitMode::Sync)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            let mut query = TopicPartitionList::new();
            query.add_partition(&topic, 0);
            first
                .committed_offsets(query, Duration::from_secs(10))
                .map_err(|e| e.to_string())
                .map(|back| {
                    let element = back.find_partition(&topic, 0).expect("p0");
                    format!(
                        "committed {:?} with metadata {:?}",
                        element.offset(),
                        element.metadata()
                    )
                })
        });
    report("offset commit with metadata (and OffsetFetch)", committed);

    // a second member: a rebalance
    let second = consumer(&brokers, &group);
    second.subscribe(&[&topic]).expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut balanced = false;
    while Instant::now() < deadline {
        first.poll(Duration::from_millis(50));
        second.poll(Duration::from_millis(50));
        let a = first.assignment().map(|a| a.count()).unwrap_or(0);
        let b = second.assignment().map(|a| a.count()).unwrap_or(0);
        if a == 1 && b == 1 {
            balanced = true;
            break;
        }
    }
    report(
        "rebalance (a second member joins: 1 partition each)",
        if balanced {
            Ok("each member holds one partition".into())
        } else {
            Err(format!(
                "after 40 s: first {:?}, second {:?}",
                first.assignment().map(|a| a.count()),
                second.assignment().map(|a| a.count())
            ))
        },
    );

    // transactions
    let transactional: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("transactional.id", common::unique("probe-tx"))
        .create()
        .expect("transactional producer");
    let transaction = (|| -> Result<String, String> {
        transactional
            .init_transactions(Duration::from_secs(10))
            .map_err(|e| format!("init_transactions: {e}"))?;
        transactional
            .begin_transaction()
            .map_err(|e| format!("begin_transaction: {e}"))?;
        transactional
            .send(BaseRecord::to(&topic).key("tx").payload("tx"))
            .map_err(|(e, _)| format!("send: {e}"))?;
        let mut offsets = TopicPartitionList::new();
        offsets
            .add_partition_offset(&topic, 1, Offset::Offset(1))
            .map_err(|e| e.to_string())?;
        let metadata = first.group_metadata().ok_or("no group metadata")?;
        transactional
            .send_offsets_to_transaction(&offsets, &metadata, Duration::from_secs(10))
            .map_err(|e| format!("send_offsets_to_transaction: {e}"))?;
        transactional
            .commit_transaction(Duration::from_secs(10))
            .map_err(|e| format!("commit_transaction: {e}"))?;
        Ok("init, begin, send, send_offsets_to_transaction, commit: all succeeded".into())
    })();
    report("transactions (with consumer offsets)", transaction);

    // a fetch from an offset inside a record batch (librdkafka does it after a pause,
    // a rebalance or a restart from a committed offset)
    let batched = common::unique("probe-batch");
    common::create_topic(&brokers, &batched, 1, &[]);
    common::produce_batched(&brokers, &batched, 0, 50, 1, true); // a few batches
    let single = common::unique("probe-single");
    common::create_topic(&brokers, &single, 1, &[]);
    common::produce(&brokers, &single, 0, 50, 1); // one record per batch
    for (probed, start) in [
        (batched.as_str(), 0i64),
        (batched.as_str(), 1),
        (batched.as_str(), 15),
        (batched.as_str(), 49),
        (single.as_str(), 15),
        (single.as_str(), 49),
    ] {
        let reader: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("group.id", common::unique("probe-mid"))
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(probed, 0, Offset::Offset(start))
            .expect("offset");
        reader.assign(&list).expect("assign");
        let mut first = None;
        let mut count = 0;
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Some(Ok(message)) = reader.poll(Duration::from_millis(100)) {
                first.get_or_insert(message.offset());
                count += 1;
            }
        }
        report(
            &format!(
                "fetch from offset {start} of a 50-record partition written {}",
                if probed == single {
                    "one record per batch"
                } else {
                    "in batches"
                }
            ),
            if first == Some(start) && count == 50 - start {
                Ok(format!("{count} records from {first:?}"))
            } else {
                Err(format!("{count} records in 5 s, the first at {first:?}"))
            },
        );
    }
    // the high watermark (ListOffsets) of the partitions just written, and how long the
    // earliest offset takes to come back
    for probed in [batched.as_str(), single.as_str()] {
        let started = Instant::now();
        let watermarks = producer
            .client()
            .fetch_watermarks(probed, 0, Duration::from_secs(10));
        let took = started.elapsed();
        report(
            &format!(
                "watermarks (ListOffsets) of a 50-record partition written {}",
                if probed == single {
                    "one record per batch"
                } else {
                    "in batches"
                }
            ),
            match watermarks {
                Ok((0, 50)) => Ok(format!("low 0, high 50, answered in {took:?}")),
                Ok((low, high)) => Err(format!("low {low}, high {high} (want 0 and 50)")),
                Err(error) => Err(error.to_string()),
            },
        );
    }
    // compaction
    let compacted = common::unique("probe-compact");
    let created = mongoose_kafka::block_on(
        admin.create_topics(
            [&NewTopic::new(&compacted, 1, TopicReplication::Fixed(1))
                .set("cleanup.policy", "compact")],
            &options,
        ),
    );
    report(
        "create a topic with cleanup.policy=compact",
        match created {
            Ok(results) => match results.into_iter().next() {
                Some(Ok(name)) => Ok(name),
                Some(Err((name, code))) => Err(format!("{name}: {code:?}")),
                None => Err("no result".into()),
            },
            Err(error) => Err(error.to_string()),
        },
    );
    for n in 0..50 {
        producer
            .send(
                BaseRecord::to(&compacted)
                    .key("same")
                    .payload(&n.to_string()),
            )
            .expect("queued");
    }
    producer.flush(Duration::from_secs(20)).expect("flushed");
    std::thread::sleep(Duration::from_secs(5));
    let reader = consumer(&brokers, &common::unique("probe-compact-group"));
    reader.subscribe(&[&compacted]).expect("subscribe");
    let mut seen = 0;
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if let Some(Ok(message)) = reader.poll(Duration::from_millis(100)) {
            let _ = message.payload();
            seen += 1;
        }
    }
    report(
        "compaction (50 records of one key, read back after 5 s)",
        if seen <= 1 {
            Ok(format!("{seen} record(s) left"))
        } else {
            Err(format!("{seen} records of one key read back: not compacted (Apache Kafka compacts closed segments only: none closes within 5 s at the default segment.ms and segment.bytes)"))
        },
    );
}
