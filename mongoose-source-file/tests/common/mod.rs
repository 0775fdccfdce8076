//! Fixtures shared by the integration tests:
//!
//! - the pointer/epoch setups: an input file ([`input`]), a started source into a
//!   [`RecordingOutput`] (an output double that records what a source publishes and
//!   lets the test say what the consumer processed), duty-cycle drivers, a first run
//!   that stops cleanly ([`run_and_process`]) or "crashes" ([`run_and_crash`]), and the
//!   pointer file read back;
//! - a [`Pipeline`] of a source into the real delivery engine, for numbered lines
//!   ([`numbered_lines`], [`offset_after`]).
#![allow(dead_code, unreachable_pub)]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use mongoose_core::{
    BatchEnd, CoreError, Epoch, EventSource, PublishRefused, Refusal, SourceCommitter,
    SourceOutput, SourceStart, SourceState, TryPublish,
};
use mongoose_delivery::{
    DrivenOutput, Feed, Publisher, QueueReader, SourceDriver, SubscribeOptions,
};
use mongoose_source_file::pointer::{PointerRecord, POINTER_FILE_SIZE};
use mongoose_source_file::{FileEventSource, FileSourceConfig, Line, ReadStrategy};
use parking_lot::Mutex;

/// One entry of the double's window: an item (or a filtered line) with its epoch and
/// position.
#[derive(Clone, Debug)]
pub struct Entry<T> {
    pub item: Option<T>,
    pub epoch: Epoch,
    pub position: u64,
}

#[derive(Debug)]
struct Inner<T> {
    entries: Vec<Entry<T>>,
    /// Items (not filtered entries) the "consumer" processed, in order.
    processed_items: usize,
    /// Entries given to the committer.
    acknowledged: usize,
    /// At most this many published and unprocessed items (a queue's capacity).
    capacity: Option<usize>,
    epoch: Epoch,
    states: Vec<(SourceState, Option<String>)>,
    /// Rotated files reported unread: (file, bytes).
    rotated_unread: Vec<(String, Option<u64>)>,
    unterminated: Option<u64>,
    pause_by_default: bool,
    paused_publishes: u64,
    hold_commits: bool,
    /// The next this many publishes are told to retry (a nested publish).
    retries: usize,
}

/// A `SourceOutput` that records publishes; the test decides what was processed.
///
/// Its `try_publish_batch` holds its lock for the whole batch and pulls an item only
/// when it can take it, as the real publisher does; any call into the output from
/// inside a batch (a nested call, which would deadlock on that lock) panics.
pub struct RecordingOutput<T> {
    inner: Mutex<Inner<T>>,
    committer: Mutex<Option<Box<dyn SourceCommitter<u64>>>>,
    /// The thread running a batch now.
    batch_thread: Mutex<Option<ThreadId>>,
}

/// Marks a batch in progress on this thread until dropped.
struct BatchMark<'a>(&'a Mutex<Option<ThreadId>>);

impl Drop for BatchMark<'_> {
    fn drop(&mut self) {
        *self.0.lock() = None;
    }
}

