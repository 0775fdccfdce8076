//! Whole-pipeline figures for `cargo mongoose-bench all`: a file of 100-byte lines through a
//! COMMITED file feed, against a raw `memchr` line count of the same file.
//!
//! ```text
//! cargo run --release -p mongoose-source-file --example file_feed_bench -- --size-mib 256
//! cargo run --release -p mongoose-source-file --example file_feed_bench -- \
//!     --size-mib 256 --runs 3 --only engine --placement default   # for perf record
//! ```
//!
//! `--runs N` prints each run and the median; `--pin S,C` puts the source and the consumer
//! threads of the pinned engine runs on cores S and C (0,1 unless given; the same core,
//! or two: on a shared machine the figures differ several-fold); `--placement
//! default|pinned|both` makes only the server-default or only the pinned engine runs
//! (both, alternating, unless given); `--queue N` and `--buffer-kib N` vary the queue
//! and the buffer; `--idle SPINS,YIELD_US,MIN_PARK_US,MAX_PARK_US` tries another
//! back-off in the default runs, `--default-pin S,C` pins their threads (to see the
//! idling alone on two cores); `--idle-cpu N` only measures the CPU the default
//! run's two threads use over N seconds with nothing to read. With
//! `FEED_BENCH_SWITCHES=1` each default run prints its threads' context switches
//! (voluntary: parks; involuntary: preemptions and yields that gave the core away).
//!
//! Runs (a) a raw memchr line count, (b) a COMMITED file source into a counting output
//! that acknowledges everything, and (c) the same source through the real delivery
//! engine (a 1,024-slot PAUSE queue) to a counting processor thread, twice in turn: with
//! the server's defaults (threads not pinned, the source run by `SourceDriver::run` and
//! the consumer polling and idling as a group's thread, by the default `IdleStrategy`),
//! and pinned (the threads on cores `--pin`, yielding when idle), then prints
//! `file -> engine: default D MiB/s, pinned P MiB/s (default/pinned ..; pinned/default ..x)`
//! with the medians of each. Prints MiB/s and lines/s, the ratios to the raw count (the
//! engine's with the default run), and the peak resident set size (VmHWM), which
//! stays flat: the source holds a few read buffers and the queue 1,024 lines, not the
//! file. (d) times a restart of a COMMITED source whose pointer is committed at the end
//! of the file, from `start()` to CAUGHT_UP: nothing of the file is read again.
//!
//! The settings are the server's defaults: a 1,024-slot PAUSE queue, a 256 KiB read
//! buffer, 4 MiB per duty cycle, items of type `Line` (no allocation per line).

/// The same allocator as the mongoose binary, so the figures are the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use mongoose_core::engine::PendingCompletion;
use mongoose_core::{
    CoreError, Delivery, Epoch, IdleStrategy, Idler, ProcessorError, PublishRefused,
    SourceCommitter, SourceOutput, SourceStart, SourceState, TryPublish,
};
use mongoose_delivery::{
    DispatchOutcome, Dispatcher, DrivenOutput, Feed, Publisher, SourceDriver, SubscribeOptions,
};
use mongoose_source_file::{FileEventSource, FileSourceConfig, Line, ReadStrategy};
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

impl CountingOutput {
    /// Gives the committer what was published (everything counts as processed).
    fn poll(&self) -> usize {
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
}

/// The source driver applies the source's start and polls its acknowledgements around
/// each duty cycle, as a feed's.
impl DrivenOutput for CountingOutput {
    fn apply_start(&self, start: SourceStart) -> Result<(), CoreError> {
        *self.epoch.lock() = start.epoch;
        *self.committer.lock() = start
            .committer
            .map(|committer| committer.into_typed::<u64>().expect("a u64 committer"));
        Ok(())
    }
    fn poll_acknowledgements(&self) -> usize {
        self.poll()
    }
    fn flush_paused(&self) -> bool {
        true
    }
}

impl SourceOutput<Line, u64> for CountingOutput {
    fn try_publish(&self, item: Line, position: u64) -> TryPublish<Line> {
        // one writer (the source's thread): plain loads and stores, no locked add
        let published = self.published.load(Ordering::Relaxed);
        self.published.store(published + 1, Ordering::Relaxed);
        let bytes = self.bytes.load(Ordering::Relaxed);
        self.bytes
            .store(bytes + item.as_bytes().len() as u64, Ordering::Relaxed);
        self.last_position.store(position, Ordering::Relaxed);
        TryPublish::Published
    }

