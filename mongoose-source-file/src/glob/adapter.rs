//! The lane adapter of a [`GlobFileSource`](super::GlobFileSource): each file's source
//! publishes through a [`LaneOutput`] (its offsets become `(lane, offset)` positions of
//! the feed's one output), the adapters share a [`Hub`] (each lane's epoch, state and
//! saved positions), and one [`LaneMultiplexer`] committer routes the feed's
//! acknowledgements to each lane's own committer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use mongoose_core::{
    BatchEnd, ConsumerPosition, CoreError, Epoch, Held, PublishRefused, SourceCommitter,
    SourceOutput, SourceStart, SourceState, TryPublish,
};
use parking_lot::Mutex;
use tracing::debug;

/// A lane's committer, and whether it got acknowledgements since its last commit.
pub(super) struct LaneCommitter {
    committer: Box<dyn SourceCommitter<u64>>,
    dirty: bool,
}

pub(super) type Committers = Arc<Mutex<BTreeMap<u32, LaneCommitter>>>;

/// The one committer a glob source registers with its output: routes each
/// acknowledgement to its lane's committer and commits every lane that got some.
pub(super) struct LaneMultiplexer {
    pub(super) committers: Committers,
}

impl SourceCommitter<(u32, u64)> for LaneMultiplexer {
    fn acknowledged(&mut self, sequence: u64, epoch: Epoch, position: (u32, u64)) {
        let (lane, offset) = position;
        match self.committers.lock().get_mut(&lane) {
            Some(lane_committer) => {
                lane_committer
                    .committer
                    .acknowledged(sequence, epoch, offset);
                lane_committer.dirty = true;
            }
            None => {
                debug!(
                    lane,
                    offset, "an acknowledgement of a forgotten lane: ignored"
                )
            }
        }
    }

