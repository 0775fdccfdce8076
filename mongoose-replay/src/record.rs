//! RECORD: a [`Recorder`] installed on a processor group writes each covered
//! processor's inputs, timers, failures and stops into the recording's store.
//!
//! * [`hooks`]: what the recorder writes for each event of its group (its
//!   `GroupRecorder` implementation); this file holds the recording's files, its
//!   configuration, and the writing, buffering and closing they share.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mongoose_core::{DeliveryContext, ProcessorId};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::entry::Entry;
use crate::error::ReplayError;
use crate::feeds::FeedCodecs;
use crate::key::StreamKeys;
use crate::replay::AdminReply;
use crate::store::{ReplayStore, SealedFile, StreamHandle};
use crate::tap::{self, RecordTap};

mod hooks;

/// The store file of a recording directory.
pub const RECORDING_FILE: &str = "recording.replay";
/// The journal of a recording directory (items of journalled feeds).
pub const JOURNAL_FILE: &str = "journal.replay";
/// The recorded run's outputs (JSON lines of [`RecordedOutput`]).
pub const OUTPUTS_FILE: &str = "outputs.jsonl";
/// What the recorded run's admin commands answered (JSON lines of
/// [`RecordedAdminReply`]).
pub const ADMIN_REPLIES_FILE: &str = "admin.jsonl";

/// What one admin command of a recorded processor answered live, beside its
/// `AdminInvoked` entry (the store's format has no room for it), so a replay's
/// [`AdminReply`]s can be compared with the live ones.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct RecordedAdminReply {
    /// The stream key of the processor whose command it was.
    pub stream: String,
    /// The command and what it answered.
    #[serde(flatten)]
    pub reply: AdminReply,
}

/// One output a recorded processor sent through an [`crate::OutputSink`].
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct RecordedOutput {
    /// The stream key of the processor that sent it.
    pub stream: String,
    /// The message.
    pub output: String,
}

/// What to record.
#[derive(Clone, Debug, Default)]
pub struct RecordConfig {
    /// The processors recorded, by name (empty: every processor of the group).
    pub processors: HashSet<String>,
    /// The feeds whose items are copied, with their codecs.
    pub feeds: FeedCodecs,
    /// Record each stream's provenance (default true through [`RecordConfig::new`]).
    pub provenance: bool,
    /// Keep up to this many bytes of entries in memory, written when a feed reader's
    /// poll returns (at most one poll's items, 256 by default). 0 (the default): each
    /// entry is written, in one write, as soon as its item is over. See
    /// [`ReplayStore::set_write_buffer`] for what a crash loses.
    pub write_buffer: usize,
}

impl RecordConfig {
    /// Records `processors` (empty: all), copying the items of `feeds`.
    pub fn new<I, S>(processors: I, feeds: FeedCodecs) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RecordConfig {
            processors: processors.into_iter().map(Into::into).collect(),
            feeds,
            provenance: true,
            write_buffer: 0,
        }
    }
}

/// Shared state a [`RecordingHandle`] reads while the group records.
#[derive(Default, Debug)]
struct Shared {
    first_error: Option<String>,
    entries: u64,
    closed: bool,
}

/// Reads how a running [`Recorder`] is doing from any thread.
#[derive(Clone, Debug)]
pub struct RecordingHandle {
    dir: PathBuf,
    shared: Arc<Mutex<Shared>>,
}

impl RecordingHandle {
    /// The recording's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The first write that failed, if any (the recording then ends before it).
    pub fn error(&self) -> Option<String> {
        self.shared.lock().first_error.clone()
    }

    /// Entries written so far.
    pub fn entries(&self) -> u64 {
        self.shared.lock().entries
    }

    /// True once the recorder wrote everything pending because its group closed.
    pub fn closed(&self) -> bool {
        self.shared.lock().closed
    }
}

struct Stream {
    handle: StreamHandle,
    key: String,
}

/// A file beside the store being written: counts its bytes and their CRC-32, so the
/// closing frame seals it without reading it back.
struct SealingWriter {
    file: File,
    length: u64,
    checksum: crc32fast::Hasher,
}

impl SealingWriter {
    fn new(file: File) -> Self {
        SealingWriter {
            file,
            length: 0,
            checksum: crc32fast::Hasher::new(),
        }
    }

    fn seal(&self, name: &str) -> SealedFile {
        SealedFile::from_parts(
            name.to_owned(),
            self.length,
            self.checksum.clone().finalize(),
        )
    }
}

