//! Writing: publishing a batch (lanes, duplicates, the state record before the bytes),
//! snapshots of the state and its compaction.

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use mongoose_core::sink::{Output, OutputKey, Sink, SinkOutcome, WrittenLane};
use tracing::warn;

use crate::writer::NO_INPUT;

use mongoose_durable::log::RecordLog;

use super::state::{
    encode, state_header, BatchCheck, Frame, Identity, Lane, LaneRecord, StateLog, Undo,
};
use super::{FileSink, ALREADY_WRITTEN, COMPACT_AFTER_BYTES};

impl FileSink {
    /// Replaces the state log by one snapshot of the lanes (a new log, renamed into
    /// place): at the first open, at compaction, after the file moved, and over a state
    /// of the earlier layout. The lanes are numbered anew, and changed only once the new
    /// log is in place. The log is the durable layer's: its header owned by the state
    /// id, the identity its first record, the snapshot its second.
    pub(super) fn write_snapshot(
        &mut self,
        identity: Identity,
        seq: u64,
        last: BatchCheck,
    ) -> std::io::Result<()> {
        let mut records = vec![encode(&identity)?];
        let mut lanes = Vec::new();
        let mut slots = Vec::with_capacity(self.lanes.len());
        for lane in &self.lanes {
            let slot = lanes.len() as u32;
            match lane.record(slot, true) {
                Some(record) => {
                    lanes.push(record);
                    slots.push(Some(slot));
                }
                None => slots.push(None),
            }
        }
        if seq > 0 || !lanes.is_empty() || self.length > 0 {
            records.push(encode(&Frame::Snapshot {
                seq,
                length: self.length,
                last,
                lanes,
            })?);
        }
        let log = RecordLog::rewrite(
            &self.state_file,
            &state_header(identity.state_id),
            records.iter().map(Vec::as_slice),
            self.sync,
        )?;
        let mut next_slot = slots.iter().flatten().count() as u32;
        for (lane, slot) in self.lanes.iter_mut().zip(slots) {
            lane.persisted = slot.is_some();
            lane.slot = slot.unwrap_or_else(|| {
                next_slot += 1;
                next_slot - 1
            });
        }
        let len = log.len();
        self.state = Some(StateLog {
            log,
            identity,
            dirty: false,
            seq,
            committed: seq,
            last,
            snapshot_len: len,
            compact_after: 0,
            next_slot,
            sync: self.sync,
        });
        Ok(())
    }

    pub(super) fn add_lane(
        &mut self,
        feed: &Arc<str>,
        lane: u32,
        writer: u64,
        epoch: u64,
    ) -> usize {
        let at = self.lanes.len();
        let slot = self.state.as_mut().map_or(at as u32, |state| {
            state.next_slot += 1;
            state.next_slot - 1
        });
        self.lanes.push(Lane {
            feed: Arc::clone(feed),
            lane,
            writer,
            epoch,
            slot,
            persisted: false,
            last: None,
            gaps: BTreeSet::new(),
            pending: BTreeSet::new(),
            touched_in: 0,
        });
        self.index
            .entry((lane, writer, epoch))
            .or_default()
            .push(at);
        at
    }

    /// The lane of `key`, made the first time it is seen.
    fn lane_of(&mut self, key: &OutputKey) -> usize {
        let same = |lane: &Lane| {
            lane.lane == key.lane
                && lane.writer == key.writer
                && lane.epoch == key.epoch.0
                && (Arc::ptr_eq(&lane.feed, &key.feed) || lane.feed == key.feed)
        };
        if let Some(lane) = self.lanes.get(self.last_lane) {
            if same(lane) {
                return self.last_lane;
            }
        }
        let found = self
            .index
            .get(&(key.lane, key.writer, key.epoch.0))
            .and_then(|candidates| candidates.iter().copied().find(|at| same(&self.lanes[*at])));
        let at = match found {
            Some(at) => at,
            None => self.add_lane(&key.feed, key.lane, key.writer, key.epoch.0),
        };
        self.last_lane = at;
        at
    }

