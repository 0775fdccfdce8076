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
//! 3. appends `position,account,balance` to the alerts file, unbuffered, when the
//!    account's balance is negative after the line;
//! 4. asks for the delivery-complete hook, which appends one checksummed record
//!    (the account's new balance, the counts and the feed's `(epoch, position)`) to the
//!    state journal in one write (fsync'd when `sync`). Every `compact_every` records
//!    the whole state is written as a checksummed snapshot (temp file, fsync, rename,
//!    fsync dir) and the journal emptied.
//!
//! A crash between the alert and the save repeats at most that line's alert; the state
//! is never applied twice, and the source's pointer is never ahead of the saved
//! position, so no line is skipped.
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
//! is applied to ([`mongoose_control::admin`]).
//!
//! This crate is an application of Mongoose-rs, not a part of the server: it knows
//! the processor API (core, control's admin commands, the file source's [`Line`]) and
//! nothing of the server. The `mongoose` binary registers it as the processor kind
//! `ledger` (`mongoose-server/src/ledger_kind.rs`: the server's feeds and sinks are
//! checked there, the rest by [`LedgerSettings::check`]), and the example
//! `cargo run -p mongoose-server --example ledger` builds its server as values.
//!
//! The crate root holds the processor and its settings; `state` the durable state and
//! its load and atomic save; `journal` the checksummed snapshot and journal record
//! formats and the damage checks.
#![forbid(unsafe_code)]

mod journal;
mod state;
#[cfg(test)]
mod tests;

pub use state::{LanePosition, LedgerState};

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use journal::JournalRecord;

use mongoose_core::{
    CompletionKey, Delivery, DeliveryContext, Epoch, PositionValue, Processor, ProcessorError,
    SavedPosition, StartContext,
};
use mongoose_source_file::Line;
use serde::Deserialize;
use tracing::warn;

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

/// The ledger processor.
#[derive(Debug)]
pub struct Ledger {
    settings: LedgerSettings,
    state: LedgerState,
    alerts: Box<dyn AlertSink>,
    rejected: File,
    journal: File,
    /// The journal's length after its last whole record.
    journal_len: u64,
    /// A failed write left bytes after `journal_len` that could not be cut off yet.
    journal_cut_pending: bool,
    journal_records: u64,
    /// The accounts changed since the last save that succeeded.
    changed: std::collections::BTreeSet<String>,
    /// The lane of the last delivery: its position goes in the next record.
    lane: u32,
    /// The lanes whose position changed since the last save that succeeded.
    changed_lanes: std::collections::BTreeSet<u32>,
}