    fn commit(&mut self) -> Result<(), CoreError> {
        let mut first_error = None;
        for lane_committer in self.committers.lock().values_mut() {
            if !lane_committer.dirty {
                continue;
            }
            match lane_committer.committer.commit() {
                // a failed commit stays dirty: retried on the next poll
                Ok(()) => lane_committer.dirty = false,
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn commits_after_stop(&self) -> bool {
        true
    }
}

/// What the lane adapters of one glob source share (all on the source's thread).
pub(super) struct Hub<T> {
    pub(super) output: Arc<dyn SourceOutput<T, (u32, u64)>>,
    pub(super) state: Mutex<HubState>,
    pub(super) committers: Committers,
    /// The feed's name (its loss records').
    pub(super) feed: String,
    /// Where a loss is recorded the moment it is found (COMMITED: `<registry>.losses`).
    pub(super) loss_file: Option<std::path::PathBuf>,
}

#[derive(Default)]
pub(super) struct HubState {
    pub(super) lanes: BTreeMap<u32, LaneState>,
    /// The lane and epoch the output's epoch was last set for.
    pub(super) selected: Option<(u32, Epoch)>,
    /// What the consumers hold, as reported at the glob source's start.
    pub(super) positions: Vec<ConsumerPosition>,
    /// Lanes whose source started once in this run: a later start (a file reopened
    /// after giving its slot) does not reconcile again with positions reported at start.
    pub(super) reconciled: BTreeSet<u32>,
}

#[derive(Clone, Debug)]
pub(super) struct LaneState {
    pub(super) epoch: Epoch,
    pub(super) state: SourceState,
    pub(super) detail: Option<String>,
    pub(super) unterminated: u64,
}

impl Default for LaneState {
    fn default() -> Self {
        LaneState {
            epoch: Epoch::NONE,
            state: SourceState::Starting,
            detail: None,
            unterminated: 0,
        }
    }
}

impl<T> Hub<T> {
    /// A file of the glob that was not (or may not have been) read to its end: counted
    /// (the feed is not lossless) and recorded in the loss file at once, so the next
    /// start reports it even if this run is killed.
    pub(super) fn record_loss(&self, file: &str, what: &str) {
        if let Some(loss_file) = self.loss_file.as_ref() {
            let record = crate::losses::LossRecord::now(&self.feed, what.to_owned());
            if let Err(error) = crate::losses::append(loss_file, &record) {
                tracing::warn!(source = %self.feed, file = %loss_file.display(), %error,
                    "cannot record the loss beside the lane registry: a restart before this run ends will not report it");
            }
        }
        self.output.report_rotated_unread(file, None);
    }

    /// Sets the output's epoch to the lane's before publishing the lane's items.
    fn select(&self, lane: u32) {
        let mut state = self.state.lock();
        let epoch = state
            .lanes
            .get(&lane)
            .map_or(Epoch::NONE, |lane| lane.epoch);
        if state.selected != Some((lane, epoch)) {
            state.selected = Some((lane, epoch));
            self.output.set_epoch(epoch);
        }
    }
}

/// What each consumer holds of `lane`, from what it reported of the whole feed: its
/// saved position of the lane (a saved state that holds none of the lane holds nothing
/// of this file: it needs it from its start), else what its sink holds of the lane,
/// else nothing of its own.
pub(super) fn lane_positions(reported: &[ConsumerPosition], lane: u32) -> Vec<ConsumerPosition> {
    let mut by_consumer: BTreeMap<&str, Held> = BTreeMap::new();
    for position in reported {
        let entry = by_consumer
            .entry(position.consumer.as_str())
            .or_insert(Held::Nothing);
        match (position.held, *entry) {
            (Held::Saved(Some((_, at))), _) if at.lane == lane => *entry = position.held,
            // a saved state of other lanes: nothing of this one
            (Held::Saved(_), Held::Nothing | Held::Written(_)) => *entry = Held::Saved(None),
            (Held::Written((_, at)), Held::Nothing) if at.lane == lane => {
                *entry = position.held;
            }
            _ => {}
        }
    }
    by_consumer
        .into_iter()
        .map(|(consumer, held)| ConsumerPosition::new(consumer, held))
        .collect()
}

/// One file's view of the feed's output: positions `offset` become `(lane, offset)`.
pub(super) struct LaneOutput<T> {
    pub(super) lane: u32,
    pub(super) hub: Arc<Hub<T>>,
}

impl<T> LaneOutput<T> {
    /// Applies what a file's source registered at start to its lane: its epoch and its
    /// committer (the feed's PAUSE default is the glob source's own, registered at its
    /// start).
    pub(super) fn apply_start(&self, start: SourceStart) -> Result<(), CoreError> {
        let SourceStart {
            epoch,
            pause_by_default: _,
            committer,
        } = start;
        self.hub
            .state
            .lock()
            .lanes
            .entry(self.lane)
            .or_default()
            .epoch = epoch;
        if let Some(committer) = committer {
            let committer =
                committer
                    .into_typed::<u64>()
                    .map_err(|committer| CoreError::Source {
                        source_name: self.hub.feed.clone(),
                        message: format!(
                            "a file's committer commits positions of type {}, not u64",
                            committer.position_type()
                        ),
                    })?;
            self.hub.committers.lock().insert(
                self.lane,
                LaneCommitter {
                    committer,
                    dirty: false,
                },
            );
        }
        Ok(())
    }
}

impl<T: Send + 'static> SourceOutput<T, u64> for LaneOutput<T> {
    fn try_publish(&self, item: T, position: u64) -> TryPublish<T> {
        self.hub.select(self.lane);
        self.hub.output.try_publish(item, (self.lane, position))
    }

    fn try_publish_batch(&self, next: &mut dyn FnMut() -> Option<(T, u64)>) -> BatchEnd<T, u64> {
        self.hub.select(self.lane);
        let lane = self.lane;
        let mut laned = || next().map(|(item, offset)| (item, (lane, offset)));
        match self.hub.output.try_publish_batch(&mut laned) {
            BatchEnd::Exhausted => BatchEnd::Exhausted,
            BatchEnd::Paused => BatchEnd::Paused,
            BatchEnd::Returned(item, (_, offset), refusal) => {
                BatchEnd::Returned(item, offset, refusal)
            }
        }
    }

    fn publish(&self, item: T) -> Result<(), PublishRefused> {
        self.hub.output.publish(item)
    }

    fn cache(&self, item: T, position: u64) {
        self.hub.select(self.lane);
        self.hub.output.cache(item, (self.lane, position));
    }

    fn filtered(&self, position: u64, reason: &str) {
        self.hub.select(self.lane);
        self.hub.output.filtered((self.lane, position), reason);
    }

    /// The whole feed's: what was processed of every lane is committed (no file source
    /// calls it; the driver polls for every lane at once around the glob's cycle).
    fn commit_processed(&self) -> usize {
        self.hub.output.commit_processed()
    }

    fn set_epoch(&self, epoch: Epoch) {
        let mut state = self.hub.state.lock();
        state.lanes.entry(self.lane).or_default().epoch = epoch;
    }

    fn report_state(&self, source_state: SourceState, detail: Option<&str>) {
        let mut state = self.hub.state.lock();
        let lane = state.lanes.entry(self.lane).or_default();
        lane.state = source_state;
        lane.detail = detail.map(str::to_owned);
    }

    fn set_unterminated_bytes(&self, bytes: u64) {
        let mut state = self.hub.state.lock();
        state.lanes.entry(self.lane).or_default().unterminated = bytes;
    }

    fn report_rotated_unread(&self, file: &str, _bytes: Option<u64>) {
        self.hub.record_loss(
            file,
            &format!("{file} (lane {}): a rotated file compressed or deleted before it was read to its end, or a file written between two rotations while the source was stopped: a possible loss", self.lane),
        );
    }

    fn consumer_positions(&self) -> Vec<ConsumerPosition> {
        let mut state = self.hub.state.lock();
        if !state.reconciled.insert(self.lane) {
            return Vec::new();
        }
        lane_positions(&state.positions, self.lane)
    }
}
