//! An aeron-like archive: publications of length-framed messages, an archiver that
//! records them, and a reader that replays a recording from a position and then
//! follows it live.
//!
//! * **Publications** ([`Publication`]) send messages on a stream id with a session
//!   id: [`UdpPublication`] over UDP (with a retransmit buffer that answers the
//!   archiver's NAKs, and flow control), [`IpcPublication`] over a shared-memory ring
//!   for a publisher on the same machine. A message's position is the byte position
//!   of its frame `[len: u32][payload]` in the stream: each message advances the
//!   stream by `4 + len` (Aeron's term id and offset are `position / term_length` and
//!   `position % term_length`).
//! * The **archiver** ([`Archiver`], run by [`Archiver::run_until`]) records each
//!   `(stream, session)` into a recording: checksummed records in segment files and an
//!   entry in a crash-safe catalog (id, stream, session, start and stop positions,
//!   gaps, torn tails cut). A UDP gap is asked for again (NAK) while later data is
//!   held; a gap the publication no longer has is recorded as a gap and counted,
//!   never skipped silently.
//! * The **reader** ([`RecordingReader`]) replays a recording from a position (the one
//!   it handed out after a message: the position to commit) and then follows the
//!   recording as the archiver appends it, from the same files: no gap and no
//!   duplicate at the hand-over. The recording id is the epoch of its positions.
//!
//! Nothing here blocks: a full ring or flow-control window answers
//! [`Offer::BackPressured`]; a reader that is not polled is paused and the archive is
//! its buffer.
//!
//! # Example
//!
//! ```
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::sync::Arc;
//! use mongoose_archive::{
//!     Archiver, ArchiverConfig, IpcPublication, Offer, Publication, RecordingReader,
//!     RecordingSelector, ReplayEvent,
//! };
//!
//! let dir = tempfile::tempdir()?;
//! let mut config = ArchiverConfig::new(dir.path().join("archive"));
//! config.ipc_dir = Some(dir.path().join("ipc"));
//! let mut archiver = Archiver::open(config)?;
//!
//! let mut publication = IpcPublication::create(&dir.path().join("ipc"), 7, 1)?;
//! for text in ["one", "two", "three"] {
//!     assert!(matches!(publication.offer(text.as_bytes())?, Offer::Accepted { .. }));
//! }
//! publication.close()?;
//! while archiver.do_work()? > 0 || mongoose_archive::list(&dir.path().join("archive"))?.is_empty() {}
//! archiver.do_work()?; // sees the end of the ring and stops the recording
//!
//! let mut reader = RecordingReader::open(
//!     &dir.path().join("archive"),
//!     RecordingSelector::LatestForStream(7),
//!     None,
//! )?;
//! let mut messages = Vec::new();
//! reader.poll(100, |event| {
//!     if let ReplayEvent::Message { position, payload } = event {
//!         messages.push((position, String::from_utf8_lossy(payload).into_owned()));
//!     }
//! })?;
//! assert_eq!(messages[0], (7, "one".to_string())); // 4-byte length + 3 bytes
//! assert_eq!(messages[2], (7 + 7 + 9, "three".to_string()));
//! assert!(reader.is_ended());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

mod archiver;
mod catalog;
mod error;
mod ipc;
mod reader;
mod segment;
mod udp;
mod wire;

pub use archiver::{Archiver, ArchiverConfig, ArchiverCounters, DEFAULT_SEGMENT_BYTES};
pub use catalog::{RecordingDescriptor, StopReason};
pub use error::{ArchiveError, Result};
pub use ipc::{IpcPublication, DEFAULT_RING_CAPACITY};
pub use reader::{describe, list, RecordingReader, RecordingSelector, ReplayEvent};
pub use udp::{LossInjection, UdpPublication, UdpPublicationConfig, DEFAULT_RETRANSMIT_BUFFER};

/// What [`Publication::offer`] did with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Offer {
    /// The message is in the stream; `position` is the stream position after it.
    Accepted {
        /// The stream position after the message.
        position: u64,
    },
    /// The archiver is behind (a full ring or flow-control window): nothing was
    /// sent; offer the message again later.
    BackPressured,
}

/// A publication of length-framed messages on a stream id and a session id.
///
/// The session id must be unique per publication of a stream (as in Aeron: a random
/// one is a good choice); the archiver keys its recordings by `(stream, session)`.
pub trait Publication {
    /// Offers one message. Never blocks.
    fn offer(&mut self, message: &[u8]) -> Result<Offer>;
    /// The stream position after the last accepted message.
    fn position(&self) -> u64;
    /// The stream id.
    fn stream_id(&self) -> u32;
    /// The session id.
    fn session_id(&self) -> u32;
    /// Ends the publication. Returns whether the archiver confirmed it recorded
    /// everything up to the end (a UDP publication waits for that up to its linger
    /// time, answering NAKs meanwhile).
    fn close(&mut self) -> Result<bool>;
}