impl Write for SealingWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let written = self.file.write(bytes)?;
        self.length += written as u64;
        self.checksum.update(&bytes[..written]);
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// Writes what `writer` holds and makes it durable.
fn flush_and_sync(writer: &mut BufWriter<SealingWriter>) -> std::io::Result<()> {
    writer.flush()?;
    writer.get_ref().file.sync_data()
}

/// RECORD mode for one processor group: install it with
/// `GroupOptions { recorder: Some(Box::new(recorder)), .. }`.
///
/// Each covered processor's stream (keyed by [`StreamKeys`]: `name`, `name#2`, ...)
/// holds, in order:
///
/// * its inputs: `Inline` (copied through the feed's codec) or `Indexed` (journalled
///   feeds), each with the delivery the processor could read (feed, sequence, epoch,
///   position) and the clock readings it took while handling the input and running
///   the input's completion callbacks (book: guarantees/completion-hooks.md: callbacks belong to the input's entry);
/// * `TimerFired` with its readings; `Stopped` for a stop by request;
/// * `AdminInvoked` for each admin command it ran (between items), with its readings;
///   what the command answered goes beside the recording, in `admin.jsonl`
///   ([`RecordedAdminReply`]). A command that returned an error is recorded the same
///   way (its error is its answer and the processor kept running); one that panicked
///   is a failure of the processor and is recorded as `Failed` instead;
/// * `Failed` where a dispatch failed, a completion callback first failed, an input
///   could not be copied, or a timer or stop failed. A failed input is marked once,
///   whichever of its calls fail, and its ordinary entry is not written (book: guarantees/completion-hooks.md: a
///   retry is a failure, marked and not reproduced).
///
/// An input's entry is written once its item is over (when the group begins the next
/// item or its reader's poll returns), so a callback failing after the dispatch can
/// still replace it with `Failed`.
///
/// When its group closes, the recorder closes the recording: `outputs.jsonl` and
/// `admin.jsonl` are written out and made durable, the journal is closed, and the store
/// gets its closing frame, sealing both sidecars (their lengths and CRC-32s). A recorder
/// whose write failed, whose group died, or whose process was killed leaves no closing
/// frame: its recording reads as incomplete and its replay as partial.
pub struct Recorder {
    store: ReplayStore,
    journal: Option<ReplayStore>,
    journal_streams: HashMap<String, StreamHandle>,
    journalled: HashSet<(String, u64)>,
    outputs: BufWriter<SealingWriter>,
    admin_replies: BufWriter<SealingWriter>,
    config: RecordConfig,
    keys: StreamKeys,
    streams: HashMap<ProcessorId, Stream>,
    /// The stream of the processor stopped last by a request, kept so the control
    /// requests its `stop()` made are written after its `Stopped` entry.
    last_stopped: Option<(ProcessorId, Stream)>,
    /// Entries of the current item, in order, not yet written.
    pending: Vec<(ProcessorId, Entry)>,
    /// Processors whose input of the current item is marked Failed.
    failed: HashSet<ProcessorId>,
    /// A failure was the last thing seen: the item may be held for a retry.
    held: bool,
    unpositioned: HashMap<String, u64>,
    tap: RecordTap,
    shared: Arc<Mutex<Shared>>,
    dir: PathBuf,
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder")
            .field("dir", &self.dir)
            .field("streams", &self.streams.len())
            .finish()
    }
}

