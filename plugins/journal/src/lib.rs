//! The journal connector: a plugin that reads and writes a
//! [`mongoose_journal::Journal`] (memory-mapped, segmented, append-only).
//!
//! * **Source kind `journal`.** Tails the journal in `path` and publishes each excerpt
//!   (its bytes; the feed's codec makes it a line or keeps the bytes) at position
//!   `index + 1` of lane 0 (the offset after the excerpt, as a file source's byte offset
//!   after a line): a processor that stores positions with its state compares them
//!   with `DeliveryContext::already_applied`. After the engine says the excerpts were
//!   processed, its committer stores the next index to read in the named tailer's store
//!   (`<tailers>/<tailer>.tailer`, fsync'd), and a restart (or a `kill -9`) resumes
//!   there: nothing lost, and only what was processed after the last commit is given
//!   again. PAUSE (a full queue) keeps the excerpts not taken and reads nothing more until
//!   they are. Each cycle reads up to `batch` excerpts and hands them to the host in one
//!   boundary crossing. The epoch is made of the journal's identity (written when the
//!   journal is created), so a journal removed and made again at its path is a new epoch
//!   and a consumer's saved position of the old one never skips the new one's excerpts.
//!   A committed index of another journal (the store records the identity), or beyond the
//!   journal's end, is reported with a WARN and reading starts again at 0 in a new epoch.
//!
//!   Settings: `path` (the journal directory, required), `tailer` (the tailer's name,
//!   default: the feed's name), `tailers` (the directory of tailer stores, default
//!   `<path>/tailers`), `batch` (excerpts per duty cycle, default 4096).
//! * **Sink kind `journal`.** Appends each output's payload as one excerpt to the
//!   journal in `path` and syncs the batch (`msync`) before it answers published, with
//!   the excerpt's index as evidence: a journal is also an outbox, its append the
//!   output's admission record. Settings: `path` (required), `segment_bytes` (for new
//!   segments, default 64 MiB).
//!
//! ```toml
//! plugin_dir = "target/plugins"
//!
//! [[feeds]]
//! name = "payments"
//! source = "journal"
//! codec = "line"
//! settings = { path = "data/payments.journal", tailer = "ledger" }
//! ```

use std::path::PathBuf;

use mongoose_core::sink::{Output, Sink, SinkOutcome};
use mongoose_core::{
    AnyCommitter, BatchEnd, CoreError, Epoch, EventSource, PositionValue, SourceCommitter,
    SourceOutput, SourceStart, SourceState, WorkDone,
};
use mongoose_journal::{Appender, ExcerptBatch, Journal, JournalConfig, Tailer, TailerStore};
use mongoose_plugin::settings::{CreateContext, SettingsError};
use mongoose_plugin::PluginOutput;

/// Excerpts one duty cycle publishes at most, unless the `batch` setting says otherwise.
const DEFAULT_BATCH: u64 = 4096;

/// The epoch of the source before it opened its journal.
const FIRST_EPOCH: Epoch = Epoch(1);

/// The epoch of the journal with `identity` read from its beginning or a committed
/// index: positive as a Java long, never 0.
fn identity_epoch(identity: u64) -> Epoch {
    Epoch((identity >> 1).max(1))
}

fn core_error(context: &'static str, error: mongoose_journal::JournalError) -> CoreError {
    CoreError::io(context, std::io::Error::other(error.to_string()))
}

/// Tails a journal and commits a named tailer's index after processing.
#[derive(Debug)]
pub struct JournalSource {
    output: PluginOutput,
    path: PathBuf,
    tailer_name: String,
    tailers: PathBuf,
    batch: u64,
    journal: Option<Journal>,
    tailer: Option<Tailer>,
    /// The excerpts of the current cycle (reused).
    excerpts: ExcerptBatch,
    epoch: Epoch,
    caught_up: bool,
}

/// Checks a source's settings (see the crate docs) without opening anything: run when
/// the server loads its configuration, so a bad value is refused with its key.
pub fn check_source_settings(create: &CreateContext<'_>) -> Result<(), SettingsError> {
    let settings = create
        .flat()
        .map_err(|error| SettingsError::new("", error))?;
    settings
        .only(&["path", "tailer", "tailers", "batch"])
        .map_err(|error| SettingsError::new("", error))?;
    settings
        .path("path")
        .map_err(|error| SettingsError::new("path", error))?;
    if let Some(name) = settings.text("tailer") {
        TailerStore::check_name(name)
            .map_err(|error| SettingsError::new("tailer", error.to_string()))?;
    }
    settings
        .u64("batch")
        .map_err(|error| SettingsError::new("batch", error))?;
    Ok(())
}

