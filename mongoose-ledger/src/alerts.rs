//! Where the ledger writes its alerts: the [`AlertSink`] trait, a server's sink
//! (tracked or keyed) and a plain file.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use mongoose_core::sink::CommitGate;
use mongoose_core::sink::{OutputKey, RetryBudget};
use mongoose_sink::{
    FileSink, FileSinkConfig, GateId, GateSource, RunnerConfig, SinkHandle, SinkRunner, SinkWriter,
};

use mongoose_core::ProcessorError;

/// Where the ledger appends its alerts. An alerts file ([`Ledger::open_alerts_file`])
/// appends each line and its newline in one unbuffered write, so an alert written
/// before a crash is on disk after it; a server passes a configured sink as one (its
/// writer keys the alert by the line and holds the line's commit until the alert is
/// published), whose alerts the ledger also admits with its state, so an alert not yet
/// published at a crash is published again, under its key, at the next start.
///
/// [`Ledger::open_alerts_file`]: crate::Ledger::open_alerts_file
pub trait AlertSink: Send + std::fmt::Debug {
    /// Appends `line` (a newline follows it). A keyed sink returns the alert's output
    /// key and its name, for the ledger's outbox.
    fn write_line(&mut self, line: &str) -> std::io::Result<Option<(OutputKey, String)>>;

    /// Publishes again, under its key, an alert admitted before a crash and never
    /// confirmed published. A file has nothing to do (its alerts are written at once).
    fn republish(&mut self, key: OutputKey, payload: Vec<u8>) -> std::io::Result<()> {
        let _ = (key, payload);
        Ok(())
    }

    /// True when every alert given so far is over (published, or given up by the
    /// sink's policy): the outbox may forget them.
    fn is_settled(&self) -> bool {
        true
    }

    /// Moves into `over` the keys of the alerts written or published again so far
    /// that are over now (published, or given up by the sink's policy), each once: the
    /// ledger records their outcomes. A file has nothing to give (its alerts carry no
    /// key).
    fn drain_over(&mut self, over: &mut Vec<OutputKey>) {
        let _ = over;
    }

    /// The ledger stops: publish what is queued (until a deadline).
    fn stop(&mut self) {}
}

/// A refused alert as an I/O error: `WouldBlock` for a full sink (the ledger is busy
/// and the line comes again), another kind for a stopped one.
pub fn send_error(error: mongoose_sink::SendError) -> std::io::Error {
    let kind = match error {
        mongoose_sink::SendError::Full { .. } => std::io::ErrorKind::WouldBlock,
        mongoose_sink::SendError::Stopped { .. } => std::io::ErrorKind::Other,
    };
    std::io::Error::new(kind, error.to_string())
}

/// Tells which of the alerts a [`SinkAlerts`] gave its sink are over: a commit gate in
/// front of the feed's own (if any), told by the sink's thread as each alert is over.
/// Tags are given in order; `through` is the highest tag with every one before it over.
struct Tracker {
    /// The feed's gate the alerts hold their lines' commits with (`None`: not held),
    /// found at the first alert.
    inner: std::sync::OnceLock<Option<Arc<dyn CommitGate>>>,
    /// The last tag given to `pending`.
    last: std::sync::atomic::AtomicU64,
    /// Every tag up to `.0` is over; `.1` the ones after it that are over already.
    over: parking_lot::Mutex<(u64, std::collections::BTreeSet<u64>)>,
}

impl Tracker {
    fn new() -> Arc<Self> {
        Arc::new(Tracker {
            inner: std::sync::OnceLock::new(),
            last: std::sync::atomic::AtomicU64::new(0),
            over: parking_lot::Mutex::new((0, std::collections::BTreeSet::new())),
        })
    }

    fn last(&self) -> u64 {
        self.last.load(std::sync::atomic::Ordering::Acquire)
    }

    fn through(&self) -> u64 {
        self.over.lock().0
    }
}

impl CommitGate for Tracker {
    fn pending(&self, tag: u64) {
        self.last.store(tag, std::sync::atomic::Ordering::Release);
        if let Some(Some(inner)) = self.inner.get() {
            inner.pending(tag);
        }
    }

    fn complete(&self, tag: u64) {
        {
            let mut over = self.over.lock();
            if tag == over.0 + 1 {
                over.0 = tag;
                while over.1.first() == Some(&(over.0 + 1)) {
                    over.1.pop_first();
                    over.0 += 1;
                }
            } else if tag > over.0 {
                // out of order (a retried alert): rare, the one place this allocates
                over.1.insert(tag);
            }
        }
        if let Some(Some(inner)) = self.inner.get() {
            inner.complete(tag);
        }
    }

