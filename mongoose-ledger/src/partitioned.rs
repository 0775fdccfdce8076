//! The ledger on a Kafka feed shared by a consumer group: [`PartitionedLedger`], whose
//! state is kept per input partition in a [`PartitionStateStore`] (a Kafka changelog
//! topic, `mongoose_kafka::changelog::Changelog`, which the `mongoose` binary opens with
//! its `kafka` feature) and follows the partition to whichever member owns it.
//!
//! * **One state per partition.** Each partition has its own balances and counts (a
//!   producer that keys records by account puts each account in one partition, so
//!   its balance is whole there; otherwise an account's balance is the sum of its
//!   partitions' balances).
//! * **Saved before the commit.** Each applied line writes one changelog record, keyed
//!   by the account (`#rejected` for a rejected line), holding the account's balance,
//!   the partition's counts, the line's alert if any, and the line's `(epoch,
//!   partition, offset)`. The line's commit is held through the feed's commit gate
//!   until the broker acknowledged the record.
//! * **Restored by the new owner.** The first line of a partition in an epoch the
//!   ledger does not hold (every assignment gets a new epoch) restores the partition
//!   from its changelog: the new owner's marker fences off what an old owner still
//!   writes, and the restored state says through which offset it holds the partition.
//!   Lines at or below it (applied and saved by the old owner, not yet committed) are
//!   skipped: each line is applied once across owners. The alerts of the skipped lines
//!   are written again (the old owner may have been killed before its alert was out:
//!   across a takeover an alert is written at least once).
//! * **Exactly once, with transactions.** With a transactional store whose outputs go
//!   to a topic (`alerts_topic`), each line's alert is written into the partition's
//!   transaction before its change: the alert exists if and only if the change does,
//!   so the alerts of skipped lines are not written again (exactly once across
//!   takeovers, as a `read_committed` reader sees them).
//! * **A failed write.** A changelog write the producer gives up holds its line's
//!   commit for good, and every later line fails (the group's retry policy quarantines
//!   the ledger): a restart restores from the changelog and reads the line again.
//! * **Fenced.** A partition whose transactional producer the broker fenced holds the
//!   commits of its fenced writes' lines until the store tells who owns it
//!   ([`PartitionStateStore::retake`]). Taken over by a newer owner (this member was
//!   paused past its session, or the group moved the partition), it is dropped from
//!   memory: the rest of its lines in that epoch are skipped unapplied (the feed no
//!   longer commits that epoch), and it is restored if it comes back in a new epoch.
//!   Fenced by a stale owner (another member taking it over for lines of an earlier
//!   assignment still queued there), it is held on: the store fences the fencer and
//!   writes the fenced writes again.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

use mongoose_core::sink::CommitGate;
use mongoose_core::state_store::{OnDurable, PartitionStateStore, RestoredPartition};
use mongoose_core::{
    CoreError, DeliveryContext, Epoch, Processor, ProcessorError, SavedPosition, StartContext,
};
use mongoose_source_file::Line;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::apply::{alert_error, apply_line, open_rejected_log, Applied};
use crate::changelog_writes::{ChangelogWrites, FENCE_CHECK};
use crate::{AlertSink, LedgerSettings, LedgerState};

/// The timer that settles fenced partitions (every [`FENCE_CHECK`]).
const FENCE_TIMER: u64 = 1;

/// The key of the record a rejected line writes (an account never holds `#`).
const REJECTED_KEY: &[u8] = b"#rejected";

/// One changelog record's value: what the line changed and the partition's counts
/// after it (postcard).
#[derive(Debug, Serialize, Deserialize)]
struct Change {
    /// The account's balance after the line (`None`: the line was rejected).
    balance: Option<i64>,
    /// Lines of the partition applied.
    applied: u64,
    /// Lines of the partition rejected.
    rejected: u64,
    /// The line's alert, if its balance went negative.
    alert: Option<String>,
}

