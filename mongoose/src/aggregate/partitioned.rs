//! The aggregate on a Kafka feed shared by a consumer group (`state = "changelog"`):
//! [`PartitionedAggregate`], which keeps one [`Aggregate`] per input partition in a
//! [`PartitionStateStore`] (a Kafka changelog topic, opened by the binary's `kafka`
//! feature) that follows the partition to whichever member owns it. It is the
//! ledger's model (`mongoose_ledger::PartitionedLedger`) with the aggregate's state:
//!
//! * **One state per partition.** Each partition has its own keys and counters (a
//!   producer that keys records by the `group_by` values puts each key in one
//!   partition, so its aggregates are whole there).
//! * **Saved before the commit.** Each line writes one changelog record keyed by its
//!   group key (`\xff#lines` for a line that changed no key: rejected, a header; no
//!   group key is that, a key is UTF-8), its value ([`Change`], postcard) the key's
//!   aggregates after the line, the partition's counters, and the outputs the line
//!   gave (rule outputs, dead letters), with the line's `(epoch, partition, offset)`.
//!   The line's commit is held through the feed's commit gate until the record is
//!   durable.
//! * **Restored by the new owner.** The first line of a partition in an epoch this
//!   member does not hold restores the partition from its changelog (the last value
//!   per key, the counters of the last record): lines at or below the restored offset
//!   are skipped, so each line is applied once across owners. Their outputs are
//!   written again, keyed by the new delivery's position: across a takeover a rule
//!   output is written at least once.
//! * **Fenced.** As the ledger: a partition whose transactional producer the broker
//!   fenced holds its lines' commits until the store tells who owns it, then is held
//!   on (a stale fencer) or dropped (its lines in that epoch are skipped unapplied).
//! * **No windows.** A window's closing depends on the partition's event-time
//!   watermark and emits when a later line comes; it is refused with this state at
//!   load (see the kind's check).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use mongoose_aggregate::{
    Aggregate, AggregateState, Aggregator, Counters, KeyState, LanePosition, LinePosition, Outcome,
};
use mongoose_core::sink::{CommitGate, OutputKey};
use mongoose_core::state_store::{OnDurable, PartitionStateStore, RestoredPartition};
use mongoose_core::StartContext;
use mongoose_core::{CoreError, DeliveryContext, Epoch, Processor, ProcessorError, SavedPosition};
use mongoose_ledger::changelog_writes::{ChangelogWrites, FENCE_CHECK};
use mongoose_ledger::AlertSink;
use mongoose_source_file::Line;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::partitioned_stats::PartitionedStats;

/// The timer that settles fenced partitions (every [`FENCE_CHECK`]).
const FENCE_TIMER: u64 = 1;

/// The changelog key of a line that changed no key (not UTF-8: no group key).
pub const LINES_KEY: &[u8] = b"\xff#lines";

/// One changelog record's value (postcard): what the line changed, the partition's
/// counters after it, and the outputs it gave.
#[derive(Debug, Serialize, Deserialize)]
pub struct Change {
    /// The key's aggregates after the line (`None`: the line changed no key).
    pub entry: Option<KeyState>,
    /// The partition's counters after the line.
    pub counters: Counters,
    /// The rule outputs the line gave (to `sink`).
    pub outputs: Vec<String>,
    /// The dead letters it gave (to `dead_letter`).
    pub dead_letters: Vec<String>,
}

/// [`Change`] by reference, to encode without copying the key's state.
#[derive(Serialize)]
struct ChangeRef<'a> {
    entry: Option<&'a KeyState>,
    counters: &'a Counters,
    outputs: &'a [String],
    dead_letters: &'a [String],
}

