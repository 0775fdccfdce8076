//! Whole-pipeline figures for `cargo mongoose-bench all`: records/s from a Kafka topic through a
//! `KafkaSource`, the delivery engine (a PAUSE queue) and a counting processor, with one
//! consumer, against the test broker (`cargo xtask broker start`).
//!
//! ```text
//! cargo run --release -p mongoose-kafka --example kafka_feed_bench -- --records 200000 --bytes 100
//! ```
//!
//! Writes `--records` records of `--bytes` bytes to a new 3-partition topic (batched,
//! timed on its own), then times a new group's member from its start to the last record
//! processed and its offsets committed at the end. `--queue N` sets the feed's queue
//! (default 1,048,576: larger than the run, so the feed does not pause; tansu 0.6, the
//! first test broker, could not fetch from an offset inside a record batch, which a
//! resume after a pause does; Apache Kafka can). `--one-per-batch 1` writes one record
//! per batch, as the tests do (tansu returned many batches per fetch: 66 k records/s
//! from the first record on a shared machine, against 75 k batched). Prints nothing but
//! a skip message when no broker answers.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use mongoose_core::engine::PendingCompletion;
use mongoose_core::{Delivery, IdleStrategy, ProcessorError};
use mongoose_delivery::{DispatchOutcome, Dispatcher, SourceDriver};
use mongoose_kafka::KafkaRecord;

struct Count {
    records: Arc<AtomicU64>,
    bytes: u64,
}

impl Dispatcher<KafkaRecord> for Count {
    fn dispatch(&mut self, item: &KafkaRecord, _attempt: u32) -> DispatchOutcome {
        self.bytes += item.payload.len() as u64;
        self.records.fetch_add(1, Ordering::Release);
        DispatchOutcome::Done
    }

    fn complete(
        &mut self,
        _completion: PendingCompletion,
        _delivery: &Delivery,
    ) -> Result<(), ProcessorError> {
        Ok(())
    }
}

fn argument(name: &str, default: u64) -> u64 {
    let arguments: Vec<String> = std::env::args().collect();
    arguments
        .iter()
        .position(|argument| argument == name)
        .and_then(|at| arguments.get(at + 1))
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // warnings only (the tests' fixtures log at info)
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .try_init();
    let Some(brokers) = common::broker_or_skip("kafka_feed_bench") else {
        return;
    };
    let records = argument("--records", 200_000);
    let bytes = argument("--bytes", 100) as usize;
    let queue = argument("--queue", 1 << 20) as usize;
    let partitions = 3;
    let topic = common::unique("bench");
    common::create_topic(&brokers, &topic, partitions, &[]);
    let payload = vec![b'x'; bytes];
    // `--one-per-batch 1`: one record per batch, as the tests write them
    let one_per_batch = argument("--one-per-batch", 0) == 1;
    let started = Instant::now();
    {
        use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
        let producer: BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("linger.ms", if one_per_batch { "0" } else { "5" })
            .set(
                "batch.num.messages",
                if one_per_batch { "1" } else { "10000" },
            )
            .set("queue.buffering.max.messages", "1000000")
            .create()
            .expect("producer");
        for n in 0..records {
            let key = (n % 64).to_string();
            while let Err((_, _)) =
                producer.send(BaseRecord::to(&topic).key(&key).payload(&payload))
            {
                producer.poll(Duration::from_millis(5));
            }
            if n % 1000 == 0 {
                producer.poll(Duration::ZERO);
            }
        }
        producer.flush(Duration::from_secs(300)).expect("flushed");
    }
    let produced = started.elapsed();
    println!(
        "kafka_feed_bench: produced {records} records of {bytes} B in {:.2} s ({:.0} records/s, batched, not part of the figure)",
        produced.as_secs_f64(),
        records as f64 / produced.as_secs_f64()
    );

    let group = common::unique("bench-group");
    let mut config = common::source_config(&brokers, &group, &topic);
    config.batch = 2000;
    let mut pipeline = common::pipeline(config, queue);
    let counted = Arc::new(AtomicU64::new(0));
    let mut count = Count {
        records: Arc::clone(&counted),
        bytes: 0,
    };
    let feed = pipeline.feed.clone();
    let driver = SourceDriver::new("kafka", IdleStrategy::SleepingMillis(1));
    let stop = driver.stop_handle();
    let mut source = pipeline.source;
    let started = Instant::now();
    let running = thread::spawn(move || driver.run(&mut source, &*feed));
    let mut first: Option<Instant> = None;
    while counted.load(Ordering::Acquire) < records {
        if pipeline.reader.poll(&mut count, 1024) == 0 {
            thread::sleep(Duration::from_micros(200));
        } else if first.is_none() {
            first = Some(Instant::now());
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the run took over 10 min"
        );
    }
    let processed = started.elapsed();
    let from_first = first.map_or(processed, |first| first.elapsed());
    let total: i64 = loop {
        let committed = common::committed(&brokers, &group, &topic, partitions);
        let total: i64 = committed.iter().map(|offset| (*offset).max(0)).sum();
        if total as u64 >= records {
            break total;
        }
        thread::sleep(Duration::from_millis(20));
    };
    let committed = started.elapsed();
    stop.stop();
    running.join().expect("driver").expect("clean stop");
    println!(
        "kafka_feed_bench: one consumer, {records} records of {bytes} B, queue {queue}: {:.0} records/s from start to last processed ({:.2} s, of which {:.2} s to the first record: join, assignment, epochs), {:.0} records/s from the first record; all {total} committed after {:.2} s; {} MiB of payload",
        records as f64 / processed.as_secs_f64(),
        processed.as_secs_f64(),
        (processed - from_first).as_secs_f64(),
        records as f64 / from_first.as_secs_f64(),
        committed.as_secs_f64(),
        count.bytes >> 20
    );
}