/// The ledger state a partition's changelog folds to: the last balance of each
/// account, the counts of the last record, and the `(epoch, position)` of the last
/// record as lane 0's.
///
/// # Errors
/// A record that is not a ledger change (another program's, or another version's).
pub fn partition_state(restored: &RestoredPartition) -> Result<LedgerState, String> {
    let mut state = LedgerState::default();
    for (key, (_, value)) in &restored.entries {
        let change: Change = postcard::from_bytes(value).map_err(|error| {
            format!(
                "a record of key {:?} is not a ledger change ({error})",
                String::from_utf8_lossy(key)
            )
        })?;
        if let (Some(balance), Ok(account)) = (change.balance, std::str::from_utf8(key)) {
            state.balances.insert(account.to_owned(), balance);
        }
    }
    if let Some(last) = restored.last_entry() {
        let change: Change = postcard::from_bytes(last)
            .map_err(|error| format!("the last record is not a ledger change ({error})"))?;
        state.applied = change.applied;
        state.rejected = change.rejected;
    }
    if let Some((epoch, offset)) = restored.position {
        state.set_position(0, epoch.0, offset);
    }
    Ok(state)
}

/// The alerts sink of a ledger whose alerts go into its state store's transactions: it
/// keeps the line's alert for the ledger to write with the line's change.
#[derive(Debug, Default)]
struct HeldAlert(Option<String>);

impl AlertSink for HeldAlert {
    fn write_line(
        &mut self,
        line: &str,
    ) -> std::io::Result<Option<(mongoose_core::sink::OutputKey, String)>> {
        self.0 = Some(line.to_owned());
        Ok(None)
    }
}

/// One partition's state in memory.
#[derive(Debug, Default)]
struct Partition {
    /// The balances and counts, with the `(epoch, position)` of the last line in them.
    state: LedgerState,
    /// The alerts of the lines the restored state holds, by position: written again
    /// when such a line is delivered again (skipped); dropped at the first new line.
    restored_alerts: BTreeMap<u64, String>,
    /// Lines skipped since the restore (delivered again, already in the state).
    skipped: u64,
}

/// The ledger on a Kafka feed: one state per input partition in a changelog topic,
/// saved before each line's commit and restored by the member that takes a partition
/// over, which skips the lines the restored state holds (see the crate docs).
pub struct PartitionedLedger {
    settings: LedgerSettings,
    changelog: Box<dyn PartitionStateStore>,
    partitions: HashMap<u32, Partition>,
    /// The alerts sink; `None`: the alerts go into the store's transactions.
    alerts: Option<Box<dyn AlertSink>>,
    rejected: File,
    /// The changelog writes: their tags at the commit gate, the first one given up,
    /// the fenced ones not settled yet and the epochs of the partitions dropped as
    /// fenced.
    writes: ChangelogWrites,
    /// The keys of alerts the sink says are over (no outbox here: forgotten at once).
    over: Vec<mongoose_core::sink::OutputKey>,
}

impl std::fmt::Debug for PartitionedLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionedLedger")
            .field("changelog", &self.changelog)
            .field("partitions", &self.partitions.len())
            .finish_non_exhaustive()
    }
}

impl PartitionedLedger {
    /// Opens the state store with `open_store` (given the callback its durable writes
    /// go to: a Kafka changelog creates its topic if missing) and the rejected file in
    /// `state_dir`; alerts go to `alerts`, or with `None` into the store's outputs (a
    /// transactional store: exactly once). With a commit `gate`, each line's commit
    /// waits for its changelog record's acknowledgement; without one, each record is
    /// flushed before the line counts as processed.
    ///
    /// # Errors
    /// The store cannot open (for a changelog: the broker does not answer, the input
    /// topic is missing, the changelog has fewer partitions than the input), the
    /// alerts go to a store that writes no outputs, or the rejected file cannot be
    /// opened.
    pub fn open(
        settings: LedgerSettings,
        open_store: impl FnOnce(OnDurable) -> Result<Box<dyn PartitionStateStore>, CoreError>,
        alerts: Option<Box<dyn AlertSink>>,
        gate: Option<Arc<dyn CommitGate>>,
    ) -> Result<Self, ProcessorError> {
        std::fs::create_dir_all(&settings.state_dir).map_err(|error| {
            ProcessorError::new(format!(
                "cannot create {}: {error}",
                settings.state_dir.display()
            ))
        })?;
        let has_gate = gate.is_some();
        let writes = ChangelogWrites::new("ledger", gate);
        let changelog = open_store(writes.on_durable())
            .map_err(|error| ProcessorError::new(error.to_string()))?;
        if alerts.is_none() && changelog.outputs_location().is_none() {
            return Err(ProcessorError::new(format!(
                "the changelog {} writes no outputs: give the ledger alerts (a file) or alerts_sink",
                changelog.location()
            )));
        }
        let rejected = open_rejected_log(&settings.state_dir)?;
        info!(changelog = %changelog.location(), gate = has_gate,
            "ledger: state per partition in the changelog, restored by the member that takes a partition");
        Ok(PartitionedLedger {
            settings,
            changelog,
            partitions: HashMap::new(),
            alerts,
            rejected,
            writes,
            over: Vec::new(),
        })
    }