    /// True when the file holds the output `key` (a tracked key only).
    fn holds(&self, key: &OutputKey) -> bool {
        let same = |lane: &Lane| {
            lane.lane == key.lane
                && lane.writer == key.writer
                && lane.epoch == key.epoch.0
                && (Arc::ptr_eq(&lane.feed, &key.feed) || lane.feed == key.feed)
        };
        self.index
            .get(&(key.lane, key.writer, key.epoch.0))
            .and_then(|candidates| candidates.iter().find(|at| same(&self.lanes[**at])))
            .is_some_and(|at| self.lanes[*at].holds((key.position, key.index)))
    }

    /// Marks lane `at` touched by the batch being written, keeping its state before.
    fn touch(&mut self, at: usize) {
        let lane = &mut self.lanes[at];
        if lane.touched_in == self.batch {
            return;
        }
        lane.touched_in = self.batch;
        self.undo.push(Undo {
            lane: at,
            last: lane.last,
            gaps: lane.gaps.clone(),
            pending: lane.pending.clone(),
        });
        self.touched.push(at);
    }

    /// Cuts the file back to its durable length after a failed batch.
    fn cut_back(&mut self) -> bool {
        if self.state.is_none() {
            // a device (/dev/null, /dev/full, a FIFO) has no length to cut back to, and
            // keeps no state: the batch is simply not written
            return true;
        }
        let cut = self.file.set_len(self.length).is_ok();
        self.data_dirty = !cut;
        cut
    }

    /// Writes the planned batch: its record, then its bytes.
    fn write_batch(&mut self, check: BatchCheck) -> std::io::Result<()> {
        if self.data_dirty {
            self.file.set_len(self.length)?;
            self.data_dirty = false;
        }
        if let Some(state) = &mut self.state {
            let records: Vec<LaneRecord> = self
                .touched
                .iter()
                .filter_map(|at| {
                    let lane = &self.lanes[*at];
                    lane.record(lane.slot, !lane.persisted)
                })
                .collect();
            state.seq += 1;
            let frame = Frame::Batch {
                seq: state.seq,
                base: state.committed,
                check,
                lanes: records,
            };
            state.append(&frame)?;
            self.file.write_all_at(&self.buffer, check.start)?;
        } else {
            self.file.write_all(&self.buffer)?;
        }
        if self.sync {
            self.file.sync_data()?;
        }
        if let Some(state) = &mut self.state {
            // not synced: only a batch cut short later needs it (a kill keeps it; after a
            // power loss the synced bytes and their CRC say the same)
            if let Err(error) = state.append_unsynced(&Frame::Written { seq: state.seq }) {
                warn!(sink = %self.name, error = %error,
                    "cannot record that a batch was written (it is: its record and bytes are durable)");
            }
        }
        Ok(())
    }

    /// Compacts the state log when it grew long enough (a failure leaves it as it is).
    fn maybe_compact(&mut self) {
        let Some(state) = &self.state else {
            return;
        };
        if state.len() <= COMPACT_AFTER_BYTES
            || state.len() <= 2 * state.snapshot_len
            || state.len() <= state.compact_after
        {
            return;
        }
        let (identity, seq, last, len) = (
            state.identity.clone(),
            state.committed,
            state.last,
            state.len(),
        );
        let previous = self.state.take();
        if let Err(error) = self.write_snapshot(identity, seq, last) {
            warn!(sink = %self.name, error = %error,
                "cannot compact the sink state (the log goes on growing; tried again later)");
            self.state = previous;
            if let Some(state) = &mut self.state {
                state.compact_after = len + COMPACT_AFTER_BYTES;
            }
        }
    }
}

