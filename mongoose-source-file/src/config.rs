//! The configuration of a [`FileEventSource`] ([`ReadStrategy`], [`FileSourceConfig`])
//! and the snapshot of its progress ([`FileSourceStatus`]).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use mongoose_core::{Epoch, SourceState};
use serde::{Deserialize, Serialize};

use crate::error::FileSourceError;
#[cfg(doc)]
use crate::FileEventSource;

/// Where a file source starts and whether it ends.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum ReadStrategy {
    /// Resume at the pointer file's committed offset and tail. The only strategy with a
    /// pointer file. Spelled `COMMITTED` in configuration; `COMMITED`, the Java
    /// original's spelling, is read as an alias (issue 39, item 9).
    #[serde(rename = "COMMITTED", alias = "COMMITED")]
    Committed,
    /// Read from the start and tail.
    #[serde(rename = "EARLIEST")]
    Earliest,
    /// Start at the end and tail: every new line is published (no conflation).
    #[serde(rename = "LATEST")]
    Latest,
    /// Read from the start to the end of the file, then end.
    #[serde(rename = "ONCE_EARLIEST")]
    OnceEarliest,
    /// Start at the end of the file and end there (nothing is read).
    #[serde(rename = "ONCE_LATEST")]
    OnceLatest,
}

impl ReadStrategy {
    /// The configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            ReadStrategy::Committed => "COMMITTED",
            ReadStrategy::Earliest => "EARLIEST",
            ReadStrategy::Latest => "LATEST",
            ReadStrategy::OnceEarliest => "ONCE_EARLIEST",
            ReadStrategy::OnceLatest => "ONCE_LATEST",
        }
    }

    /// True for the bounded strategies (they end with END_OF_STREAM).
    pub fn is_once(self) -> bool {
        matches!(self, ReadStrategy::OnceEarliest | ReadStrategy::OnceLatest)
    }

    /// True when the strategy keeps a pointer file (COMMITED only).
    pub fn has_pointer(self) -> bool {
        matches!(self, ReadStrategy::Committed)
    }
}

impl fmt::Display for ReadStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ReadStrategy {
    type Err = FileSourceError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "COMMITED" | "COMMITTED" => Ok(ReadStrategy::Committed),
            "EARLIEST" => Ok(ReadStrategy::Earliest),
            "LATEST" => Ok(ReadStrategy::Latest),
            "ONCE_EARLIEST" => Ok(ReadStrategy::OnceEarliest),
            "ONCE_LATEST" => Ok(ReadStrategy::OnceLatest),
            other => Err(FileSourceError::UnknownStrategy(other.to_owned())),
        }
    }
}

/// The configuration of a [`FileEventSource`].
#[derive(Clone, Debug)]
pub struct FileSourceConfig {
    /// The source's name (its feed's, usually).
    pub name: String,
    /// The input file.
    pub path: PathBuf,
    /// Where to start, and whether to end.
    pub strategy: ReadStrategy,
    /// Initial size of the read buffer; it grows only to hold a longer line.
    pub read_buffer_bytes: usize,
    /// Bytes read in one duty cycle at most, so acknowledgements are polled and the
    /// pointer committed regularly during a long read.
    pub max_bytes_per_cycle: usize,
    /// File-name globs (`*`, `?`) of the input's rotations, in the input's directory.
    /// Empty: `<name>.*` and `<name>-*`. At a restart, when the path names another file
    /// than the pointer's, the pointer's file is looked for among them (COMMITED only).
    pub rotated: Vec<String>,
    /// The folder of the source's state (its pointer and loss files), created at start.
    /// `None`: beside the input, as `<input>.readPointer`. With a folder, a pointer an
    /// older run left beside the input is adopted (moved, or copied when the input's
    /// folder cannot be written) at start.
    pub state_dir: Option<PathBuf>,
}

impl FileSourceConfig {
    /// A configuration with the default buffer sizes (256 KiB buffer, 4 MiB per cycle).
    pub fn new(name: impl Into<String>, path: impl Into<PathBuf>, strategy: ReadStrategy) -> Self {
        FileSourceConfig {
            name: name.into(),
            path: path.into(),
            strategy,
            read_buffer_bytes: 256 * 1024,
            max_bytes_per_cycle: 4 * 1024 * 1024,
            rotated: Vec::new(),
            state_dir: None,
        }
    }
}

/// A snapshot of a [`FileEventSource`]'s progress.
#[derive(Clone, PartialEq, Eq, Debug, Serialize)]
pub struct FileSourceStatus {
    /// The state last reported.
    pub state: SourceState,
    /// Why, when not caught up.
    pub detail: Option<String>,
    /// The epoch of the positions published now.
    pub epoch: Epoch,
    /// The byte offset after the last line taken (published, filtered or paused).
    pub read_position: u64,
    /// The offset in the pointer file (COMMITED), or 0.
    pub committed_position: u64,
    /// Lines published.
    pub lines_published: u64,
    /// Lines the line mapper refused.
    pub lines_filtered: u64,
    /// Times a publish was paused by a full queue (episodes).
    pub pauses: u64,
    /// Bytes after the last terminator a once read ended without publishing.
    pub unterminated_bytes: u64,
    /// Times the input was reopened (a replacement, rotation, truncation, read error).
    pub reopens: u64,
    /// Times the pointer was reset to 0 under a new epoch.
    pub resets: u64,
    /// Acknowledgements of an old epoch the committer ignored.
    pub ignored_old_acknowledgements: u64,
    /// Rotated files found at a restart (by file key and fingerprint) and read from the
    /// pointer to their end before the file at the path.
    pub rotated_files_finished: u64,
    /// Rotated files that held, or may have held, unread lines the source could not
    /// read (compressed or deleted before it read them): a loss, reported, never silent.
    pub rotated_unread_files: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_is_spelled_committed_in_configuration_and_read_either_way() {
        // the documented spelling is COMMITTED (issue 39, item 9); the Java original's
        // COMMITED (issue 12, item 6) stays an alias
        assert_eq!(ReadStrategy::Committed.to_string(), "COMMITTED");
        assert_eq!(ReadStrategy::Committed.as_str(), "COMMITTED");
        for spelling in ["COMMITED", "COMMITTED"] {
            assert_eq!(
                spelling.parse::<ReadStrategy>().expect("a strategy"),
                ReadStrategy::Committed
            );
            let quoted = format!("\"{spelling}\"");
            let read: ReadStrategy = serde_json::from_str(&quoted).expect("a strategy");
            assert_eq!(read, ReadStrategy::Committed);
        }
        assert_eq!(
            serde_json::to_string(&ReadStrategy::Committed).expect("serialised"),
            "\"COMMITTED\""
        );
    }

    #[test]
    fn every_strategy_reads_back_what_it_writes() {
        for strategy in [
            ReadStrategy::Committed,
            ReadStrategy::Earliest,
            ReadStrategy::Latest,
            ReadStrategy::OnceEarliest,
            ReadStrategy::OnceLatest,
        ] {
            assert_eq!(
                strategy.as_str().parse::<ReadStrategy>().ok(),
                Some(strategy)
            );
            let json = serde_json::to_string(&strategy).expect("serialised");
            assert_eq!(json, format!("\"{strategy}\""));
            assert_eq!(
                serde_json::from_str::<ReadStrategy>(&json).ok(),
                Some(strategy)
            );
        }
        assert!("COMMITTING".parse::<ReadStrategy>().is_err());
    }
}