/// Checks a sink's settings (see the crate docs) without opening anything.
pub fn check_sink_settings(create: &CreateContext<'_>) -> Result<(), SettingsError> {
    let settings = create
        .flat()
        .map_err(|error| SettingsError::new("", error))?;
    settings
        .only(&["path", "segment_bytes"])
        .map_err(|error| SettingsError::new("", error))?;
    settings
        .path("path")
        .map_err(|error| SettingsError::new("path", error))?;
    if let Some(bytes) = settings
        .u64("segment_bytes")
        .map_err(|error| SettingsError::new("segment_bytes", error))?
    {
        JournalConfig {
            segment_bytes: bytes,
            ..JournalConfig::default()
        }
        .check()
        .map_err(|error| SettingsError::new("segment_bytes", error.to_string()))?;
    }
    Ok(())
}

impl JournalSource {
    /// A source from its settings (see the crate docs).
    pub fn new(create: &CreateContext<'_>, output: PluginOutput) -> Result<JournalSource, String> {
        let settings = create.flat()?;
        settings.only(&["path", "tailer", "tailers", "batch"])?;
        let path = settings.path("path")?;
        let tailer_name = settings
            .text("tailer")
            .map_or_else(|| output.feed().to_owned(), str::to_owned);
        let tailers = settings
            .text("tailers")
            .map_or_else(|| path.join("tailers"), PathBuf::from);
        let batch = settings.u64("batch")?.unwrap_or(DEFAULT_BATCH).max(1);
        Ok(JournalSource {
            output,
            path,
            tailer_name,
            tailers,
            batch,
            journal: None,
            tailer: None,
            excerpts: ExcerptBatch::default(),
            epoch: FIRST_EPOCH,
            caught_up: false,
        })
    }
}

impl JournalSource {
    /// Reconciles the committed index with what the feed's consumers saved with their
    /// state (the saved position is the authority, as for the file source): a committed
    /// index past a consumer's saved position of this epoch (its state was restored from
    /// an older copy, or its outbox was cut) moves back to it, and a consumer whose state
    /// holds nothing of the feed moves it to 0: the excerpts between are read again, and
    /// the consumers that have them skip them. Without a committed index of this
    /// journal (a lost tailer store), reading resumes at the consumers' saved positions
    /// of this epoch instead of the start (which would give every excerpt again).
    fn reconcile(&self, committed: u64, trusted: bool) -> Result<u64, CoreError> {
        use mongoose_core::resume::{resume_knowing, Trust};
        let positions = self.output.consumer_positions();
        let trust = if trusted {
            Trust::Trusted {
                epoch: self.epoch,
                offset: committed,
            }
        } else {
            Trust::Lost
        };
        // every epoch of this connector is a journal's identity (or a deterministic step
        // from it): another epoch is another journal, whose state takes this one whole
        let at = resume_knowing(trust, self.epoch, &positions, |_| true).map_err(|mismatch| CoreError::Source {
            source_name: self.output.feed().to_owned(),
            message: format!(
                "journal {}: the consumer {}'s saved state holds index {} of epoch {}, but this journal is read under epoch {}: that state was not built from this journal, and reading it could apply its excerpts twice. Nothing was read or changed. Restore the tailer store and the consumer's state together from a backup; or, to start over, move the consumer's state away and remove the tailer store in {}",
                self.path.display(),
                mismatch.consumer,
                mismatch.saved_offset,
                mismatch.saved_epoch,
                mismatch.epoch,
                self.tailers.display()
            ),
        })?;
        for note in &at.notes {
            self.output
                .warn(&format!("journal {}: {note}", self.path.display()));
        }
        if trusted && at.offset < committed {
            self.output.warn(&format!(
                "journal {}: tailer '{}' committed index {committed}, but {} is before it (restored from an older copy, or cut?): reading again from {} so nothing is skipped",
                self.path.display(),
                self.tailer_name,
                at.decided_by.as_deref().unwrap_or("a consumer"),
                at.offset
            ));
        } else if !trusted {
            self.output.warn(&format!(
                "journal {}: tailer '{}' has no committed index of this journal; resuming at index {}, the lowest a consumer needs ({}): repeats carry the keys of their first delivery, nothing is skipped",
                self.path.display(),
                self.tailer_name,
                at.offset,
                at.decided_by.as_deref().unwrap_or("no consumer holds any"),
            ));
        }
        Ok(at.offset)
    }
}