impl Sink for FileSink {
    fn written_lanes(&self) -> Vec<WrittenLane> {
        // in the order the lanes were first written: by slot (a snapshot numbers them
        // anew in that order, and a lane first written later takes a later number)
        let mut lanes: Vec<&Lane> = self
            .lanes
            .iter()
            .filter(|lane| lane.last.is_some())
            .collect();
        lanes.sort_by_key(|lane| lane.slot);
        lanes
            .into_iter()
            .filter_map(|lane| {
                Some(WrittenLane {
                    feed: lane.feed.to_string(),
                    lane: lane.lane,
                    writer: lane.writer,
                    epoch: mongoose_core::Epoch(lane.epoch),
                    last: lane.last?,
                    has_gaps: !lane.gaps.is_empty(),
                })
            })
            .collect()
    }

    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
        self.buffer.clear();
        self.plan.clear();
        self.touched.clear();
        self.undo.clear();
        self.batch += 1;
        let tracked = self.state.is_some();
        for output in outputs {
            let key = &output.key;
            if !tracked || &*key.feed == NO_INPUT {
                // made outside a delivery: no input of it comes again, never a duplicate
                self.plan.push((None, true));
            } else {
                let at = self.lane_of(key);
                let position = (key.position, key.index);
                if self.lanes[at].holds(position) {
                    self.plan.push((Some((at, position)), false));
                    continue;
                }
                self.touch(at);
                self.lanes[at].note_written(position);
                self.plan.push((Some((at, position)), true));
            }
            self.buffer.extend_from_slice(&output.payload);
            self.buffer.push(b'\n');
        }
        if self.buffer.is_empty() && self.touched.is_empty() {
            outcomes.extend(self.plan.iter().map(|_| SinkOutcome::Published {
                evidence: ALREADY_WRITTEN.to_owned(),
            }));
            return;
        }
        let check = BatchCheck {
            start: self.length,
            end: self.length + self.buffer.len() as u64,
            crc: crc32fast::hash(&self.buffer),
        };
        match self.write_batch(check) {
            Ok(()) => {
                self.length = check.end;
                if let Some(state) = &mut self.state {
                    state.committed = state.seq;
                    state.last = check;
                }
                for at in &self.touched {
                    let lane = &mut self.lanes[*at];
                    lane.persisted |= lane.last.is_some();
                }
                // one text per batch, copied per output
                let durable = format!("durable through byte {}", check.end);
                for (_, written) in &self.plan {
                    outcomes.push(SinkOutcome::Published {
                        evidence: if *written {
                            durable.clone()
                        } else {
                            ALREADY_WRITTEN.to_owned()
                        },
                    });
                }
                self.maybe_compact();
            }
            Err(error) => {
                for undo in self.undo.drain(..) {
                    let lane = &mut self.lanes[undo.lane];
                    lane.last = undo.last;
                    lane.gaps = undo.gaps;
                    lane.pending = undo.pending;
                }
                // an output found written may have been written by this very batch (the
                // same key twice in it): held only if its lane still holds it
                let mut held = std::mem::take(&mut self.held);
                held.clear();
                for (tracked, written) in &self.plan {
                    held.push(match tracked {
                        Some((at, position)) => {
                            let holds = !*written && self.lanes[*at].holds(*position);
                            if !holds {
                                self.lanes[*at].note_refused(*position);
                            }
                            holds
                        }
                        None => !*written,
                    });
                }
                let cut = self.cut_back();
                for holds in &held {
                    outcomes.push(if *holds {
                        SinkOutcome::Published {
                            evidence: ALREADY_WRITTEN.to_owned(),
                        }
                    } else if cut {
                        SinkOutcome::NotPublished {
                            evidence: if self.state.is_none() {
                                format!("writing {} failed ({error})", self.path.display())
                            } else {
                                format!(
                                    "writing {} failed ({error}); cut back to its durable {} bytes",
                                    self.path.display(),
                                    self.length
                                )
                            },
                            retryable: true,
                        }
                    } else {
                        SinkOutcome::Uncertain {
                            evidence: format!(
                                "writing {} failed ({error}) and it could not be cut back to its durable {} bytes (cut back before the next batch)",
                                self.path.display(),
                                self.length
                            ),
                        }
                    });
                }
                self.held = held;
            }
        }
    }

    fn verify(&mut self, key: &OutputKey) -> Option<SinkOutcome> {
        (self.state.is_some() && &*key.feed != NO_INPUT && self.holds(key)).then(|| {
            SinkOutcome::Published {
                evidence: ALREADY_WRITTEN.to_owned(),
            }
        })
    }
}
