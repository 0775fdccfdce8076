//! Whole-pipeline figures for `cargo xtask bench`: a file of 100-byte lines through a
//! COMMITED file feed, against a raw `memchr` line count of the same file.
//!
//! ```text
//! cargo run --release -p mongoose-source-file --example file_feed_bench -- --size-mib 256
//! ```
//!
//! Runs (a) a raw memchr line count, (b) a COMMITED file source into a counting output
//! that acknowledges everything, and (c) the same source through the real delivery
//! engine (a 1,024-slot PAUSE queue) to a counting processor thread. Prints MiB/s and
//! lines/s, the ratios to the raw count, and the peak resident set size (VmHWM), which
//! stays flat: the source holds one read buffer and the queue 1,024 lines, not the file.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use mongoose_core::engine::PendingCompletion;
use mongoose_core::{
    Delivery, Epoch, EventSource, ProcessorError, PublishRefused, SourceCommitter, SourceOutput,
    SourceState, TryPublish,
};
use mongoose_delivery::{DispatchOutcome, Dispatcher, Feed, Publisher, SubscribeOptions};
use mongoose_source_file::{FileEventSource, FileSourceConfig, ReadStrategy};
use parking_lot::Mutex;

const LINE_BYTES: usize = 100;

/// Counts what it is given and acknowledges it at the next poll (a processor that
/// keeps up), so the pointer is committed as in a real run.
struct CountingOutput {
    published: AtomicU64,
    bytes: AtomicU64,
    last_position: AtomicU64,
    acknowledged: AtomicU64,
    epoch: Mutex<Epoch>,
    state: Mutex<SourceState>,
    committer: Mutex<Option<Box<dyn SourceCommitter<u64>>>>,
}

impl SourceOutput<String, u64> for CountingOutput {
    fn try_publish(&self, item: String, position: u64) -> TryPublish<String> {
        // one writer (the source's thread): plain loads and stores, no locked add
        let published = self.published.load(Ordering::Relaxed);
        self.published.store(published + 1, Ordering::Relaxed);
        let bytes = self.bytes.load(Ordering::Relaxed);
        self.bytes
            .store(bytes + item.len() as u64, Ordering::Relaxed);
        self.last_position.store(position, Ordering::Relaxed);
        TryPublish::Published
    }

    fn publish(&self, _item: String) -> Result<(), PublishRefused> {
        Ok(())
    }

    fn cache(&self, item: String, position: u64) {
        let _ = self.try_publish(item, position);
    }

    fn filtered(&self, _position: u64, _reason: &str) {}

    fn poll_acknowledgements(&self) -> usize {
        let published = self.published.load(Ordering::Relaxed);
        let acknowledged = self.acknowledged.swap(published, Ordering::Relaxed);
        if published == acknowledged {
            return 0;
        }
        let epoch = *self.epoch.lock();
        if let Some(committer) = self.committer.lock().as_mut() {
            committer.acknowledged(published, epoch, self.last_position.load(Ordering::Relaxed));
            committer.commit().expect("commit");
        }
        (published - acknowledged) as usize
    }

    fn flush_paused(&self) -> bool {
        true
    }

    fn acknowledge_with(&self, committer: Box<dyn SourceCommitter<u64>>) {
        *self.committer.lock() = Some(committer);
    }

    fn set_epoch(&self, epoch: Epoch) {
        *self.epoch.lock() = epoch;
    }

    fn set_pause_by_default(&self, _pause: bool) {}

    fn report_state(&self, state: SourceState, _detail: Option<&str>) {
        *self.state.lock() = state;
    }

    fn set_unterminated_bytes(&self, _bytes: u64) {}
}

/// A processor that counts lines and their bytes.
#[derive(Default)]
struct CountingProcessor {
    lines: u64,
    bytes: u64,
}

impl Dispatcher<String> for CountingProcessor {
    fn dispatch(&mut self, item: &String, _attempt: u32) -> DispatchOutcome {
        self.lines += 1;
        self.bytes += item.len() as u64;
        DispatchOutcome::Done
    }

    fn complete(&mut self, _: PendingCompletion, _: &Delivery) -> Result<(), ProcessorError> {
        Ok(())
    }
}

/// The file through a COMMITED source, the real publisher (one 1,024 queue, PAUSE) and
/// a counting processor on its own thread; returns the seconds taken.
fn through_the_delivery_engine(path: &Path, lines: u64, bytes: u64) -> f64 {
    let feed: Arc<Publisher<String, u64>> = Feed::builder("bench").queue_capacity(1024).build();
    let erased: Arc<dyn SourceOutput<String, u64>> = feed.clone();
    let mut source = FileEventSource::new(
        FileSourceConfig::new("bench", path, ReadStrategy::Commited),
        Ok::<String, String>,
        erased,
    );
    let mut reader = feed
        .subscribe("counter", SubscribeOptions::default())
        .expect("subscribe")
        .take_reader()
        .expect("reader");
    let started = Instant::now();
    let consumer = std::thread::spawn(move || {
        let _agent = mongoose_core::agent::mark_current_thread("counter");
        let mut counter = CountingProcessor::default();
        while counter.lines < lines {
            if reader.poll(&mut counter, 1024) == 0 {
                // an idle strategy: the machine may have fewer free cores than threads
                std::thread::yield_now();
            }
        }
        counter
    });
    let _agent = mongoose_core::agent::mark_current_thread("bench-source");
    source.start().expect("start");
    feed.start_complete();
    while source.committed_position() < bytes {
        if source.do_work().expect("do_work").0 == 0 {
            std::thread::yield_now();
        }
    }
    let counter = consumer.join().expect("consumer");
    source.stop().expect("stop");
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(counter.lines, lines);
    assert_eq!(feed.status().dropped, 0);
    seconds
}