    /// Restores `lane` from the changelog for `epoch`. A partition another member took
    /// over while this one was taking it (the store fenced this one) is not restored: it
    /// is marked fenced in `epoch`, so its lines of that epoch are not applied here.
    fn restore(&mut self, lane: u32, epoch: u64) -> Result<(), ProcessorError> {
        let partition = i32::try_from(lane)
            .map_err(|_| ProcessorError::new(format!("lane {lane} is not a Kafka partition")))?;
        let mut restored_alerts = BTreeMap::new();
        let restored = match self
            .changelog
            .restore(partition, Epoch(epoch), &mut |record| {
                if let Ok(change) = postcard::from_bytes::<Change>(&record.value) {
                    if let Some(alert) = change.alert {
                        restored_alerts.insert(record.offset, alert);
                    }
                }
            }) {
            Ok(restored) => restored,
            Err(CoreError::TakenOver(failure)) => {
                info!(
                    partition,
                    epoch,
                    %failure,
                    "ledger: the partition was taken over by another member while this one took it; its lines in this epoch are skipped"
                );
                self.partitions.remove(&lane);
                self.writes.skip_epoch(lane, epoch);
                return Ok(());
            }
            Err(error) => return Err(ProcessorError::new(error.to_string())),
        };
        let mut state = partition_state(&restored).map_err(|error| {
            ProcessorError::new(format!(
                "changelog {} partition {partition}: {error}: the ledger does not start on it; name a new changelog_topic (the feed is then read from its committed offsets into a new state) or restore the topic",
                self.changelog.location()
            ))
        })?;
        // the consumer-side position check: Kafka offsets never repeat within a
        // partition, so the restored position holds in the new epoch too
        let through = state.position;
        state.set_position(0, epoch, through);
        info!(
            partition,
            epoch,
            through,
            applied = state.applied,
            accounts = state.balances.len(),
            fenced = restored.fenced,
            "ledger: partition taken over, state restored from the changelog"
        );
        self.writes.restored(lane);
        self.partitions.insert(
            lane,
            Partition {
                state,
                restored_alerts,
                skipped: 0,
            },
        );
        Ok(())
    }

    fn on_line(&mut self, line: &Line) -> Result<(), ProcessorError> {
        self.writes.check_given_up(self.changelog.as_ref())?;
        let Some(delivery) = DeliveryContext::current() else {
            return Err(ProcessorError::new(
                "the ledger with a changelog reads a Kafka feed (a positioned feed): this line has no position",
            ));
        };
        let lane = delivery.lane();
        let epoch = delivery.epoch().get();
        let offset = delivery.position().offset;
        self.settle_fenced(Some((lane, epoch)));
        if self.writes.is_fenced_off(lane, epoch) {
            // taken over by another member while this one held it: not applied here
            return Ok(());
        }
        if self
            .partitions
            .get(&lane)
            .is_none_or(|partition| partition.state.epoch != epoch)
        {
            self.restore(lane, epoch)?;
            if self.writes.is_fenced_off(lane, epoch) {
                return Ok(());
            }
        }
        let position = delivery.position().to_string();
        let Some(partition) = self.partitions.get_mut(&lane) else {
            unreachable!("restored above");
        };
        if offset <= partition.state.position {
            // applied and saved by an earlier owner (or this one before a restart), not
            // committed: skipped, and its alert written again
            partition.skipped += 1;
            if let (Some(alert), Some(alerts)) =
                (partition.restored_alerts.get(&offset), self.alerts.as_mut())
            {
                // (alerts in the store's transactions exist with their change already)
                alerts.write_line(alert).map_err(alert_error)?;
            }
            return Ok(());
        }
        if partition.skipped > 0 {
            info!(
                partition = lane,
                skipped = partition.skipped,
                "ledger: lines already in the restored state were skipped"
            );
            partition.skipped = 0;
        }
        partition.restored_alerts.clear();
        let mut held = HeldAlert::default();
        let alerts: &mut dyn AlertSink = match self.alerts.as_mut() {
            Some(alerts) => alerts.as_mut(),
            None => &mut held,
        };
        let applied = apply_line(
            &mut partition.state,
            &mut self.rejected,
            alerts,
            &position,
            line,
        )?;
        // the changelog holds no outputs: what the sink says is over is forgotten
        alerts.drain_over(&mut self.over);
        self.over.clear();
        partition.state.set_position(0, epoch, offset);
        let (key, change) = match applied {
            Applied::Account {
                account,
                balance,
                alert,
            } => (
                account.into_bytes(),
                Change {
                    balance: Some(balance),
                    applied: partition.state.applied,
                    rejected: partition.state.rejected,
                    alert: alert.map(|alert| String::from_utf8_lossy(&alert.payload).into_owned()),
                },
            ),
            Applied::Rejected => (
                REJECTED_KEY.to_vec(),
                Change {
                    balance: None,
                    applied: partition.state.applied,
                    rejected: partition.state.rejected,
                    alert: None,
                },
            ),
        };
        let value = postcard::to_allocvec(&change)
            .map_err(|error| ProcessorError::new(error.to_string()))?;
        if let Some(alert) = held.0 {
            // into the partition's transaction before the change: both or neither
            if let Err(error) = self
                .changelog
                .write_output(lane as i32, &key, alert.as_bytes())
            {
                let message = error.to_string();
                self.writes.record_failure(message.clone());
                return Err(ProcessorError::new(message));
            }
        }
        self.writes.write(
            self.changelog.as_ref(),
            lane as i32,
            Epoch(epoch),
            offset,
            &key,
            &value,
        )
    }

