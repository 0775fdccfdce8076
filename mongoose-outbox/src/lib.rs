//! The durable outbox of Mongoose-rs.
//!
//! A processor's state change, the source positions it covers and the outputs it
//! produced are admitted in **one** atomic, checksummed record: the point of no return
//! of book: guarantees/outcomes.md ("Durable admission separates cancel from
//! publish"). Before the record is durable a cancel wins (the input is re-delivered);
//! after it, each output must be classified (published, not published, lost by
//! policy) and, until it is, it is re-published with the same key after a restart.
//!
//! ```text
//! writer (group thread)            syncer thread
//! admit(&Admission) -> seq         waits for a group: group_records records pending,
//!   encodes into a buffer  ------>   or group_micros after the first one; takes all
//!   (short lock, no syscall)         that is pending (groups grow while it syncs):
//!                                  swaps buffers under the lock, then outside it:
//!                                    write(2) the group, fdatasync
//!                                    durable := the group's last seq
//!                                    on_durable(seq)  -> the owner's checkpoint
//! ```
//!
//! The owner commits its feeds only through what is durable: it turns the sequence the
//! [`Outbox::on_durable`] callback reports into a checkpoint's `durable_through`. A
//! write error (a full disk) is returned by the next [`Outbox::admit`] and is never
//! counted durable. After a restart [`Outbox::open`] returns a [`Recovery`]: every
//! admission since the oldest kept segment, the outcomes, and
//! [`Recovery::unsettled`], the admitted outputs with no terminal outcome.
//!
//! ```
//! use mongoose_core::sink::OutputKey;
//! use mongoose_core::Epoch;
//! use mongoose_outbox::{Admission, AdmittedOutput, AdmittedPosition, Outbox, OutboxConfig, Outcome};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let key = OutputKey::new("lines", Epoch(1), 0, 120, 0, 1);
//! let admission = Admission {
//!     state: b"balance=10".to_vec(),
//!     positions: vec![AdmittedPosition { feed: "lines".into(), epoch: Epoch(1), lane: 0, position: 120 }],
//!     outputs: vec![AdmittedOutput { sink: "alerts".into(), key: key.clone(), payload: b"alert".to_vec() }],
//! };
//! let (mut outbox, _) = Outbox::open(OutboxConfig::new(dir.path())).unwrap();
//! let seq = outbox.admit(&admission).unwrap();
//! assert!(outbox.sync().unwrap() >= seq);
//! outbox.close().unwrap();
//!
//! // After a restart, the output has no outcome yet: publish it again, same key.
//! let (mut outbox, recovery) = Outbox::open(OutboxConfig::new(dir.path())).unwrap();
//! assert_eq!(recovery.unsettled()[0].1.key, key);
//! outbox.record_outcomes(&[(key, Outcome::Published)]).unwrap();
//! outbox.close().unwrap();
//! let (_, recovery) = Outbox::open(OutboxConfig::new(dir.path())).unwrap();
//! assert!(recovery.unsettled().is_empty());
//! ```
//!
//! # Threads
//!
//! One writer: [`Outbox::admit`], [`Outbox::record_outcomes`] and
//! [`Outbox::compact`] take `&mut self`. [`Outbox`] is `Send + Sync`, so an owner
//! whose outcomes come from other threads (sink runners) either sends them to the
//! writer's thread or shares the outbox behind a mutex: the lock is then held only
//! while a record is encoded, never across a write or an fdatasync (those are the
//! syncer's).
//!
//! # On disk
//!
//! A folder of segments named by the sequence of their first record,
//! `outbox-{first_seq:020}.log`. A segment is closed once it would grow past
//! `segment_bytes`, or at the next record after [`Outbox::roll`]; [`Outbox::compact`]
//! removes the oldest ones once their admissions are saved elsewhere and their outputs
//! settled. A `LOCK` file, flock'ed while an outbox is open, keeps a second writer out
//! ([`OutboxError::Locked`]); the kernel lets go of it when the process dies. A
//! `DURABLE` file (the watermark) says up to which sequence records were reported
//! durable. All integers are little-endian.
//!
//! A segment is a record log of the durable layer (`mongoose_durable::log`, header
//! and frames as that crate describes them); its records are framed into the writer's
//! group buffer with `log::begin_frame`/`log::finish_frame` and written one group at a
//! time.
//!
//! ```text
//! segment header (format version 3, 63 bytes: the durable layer's header)
//!   magic     4  "MGDH"
//!   length    2  u16 = 63
//!   version   4  u32 = 3
//!   name      1 + 23  "mongoose-outbox-segment"
//!   owner     1 + 24  length 24: the owner's identity (16 bytes, OutboxConfig::owner;
//!                     zeros: none), then first_seq (u64, the same as in the file name)
//!   crc       4  CRC32 (crc32fast) of the 59 bytes before it
//! record (repeated; the durable layer's frame)
//!   length    4  u32, the payload's length (9 ..= 256 MiB)
//!   crc       4  CRC32 of the 4 length bytes, then the payload
//!   payload:
//!     kind    1  1 = admission, 2 = outcomes
//!     seq     8  u64; records are numbered 1, 2, 3 ... across segments, with no gap
//!     body       postcard: an Admission, or a sequence of (OutputKey, Outcome)
//! earlier segments (versions 1 and 2, still read, never appended to)
//!   header    "MGOUTBOX", version u32, first_seq u64, [owner 16 in version 2],
//!             CRC32 of the bytes before it (24 bytes in version 1, 40 in version 2)
//!   record    length u32 (9 ..= 1 GiB), CRC32 of the payload only, payload as above
//! DURABLE (24 bytes, rewritten in place after each group, before anyone is told)
//!   magic     8  "MGDURABL"
//!   version   4  u32 = 1
//!   seq       8  u64: every record up to it was reported durable
//!   crc       4  CRC32 of the 20 bytes before it
//! ```
//!
//! Admissions and outcome records share one sequence, so admissions' sequences rise
//! but are not consecutive when outcomes are recorded between them.
//!
//! What opening does with a record that fails its checks:
//!
//! - cut short, or wrong, at the very end of the last segment with no whole record
//!   after it, and after the last record the watermark says was reported durable: a
//!   torn write (the process died while writing the group). It is cut off, with a WARN
//!   naming the file, the offset and the bytes ([`Recovery::torn`]); no record in it
//!   was ever reported durable.
//! - the same at or before the watermark, or records (or the last segments) the
//!   watermark says were durable missing: [`OutboxError::Cut`]. The owner may have
//!   committed the inputs of those records: they were cut or deleted, not torn.
//! - a segment written for another owner ([`OutboxConfig::owner`]), or segments that
//!   disagree on their owner: [`OutboxError::Foreign`].
//! - anywhere else (a bad record followed by whole ones, a bad record in an older
//!   segment, a bad segment header, a missing segment, a sequence out of order, a
//!   watermark of another length, magic or version): damage. [`Outbox::open`] refuses
//!   with [`OutboxError::Damaged`] naming the file and the offset.
//! - a watermark whose checksum fails (magic and length right): a rewrite in place a
//!   power loss tore. It can only lag the segments (synced before it is written), so it
//!   is taken as absent with a WARN, as in an outbox written before watermarks: every
//!   record is read, only the [`OutboxError::Cut`] check is skipped that once.
//!
//! Each refusal changes nothing on disk.
//!
//! A last segment of the earlier layout (versions 1 and 2) is never appended to: when
//! it holds records, the next record starts a new segment; when it holds none, opening
//! replaces it whole (the durable layer's atomic replace) by a header of this version.
#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    unreachable_pub,
    missing_debug_implementations,
    rust_2018_idioms
)]