    fn complete_through(&self, tag: u64) {
        {
            let mut over = self.over.lock();
            if tag > over.0 {
                over.0 = tag;
                while over.1.first().is_some_and(|first| *first <= over.0 + 1) {
                    let first = over.1.pop_first().unwrap_or_default();
                    over.0 = over.0.max(first);
                }
            }
        }
        if let Some(Some(inner)) = self.inner.get() {
            inner.complete_through(tag);
        }
    }

    fn held(&self, tag: u64, reason: &str) {
        if let Some(Some(inner)) = self.inner.get() {
            inner.held(tag, reason);
        }
    }
}

/// The alerts given to a sink whose outcomes are not recorded yet, by tag.
#[derive(Default)]
struct Given {
    written: std::collections::VecDeque<(u64, OutputKey)>,
    untracked: std::collections::VecDeque<(u64, OutputKey)>,
    republished: std::collections::VecDeque<(u64, OutputKey)>,
}

/// How a [`SinkAlerts`] learns which alerts are over.
enum Tracking {
    /// Per alert: the writer's gate is a [`Tracker`], and alerts published again are
    /// sent tagged for a second one.
    Tags {
        written: Arc<Tracker>,
        republished: Arc<Tracker>,
        handle: SinkHandle,
        republished_gate: GateId,
        next_tag: u64,
    },
    /// Only when the whole sink is settled (a writer made elsewhere,
    /// [`SinkAlerts::writer`]).
    Settled,
}

/// Alerts written through a sink's writer: the ledger's own alerts file
/// ([`SinkAlerts::file`], a `mongoose_sink::FileSink` on its own thread) or a server's
/// configured sink ([`SinkAlerts::tracked`]). Each alert is keyed by its line, admitted
/// with the line's record, and written once across any crash (a restart publishes again
/// what was admitted and not confirmed, and a file sink drops a key it already holds).
/// The sink tells it each alert that is over, and the ledger records that outcome, so
/// a crash leaves only the alerts in flight to publish again.
pub struct SinkAlerts {
    writer: SinkWriter,
    tracking: Tracking,
    given: Given,
    /// The runner of the ledger's own alerts file (`None` for a server's sink, which
    /// the server runs and whose held outputs it reports).
    runner: Option<SinkRunner>,
}

impl std::fmt::Debug for SinkAlerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkAlerts")
            .field("writer", &self.writer)
            .field("own_file", &self.runner.is_some())
            .field("tracked", &matches!(self.tracking, Tracking::Tags { .. }))
            .field(
                "given",
                &(self.given.written.len() + self.given.republished.len()),
            )
            .finish()
    }
}

impl SinkAlerts {
    /// Alerts to a server's configured sink, through `writer`. The ledger learns that
    /// its alerts are over only when the whole sink is settled: prefer
    /// [`SinkAlerts::tracked`].
    pub fn writer(writer: SinkWriter) -> Self {
        SinkAlerts {
            writer,
            tracking: Tracking::Settled,
            given: Given::default(),
            runner: None,
        }
    }

    /// Alerts to the sink behind `handle`, through a writer named `name` (the server
    /// uses `group/processor`) whose alerts hold their lines' commits with the gates
    /// `gates` finds; each alert's outcome is tracked.
    pub fn tracked(handle: SinkHandle, gates: GateSource, name: &str) -> Self {
        Self::tracking(handle, gates, Some(name), None)
    }

    fn tracking(
        handle: SinkHandle,
        gates: GateSource,
        name: Option<&str>,
        runner: Option<SinkRunner>,
    ) -> Self {
        // one feed per ledger: the tracker takes its gate at the first alert
        let written = Tracker::new();
        let front = Arc::clone(&written);
        let tracked: GateSource = Arc::new(move |feed: &str| {
            front.inner.get_or_init(|| gates(feed));
            Some(Arc::clone(&front) as Arc<dyn CommitGate>)
        });
        let mut writer = SinkWriter::new(handle.clone(), tracked);
        if let Some(name) = name {
            writer = writer.named(name);
        }
        let republished = Tracker::new();
        let _ = republished.inner.set(None);
        let republished_gate =
            handle.register_gate(Arc::clone(&republished) as Arc<dyn CommitGate>);
        SinkAlerts {
            writer,
            tracking: Tracking::Tags {
                written,
                republished,
                handle,
                republished_gate,
                next_tag: 0,
            },
            given: Given::default(),
            runner,
        }
    }