impl<T: Clone + Send + 'static> RecordingOutput<T> {
    pub fn new() -> Arc<Self> {
        Arc::new(RecordingOutput {
            inner: Mutex::new(Inner {
                entries: Vec::new(),
                processed_items: 0,
                acknowledged: 0,
                capacity: None,
                epoch: Epoch::NONE,
                states: Vec::new(),
                rotated_unread: Vec::new(),
                unterminated: None,
                pause_by_default: false,
                paused_publishes: 0,
                hold_commits: false,
                retries: 0,
            }),
            committer: Mutex::new(None),
            batch_thread: Mutex::new(None),
        })
    }

    /// Panics on a call made from inside this output's batch on the same thread.
    fn not_nested(&self, call: &str) {
        if *self.batch_thread.lock() == Some(std::thread::current().id()) {
            panic!("{call} called from inside try_publish_batch: a nested call into the output");
        }
    }

    fn full(inner: &Inner<T>) -> bool {
        inner.capacity.is_some_and(|capacity| {
            let items = inner.entries.iter().filter(|e| e.item.is_some()).count();
            items - inner.processed_items >= capacity
        })
    }

    /// The items published, in order.
    pub fn items(&self) -> Vec<T> {
        let inner = self.inner.lock();
        inner
            .entries
            .iter()
            .filter_map(|e| e.item.clone())
            .collect()
    }

    /// Every entry (items and filtered lines).
    pub fn entries(&self) -> Vec<Entry<T>> {
        self.inner.lock().entries.clone()
    }

    /// The positions of the published items.
    pub fn positions(&self) -> Vec<u64> {
        let inner = self.inner.lock();
        inner
            .entries
            .iter()
            .filter(|e| e.item.is_some())
            .map(|e| e.position)
            .collect()
    }

    pub fn set_capacity(&self, capacity: Option<usize>) {
        self.inner.lock().capacity = capacity;
    }

    /// The consumer processed the first `count` items.
    pub fn process(&self, count: usize) {
        let mut inner = self.inner.lock();
        let items = inner.entries.iter().filter(|e| e.item.is_some()).count();
        assert!(count <= items, "cannot process {count} of {items} items");
        inner.processed_items = inner.processed_items.max(count);
    }

    pub fn process_all(&self) {
        let items = self.items().len();
        self.process(items);
    }

    /// The next `count` publishes are told to retry.
    pub fn retry_next(&self, count: usize) {
        self.inner.lock().retries = count;
    }

    /// While held, `poll_acknowledgements` tells the committer but does not commit.
    pub fn hold_commits(&self, hold: bool) {
        self.inner.lock().hold_commits = hold;
    }

    /// What the source does at the start of a duty cycle, called by the test.
    pub fn poll_acknowledgements_for_test(&self) -> usize {
        self.poll_acknowledgements()
    }

    /// The driver's poll: gives the committer what was processed and commits it.
    pub fn poll_acknowledgements(&self) -> usize {
        self.not_nested("poll_acknowledgements");
        let (acks, hold) = {
            let mut inner = self.inner.lock();
            let upto = Self::acknowledgeable(&inner);
            let acks: Vec<(u64, Epoch, u64)> = inner.entries[inner.acknowledged..upto]
                .iter()
                .enumerate()
                .map(|(index, e)| ((inner.acknowledged + index + 1) as u64, e.epoch, e.position))
                .collect();
            inner.acknowledged = upto;
            (acks, inner.hold_commits)
        };
        let mut committer = self.committer.lock();
        if let Some(committer) = committer.as_mut() {
            for (sequence, epoch, position) in &acks {
                committer.acknowledged(*sequence, *epoch, *position);
            }
            if !hold {
                committer.commit().expect("commit");
            }
        }
        acks.len()
    }

    /// The driver's flush: nothing is paused in the double.
    pub fn flush_paused(&self) -> bool {
        self.not_nested("flush_paused");
        true
    }

    /// Registers the source's committer (what the driver does with its start's).
    pub fn acknowledge_with(&self, committer: Box<dyn SourceCommitter<u64>>) {
        self.not_nested("acknowledge_with");
        *self.committer.lock() = Some(committer);
    }

    /// Makes PAUSE the default (what the driver does with its start's).
    pub fn set_pause_by_default(&self, pause: bool) {
        self.not_nested("set_pause_by_default");
        self.inner.lock().pause_by_default = pause;
    }

    pub fn commit_now(&self) {
        if let Some(committer) = self.committer.lock().as_mut() {
            committer.commit().expect("commit");
        }
    }

    pub fn states(&self) -> Vec<(SourceState, Option<String>)> {
        self.inner.lock().states.clone()
    }

    pub fn rotated_unread(&self) -> Vec<(String, Option<u64>)> {
        self.inner.lock().rotated_unread.clone()
    }

    pub fn last_state(&self) -> Option<SourceState> {
        self.inner.lock().states.last().map(|(state, _)| *state)
    }

    pub fn unterminated(&self) -> Option<u64> {
        self.inner.lock().unterminated
    }

    pub fn pause_by_default(&self) -> bool {
        self.inner.lock().pause_by_default
    }

    pub fn paused_publishes(&self) -> u64 {
        self.inner.lock().paused_publishes
    }

    pub fn has_committer(&self) -> bool {
        self.committer.lock().is_some()
    }

    /// The acknowledgeable prefix: every entry up to the last processed item, and the
    /// filtered entries right after it.
    fn acknowledgeable(inner: &Inner<T>) -> usize {
        let mut items = 0;
        let mut upto = 0;
        for (index, entry) in inner.entries.iter().enumerate() {
            if entry.item.is_some() {
                if items == inner.processed_items {
                    break;
                }
                items += 1;
            }
            upto = index + 1;
        }
        upto
    }
}

/// The source driver applies the source's start to the double, polls its
/// acknowledgements and flushes it around each duty cycle, as it does a real feed's.
impl<T: Clone + Send + 'static> DrivenOutput for RecordingOutput<T> {
    fn apply_start(&self, start: SourceStart) -> Result<(), CoreError> {
        self.set_epoch(start.epoch);
        self.set_pause_by_default(start.pause_by_default);
        if let Some(committer) = start.committer {
            self.acknowledge_with(committer.into_typed::<u64>().expect("a u64 committer"));
        }
        Ok(())
    }
    fn poll_acknowledgements(&self) -> usize {
        RecordingOutput::poll_acknowledgements(self)
    }
    fn flush_paused(&self) -> bool {
        RecordingOutput::flush_paused(self)
    }
}

