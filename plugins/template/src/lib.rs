//! The smallest Mongoose-rs connector: copy this crate to start one.
//!
//! * Source kind `counter`: publishes the decimal text of `0, 1, ..., limit - 1`; item
//!   `n` is at position `n + 1` (the offset after it). Its committer writes the
//!   committed position to the `pointer` file after the items were processed, and a
//!   restart resumes there. Settings: `limit` (default 100), `pointer` (required).
//! * Sink kind `append`: appends each output's payload and a newline to the file
//!   `path`, syncs it, and answers published with the file's length as evidence.
//!
//! `cargo xtask plugins` builds it into `target/plugins`, the `plugin_dir` of a config
//! whose feed has `source = "counter"` and whose sink has `kind = "append"`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

use mongoose_core::sink::{Output, Sink, SinkOutcome};
use mongoose_core::{
    AnyCommitter, CoreError, Epoch, EventSource, PositionValue, SourceCommitter, SourceOutput,
    SourceStart, SourceState, TryPublish, WorkDone,
};
use mongoose_plugin::settings::CreateContext;
use mongoose_plugin::PluginOutput;
use serde::Deserialize;

/// The counter's settings, parsed by the SDK ([`CreateContext::settings`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CounterSettings {
    limit: Option<u64>,
    pointer: PathBuf,
}

/// Counts from the committed position to `limit`.
#[derive(Debug)]
pub struct Counter {
    output: PluginOutput,
    limit: u64,
    pointer: PathBuf,
    next: u64,
}

impl Counter {
    /// A counter from its settings.
    pub fn new(create: &CreateContext<'_>, output: PluginOutput) -> Result<Counter, String> {
        let settings: CounterSettings = create.settings()?;
        let (limit, pointer) = (settings.limit.unwrap_or(100), create.path(settings.pointer));
        Ok(Counter {
            output,
            limit,
            pointer,
            next: 0,
        })
    }
}

impl EventSource for Counter {
    fn name(&self) -> &str {
        self.output.feed()
    }

    fn start(&mut self) -> Result<SourceStart, CoreError> {
        // resume after the last processed item (its offset is in the pointer)
        self.next = match std::fs::read_to_string(&self.pointer) {
            Ok(text) => text.trim().parse().unwrap_or(0),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => 0,
            Err(error) => return Err(CoreError::io("cannot read the counter's pointer", error)),
        };
        self.output
            .report_state(SourceState::Behind, Some("counting"));
        let committer = PointerCommitter {
            path: self.pointer.clone(),
            pending: None,
        };
        Ok(SourceStart {
            epoch: Epoch(1),
            pause_by_default: true,
            committer: Some(AnyCommitter::new(committer)),
        })
    }

    fn do_work(&mut self) -> Result<WorkDone, CoreError> {
        let from = self.next;
        while self.next < self.limit && self.next - from < 256 {
            let item = self.next.to_string();
            match self
                .output
                .try_publish(item, PositionValue::at(self.next + 1))
            {
                TryPublish::Published => self.next += 1,
                // keep the item (here: `next` stays) and offer it again next cycle
                TryPublish::Paused(_) | TryPublish::Retry(_) => break,
            }
        }
        if self.next >= self.limit {
            // a bounded source ended: nothing more will ever be published
            self.output.report_state(SourceState::EndOfStream, None);
        }
        Ok(WorkDone((self.next - from) as usize))
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
        std::fs::write(&temporary, offset.to_string())
            .and_then(|()| File::open(&temporary)?.sync_all())
            .and_then(|()| std::fs::rename(&temporary, &self.path))
            .map_err(|error| CoreError::io("cannot write the counter's pointer", error))?;
        self.pending = None;
        Ok(())
    }
}

/// The append sink's settings.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AppendSettings {
    path: PathBuf,
}

/// Appends outputs to a file.
#[derive(Debug)]
pub struct Append {
    file: File,
}

impl Append {
    /// Opens (creates) the file of the `path` setting.
    pub fn open(create: &CreateContext<'_>) -> Result<Append, String> {
        let path = create.path(create.settings::<AppendSettings>()?.path);
        let file = OpenOptions::new().create(true).append(true).open(&path);
        let file = file.map_err(|error| format!("cannot open {}: {error}", path.display()))?;
        Ok(Append { file })
    }
}

impl Sink for Append {
    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
        let mut batch = Vec::new();
        for output in outputs {
            batch.extend_from_slice(&output.payload);
            batch.push(b'\n');
        }
        let written = self
            .file
            .write_all(&batch)
            .and_then(|()| self.file.sync_data());
        let length = written.and_then(|()| self.file.metadata());
        for _ in outputs {
            outcomes.push(match &length {
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

mongoose_plugin::export_plugin! {
    name: "template",
    version: env!("CARGO_PKG_VERSION"),
    sources: { "counter" => Counter::new },
    sinks: { "append" => Append::open },
}
