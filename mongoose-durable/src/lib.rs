//! The one durable-file layer of Mongoose-rs: every file the server keeps is written
//! and recovered through it (invariant 10).
//!
//! * [`replace`]: atomic replace of a file's content (a temporary file in the same
//!   folder, synced, renamed over the file, the folder synced), and the removal of the
//!   temporary file a kill left behind;
//! * [`lock`]: the exclusive, non-blocking lock on a folder or a file (`flock`), saying
//!   who holds it when refused;
//! * [`log`]: a checksummed append-only record log whose torn tail is cut and reported,
//!   and whose damage in the middle is refused, never skipped;
//! * [`header`]: a small header with a format's name, version and owner, checked on
//!   open;
//! * [`snapshot`]: a whole state replaced at once, with its header, the last log record
//!   it holds and a checksum of its body (the aggregate processor's state);
//! * [`disk`] and [`crash`]: the file operations behind a trait, and a recording of them
//!   that a test cuts after every operation to check what a crash leaves.
//!
//! It sits one layer above `mongoose-core` (which stays free of I/O) and below every
//! crate that keeps a file.
//!
//! Where it is used (each format moved with a reader for its files already in the
//! field; the formats that stay off [`log`] on purpose, written in place, are listed in
//! the book's storage chapter, "Formats that stay off the layer"):
//!
//! * the loss file (`mongoose-source-file/src/losses.rs`), the archive connector's
//!   pointer, the Kafka epoch file's topic id, the audit capture's records file and
//!   sidecar (`mongoose-audit/src/capture/`), the archive's catalog, the file sink's
//!   state log (`mongoose-sink/src/file/state.rs`, owned by its state id), the lane
//!   registry (`mongoose-source-file/src/lanes.rs`, one record, owned by its glob), the
//!   outbox's segments (`mongoose-outbox`, framed in its group buffer with
//!   [`log::begin_frame`]) and the archive's segments (`mongoose-archive/src/segment/`,
//!   owned by their recording's identity, framed in the archiver's batch buffer, read by
//!   live readers with [`log::read_frame`]) are [`log`]s with a [`header`]; the replay
//!   store (`mongoose-replay`) has the [`header`] and the [`log`]'s frames, with its own
//!   recovery (read up to a torn or damaged frame, then read-only);
//! * every `flock` of the server, by one retry policy ([`lock::FileLock::acquire`]):
//!   the data folder's lock, the outbox's `LOCK`, the journal's appender lock and
//!   tailer stores, the archive's lock, a file sink's output, a replay store's file;
//! * every atomic replace: the lane registry, the loss file's rewrite, the adoption of
//!   an older run's state files (source and sink), the file sink's state (its
//!   compaction, [`log::RecordLog::rewrite`]), the control
//!   audit's export and manifest, the ledger's snapshot, the archive connector's
//!   pointer, the creation of a Kafka epoch file and of an archive's segment.
//!
//! ```
//! use mongoose_durable::header::Header;
//! use mongoose_durable::log::RecordLog;
//!
//! let folder = tempfile::tempdir().unwrap();
//! let _lock = mongoose_durable::lock::FileLock::try_acquire(&folder.path().join("LOCK")).unwrap();
//!
//! // a small state file, replaced whole
//! let pointer = folder.path().join("pointer");
//! mongoose_durable::replace::replace(&pointer, b"offset 120").unwrap();
//! assert_eq!(std::fs::read(&pointer).unwrap(), b"offset 120");
//!
//! // a log of records, with a header naming its format and owner
//! let header = Header::new("example-log", 1, b"input-7".to_vec());
//! let path = folder.path().join("events.log");
//! let (mut log, recovery) = RecordLog::open_or_create(&path, &header).unwrap();
//! assert!(recovery.records.is_empty());
//! log.append(b"first").unwrap();
//! log.append(b"second").unwrap();
//! log.sync().unwrap(); // both are committed now
//! drop(log);
//! let (_, recovery) = RecordLog::open_or_create(&path, &header).unwrap();
//! assert_eq!(recovery.records, vec![b"first".to_vec(), b"second".to_vec()]);
//! assert_eq!(recovery.torn_tail, None);
//! ```

#![forbid(unsafe_code)]

pub mod crash;
pub mod disk;
mod error;
pub mod header;
pub mod lock;
pub mod log;
pub mod replace;
pub mod snapshot;

pub use error::DurableError;
