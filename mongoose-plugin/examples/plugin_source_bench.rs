//! Throughput of a plugin source through the boundary and the delivery engine:
//! `plugins/template`'s counter (release build, `cargo xtask plugins` or
//! `cargo build --release -p template-plugin`) run by the source driver on its thread,
//! a counting consumer on another, bytes items (1 to 8 bytes of decimal text).
//!
//! `cargo run --release -p mongoose-plugin --example plugin_source_bench -- [PLUGIN_DIR] [ITEMS] [batch]`
//! (default `target/release`, 10,000,000 items, one `try_publish` per item; `batch`:
//! `try_publish_batch`, one boundary crossing per batch).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use mongoose_core::engine::PendingCompletion;
use mongoose_core::{Delivery, IdleStrategy, PositionValue, ProcessorError, SourceOutput};
use mongoose_delivery::{
    AnyFeed, DispatchOutcome, Dispatcher, Feed, Publisher, SourceDriver, SubscribeOptions,
};
use mongoose_plugin::host::{ItemCodec, PluginRegistry, PluginSource};

struct Count(u64);

impl Dispatcher<Bytes> for Count {
    fn dispatch(&mut self, _: &Bytes, _: u32) -> DispatchOutcome {
        self.0 += 1;
        DispatchOutcome::Done
    }

    fn complete(&mut self, _: PendingCompletion, _: &Delivery) -> Result<(), ProcessorError> {
        Ok(())
    }
}

fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let dir = arguments
        .first()
        .cloned()
        .unwrap_or_else(|| "target/release".to_owned());
    let items: u64 = arguments
        .get(1)
        .and_then(|text| text.parse().ok())
        .unwrap_or(10_000_000);
    let batch = arguments.get(2).is_some_and(|text| text == "batch");
    // only the template: a folder of its own holding it
    let scratch = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("scratch");
    let plugins = scratch.path().join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugin folder");
    std::fs::copy(
        std::path::Path::new(&dir).join("libtemplate_plugin.so"),
        plugins.join("libtemplate_plugin.so"),
    )
    .expect("the template plugin is built (cargo build --release -p template-plugin)");
    let registry = PluginRegistry::load_dir(&plugins).expect("loaded");
    if let Some(refused) = registry.refused().first() {
        panic!("{}", refused.reason);
    }
    let feed: Arc<Publisher<Bytes, PositionValue>> =
        Feed::builder("counted").queue_capacity(65_536).build();
    let mut reader = feed
        .subscribe("group", SubscribeOptions::default())
        .expect("subscribed")
        .take_reader()
        .expect("reader");
    let settings = format!(
        "limit = {items}\npointer = \"{}\"\nbatch = {batch}",
        scratch.path().join("pointer").display()
    );
    let output: Arc<dyn SourceOutput<Bytes, PositionValue>> = feed.clone();
    let codec: Arc<dyn ItemCodec<Bytes>> = Arc::new(|bytes: Bytes| bytes);
    let mut source =
        PluginSource::create(&registry, "counter", "counted", &settings, output, codec)
            .expect("created");
    feed.start_complete();
    let driver = SourceDriver::new("counted", IdleStrategy::Yield);
    let stop = driver.stop_handle();
    let driven = Arc::clone(&feed);
    let started = Instant::now();
    let thread = std::thread::spawn(move || {
        driver
            .run(&mut source, &*driven as &dyn AnyFeed)
            .expect("ran");
    });
    let mut count = Count(0);
    while count.0 < items {
        if reader.poll(&mut count, 4_096) == 0 {
            std::thread::yield_now();
        }
    }
    let elapsed = started.elapsed();
    stop.stop();
    thread.join().expect("driver");
    println!(
        "plugin source (batch: {batch}): {items} items in {:.2} s: {:.2} M items/s",
        elapsed.as_secs_f64(),
        items as f64 / elapsed.as_secs_f64() / 1e6
    );
}