impl EventSource for JournalSource {
    fn name(&self) -> &str {
        self.output.feed()
    }

    fn start(&mut self) -> Result<SourceStart, CoreError> {
        let journal = Journal::open(&self.path, JournalConfig::default())
            .map_err(|error| core_error("cannot open the journal", error))?;
        let identity = journal.identity();
        // the journal's identity is part of the epoch: a consumer's saved position of
        // another journal at this path is never taken for one of this journal
        self.epoch = identity_epoch(identity);
        let mut store = match TailerStore::open(&self.tailers, &self.tailer_name) {
            Ok(store) => store,
            Err(mongoose_journal::JournalError::TailerStoreDamaged { path, reason }) => {
                // keep the damaged file for inspection and start a new store: reading
                // resumes at the consumers' saved positions, or at 0 when they hold none
                // (duplicates, never a loss)
                let kept = path.with_extension("tailer.damaged");
                std::fs::rename(&path, &kept).map_err(|error| {
                    CoreError::io(
                        format!("cannot move the damaged tailer store {}", path.display()),
                        error,
                    )
                })?;
                self.output.warn(&format!(
                    "journal {}: the tailer store {} is damaged ({reason}); it is kept as {} and reading resumes at the consumers' saved positions (at 0 if they hold none: duplicates, no loss)",
                    self.path.display(),
                    path.display(),
                    kept.display()
                ));
                TailerStore::open(&self.tailers, &self.tailer_name)
                    .map_err(|error| core_error("cannot open the journal tailer's store", error))?
            }
            Err(error) => return Err(core_error("cannot open the journal tailer's store", error)),
        };
        let mut committed = store.load().unwrap_or(0);
        let mut trusted = store.load().is_some();
        if let Some(other) = store.journal().filter(|&other| other != identity) {
            self.output.warn(&format!(
                "journal {}: tailer '{}' committed index {committed} of another journal                  (identity {other:016x}; this one is {identity:016x}): the journal was made                  again at its path; reading it from index 0 in a new epoch",
                self.path.display(),
                self.tailer_name,
            ));
            committed = 0;
            trusted = false;
        }
        store.bind(identity);
        committed = self.reconcile(committed, trusted)?;
        let mut tailer = journal.tailer();
        let exists = tailer
            .seek(committed)
            .map_err(|error| core_error("cannot seek the journal", error))?;
        if !exists {
            // the committed index is beyond the journal's end: its end was lost
            self.output.warn(&format!(
                "journal {}: tailer '{}' committed index {committed}, but the journal ends at {}: it was replaced or cut; reading it again from index 0 in a new epoch",
                self.path.display(),
                self.tailer_name,
                tailer.index()
            ));
            self.epoch = Epoch(if self.epoch.0 >= u64::MAX >> 1 {
                1
            } else {
                self.epoch.0 + 1
            });
            tailer
                .seek(0)
                .map_err(|error| core_error("cannot seek the journal", error))?;
        }
        self.output
            .report_state(SourceState::Behind, Some("reading the journal"));
        self.journal = Some(journal);
        self.tailer = Some(tailer);
        Ok(SourceStart {
            epoch: self.epoch,
            pause_by_default: true,
            committer: Some(AnyCommitter::new(TailerCommitter {
                store,
                epoch: self.epoch,
                pending: None,
            })),
        })
    }