    /// Settles the partitions the store reported fenced ([`ChangelogWrites::settle`]),
    /// before a line of `lane` in `epoch` (`current`) or on the fence timer, and
    /// forgets the ones dropped.
    fn settle_fenced(&mut self, current: Option<(u32, u64)>) {
        let partitions = &self.partitions;
        let dropped = self.writes.settle(
            self.changelog.as_ref(),
            |lane, epoch| {
                partitions
                    .get(&lane)
                    .is_some_and(|held| held.state.epoch == epoch)
            },
            current,
        );
        for lane in dropped {
            self.partitions.remove(&lane);
        }
    }

    /// The admin command `balance ACCOUNT`: the account's balance summed over the
    /// partitions this member holds in memory.
    pub fn balance(&mut self, args: &[String]) -> Result<String, ProcessorError> {
        let [account] = args else {
            return Err("usage: balance ACCOUNT".into());
        };
        let balances: Vec<i64> = self
            .partitions
            .values()
            .filter_map(|partition| partition.state.balances.get(account).copied())
            .collect();
        if balances.is_empty() {
            return Err(
                format!("no account '{account}' in the partitions this member holds").into(),
            );
        }
        Ok(balances.iter().sum::<i64>().to_string())
    }
}

impl Processor for PartitionedLedger {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        let feed = self.settings.feed.clone();
        context.subscribe(&feed, PartitionedLedger::on_line)?;
        context.register_command("balance", PartitionedLedger::balance);
        // a fenced partition's held commits hold the group's commit of every partition
        // (one checkpoint per group): they are settled on a timer too, not only at the
        // next line, which may never come (the partition moved away)
        context.schedule_timer(FENCE_CHECK, FENCE_TIMER);
        Ok(())
    }

    fn on_timer(&mut self, timer: u64) -> Result<(), ProcessorError> {
        if timer == FENCE_TIMER {
            self.settle_fenced(None);
            mongoose_control::context::schedule_timer(FENCE_CHECK, FENCE_TIMER);
        }
        Ok(())
    }

    fn stop(&mut self) -> Result<(), ProcessorError> {
        if let Some(alerts) = self.alerts.as_mut() {
            alerts.stop();
        }
        if let Err(error) = self.changelog.flush(Duration::from_secs(10)) {
            warn!(%error, "ledger: changelog writes still in flight at stop: their lines are not committed and are read again");
        }
        Ok(())
    }

    fn saved_positions(&self) -> Vec<SavedPosition> {
        // the positions live in the changelog, per partition, read at each takeover
        vec![SavedPosition {
            feed: self.settings.feed.clone(),
            saved: None,
        }]
    }
}
