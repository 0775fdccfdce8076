//! What a processor writes outputs through: a [`SinkWriter`] keys each output by the
//! input being handled ([`OutputKey::for_delivery`]: its feed, epoch, lane, position,
//! the output's index within the delivery and the writer's id, [`SinkWriter::named`])
//! and holds that input's commit until the output is over (its feed and group's
//! [`CommitGate`]).
//!
//! Several processors may write into one sink: each names its writer (the server names
//! it `group/processor`), so their outputs of one input have different keys and a sink
//! that de-duplicates by key never takes one writer's output for the other's.
//!
//! ```
//! use std::sync::Arc;
//! use mongoose_core::sink::{Output, Sink, SinkOutcome};
//! use mongoose_sink::{RunnerConfig, SinkRunner, SinkWriter};
//!
//! struct Count(Arc<std::sync::atomic::AtomicU64>);
//! impl Sink for Count {
//!     fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
//!         for _ in outputs {
//!             self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
//!             outcomes.push(SinkOutcome::Published { evidence: "counted".into() });
//!         }
//!     }
//! }
//!
//! let counted = Arc::new(std::sync::atomic::AtomicU64::new(0));
//! let runner = SinkRunner::start(Box::new(Count(Arc::clone(&counted))), RunnerConfig::new("count", "memory")).unwrap();
//! // outside a delivery an output has no input to hold (a timer's output, say)
//! let mut writer = SinkWriter::new(runner.handle(), Arc::new(|_feed: &str| None));
//! writer.write(b"hello".to_vec()).unwrap();
//! let status = runner.stop(std::time::Instant::now() + std::time::Duration::from_secs(30));
//! assert_eq!(status.published, 1);
//! ```

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use mongoose_core::batch_end::{self, DeferredOutputs};
use mongoose_core::sink::{writer_id, CommitGate, Output, OutputKey};
use mongoose_core::{DeliveryContext, DeliveryRef, Epoch};
use parking_lot::Mutex;
use tracing::error;

use crate::runner::{GateId, Parcel, Queued, SendError, SinkHandle};

/// The most outputs a writer keeps for its batch's end before it hands them over.
const DEFERRED_MAX: usize = 1024;

/// The outputs a writer keeps until its thread's batch ends ([`batch_end`]): counted
/// queued at the sink already, and pending at their gates.
struct Deferred {
    handle: SinkHandle,
    outputs: Mutex<Vec<Queued>>,
    /// Listed for the thread's batch end.
    listed: AtomicBool,
    /// Outputs counted queued at the sink ahead of the writes that use them (taken
    /// [`CREDIT`] at a time, so a write does not touch the count the sink's thread
    /// lowers); what is left is given back when the kept outputs are handed over.
    credit: AtomicUsize,
}

/// How many outputs a batching writer counts queued at once.
const CREDIT: usize = 64;

impl Deferred {
    fn hand_over(&self) {
        let unused = self.credit.swap(0, Ordering::Relaxed);
        if unused > 0 {
            self.handle.release(unused);
        }
        let outputs = {
            let mut kept = self.outputs.lock();
            if kept.is_empty() {
                return;
            }
            std::mem::replace(&mut *kept, self.handle.parcel(DEFERRED_MAX))
        };
        let count = outputs.len();
        if !self.handle.hand_over(Parcel::Many(outputs)) {
            error!(sink = %self.handle.name(), outputs = count,
                "the sink stopped before the outputs of the batch reached it: their inputs are not committed and come again");
        }
    }
}

impl DeferredOutputs for Deferred {
    fn flush(&self) {
        self.listed.store(false, Ordering::Relaxed);
        self.hand_over();
    }
}

/// Finds the commit gate of an input's feed for the writer's group (`None`: the feed's
/// commits are not held, e.g. a feed without positions).
pub type GateSource = Arc<dyn Fn(&str) -> Option<Arc<dyn CommitGate>> + Send + Sync>;

/// The feed name of outputs made outside a delivery (a timer's, a service callback's):
/// they hold no input.
pub const NO_INPUT: &str = "-";

struct FeedGate {
    /// The engine's name of the feed (matched by pointer first).
    feed: Arc<str>,
    /// The writer's own copy of the name, for the keys: its count is touched only by
    /// this writer and the sink's thread, never by the feed's source.
    key_name: Arc<str>,
    /// The feed's commit gate and its id at the runner.
    gate: Option<(Arc<dyn CommitGate>, GateId)>,
    next_tag: u64,
}

/// Writes a processor's outputs to one sink, keyed by the input being handled and
/// holding that input's commit until each output is published (or given up by the
/// sink's policy). Use it on the processor's thread.
pub struct SinkWriter {
    handle: SinkHandle,
    gates: GateSource,
    feeds: Vec<FeedGate>,
    /// The delivery the last output belonged to (its feed's entry, sequence, attempt)
    /// and the next index within it.
    current: Option<(usize, u64, u32)>,
    index: u32,
    /// Outputs made outside a delivery, numbered.
    unpositioned: u64,
    /// The writer's id in its keys ([`writer_id`] of its name; 0: no name given).
    writer: u64,
    /// The outputs kept until the batch's end, on a thread that batches.
    deferred: Arc<Deferred>,
    /// Payload buffers the sink gave back, for [`SinkWriter::write_with`].
    spares: Vec<Vec<u8>>,
}

