//! Publishing lines from a file through a real feed to a consumer allocates nothing
//! per line: the lines borrow the source's read chunks, which are reused once their
//! lines were dropped. Measured with a counting allocator.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use mongoose_core::engine::PendingCompletion;
use mongoose_core::{Delivery, ProcessorError, SourceOutput, SourceState};
use mongoose_delivery::{
    DispatchOutcome, Dispatcher, Feed, Publisher, SourceDriver, SubscribeOptions,
};
use mongoose_source_file::{FileEventSource, FileSourceConfig, Line, ReadStrategy};
use mongoose_testkit::CountingAllocator;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator::new();

/// The consumer: counts lines and their bytes, and checks their numbers are in order.
struct Count {
    lines: u64,
    bytes: u64,
}

impl Dispatcher<Line> for Count {
    fn dispatch(&mut self, line: &Line, _: u32) -> DispatchOutcome {
        let number: u64 = line.to_str().expect("UTF-8")[..12]
            .parse()
            .expect("a line number");
        assert_eq!(number, self.lines, "lines in order");
        self.lines += 1;
        self.bytes += line.as_bytes().len() as u64;
        DispatchOutcome::Done
    }
    fn complete(&mut self, _: PendingCompletion, _: &Delivery) -> Result<(), ProcessorError> {
        Ok(())
    }
}

/// Appends lines `from..to` (100 bytes each, the number first).
fn append_lines(path: &Path, from: u64, to: u64) {
    let mut text = Vec::with_capacity(((to - from) * 100) as usize);
    for number in from..to {
        let mut line = [b'x'; 100];
        line[..12].copy_from_slice(format!("{number:012}").as_bytes());
        line[99] = b'\n';
        text.extend_from_slice(&line);
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("input")
        .write_all(&text)
        .expect("appended");
}

#[test]
fn publishing_lines_from_a_file_allocates_nothing_per_line() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("lines.log");
    // the server's defaults: a COMMITED feed, 1,024-slot PAUSE queue, 256 KiB buffer
    let feed: Arc<Publisher<Line, u64>> = Feed::builder("lines").queue_capacity(1024).build();
    let output: Arc<dyn SourceOutput<Line, u64>> = feed.clone();
    let config = FileSourceConfig::new("lines", &path, ReadStrategy::Committed);
    let read_buffer = config.read_buffer_bytes as u64;
    let mut source = FileEventSource::<Line>::of_lines(config, output);
    let mut reader = feed
        .subscribe("counter", SubscribeOptions::default())
        .expect("subscribed")
        .take_reader()
        .expect("reader");
    let mut count = Count { lines: 0, bytes: 0 };
    append_lines(&path, 0, 10_000);
    SourceDriver::start_source(&mut source, &*feed).expect("started");
    feed.start_complete();
    let mut run_until_caught_up = |count: &mut Count, lines: u64| loop {
        SourceDriver::cycle(&mut source, &feed).expect("duty cycle");
        reader.poll(count, 256);
        if count.lines == lines && source.state() == SourceState::CaughtUp {
            SourceDriver::cycle(&mut source, &feed).expect("the last commit");
            if source.committed_position() == lines * 100 {
                return;
            }
        }
    };
    // warm up: the read buffers, the chunks and the window reach their working size
    run_until_caught_up(&mut count, 10_000);
    append_lines(&path, 10_000, 20_000);
    run_until_caught_up(&mut count, 20_000);

    let mut measure = |count: &mut Count, from: u64, lines: u64| {
        append_lines(&path, from, from + lines);
        let before = GLOBAL.allocations();
        run_until_caught_up(count, from + lines);
        (GLOBAL.allocations() - before) as u64
    };
    let for_10_000 = measure(&mut count, 20_000, 10_000);
    let for_20_000 = measure(&mut count, 30_000, 20_000);
    assert_eq!(count.bytes, 50_000 * 99);
    eprintln!("allocations: {for_10_000} for 10,000 lines, {for_20_000} for 20,000 lines");
    // a run's state changes (BEHIND when paused, CAUGHT_UP) may allocate, a line never:
    // as many for 20,000 lines as for 10,000, fewer than the chunks read
    let chunks_read = 20_000 * 100 / read_buffer + 1;
    assert!(
        for_20_000 <= for_10_000 && for_20_000 < chunks_read,
        "{for_20_000} allocations for 20,000 lines, {for_10_000} for 10,000 ({chunks_read} chunks read)"
    );
    SourceDriver::stop_source(&mut source, &feed).expect("stopped");
}