/// The aggregate state a partition's changelog folds to: the last entry of each key,
/// the counters of the last record, and lane `partition` at the restored position in
/// `epoch` (lines at or below it are already applied). `aggregator` is the config.
///
/// # Errors
/// A record that is not an aggregate change (another program's, another version's),
/// or a state of other aggregates.
pub fn partition_state(
    restored: &RestoredPartition,
    aggregator: &Aggregator,
    partition: u32,
    epoch: u64,
) -> Result<Aggregate, String> {
    let mut state: AggregateState = Aggregate::new(aggregator.clone()).state().clone();
    for (key, (_, value)) in &restored.entries {
        if key.as_slice() == LINES_KEY {
            continue;
        }
        let change: Change = postcard::from_bytes(value).map_err(|error| {
            format!(
                "a record of key {:?} is not an aggregate change ({error})",
                String::from_utf8_lossy(key)
            )
        })?;
        let (Some(entry), Ok(key)) = (change.entry, std::str::from_utf8(key)) else {
            continue;
        };
        state.keys.insert(key.to_owned(), entry);
    }
    if let Some(last) = restored.last_entry() {
        let change: Change = postcard::from_bytes(last)
            .map_err(|error| format!("the last record is not an aggregate change ({error})"))?;
        state.counters = change.counters;
    }
    if let Some((_, offset)) = restored.position {
        // Kafka offsets never repeat within a partition: the restored position holds
        // in the new epoch too
        state
            .lanes
            .insert(partition, LanePosition { epoch, offset });
    }
    Aggregate::restore(aggregator.clone(), state).map_err(|error| error.to_string())
}

/// Where an output goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// The `sink`: rule outputs.
    Outputs = 0,
    /// The `dead_letter` sink: rejected lines.
    DeadLetter = 1,
}

/// One partition's state in memory.
#[derive(Debug)]
struct Partition {
    aggregate: Aggregate,
    /// The epoch it is held in.
    epoch: u64,
    /// The outputs of the lines the restored state holds, by position: written again
    /// when such a line is delivered again (skipped); dropped at the first new line.
    restored_outputs: BTreeMap<u64, Vec<(Target, String)>>,
    /// Lines skipped since the restore.
    skipped: u64,
}

/// What the partitioned aggregate is opened with (besides its store and sinks).
pub struct PartitionedOpening {
    /// The compiled settings.
    pub aggregator: Aggregator,
    /// The feed.
    pub feed: String,
    /// `group/name`, for logs.
    pub name: String,
    /// The feed's commit gate for this group (`None`: each record is flushed before
    /// its line counts as processed).
    pub gate: Option<Arc<dyn CommitGate>>,
    /// What `/status` reads.
    pub stats: Arc<PartitionedStats>,
}

impl std::fmt::Debug for PartitionedOpening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionedOpening")
            .field("name", &self.name)
            .field("feed", &self.feed)
            .finish_non_exhaustive()
    }
}

/// The aggregate on a Kafka feed: one state per input partition in a changelog topic
/// (see the module docs).
pub struct PartitionedAggregate {
    feed: String,
    name: String,
    aggregator: Aggregator,
    group_by: usize,
    changelog: Box<dyn PartitionStateStore>,
    partitions: HashMap<u32, Partition>,
    outputs: Option<Box<dyn AlertSink>>,
    dead_letter: Option<Box<dyn AlertSink>>,
    /// The changelog writes: their tags at the commit gate, the first one given up,
    /// the fenced ones not settled yet and the epochs of the partitions dropped as
    /// fenced.
    writes: ChangelogWrites,
    stats: Arc<PartitionedStats>,
    /// The outputs of the line being handled, until the sinks took them all (a full
    /// sink makes the processor busy and the line comes again: the ones not taken yet
    /// are written then, under the keys they would have had).
    unsent: Vec<(Target, String)>,
    unsent_at: Option<LinePosition>,
    written: usize,
    base: [Option<OutputKey>; 2],
    /// The encoded change (reused).
    value: Vec<u8>,
    over: Vec<OutputKey>,
}

impl std::fmt::Debug for PartitionedAggregate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionedAggregate")
            .field("name", &self.name)
            .field("changelog", &self.changelog)
            .field("partitions", &self.partitions.len())
            .finish_non_exhaustive()
    }
}

