//! Throughput of the journal source through the plugin boundary and the delivery
//! engine: a journal of 100-byte excerpts (written first, in `/dev/shm` when it
//! exists), the `journal` plugin's source (release build: `cargo build --release -p
//! journal-plugin`) run by the source driver on its thread, a counting consumer on
//! another, bytes items; then the journal writer's append rate.
//!
//! `cargo run --release -p journal-plugin --example journal_source_bench -- [PLUGIN_DIR] [EXCERPTS]`
//! (default `target/release`, 10,000,000 excerpts).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use mongoose_core::engine::PendingCompletion;
use mongoose_core::{Delivery, IdleStrategy, PositionValue, ProcessorError, SourceOutput};
use mongoose_delivery::{
    AnyFeed, DispatchOutcome, Dispatcher, Feed, Publisher, SourceDriver, SubscribeOptions,
};
use mongoose_journal::{Journal, JournalConfig};
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
    let excerpts: u64 = arguments
        .get(1)
        .and_then(|text| text.parse().ok())
        .unwrap_or(10_000_000);
    let scratch = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("scratch");
    let journal_dir = scratch.path().join("journal");
    let payload = [b'x'; 100];
    let started = Instant::now();
    {
        let journal = Journal::open(&journal_dir, JournalConfig::default()).expect("journal");
        let mut appender = journal.appender().expect("appender");
        for _ in 0..excerpts {
            appender.append(&payload).expect("append");
        }
        appender.sync().expect("sync");
    }
    let append = started.elapsed();
    println!(
        "journal append: {excerpts} excerpts of 100 bytes in {:.2} s: {:.2} M excerpts/s, {:.0} MiB/s (sync included)",
        append.as_secs_f64(),
        excerpts as f64 / append.as_secs_f64() / 1e6,
        (excerpts * 100) as f64 / append.as_secs_f64() / (1 << 20) as f64
    );

    let plugins = scratch.path().join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugin folder");
    std::fs::copy(
        std::path::Path::new(&dir).join("libjournal_plugin.so"),
        plugins.join("libjournal_plugin.so"),
    )
    .expect("the journal plugin is built (cargo build --release -p journal-plugin)");
    let registry = PluginRegistry::load_dir(&plugins).expect("loaded");
    if let Some(refused) = registry.refused().first() {
        panic!("{}", refused.reason);
    }
    let feed: Arc<Publisher<Bytes, PositionValue>> =
        Feed::builder("journal").queue_capacity(65_536).build();
    let mut reader = feed
        .subscribe("group", SubscribeOptions::default())
        .expect("subscribed")
        .take_reader()
        .expect("reader");
    let settings = format!("path = \"{}\"\ntailer = \"bench\"", journal_dir.display());
    let output: Arc<dyn SourceOutput<Bytes, PositionValue>> = feed.clone();
    let codec: Arc<dyn ItemCodec<Bytes>> = Arc::new(|bytes: Bytes| bytes);
    let mut source =
        PluginSource::create(&registry, "journal", "journal", &settings, output, codec)
            .expect("created");
    feed.start_complete();
    let driver = SourceDriver::new("journal", IdleStrategy::Yield);
    let stop = driver.stop_handle();
    let driven = Arc::clone(&feed);
    let started = Instant::now();
    let thread = std::thread::spawn(move || {
        driver
            .run(&mut source, &*driven as &dyn AnyFeed)
            .expect("ran");
    });
    let mut count = Count(0);
    while count.0 < excerpts {
        if reader.poll(&mut count, 4_096) == 0 {
            std::thread::yield_now();
        }
    }
    let elapsed = started.elapsed();
    stop.stop();
    thread.join().expect("driver");
    println!(
        "journal source -> engine -> counting consumer: {excerpts} excerpts in {:.2} s: {:.2} M excerpts/s",
        elapsed.as_secs_f64(),
        excerpts as f64 / elapsed.as_secs_f64() / 1e6
    );
}
