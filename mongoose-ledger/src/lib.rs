//! The ledger: the reference's kill-test application made real, and a model of a
//! stateful processor that survives `kill -9` with every line applied exactly once.
//!
//! Input lines are `account,amount` (account `[A-Za-z0-9_-]{1,64}`, amount a signed
//! 64-bit integer). For each line the ledger:
//!
//! 1. skips it if its saved state already contains it ([`Delivery::already_applied`]
//!    against the `(epoch, position)` saved with the state), before any change;
//! 2. applies it, or appends a malformed line with its position and reason to
//!    `rejected.log` (counted in its state and in `/metrics` as
//!    `mongoose_ledger_rejected_lines_total`);
//! 3. writes `position,account,balance` as an alert when the account's balance is
//!    negative after the line: to an alerts sink ([`SinkAlerts`]: its own file, or a server's
//!    configured sink), keyed by the line, holding the line's commit until the alert is
//!    published;
//! 4. asks for the delivery-complete hook, which admits one checksummed record (the
//!    account's new balance, the counts, the feed's `(epoch, position)` and the
//!    delivery's alerts) into its outbox (`mongoose-outbox`), fsync'd in groups when a
//!    commit gate holds the line until the record is durable, else synced at once.
//!    Every `compact_every` records, `snapshot_bytes` of records or
//!    `snapshot_every_secs` seconds the whole state is written as a checksummed
//!    snapshot (temp file, fsync, rename, fsync dir) and the outbox compacted. As the
//!    alerts sink reports each alert over, its outcome is recorded in the outbox in
//!    batches, so a crash leaves only the alerts in flight to publish again, and a
//!    restart publishes them under backpressure (it waits for room in the sink's
//!    queue, never fails for it): a crash loop never wedges the ledger.
//!
//! # Identity
//!
//! A new state folder gets a run id, saved in its first snapshot before any record;
//! every outbox segment carries it. Opening refuses, naming the file and what to do
//! (nothing on disk changed): an outbox segment of another ledger or another run, an
//! outbox that ends before what the snapshot holds (segments deleted, an older copy),
//! records the outbox reported durable and that are gone (a cut tail: their lines may
//! be committed), and an outbox without its snapshot (deleted). A state folder of
//! another input put in place whole is refused by the file feed (the pointer is past
//! lines of an epoch the state does not hold).
//!
//! The state is never applied twice and the source's pointer is never ahead of the
//! durable state, so no line is skipped; an alert admitted with its line's record and
//! not confirmed published at a crash is published again at the next start under its
//! key, and the file sink writes each key once.
//!
//! # Torn writes and damage
//!
//! A crash can only cut the record being written short: the journal then ends with a
//! part of a record and no newline, and that record's line was never committed (the
//! pointer moves only after the record is saved). The next start cuts that part off
//! and the line is read again. Anything else that fails its checksum (a record with
//! whole records after it, a whole last record, a snapshot) was changed after it was
//! written: cutting it off would drop lines the pointer may already be past, so the
//! ledger refuses to start, leaves its files as they are, and its error names the
//! file, the record and its byte offset, and the way to recover ([`LedgerState::load`]).
//!
//! Its admin command `balance ACCOUNT` answers with the account's balance in memory
//! (`POST /processors/{group}/{name}/commands/balance` with `{"args": ["ACCOUNT"]}`): it
//! runs on the group's thread between lines, so it reads a balance every line before it
//! is applied to (`mongoose_control::admin`).
//!
//! This crate is an application of Mongoose-rs, not a part of the server: it knows
//! the processor API (core, control's admin commands, the file source's [`Line`]) and
//! nothing of the server. The `mongoose` binary registers it as the processor kind
//! `ledger` (`mongoose/src/kinds.rs`: the server's feeds and sinks are
//! checked there, the rest by [`LedgerSettings::check`]), and the example
//! `cargo run -p mongoose --example ledger` builds its server as values.
//!
//! # On a Kafka feed shared by several servers
//!
//! [`PartitionedLedger`] keeps the same balances per input partition in a changelog
//! topic (a [`mongoose_core::state_store::PartitionStateStore`]: the Kafka connector's
//! `mongoose_kafka::changelog::Changelog`) instead of `state_dir`: each line's change is
//! acknowledged by the broker before the line's offset is committed, and the member
//! that takes a partition over restores it (fenced by its marker) and skips the lines
//! the restored state already holds. The server picks it for a Kafka feed
//! ([`LedgerSettings::state`]).
//!
//! # Example
//!
//! Opening a ledger on a state folder, as the server's `ledger` kind does (the server
//! then adds it to a processor group, which subscribes it to its feed):
//!
//! ```
//! use mongoose_ledger::{Ledger, LedgerSettings};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let settings = LedgerSettings::new(dir.path().join("state"), dir.path().join("alerts.txt"));
//! let alerts = Ledger::open_alerts_file(&dir.path().join("alerts.txt"))?;
//! // no commit gate: each record is synced before its line counts as processed
//! let ledger = Ledger::open(settings, Box::new(alerts), None)?;
//! assert_eq!(ledger.state().applied, 0);
//! # Ok(()) }
//! ```
//!
//! The crate root holds the processor and its settings; `state` the durable state and
//! its load and atomic save; `journal` the checksummed snapshot and journal record
//! formats and the damage checks; `partitioned` the ledger with its state in a
//! changelog.
#![forbid(unsafe_code)]