impl<T: Clone + Send + 'static> SourceOutput<T, u64> for RecordingOutput<T> {
    fn try_publish(&self, item: T, position: u64) -> TryPublish<T> {
        self.not_nested("try_publish");
        let mut inner = self.inner.lock();
        if inner.retries > 0 {
            inner.retries -= 1;
            return TryPublish::Retry(item);
        }
        if Self::full(&inner) {
            inner.paused_publishes += 1;
            return TryPublish::Paused(item);
        }
        let epoch = inner.epoch;
        inner.entries.push(Entry {
            item: Some(item),
            epoch,
            position,
        });
        TryPublish::Published
    }

    fn try_publish_batch(&self, next: &mut dyn FnMut() -> Option<(T, u64)>) -> BatchEnd<T, u64> {
        self.not_nested("try_publish_batch");
        let mut inner = self.inner.lock();
        *self.batch_thread.lock() = Some(std::thread::current().id());
        let _mark = BatchMark(&self.batch_thread);
        loop {
            if inner.retries == 0 && Self::full(&inner) {
                inner.paused_publishes += 1;
                return BatchEnd::Paused;
            }
            let Some((item, position)) = next() else {
                return BatchEnd::Exhausted;
            };
            if inner.retries > 0 {
                inner.retries -= 1;
                return BatchEnd::Returned(item, position, Refusal::Retry);
            }
            let epoch = inner.epoch;
            inner.entries.push(Entry {
                item: Some(item),
                epoch,
                position,
            });
        }
    }

    fn publish(&self, _item: T) -> Result<(), PublishRefused> {
        panic!("a file source publishes with positions only")
    }

    fn cache(&self, item: T, position: u64) {
        let result = self.try_publish(item, position);
        assert!(result.is_published(), "the double caches without limit");
    }

    fn filtered(&self, position: u64, _reason: &str) {
        self.not_nested("filtered");
        let mut inner = self.inner.lock();
        let epoch = inner.epoch;
        inner.entries.push(Entry {
            item: None,
            epoch,
            position,
        });
    }

    fn commit_processed(&self) -> usize {
        self.poll_acknowledgements()
    }

    fn set_epoch(&self, epoch: Epoch) {
        self.not_nested("set_epoch");
        self.inner.lock().epoch = epoch;
    }

    fn report_state(&self, state: SourceState, detail: Option<&str>) {
        self.not_nested("report_state");
        self.inner
            .lock()
            .states
            .push((state, detail.map(str::to_owned)));
    }

    fn report_rotated_unread(&self, file: &str, bytes: Option<u64>) {
        self.not_nested("report_rotated_unread");
        self.inner
            .lock()
            .rotated_unread
            .push((file.to_owned(), bytes));
    }

    fn set_unterminated_bytes(&self, bytes: u64) {
        self.not_nested("set_unterminated_bytes");
        self.inner.lock().unterminated = Some(bytes);
    }
}

/// A started source of `String` lines into `output`.
pub fn started_source(
    path: &Path,
    strategy: ReadStrategy,
    output: &Arc<RecordingOutput<Line>>,
) -> FileEventSource<Line> {
    let mut source = unstarted_source(path, strategy, output);
    SourceDriver::start_source(&mut source, &**output).expect("start");
    source
}

pub fn unstarted_source(
    path: &Path,
    strategy: ReadStrategy,
    output: &Arc<RecordingOutput<Line>>,
) -> FileEventSource<Line> {
    let output: Arc<dyn SourceOutput<Line, u64>> = output.clone();
    FileEventSource::new(
        FileSourceConfig::new("lines", path, strategy),
        Ok::<Line, String>,
        output,
    )
}

/// A started source of `path` with `strategy` into a new recording output.
pub fn source_with(
    path: &Path,
    strategy: ReadStrategy,
) -> (Arc<RecordingOutput<Line>>, FileEventSource<Line>) {
    let output = RecordingOutput::new();
    let source = started_source(path, strategy, &output);
    (output, source)
}

/// A started COMMITED source of `path` into a new recording output.
pub fn committed_source(path: &Path) -> (Arc<RecordingOutput<Line>>, FileEventSource<Line>) {
    source_with(path, ReadStrategy::Committed)
}

/// A started COMMITED source of `path` into a new recording output, driven until it
/// reports CAUGHT_UP (nothing processed).
pub fn caught_up_source(path: &Path) -> (Arc<RecordingOutput<Line>>, FileEventSource<Line>) {
    let (output, mut source) = committed_source(path);
    drive_until_state(&mut source, &output, SourceState::CaughtUp);
    (output, source)
}