impl Ledger {
    /// Opens the ledger: restores the saved state, opens the rejected file for
    /// appending; alerts go to `alerts` (a file from [`Ledger::open_alerts_file`], or a
    /// server's sink).
    pub fn open(
        settings: LedgerSettings,
        alerts: Box<dyn AlertSink>,
    ) -> Result<Self, ProcessorError> {
        std::fs::create_dir_all(&settings.state_dir).map_err(|error| {
            ProcessorError::new(format!(
                "cannot create {}: {error}",
                settings.state_dir.display()
            ))
        })?;
        let (state, journal_end) = LedgerState::load_with_journal_end(&settings.state_dir)?;
        let journal_path = LedgerState::journal_path(&settings.state_dir);
        let journal = OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(false)
            .open(&journal_path)
            .map_err(|error| {
                ProcessorError::new(format!("cannot open {}: {error}", journal_path.display()))
            })?;
        let length = journal.metadata().map(|meta| meta.len()).unwrap_or(0);
        if length > journal_end {
            warn!(journal = %journal_path.display(), at = journal_end, torn_bytes = length - journal_end, "the ledger journal ends with a torn record (a crash cut its write short; its line was not committed and is read again): it is cut off");
            journal.set_len(journal_end).map_err(|error| {
                ProcessorError::new(format!("cannot cut {}: {error}", journal_path.display()))
            })?;
        }
        let mut journal = journal;
        std::io::Seek::seek(&mut journal, std::io::SeekFrom::End(0))?;
        let append = |path: &Path| {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|error| {
                    ProcessorError::new(format!(
                        "cannot open {} for appending: {error}",
                        path.display()
                    ))
                })
        };
        let rejected = append(&settings.state_dir.join("rejected.log"))?;
        Ok(Ledger {
            settings,
            state,
            rejected,
            alerts,
            journal,
            journal_len: journal_end,
            journal_cut_pending: false,
            journal_records: 0,
            changed: std::collections::BTreeSet::new(),
            lane: 0,
            changed_lanes: std::collections::BTreeSet::new(),
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
        // a line that is not UTF-8 has U+FFFD in its account or amount: rejected
        let text = line.text();
        match parse_line(&text) {
            Err(reason) => {
                self.state.rejected += 1;
                metrics::counter!("mongoose_ledger_rejected_lines_total").increment(1);
                writeln!(self.rejected, "{position},{reason},{line}")?;
            }
            Ok((account, amount)) => {
                let balance = self.state.balances.entry(account.to_owned()).or_insert(0);
                match balance.checked_add(amount) {
                    None => {
                        self.state.rejected += 1;
                        metrics::counter!("mongoose_ledger_rejected_lines_total").increment(1);
                        writeln!(
                            self.rejected,
                            "{position},the balance would overflow,{line}"
                        )?;
                    }
                    Some(updated) => {
                        *balance = updated;
                        self.state.applied += 1;
                        self.changed.insert(account.to_owned());
                        if updated < 0 {
                            // unbuffered: one write per alert, before the state save
                            self.alerts
                                .write_line(&format!("{position},{account},{updated}"))?;
                        }
                    }
                }
            }
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
        let failed = move |error: std::io::Error| {
            ProcessorError::new(format!(
                "cannot save the ledger state in {}: {error}",
                state_dir.display()
            ))
        };
        let encoded = record.encode();
        if self.journal_cut_pending {
            // a failed write left a part of a record that could not be cut off then: a
            // whole record after it would make it damage at the next start
            self.cut_journal_to_whole_records().map_err(&failed)?;
        }
        if let Err(error) = self.journal.write_all(&encoded) {
            // a part of the record may have been written: cut it off, so the retry's
            // record follows the last whole one
            self.journal_cut_pending = self.cut_journal_to_whole_records().is_err();
            return Err(failed(error));
        }
        // the record is in the file even if the sync below fails (a retry then writes
        // the same absolute values again after it)
        self.journal_len += encoded.len() as u64;
        if self.settings.sync {
            self.journal.sync_data().map_err(&failed)?;
        }
        self.changed.clear();
        self.changed_lanes.clear();
        self.journal_records += 1;
        if self.journal_records >= self.settings.compact_every.max(1) {
            // the snapshot holds everything the journal does; a crash before the journal
            // is emptied replays records whose absolute values the snapshot already has
            self.state
                .save(&self.settings.state_dir, self.settings.sync)
                .map_err(&failed)?;
            self.journal.set_len(0).map_err(&failed)?;
            std::io::Seek::seek(&mut self.journal, std::io::SeekFrom::Start(0)).map_err(&failed)?;
            self.journal_len = 0;
            if self.settings.sync {
                self.journal.sync_all().map_err(&failed)?;
            }
            self.journal_records = 0;
        }
        Ok(())
    }
}

impl Ledger {
    /// Cuts the journal back to its whole records and puts the write position there.
    fn cut_journal_to_whole_records(&mut self) -> std::io::Result<()> {
        self.journal.set_len(self.journal_len)?;
        std::io::Seek::seek(
            &mut self.journal,
            std::io::SeekFrom::Start(self.journal_len),
        )?;
        Ok(())
    }

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
            warn!(%error, "ledger save failed: retried by the group's retry policy");
            return Err(error);
        }
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
/// published).
pub trait AlertSink: Send + std::fmt::Debug {
    /// Appends `line` (a newline follows it).
    fn write_line(&mut self, line: &str) -> std::io::Result<()>;
}

impl AlertSink for File {
    fn write_line(&mut self, line: &str) -> std::io::Result<()> {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        (&*self).write_all(&bytes)
    }
}
