//! The outbox's one error type.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// What can go wrong with an outbox.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    /// The configuration cannot work.
    #[error("the outbox configuration is wrong: {0}")]
    Config(String),
    /// A file or the folder could not be read, created or written while opening,
    /// compacting or closing.
    #[error(
        "the outbox cannot {action} {path}: {source}; check that the folder exists, is \
         writable by this user and has free space, then start again"
    )]
    Io {
        /// What it was doing (`read`, `create`, `remove`).
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// Another outbox (in this process or another one) has the folder open.
    #[error(
        "the outbox folder {dir} is in use by another outbox (this process or another \
         one holds its LOCK file): stop the other one first; two writers would corrupt it"
    )]
    Locked {
        /// The outbox folder.
        dir: PathBuf,
    },
    /// A record or a segment header that is not a torn write fails its checks. Nothing
    /// on disk was changed.
    #[error(
        "the outbox file {file} is damaged at byte {offset}: {reason}. Nothing on disk was \
         changed. Keep the folder for inspection (every record before byte {offset} is \
         readable). To start with an empty outbox, stop, move the folder {dir} aside and \
         start again: the feeds then re-deliver from their committed positions, and outputs \
         admitted in the old outbox without a recorded outcome are not re-published from it"
    )]
    Damaged {
        /// The damaged file.
        file: PathBuf,
        /// The byte where the damage starts.
        offset: u64,
        /// What is wrong there.
        reason: String,
        /// The outbox folder.
        dir: PathBuf,
    },
    /// Writing or syncing a group failed (a full disk, an I/O error). Nothing after
    /// `durable_through` was counted durable; the outbox takes no more records.
    #[error(
        "the outbox in {dir} cannot write ({source}): records after sequence \
         {durable_through} are not durable and were not counted; free space on the disk \
         (or fix the device), then restart: recovery keeps every durable record"
    )]
    Write {
        /// The outbox folder.
        dir: PathBuf,
        /// The highest durable sequence when the write failed.
        durable_through: u64,
        /// The error.
        #[source]
        source: Arc<io::Error>,
    },
    /// A record could not be encoded.
    #[error("a record cannot be encoded for the outbox: {0}")]
    Encode(String),
}