    fn publish(&self, _item: Line) -> Result<(), PublishRefused> {
        Ok(())
    }

    fn cache(&self, item: Line, position: u64) {
        let _ = self.try_publish(item, position);
    }

    fn filtered(&self, _position: u64, _reason: &str) {}

    fn commit_processed(&self) -> usize {
        self.poll()
    }

    fn set_epoch(&self, epoch: Epoch) {
        *self.epoch.lock() = epoch;
    }

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

impl Dispatcher<Line> for CountingProcessor {
    fn dispatch(&mut self, item: &Line, _attempt: u32) -> DispatchOutcome {
        self.lines += 1;
        self.bytes += item.as_bytes().len() as u64;
        DispatchOutcome::Done
    }

    fn complete(&mut self, _: PendingCompletion, _: &Delivery) -> Result<(), ProcessorError> {
        Ok(())
    }
}

/// How the engine run places and idles its two threads.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Placement {
    /// What the server does by default: neither thread pinned, both idling by the
    /// default [`IdleStrategy`] (the source thread run by [`SourceDriver::run`], as
    /// the server runs it; the consumer polls [`GROUP_POLL_LIMIT`] items a cycle and
    /// idles as a group's thread does).
    Default,
    /// The reference: the source thread on core S, the consumer on core C (`--pin`,
    /// 0,1 unless given), each yielding when a cycle found nothing and polling the
    /// whole queue at once (the figure the issue calls "pinned").
    Pinned(usize, usize),
}

/// Items a group's thread takes from one feed per duty cycle by default
/// (`mongoose_control::GroupOptions::default().poll_limit`).
const GROUP_POLL_LIMIT: usize = 256;

/// The file through a COMMITED source, the real publisher (one PAUSE queue) and
/// a counting processor on its own thread, the threads placed and idling by
/// `placement`; returns the seconds taken.
fn through_the_delivery_engine(
    path: &Path,
    lines: u64,
    bytes: u64,
    args: &Args,
    placement: Placement,
) -> f64 {
    let feed: Arc<Publisher<Line, u64>> = Feed::builder("bench").queue_capacity(args.queue).build();
    let erased: Arc<dyn SourceOutput<Line, u64>> = feed.clone();
    let mut source = FileEventSource::new(source_config(path, args), Ok::<Line, String>, erased);
    let mut reader = feed
        .subscribe("counter", SubscribeOptions::default())
        .expect("subscribe")
        .take_reader()
        .expect("reader");
    let started = Instant::now();
    let counter = std::thread::scope(|scope| match placement {
        Placement::Default => {
            let driver = SourceDriver::new("bench", args.idle);
            let stop = driver.stop_handle();
            let pins = args.default_pin;
            let consumer = scope.spawn(move || {
                let _agent = mongoose_core::agent::mark_current_thread("counter");
                if let Some((_, core)) = pins {
                    pin_to(core);
                }
                let mut idler = Idler::new(args.idle);
                // as a group's thread: the feed wakes it when it published
                reader.set_wakeup(Arc::clone(idler.wakeup()));
                let mut counter = CountingProcessor::default();
                while counter.lines < lines {
                    let work = reader.poll(&mut counter, GROUP_POLL_LIMIT);
                    idler.idle(work, None);
                }
                // the driver commits what was processed as it stops
                stop.stop();
                report_switches("consumer");
                counter
            });
            let (source, feed) = (&mut source, &feed);
            let running = scope.spawn(move || {
                if let Some((core, _)) = pins {
                    pin_to(core);
                }
                let run = driver.run(source, &**feed);
                report_switches("source");
                run
            });
            feed.start_complete();
            let counter = consumer.join().expect("consumer");
            running.join().expect("source thread").expect("source run");
            counter
        }
        Placement::Pinned(source_core, consumer_core) => {
            let poll_batch = args.queue;
            let consumer = scope.spawn(move || {
                let _agent = mongoose_core::agent::mark_current_thread("counter");
                pin_to(consumer_core);
                let mut counter = CountingProcessor::default();
                while counter.lines < lines {
                    if reader.poll(&mut counter, poll_batch) == 0 {
                        std::thread::yield_now();
                    }
                }
                counter
            });
            let (source, feed) = (&mut source, &feed);
            let running = scope.spawn(move || {
                let _agent = mongoose_core::agent::mark_current_thread("bench-source");
                pin_to(source_core);
                SourceDriver::start_source(source, feed).expect("start");
                feed.start_complete();
                while source.committed_position() < bytes {
                    if SourceDriver::cycle(source, feed).expect("duty cycle").0 == 0 {
                        std::thread::yield_now();
                    }
                }
                SourceDriver::stop_source(source, feed).expect("stop");
            });
            let counter = consumer.join().expect("consumer");
            running.join().expect("source thread");
            counter
        }
    });
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(counter.lines, lines);
    assert_eq!(source.committed_position(), bytes);
    assert_eq!(feed.status().dropped, 0);
    seconds
}

/// The command line: `--size-mib N`, `--runs N` (each figure is the median of N runs;
/// all are printed), `--only source|engine` (one phase, for `perf record`), `--pin S,C`
/// (the pinned engine runs put the source thread on core S, the consumer thread on
/// core C; 0,1 by default), `--placement default|pinned|both` (the engine runs made:
/// both by default, alternating, each `--runs` times), `--queue N` (the
/// subscriber queue's capacity, 1,024 by default; the pinned runs' reader polls up to
/// that many, the default runs' a group's 256), `--buffer-kib N` (the source's read
/// buffer and bytes per cycle, default 256 KiB), `--idle S,Y,MIN,MAX` (the default runs'
/// back-off: spins, microseconds of yielding, first and longest park in microseconds),
/// `--idle-cpu N` (only the idle CPU measure, over N seconds).
struct Args {
    queue: usize,
    buffer_kib: usize,
    size_mib: u64,
    runs: usize,
    source: bool,
    engine: bool,
    pin: (usize, usize),
    placements: Vec<Placement>,
    idle: IdleStrategy,
    idle_cpu_seconds: Option<u64>,
    /// `--default-pin S,C`: the default runs' threads on cores S and C too (their idling
    /// unchanged), to see the idle strategy alone on two cores.
    default_pin: Option<(usize, usize)>,
}

fn args() -> Args {
    let mut parsed = Args {
        size_mib: 1024,
        runs: 1,
        source: true,
        engine: true,
        pin: (0, 1),
        placements: Vec::new(),
        idle: IdleStrategy::default(),
        idle_cpu_seconds: None,
        default_pin: None,
        queue: 1024,
        buffer_kib: 256,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) => (name.to_owned(), Some(value.to_owned())),
            None => (arg.clone(), None),
        };
        let mut value = || inline.clone().or_else(|| args.next());
        match name.as_str() {
            "--size-mib" => {
                parsed.size_mib = value()
                    .and_then(|value| value.parse().ok())
                    .expect("--size-mib takes a number of MiB");
            }
            "--runs" => {
                parsed.runs = value()
                    .and_then(|value| value.parse().ok())
                    .filter(|runs| *runs > 0)
                    .expect("--runs takes a number of runs (1 or more)");
            }
            "--only" => match value().as_deref() {
                Some("source") => parsed.engine = false,
                Some("engine") => parsed.source = false,
                _ => panic!("--only takes source or engine"),
            },
            "--pin" => {
                parsed.pin = value()
                    .and_then(|value| {
                        let (source, consumer) = value.split_once(',')?;
                        Some((source.parse().ok()?, consumer.parse().ok()?))
                    })
                    .expect("--pin takes SOURCE_CORE,CONSUMER_CORE");
            }
            "--idle" => {
                parsed.idle = value()
                    .and_then(|value| {
                        let mut parts = value.split(',').map(|part| part.parse::<u64>().ok());
                        let mut next = || parts.next().flatten();
                        Some(IdleStrategy::Backoff {
                            max_spins: next()? as u32,
                            yield_for: std::time::Duration::from_micros(next()?),
                            min_park: std::time::Duration::from_micros(next()?),
                            max_park: std::time::Duration::from_micros(next()?),
                        })
                    })
                    .expect("--idle takes SPINS,YIELD_US,MIN_PARK_US,MAX_PARK_US");
            }
            "--default-pin" => {
                parsed.default_pin = value().and_then(|value| {
                    let (source, consumer) = value.split_once(',')?;
                    Some((source.parse().ok()?, consumer.parse().ok()?))
                });
                assert!(
                    parsed.default_pin.is_some(),
                    "--default-pin takes SOURCE_CORE,CONSUMER_CORE"
                );
            }
            "--idle-cpu" => {
                parsed.idle_cpu_seconds = Some(
                    value()
                        .and_then(|value| value.parse().ok())
                        .expect("--idle-cpu takes a number of seconds"),
                );
            }
            "--placement" => {
                parsed.placements = match value().as_deref() {
                    Some("default") => vec![Placement::Default],
                    Some("pinned") => vec![Placement::Pinned(0, 0)],
                    Some("both") => Vec::new(),
                    _ => panic!("--placement takes default, pinned or both"),
                };
            }
            "--queue" => {
                parsed.queue = value()
                    .and_then(|value| value.parse().ok())
                    .filter(|queue| *queue > 0)
                    .expect("--queue takes a capacity");
            }
            "--buffer-kib" => {
                parsed.buffer_kib = value()
                    .and_then(|value| value.parse().ok())
                    .filter(|kib| *kib > 0)
                    .expect("--buffer-kib takes a number of KiB");
            }
            "--bench" => {} // passed by `cargo bench`-style runners
            other => {
                panic!("unknown argument {other}: use --size-mib N, --runs N, --only source|engine")
            }
        }
    }
    let pinned = Placement::Pinned(parsed.pin.0, parsed.pin.1);
    parsed.placements = match parsed.placements.as_slice() {
        [Placement::Default] => vec![Placement::Default],
        [Placement::Pinned(..)] => vec![pinned],
        _ => vec![Placement::Default, pinned],
    };
    parsed
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