mod journal;
mod partitioned;
mod state;
#[cfg(test)]
mod tests;

pub use partitioned::{partition_state, PartitionedLedger};
pub use state::{LanePosition, LedgerState};

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mongoose_core::sink::CommitGate;
use mongoose_core::sink::{OutputKey, RetryBudget};
use mongoose_outbox::{
    AdmissionRef, AdmittedOutput, AdmittedOutputRef, AdmittedPositionRef, Outbox, OutboxConfig,
    OutboxOwner, Outcome,
};
use mongoose_sink::{
    FileSink, FileSinkConfig, GateId, GateSource, RunnerConfig, SinkHandle, SinkRunner, SinkWriter,
};

use journal::JournalRecord;

use mongoose_core::{
    CompletionKey, Delivery, DeliveryContext, Epoch, PositionValue, Processor, ProcessorError,
    SavedPosition, StartContext,
};
use mongoose_source_file::Line;
use serde::Deserialize;
use tracing::{info, warn};

/// The ledger's settings (`[groups.processors.settings]` in the config).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerSettings {
    /// The feed of `account,amount` lines (default `lines`).
    #[serde(default = "default_feed")]
    pub feed: String,
    /// Where the state and `rejected.log` live.
    pub state_dir: PathBuf,
    /// The alerts file (or give `alerts_sink`).
    #[serde(default)]
    pub alerts: Option<PathBuf>,
    /// A configured `[[sinks]]` entry to write alerts to, instead of `alerts`.
    #[serde(default)]
    pub alerts_sink: Option<String>,
    /// Skip re-delivered lines by the saved position (default true; false shows what a
    /// crash does without the consumer-side offset).
    #[serde(default = "yes")]
    pub guard: bool,
    /// fsync each journal record and snapshot (default true; without it a process
    /// crash still loses nothing, only a power loss can).
    #[serde(default = "yes")]
    pub sync: bool,
    /// Journal records between two snapshots (default 100,000).
    #[serde(default = "default_compact_every")]
    pub compact_every: u64,
    /// A snapshot is also taken once the records since the last one hold this many
    /// bytes (default 64 MiB) ...
    #[serde(default = "default_snapshot_bytes")]
    pub snapshot_bytes: u64,
    /// ... or once the last one is this many seconds old (default 30), so a restart
    /// replays a bounded outbox.
    #[serde(default = "default_snapshot_every_secs")]
    pub snapshot_every_secs: u64,
    /// With `sync` and a commit gate (a server gives one): fsync the records in
    /// groups (default true): every `group_records` records or `group_micros`
    /// microseconds, whichever comes first, and the feed commits a line only once its
    /// record is durable. False, or without a gate: one fsync per line, before the
    /// line counts as processed.
    #[serde(default = "yes")]
    pub group_commit: bool,
    /// Records per fsync group (default 1,024).
    #[serde(default = "default_group_records")]
    pub group_records: usize,
    /// The longest a record waits for its group's fsync, in microseconds (default
    /// 2,000).
    #[serde(default = "default_group_micros")]
    pub group_micros: u64,
    /// Where the state lives: `local` (in `state_dir`), `changelog` (per partition in
    /// a Kafka changelog topic: [`PartitionedLedger`]), or `auto` (the default: the
    /// server picks `changelog` when the feed is a Kafka feed, else `local`).
    #[serde(default)]
    pub state: StateMode,
    /// The changelog topic with `state = "changelog"` (default
    /// `<consumer group>-<processor>-changelog`).
    #[serde(default)]
    pub changelog_topic: Option<String>,
}

/// Where a ledger keeps its state ([`LedgerSettings::state`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateMode {
    /// `changelog` on a Kafka feed, else `local`.
    #[default]
    Auto,
    /// A snapshot and an outbox in `state_dir`.
    Local,
    /// Per partition in a changelog topic, following the partition across the members
    /// of a consumer group.
    Changelog,
}

