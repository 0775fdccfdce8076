//! Recording overhead and replay speed, printed for `cargo mongoose-bench all`: events/s of a
//! one-hop pipeline (a positioned delivery-engine feed -> a processor group with one
//! counting processor) with RECORD off, on (a write per entry) and on with a write
//! buffer (one write per poll), then the replay speed of the recording.
//!
//! `cargo run --release -p mongoose-replay --example replay_bench -- [events]`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_control::{ControlConfig, ControlPlane, DeliveryFeeds, GroupOptions, IdleStrategy};
use mongoose_core::{
    BatchEnd, CoreError, Epoch, Processor, ProcessorError, SourceCommitter, SourceOutput,
    StartContext,
};
use mongoose_delivery::{Feed, FeedRegistry, Publisher};
use mongoose_replay::{FeedCodecs, RecordConfig, Recorder, Replayer};

struct NoOpCommitter;
impl SourceCommitter<u64> for NoOpCommitter {
    fn acknowledged(&mut self, _: u64, _: Epoch, _: u64) {}
    fn commit(&mut self) -> Result<(), CoreError> {
        Ok(())
    }
}

struct Counter {
    seen: Arc<AtomicU64>,
    sum: u64,
}

impl Counter {
    fn on_item(&mut self, item: &u64) -> Result<(), ProcessorError> {
        self.sum = self.sum.wrapping_add(*item);
        self.seen.fetch_add(1, Ordering::Release);
        Ok(())
    }
}

impl Processor for Counter {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("bench", Counter::on_item)
    }
}

fn codecs() -> FeedCodecs {
    FeedCodecs::new().feed::<u64>("bench")
}

/// Runs `events` through the pipeline; returns the time from the first publish to the
/// last item counted.
fn pipeline(events: u64, recorder: Option<Recorder>) -> Duration {
    let feeds = DeliveryFeeds::new(FeedRegistry::default());
    let feed: Arc<Publisher<u64, u64>> = Feed::builder("bench").queue_capacity(16 * 1024).build();
    feed.acknowledge_with(Box::new(NoOpCommitter));
    feed.set_pause_by_default(true);
    feeds.register(Arc::clone(&feed)).expect("registered");
    feed.start_complete();
    let plane = ControlPlane::new(ControlConfig::default(), Arc::new(feeds));
    plane
        .create_group(
            "bench",
            GroupOptions {
                idle: IdleStrategy::Yield,
                poll_limit: 4096,
                recorder: recorder.map(|r| Box::new(r) as _),
                ..GroupOptions::default()
            },
        )
        .expect("group");
    let seen = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&seen);
    let added = plane.add_processor("bench", "counter", move || Counter {
        seen: counted,
        sum: 0,
    });
    assert!(added
        .reply
        .wait_for(Duration::from_secs(30))
        .expect("answered")
        .applied());
    let started = Instant::now();
    let mut next = 1u64;
    while next <= events {
        feed.poll_acknowledgements();
        let batch_end = (next + 1024).min(events + 1);
        let mut produce = || {
            (next < batch_end).then(|| {
                let item = next;
                next += 1;
                (item, item)
            })
        };
        if let BatchEnd::Paused = feed.try_publish_batch(&mut produce) {
            std::thread::yield_now();
        }
    }
    while seen.load(Ordering::Acquire) < events {
        feed.poll_acknowledgements();
        std::thread::yield_now();
    }
    let elapsed = started.elapsed();
    plane.close_groups(Instant::now() + Duration::from_secs(60));
    elapsed
}

fn rate(events: u64, elapsed: Duration) -> f64 {
    events as f64 / elapsed.as_secs_f64()
}

fn main() {
    let events: u64 = std::env::args()
        .nth(1)
        .and_then(|arg| arg.parse().ok())
        .unwrap_or(500_000);
    println!("replay_bench: {events} events, one-hop pipeline (delivery feed -> group -> one counting processor)");

    let off = pipeline(events, None);
    println!(
        "  RECORD off                      : {:>12.0} events/s",
        rate(events, off)
    );

    let unbuffered = tempfile::tempdir().expect("temp dir");
    let recorder = Recorder::create(unbuffered.path(), RecordConfig::new(["counter"], codecs()))
        .expect("recorder");
    let on = pipeline(events, Some(recorder));
    println!(
        "  RECORD on (a write per entry)   : {:>12.0} events/s",
        rate(events, on)
    );

    let buffered = tempfile::tempdir().expect("temp dir");
    let config = RecordConfig {
        write_buffer: 1 << 20,
        ..RecordConfig::new(["counter"], codecs())
    };
    let recorder = Recorder::create(buffered.path(), config).expect("recorder");
    let on_buffered = pipeline(events, Some(recorder));
    println!(
        "  RECORD on (a write per poll)    : {:>12.0} events/s",
        rate(events, on_buffered)
    );

    let bytes = std::fs::metadata(buffered.path().join(mongoose_replay::RECORDING_FILE))
        .map_or(0, |m| m.len());
    let started = Instant::now();
    let replayer = Replayer::open(buffered.path(), codecs()).processor("counter", || Counter {
        seen: Arc::default(),
        sum: 0,
    });
    let read = started.elapsed();
    let replay = replayer.run();
    let total = started.elapsed();
    let entries = replay.processor("counter").map_or(0, |p| p.replayed) as u64;
    assert!(
        replay.all_replayed() && entries == events,
        "replayed {entries} of {events}: {replay:?}"
    );
    println!(
        "  REPLAY                          : {:>12.0} events/s ({} bytes recorded, read in {:.0} ms, replayed in {:.0} ms)",
        rate(entries, total),
        bytes,
        read.as_secs_f64() * 1e3,
        (total - read).as_secs_f64() * 1e3
    );
}
