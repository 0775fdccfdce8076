//! The aggregate processor: each line applied to the [`Aggregate`] at its position,
//! saved with the feed's position in the outbox (one record per delivery: its lines
//! and its outputs), a snapshot every `snapshot_every` records, and the outputs (rule
//! emits, window results, dead letters) written through sinks keyed by position.

use std::path::PathBuf;
use std::sync::Arc;

use mongoose_aggregate::{Aggregate, Aggregator, LinePosition, Outcome};
use mongoose_core::sink::{CommitGate, OutputKey};
use mongoose_core::{
    CompletionKey, Delivery, DeliveryContext, Epoch, PositionValue, Processor, ProcessorError,
    SavedPosition, StartContext,
};
use mongoose_ledger::AlertSink;
use mongoose_outbox::{AdmittedOutput, AdmittedPositionRef, Outbox, OutboxConfig, OutboxOwner};
use mongoose_source_file::Line;
use tracing::{info, warn};

use super::stats::AggregateStats;
use super::store;

const SAVE: CompletionKey = CompletionKey::SAVE;

/// Outcomes of published outputs recorded in one outbox record.
const OUTCOMES_BATCH: usize = 256;

/// Where an output goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// The `sink`: rule emits and window results.
    Outputs,
    /// The `dead_letter` sink: rejected and late lines.
    DeadLetter,
}

/// What the processor is opened with (besides its sinks).
pub struct Opening {
    /// The compiled settings.
    pub aggregator: Aggregator,
    /// The feed.
    pub feed: String,
    /// The state folder (absolute).
    pub state_dir: PathBuf,
    /// Records between snapshots.
    pub snapshot_every: u64,
    /// `group/name`, for logs and metrics.
    pub name: String,
    /// The feed's commit gate for this group (`None`: every record is synced before its
    /// line counts as processed).
    pub gate: Option<Arc<dyn CommitGate>>,
    /// Where `/status` reads the counters.
    pub stats: Arc<AggregateStats>,
    /// The names of the `sink` and the `dead_letter` sink.
    pub sinks: (Option<String>, Option<String>),
}

impl std::fmt::Debug for Opening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opening")
            .field("name", &self.name)
            .field("feed", &self.feed)
            .field("state_dir", &self.state_dir)
            .finish_non_exhaustive()
    }
}

/// The aggregate processor.
pub struct AggregateProcessor {
    feed: String,
    name: String,
    state_dir: PathBuf,
    snapshot_every: u64,
    group_by: usize,
    aggregate: Aggregate,
    outbox: Outbox,
    run: [u8; 16],
    gate: Option<Arc<dyn CommitGate>>,
    outputs: Option<Box<dyn AlertSink>>,
    dead_letter: Option<Box<dyn AlertSink>>,
    /// The names of the sinks of `outputs` and `dead_letter`.
    outputs_sink: Option<String>,
    dead_letter_sink: Option<String>,
    stats: Arc<AggregateStats>,
    /// The lines of the delivery being handled (an outbox record's state).
    record: Vec<u8>,
    /// The last line's position in `record`.
    last: Option<LinePosition>,
    /// The keyed outputs of the delivery being handled, admitted with its record.
    admitted: Vec<AdmittedOutput>,
    /// The outputs of the last line applied, until its sinks took them all. A full sink
    /// makes the processor busy and the line comes again (the state already holds it,
    /// so it is not applied again): the outputs not taken yet are written then, under
    /// the keys they would have had (`base`, with their index).
    unsent: Vec<(Target, String)>,
    unsent_at: Option<LinePosition>,
    /// How many of `unsent` the sinks took.
    written: usize,
    /// Per target, the key of the line's first output (the others' keys are it with
    /// their index).
    base: [Option<OutputKey>; 2],
    records_since_snapshot: u64,
    over: Vec<OutputKey>,
    outcomes: Vec<(OutputKey, mongoose_outbox::Outcome)>,
    /// Positions for lines given outside a delivery (no feed position).
    unpositioned: u64,
    save_failures: mongoose_core::LogEvery,
}

impl std::fmt::Debug for AggregateProcessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AggregateProcessor")
            .field("name", &self.name)
            .field("feed", &self.feed)
            .field("state_dir", &self.state_dir)
            .finish_non_exhaustive()
    }
}

