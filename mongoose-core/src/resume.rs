//! Where a feed resumes: one rule for every source and every consumer kind (book:
//! guarantees/where-a-feed-resumes.md, invariant 8).
//!
//! A source knows its own committed position (a pointer, a tailer's index) and whether
//! it can trust it; its consumers say what they hold of the input ([`Held`]): a saved
//! state with its position (exact: the guard skips what it holds), a sink that records
//! what it wrote (a lower bound), or nothing of their own (a forward into HTTP, TCP,
//! Kafka or stdout, a processor without its guard). The rule:
//!
//! * **A trusted position** resumes where it is, moved back to any consumer's saved
//!   position of the same epoch that is before it (a state restored from an older
//!   copy), and to the start for a consumer whose saved state holds nothing of the feed
//!   (a new or emptied state). A saved position of another epoch past the start is a
//!   state built from another input: refused. Written positions and consumers that keep
//!   nothing never move a trusted position: everything before it was processed by every
//!   consumer that took it.
//! * **No trusted position** (missing, damaged, another input's) resumes under the
//!   epoch of the input's identity at the lowest position any consumer may need: its
//!   saved or written position when that is of this identity, the start when it keeps
//!   nothing or holds positions of another input. A saved position of another epoch past
//!   the start is refused: the state may have been built from this input under an epoch
//!   that was not its identity, and reading it again would apply it twice.
//!
//! Repeats are allowed, a skip never: a consumer that already has a repeated item drops
//! it by its saved position (the guard), by the key its sink recorded, or, downstream,
//! by the output's key, which is the same on every re-read because the epoch is the
//! input's identity, never a counter (invariant 9).
//!
//! ```
//! use mongoose_core::resume::{resume, ConsumerPosition, Held, Trust};
//! use mongoose_core::{Epoch, PositionValue};
//!
//! let identity = Epoch(7);
//! let consumers = [
//!     ConsumerPosition::new("sinks/copy", Held::Written((identity, PositionValue::at(600)))),
//!     ConsumerPosition::new("http/copy", Held::Nothing),
//! ];
//! // the pointer is lost: the HTTP forward keeps no position, so the input is read
//! // from its start, under its identity (the file sink drops what it holds)
//! let at = resume(Trust::Lost, identity, &consumers).unwrap();
//! assert_eq!((at.epoch, at.offset), (identity, 0));
//! // a trusted pointer is not moved by either
//! let at = resume(Trust::Trusted { epoch: identity, offset: 900 }, identity, &consumers).unwrap();
//! assert_eq!(at.offset, 900);
//! ```

use crate::position::{Epoch, PositionValue};

/// What a consumer holds of a feed it consumes, reported to the feed's source before
/// it starts ([`crate::SourceOutput::consumer_positions`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// Its saved state holds the feed up to `(epoch, position)`
    /// ([`crate::Processor::saved_positions`]): exact; `None` when its state holds
    /// nothing of the feed (new or emptied), so it needs the input from its start.
    Saved(Option<(Epoch, PositionValue)>),
    /// Its sink holds every output of the inputs up to `(epoch, position)`
    /// ([`crate::Processor::written_positions`]): a lower bound of what it processed.
    Written((Epoch, PositionValue)),
    /// It keeps no position of its own (a forward into a sink that records nothing, a
    /// processor without its guard): it needs nothing before a trusted position, and
    /// the input from its start without one.
    Nothing,
}

/// A consumer's [`Held`] for the feed it was reported to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerPosition {
    /// Who holds it: `group/processor`.
    pub consumer: String,
    /// What it holds.
    pub held: Held,
}

impl ConsumerPosition {
    /// `consumer`'s `held`.
    pub fn new(consumer: impl Into<String>, held: Held) -> Self {
        ConsumerPosition {
            consumer: consumer.into(),
            held,
        }
    }

    /// The lane its position is of (`None` when it holds none).
    pub fn lane(&self) -> Option<u32> {
        match self.held {
            Held::Saved(Some((_, position))) | Held::Written((_, position)) => Some(position.lane),
            Held::Saved(None) | Held::Nothing => None,
        }
    }
}

/// How far a source trusts its own committed position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trust {
    /// Its own (a pointer of this input, whole): `offset` of `epoch`.
    Trusted {
        /// The epoch it is of.
        epoch: Epoch,
        /// The committed offset.
        offset: u64,
    },
    /// Missing, damaged or another input's.
    Lost,
}

