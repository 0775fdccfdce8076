//! Sources: what reads events from the outside world and publishes them into a feed.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{CoreError, PublishRefused};
use crate::position::{Epoch, Position};
use crate::resume::ConsumerPosition;

/// Where a source is relative to its input.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SourceState {
    /// Not started, or has not reported yet.
    Starting,
    /// There is more to read (or the source is paused behind a full queue).
    Behind,
    /// Everything available has been taken; more may come (tailing).
    CaughtUp,
    /// A bounded source ended: nothing more will ever be published.
    EndOfStream,
}

impl SourceState {
    /// The name used in feed status.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceState::Starting => "STARTING",
            SourceState::Behind => "BEHIND",
            SourceState::CaughtUp => "CAUGHT_UP",
            SourceState::EndOfStream => "END_OF_STREAM",
        }
    }
}

/// One input file of a many-file source, as the feed status lists it
/// ([`SourceOutput::report_files`]).
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct FileLag {
    /// The file's lane (`PositionValue::lane` of its items).
    pub lane: u32,
    /// The file's path.
    pub path: String,
    /// The offset committed in its pointer, what a restart resumes from (without a
    /// pointer: the offset read).
    pub committed: u64,
    /// Its size when last looked at.
    pub size: u64,
    /// `size - committed` (0 when the file is shorter than the committed offset).
    pub lag: u64,
}

/// How much a duty cycle did; 0 lets the agent idle.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct WorkDone(pub usize);

/// A source driven by an agent: `start`, then `do_work` on every duty cycle, then
/// `stop`.
///
/// The protocol is split by who may call what (see the crate documentation for an
/// example):
/// * `start` returns what every source must register, as one [`SourceStart`] (its
///   epoch, whether PAUSE is its feed's default, its committer): nothing can be
///   forgotten, and the driver applies it before the first cycle;
/// * while it runs, the source calls its [`SourceOutput`]: it publishes with
///   [`SourceOutput::try_publish`]; on [`TryPublish::Paused`] it keeps the item, reads
///   nothing more and offers it again on its next cycle; on [`TryPublish::Retry`] (a
///   publish nested in a commit of the same feed) it keeps it too, without counting a
///   pause. It reports BEHIND and CAUGHT_UP ([`SourceOutput::report_state`]), a new
///   epoch after a reset ([`SourceOutput::set_epoch`]), and, before it gives part of
///   its input up (a Kafka partition revoked), commits what was processed
///   ([`SourceOutput::commit_processed`]);
/// * only the driver gives the committer what was processed around each cycle and
///   replays paused items: those calls are on the feed the driver holds
///   (`mongoose_delivery::DrivenOutput`), not on the source's [`SourceOutput`].
///
/// Run it with the engine's source driver (`mongoose_delivery::SourceDriver`): the
/// driver marks the agent thread, applies the [`SourceStart`], polls the
/// acknowledgements and replays paused items around each cycle and before and after
/// `stop`, idles and retries failing cycles. A test driving a source by hand calls the
/// driver's `SourceDriver::start_source`, `SourceDriver::cycle` and
/// `SourceDriver::stop_source` instead of `start`, `do_work` and `stop`.
pub trait EventSource: Send {
    /// The source's name (its feed's name, usually).
    fn name(&self) -> &str;

    /// Opens the input. Called once on the source's agent thread. Returns what the
    /// source registers with its feed (its epoch, PAUSE by default, its committer): the
    /// driver applies it before the first cycle.
    fn start(&mut self) -> Result<SourceStart, CoreError>;

    /// One duty cycle: read and publish (the driver commits what was acknowledged
    /// around it).
    fn do_work(&mut self) -> Result<WorkDone, CoreError>;

    /// Closes the input (the driver commits what was processed before and after it).
    fn stop(&mut self) -> Result<(), CoreError>;

    /// Gives the source what wakes its driver's thread: a source that learns of new
    /// input by a notification (inotify) wakes it then. Called once, before `start`.
    fn set_wakeup(&mut self, _wakeup: Arc<crate::Wakeup>) {}