fn source_config(path: &Path, args: &Args) -> FileSourceConfig {
    let mut config = FileSourceConfig::new("bench", path, ReadStrategy::Committed);
    config.read_buffer_bytes = args.buffer_kib * 1024;
    config.max_bytes_per_cycle = config.max_bytes_per_cycle.max(config.read_buffer_bytes);
    config
}

/// `--idle-cpu N`: the engine run's threads with the server's defaults (the source
/// driven by `SourceDriver::run`, a consumer idling as a group's thread) over a file
/// nothing is written to, for N seconds after one to settle; prints the CPU they used
/// (an idle server must not keep a core busy).
fn idle_cpu(seconds: u64, args: &Args) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("idle.log");
    File::create(&path).expect("create");
    let feed: Arc<Publisher<Line, u64>> = Feed::builder("idle").queue_capacity(args.queue).build();
    let erased: Arc<dyn SourceOutput<Line, u64>> = feed.clone();
    let mut source = FileEventSource::new(source_config(&path, args), Ok::<Line, String>, erased);
    let mut reader = feed
        .subscribe("counter", SubscribeOptions::default())
        .expect("subscribe")
        .take_reader()
        .expect("reader");
    let driver = SourceDriver::new("idle", args.idle);
    let stop = driver.stop_handle();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    std::thread::scope(|scope| {
        let consumer_done = Arc::clone(&done);
        let idle = args.idle;
        scope.spawn(move || {
            let mut idler = Idler::new(idle);
            reader.set_wakeup(Arc::clone(idler.wakeup()));
            let mut counter = CountingProcessor::default();
            while !consumer_done.load(Ordering::Acquire) {
                let work = reader.poll(&mut counter, GROUP_POLL_LIMIT);
                idler.idle(work, None);
            }
        });
        let source = &mut source;
        let feed = &feed;
        scope.spawn(move || driver.run(source, &**feed).expect("source run"));
        feed.start_complete();
        std::thread::sleep(std::time::Duration::from_secs(1));
        let before = process_cpu_seconds();
        std::thread::sleep(std::time::Duration::from_secs(seconds));
        let used = process_cpu_seconds() - before;
        println!(
            "idle CPU: {:.2}% of one core over {seconds} s (a source thread and a consumer thread, nothing to read)",
            100.0 * used / seconds as f64
        );
        done.store(true, Ordering::Release);
        stop.stop();
    });
}