impl AggregateProcessor {
    /// Opens the state folder: the snapshot, the outbox records after it applied again,
    /// and the outputs admitted and not confirmed published written again under their
    /// keys.
    ///
    /// # Errors
    /// A damaged or foreign state, a state of another config, a folder that cannot be
    /// written.
    pub fn open(
        opening: Opening,
        outputs: Option<Box<dyn AlertSink>>,
        dead_letter: Option<Box<dyn AlertSink>>,
    ) -> Result<Self, String> {
        let Opening {
            aggregator,
            feed,
            state_dir,
            snapshot_every,
            name,
            gate,
            stats,
            sinks,
        } = opening;
        std::fs::create_dir_all(&state_dir)
            .map_err(|error| format!("cannot create {}: {error}", state_dir.display()))?;
        let group_by = aggregator.settings().group_by.len();
        let snapshot_path = store::snapshot_path(&state_dir);
        let outbox_dir = store::outbox_path(&state_dir);
        let (mut aggregate, run, snapshot_seq) = match store::read_snapshot(&snapshot_path)? {
            Some(snapshot) => (
                Aggregate::restore(aggregator, snapshot.state)
                    .map_err(|error| format!("{}: {error}", snapshot_path.display()))?,
                snapshot.run,
                snapshot.seq,
            ),
            None => {
                if outbox_dir.exists() {
                    return Err(format!(
                        "the aggregate snapshot {} is missing, but its outbox {} is there: the snapshot was deleted, and the state cannot be rebuilt without it. The aggregate does not start. {}",
                        snapshot_path.display(),
                        outbox_dir.display(),
                        store::recovery(&state_dir)
                    ));
                }
                // a new state folder: its identity is saved before its first record
                let run = store::new_run_id();
                let aggregate = Aggregate::new(aggregator);
                store::write_snapshot(&snapshot_path, run, 0, aggregate.state())
                    .map_err(|error| error.to_string())?;
                (aggregate, run, 0)
            }
        };
        let mut config = OutboxConfig::new(outbox_dir);
        config.owner = OutboxOwner::Is(run);
        config.saved_through = snapshot_seq;
        config.follows_saved = true;
        let mut replayed = 0u64;
        let opened = {
            let aggregate = &mut aggregate;
            let replayed = &mut replayed;
            Outbox::open_with(config, move |seq, admission| {
                if seq <= snapshot_seq {
                    return Ok(());
                }
                if !store::replay_record(aggregate, admission.state) {
                    return Err("it is not an aggregate record".to_owned());
                }
                *replayed += 1;
                Ok(())
            })
        };
        let (outbox, mut recovery) = opened.map_err(|error| {
            format!(
                "{error}. The aggregate does not start. {}",
                store::recovery(&state_dir)
            )
        })?;
        if replayed > 0 {
            info!(processor = %name, records = replayed, "aggregate: the records of the outbox after the snapshot are applied again");
        }
        let mut processor = AggregateProcessor {
            feed,
            name,
            state_dir,
            snapshot_every: snapshot_every.max(1),
            group_by,
            aggregate,
            outbox,
            run,
            gate,
            outputs_sink: outputs.as_ref().and(sinks.0),
            dead_letter_sink: dead_letter.as_ref().and(sinks.1),
            outputs,
            dead_letter,
            stats,
            record: Vec::with_capacity(256),
            last: None,
            admitted: Vec::new(),
            unsent: Vec::new(),
            unsent_at: None,
            written: 0,
            base: [None, None],
            records_since_snapshot: recovery.since_saved.records,
            over: Vec::new(),
            outcomes: Vec::new(),
            unpositioned: 0,
            save_failures: mongoose_core::LogEvery::new(std::time::Duration::from_secs(10)),
        };
        // outputs admitted before a crash and never confirmed published go out again,
        // under their keys (the file sink writes each key once)
        let unsettled = recovery.take_unsettled();
        if !unsettled.is_empty() {
            info!(processor = %processor.name, outputs = unsettled.len(), "aggregate: outputs admitted before the last stop and not confirmed published are published again under their keys");
        }
        for (_, output) in unsettled {
            let sink = match processor.sink_named(&output.sink) {
                Some(sink) => sink,
                None => {
                    return Err(format!(
                        "an output admitted before the last stop is for the sink '{}', which this aggregate no longer writes to: configure it again as sink or dead_letter until it is published",
                        output.sink
                    ))
                }
            };
            republish(sink, output)?;
        }
        describe_metrics();
        if let Some(gate) = &processor.gate {
            let gate = Arc::clone(gate);
            processor
                .outbox
                .on_durable(Box::new(move |seq| gate.complete_through(seq)));
        }
        processor.stats.update(processor.aggregate.state());
        // a start that replayed past a quarter of the bound snapshots before any line,
        // so that a crash loop does not replay the same records again and again
        if processor.records_since_snapshot > processor.snapshot_every / 4 {
            processor.try_snapshot();
        }
        Ok(processor)
    }

