//! The smallest Mongoose-rs connector: copy this crate to start one.
//!
//! * Source kind `counter`: publishes the decimal text of `0, 1, ..., limit - 1`; item
//!   `n` is at position `n + 1` (the offset after it, as a file source's byte offset
//!   after a line). Its committer writes the committed position to the `pointer` file
//!   after the items were processed, and a restart resumes there. Settings: `limit`
//!   (default 100), `pointer` (required), `batch` (true: publish with
//!   `try_publish_batch`, one boundary crossing per batch; default false: one
//!   `try_publish` per item).
//! * Sink kind `append`: appends each output's payload and a newline to the file
//!   `path`, syncs it, and answers published with the file's length as evidence.
//!
//! # Example
//!
//! Built into a plugin folder (`cargo xtask plugins --out target/plugins`), a server
//! runs it with:
//!
//! ```toml
//! plugin_dir = "target/plugins"
//!
//! [[feeds]]
//! name = "counted"
//! source = "counter"
//! settings = { limit = 1000, pointer = "/var/lib/mongoose/counter.pointer" }
//!
//! [[sinks]]
//! name = "copy"
//! kind = "append"
//! settings = { path = "/var/lib/mongoose/copy.txt" }
//! ```
//!
//! Test builds (cargo features): `wrong-abi` declares ABI 999, `previous-abi` ABI 3 (a
//! plugin built before the source protocol became types), `wrong-layout` a wrong
//! layout fingerprint (the host must refuse both), `panic-source` makes `do_work`
//! panic and `panic-sink` makes `publish` panic (the host must contain both).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

use mongoose_core::sink::{Output, Sink, SinkOutcome};
use mongoose_core::{
    AnyCommitter, BatchEnd, CoreError, Epoch, EventSource, FileLag, PositionValue, SourceCommitter,
    SourceOutput, SourceStart, SourceState, TryPublish, WorkDone,
};
use mongoose_plugin::settings::Settings;
use mongoose_plugin::PluginOutput;

/// How many items one duty cycle publishes at most.
const BATCH: u64 = 256;

/// Counts from the committed position to `limit`.
#[derive(Debug)]
pub struct Counter {
    output: PluginOutput,
    limit: u64,
    pointer: PathBuf,
    batch: bool,
    next: u64,
    ended: bool,
}

impl Counter {
    /// A counter from its settings.
    pub fn new(settings: &str, output: PluginOutput) -> Result<Counter, String> {
        let settings = Settings::parse(settings)?;
        settings.only(&["limit", "pointer", "batch"])?;
        Ok(Counter {
            output,
            limit: settings.u64("limit")?.unwrap_or(100),
            pointer: settings.path("pointer")?,
            batch: settings.text("batch") == Some("true"),
            next: 0,
            ended: false,
        })
    }
}

impl EventSource for Counter {
    fn name(&self) -> &str {
        self.output.feed()
    }

    fn start(&mut self) -> Result<SourceStart, CoreError> {
        // the committed position is the offset after the last processed item
        self.next = match std::fs::read_to_string(&self.pointer) {
            Ok(text) => text.trim().parse().unwrap_or(0),
            // no pointer (a first run, or it was lost): resume at the least of what the
            // consumers that store positions with their state hold (a state of another
            // epoch, or none, counts as nothing), so nothing is applied twice or skipped
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => self
                .output
                .saved_positions()
                .iter()
                .map(|consumer| match consumer.saved {
                    Some((Epoch(1), position)) => position.offset,
                    _ => 0,
                })
                .min()
                .unwrap_or(0),
            Err(error) => return Err(CoreError::io("cannot read the counter's pointer", error)),
        };
        let output = &self.output;
        let committer = AnyCommitter::new(PointerCommitter {
            path: self.pointer.clone(),
            pending: None,
            output: cfg!(feature = "keep-output").then(|| output.clone()),
        });
        output.report_state(SourceState::Behind, Some("counting"));
        // a many-file source reports its files for the feed's status (at most once per
        // scan); the counter's one "file" is its pointer
        output.report_files(&[FileLag {
            lane: 0,
            path: self.pointer.display().to_string(),
            committed: self.next,
            size: self.limit,
            lag: self.limit.saturating_sub(self.next),
        }]);
        // a plugin's own tracing events reach the server's log (INFO and above, with
        // the feed's name) while the server calls into the source
        tracing::info!(from = self.next, "counter source starting");
        tracing::debug!("not forwarded: below INFO");
        // an event on a thread of the plugin's own (as librdkafka's callbacks are)
        // reaches it too, with the plugin's name
        std::thread::spawn(|| tracing::warn!("counter source: an event from a plugin thread"))
            .join()
            .map_err(|_| CoreError::Source {
                source_name: self.output.feed().to_owned(),
                message: "the template's logging thread panicked".into(),
            })?;
        Ok(SourceStart {
            epoch: Epoch(1),
            pause_by_default: true,
            committer: Some(committer),
        })
    }