/// Where to resume, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resume {
    /// The epoch to read under.
    pub epoch: Epoch,
    /// The offset to read from.
    pub offset: u64,
    /// The consumer that decided it and what it holds, for the log (`None`: the source's
    /// own position, or nobody needed less).
    pub decided_by: Option<String>,
    /// What was said about each consumer whose position was not used (another input's).
    pub notes: Vec<String>,
}

/// A refusal to resume: a consumer's saved state that cannot be matched with the input
/// without a risk of applying lines twice or skipping them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The consumer.
    pub consumer: String,
    /// The epoch its state holds.
    pub saved_epoch: Epoch,
    /// The offset its state holds.
    pub saved_offset: u64,
    /// The epoch the source would read under.
    pub epoch: Epoch,
}

/// The rule (see the module documentation), for the consumers of one lane of one input
/// whose identity is `identity`, where no other epoch can be told to be another input's.
///
/// # Errors
/// [`Mismatch`] when a consumer's saved state holds a position past the start of
/// another epoch than the one the source would read under.
pub fn resume(
    trust: Trust,
    identity: Epoch,
    consumers: &[ConsumerPosition],
) -> Result<Resume, Mismatch> {
    resume_knowing(trust, identity, consumers, |_| false)
}

/// [`resume`] for a source that can tell another input's epoch: `another_input(epoch)`
/// is true when `epoch` is certainly the identity of another input (a journal made again
/// at its path, another recording, another file), never an older epoch of this one. A
/// consumer whose saved state holds such an epoch takes this input from its start (its
/// lines are new to it) instead of refusing the start.
///
/// # Errors
/// As [`resume`].
pub fn resume_knowing(
    trust: Trust,
    identity: Epoch,
    consumers: &[ConsumerPosition],
    another_input: impl Fn(Epoch) -> bool,
) -> Result<Resume, Mismatch> {
    match trust {
        Trust::Trusted { epoch, offset } => resume_trusted(epoch, offset, consumers),
        Trust::Lost => resume_lost(identity, consumers, another_input),
    }
}

fn resume_trusted(
    epoch: Epoch,
    offset: u64,
    consumers: &[ConsumerPosition],
) -> Result<Resume, Mismatch> {
    let mut at = Resume {
        epoch,
        offset,
        decided_by: None,
        notes: Vec::new(),
    };
    for consumer in consumers {
        let wanted = match consumer.held {
            Held::Saved(None) => 0,
            Held::Saved(Some((saved, position))) if saved == epoch => position.offset,
            // saved under another epoch (an earlier file) while this epoch is at its
            // start: it takes every item of this epoch anyway
            Held::Saved(Some(_)) if offset == 0 => continue,
            // past items of this epoch that it must have processed (a commit never
            // passes what a consumer did not process), yet its state holds another
            // epoch: not built from this input
            Held::Saved(Some((saved, position))) => {
                return Err(Mismatch {
                    consumer: consumer.consumer.clone(),
                    saved_epoch: saved,
                    saved_offset: position.offset,
                    epoch,
                })
            }
            Held::Written(_) | Held::Nothing => continue,
        };
        if wanted < at.offset {
            at.offset = wanted;
            at.decided_by = Some(describe(consumer));
        }
    }
    Ok(at)
}

fn resume_lost(
    identity: Epoch,
    consumers: &[ConsumerPosition],
    another_input: impl Fn(Epoch) -> bool,
) -> Result<Resume, Mismatch> {
    let mut at = Resume {
        epoch: identity,
        offset: u64::MAX,
        decided_by: None,
        notes: Vec::new(),
    };
    for consumer in consumers {
        let wanted = match consumer.held {
            Held::Saved(Some((epoch, position))) | Held::Written((epoch, position))
                if epoch == identity =>
            {
                position.offset
            }
            Held::Saved(Some((epoch, position))) if another_input(epoch) => {
                at.notes.push(format!(
                    "{}'s saved state holds position {} of epoch {epoch}, another input: it takes this one from its start",
                    consumer.consumer, position.offset
                ));
                0
            }
            Held::Saved(Some((epoch, position))) if position.offset > 0 => {
                return Err(Mismatch {
                    consumer: consumer.consumer.clone(),
                    saved_epoch: epoch,
                    saved_offset: position.offset,
                    epoch: identity,
                })
            }
            Held::Written((epoch, position)) => {
                at.notes.push(format!(
                    "{}'s sink holds outputs up to byte {} of epoch {epoch}, another input: it takes this one from its start",
                    consumer.consumer, position.offset
                ));
                0
            }
            Held::Saved(_) | Held::Nothing => 0,
        };
        if wanted < at.offset {
            at.offset = wanted;
            at.decided_by = Some(describe(consumer));
        }
    }
    if at.offset == u64::MAX {
        // no consumer: the start
        at.offset = 0;
    }
    Ok(at)
}