impl Recorder {
    /// Creates the recording directory `dir` (or uses it), refusing one whose store
    /// already holds a recording ([`ReplayError::AlreadyHoldsRecording`]).
    pub fn create(dir: impl AsRef<Path>, config: RecordConfig) -> Result<Recorder, ReplayError> {
        let dir = dir.as_ref().to_path_buf();
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ReplayError::Io { path, source }
        };
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let mut store = ReplayStore::open_for_record(dir.join(RECORDING_FILE))?;
        store.set_write_buffer(config.write_buffer)?;
        let journal = if config.feeds.feeds.values().any(|feed| feed.journalled) {
            Some(ReplayStore::open_for_record(dir.join(JOURNAL_FILE))?)
        } else {
            None
        };
        let outputs_path = dir.join(OUTPUTS_FILE);
        let outputs = File::create(&outputs_path).map_err(io(&outputs_path))?;
        let admin_path = dir.join(ADMIN_REPLIES_FILE);
        let admin_replies = File::create(&admin_path).map_err(io(&admin_path))?;
        Ok(Recorder {
            store,
            journal,
            journal_streams: HashMap::new(),
            journalled: HashSet::new(),
            outputs: BufWriter::new(SealingWriter::new(outputs)),
            admin_replies: BufWriter::new(SealingWriter::new(admin_replies)),
            config,
            keys: StreamKeys::new(),
            streams: HashMap::new(),
            last_stopped: None,
            pending: Vec::new(),
            failed: HashSet::new(),
            held: false,
            unpositioned: HashMap::new(),
            tap: RecordTap::default(),
            shared: Arc::default(),
            dir,
        })
    }

    /// A handle to watch the recording from other threads.
    pub fn handle(&self) -> RecordingHandle {
        RecordingHandle {
            dir: self.dir.clone(),
            shared: Arc::clone(&self.shared),
        }
    }

    fn covers(&self, name: &str) -> bool {
        self.config.processors.is_empty() || self.config.processors.contains(name)
    }

    fn fail(&self, error: &ReplayError) {
        let mut shared = self.shared.lock();
        if shared.first_error.is_none() {
            tracing::error!(dir = %self.dir.display(), %error, "RECORD: a write failed; the recording ends before it");
            shared.first_error = Some(error.to_string());
        }
    }

    fn write(&mut self, processor: ProcessorId, entry: &Entry) {
        let Some(stream) = self.streams.get(&processor) else {
            return;
        };
        match self.store.append(stream.handle, entry) {
            Ok(()) => self.shared.lock().entries += 1,
            Err(error) => self.fail(&error),
        }
    }

    /// Writes the pending entries of `only` (or of every processor).
    fn flush_pending(&mut self, only: Option<ProcessorId>) {
        if self.pending.is_empty() {
            return;
        }
        // the vector is moved out and back, so no allocation per item
        let mut pending = std::mem::take(&mut self.pending);
        match only {
            None => {
                for (processor, entry) in &pending {
                    self.write(*processor, entry);
                }
                pending.clear();
                self.drain_outputs();
            }
            Some(only) => {
                for (processor, entry) in pending.iter().filter(|(p, _)| *p == only) {
                    self.write(*processor, entry);
                }
                pending.retain(|(processor, _)| *processor != only);
            }
        }
        self.pending = pending;
    }

    /// Moves the readings and outputs the tap collected; returns the readings of
    /// `processor`.
    fn drain(&mut self, processor: ProcessorId) -> Vec<i64> {
        tap::take_recorded(&mut self.tap);
        let mut readings = Vec::new();
        self.tap.readings.retain(|(owner, reading)| {
            if *owner == processor {
                readings.push(*reading);
                false
            } else {
                true
            }
        });
        // readings of processors not recorded are not kept
        self.tap.readings.clear();
        readings
    }

    fn drain_outputs(&mut self) {
        tap::take_recorded(&mut self.tap);
        if self.tap.outputs.is_empty() {
            return;
        }
        for (processor, output) in std::mem::take(&mut self.tap.outputs) {
            let Some(stream) = self.streams.get(&processor) else {
                continue;
            };
            let line = RecordedOutput {
                stream: stream.key.clone(),
                output,
            };
            let written = serde_json::to_writer(&mut self.outputs, &line)
                .map_err(std::io::Error::from)
                .and_then(|()| self.outputs.write_all(b"\n"));
            if let Err(source) = written {
                self.fail(&ReplayError::Io {
                    path: self.dir.join(OUTPUTS_FILE),
                    source,
                });
            }
        }
    }

    /// Forgets what a processor that is not recorded read and sent, so the tap never
    /// grows with it.
    fn discard(&mut self) {
        tap::take_recorded(&mut self.tap);
        self.tap.readings.clear();
        let streams = &self.streams;
        self.tap
            .outputs
            .retain(|(processor, _)| streams.contains_key(processor));
    }

    /// Marks `processor`'s input of the current item Failed, once (the control
    /// requests it made go with the input: not reproduced).
    fn mark_failed(&mut self, processor: ProcessorId, reason: String) {
        if !self.failed.insert(processor) {
            return;
        }
        self.pending.retain(|(owner, entry)| {
            *owner != processor || !(entry.is_input() || matches!(entry, Entry::ControlCall { .. }))
        });
        self.pending.push((processor, Entry::Failed { reason }));
    }

    fn copy_input(&mut self, feed: &str, item: &dyn Any, clock: Vec<i64>) -> Result<Entry, String> {
        let Some(codec) = self.config.feeds.feeds.get(feed) else {
            return Err(format!(
                "an input of feed '{feed}' could not be copied: the feed is not declared in the recording's FeedCodecs"
            ));
        };
        let delivery = DeliveryContext::current();
        let mut payload = Vec::new();
        (codec.encode)(item, &mut payload)
            .map_err(|error| format!("an input of feed '{feed}' could not be copied: {error}"))?;
        if !codec.journalled {
            return Ok(Entry::Inline {
                payload,
                route: feed.to_owned(),
                delivery,
                clock,
            });
        }
        // journalled: by feed and sequence (a recorder-local number for an item without
        // a position, which has no sequence of its own)
        let sequence = match &delivery {
            Some(delivery) => delivery.sequence(),
            None => {
                let next = self.unpositioned.entry(feed.to_owned()).or_insert(0);
                *next += 1;
                *next | (1 << 63)
            }
        };
        if !self.journalled.contains(&(feed.to_owned(), sequence)) {
            let journal = self.journal.as_mut().ok_or("no journal")?;
            let stream = match self.journal_streams.get(feed) {
                Some(stream) => *stream,
                None => {
                    let stream = journal
                        .begin(&crate::stream_key(feed, 1), None)
                        .map_err(|error| format!("the journal could not be written: {error}"))?;
                    self.journal_streams.insert(feed.to_owned(), stream);
                    stream
                }
            };
            journal
                .append(
                    stream,
                    &Entry::Inline {
                        payload,
                        route: sequence.to_string(),
                        delivery: None,
                        clock: Vec::new(),
                    },
                )
                .map_err(|error| format!("the journal could not be written: {error}"))?;
            self.journalled.insert((feed.to_owned(), sequence));
        }
        Ok(Entry::Indexed {
            feed: feed.to_owned(),
            sequence,
            route: feed.to_owned(),
            delivery,
            clock,
        })
    }

    /// Writes everything pending. On a clean close (`unclean` is `None`) with no write
    /// failed, closes the recording: the sidecars are made durable first, then the
    /// journal is closed, and the store's closing frame, sealing the sidecars, is
    /// written last, so a closing frame vouches for every file beside it. Otherwise the
    /// store is only synced and left without a closing frame: a replay reports it
    /// incomplete.
    fn close_all(&mut self, unclean: Option<&str>) {
        self.flush_pending(None);
        self.drain_outputs();
        if let Err(source) = flush_and_sync(&mut self.outputs) {
            self.fail(&ReplayError::Io {
                path: self.dir.join(OUTPUTS_FILE),
                source,
            });
        }
        if let Err(source) = flush_and_sync(&mut self.admin_replies) {
            self.fail(&ReplayError::Io {
                path: self.dir.join(ADMIN_REPLIES_FILE),
                source,
            });
        }
        let first_error = self.shared.lock().first_error.clone();
        let unclosed = match (unclean, first_error) {
            (Some(reason), _) => Some(reason.to_owned()),
            (None, Some(error)) => Some(format!("a write failed ({error})")),
            (None, None) => None,
        };
        match unclosed {
            None => {
                let sealed = [
                    self.outputs.get_ref().seal(OUTPUTS_FILE),
                    self.admin_replies.get_ref().seal(ADMIN_REPLIES_FILE),
                ];
                let mut result = Ok(());
                if let Some(journal) = self.journal.as_mut() {
                    result = journal.close();
                }
                let result = result.and_then(|()| self.store.close_sealing(&sealed));
                if let Err(error) = result {
                    self.fail(&error);
                }
            }
            Some(reason) => {
                let mut result = self.store.sync();
                if let Some(journal) = self.journal.as_mut() {
                    result = result.and(journal.sync());
                }
                if let Err(error) = result {
                    self.fail(&error);
                }
                tracing::warn!(
                    dir = %self.dir.display(),
                    %reason,
                    "RECORD: the recording is left without its closing frame; a replay reports it incomplete"
                );
            }
        }
        self.shared.lock().closed = true;
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if !self.shared.lock().closed {
            // not closed by its group: the group died (or was never closed), so what
            // it was given last may be missing from the recording
            self.close_all(Some(
                "the recorder was dropped without its group closing (the group died?)",
            ));
        }
    }
}