    /// The writer of the sink named `name`: the outputs', else the dead letters'.
    fn sink_named(&mut self, name: &str) -> Option<&mut Box<dyn AlertSink>> {
        if self.outputs_sink.as_deref() == Some(name) {
            return self.outputs.as_mut();
        }
        if self.dead_letter_sink.as_deref() == Some(name) {
            return self.dead_letter.as_mut();
        }
        None
    }

    fn on_line(&mut self, line: &Line) -> Result<(), ProcessorError> {
        let mut bytes = line.as_bytes();
        if let Some(stripped) = bytes.strip_suffix(b"\r") {
            bytes = stripped;
        }
        let at = match DeliveryContext::current_position() {
            Some((epoch, position)) => LinePosition { epoch, position },
            None => {
                self.unpositioned += 1;
                LinePosition {
                    epoch: Epoch(u64::MAX),
                    position: PositionValue::at(self.unpositioned),
                }
            }
        };
        if self.unsent_at != Some(at) {
            let outcome = self.aggregate.apply(at, bytes);
            if outcome == Outcome::AlreadyApplied {
                return Ok(()); // a re-delivery: the saved state already holds it
            }
            store::encode_line(&mut self.record, at, bytes);
            self.last = Some(at);
            self.unsent.clear();
            self.written = 0;
            self.base = [None, None];
            self.collect(at, bytes, outcome);
            self.unsent_at = Some(at);
            self.stats.update(self.aggregate.state());
        }
        self.flush_unsent()?;
        self.unsent_at = None;
        if !DeliveryContext::on_complete(SAVE) {
            self.save()?;
        }
        Ok(())
    }

    /// The outputs of a line's outcome, into `unsent`.
    fn collect(&mut self, at: LinePosition, line: &[u8], outcome: Outcome) {
        match outcome {
            Outcome::Applied { emits, closed } => {
                for emit in emits {
                    self.unsent.push((Target::Outputs, emit.text));
                }
                for result in closed {
                    let values: serde_json::Map<String, serde_json::Value> = result
                        .values
                        .iter()
                        .map(|(name, value)| {
                            (
                                name.clone(),
                                value.as_ref().map_or(
                                    serde_json::Value::Null,
                                    mongoose_aggregate::Value::to_json,
                                ),
                            )
                        })
                        .collect();
                    let json = serde_json::json!({
                        "key": result.key,
                        "window_start": mongoose_aggregate::format_time(result.start),
                        "window_end": mongoose_aggregate::format_time(result.end),
                        "values": values,
                    });
                    self.unsent.push((Target::Outputs, json.to_string()));
                }
            }
            Outcome::Rejected(rejection) => {
                metrics::counter!(
                    "mongoose_aggregate_rejected_lines_total",
                    "processor" => self.name.clone(),
                    "reason" => rejection.reason.clone()
                )
                .increment(1);
                let json = serde_json::json!({
                    "processor": self.name,
                    "epoch": at.epoch.0,
                    "position": at.position.to_string(),
                    "rejected": rejection.reason,
                    "message": rejection.message,
                    "line": String::from_utf8_lossy(line),
                });
                self.unsent.push((Target::DeadLetter, json.to_string()));
            }
            Outcome::Late(late) => {
                metrics::counter!("mongoose_aggregate_late_lines_total", "processor" => self.name.clone())
                    .increment(1);
                let json = serde_json::json!({
                    "processor": self.name,
                    "epoch": at.epoch.0,
                    "position": at.position.to_string(),
                    "late": true,
                    "event_time": mongoose_aggregate::format_time(late.event_time),
                    "window_start": mongoose_aggregate::format_time(late.window.0),
                    "window_end": mongoose_aggregate::format_time(late.window.1),
                    "watermark": mongoose_aggregate::format_time(late.watermark),
                    "line": String::from_utf8_lossy(line),
                });
                self.unsent.push((Target::DeadLetter, json.to_string()));
            }
            Outcome::Header | Outcome::AlreadyApplied => {}
        }
    }