fn default_group_records() -> usize {
    1024
}

fn default_group_micros() -> u64 {
    2000
}

fn default_snapshot_bytes() -> u64 {
    64 << 20
}

fn default_snapshot_every_secs() -> u64 {
    30
}

fn default_compact_every() -> u64 {
    100_000
}

fn default_feed() -> String {
    "lines".to_owned()
}

fn yes() -> bool {
    true
}

/// Why a line is not applied.
fn parse_line(line: &str) -> Result<(&str, i64), &'static str> {
    let (account, amount) = line.split_once(',').ok_or("expected account,amount")?;
    let valid_account = !account.is_empty()
        && account.len() <= 64
        && account
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-');
    if !valid_account {
        return Err("the account must be 1 to 64 of A-Z a-z 0-9 _ -");
    }
    let amount = amount
        .trim_end()
        .parse::<i64>()
        .map_err(|_| "the amount is not a signed 64-bit integer")?;
    Ok((account, amount))
}

const SAVE: CompletionKey = CompletionKey::SAVE;

/// The commit gate a ledger holds, if any.
struct Gate(Option<Arc<dyn CommitGate>>);

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Gate(held)"
        } else {
            "Gate(none)"
        })
    }
}

/// The ledger processor.
#[derive(Debug)]
pub struct Ledger {
    settings: LedgerSettings,
    state: LedgerState,
    alerts: Box<dyn AlertSink>,
    rejected: File,
    /// Where each delivery's record is admitted, fsync'd in groups.
    outbox: Outbox,
    /// Holds the feed's commit of a line until its record is durable (`None`: each
    /// record is synced before the line counts as processed).
    gate: Gate,
    /// Records since the last snapshot.
    journal_records: u64,
    /// Bytes of the records since the last snapshot.
    journal_bytes: u64,
    /// When the last snapshot was taken (or the ledger opened).
    snapshot_at: std::time::Instant,
    /// The keyed alerts of the delivery being handled, admitted with its record.
    outputs: Vec<AdmittedOutput>,
    /// The keys of admitted alerts the sink says are over, not yet recorded in the
    /// outbox (recorded in batches, so the unsettled set stays bounded).
    over: Vec<OutputKey>,
    /// The outcomes record being built (kept for its capacity).
    outcomes: Vec<(OutputKey, Outcome)>,
    /// The accounts changed since the last save that succeeded.
    changed: std::collections::BTreeSet<String>,
    /// The lane of the last delivery: its position goes in the next record.
    lane: u32,
    /// The lanes whose position changed since the last save that succeeded.
    changed_lanes: std::collections::BTreeSet<u32>,
    /// The save failures' warning: once, then a count at most every 10 s (a full disk
    /// failed every save, thousands a second).
    save_failures: mongoose_core::LogEvery,
}