    /// After a cycle that did nothing: how long the driver may park the thread without
    /// a wake, because the source wakes it ([`EventSource::set_wakeup`]) when input
    /// arrives (a safety look after that time covers a lost notification); `None`, the
    /// default, for a source that must be polled (its idle strategy's short parks).
    fn quiet_for(&self) -> Option<std::time::Duration> {
        None
    }
}

/// What every source registers at start, returned by [`EventSource::start`] as one
/// value so that nothing can be forgotten; the source driver applies it to the feed
/// before the first duty cycle.
#[derive(Debug)]
#[must_use = "the driver applies what a source registers at start: return it"]
pub struct SourceStart {
    /// The epoch of the positions published from the start (a source without positions
    /// or epochs: [`Epoch::NONE`]). A later reset of the position space (a replaced
    /// file, a reassigned partition) is [`SourceOutput::set_epoch`].
    pub epoch: Epoch,
    /// PAUSE is the feed's default overload policy (an explicit policy still wins): true
    /// for a re-readable source, which waits instead of dropping.
    pub pause_by_default: bool,
    /// How the source commits what was processed; `None` for a source without a
    /// committer (it pays nothing).
    pub committer: Option<AnyCommitter>,
}

/// A source's committer for any position type: the [`SourceStart`] of a source is the
/// same type whatever its positions, and its feed takes the committer back at its own
/// position type ([`AnyCommitter::into_typed`]).
pub struct AnyCommitter {
    committer: Box<dyn Any + Send>,
    position_type: &'static str,
}

impl AnyCommitter {
    /// A committer of positions `P`.
    pub fn new<P: Position>(committer: impl SourceCommitter<P> + 'static) -> Self {
        AnyCommitter::boxed::<P>(Box::new(committer))
    }

    /// A boxed committer of positions `P`.
    pub fn boxed<P: Position>(committer: Box<dyn SourceCommitter<P>>) -> Self {
        AnyCommitter {
            committer: Box::new(committer),
            position_type: std::any::type_name::<P>(),
        }
    }

    /// The name of the position type it commits.
    pub fn position_type(&self) -> &'static str {
        self.position_type
    }

    /// The committer at its position type `P`, or itself when it commits another type
    /// (a source wired to a feed of other positions: a wiring error).
    pub fn into_typed<P: Position>(self) -> Result<Box<dyn SourceCommitter<P>>, AnyCommitter> {
        let position_type = self.position_type;
        self.committer
            .downcast::<Box<dyn SourceCommitter<P>>>()
            .map(|typed| *typed)
            .map_err(|committer| AnyCommitter {
                committer,
                position_type,
            })
    }
}

impl fmt::Debug for AnyCommitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnyCommitter")
            .field("position_type", &self.position_type)
            .finish_non_exhaustive()
    }
}