impl PartitionedAggregate {
    /// Opens the state store with `open_store` (given the callback its durable writes
    /// go to: a Kafka changelog creates its topic if missing).
    ///
    /// # Errors
    /// The store cannot open (the broker does not answer, the input topic is missing,
    /// the changelog has fewer partitions than the input).
    pub fn open(
        opening: PartitionedOpening,
        open_store: impl FnOnce(OnDurable) -> Result<Box<dyn PartitionStateStore>, CoreError>,
        outputs: Option<Box<dyn AlertSink>>,
        dead_letter: Option<Box<dyn AlertSink>>,
    ) -> Result<Self, String> {
        let PartitionedOpening {
            aggregator,
            feed,
            name,
            gate,
            stats,
        } = opening;
        let has_gate = gate.is_some();
        let writes = ChangelogWrites::new("aggregate", gate);
        let changelog = open_store(writes.on_durable()).map_err(|error| error.to_string())?;
        info!(processor = %name, changelog = %changelog.location(), gate = has_gate,
            "aggregate: state per partition in the changelog, restored by the member that takes a partition");
        stats.set_changelog(changelog.location());
        Ok(PartitionedAggregate {
            feed,
            name,
            group_by: aggregator.settings().group_by.len(),
            aggregator,
            changelog,
            partitions: HashMap::new(),
            outputs,
            dead_letter,
            writes,
            stats,
            unsent: Vec::new(),
            unsent_at: None,
            written: 0,
            base: [None, None],
            value: Vec::with_capacity(128),
            over: Vec::new(),
        })
    }

    /// Restores `lane` from the changelog for `epoch`. A partition another member took
    /// over meanwhile is marked fenced in `epoch` instead.
    fn restore(&mut self, lane: u32, epoch: u64) -> Result<(), ProcessorError> {
        let partition = i32::try_from(lane)
            .map_err(|_| ProcessorError::new(format!("lane {lane} is not a Kafka partition")))?;
        let mut restored_outputs: BTreeMap<u64, Vec<(Target, String)>> = BTreeMap::new();
        let restored = match self
            .changelog
            .restore(partition, Epoch(epoch), &mut |record| {
                if let Ok(change) = postcard::from_bytes::<Change>(&record.value) {
                    let outputs: Vec<(Target, String)> = change
                        .outputs
                        .into_iter()
                        .map(|text| (Target::Outputs, text))
                        .chain(
                            change
                                .dead_letters
                                .into_iter()
                                .map(|text| (Target::DeadLetter, text)),
                        )
                        .collect();
                    if !outputs.is_empty() {
                        restored_outputs.insert(record.offset, outputs);
                    }
                }
            }) {
            Ok(restored) => restored,
            Err(CoreError::TakenOver(failure)) => {
                info!(partition, epoch, %failure,
                    "aggregate: the partition was taken over by another member while this one took it; its lines in this epoch are skipped");
                self.partitions.remove(&lane);
                self.stats.forget(lane);
                self.writes.skip_epoch(lane, epoch);
                return Ok(());
            }
            Err(error) => return Err(ProcessorError::new(error.to_string())),
        };
        let aggregate =
            partition_state(&restored, &self.aggregator, lane, epoch).map_err(|error| {
                ProcessorError::new(format!(
                    "changelog {} partition {partition}: {error}: the aggregate does not start on it; name a new changelog_topic (the feed is then read from its committed offsets into a new state) or restore the topic",
                    self.changelog.location()
                ))
            })?;
        let through = restored.position.map_or(0, |(_, offset)| offset);
        info!(
            processor = %self.name,
            partition,
            epoch,
            through,
            applied = aggregate.state().counters.applied,
            keys = aggregate.state().keys.len(),
            fenced = restored.fenced,
            "aggregate: partition taken over, state restored from the changelog"
        );
        self.stats.update(lane, epoch, through, aggregate.state());
        self.writes.restored(lane);
        self.partitions.insert(
            lane,
            Partition {
                aggregate,
                epoch,
                restored_outputs,
                skipped: 0,
            },
        );
        Ok(())
    }