impl Ledger {
    /// Opens the ledger: restores the saved state (the snapshot, then the records of
    /// its outbox after it), opens the rejected file for appending; alerts go to
    /// `alerts` (a file from [`Ledger::open_alerts_file`], or a server's sink). With a
    /// commit `gate` (the feed's processing checkpoint for the ledger's group) and
    /// `group_commit`, records are fsync'd in groups and the gate holds each line's
    /// commit until its record is durable; without one, each record is synced before
    /// its line counts as processed.
    pub fn open(
        settings: LedgerSettings,
        alerts: Box<dyn AlertSink>,
        gate: Option<Arc<dyn CommitGate>>,
    ) -> Result<Self, ProcessorError> {
        std::fs::create_dir_all(&settings.state_dir).map_err(|error| {
            ProcessorError::new(format!(
                "cannot create {}: {error}",
                settings.state_dir.display()
            ))
        })?;
        let state_dir = settings.state_dir.clone();
        let snapshot_path = LedgerState::path(&state_dir);
        let outbox_dir = LedgerState::outbox_path(&state_dir);
        let had_snapshot = snapshot_path.exists();
        let (mut state, journal_end) = LedgerState::load_with_journal_end(&state_dir)?;
        let journal_path = LedgerState::journal_path(&state_dir);
        let cannot = |what: &str, path: &Path, error: std::io::Error| {
            ProcessorError::new(format!("cannot {what} {}: {error}", path.display()))
        };
        // the state's identity: the snapshot names its run; every outbox segment
        // carries it (their owner), so another ledger's or another run's outbox is
        // refused, never applied (DESIGN invariant 6)
        let owner = if had_snapshot {
            if state.run.is_empty() {
                // a state of an earlier build: it takes the outbox's owner (or a new
                // one), saved in a snapshot below
                OutboxOwner::AdoptOr(state::new_run_id())
            } else {
                let Some(id) = state::parse_run(&state.run) else {
                    return Err(ProcessorError::new(format!(
                        "the ledger snapshot {} names run '{}', which is not 32 hex digits: it was edited or damaged. The ledger does not start, and leaves its files as they are. {}",
                        snapshot_path.display(),
                        state.run,
                        state::recovery(&state_dir)
                    )));
                };
                OutboxOwner::Is(id)
            }
        } else if has_segments(&outbox_dir) {
            // no snapshot beside an outbox: this build writes its snapshot before its
            // first outbox record, so the snapshot was deleted; only an outbox of an
            // earlier build that still starts at its first record can rebuild the state
            let found =
                mongoose_outbox::read_with(&outbox_dir, &mut |_, _| Ok(())).map_err(|error| {
                    ProcessorError::new(format!(
                        "{error}. The ledger does not start. {}",
                        state::recovery(&state_dir)
                    ))
                })?;
            if found.owner.is_some() || found.first_seq > 1 {
                return Err(ProcessorError::new(format!(
                    "the ledger snapshot {} is missing, but its outbox {} holds records (from record {} on{}): the snapshot was deleted, and the state cannot be rebuilt without it{}. The ledger does not start, and leaves its files as they are. Put back the snapshot {} from a backup taken with the rest of the state folder; or {}",
                    snapshot_path.display(),
                    outbox_dir.display(),
                    found.first_seq,
                    if found.owner.is_some() { ", written by a build that writes its snapshot before its first record" } else { "" },
                    if found.first_seq > 1 { format!(" (the records before {} were compacted into it)", found.first_seq) } else { String::new() },
                    snapshot_path.display(),
                    state::recovery_start_over(&state_dir)
                )));
            }
            OutboxOwner::AdoptOr(state::new_run_id())
        } else {
            // a new state folder: its identity is saved before its first record
            let id = state::new_run_id();
            state.run = state::run_hex(&id);
            state
                .save(&state_dir, settings.sync)
                .map_err(|error| cannot("save the state in", &state_dir, error))?;
            OutboxOwner::Is(id)
        };
        let mut config = OutboxConfig::new(outbox_dir);
        config.sync = settings.sync;
        config.group_records = settings.group_records.max(1);
        config.group_micros = settings.group_micros;
        config.owner = owner;
        config.saved_through = state.outbox_seq;
        // each record after the snapshot is applied as the outbox reads it, borrowed
        // from the segment (a restart after a million records is quick)
        let mut applied = 0u64;
        let opened = {
            let state = &mut state;
            let applied = &mut applied;
            Outbox::open_with(config, move |seq, admission| {
                if seq <= state.outbox_seq {
                    return Ok(());
                }
                let record = JournalRecord::decode(admission.state)
                    .ok_or_else(|| "it is not a ledger journal record".to_owned())?;
                record.apply(state);
                state.outbox_seq = seq;
                *applied += 1;
                Ok(())
            })
        };
        let (mut outbox, mut recovery) = opened.map_err(|error| {
            ProcessorError::new(format!(
                "{error}. The ledger does not start. {}",
                state::recovery(&settings.state_dir)
            ))
        })?;
        if applied > 0 {
            info!(
                records = applied,
                "ledger: the records of the outbox after the snapshot are applied"
            );
        }
        let adopted = state.run.is_empty();
        if adopted {
            state.run = state::run_hex(&outbox.owner());
        }
        // a journal of an earlier build (one fsync per record): its records are in the
        // state now; a snapshot takes them in, and the journal goes
        let legacy = std::fs::metadata(&journal_path).map_or(0, |meta| meta.len());
        if legacy > 0 || adopted {
            if legacy > journal_end {
                warn!(journal = %journal_path.display(), at = journal_end, torn_bytes = legacy - journal_end, "the ledger journal ends with a torn record (a crash cut its write short; its line was not committed and is read again): it is cut off");
            }
            outbox
                .sync()
                .map_err(|error| ProcessorError::new(error.to_string()))?;
            state.outbox_seq = outbox.last_seq();
            state
                .save(&settings.state_dir, settings.sync)
                .map_err(|error| cannot("save the state in", &settings.state_dir, error))?;
            if legacy > 0 {
                std::fs::remove_file(&journal_path)
                    .map_err(|error| cannot("remove", &journal_path, error))?;
                info!(journal = %journal_path.display(), "ledger: the journal of an earlier build is taken into a snapshot; records go to the outbox now");
            }
        }
        // alerts admitted before a crash and never confirmed published go out again,
        // under their keys (a sink that de-duplicates writes each once); a full queue
        // is waited out, never a failure (DESIGN invariant 7): the sink's thread drains
        // it, and each outcome is recorded as it is published
        let mut alerts = alerts;
        let unsettled = recovery.take_unsettled();
        if !unsettled.is_empty() {
            info!(alerts = unsettled.len(), "ledger: alerts admitted before the last stop and not confirmed published are published again under their keys");
        }
        let mut waited_since: Option<std::time::Instant> = None;
        for (_, output) in unsettled {
            let AdmittedOutput { key, payload, .. } = output;
            loop {
                match alerts.republish(key.clone(), payload.clone()) {
                    Ok(()) => break,
                    Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                        let since = waited_since.get_or_insert_with(std::time::Instant::now);
                        if since.elapsed() >= std::time::Duration::from_secs(10) {
                            info!("ledger: the alerts sink's queue is full; waiting for it to take the alerts to publish again");
                            *since = std::time::Instant::now();
                        }
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    Err(error) => {
                        return Err(ProcessorError::new(format!(
                            "cannot publish an admitted alert again: {error}"
                        )))
                    }
                }
            }
        }
        let gate = gate.filter(|_| settings.group_commit);
        if let Some(gate) = &gate {
            let gate = Arc::clone(gate);
            outbox.on_durable(Box::new(move |seq| gate.complete_through(seq)));
        }
        let rejected = open_rejected_log(&settings.state_dir)?;
        Ok(Ledger {
            settings,
            state,
            rejected,
            alerts,
            outbox,
            gate: Gate(gate),
            journal_records: 0,
            journal_bytes: 0,
            snapshot_at: std::time::Instant::now(),
            outputs: Vec::new(),
            over: Vec::new(),
            outcomes: Vec::new(),
            changed: std::collections::BTreeSet::new(),
            lane: 0,
            changed_lanes: std::collections::BTreeSet::new(),
            save_failures: mongoose_core::LogEvery::new(std::time::Duration::from_secs(10)),
        })
    }

