//! The journal's one error type.

use std::io;
use std::path::PathBuf;

/// What can go wrong with a journal, its appender, its tailers and tailer stores. Each
/// message says what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// A file system operation failed.
    #[error("{what} {path}: {source}; check the path, its permissions and free space, then retry")]
    Io {
        /// What was being done (`cannot create the journal directory`, ...).
        what: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The configuration cannot work.
    #[error("invalid journal configuration: {0}")]
    InvalidConfig(String),
    /// Another appender (in this process or another one) holds the journal.
    #[error(
        "another appender holds the journal (lock file {path}); a journal has one \
         appender at a time: stop the other writer, or read with a tailer (readers need \
         no lock)"
    )]
    AppenderHeld {
        /// The lock file.
        path: PathBuf,
    },
    /// A segment file is not a segment of this format, or its header is damaged.
    #[error(
        "{path} is not a readable journal segment ({reason}); move it out of the journal \
         directory if it does not belong there, or restore it from a copy"
    )]
    BadSegment {
        /// The segment file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// An excerpt larger than a segment can hold.
    #[error(
        "an excerpt of {len} bytes cannot fit in a segment (at most {max} bytes with \
         segment_bytes = {segment_bytes}); raise JournalConfig::segment_bytes or split the \
         record"
    )]
    ExcerptTooLarge {
        /// The excerpt's length.
        len: usize,
        /// The largest excerpt a segment of this configuration holds.
        max: usize,
        /// The configured segment size.
        segment_bytes: u64,
    },
    /// The index sought is before the first excerpt still in the journal.
    #[error(
        "excerpt {index} is no longer in the journal (its first excerpt is {first}); seek \
         to {first} or later"
    )]
    IndexBeforeStart {
        /// The index sought.
        index: u64,
        /// The first index the journal holds.
        first: u64,
    },
    /// A tailer store name that is not a plain file name.
    #[error(
        "{name:?} is not a valid tailer name: use 1 to 100 of A-Z a-z 0-9 . _ - and do not \
         start with a dot"
    )]
    InvalidTailerName {
        /// The name given.
        name: String,
    },
    /// A tailer store whose two slots are both unreadable.
    #[error(
        "the tailer store {path} has no readable slot ({reason}); the committed index is \
         unknown: delete the file to re-read the journal from its start (duplicates, no \
         loss), or store an index you know was processed"
    )]
    TailerStoreDamaged {
        /// The store file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// An excerpt that fails its checks with whole excerpts (or a next segment) after
    /// it: damage in the middle of the journal, not a torn tail (only an excerpt cut short
    /// at the very end is one).
    #[error(
        "excerpt {index} of the journal is damaged ({reason}) in segment {segment}, at \
         offset {offset}, and whole excerpts follow it: this is not a torn write at the \
         end, so nothing was cut or changed, and reading stops before it; restore the \
         segment from a copy (`mongoose journal dump DIR` lists which excerpts are whole)"
    )]
    DamagedExcerpt {
        /// The segment file.
        segment: PathBuf,
        /// The excerpt's index.
        index: u64,
        /// Its offset in the segment file, as its index slot gives it.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// The journal's identity file is damaged.
    #[error(
        "the journal identity {path} is damaged ({reason}); the journal it names is \
         unknown: restore the file from a copy, or delete it to make the journal a new one \
         (its readers then read it again from its start in a new epoch: duplicates, no loss)"
    )]
    IdentityDamaged {
        /// The identity file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The tailer store is open elsewhere.
    #[error(
        "the tailer store {path} is open in another tailer (here or in another process); \
         one owner per named tailer: stop the other one, or use another name"
    )]
    TailerStoreHeld {
        /// The store file.
        path: PathBuf,
    },
}

/// The journal's result type.
pub type Result<T> = std::result::Result<T, JournalError>;

impl JournalError {
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        JournalError::Io {
            what,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn bad_segment(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        JournalError::BadSegment {
            path: path.into(),
            reason: reason.into(),
        }
    }
}