fn size_mib_from_args() -> u64 {
    let mut args = std::env::args().skip(1);
    let mut size = 1024;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--size-mib" => {
                size = args
                    .next()
                    .and_then(|value| value.parse().ok())
                    .expect("--size-mib takes a number of MiB");
            }
            other if other.starts_with("--size-mib=") => {
                size = other["--size-mib=".len()..]
                    .parse()
                    .expect("--size-mib takes a number of MiB");
            }
            "--bench" => {} // passed by `cargo bench`-style runners
            other => panic!("unknown argument {other}: use --size-mib N"),
        }
    }
    size
}

fn write_lines(path: &Path, size_mib: u64) -> u64 {
    let lines = size_mib * 1024 * 1024 / LINE_BYTES as u64;
    let mut writer = BufWriter::with_capacity(1 << 20, File::create(path).expect("create"));
    let mut line = [b'x'; LINE_BYTES];
    line[LINE_BYTES - 1] = b'\n';
    for number in 0..lines {
        let digits = format!("{number:012}");
        line[..12].copy_from_slice(digits.as_bytes());
        writer.write_all(&line).expect("write");
    }
    writer.flush().expect("flush");
    lines
}

fn raw_count(path: &Path) -> u64 {
    let mut file = File::open(path).expect("open");
    let mut buffer = vec![0u8; 1 << 20];
    let mut lines = 0u64;
    loop {
        let read = file.read(&mut buffer).expect("read");
        if read == 0 {
            return lines;
        }
        lines += memchr::memchr_iter(b'\n', &buffer[..read]).count() as u64;
    }
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn main() {
    let size_mib = size_mib_from_args();
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("bench.log");
    let lines = write_lines(&path, size_mib);
    let bytes = std::fs::metadata(&path).expect("size").len();
    let mib = bytes as f64 / (1024.0 * 1024.0);
    let rss_before = peak_rss_kib();

    // (a) the baseline: a raw memchr line count (warm page cache: the file was just written)
    let started = Instant::now();
    let counted = raw_count(&path);
    let raw_seconds = started.elapsed().as_secs_f64();
    assert_eq!(counted, lines);

    // (b) the file through a COMMITED file source into a counting output
    let output = Arc::new(CountingOutput {
        published: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        last_position: AtomicU64::new(0),
        acknowledged: AtomicU64::new(0),
        epoch: Mutex::new(Epoch::NONE),
        state: Mutex::new(SourceState::Starting),
        committer: Mutex::new(None),
    });
    let erased: Arc<dyn SourceOutput<String, u64>> = output.clone();
    let mut source = FileEventSource::new(
        FileSourceConfig::new("bench", &path, ReadStrategy::Commited),
        Ok::<String, String>,
        erased,
    );
    let started = Instant::now();
    source.start().expect("start");
    while *output.state.lock() != SourceState::CaughtUp {
        source.do_work().expect("do_work");
    }
    source.stop().expect("stop");
    let feed_seconds = started.elapsed().as_secs_f64();
    assert_eq!(output.published.load(Ordering::Relaxed), lines);
    assert_eq!(source.committed_position(), bytes);

    let rss_direct = peak_rss_kib();
    std::fs::remove_file(mongoose_source_file::pointer::pointer_path_for(&path)).ok();

    // (c) the same through the real delivery engine to a counting processor thread
    let engine_seconds = through_the_delivery_engine(&path, lines, bytes);

    let rss_after = peak_rss_kib();
    let raw_mib_s = mib / raw_seconds;
    let feed_mib_s = mib / feed_seconds;
    println!("file_feed_bench: {size_mib} MiB, {lines} lines of {LINE_BYTES} bytes");
    println!(
        "raw memchr count : {raw_mib_s:>9.1} MiB/s {:>12.0} lines/s",
        lines as f64 / raw_seconds
    );
    println!(
        "COMMITED feed    : {feed_mib_s:>9.1} MiB/s {:>12.0} lines/s",
        lines as f64 / feed_seconds
    );
    let engine_mib_s = mib / engine_seconds;
    println!(
        "feed + delivery  : {engine_mib_s:>9.1} MiB/s {:>12.0} lines/s (Publisher, 1,024 queue, counting thread)",
        lines as f64 / engine_seconds
    );
    println!(
        "ratio feed/raw   : {:.1}% (source alone), {:.1}% (with the delivery engine)",
        100.0 * feed_mib_s / raw_mib_s,
        100.0 * engine_mib_s / raw_mib_s
    );
    println!(
        "peak RSS (VmHWM) : {} KiB before the runs, {} KiB after the source alone, {} KiB after the engine run (file {} KiB)",
        rss_before.map_or("?".to_owned(), |kib| kib.to_string()),
        rss_direct.map_or("?".to_owned(), |kib| kib.to_string()),
        rss_after.map_or("?".to_owned(), |kib| kib.to_string()),
        bytes / 1024
    );
}