    /// Opens (creating) the alerts file `path` for appending.
    pub fn open_alerts_file(path: &Path) -> std::io::Result<File> {
        OpenOptions::new().create(true).append(true).open(path)
    }

    /// The state in memory.
    pub fn state(&self) -> &LedgerState {
        &self.state
    }

    fn on_line(&mut self, line: &Line) -> Result<(), ProcessorError> {
        let delivery = DeliveryContext::current();
        if self.settings.guard {
            if let Some(delivery) = &delivery {
                // one saved position per lane (per file of a glob feed)
                let lane = delivery.lane();
                if let Some(saved) = self.state.position_of(lane) {
                    if delivery.already_applied(Epoch(saved.epoch), (lane, saved.position)) {
                        return Ok(()); // a re-delivery: the saved state already holds it
                    }
                }
            }
        }
        // `offset`, or `lane:offset` on a lane other than 0
        let position = delivery.as_ref().map_or_else(
            || "0".to_owned(),
            |delivery| delivery.position().to_string(),
        );
        let outcome = apply_line(
            &mut self.state,
            &mut self.rejected,
            self.alerts.as_mut(),
            &position,
            line,
        )?;
        if let Applied::Account { account, alert, .. } = outcome {
            if let Some(AlertWritten {
                key: Some((key, sink)),
                payload,
            }) = alert
            {
                // admitted with the state: published again after a crash if it was
                // not confirmed
                self.outputs.push(AdmittedOutput { sink, key, payload });
            }
            self.changed.insert(account);
        }
        if !DeliveryContext::on_complete(SAVE) {
            // no source position (not a positioned feed): save at once
            self.save()?;
        }
        Ok(())
    }