    /// Writes the last line's outputs the sinks did not take yet, through each sink's
    /// writer (keyed by the delivery, holding its commit until published, in order). A
    /// retry after a full sink goes on where it stopped: an output after the first of
    /// its sink is given the first's key with its own index, the key it would have had.
    fn flush_unsent(&mut self) -> Result<(), ProcessorError> {
        let mut counts = [0u32; 2];
        // per target: its writer made the keys of this call's outputs from index 0
        let mut fresh = [false; 2];
        for (at, (target, payload)) in self.unsent.iter().enumerate() {
            let slot = *target as usize;
            let index = counts[slot];
            counts[slot] += 1;
            if at < self.written {
                continue;
            }
            let (sink, name) = match target {
                Target::Outputs => (self.outputs.as_mut(), &self.outputs_sink),
                Target::DeadLetter => (self.dead_letter.as_mut(), &self.dead_letter_sink),
            };
            // no dead_letter sink: the line is counted (in /status and /metrics) only
            let Some(sink) = sink else {
                self.written = at + 1;
                continue;
            };
            let written = match (&self.base[slot], index) {
                (Some(base), index) if index > 0 && !fresh[slot] => {
                    let key = OutputKey {
                        index,
                        ..base.clone()
                    };
                    sink.republish(key.clone(), payload.as_bytes().to_vec())
                        .map(|()| Some((key, name.clone().unwrap_or_default())))
                }
                _ => sink.write_line(payload),
            };
            match written {
                Ok(Some((key, sink))) => {
                    if index == 0 {
                        self.base[slot] = Some(key.clone());
                        fresh[slot] = true;
                    }
                    self.admitted.push(AdmittedOutput {
                        sink,
                        key,
                        payload: payload.as_bytes().to_vec(),
                    });
                }
                Ok(None) => {}
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                    return Err(ProcessorError::busy(error.to_string()))
                }
                Err(error) => return Err(ProcessorError::new(error.to_string())),
            }
            self.written = at + 1;
        }
        Ok(())
    }

    /// Admits one record of the delivery's lines, its position and its outputs.
    fn save(&mut self) -> Result<(), ProcessorError> {
        let Some(last) = self.last else {
            return Ok(());
        };
        let failed = |state_dir: &std::path::Path, error: &dyn std::fmt::Display| {
            ProcessorError::new(format!(
                "cannot save the aggregate state in {}: {error}",
                state_dir.display()
            ))
        };
        let position = AdmittedPositionRef {
            feed: &self.feed,
            epoch: last.epoch,
            lane: last.position.lane,
            position: last.position.offset,
        };
        self.outbox
            .admit_gated(
                self.gate.as_deref(),
                &self.record,
                &position,
                &self.admitted,
            )
            .map_err(|error| failed(&self.state_dir, &error))?;
        if self.gate.is_none() {
            self.outbox
                .sync()
                .map_err(|error| failed(&self.state_dir, &error))?;
        }
        self.record.clear();
        self.admitted.clear();
        self.last = None;
        self.records_since_snapshot += 1;
        self.drain_over();
        if self.over.len() >= OUTCOMES_BATCH {
            self.record_over()
                .map_err(|error| failed(&self.state_dir, &error))?;
        }
        if self.records_since_snapshot >= self.snapshot_every {
            self.try_snapshot();
        }
        Ok(())
    }

    fn drain_over(&mut self) {
        if let Some(sink) = &mut self.outputs {
            sink.drain_over(&mut self.over);
        }
        if let Some(sink) = &mut self.dead_letter {
            sink.drain_over(&mut self.over);
        }
    }

    fn record_over(&mut self) -> Result<(), mongoose_outbox::OutboxError> {
        if self.over.is_empty() {
            return Ok(());
        }
        self.outcomes.clear();
        self.outcomes.extend(
            self.over
                .drain(..)
                .map(|key| (key, mongoose_outbox::Outcome::Over)),
        );
        self.outbox.record_outcomes(&self.outcomes)?;
        self.outcomes.clear();
        Ok(())
    }

    fn try_snapshot(&mut self) {
        if let Err(error) = self.snapshot() {
            warn!(processor = %self.name, %error, "aggregate: a snapshot failed; the lines are saved in the outbox and nothing is lost, but a restart replays every record since the last snapshot until one succeeds: free space in the state folder");
        }
    }

    /// Writes the whole state as a snapshot holding every record so far, then lets the
    /// outbox forget the segments before it whose outputs are all over.
    fn snapshot(&mut self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.drain_over();
        self.record_over()?;
        let through = self.outbox.sync()?;
        store::write_snapshot(
            &store::snapshot_path(&self.state_dir),
            self.run,
            through,
            self.aggregate.state(),
        )?;
        self.records_since_snapshot = 0;
        self.outbox.roll();
        if let Err(error) = self.outbox.compact(through) {
            warn!(%error, "aggregate: the outbox segments the snapshot holds could not be removed (a restart reads them, and skips their records): the next snapshot tries again");
        }
        Ok(())
    }

    /// The admin command `state KEY`: the key's aggregates as JSON, or
    /// `{"status": 400|404, "error": ...}` (the `GET .../state` route answers with that
    /// status).
    pub fn state_command(&mut self, args: &[String]) -> Result<String, ProcessorError> {
        let (key, parts) = match super::processor::state_key(args, self.group_by) {
            Ok(parsed) => parsed,
            Err(answer) => return Ok(answer),
        };
        Ok(match self.aggregate.key(&parts) {
            Some(view) => view.to_json().to_string(),
            None => serde_json::json!({"status": 404, "error": format!("no key '{key}' in the aggregate")}).to_string(),
        })
    }
}