    fn do_work(&mut self) -> Result<WorkDone, CoreError> {
        if cfg!(feature = "panic-source") {
            panic!("the template source panics on purpose (feature panic-source)");
        }
        let mut done = 0;
        if self.batch {
            let end = self.limit.min(self.next + BATCH);
            let mut pulled = self.next;
            let ended =
                SourceOutput::<String, PositionValue>::try_publish_batch(&self.output, &mut || {
                    (pulled < end).then(|| {
                        pulled += 1;
                        ((pulled - 1).to_string(), PositionValue::at(pulled))
                    })
                });
            // every item pulled was published, but a returned one (offered again next
            // cycle: `next` stays before it)
            if let BatchEnd::Returned(..) = ended {
                pulled -= 1;
            }
            done = pulled - self.next;
            self.next = pulled;
        }
        while !self.batch && self.next < self.limit && done < BATCH {
            let item = self.next.to_string();
            match self
                .output
                .try_publish(item, PositionValue::at(self.next + 1))
            {
                TryPublish::Published => {
                    self.next += 1;
                    done += 1;
                }
                // keep the item (here: `next` stays) and offer it again next cycle
                TryPublish::Paused(_) | TryPublish::Retry(_) => break,
            }
        }
        if self.next >= self.limit && !self.ended {
            self.ended = true;
            self.output.report_state(SourceState::EndOfStream, None);
        }
        Ok(WorkDone(done as usize))
    }

    fn stop(&mut self) -> Result<(), CoreError> {
        Ok(())
    }
}

/// Writes the committed position to a file (atomically: a temporary file renamed).
#[derive(Debug)]
struct PointerCommitter {
    path: PathBuf,
    pending: Option<u64>,
    /// With the `keep-output` feature: the source's output, kept to log each commit
    /// (a committer may be called after its source was stopped and destroyed: the SDK
    /// keeps the output valid for as long as a clone of it lives).
    output: Option<PluginOutput>,
}

impl SourceCommitter<PositionValue> for PointerCommitter {
    fn acknowledged(&mut self, _sequence: u64, epoch: Epoch, position: PositionValue) {
        if epoch == Epoch(1) {
            self.pending = Some(position.offset);
        }
    }

    fn commit(&mut self) -> Result<(), CoreError> {
        let Some(offset) = self.pending else {
            return Ok(());
        };
        let temporary = self.path.with_extension("tmp");
        let write = || -> std::io::Result<()> {
            let mut file = File::create(&temporary)?;
            file.write_all(offset.to_string().as_bytes())?;
            file.sync_data()?;
            std::fs::rename(&temporary, &self.path)
        };
        write().map_err(|error| CoreError::io("cannot write the counter's pointer", error))?;
        self.pending = None;
        if let Some(output) = &self.output {
            output.info(&format!("counter committed through {offset}"));
        }
        Ok(())
    }

    fn commits_after_stop(&self) -> bool {
        true
    }
}

/// Appends outputs to a file.
#[derive(Debug)]
pub struct Append {
    file: File,
}

impl Append {
    /// Opens (creates) the file of the `path` setting.
    pub fn open(settings: &str) -> Result<Append, String> {
        let settings = Settings::parse(settings)?;
        settings.only(&["path"])?;
        let path = settings.path("path")?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|error| format!("cannot open {}: {error}", path.display()))?;
        Ok(Append { file })
    }
}

impl Sink for Append {
    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
        if cfg!(feature = "panic-sink") {
            panic!("the template sink panics on purpose (feature panic-sink)");
        }
        let mut batch = Vec::new();
        for output in outputs {
            batch.extend_from_slice(&output.payload);
            batch.push(b'\n');
        }
        let written = self
            .file
            .write_all(&batch)
            .and_then(|()| self.file.sync_data())
            .and_then(|()| self.file.metadata());
        for _ in outputs {
            outcomes.push(match &written {
                Ok(metadata) => SinkOutcome::Published {
                    evidence: format!("appended; the file holds {} bytes", metadata.len()),
                },
                // part of the batch may be on disk
                Err(error) => SinkOutcome::Uncertain {
                    evidence: format!("the append failed: {error}"),
                },
            });
        }
    }
}

/// The ABI version declared (a test build declares a wrong one, or the one before the
/// source protocol became types).
const ABI_VERSION: u32 = if cfg!(feature = "wrong-abi") {
    999
} else if cfg!(feature = "previous-abi") {
    3
} else {
    mongoose_plugin::abi::ABI_VERSION
};

/// The layout fingerprint declared (a test build declares a wrong one).
const LAYOUT_FINGERPRINT: u64 = if cfg!(feature = "wrong-layout") {
    mongoose_plugin::abi::LAYOUT_FINGERPRINT ^ 0x5a5a
} else {
    mongoose_plugin::abi::LAYOUT_FINGERPRINT
};

mongoose_plugin::export_plugin! {
    name: "template",
    version: env!("CARGO_PKG_VERSION"),
    sources: {
        "counter" => |settings: &str, output| Counter::new(settings, output),
    },
    sinks: {
        "append" => |settings: &str| Append::open(settings),
    },
    abi_version: ABI_VERSION,
    layout_fingerprint: LAYOUT_FINGERPRINT,
}