    /// Appends one record of what the delivery changed; compacts into a snapshot every
    /// `compact_every` records.
    fn save(&mut self) -> Result<(), ProcessorError> {
        // the changed account is forgotten only once its record is written: a failed
        // save is retried with it
        let mut changed = self.changed.iter().map(|account| {
            let balance = self.state.balances.get(account).copied().unwrap_or(0);
            (account.clone(), balance)
        });
        let account = changed.next();
        let saved = self.state.stored_position(self.lane);
        let record = JournalRecord {
            account,
            unsaved: changed.collect(),
            applied: self.state.applied,
            rejected: self.state.rejected,
            lane: self.lane,
            epoch: saved.epoch,
            position: saved.position,
            unsaved_lanes: self
                .changed_lanes
                .iter()
                .filter(|lane| **lane != self.lane)
                .map(|lane| {
                    let saved = self.state.stored_position(*lane);
                    (*lane, saved.epoch, saved.position)
                })
                .collect(),
        };
        let state_dir = self.settings.state_dir.clone();
        let failed = move |error: &dyn std::fmt::Display| {
            ProcessorError::new(format!(
                "cannot save the ledger state in {}: {error}",
                state_dir.display()
            ))
        };
        let encoded = record.encode();
        let saved = self.state.stored_position(self.lane);
        let position = AdmittedPositionRef {
            feed: &self.settings.feed,
            epoch: Epoch(saved.epoch),
            lane: self.lane,
            position: saved.position,
        };
        // the tag is the record's sequence, registered before the record can become
        // durable (one writer: the next sequence is the one after the last)
        let tag = self.outbox.last_seq() + 1;
        if let Some(gate) = &self.gate.0 {
            gate.pending(tag);
        }
        let outputs: Vec<AdmittedOutputRef<'_>> = self
            .outputs
            .iter()
            .map(|output| AdmittedOutputRef {
                sink: &output.sink,
                key: &output.key,
                payload: &output.payload,
            })
            .collect();
        let admitted = self.outbox.admit_ref(&AdmissionRef {
            state: &encoded,
            positions: std::slice::from_ref(&position),
            outputs: &outputs,
        });
        drop(outputs);
        let seq = match admitted {
            Ok(seq) => seq,
            Err(error) => {
                // not admitted: nothing to wait for; the retry admits it again
                if let Some(gate) = &self.gate.0 {
                    gate.complete(tag);
                }
                return Err(failed(&error));
            }
        };
        debug_assert_eq!(seq, tag, "the outbox has one writer");
        self.state.outbox_seq = seq;
        if self.gate.0.is_none() {
            // no gate holds the commit: durable before the line counts as processed
            self.outbox.sync().map_err(|error| failed(&error))?;
        }
        self.changed.clear();
        self.changed_lanes.clear();
        self.outputs.clear();
        self.journal_records += 1;
        self.journal_bytes += encoded.len() as u64;
        // the alerts the sink says are over: their outcomes become durable in batches
        // as they are published, so a crash leaves at most the alerts in flight
        // unsettled (never everything since the last snapshot)
        self.alerts.drain_over(&mut self.over);
        if self.over.len() >= OUTCOMES_BATCH {
            self.record_over().map_err(|error| failed(&error))?;
        }
        let due = self.journal_records >= self.settings.compact_every.max(1)
            || self.journal_bytes >= self.settings.snapshot_bytes.max(1)
            || self.snapshot_at.elapsed()
                >= std::time::Duration::from_secs(self.settings.snapshot_every_secs.max(1));
        if due {
            self.snapshot().map_err(|error| failed(&error))?;
        }
        Ok(())
    }

    /// Records the outcome of the alerts the sink said are over (`Over`: published,
    /// or given up and counted by the sink's policy).
    fn record_over(&mut self) -> Result<(), mongoose_outbox::OutboxError> {
        if self.over.is_empty() {
            return Ok(());
        }
        self.outcomes.clear();
        self.outcomes
            .extend(self.over.drain(..).map(|key| (key, Outcome::Over)));
        self.outbox.record_outcomes(&self.outcomes)?;
        self.outcomes.clear();
        Ok(())
    }

    /// Writes the whole state as a snapshot holding every record so far, then lets the
    /// outbox forget the segments before it whose alerts are all over.
    fn snapshot(&mut self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.alerts.drain_over(&mut self.over);
        self.record_over()?;
        // the snapshot holds everything up to the last record (a crash before the
        // outbox is compacted replays records whose absolute values it already has)
        let through = self.outbox.sync()?;
        self.state.outbox_seq = through;
        self.state
            .save(&self.settings.state_dir, self.settings.sync)?;
        self.journal_records = 0;
        self.journal_bytes = 0;
        self.snapshot_at = std::time::Instant::now();
        // the records after the snapshot go to a new segment, so the older ones can go
        // once their alerts are over (a segment with an unsettled alert stays until a
        // later snapshot finds it settled)
        self.outbox.roll();
        self.outbox.compact(through)?;
        Ok(())
    }
}

/// Alerts over before their outcomes are recorded in one outbox record.
const OUTCOMES_BATCH: usize = 256;

/// Whether the outbox folder `dir` holds a segment file.
fn has_segments(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.starts_with("outbox-") && name.ends_with(".log")
        })
    })
}

/// Opens (creating) `rejected.log` in `state_dir` for appending.
pub(crate) fn open_rejected_log(state_dir: &Path) -> Result<File, ProcessorError> {
    let path = state_dir.join("rejected.log");
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|error| {
            ProcessorError::new(format!(
                "cannot open {} for appending: {error}",
                path.display()
            ))
        })
}