    fn on_line(&mut self, line: &Line) -> Result<(), ProcessorError> {
        self.writes.check_given_up(self.changelog.as_ref())?;
        let Some((epoch, position)) = DeliveryContext::current_position() else {
            return Err(ProcessorError::new(
                "the aggregate with a changelog reads a Kafka feed (a positioned feed): this line has no position",
            ));
        };
        let at = LinePosition { epoch, position };
        if self.unsent_at != Some(at) {
            self.apply(at, line)?;
        }
        self.flush_unsent()?;
        self.unsent_at = None;
        Ok(())
    }

    /// Applies the line at `at` (or skips it: the restored state holds it) and writes
    /// its change; its outputs are left in `unsent`.
    fn apply(&mut self, at: LinePosition, line: &Line) -> Result<(), ProcessorError> {
        let lane = at.position.lane;
        let epoch = at.epoch.0;
        let offset = at.position.offset;
        self.settle_fenced(Some((lane, epoch)));
        if self.writes.is_fenced_off(lane, epoch) {
            return Ok(()); // taken over by another member: not applied here
        }
        if self
            .partitions
            .get(&lane)
            .is_none_or(|partition| partition.epoch != epoch)
        {
            self.restore(lane, epoch)?;
            if self.writes.is_fenced_off(lane, epoch) {
                return Ok(());
            }
        }
        let Some(partition) = self.partitions.get_mut(&lane) else {
            unreachable!("restored above");
        };
        let mut bytes = line.as_bytes();
        if let Some(stripped) = bytes.strip_suffix(b"\r") {
            bytes = stripped;
        }
        self.unsent.clear();
        self.written = 0;
        self.base = [None, None];
        self.unsent_at = Some(at);
        let outcome = partition.aggregate.apply(at, bytes);
        let (key, entry) = match outcome {
            Outcome::AlreadyApplied => {
                // applied and saved by an earlier owner (or this one before a
                // restart), not committed: skipped, its outputs written again
                partition.skipped += 1;
                if let Some(outputs) = partition.restored_outputs.get(&offset) {
                    self.unsent.extend(outputs.iter().cloned());
                }
                return Ok(());
            }
            Outcome::Applied { emits, .. } => {
                self.unsent
                    .extend(emits.into_iter().map(|emit| (Target::Outputs, emit.text)));
                let key = partition.aggregate.last_key();
                (key.as_bytes(), partition.aggregate.state().keys.get(key))
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
                    "epoch": epoch,
                    "position": at.position.to_string(),
                    "rejected": rejection.reason,
                    "message": rejection.message,
                    "line": String::from_utf8_lossy(bytes),
                });
                self.unsent.push((Target::DeadLetter, json.to_string()));
                (LINES_KEY, None)
            }
            // windows are refused with a changelog: no line is late
            Outcome::Header | Outcome::Late(_) => (LINES_KEY, None),
        };
        if partition.skipped > 0 {
            info!(processor = %self.name, partition = lane, skipped = partition.skipped,
                "aggregate: lines already in the restored state were skipped");
            partition.skipped = 0;
        }
        partition.restored_outputs.clear();
        let (outputs, dead_letters): (Vec<_>, Vec<_>) = (
            self.unsent
                .iter()
                .filter(|(target, _)| *target == Target::Outputs)
                .map(|(_, text)| text.clone())
                .collect(),
            self.unsent
                .iter()
                .filter(|(target, _)| *target == Target::DeadLetter)
                .map(|(_, text)| text.clone())
                .collect(),
        );
        let change = ChangeRef {
            entry,
            counters: &partition.aggregate.state().counters,
            outputs: &outputs,
            dead_letters: &dead_letters,
        };
        self.value.clear();
        let value = postcard::to_extend(&change, std::mem::take(&mut self.value))
            .map_err(|error| ProcessorError::new(error.to_string()))?;
        let written = self.writes.write(
            self.changelog.as_ref(),
            lane as i32,
            at.epoch,
            offset,
            key,
            &value,
        );
        self.value = value;
        self.stats
            .update(lane, epoch, offset, partition.aggregate.state());
        written
    }

    /// Writes the line's outputs the sinks did not take yet (keyed by the delivery,
    /// holding its commit until published). A retry after a full sink goes on where it
    /// stopped, under the keys the outputs would have had.
    fn flush_unsent(&mut self) -> Result<(), ProcessorError> {
        let mut counts = [0u32; 2];
        let mut fresh = [false; 2];
        for (at, (target, payload)) in self.unsent.iter().enumerate() {
            let slot = *target as usize;
            let index = counts[slot];
            counts[slot] += 1;
            if at < self.written {
                continue;
            }
            let sink = match target {
                Target::Outputs => self.outputs.as_mut(),
                Target::DeadLetter => self.dead_letter.as_mut(),
            };
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
                    sink.republish(key, payload.as_bytes().to_vec())
                        .map(|()| None)
                }
                _ => sink.write_line(payload),
            };
            match written {
                Ok(Some((key, _))) if index == 0 => {
                    self.base[slot] = Some(key);
                    fresh[slot] = true;
                }
                Ok(_) => {}
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                    return Err(ProcessorError::busy(error.to_string()))
                }
                Err(error) => return Err(ProcessorError::new(error.to_string())),
            }
            self.written = at + 1;
        }
        // no outbox here: what the sinks say is over is forgotten
        for sink in [&mut self.outputs, &mut self.dead_letter]
            .into_iter()
            .flatten()
        {
            sink.drain_over(&mut self.over);
        }
        self.over.clear();
        Ok(())
    }

    /// Settles the partitions the store reported fenced (as the ledger does:
    /// [`ChangelogWrites::settle`]) and forgets the ones dropped.
    fn settle_fenced(&mut self, current: Option<(u32, u64)>) {
        let partitions = &self.partitions;
        let dropped = self.writes.settle(
            self.changelog.as_ref(),
            |lane, epoch| {
                partitions
                    .get(&lane)
                    .is_some_and(|held| held.epoch == epoch)
            },
            current,
        );
        for lane in dropped {
            self.partitions.remove(&lane);
            self.stats.forget(lane);
        }
    }

    /// The admin command `state KEY`: the key's aggregates in the partitions this
    /// member holds (with the partition), or `{"status": 400|404, "error": ...}`.
    pub fn state_command(&mut self, args: &[String]) -> Result<String, ProcessorError> {
        let (key, parts) = match super::processor::state_key(args, self.group_by) {
            Ok(parsed) => parsed,
            Err(answer) => return Ok(answer),
        };
        let mut found: BTreeMap<u32, serde_json::Value> = BTreeMap::new();
        for (lane, partition) in &self.partitions {
            if let Some(view) = partition.aggregate.key(&parts) {
                found.insert(*lane, view.to_json());
            }
        }
        Ok(match found.len() {
            0 => serde_json::json!({"status": 404, "error": format!("no key '{key}' in the partitions this member holds ({} of them): another member of the group may hold it", self.partitions.len())}),
            1 => {
                let (lane, mut view) = found.into_iter().next().unwrap_or_default();
                view["partition"] = lane.into();
                view
            }
            _ => serde_json::json!({
                "key": key,
                "partitions": found,
            }),
        }
        .to_string())
    }
}

impl Processor for PartitionedAggregate {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        let feed = self.feed.clone();
        context.subscribe(&feed, PartitionedAggregate::on_line)?;
        context.register_command("state", PartitionedAggregate::state_command);
        // held fenced commits hold the group's commit of every partition: settled on a
        // timer too, not only at the next line, which may never come
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
        for sink in [&mut self.outputs, &mut self.dead_letter]
            .into_iter()
            .flatten()
        {
            sink.stop();
        }
        if let Err(error) = self.changelog.flush(Duration::from_secs(10)) {
            warn!(%error, "aggregate: changelog writes still in flight at stop: their lines are not committed and are read again");
        }
        Ok(())
    }

    fn saved_positions(&self) -> Vec<SavedPosition> {
        // the positions live in the changelog, per partition, read at each takeover
        vec![SavedPosition {
            feed: self.feed.clone(),
            saved: None,
        }]
    }
}