/// The HELP lines of the aggregate's metrics, once per process.
fn describe_metrics() {
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(|| {
        metrics::describe_counter!(
            "mongoose_aggregate_rejected_lines_total",
            "Input lines an aggregate processor could not read, by processor and reason (sent to its dead_letter sink when it has one)."
        );
        metrics::describe_counter!(
            "mongoose_aggregate_late_lines_total",
            "Input lines an aggregate processor received after their window closed, by processor (sent to its dead_letter sink when it has one)."
        );
    });
}

/// Publishes an admitted output again, waiting for room in the sink's queue.
fn republish(sink: &mut Box<dyn AlertSink>, output: AdmittedOutput) -> Result<(), String> {
    let AdmittedOutput { key, payload, .. } = output;
    loop {
        match sink.republish(key.clone(), payload.clone()) {
            Ok(()) => return Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(error) => return Err(format!("cannot publish an admitted output again: {error}")),
        }
    }
}

impl Processor for AggregateProcessor {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        let feed = self.feed.clone();
        context.subscribe(&feed, AggregateProcessor::on_line)?;
        context.register_command("state", AggregateProcessor::state_command);
        Ok(())
    }

    fn stop(&mut self) -> Result<(), ProcessorError> {
        for sink in [&mut self.outputs, &mut self.dead_letter]
            .into_iter()
            .flatten()
        {
            sink.stop();
        }
        self.drain_over();
        let recorded = self
            .record_over()
            .and_then(|()| self.outbox.sync().map(|_| ()));
        if let Err(error) = recorded {
            warn!(%error, "aggregate: the outcomes of the published outputs could not be recorded: the next start publishes them again under their keys");
        }
        Ok(())
    }

    fn saved_positions(&self) -> Vec<SavedPosition> {
        let mut saved: Vec<SavedPosition> = self
            .aggregate
            .state()
            .lanes
            .iter()
            .filter(|(_, saved)| saved.epoch != u64::MAX)
            .map(|(lane, saved)| SavedPosition {
                feed: self.feed.clone(),
                saved: Some((
                    Epoch(saved.epoch),
                    PositionValue {
                        lane: *lane,
                        offset: saved.offset,
                    },
                )),
            })
            .collect();
        if saved.is_empty() {
            saved.push(SavedPosition {
                feed: self.feed.clone(),
                saved: None,
            });
        }
        saved
    }

    fn on_delivery_complete(
        &mut self,
        _key: CompletionKey,
        _delivery: &Delivery,
    ) -> Result<(), ProcessorError> {
        if let Err(error) = self.save() {
            if let Some(unlogged) = self.save_failures.due() {
                warn!(%error, unlogged, "aggregate save failed: retried by the group's retry policy (logged at most every 10 s, with a count)");
            }
            return Err(error);
        }
        self.save_failures.reset();
        Ok(())
    }
}

/// The `state KEY` command's key: `(KEY, its group_by values)`, or the 400 answer (a
/// usage error, or a key of another number of values than `group_by` fields).
pub(super) fn state_key(args: &[String], group_by: usize) -> Result<(&str, Vec<&str>), String> {
    let [key] = args else {
        return Err(serde_json::json!({"status": 400, "error": "usage: state KEY (the group_by values, comma-separated)"}).to_string());
    };
    let parts: Vec<&str> = if group_by == 0 {
        Vec::new()
    } else {
        key.split(',').collect()
    };
    if parts.len() != group_by {
        return Err(serde_json::json!({
            "status": 400,
            "error": format!("the key '{key}' has {} value(s), and the aggregate groups by {group_by} field(s): give them comma-separated, in the order of group_by", parts.len()),
        })
        .to_string());
    }
    Ok((key.as_str(), parts))
}