/// An alert the alerts sink did not take, as the processor's error: busy when the sink
/// is full (the line comes again), failed otherwise.
pub(crate) fn alert_error(error: std::io::Error) -> ProcessorError {
    if error.kind() == std::io::ErrorKind::WouldBlock {
        ProcessorError::busy(error.to_string())
    } else {
        ProcessorError::new(error.to_string())
    }
}

/// An alert written for a line: its text, and its output key when a keyed sink took it.
pub(crate) struct AlertWritten {
    pub(crate) key: Option<(OutputKey, String)>,
    pub(crate) payload: Vec<u8>,
}

/// What applying a line did.
pub(crate) enum Applied {
    /// The account's balance is now `balance`; `alert` when it went negative.
    Account {
        account: String,
        balance: i64,
        alert: Option<AlertWritten>,
    },
    /// The line was rejected (malformed, or the balance would overflow).
    Rejected,
}

/// Applies one line to `state` (the ledger's whole state, or one partition's): its
/// balances and counts, never its position. A malformed line (or one that would overflow the
/// balance) is appended to `rejected_log` with its `position` and reason; a balance that
/// goes negative writes the alert `position,account,balance` first (a full alerts sink
/// makes the ledger busy before anything changes, and the line comes again).
pub(crate) fn apply_line(
    state: &mut LedgerState,
    rejected_log: &mut File,
    alerts: &mut dyn AlertSink,
    position: &str,
    line: &Line,
) -> Result<Applied, ProcessorError> {
    // a line that is not UTF-8 has U+FFFD in its account or amount: rejected
    let text = line.text();
    let mut reject = |reason: &str, rejected_log: &mut File| -> Result<Applied, ProcessorError> {
        // written before it counts: a write that fails (a full disk) leaves the count
        // as it was, and the retry of the line counts it once
        writeln!(rejected_log, "{position},{reason},{line}")?;
        state.rejected += 1;
        metrics::counter!("mongoose_ledger_rejected_lines_total").increment(1);
        Ok(Applied::Rejected)
    };
    let (account, amount) = match parse_line(&text) {
        Err(reason) => return reject(reason, rejected_log),
        Ok(parsed) => parsed,
    };
    let balance = state.balances.get(account).copied().unwrap_or(0);
    let Some(updated) = balance.checked_add(amount) else {
        return reject("the balance would overflow", rejected_log);
    };
    let mut alert = None;
    if updated < 0 {
        let payload = format!("{position},{account},{updated}");
        let key = alerts.write_line(&payload).map_err(alert_error)?;
        alert = Some(AlertWritten {
            key,
            payload: payload.into_bytes(),
        });
    }
    state.balances.insert(account.to_owned(), updated);
    state.applied += 1;
    Ok(Applied::Account {
        account: account.to_owned(),
        balance: updated,
        alert,
    })
}

impl Ledger {
    /// The admin command `balance ACCOUNT`: the account's balance, or an error naming
    /// an account the ledger never saw.
    pub fn balance(&mut self, args: &[String]) -> Result<String, ProcessorError> {
        let [account] = args else {
            return Err("usage: balance ACCOUNT".into());
        };
        match self.state.balances.get(account) {
            Some(balance) => Ok(balance.to_string()),
            None => Err(format!("no account '{account}' in the ledger").into()),
        }
    }
}

impl Processor for Ledger {
    fn stop(&mut self) -> Result<(), ProcessorError> {
        // what the alerts sink holds is published before the last commit
        self.alerts.stop();
        // and what it published is recorded, so the next start has nothing to publish
        // again
        self.alerts.drain_over(&mut self.over);
        let recorded = self
            .record_over()
            .and_then(|()| self.outbox.sync().map(|_| ()));
        if let Err(error) = recorded {
            warn!(%error, "ledger: the outcomes of the published alerts could not be recorded: the next start publishes them again under their keys");
        }
        Ok(())
    }

    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        let feed = self.settings.feed.clone();
        context.subscribe(&feed, Ledger::on_line)?;
        context.register_command("balance", Ledger::balance);
        Ok(())
    }

    fn saved_positions(&self) -> Vec<SavedPosition> {
        if !self.settings.guard {
            // without the guard the saved position decides nothing
            return Vec::new();
        }
        // one per lane the state holds a line of (a glob feed: one per file)
        let mut saved: Vec<SavedPosition> = self
            .state
            .position_of(0)
            .into_iter()
            .map(|lane_zero| (0, lane_zero))
            .chain(self.state.lanes.iter().map(|(lane, saved)| (*lane, *saved)))
            .map(|(lane, saved)| SavedPosition {
                feed: self.settings.feed.clone(),
                saved: Some((
                    Epoch(saved.epoch),
                    PositionValue {
                        lane,
                        offset: saved.position,
                    },
                )),
            })
            .collect();
        if saved.is_empty() {
            saved.push(SavedPosition {
                feed: self.settings.feed.clone(),
                saved: None,
            });
        }
        saved
    }

    fn on_delivery_complete(
        &mut self,
        _key: CompletionKey,
        delivery: &Delivery,
    ) -> Result<(), ProcessorError> {
        let lane = delivery.lane();
        let offset = delivery.position().offset;
        let past = self
            .state
            .position_of(lane)
            .is_none_or(|saved| offset > saved.position);
        if self.settings.guard || past {
            self.state
                .set_position(lane, delivery.epoch().get(), offset);
        }
        self.lane = lane;
        self.changed_lanes.insert(lane);
        if let Err(error) = self.save() {
            if let Some(unlogged) = self.save_failures.due() {
                warn!(%error, unlogged, "ledger save failed: retried by the group's retry policy (logged at most every 10 s, with a count)");
            }
            return Err(error);
        }
        self.save_failures.reset();
        Ok(())
    }
}