/// `consumer` and what it holds, for a log line.
fn describe(consumer: &ConsumerPosition) -> String {
    match consumer.held {
        Held::Saved(Some((epoch, position))) => format!(
            "{}'s saved state (byte {} of epoch {epoch})",
            consumer.consumer, position.offset
        ),
        Held::Saved(None) => format!(
            "{}'s saved state, which holds nothing of it",
            consumer.consumer
        ),
        Held::Written((epoch, position)) => format!(
            "{}'s sink (outputs up to byte {} of epoch {epoch})",
            consumer.consumer, position.offset
        ),
        Held::Nothing => format!("{}, which keeps no position of its own", consumer.consumer),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: Epoch = Epoch(0x51);
    const OTHER: Epoch = Epoch(0x77);

    fn saved(epoch: Epoch, offset: u64) -> Held {
        Held::Saved(Some((epoch, PositionValue::at(offset))))
    }

    fn written(epoch: Epoch, offset: u64) -> Held {
        Held::Written((epoch, PositionValue::at(offset)))
    }

    fn at(trust: Trust, held: &[Held]) -> Result<(Epoch, u64), Mismatch> {
        let consumers: Vec<ConsumerPosition> = held
            .iter()
            .enumerate()
            .map(|(index, held)| ConsumerPosition::new(format!("g/p{index}"), *held))
            .collect();
        resume(trust, ID, &consumers).map(|at| (at.epoch, at.offset))
    }

    fn trusted(offset: u64) -> Trust {
        Trust::Trusted { epoch: ID, offset }
    }

    #[test]
    fn a_lost_pointer_reads_from_the_start_for_a_consumer_that_keeps_nothing() {
        // a file sink beside an HTTP forward (issue 36.1): the HTTP forward needs all
        assert_eq!(
            at(Trust::Lost, &[written(ID, 600), Held::Nothing]),
            Ok((ID, 0))
        );
        // a ledger without its guard reports nothing: the same
        assert_eq!(
            at(Trust::Lost, &[saved(ID, 600), Held::Nothing]),
            Ok((ID, 0))
        );
        // no consumer at all: the start
        assert_eq!(at(Trust::Lost, &[]), Ok((ID, 0)));
    }

    #[test]
    fn a_lost_pointer_resumes_at_the_lowest_position_of_this_identity() {
        assert_eq!(
            at(Trust::Lost, &[saved(ID, 900), written(ID, 600)]),
            Ok((ID, 600))
        );
        assert_eq!(
            at(Trust::Lost, &[Held::Saved(None), saved(ID, 900)]),
            Ok((ID, 0))
        );
    }

    #[test]
    fn positions_of_another_input_are_not_trusted() {
        // a sink's outputs of another file: that file is not this one (issue 36.4)
        assert_eq!(at(Trust::Lost, &[written(OTHER, 600)]), Ok((ID, 0)));
        // a guarded state of another epoch past its start: refused, never applied twice
        // nor skipped
        assert_eq!(
            at(Trust::Lost, &[saved(OTHER, 600)]),
            Err(Mismatch {
                consumer: "g/p0".to_owned(),
                saved_epoch: OTHER,
                saved_offset: 600,
                epoch: ID,
            })
        );
        assert_eq!(at(Trust::Lost, &[saved(OTHER, 0)]), Ok((ID, 0)));
        // a source that can tell another input's epoch (a journal made again): its
        // lines are new to that state, read from the start
        let consumers = [ConsumerPosition::new("g/p", saved(OTHER, 600))];
        let at = resume_knowing(Trust::Lost, ID, &consumers, |epoch| epoch == OTHER).unwrap();
        assert_eq!((at.epoch, at.offset), (ID, 0));
        assert_eq!(at.notes.len(), 1, "{:?}", at.notes);
    }

    #[test]
    fn a_trusted_pointer_moves_back_only_for_saved_states() {
        assert_eq!(
            at(trusted(900), &[written(ID, 100), Held::Nothing]),
            Ok((ID, 900))
        );
        assert_eq!(at(trusted(900), &[saved(ID, 300)]), Ok((ID, 300)));
        assert_eq!(at(trusted(900), &[Held::Saved(None)]), Ok((ID, 0)));
        // another epoch's state at this epoch's start takes all of it
        assert_eq!(at(trusted(0), &[saved(OTHER, 300)]), Ok((ID, 0)));
        assert!(at(trusted(900), &[saved(OTHER, 300)]).is_err());
    }
}
