//! The latency run of `pipeline_bench` (issue 29 goal 3): a producer paced at 1 M items/s
//! (it spins to each item's due time) sends the time it sent each item, and the reader
//! records how long ago that was; once through the raw SPSC ring, once through one hop
//! (feed -> queue -> reader, acknowledgements on), with the same pinning and the same
//! busy polling on both sides. Printed: p50, p99 and p99.9 of each and the ratios.

use std::sync::Arc;
use std::time::Instant;

use mongoose_core::engine::PendingCompletion;
use mongoose_core::{CoreError, Delivery, Epoch, ProcessorError, SourceCommitter, SourceOutput};
use mongoose_delivery::{DispatchOutcome, Dispatcher, Feed, SubscribeOptions};

use crate::pin;

/// Items per second of the paced producer.
const RATE: u64 = 1_000_000;

/// Seconds of each run (after the warm-up).
pub(crate) const SECONDS: u64 = 3;

/// Items sent before the samples count (caches, page faults, the first pause).
const WARM_UP: u64 = 100_000;

/// Nanoseconds since `base`: what an item carries and what its reader compares.
#[inline]
fn nanos_since(base: Instant) -> u64 {
    base.elapsed().as_nanos() as u64
}

/// The paced send loop: item `i` is due `i` microseconds after the start; the producer
/// spins to that time, then sends the current time with `send`. `idle` runs while it
/// waits (the source's duty cycle: acknowledgements).
fn paced(base: Instant, items: u64, mut send: impl FnMut(u64), mut idle: impl FnMut()) {
    let started = nanos_since(base);
    let step = 1_000_000_000 / RATE;
    for item in 0..items {
        let due = started + item * step;
        let mut idled = false;
        loop {
            let now = nanos_since(base);
            if now >= due {
                break;
            }
            if !idled {
                idle();
                idled = true;
            }
            std::hint::spin_loop();
        }
        send(nanos_since(base));
    }
}

/// Samples kept after the warm-up, sorted: p50, p99 and p99.9 in nanoseconds.
fn percentiles(mut samples: Vec<u64>) -> [u64; 3] {
    samples.sort_unstable();
    let at = |quantile: f64| {
        let index = ((samples.len() as f64 * quantile) as usize).min(samples.len() - 1);
        samples[index]
    };
    [at(0.50), at(0.99), at(0.999)]
}

/// The raw ring: a pinned paced producer, a pinned busy reader.
fn raw_ring(items: u64) -> [u64; 3] {
    let (mut producer, mut consumer) = rtrb::RingBuffer::<u64>::new(16 * 1024);
    let base = Instant::now();
    pin(0);
    let reader = std::thread::spawn(move || {
        pin(1);
        let mut samples = Vec::with_capacity(items as usize);
        let mut seen = 0u64;
        while seen < items {
            match consumer.pop() {
                Ok(sent) => {
                    if seen >= WARM_UP {
                        samples.push(nanos_since(base).saturating_sub(sent));
                    }
                    seen += 1;
                }
                Err(_) => std::hint::spin_loop(),
            }
        }
        samples
    });
    paced(
        base,
        items,
        |sent| {
            while producer.push(sent).is_err() {
                std::hint::spin_loop();
            }
        },
        || {},
    );
    percentiles(reader.join().expect("reader"))
}

struct NoOpCommitter;
impl SourceCommitter<u64> for NoOpCommitter {
    fn acknowledged(&mut self, _: u64, _: Epoch, _: u64) {}
    fn commit(&mut self) -> Result<(), CoreError> {
        Ok(())
    }
}

/// Records how long ago each item was sent.
struct Record {
    base: Instant,
    seen: u64,
    samples: Vec<u64>,
}

impl Dispatcher<u64> for Record {
    fn dispatch(&mut self, sent: &u64, _: u32) -> DispatchOutcome {
        if self.seen >= WARM_UP {
            self.samples
                .push(nanos_since(self.base).saturating_sub(*sent));
        }
        self.seen += 1;
        DispatchOutcome::Done
    }
    fn complete(&mut self, _: PendingCompletion, _: &Delivery) -> Result<(), ProcessorError> {
        Ok(())
    }
}

/// One hop: the paced producer publishes each item at its position and polls the
/// acknowledgements while it waits for the next one; the reader polls busily.
fn one_hop(items: u64) -> [u64; 3] {
    let feed = Feed::<u64, u64>::builder("latency")
        .queue_capacity(16 * 1024)
        .build();
    feed.acknowledge_with(Box::new(NoOpCommitter));
    feed.set_pause_by_default(true);
    let mut reader = feed
        .subscribe("g", SubscribeOptions::default())
        .expect("subscribed")
        .take_reader()
        .expect("reader");
    feed.start_complete();
    let base = Instant::now();
    let ready = Arc::new(std::sync::Barrier::new(2));
    let reader_ready = Arc::clone(&ready);
    pin(0);
    let consumer = std::thread::spawn(move || {
        pin(1);
        let mut record = Record {
            base,
            seen: 0,
            samples: Vec::with_capacity(items as usize),
        };
        reader_ready.wait();
        while record.seen < items {
            if reader.poll(&mut record, 1024) == 0 {
                std::hint::spin_loop();
            }
        }
        record.samples
    });
    ready.wait();
    let mut position = 0u64;
    paced(
        base,
        items,
        |sent| {
            position += 1;
            while !feed.try_publish(sent, position).is_published() {
                feed.poll_acknowledgements();
                std::hint::spin_loop();
            }
        },
        || {
            feed.poll_acknowledgements();
        },
    );
    let samples = consumer.join().expect("reader");
    feed.poll_acknowledgements();
    assert_eq!(feed.status().acknowledged, items, "everything acknowledged");
    percentiles(samples)
}

/// Runs the raw ring and the hop for `seconds` each at 1 M items/s and prints both
/// and the ratios hop/raw.
pub(crate) fn report(seconds: u64) {
    let items = WARM_UP + seconds * RATE;
    let raw = raw_ring(items);
    let hop = one_hop(items);
    let ratio = |index: usize| hop[index] as f64 / raw[index].max(1) as f64;
    println!(
        "  latency raw ring at 1 M items/s: p50 {} ns, p99 {} ns, p99.9 {} ns ({seconds} s)",
        raw[0], raw[1], raw[2]
    );
    println!(
        "  latency one hop at 1 M items/s:  p50 {} ns, p99 {} ns, p99.9 {} ns ({seconds} s)",
        hop[0], hop[1], hop[2]
    );
    println!(
        "latency at 1 M items/s: p50 {} ns (raw {} ns, {:.2}x), p99 {} ns (raw {} ns, {:.2}x), p99.9 {} ns (raw {} ns, {:.2}x)",
        hop[0],
        raw[0],
        ratio(0),
        hop[1],
        raw[1],
        ratio(1),
        hop[2],
        raw[2],
        ratio(2)
    );
}