    fn do_work(&mut self) -> Result<WorkDone, CoreError> {
        let Some(tailer) = self.tailer.as_mut() else {
            return Ok(WorkDone(0));
        };
        let max = usize::try_from(self.batch).unwrap_or(usize::MAX);
        if let Err(error) = tailer.next_batch(max, &mut self.excerpts) {
            // a damaged excerpt: the feed is behind it, never caught up (so never
            // settled), until the driver reports it stalled with this error
            let error = core_error("cannot read the journal", error);
            self.caught_up = false;
            self.output
                .report_state(SourceState::Behind, Some(&error.to_string()));
            return Err(error);
        }
        // a batch that ended early may have ended before a damaged excerpt: then the
        // feed is not caught up (the next cycle fails with the error)
        let blocked = self.excerpts.len() < max && tailer.peek().is_err();
        let (done, paused) = match self.excerpts.first_index() {
            None => (0, false),
            Some(first) => {
                // one boundary crossing for the whole batch: the host pulls excerpts
                // until its feed is full
                let total = self.excerpts.len() as u64;
                let mut pulled = 0u64;
                let mut excerpts = self.excerpts.iter();
                let end = self.output.try_publish_batch(&mut || {
                    let excerpt = excerpts.next()?;
                    pulled += 1;
                    Some((excerpt.bytes(), PositionValue::at(excerpt.index() + 1)))
                });
                let taken = match end {
                    BatchEnd::Exhausted => total,
                    BatchEnd::Paused => pulled,
                    // the position is the offset after the excerpt: index + 1
                    BatchEnd::Returned(_, position, _) => position.offset - 1 - first,
                };
                if taken < total {
                    // PAUSE: what was not taken is read again next cycle
                    tailer
                        .seek(first + taken)
                        .map_err(|error| core_error("cannot seek the journal", error))?;
                }
                (taken, taken < total)
            }
        };
        let caught_up = !paused && !blocked && done < self.batch;
        if caught_up != self.caught_up {
            self.caught_up = caught_up;
            if caught_up {
                self.output.report_state(SourceState::CaughtUp, None);
            } else {
                self.output
                    .report_state(SourceState::Behind, Some("reading the journal"));
            }
        }
        Ok(WorkDone(usize::try_from(done).unwrap_or(usize::MAX)))
    }

    fn stop(&mut self) -> Result<(), CoreError> {
        self.tailer = None;
        self.journal = None;
        Ok(())
    }
}

/// Stores the next index to read after the excerpts before it were processed.
#[derive(Debug)]
struct TailerCommitter {
    store: TailerStore,
    epoch: Epoch,
    pending: Option<u64>,
}

impl SourceCommitter<PositionValue> for TailerCommitter {
    fn acknowledged(&mut self, _sequence: u64, epoch: Epoch, position: PositionValue) {
        if epoch == self.epoch {
            // the position is the offset after the excerpt: the next index to read
            self.pending = Some(position.offset);
        }
    }

    fn commit(&mut self) -> Result<(), CoreError> {
        let Some(next) = self.pending else {
            return Ok(());
        };
        self.store
            .store(next)
            .map_err(|error| core_error("cannot store the journal tailer's index", error))?;
        self.pending = None;
        Ok(())
    }

    fn commits_after_stop(&self) -> bool {
        true
    }
}

/// Appends outputs to a journal.
#[derive(Debug)]
pub struct JournalSink {
    appender: Appender,
    _journal: Journal,
}

impl JournalSink {
    /// Opens the journal of the `path` setting (creating it) and takes its appender.
    pub fn open(create: &CreateContext<'_>) -> Result<JournalSink, String> {
        let settings = create.flat()?;
        settings.only(&["path", "segment_bytes"])?;
        let path = settings.path("path")?;
        let mut config = JournalConfig::default();
        if let Some(bytes) = settings.u64("segment_bytes")? {
            config.segment_bytes = bytes;
        }
        let journal = Journal::open(&path, config).map_err(|error| error.to_string())?;
        let appender = journal.appender().map_err(|error| error.to_string())?;
        Ok(JournalSink {
            appender,
            _journal: journal,
        })
    }
}

impl Sink for JournalSink {
    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
        let mut appended = Vec::with_capacity(outputs.len());
        let mut failed = None;
        for output in outputs {
            match self.appender.append(&output.payload) {
                Ok(index) => appended.push(index),
                Err(error) => {
                    failed = Some(error.to_string());
                    break;
                }
            }
        }
        let synced = if appended.is_empty() {
            Ok(())
        } else {
            self.appender.sync().map_err(|error| error.to_string())
        };
        for (at, _) in outputs.iter().enumerate() {
            outcomes.push(match (appended.get(at), &synced) {
                (Some(index), Ok(())) => SinkOutcome::Published {
                    evidence: format!("journal index {index}"),
                },
                // appended, visible to readers, but not known durable
                (Some(index), Err(error)) => SinkOutcome::Uncertain {
                    evidence: format!("appended at index {index}, the sync failed: {error}"),
                },
                (None, _) => SinkOutcome::NotPublished {
                    evidence: format!(
                        "not appended: {}",
                        failed.as_deref().unwrap_or("an earlier append failed")
                    ),
                    retryable: true,
                },
            });
        }
    }
}

mongoose_plugin::export_plugin! {
    name: "journal",
    version: env!("CARGO_PKG_VERSION"),
    sources: {
        "journal" => JournalSource::new,
    },
    sinks: {
        "journal" => JournalSink::open,
    },
    source_checks: {
        "journal" => check_source_settings,
    },
    sink_checks: {
        "journal" => check_sink_settings,
    },
}