/// How a source commits what the engine acknowledged.
///
/// The contract:
/// * **Order.** The engine calls [`SourceCommitter::acknowledged`] for each
///   acknowledged run of items in publish order (never one whose items were not all
///   processed by every consumer they were given to), then [`SourceCommitter::commit`]
///   once per poll, outside the publish lock.
/// * **Threads.** Polls run on the source's agent thread (its driver polls around each
///   duty cycle and once after `stop`). After the sources stopped, the server's ordered
///   shutdown polls again, on the **shutdown thread**, for a committer whose
///   [`SourceCommitter::commits_after_stop`] is true: such a committer must accept calls
///   from another thread than its source's (it is `Send`, and the engine never calls it
///   from two threads at once).
/// * **Epochs.** After the source reset its position space ([`SourceOutput::set_epoch`]
///   with a new epoch: a replaced file, a reassigned partition), acknowledgements of an
///   older epoch may still arrive for items published before the reset. The committer
///   must ignore them: committing an old file's offset into the new file's position
///   would skip or repeat the new file's items.
/// * **Errors.** A failed `commit` keeps what it was given; the engine calls `commit`
///   again on every later poll, even with nothing new acknowledged, until one succeeds.
///   The feed is not settled meanwhile, and a restart re-delivers what the failed commits
///   covered, never skips it.
/// * **Never backwards.** Within one epoch and lane, the committed position never
///   decreases (acknowledgements come in publish order, positions increase).
///
/// ```
/// use mongoose_core::{CoreError, Epoch, SourceCommitter};
///
/// /// Commits the highest offset of the current epoch into `stored`.
/// struct OffsetCommitter {
///     epoch: Epoch,
///     pending: Option<u64>,
///     stored: u64,
/// }
///
/// impl SourceCommitter<u64> for OffsetCommitter {
///     fn acknowledged(&mut self, _sequence: u64, epoch: Epoch, position: u64) {
///         if epoch != self.epoch {
///             return; // an item of the input before the reset: never committed here
///         }
///         debug_assert!(self.pending.is_none_or(|at| position >= at), "never backwards");
///         self.pending = Some(position);
///     }
///
///     fn commit(&mut self) -> Result<(), CoreError> {
///         if let Some(position) = self.pending {
///             // a durable write here; on an error, return it and keep `pending`
///             self.stored = position;
///             self.pending = None;
///         }
///         Ok(())
///     }
/// }
///
/// let mut committer = OffsetCommitter { epoch: Epoch(2), pending: None, stored: 0 };
/// committer.acknowledged(1, Epoch(1), 900); // the old input's item: ignored
/// committer.acknowledged(2, Epoch(2), 40);
/// committer.commit()?;
/// assert_eq!(committer.stored, 40);
/// # Ok::<(), CoreError>(())
/// ```
pub trait SourceCommitter<P: Position>: Send {
    /// Every item up to and including `sequence` (at `position`, in `epoch`) was
    /// processed by every consumer it was given to.
    fn acknowledged(&mut self, sequence: u64, epoch: Epoch, position: P);

    /// Makes the acknowledged position durable (a pointer write, a broker commit).
    ///
    /// `Ok` says that everything acknowledged so far is committed. On an error the
    /// committer keeps what it was given: the engine calls `commit` again on each later
    /// poll (and at stop), even when nothing new was acknowledged, until one succeeds,
    /// and the feed is not settled meanwhile.
    fn commit(&mut self) -> Result<(), CoreError>;

    /// True when the committer can commit again after the source stopped: the server's
    /// ordered shutdown then commits what the groups processed after the feeds stopped.
    fn commits_after_stop(&self) -> bool {
        false
    }
}

/// The result of [`SourceOutput::try_publish`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a paused or retried item must be kept and offered again"]
pub enum TryPublish<T> {
    /// The item was given a sequence number and offered to every queue.
    Published,
    /// A queue has no room, no consumer can take it, the feed is held, or the window
    /// is full: keep the item, read nothing more, offer it again next cycle.
    Paused(T),
    /// The publish is nested in a commit of the same feed (a data mapper publishing
    /// into its own feed): offer it again later. Not counted as a pause.
    Retry(T),
}

impl<T> TryPublish<T> {
    /// True when published.
    pub fn is_published(&self) -> bool {
        matches!(self, TryPublish::Published)
    }
}

/// Why [`SourceOutput::try_publish_batch`] stopped.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a returned item must be kept and offered again"]
pub enum BatchEnd<T, P> {
    /// The producer had nothing more: everything it gave was published.
    Exhausted,
    /// The feed cannot take more now; nothing was taken from the producer that was not
    /// published. Offer the rest next cycle.
    Paused,
    /// This item was taken and could not be published: keep it and offer it again.
    Returned(T, P, Refusal),
}

/// Why an item was returned to its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// See [`TryPublish::Paused`].
    Paused,
    /// See [`TryPublish::Retry`].
    Retry,
}

/// What a running source calls: the feed it publishes into, as the source sees it.
///
/// What only the source driver may call (giving the committer what was processed
/// around each cycle, replaying paused items) and what a source registers at start
/// ([`SourceStart`]) are not here: a source cannot reach them through its output.
pub trait SourceOutput<T, P: Position>: Send + Sync {
    /// Publishes a positioned item, or returns it when the feed cannot take it now.
    fn try_publish(&self, item: T, position: P) -> TryPublish<T>;