impl Drop for SinkWriter {
    fn drop(&mut self) {
        self.deferred.hand_over();
    }
}

impl fmt::Debug for SinkWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SinkWriter")
            .field("sink", &self.handle.name())
            .finish_non_exhaustive()
    }
}

impl SinkWriter {
    /// A writer to the sink behind `handle`; `gates` finds an input feed's commit gate
    /// (taken the first time the writer writes an output of an input of that feed). Its
    /// keys carry writer id 0 until it is [named](SinkWriter::named): give each writer
    /// of a sink that several processors write into a name of its own.
    pub fn new(handle: SinkHandle, gates: GateSource) -> Self {
        SinkWriter {
            deferred: Arc::new(Deferred {
                handle: handle.clone(),
                outputs: Mutex::new(Vec::new()),
                listed: AtomicBool::new(false),
                credit: AtomicUsize::new(0),
            }),
            handle,
            spares: Vec::new(),
            gates,
            feeds: Vec::new(),
            current: None,
            index: 0,
            unpositioned: 0,
            writer: 0,
        }
    }

    /// The writer named `name` (stable across restarts and configuration changes: the
    /// server uses `group/processor`): its keys carry [`writer_id`]`(name)`.
    #[must_use]
    pub fn named(mut self, name: &str) -> Self {
        self.writer = writer_id(name);
        self
    }

    /// The writer's id in its keys.
    pub fn writer(&self) -> u64 {
        self.writer
    }

    /// For a writer that makes at most one output per input (a `forward`): per lane of
    /// `feed`, where the feed's source may resume when its own pointer is lost, as
    /// [`Processor::written_positions`](mongoose_core::Processor::written_positions)
    /// reports it. That is the newest epoch's last input whose output the sink holds
    /// (the input made its one output, so it is done), or the start of that epoch when
    /// an output below it is not held (refused and overtaken: its input must be read
    /// again, and the sink drops the outputs it holds). Empty when the sink holds
    /// nothing of this writer and feed (or cannot tell, a sink without keys).
    pub fn written_positions(&self, feed: &str) -> Vec<mongoose_core::SavedPosition> {
        // the newest epoch per lane: the last of the lane's entries (first-written order)
        let mut newest: std::collections::BTreeMap<u32, &mongoose_core::sink::WrittenLane> =
            std::collections::BTreeMap::new();
        for lane in self.handle.written_lanes() {
            if lane.writer == self.writer && lane.feed == feed {
                newest.insert(lane.lane, lane);
            }
        }
        newest
            .into_values()
            .map(|lane| mongoose_core::SavedPosition {
                feed: feed.to_owned(),
                saved: Some((
                    lane.epoch,
                    mongoose_core::PositionValue {
                        lane: lane.lane,
                        offset: if lane.has_gaps { 0 } else { lane.last.0 },
                    },
                )),
            })
            .collect()
    }

    /// The sink's name.
    pub fn sink(&self) -> &str {
        self.handle.name()
    }

    /// Writes one output (a line sink adds the newline). Inside a delivery it is keyed
    /// by the delivery and holds its input's commit until it is over; outside one it
    /// is keyed `-/0/0/N/0/writer` and holds nothing (a sink never drops such an output
    /// as already written: no input of it comes again).
    ///
    /// On a thread that batches ([`batch_end`]: a processor group's) the outputs of
    /// deliveries are handed to the sink together at the batch's end, one hand-off
    /// for up to 1,024; elsewhere each at once. Either way they reach the sink in the
    /// order they were written.
    ///
    /// # Errors
    /// [`SendError::Full`] when the sink's queue is full (fail the handler: a
    /// retry-safe processor is given the item again later); [`SendError::Stopped`]
    /// when the sink stopped. The output was not taken.
    pub fn write(&mut self, payload: Vec<u8>) -> Result<OutputKey, SendError> {
        let writer = self.writer;
        // borrowed: this runs per output, and the engine's feed name is shared with the
        // source's thread, so cloning it would bounce its count between the threads
        let positioned = DeliveryContext::with_current(|delivery| self.key_for(delivery, writer));
        let Some((key, at)) = positioned else {
            self.unpositioned += 1;
            let key = OutputKey::new(NO_INPUT, Epoch(0), 0, self.unpositioned, 0, writer);
            // after what this writer kept, in order
            self.deferred.hand_over();
            self.handle.send(Output::new(key.clone(), payload), None)?;
            return Ok(key);
        };
        let batching = batch_end::is_batching();
        if batching {
            // only this thread touches the credit: no read-modify-write needed
            let reserved = match self.deferred.credit.load(Ordering::Relaxed) {
                0 => self.handle.reserve_up_to(CREDIT),
                credit => Ok(credit),
            };
            match reserved {
                Ok(credit) => self.deferred.credit.store(credit - 1, Ordering::Relaxed),
                Err(error) => {
                    self.index -= 1;
                    return Err(error);
                }
            }
        }
        let output = Output::new(key.clone(), payload);
        let known = &mut self.feeds[at];
        let gate = known.gate.as_ref().map(|(gate, id)| {
            known.next_tag += 1;
            // pending before the item counts as handled
            gate.pending(known.next_tag);
            (*id, known.next_tag)
        });
        if !batching {
            // after what this writer kept, in order
            self.deferred.hand_over();
            if let Err(error) = self.handle.send(output, gate) {
                if let (Some((gate, _)), Some((_, tag))) = (&self.feeds[at].gate, gate) {
                    // not taken: nothing to wait for
                    gate.complete(tag);
                }
                self.index -= 1;
                return Err(error);
            }
            return Ok(key);
        }
        let queued = Queued { output, gate };
        let kept = {
            let mut outputs = self.deferred.outputs.lock();
            outputs.push(queued);
            outputs.len()
        };
        if kept >= DEFERRED_MAX {
            self.deferred.hand_over();
        } else if !self.deferred.listed.load(Ordering::Relaxed) {
            // set and cleared on this thread only (the batch's end runs here)
            self.deferred.listed.store(true, Ordering::Relaxed);
            batch_end::defer(Arc::clone(&self.deferred) as Arc<dyn DeferredOutputs>);
        }
        Ok(key)
    }