/// Runs a COMMITED source over the file until `lines` were published, processes the
/// first `processed` and stops (a clean stop commits them). Returns the epoch.
pub fn run_and_process(path: &Path, lines: usize, processed: usize) -> Epoch {
    let (output, mut source) = committed_source(path);
    drive_until(&mut source, &output, || output.items().len() >= lines);
    output.process(processed);
    SourceDriver::stop_source(&mut source, &output).expect("stop");
    source.epoch()
}

/// A first run that processes (and commits) the first `processed` of the file's lines,
/// then "crashes": the source is dropped without a stop (the pointer holds what was
/// committed). Returns the epoch of the run.
pub fn run_and_crash(path: &Path, lines: usize, processed: usize) -> Epoch {
    let (output, mut source) = committed_source(path);
    drive_until(&mut source, &output, || output.items().len() >= lines);
    output.process(processed);
    output.commit_now();
    drive(&mut source, &output, 2);
    let epoch = source.epoch();
    drop(source);
    epoch
}

/// Runs the driver's duty cycles of `source` into `output` until `done` holds, for at
/// most 10 s.
pub fn drive_until(
    source: &mut dyn EventSource,
    output: &dyn DrivenOutput,
    mut done: impl FnMut() -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "condition not reached in time");
        SourceDriver::cycle(source, output).expect("duty cycle");
    }
}

/// Runs duty cycles until the source last reported `state` to `output`, for at most
/// 10 s.
pub fn drive_until_state<T: Clone + Send + 'static>(
    source: &mut dyn EventSource,
    output: &RecordingOutput<T>,
    state: SourceState,
) {
    drive_until(source, output, || output.last_state() == Some(state));
}

/// Runs `cycles` of the driver's duty cycles of `source` into `output`.
pub fn drive(source: &mut dyn EventSource, output: &dyn DrivenOutput, cycles: usize) {
    for _ in 0..cycles {
        SourceDriver::cycle(source, output).expect("duty cycle");
    }
}

/// The pointer file's record.
pub fn pointer_of(input: &Path) -> PointerRecord {
    let bytes = fs::read(pointer_path(input)).expect("pointer file");
    PointerRecord::decode(&bytes).record
}

pub fn pointer_path(input: &Path) -> PathBuf {
    mongoose_source_file::pointer::pointer_path_for(input)
}

pub fn pointer_len(input: &Path) -> usize {
    fs::metadata(pointer_path(input)).expect("pointer").len() as usize
}

pub const FULL_POINTER: usize = POINTER_FILE_SIZE;

/// Writes `content` to `input.log` in `dir`; its path.
pub fn input(dir: &tempfile::TempDir, content: &[u8]) -> PathBuf {
    let path = dir.path().join("input.log");
    fs::write(&path, content).expect("write input");
    path
}

/// Writes `content` to a new file (a new inode) and renames it over `path`.
pub fn replace_with(path: &Path, content: &[u8]) {
    let temporary = path.with_extension("replacement");
    fs::write(&temporary, content).expect("write replacement");
    fs::rename(&temporary, path).expect("rename replacement");
}

pub fn append(path: &Path, content: &[u8]) {
    use std::io::Write;
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("open for append");
    file.write_all(content).expect("append");
}

pub fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// `count` numbered lines, `line-00001` on.
pub fn numbered_lines(count: usize) -> String {
    (1..=count).map(|n| format!("line-{n:05}\n")).collect()
}

/// Bytes of the first `count` lines of `numbered_lines`.
pub fn offset_after(count: usize) -> u64 {
    (count * "line-00000\n".len()) as u64
}

/// A COMMITED source of lines into a real feed, and the reader of the feed's one
/// subscriber (group `group`).
pub struct Pipeline {
    pub feed: Arc<Publisher<Line, u64>>,
    pub source: FileEventSource<Line>,
    pub reader: QueueReader<Line>,
}

/// A pipeline on `path` with queues of `capacity`; the source is not started.
pub fn pipeline(path: &Path, capacity: usize) -> Pipeline {
    let feed: Arc<Publisher<Line, u64>> = Feed::builder("lines").queue_capacity(capacity).build();
    let output: Arc<dyn SourceOutput<Line, u64>> = feed.clone();
    let source = FileEventSource::new(
        FileSourceConfig::new("lines", path, ReadStrategy::Committed),
        Ok::<Line, String>,
        output,
    );
    let reader = feed
        .subscribe("group", SubscribeOptions::default())
        .expect("subscribe")
        .take_reader()
        .expect("the group's first subscription reads");
    Pipeline {
        feed,
        source,
        reader,
    }
}
