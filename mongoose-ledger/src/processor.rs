//! The ledger processor: its lines, its saves (outbox records, snapshots) and its
//! [`Processor`] hooks.

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::Arc;

use mongoose_core::sink::CommitGate;
use mongoose_core::sink::OutputKey;
use mongoose_outbox::{AdmittedOutput, AdmittedPositionRef, Outbox, Outcome};

use crate::journal::{encode_record_into, RecordParts};
use crate::state::LedgerState;

use mongoose_core::{
    CompletionKey, Delivery, DeliveryContext, Epoch, PositionValue, Processor, ProcessorError,
    SavedPosition, StartContext,
};
use mongoose_source_file::Line;
use tracing::warn;

use super::alerts::AlertSink;
use super::apply::{apply_line_to, AlertWritten, AppliedTo};
use super::settings::LedgerSettings;

const SAVE: CompletionKey = CompletionKey::SAVE;

/// The commit gate a ledger holds, if any.
pub(super) struct Gate(pub(super) Option<Arc<dyn CommitGate>>);

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
    pub(super) settings: LedgerSettings,
    pub(super) state: LedgerState,
    pub(super) alerts: Box<dyn AlertSink>,
    pub(super) rejected: File,
    /// A rejected line was appended since `rejected` was last synced: the next save
    /// syncs it before the record that counts it is admitted (storage.md gap 14).
    pub(super) rejected_unsynced: bool,
    /// Why a sync of `rejected` failed: a second sync is no proof of the first, so no
    /// save succeeds after it (as the outbox after a failed group).
    pub(super) rejected_sync_failed: Option<String>,
    /// Where each delivery's record is admitted, fsync'd in groups.
    pub(super) outbox: Outbox,
    /// Holds the feed's commit of a line until its record is durable (`None`: each
    /// record is synced before the line counts as processed).
    pub(super) gate: Gate,
    /// What the next restart would replay (counted from the files on disk at open,
    /// then as records are written) and when the next snapshot is due.
    pub(super) log: crate::snapshot::LogSinceSnapshot,
    /// The keyed alerts of the delivery being handled, admitted with its record.
    pub(super) outputs: Vec<AdmittedOutput>,
    /// The keys of admitted alerts the sink says are over, not yet recorded in the
    /// outbox (recorded in batches, so the unsettled set stays bounded).
    pub(super) over: Vec<OutputKey>,
    /// The outcomes record being built (kept for its capacity).
    pub(super) outcomes: Vec<(OutputKey, Outcome)>,
    /// The accounts changed since the last save that succeeded.
    pub(super) changed: ChangedAccounts,
    /// The account of the line being applied (a buffer kept from line to line).
    pub(super) account: String,
    /// The record being encoded (a buffer kept from line to line).
    pub(super) record: Vec<u8>,
    /// The lane of the last delivery: its position goes in the next record.
    pub(super) lane: u32,
    /// The lanes whose position changed since the last save that succeeded (each
    /// once).
    pub(super) changed_lanes: Vec<u32>,
    /// The save failures' warning: once, then a count at most every 10 s (a full disk
    /// failed every save, thousands a second).
    pub(super) save_failures: mongoose_core::LogEvery,
}

impl Ledger {
    /// Opens (creating) the alerts file `path` for appending.
    pub fn open_alerts_file(path: &Path) -> std::io::Result<File> {
        OpenOptions::new().create(true).append(true).open(path)
    }

    /// The state in memory.
    pub fn state(&self) -> &LedgerState {
        &self.state
    }

    pub(super) fn on_line(&mut self, line: &Line) -> Result<(), ProcessorError> {
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
        // `offset`, or `lane:offset` on a lane other than 0 (formatted only for a
        // rejected line or an alert)
        let position = delivery.as_ref().map(|delivery| delivery.position());
        let position: &dyn std::fmt::Display = match &position {
            Some(position) => position,
            None => &"0",
        };
        let outcome = apply_line_to(
            &mut self.state,
            &mut self.rejected,
            self.alerts.as_mut(),
            position,
            line,
            &mut self.account,
        )?;
        if matches!(outcome, AppliedTo::Rejected) {
            self.rejected_unsynced = true;
        }
        if let AppliedTo::Account { alert, balance } = outcome {
            if let Some(AlertWritten {
                key: Some((key, sink)),
                payload,
            }) = alert
            {
                // admitted with the state: published again after a crash if it was
                // not confirmed
                self.outputs.push(AdmittedOutput { sink, key, payload });
            }
            self.changed.insert(&self.account, balance);
        }
        if !DeliveryContext::on_complete(SAVE) {
            // no source position (not a positioned feed): save at once
            self.save()?;
        }
        Ok(())
    }