/// The CPU time (user and system) of this process so far, from `/proc/self/stat`.
fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // the fields after the command's closing parenthesis: utime and stime are the
    // 12th and 13th of them (fields 14 and 15 of the line)
    let after = &stat[stat.rfind(')').expect("a stat line") + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 =
        fields[11].parse::<f64>().expect("utime") + fields[12].parse::<f64>().expect("stime");
    ticks / 100.0 // USER_HZ
}

/// With `FEED_BENCH_SWITCHES` set, prints the calling thread's voluntary (a park, a
/// blocking call) and involuntary (preempted, or a yield that gave the core away)
/// context switches.
fn report_switches(thread: &str) {
    if std::env::var_os("FEED_BENCH_SWITCHES").is_none() {
        return;
    }
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
    let count = |key: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(key))
            .map_or("?", str::trim)
            .to_owned()
    };
    println!(
        "  {thread}: {} voluntary, {} involuntary context switches",
        count("voluntary_ctxt_switches:"),
        count("nonvoluntary_ctxt_switches:")
    );
}

fn pin_to(core: usize) {
    let pinned = core_affinity::set_for_current(core_affinity::CoreId { id: core });
    assert!(pinned, "cannot pin a thread to core {core}");
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

/// The file through a COMMITED source into a counting output; returns the seconds.
fn through_the_source_alone(path: &Path, lines: u64, bytes: u64, args: &Args) -> f64 {
    let output = Arc::new(CountingOutput {
        published: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        last_position: AtomicU64::new(0),
        acknowledged: AtomicU64::new(0),
        epoch: Mutex::new(Epoch::NONE),
        state: Mutex::new(SourceState::Starting),
        committer: Mutex::new(None),
    });
    let erased: Arc<dyn SourceOutput<Line, u64>> = output.clone();
    let mut source = FileEventSource::new(source_config(path, args), Ok::<Line, String>, erased);
    let started = Instant::now();
    SourceDriver::start_source(&mut source, &*output).expect("start");
    while *output.state.lock() != SourceState::CaughtUp {
        SourceDriver::cycle(&mut source, &output).expect("duty cycle");
    }
    SourceDriver::stop_source(&mut source, &output).expect("stop");
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(output.published.load(Ordering::Relaxed), lines);
    assert_eq!(source.committed_position(), bytes);
    std::fs::remove_file(mongoose_source_file::pointer::pointer_path_for(path)).ok();
    seconds
}

/// The median of `runs` timings, and all of them.
fn median_of(runs: usize, mut run: impl FnMut() -> f64) -> (f64, Vec<f64>) {
    let all: Vec<f64> = (0..runs).map(|_| run()).collect();
    (median(&all), all)
}

/// The median of `values` (not empty).
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[middle]
    } else {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    }
}

