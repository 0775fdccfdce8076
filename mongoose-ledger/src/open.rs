//! Opening a ledger: restoring its state from the snapshot and the outbox, and the
//! files it appends to.

use std::path::Path;
use std::sync::Arc;

use mongoose_core::sink::CommitGate;
use mongoose_outbox::{AdmittedOutput, Outbox, OutboxConfig, OutboxOwner};

use crate::journal::replay_into;
use crate::state::{self, LedgerState};

use mongoose_core::ProcessorError;
use tracing::{info, warn};

use super::alerts::AlertSink;
use super::apply::open_rejected_log;
use super::processor::{Gate, Ledger};
use super::settings::LedgerSettings;
use super::snapshot::LogSinceSnapshot;

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
        // refused, never applied (invariant 6)
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
        // chaos state-damage seed 1796686078031: an older copy of state.json put back
        // after a newer snapshot let the outbox drop its records: 18,602 lines lost
        config.follows_saved = true;
        let snapshot_seq = state.outbox_seq;
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
                if !replay_into(admission.state, state) {
                    return Err("it is not a ledger journal record".to_owned());
                }
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
                bytes = recovery.since_saved.bytes,
                "ledger: the records of the outbox after the snapshot are applied"
            );
        }
        // what this start replayed, counted from the files: the next snapshot is due
        // when it passes the bound, however short each run is
        let mut log = LogSinceSnapshot::found(recovery.since_saved, snapshot_seq);
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
            log = LogSinceSnapshot::found(Default::default(), state.outbox_seq);
            if legacy > 0 {
                std::fs::remove_file(&journal_path)
                    .map_err(|error| cannot("remove", &journal_path, error))?;
                info!(journal = %journal_path.display(), "ledger: the journal of an earlier build is taken into a snapshot; records go to the outbox now");
            }
        }
        // alerts admitted before a crash and never confirmed published go out again,
        // under their keys (a sink that de-duplicates writes each once); a full queue
        // is waited out, never a failure (invariant 7): the sink's thread drains
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
        // a snapshot's temp file that a kill left behind (the snapshot it was to be
        // never replaced the last one): only space (the outbox's lock is held, so no
        // other ledger is writing it)
        let temporary = LedgerState::temporary_path(&settings.state_dir);
        if temporary.exists() {
            match std::fs::remove_file(&temporary) {
                Ok(()) => {
                    info!(file = %temporary.display(), "ledger: removed the temp file of a snapshot a stop cut short (the snapshot before it is the one in use)")
                }
                Err(error) => {
                    warn!(file = %temporary.display(), %error, "ledger: cannot remove the temp file of a snapshot a stop cut short (it is only space; the next snapshot overwrites it)")
                }
            }
        }
        let mut ledger = Ledger {
            settings,
            state,
            rejected,
            rejected_unsynced: false,
            rejected_sync_failed: None,
            alerts,
            outbox,
            gate: Gate(gate),
            log,
            outputs: Vec::new(),
            over: Vec::new(),
            outcomes: Vec::new(),
            changed: Default::default(),
            account: String::new(),
            record: Vec::new(),
            lane: 0,
            changed_lanes: Vec::new(),
            save_failures: mongoose_core::LogEvery::new(std::time::Duration::from_secs(10)),
        };
        // the log this start replayed is past the bound: a snapshot now, before any
        // line, so that the next start (a crash loop's) does not replay it again
        let snapshot_len = std::fs::metadata(&snapshot_path).map_or(0, |meta| meta.len());
        ledger.snapshot_at_open(snapshot_len);
        Ok(ledger)
    }
}

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