impl LedgerSettings {
    /// The ledger's own checks of its settings (the part of its kind's
    /// `validate(settings)` hook that needs no server: the server's part checks that
    /// the feed, and an `alerts_sink`, exist): exactly one of `alerts` (a file, not a
    /// directory) or `alerts_sink` is given, and `state_dir` is a directory or does not
    /// exist yet. `resolve` resolves a relative path as the config's folder does. Opens
    /// nothing.
    pub fn check(&self, resolve: impl Fn(&Path) -> PathBuf) -> Result<(), SettingsRefusal> {
        match (&self.alerts, &self.alerts_sink) {
            (Some(path), None) => {
                let resolved = resolve(path);
                if resolved.is_dir() {
                    return Err(SettingsRefusal::at(
                        "alerts",
                        format!(
                            "{} is a directory: give the path of the alerts file (it need not exist yet)",
                            resolved.display()
                        ),
                    ));
                }
            }
            (None, Some(_)) => {}
            (None, None) => {
                return Err(SettingsRefusal::new(
                    "no alerts output: give the ledger exactly one of alerts (a file) or alerts_sink (a configured sink)",
                ))
            }
            (Some(_), Some(_)) => {
                return Err(SettingsRefusal::new(
                    "both alerts and alerts_sink are given: give the ledger exactly one of alerts (a file) or alerts_sink (a configured sink)",
                ))
            }
        }
        let state_dir = resolve(&self.state_dir);
        if state_dir.exists() && !state_dir.is_dir() {
            return Err(SettingsRefusal::at(
                "state_dir",
                format!(
                    "{} exists and is not a directory: give the ledger's state folder (it is created if missing)",
                    state_dir.display()
                ),
            ));
        }
        Ok(())
    }

    /// The defaults of a config file's settings table, with these paths: the feed
    /// `lines`, the guard on, fsync on, a snapshot every 100,000 records.
    pub fn new(state_dir: PathBuf, alerts: PathBuf) -> Self {
        LedgerSettings {
            feed: default_feed(),
            state_dir,
            alerts: Some(alerts),
            alerts_sink: None,
            guard: true,
            sync: true,
            compact_every: default_compact_every(),
            snapshot_bytes: default_snapshot_bytes(),
            snapshot_every_secs: default_snapshot_every_secs(),
            group_commit: true,
            group_records: default_group_records(),
            group_micros: default_group_micros(),
            state: StateMode::Auto,
            changelog_topic: None,
        }
    }
}

/// What [`LedgerSettings::check`] refuses: the settings key it is about (if one) and
/// what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsRefusal {
    /// The key within the settings table (`alerts`, `state_dir`).
    pub key: Option<&'static str>,
    /// What is wrong and what to do.
    pub message: String,
}

impl SettingsRefusal {
    fn new(message: &str) -> Self {
        SettingsRefusal {
            key: None,
            message: message.to_owned(),
        }
    }

    fn at(key: &'static str, message: String) -> Self {
        SettingsRefusal {
            key: Some(key),
            message,
        }
    }
}

impl std::fmt::Display for SettingsRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.key {
            Some(key) => write!(f, "{key}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for SettingsRefusal {}

/// Where the ledger appends its alerts. An alerts file ([`Ledger::open_alerts_file`])
/// appends each line and its newline in one unbuffered write, so an alert written
/// before a crash is on disk after it; a server passes a configured sink as one (its
/// writer keys the alert by the line and holds the line's commit until the alert is
/// published), whose alerts the ledger also admits with its state, so an alert not yet
/// published at a crash is published again, under its key, at the next start.
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
