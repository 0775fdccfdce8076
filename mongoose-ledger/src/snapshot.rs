//! When the ledger takes a snapshot, and taking it: by what a restart would cost.
//!
//! A restart reads the snapshot, then replays every outbox record after it. What bounds
//! the restart is therefore the log since the last snapshot, and that log is on disk:
//! at open it is counted from the outbox segments ([`mongoose_outbox::Recovery::since_saved`]),
//! then each record written adds to it. A snapshot is due once it passes
//! `compact_every` records or `snapshot_bytes` bytes, whatever the process's age: a
//! ledger killed every 0.2 s still snapshots when the log passed the bound, and a
//! restart that finds the log already past a quarter of it snapshots at open, before
//! processing, so that the next restart does not replay the same records again (invariant 7:
//! recovery is bounded and makes progress). `snapshot_every_secs` is a staleness bound
//! of a long-running process (counted from the last snapshot or the open, whichever is
//! later), not a recovery bound.
//!
//! A snapshot that fails (a full disk) is not the failure of the line whose record was
//! just admitted: that record is in the outbox and the previous snapshot is intact (the
//! snapshot is written to a temp file, synced and renamed into place). It is logged
//! (a WARN, then at most every 10 s with a count) and tried again a second later.

use std::time::{Duration, Instant};

use mongoose_core::LogEvery;
use mongoose_outbox::LogSpan;
use tracing::{debug, info, warn};

use super::processor::Ledger;

/// At open, a snapshot is taken once the log replayed passes this fraction of the
/// bound (`snapshot_at_open`).
const OPEN_FRACTION: u64 = 4;

/// How long a failed snapshot waits before it is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// What a restart would replay (the outbox records since the last snapshot) and when
/// the next snapshot is due.
#[derive(Debug)]
pub(super) struct LogSinceSnapshot {
    /// The outbox records after the last snapshot.
    pub(super) records: u64,
    /// Their bytes in the outbox segments.
    pub(super) bytes: u64,
    /// The last outbox record the last snapshot holds.
    pub(super) snapshot_seq: u64,
    /// The outbox's [`appended_bytes`](mongoose_outbox::Outbox::appended_bytes) when
    /// `bytes` was last brought up to date.
    pub(super) appended_seen: u64,
    /// When the last snapshot was taken (or the ledger opened).
    pub(super) snapshot_at: Instant,
    /// After a failed snapshot: not before then.
    pub(super) retry_at: Option<Instant>,
    /// The failed snapshots' warning: once, then a count at most every 10 s.
    pub(super) failures: LogEvery,
}

impl LogSinceSnapshot {
    /// The log found on disk at open: `since` the snapshot that holds `snapshot_seq`.
    pub(super) fn found(since: LogSpan, snapshot_seq: u64) -> Self {
        LogSinceSnapshot {
            records: since.records,
            bytes: since.bytes,
            snapshot_seq,
            appended_seen: 0,
            snapshot_at: Instant::now(),
            retry_at: None,
            failures: LogEvery::new(Duration::from_secs(10)),
        }
    }
}

impl Ledger {
    /// Brings the count of the log since the last snapshot up to date with what the
    /// outbox wrote (line records and outcome records).
    pub(super) fn count_log(&mut self) {
        let appended = self.outbox.appended_bytes();
        let log = &mut self.log;
        log.bytes += appended - log.appended_seen;
        log.appended_seen = appended;
        log.records = self.outbox.last_seq().saturating_sub(log.snapshot_seq);
    }

    /// Whether what a restart would replay passed `compact_every` records or
    /// `snapshot_bytes` bytes.
    pub(super) fn recovery_bound_passed(&self) -> bool {
        self.log.records >= self.settings.compact_every.max(1)
            || self.log.bytes >= self.settings.snapshot_bytes.max(1)
    }

    /// Whether a snapshot is due: the recovery bound passed, or the last snapshot is
    /// `snapshot_every_secs` old; never within a second of a failed one.
    pub(super) fn snapshot_due(&self) -> bool {
        let due = self.recovery_bound_passed()
            || (self.log.records > 0
                && self.log.snapshot_at.elapsed()
                    >= Duration::from_secs(self.settings.snapshot_every_secs.max(1)));
        due && self
            .log
            .retry_at
            .is_none_or(|retry_at| Instant::now() >= retry_at)
    }