    /// Appends one record of what the delivery changed; takes a snapshot when what a
    /// restart would replay passes `compact_every` records or `snapshot_bytes`, or the
    /// last snapshot is `snapshot_every_secs` old (`snapshot`).
    fn save(&mut self) -> Result<(), ProcessorError> {
        // the rejected lines this record counts are durable before it can be: a count
        // that survives a power loss never counts lines `rejected.log` lost
        if let Some(failed) = &self.rejected_sync_failed {
            return Err(ProcessorError::new(failed.clone()));
        }
        if self.rejected_unsynced && self.settings.sync {
            if let Err(error) = self.rejected.sync_data() {
                let failed = format!(
                    "cannot save the ledger state in {}: cannot sync rejected.log ({error}): a second sync is no proof of the first, so the ledger saves nothing more; restart it (the lines after its last save are read again)",
                    self.settings.state_dir.display()
                );
                self.rejected_sync_failed = Some(failed.clone());
                return Err(ProcessorError::new(failed));
            }
        }
        self.rejected_unsynced = false;
        // the changed account is forgotten only once its record is written: a failed
        // save is retried with it
        let saved = self.state.stored_position(self.lane);
        let (state, lane) = (&self.state, self.lane);
        self.record.clear();
        encode_record_into(
            &mut self.record,
            &RecordParts {
                accounts: self.changed.iter(),
                applied: state.applied,
                rejected: state.rejected,
                lane,
                epoch: saved.epoch,
                position: saved.position,
                unsaved_lanes: self
                    .changed_lanes
                    .iter()
                    .filter(move |other| **other != lane)
                    .map(|other| {
                        let saved = state.stored_position(*other);
                        (*other, saved.epoch, saved.position)
                    }),
            },
        );
        let state_dir = self.settings.state_dir.clone();
        let failed = move |error: &dyn std::fmt::Display| {
            ProcessorError::new(format!(
                "cannot save the ledger state in {}: {error}",
                state_dir.display()
            ))
        };
        let saved = self.state.stored_position(self.lane);
        let position = AdmittedPositionRef {
            feed: &self.settings.feed,
            epoch: Epoch(saved.epoch),
            lane: self.lane,
            position: saved.position,
        };
        let seq = self
            .outbox
            .admit_gated(
                self.gate.0.as_deref(),
                &self.record,
                &position,
                &self.outputs,
            )
            .map_err(|error| failed(&error))?;
        self.state.outbox_seq = seq;
        if self.gate.0.is_none() {
            // no gate holds the commit: durable before the line counts as processed
            self.outbox.sync().map_err(|error| failed(&error))?;
        }
        self.changed.clear();
        self.changed_lanes.clear();
        self.outputs.clear();
        // the alerts the sink says are over: their outcomes become durable in batches
        // as they are published, so a crash leaves at most the alerts in flight
        // unsettled (never everything since the last snapshot)
        self.alerts.drain_over(&mut self.over);
        if self.over.len() >= OUTCOMES_BATCH {
            self.record_over().map_err(|error| failed(&error))?;
        }
        // the record is saved: a snapshot that fails now is retried later, never the
        // line's failure (what a restart replays grows meanwhile, and a WARN says so)
        self.count_log();
        if self.snapshot_due() {
            self.try_snapshot();
        }
        Ok(())
    }

    /// Records the outcome of the alerts the sink said are over (`Over`: published,
    /// or given up and counted by the sink's policy).
    pub(super) fn record_over(&mut self) -> Result<(), mongoose_outbox::OutboxError> {
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
}

/// Alerts over before their outcomes are recorded in one outbox record.
const OUTCOMES_BATCH: usize = 256;

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
        if !self.changed_lanes.contains(&lane) {
            self.changed_lanes.push(lane);
        }
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

/// The accounts changed since the last save that succeeded, each once with its
/// balance now: their names' buffers are kept from save to save (one per line, so no
/// allocation per line, and no look-up of the balance to save it).
#[derive(Debug, Default)]
pub(super) struct ChangedAccounts {
    accounts: Vec<(String, i64)>,
    len: usize,
}

impl ChangedAccounts {
    /// Notes `account` as changed, its balance now `balance`.
    fn insert(&mut self, account: &str, balance: i64) {
        if let Some((_, known)) = self.accounts[..self.len]
            .iter_mut()
            .find(|(known, _)| known == account)
        {
            *known = balance;
            return;
        }
        match self.accounts.get_mut(self.len) {
            Some((name, known)) => {
                name.clear();
                name.push_str(account);
                *known = balance;
            }
            None => self.accounts.push((account.to_owned(), balance)),
        }
        self.len += 1;
    }

    /// The changed accounts and their balances, in the order they changed.
    fn iter(&self) -> impl Iterator<Item = (&str, i64)> + Clone {
        self.accounts[..self.len]
            .iter()
            .map(|(name, balance)| (name.as_str(), *balance))
    }

    /// Forgets them (their records are written), keeping the buffers.
    fn clear(&mut self) {
        self.len = 0;
    }
}