    /// Opens the alerts file `path` as a sink (fdatasync'd batches when `sync`); each
    /// alert holds its line's commit through `gate` (its own participant in the
    /// feed's checkpoint: not the one the ledger's records use) until it is written.
    ///
    /// # Errors
    /// The file or its `.sinkstate` cannot be opened, or the sink's thread not started.
    pub fn file(
        path: &Path,
        sync: bool,
        gate: Option<Arc<dyn CommitGate>>,
    ) -> Result<Self, ProcessorError> {
        let sink = FileSink::open(
            "alerts",
            &FileSinkConfig {
                path: path.to_path_buf(),
                sync,
                state_file: None,
            },
        )
        .map_err(|error| ProcessorError::new(error.to_string()))?;
        // a few quick retries: an alert that cannot be written (a full disk) is held
        // within a second, and the ledger's next alert fails its handler
        let mut config = RunnerConfig::new("alerts", "file");
        config.budget = RetryBudget {
            max_retries: 3,
            initial_backoff: std::time::Duration::from_millis(20),
            max_backoff: std::time::Duration::from_millis(100),
            expire_after: std::time::Duration::from_secs(5),
        };
        let runner = SinkRunner::start(Box::new(sink), config).map_err(|error| {
            ProcessorError::new(format!("cannot start the alerts sink's thread: {error}"))
        })?;
        let handle = runner.handle();
        Ok(Self::tracking(
            handle,
            Arc::new(move |_feed: &str| gate.clone()),
            None,
            Some(runner),
        ))
    }
}

impl AlertSink for SinkAlerts {
    fn write_line(&mut self, line: &str) -> std::io::Result<Option<(OutputKey, String)>> {
        if self.runner.is_some() {
            if let Some(held) = self.writer.first_held() {
                // the ledger's own alerts file could not be written: the ledger fails
                // (its line's commit is held already; a restart writes it)
                return Err(std::io::Error::other(format!(
                    "the alerts file cannot be written: {held}"
                )));
            }
        }
        let before = match &self.tracking {
            Tracking::Tags { written, .. } => Some(written.last()),
            Tracking::Settled => None,
        };
        let key = self
            .writer
            .write(line.as_bytes().to_vec())
            .map_err(send_error)?;
        let tag = match &self.tracking {
            Tracking::Tags { written, .. } => Some(written.last()),
            Tracking::Settled => None,
        };
        if tag.is_some() && tag != before {
            self.given
                .written
                .push_back((tag.unwrap_or_default(), key.clone()));
        } else {
            // not tagged (written outside a delivery, or no tracker): over once the
            // whole sink is settled
            self.given.untracked.push_back((1, key.clone()));
        }
        Ok(Some((key, self.writer.sink().to_owned())))
    }

    fn republish(&mut self, key: OutputKey, payload: Vec<u8>) -> std::io::Result<()> {
        match &mut self.tracking {
            Tracking::Tags {
                republished,
                handle,
                republished_gate,
                next_tag,
                ..
            } => {
                let tag = *next_tag + 1;
                republished.pending(tag);
                if let Err(error) = handle.send(
                    mongoose_core::sink::Output::new(key.clone(), payload),
                    Some((*republished_gate, tag)),
                ) {
                    // not taken: the tag is over, the alert is tried again
                    republished.complete(tag);
                    *next_tag = tag;
                    return Err(send_error(error));
                }
                *next_tag = tag;
                self.given.republished.push_back((tag, key));
            }
            Tracking::Settled => {
                self.writer
                    .republish(key.clone(), payload)
                    .map_err(send_error)?;
                self.given.untracked.push_back((1, key));
            }
        }
        Ok(())
    }

    fn is_settled(&self) -> bool {
        self.writer.is_settled()
    }

    fn drain_over(&mut self, over: &mut Vec<OutputKey>) {
        let (written_through, republished_through) = match &self.tracking {
            Tracking::Tags {
                written,
                republished,
                ..
            } => (written.through(), republished.through()),
            Tracking::Settled => (0, 0),
        };
        // checked only when something untracked waits (it reads the sink's status)
        let untracked_through = if !self.given.untracked.is_empty() && self.writer.is_settled() {
            u64::MAX
        } else {
            0
        };
        for (given, through) in [
            (&mut self.given.written, written_through),
            (&mut self.given.republished, republished_through),
            (&mut self.given.untracked, untracked_through),
        ] {
            while given.front().is_some_and(|(tag, _)| *tag <= through) {
                if let Some((_, key)) = given.pop_front() {
                    over.push(key);
                }
            }
        }
    }

    fn stop(&mut self) {
        if let Some(runner) = self.runner.take() {
            runner.stop(std::time::Instant::now() + std::time::Duration::from_secs(10));
        }
    }
}

impl AlertSink for File {
    fn write_line(&mut self, line: &str) -> std::io::Result<Option<(OutputKey, String)>> {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        (&*self).write_all(&bytes).map(|()| None)
    }
}