mod error;
mod format;
mod outbox;
mod recovery;

use mongoose_core::sink::OutputKey;
use mongoose_core::Epoch;
use serde::{Deserialize, Serialize};

pub use error::OutboxError;
pub use outbox::{Outbox, OutboxConfig, OutboxOwner};
pub use recovery::{read, read_with, AdmissionView, LogSpan, Recovery, TornTail};

/// One atomic admission: a processor's state change, the source positions it covers
/// and the outputs it produced.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admission {
    /// The state change, opaque to the outbox.
    #[serde(serialize_with = "serialize_bytes")]
    pub state: Vec<u8>,
    /// The source positions the admission covers.
    pub positions: Vec<AdmittedPosition>,
    /// The outputs to publish.
    pub outputs: Vec<AdmittedOutput>,
}

/// A source position an admission covers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmittedPosition {
    /// The feed.
    pub feed: String,
    /// The position's epoch.
    pub epoch: Epoch,
    /// The lane (0 for a single-lane feed).
    pub lane: u32,
    /// The position (offset within the lane).
    pub position: u64,
}

/// An output admitted for a sink.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmittedOutput {
    /// The sink's name.
    pub sink: String,
    /// Its de-duplication key.
    pub key: OutputKey,
    /// What is published.
    #[serde(serialize_with = "serialize_bytes")]
    pub payload: Vec<u8>,
}

/// An [`Admission`] from borrowed parts, for [`Outbox::admit_ref`]: it encodes to the
/// same bytes, so it reads back as an [`Admission`].
#[derive(Clone, Copy, Debug, Serialize)]
pub struct AdmissionRef<'a> {
    /// The state change, opaque to the outbox.
    #[serde(serialize_with = "serialize_bytes")]
    pub state: &'a [u8],
    /// The source positions the admission covers.
    pub positions: &'a [AdmittedPositionRef<'a>],
    /// The outputs to publish.
    pub outputs: &'a [AdmittedOutputRef<'a>],
}

/// An [`AdmittedPosition`] from borrowed parts.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct AdmittedPositionRef<'a> {
    /// The feed.
    pub feed: &'a str,
    /// The position's epoch.
    pub epoch: Epoch,
    /// The lane (0 for a single-lane feed).
    pub lane: u32,
    /// The position (offset within the lane).
    pub position: u64,
}

/// An [`AdmittedOutput`] from borrowed parts.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct AdmittedOutputRef<'a> {
    /// The sink's name.
    pub sink: &'a str,
    /// Its de-duplication key.
    pub key: &'a OutputKey,
    /// What is published.
    #[serde(serialize_with = "serialize_bytes")]
    pub payload: &'a [u8],
}

/// A terminal outcome of an admitted output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Outcome {
    /// The target holds it.
    Published,
    /// Verified not held, for good (a permanent refusal).
    NotPublished,
    /// Its retries were spent or it expired, and the policy counted it lost.
    LostByPolicy,
    /// The sink said it is over without saying how: published, or given up and counted
    /// lost by its policy (which reports that loss itself). Terminal like the others.
    Over,
}

/// Writes a byte field in one piece: postcard encodes bytes exactly as a sequence of
/// `u8` (a varint length, then the bytes), so the default `Vec<u8>` deserializer reads
/// it back, without a call per byte.
fn serialize_bytes<S: serde::Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_bytes(bytes)
}

#[cfg(test)]
mod tests {
    /// The owner may share the outbox behind a mutex with its sink threads.
    #[test]
    fn the_outbox_can_be_shared_between_threads() {
        fn send_and_sync<T: Send + Sync>() {}
        send_and_sync::<crate::Outbox>();
        send_and_sync::<crate::Recovery>();
    }
}