/// A COMMITED source over the whole file, its pointer committed at the end; then
/// restarts timed from `start()` to CAUGHT_UP. Returns the median seconds, all of
/// them, and the lines a restart published (0: nothing re-read).
fn restart_to_caught_up(path: &Path, bytes: u64, args: &Args) -> (f64, Vec<f64>, u64) {
    let counting = || {
        Arc::new(CountingOutput {
            published: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            last_position: AtomicU64::new(0),
            acknowledged: AtomicU64::new(0),
            epoch: Mutex::new(Epoch::NONE),
            state: Mutex::new(SourceState::Starting),
            committer: Mutex::new(None),
        })
    };
    let output = counting();
    let erased: Arc<dyn SourceOutput<Line, u64>> = output.clone();
    let mut source = FileEventSource::new(source_config(path, args), Ok::<Line, String>, erased);
    SourceDriver::start_source(&mut source, &*output).expect("start");
    while *output.state.lock() != SourceState::CaughtUp {
        SourceDriver::cycle(&mut source, &output).expect("duty cycle");
    }
    SourceDriver::stop_source(&mut source, &output).expect("stop");
    assert_eq!(source.committed_position(), bytes);
    let mut republished = 0;
    let (median, all) = median_of(args.runs, || {
        let output = counting();
        let erased: Arc<dyn SourceOutput<Line, u64>> = output.clone();
        let mut source =
            FileEventSource::new(source_config(path, args), Ok::<Line, String>, erased);
        let started = Instant::now();
        SourceDriver::start_source(&mut source, &*output).expect("start");
        while *output.state.lock() != SourceState::CaughtUp {
            SourceDriver::cycle(&mut source, &output).expect("duty cycle");
        }
        let seconds = started.elapsed().as_secs_f64();
        SourceDriver::stop_source(&mut source, &output).expect("stop");
        republished += output.published.load(Ordering::Relaxed);
        seconds
    });
    std::fs::remove_file(mongoose_source_file::pointer::pointer_path_for(path)).ok();
    (median, all, republished)
}

/// `1234.5` as `1,235`.
fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value);
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

fn rates(mib: f64, seconds: &[f64]) -> String {
    let rates: Vec<String> = seconds
        .iter()
        .map(|seconds| format!("{:.0}", mib / seconds))
        .collect();
    rates.join(", ")
}