    /// Publishes positioned items pulled from `next`, in order, until it returns `None`
    /// or the feed cannot take more. A publisher pulls an item only when it can take
    /// it, and takes its lock once for the whole batch: use it from a source that has
    /// many items ready (a buffer of lines). The default pulls and calls
    /// [`SourceOutput::try_publish`] per item.
    fn try_publish_batch(&self, next: &mut dyn FnMut() -> Option<(T, P)>) -> BatchEnd<T, P> {
        while let Some((item, position)) = next() {
            match self.try_publish(item, position) {
                TryPublish::Published => {}
                TryPublish::Paused(item) => {
                    return BatchEnd::Returned(item, position, Refusal::Paused)
                }
                TryPublish::Retry(item) => {
                    return BatchEnd::Returned(item, position, Refusal::Retry)
                }
            }
        }
        BatchEnd::Exhausted
    }

    /// Publishes a push item (no position): the feed's overload policy decides what a
    /// full queue does. Refused only under BLOCK_WITH_DEADLINE.
    fn publish(&self, item: T) -> Result<(), PublishRefused>;

    /// Caches a positioned item before the start completes; cached items are published
    /// in order once it does.
    fn cache(&self, item: T, position: P);

    /// Records a positioned input that produced no item (a mapper error): nothing will
    /// hold it, so its position is committed once the items before it are. Counted and
    /// logged with `reason`.
    fn filtered(&self, position: P, reason: &str);

    /// Commits what was processed, now: gives the committer everything the consumers
    /// processed so far and commits it, outside the publish lock, on the source's own
    /// thread. It is what a source must do before it gives part of its input up (a
    /// Kafka partition revoked in a rebalance: what was processed of it is committed
    /// before another member takes it over, so that member does not read it again).
    /// The driver commits around every cycle anyway: a source calls this only at such
    /// a hand-over. Returns the number of items acknowledged.
    fn commit_processed(&self) -> usize;

    /// Sets the epoch of the positions published from now on: a reset of the source's
    /// position space (a replaced file, a reassigned partition). The epoch at start is
    /// [`SourceStart::epoch`].
    fn set_epoch(&self, epoch: Epoch);

    /// Reports where the source is, with a reason when behind.
    fn report_state(&self, state: SourceState, detail: Option<&str>);

    /// Bytes after the last terminator that a bounded read ended without publishing.
    fn set_unterminated_bytes(&self, bytes: u64);

    /// A rotated input (the file the source's committed position belongs to, found
    /// renamed, compressed or deleted at a restart) that still held, or may have held,
    /// unread bytes the source cannot read: `bytes` is what can be proven unread, `None`
    /// when the amount is unknown (the file is gone or compressed). The feed is then
    /// reported not lossless. The default does nothing (an output without a status);
    /// the source also logs a WARN naming the file.
    fn report_rotated_unread(&self, file: &str, bytes: Option<u64>) {
        let _ = (file, bytes);
    }

    /// A loss the source knows of: input it will never deliver, such as a gap an archive
    /// recorded (stream bytes the publication no longer had), `what` saying which, with
    /// the bytes lost when known. The feed is then reported not lossless and the loss is
    /// counted in its status. The default does nothing (an output without a status).
    fn report_loss(&self, what: &str, bytes: Option<u64>) {
        let _ = (what, bytes);
    }

    /// The input files of a many-file source (a glob feed), each with its lane,
    /// committed offset, size and lag, for the feed status. Called at most once per
    /// scan or poll interval, never per item. The default does nothing.
    fn report_files(&self, files: &[FileLag]) {
        let _ = files;
    }

    /// What each of the feed's consumers holds of it, reported before the source
    /// starts: its saved state's position ([`crate::Processor::saved_positions`]), what
    /// its sink holds ([`crate::Processor::written_positions`]), or nothing of its own
    /// ([`crate::Held::Nothing`]: every consumer is listed). A source decides where it
    /// resumes from them and its own committed position with
    /// [`crate::resume::resume`], the one rule for every source. Empty when the feed has
    /// no consumer.
    fn consumer_positions(&self) -> Vec<ConsumerPosition> {
        Vec::new()
    }
}