    /// Takes a snapshot; a failure is logged and tried again later (see the module
    /// docs).
    pub(super) fn try_snapshot(&mut self) {
        match self.snapshot() {
            Ok(()) => {
                if self.log.retry_at.take().is_some() {
                    info!(state = %self.settings.state_dir.display(), "ledger: a snapshot succeeded again after failed ones");
                }
                self.log.failures.reset();
            }
            Err(error) => {
                self.log.retry_at = Some(Instant::now() + RETRY_AFTER);
                if let Some(unlogged) = self.log.failures.due() {
                    warn!(
                        %error,
                        unlogged,
                        records = self.log.records,
                        bytes = self.log.bytes,
                        state = %self.settings.state_dir.display(),
                        "ledger: a snapshot failed; the lines are saved in the outbox and nothing is lost, but a restart replays every record since the last snapshot until one succeeds (tried again every second; logged at most every 10 s, with a count): free space in the state folder"
                    );
                }
            }
        }
    }

    /// At open, after the replay: a snapshot when the log the replay read is past a
    /// quarter of the bound, so the next restart does not read it again.
    ///
    /// A quarter, not the whole bound: in a crash loop each run adds what it processed
    /// to the log, and the start that finds the whole bound must replay it and write a
    /// snapshot within one life (a chaos run killed every 0.2-0.5 s on a busy machine
    /// saw ten starts in a row killed between their replay of 100,000 records and the
    /// end of that snapshot). A start that already paid for a replay of a quarter of it
    /// keeps the next one at most that plus one run's records.
    ///
    /// Under the whole bound, only when the log is at least as large as the snapshot
    /// (`snapshot_len`, its bytes on disk): writing a snapshot costs about what loading
    /// it does, and a start that spends its life writing a large state to save a smaller
    /// replay makes no progress (the same chaos run, with 926,000 accounts: a 12.7 MB
    /// snapshot, killed while writing it at start after start).
    pub(super) fn snapshot_at_open(&mut self, snapshot_len: u64) {
        let open_records = (self.settings.compact_every / OPEN_FRACTION).max(1);
        let open_bytes = (self.settings.snapshot_bytes / OPEN_FRACTION).max(1);
        let quarter = self.log.records >= open_records || self.log.bytes >= open_bytes;
        let worth_it = quarter && self.log.bytes >= snapshot_len;
        if !(self.recovery_bound_passed() || worth_it) {
            return;
        }
        info!(
            records = self.log.records,
            bytes = self.log.bytes,
            compact_every = self.settings.compact_every,
            snapshot_bytes = self.settings.snapshot_bytes,
            "ledger: the records replayed since the last snapshot are past a quarter of the snapshot bound: a snapshot is taken before processing, so that the next start does not replay them again"
        );
        self.try_snapshot();
    }

    /// Writes the whole state as a snapshot holding every record so far, then lets the
    /// outbox forget the segments before it whose alerts are all over.
    pub(super) fn snapshot(&mut self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.alerts.drain_over(&mut self.over);
        self.record_over()?;
        // the snapshot holds everything up to the last record (a crash before the
        // outbox is compacted replays records whose absolute values it already has)
        let through = self.outbox.sync()?;
        self.state.outbox_seq = through;
        self.state
            .save(&self.settings.state_dir, self.settings.sync)?;
        debug!(
            through,
            records = self.log.records,
            bytes = self.log.bytes,
            "ledger: snapshot taken"
        );
        self.log.snapshot_seq = through;
        self.log.records = 0;
        self.log.bytes = 0;
        self.log.appended_seen = self.outbox.appended_bytes();
        self.log.snapshot_at = Instant::now();
        // the records after the snapshot go to a new segment, so the older ones can go
        // once their alerts are over (a segment with an unsettled alert stays until a
        // later snapshot finds it settled)
        self.outbox.roll();
        if let Err(error) = self.outbox.compact(through) {
            warn!(%error, "ledger: the outbox segments the snapshot holds could not be removed (a restart reads them, and skips their records): the next snapshot tries again");
        }
        Ok(())
    }
}
