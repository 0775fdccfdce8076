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
    /// A segment was written for another owner than the one opening the outbox (or the
    /// segments disagree on their owner): another outbox's file was put in this folder.
    /// Nothing on disk was changed.
    #[error(
        "the outbox file {file} belongs to another owner ({found}), not to {expected}: it \
         was copied or moved here from another outbox (another ledger's state folder, or \
         another run's). Nothing on disk was changed. Put back the file that belongs here \
         (from a backup taken with the rest of the state), or start over with a new state"
    )]
    Foreign {
        /// The segment.
        file: PathBuf,
        /// The owner it was written for (hex).
        found: String,
        /// The owner expected (hex), or the owner of the other segments.
        expected: String,
    },
    /// Records the outbox reported durable are gone: the last segment ends (or the
    /// folder has no segment) before the sequence its watermark says was durable. Those
    /// records were never torn writes: an owner may have committed the inputs they
    /// cover. Nothing on disk was changed.
    #[error(
        "the outbox in {dir} reported its records durable through sequence {durable} (its \
         file {watermark}), but {found}: records {first_missing} to {durable} were cut off \
         or deleted after they were written, and their inputs may already be committed. \
         Nothing on disk was changed. Restore the outbox folder from a backup taken with \
         the rest of the state; or, to accept the loss of those records, remove {watermark} \
         and start again"
    )]
    Cut {
        /// The outbox folder.
        dir: PathBuf,
        /// The watermark file.
        watermark: PathBuf,
        /// The highest sequence reported durable.
        durable: u64,
        /// The first missing sequence.
        first_missing: u64,
        /// Where the records end.
        found: String,
    },
    /// The outbox ends before the last record its owner saved elsewhere
    /// ([`crate::OutboxConfig::saved_through`]): its newer records were deleted, or it
    /// was replaced by an older copy. Nothing on disk was changed.
    #[error(
        "the outbox in {dir} ends at record {last_seq}, but its owner saved its records \
         through {saved_through} elsewhere (a snapshot): the records after {last_seq} were \
         deleted, or the folder was replaced by an older copy. Nothing on disk was changed. \
         Restore the outbox folder saved with the rest of the state"
    )]
    Behind {
        /// The outbox folder.
        dir: PathBuf,
        /// What the owner saved.
        saved_through: u64,
        /// Where the outbox ends.
        last_seq: u64,
    },
    /// The outbox's records begin after the record that follows what its owner saved
    /// ([`crate::OutboxConfig::follows_saved`]): the saved state is older than the
    /// outbox, and the records between are gone. Nothing on disk was changed.
    #[error(
        "the outbox in {dir} begins at record {first_seq}, but its owner's saved state holds \
         the records only through {saved_through}: the records between were dropped after a \
         newer state was saved, so the saved state is older than its outbox (an older copy \
         put back?) and applying the rest would skip them. Nothing on disk was changed. \
         Restore the state saved with this outbox, or start the state over"
    )]
    Ahead {
        /// The outbox folder.
        dir: PathBuf,
        /// What the owner saved.
        saved_through: u64,
        /// Where the outbox's records begin.
        first_seq: u64,
    },
    /// The owner's visitor ([`crate::Outbox::open_with`]) refused an admission (its
    /// state is not what the owner writes). Nothing on disk was changed.
    #[error("the outbox file {file} holds at byte {offset} record {seq}, which its owner refuses: {reason}. Nothing on disk was changed")]
    Refused {
        /// The segment.
        file: PathBuf,
        /// Where the record starts.
        offset: u64,
        /// Its sequence.
        seq: u64,
        /// Why the owner refuses it.
        reason: String,
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