    /// [`SinkWriter::write`] of the output `fill` makes, in a buffer the sink gave
    /// back after publishing an earlier output when there is one (no allocation per
    /// output once the first ones went round).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use mongoose_sink::{RunnerConfig, SinkRunner, SinkWriter};
    /// # let runner = SinkRunner::start(Box::new(mongoose_sink::StdoutSink::default()), RunnerConfig::new("out", "stdout")).unwrap();
    /// let mut writer = SinkWriter::new(runner.handle(), Arc::new(|_feed: &str| None));
    /// writer.write_with(|payload| payload.extend_from_slice(b"hello")).unwrap();
    /// ```
    ///
    /// # Errors
    /// As [`SinkWriter::write`].
    pub fn write_with(&mut self, fill: impl FnOnce(&mut Vec<u8>)) -> Result<OutputKey, SendError> {
        if self.spares.is_empty() {
            self.handle.take_spares(&mut self.spares);
        }
        let mut payload = self.spares.pop().unwrap_or_default();
        fill(&mut payload);
        self.write(payload)
    }

    /// Publishes again an output admitted before a crash (an outbox's unsettled output)
    /// under its original key; it holds no input (its input is already in the
    /// processor's durable state). A sink that de-duplicates by key (the file sink)
    /// writes it once.
    ///
    /// # Errors
    /// As [`SinkWriter::write`].
    pub fn republish(&mut self, key: OutputKey, payload: Vec<u8>) -> Result<(), SendError> {
        self.deferred.hand_over();
        self.handle.send(Output::new(key, payload), None)
    }

    /// What the sink has done so far.
    pub fn status(&self) -> crate::SinkStatus {
        self.handle.status()
    }

    /// Why the first output the sink's hold policy keeps is held, if there is one.
    pub fn first_held(&self) -> Option<String> {
        self.handle.first_held()
    }

    /// True when nothing this sink was given is queued, waiting for a retry or held:
    /// every output sent so far is over.
    pub fn is_settled(&self) -> bool {
        let status = self.handle.status();
        status.queued == 0 && status.retrying == 0 && status.held_count == 0
    }

    /// The key of the next output of `delivery`, and the index of its feed's entry.
    fn key_for(&mut self, delivery: DeliveryRef<'_>, writer: u64) -> (OutputKey, usize) {
        let at = self.feed_entry(delivery.feed);
        let same = self.current.is_some_and(|(feed, sequence, attempt)| {
            feed == at && sequence == delivery.sequence && attempt == delivery.attempt
        });
        if !same {
            // a new delivery, or another attempt of one: its outputs count from 0 again,
            // so a retried input makes the same keys
            self.current = Some((at, delivery.sequence, delivery.attempt));
            self.index = 0;
        }
        let key = OutputKey {
            feed: Arc::clone(&self.feeds[at].key_name),
            epoch: delivery.epoch,
            lane: delivery.position.lane,
            position: delivery.position.offset,
            index: self.index,
            writer,
        };
        self.index += 1;
        (key, at)
    }

    /// The index of `feed`'s entry, made the first time the writer sees the feed.
    fn feed_entry(&mut self, feed: &Arc<str>) -> usize {
        if let Some(at) = self
            .feeds
            .iter()
            .position(|known| Arc::ptr_eq(&known.feed, feed) || *known.feed == **feed)
        {
            return at;
        }
        self.feeds.push(FeedGate {
            feed: Arc::clone(feed),
            key_name: Arc::from(&**feed),
            gate: (self.gates)(feed).map(|gate| {
                let id = self.handle.register_gate(Arc::clone(&gate));
                (gate, id)
            }),
            next_tag: 0,
        });
        self.feeds.len() - 1
    }
}