fn main() {
    let args = args();
    if let Some(seconds) = args.idle_cpu_seconds {
        idle_cpu(seconds, &args);
        return;
    }
    let size_mib = args.size_mib;
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("bench.log");
    let lines = write_lines(&path, size_mib);
    let bytes = std::fs::metadata(&path).expect("size").len();
    let mib = bytes as f64 / (1024.0 * 1024.0);
    let rss_before = peak_rss_kib();

    // (a) the baseline: a raw memchr line count (warm page cache: the file was just written)
    let (raw_seconds, raw_all) = median_of(args.runs, || {
        let started = Instant::now();
        let counted = raw_count(&path);
        let seconds = started.elapsed().as_secs_f64();
        assert_eq!(counted, lines);
        seconds
    });
    let raw_mib_s = mib / raw_seconds;
    println!(
        "file_feed_bench: {size_mib} MiB, {lines} lines of {LINE_BYTES} bytes, median of {} run(s)",
        args.runs
    );
    println!(
        "raw memchr count : {raw_mib_s:>9.1} MiB/s {:>12.0} lines/s   (runs: {} MiB/s)",
        lines as f64 / raw_seconds,
        rates(mib, &raw_all)
    );

    // (b) the file through a COMMITED file source into a counting output
    let mut rss_direct = None;
    let mut feed_mib_s = None;
    if args.source {
        let (seconds, all) = median_of(args.runs, || {
            through_the_source_alone(&path, lines, bytes, &args)
        });
        rss_direct = peak_rss_kib();
        feed_mib_s = Some(mib / seconds);
        println!(
            "COMMITED feed    : {:>9.1} MiB/s {:>12.0} lines/s   (runs: {} MiB/s)",
            mib / seconds,
            lines as f64 / seconds,
            rates(mib, &all)
        );
    }

    // (c) the same through the real delivery engine to a counting processor thread:
    // the server's default placement and idling against pinned threads, alternating
    let mut engine_mib_s = None;
    if args.engine {
        let mut seconds: Vec<(Placement, Vec<f64>)> = args
            .placements
            .iter()
            .map(|placement| (*placement, Vec::new()))
            .collect();
        for _ in 0..args.runs {
            for (placement, runs) in &mut seconds {
                runs.push(through_the_delivery_engine(
                    &path, lines, bytes, &args, *placement,
                ));
                std::fs::remove_file(mongoose_source_file::pointer::pointer_path_for(&path)).ok();
            }
        }
        let mut medians = Vec::new();
        for (placement, runs) in &seconds {
            let median = median(runs);
            let what = match placement {
                Placement::Default => "default".to_owned(),
                Placement::Pinned(source, consumer) => format!("pinned {source},{consumer}"),
            };
            println!(
                "feed + delivery  : {:>9.1} MiB/s {:>12.0} lines/s   (runs: {} MiB/s; {what}: Publisher, {} queue, counting thread)",
                mib / median,
                lines as f64 / median,
                rates(mib, runs),
                args.queue
            );
            medians.push((*placement, mib / median));
        }
        engine_mib_s = medians.first().map(|(_, rate)| *rate);
        if let [(Placement::Default, default), (Placement::Pinned(..), pinned)] = medians[..] {
            println!(
                "file -> engine: default {} MiB/s, pinned {} MiB/s (default/pinned {:.2}; pinned/default {:.2}x)",
                thousands(default),
                thousands(pinned),
                default / pinned,
                pinned / default
            );
        }
    }

    // (d) a restart whose pointer is committed at the end of the file: to CAUGHT_UP
    if args.source {
        let (seconds, all, republished) = restart_to_caught_up(&path, bytes, &args);
        let runs: Vec<String> = all
            .iter()
            .map(|seconds| format!("{:.3}", seconds * 1000.0))
            .collect();
        println!(
            "restart to CAUGHT_UP (pointer at the end): {:.3} ms (runs: {} ms; {republished} lines published again)",
            seconds * 1000.0,
            runs.join(", ")
        );
    }

    let rss_after = peak_rss_kib();
    let ratio = |rate: Option<f64>| {
        rate.map_or("-".to_owned(), |rate| {
            format!("{:.1}%", 100.0 * rate / raw_mib_s)
        })
    };
    println!(
        "ratio feed/raw   : {} (source alone), {} (with the delivery engine)",
        ratio(feed_mib_s),
        ratio(engine_mib_s)
    );
    let kib = |rss: Option<u64>| rss.map_or("?".to_owned(), |kib| kib.to_string());
    println!(
        "peak RSS (VmHWM) : {} KiB before the runs, {} KiB after the source alone, {} KiB after the engine run (file {} KiB)",
        kib(rss_before),
        kib(rss_direct),
        kib(rss_after),
        bytes / 1024
    );
}
