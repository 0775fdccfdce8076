//! The host's side of a plugin source allocates nothing per item: the bytes a plugin
//! publishes are copied into chunked buffers (one allocation per 64 KiB chunk), decoded
//! by a bytes codec and published, measured with a counting allocator (the plugin's own
//! allocations are its allocator's, not counted here).

use std::sync::Arc;

use bytes::Bytes;
use mongoose_core::engine::PendingCompletion;
use mongoose_core::{Delivery, PositionValue, ProcessorError, SourceOutput};
use mongoose_delivery::SubscribeOptions;
use mongoose_delivery::{DispatchOutcome, Dispatcher, Feed, Publisher, SourceDriver};
use mongoose_plugin::host::{ItemCodec, PluginRegistry, PluginSource};
use mongoose_testkit::{build_plugin, plugin_dir, CountingAllocator};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator::new();

/// Items and bytes processed.
struct Count(u64, u64);

impl Dispatcher<Bytes> for Count {
    fn dispatch(&mut self, item: &Bytes, _: u32) -> DispatchOutcome {
        self.0 += 1;
        self.1 += item.len() as u64;
        DispatchOutcome::Done
    }

    fn complete(&mut self, _: PendingCompletion, _: &Delivery) -> Result<(), ProcessorError> {
        Ok(())
    }
}

#[test]
fn a_plugin_source_publishes_without_a_host_allocation_per_item() {
    publishes_without_a_host_allocation_per_item(false);
    publishes_without_a_host_allocation_per_item(true);
}

fn publishes_without_a_host_allocation_per_item(batch: bool) {
    // the counter's pointer is written at every commit: keep it off the disk
    let shm = std::path::Path::new("/dev/shm");
    let scratch = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .expect("scratch");
    let dir = plugin_dir(scratch.path(), &[&build_plugin("fixture-plugin", &[])]);
    let registry = PluginRegistry::load_dir(&dir).expect("loaded");
    let feed: Arc<Publisher<Bytes, PositionValue>> =
        Feed::builder("counted").queue_capacity(1024).build();
    let mut reader = feed
        .subscribe("group", SubscribeOptions::default())
        .expect("subscribed")
        .take_reader()
        .expect("the reader");
    let settings = format!(
        "limit = 1100000\npointer = \"{}\"\nbatch = {batch}",
        scratch.path().join("pointer").display()
    );
    let output: Arc<dyn SourceOutput<Bytes, PositionValue>> = feed.clone();
    let codec: Arc<dyn ItemCodec<Bytes>> = Arc::new(|bytes: Bytes| bytes);
    let mut source =
        PluginSource::create(&registry, "counter", "counted", &settings, output, codec)
            .expect("created");
    feed.start_complete();
    SourceDriver::start_source(&mut source, &*feed).expect("started");
    let mut count = Count(0, 0);
    // (no status call in the loop: a status report allocates)
    let mut run_until = |processed: u64| {
        while count.0 < processed {
            SourceDriver::cycle(&mut source, &*feed).expect("a cycle");
            reader.poll(&mut count, usize::MAX);
        }
    };
    // warm up: the window, the queues and the first chunks reach their working size
    run_until(100_000);
    let before = GLOBAL.allocations();
    run_until(1_100_000);
    let allocations = GLOBAL.allocations() - before;
    assert_eq!(count.0, 1_100_000);
    println!("{allocations} host allocations for 1,000,000 plugin items (batch: {batch})");
    // 1,000,000 items of up to 7 bytes fill about 110 chunks of 64 KiB
    assert!(
        allocations < 1_000,
        "{allocations} allocations for 1,000,000 items: the host allocates per item"
    );
}
