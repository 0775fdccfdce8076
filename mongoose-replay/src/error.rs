//! The crate's error type.

use std::path::PathBuf;

use thiserror::Error;

/// Errors of stream keys, codecs and the replay store. Each message says what to do.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// Reading or writing the store's file failed.
    #[error("replay store {path}: {source} (check the path, its permissions and the free space)")]
    Io {
        /// The store's file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Another writer (another process, or another open store in this one) holds the
    /// store's file.
    #[error(
        "replay store {path} is being written by another recorder (its file is locked): stop \
         that one, or record into another path"
    )]
    InUse {
        /// The store's file.
        path: PathBuf,
    },
    /// The file is not a replay store.
    #[error(
        "{path} is not a mongoose replay store ({reason}): pass the path of a recording, \
         or a new path to record into"
    )]
    NotAStore {
        /// The file.
        path: PathBuf,
        /// What is wrong with its head.
        reason: &'static str,
    },
    /// The store was written by a newer build, in a format version this build cannot read.
    #[error(
        "replay store {path} has format version {found}, and this build reads versions up to \
         {supported}: replay it with the mongoose build that recorded it (or a newer one), or \
         record it again with this build"
    )]
    NewerFormat {
        /// The store's file.
        path: PathBuf,
        /// The version in the file's head.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },
    /// RECORD was asked to record into a store that already holds a recording.
    #[error(
        "RECORD refuses replay store {path}: it already holds a recording; record into a new \
         path, or move the old recording away first"
    )]
    AlreadyHoldsRecording {
        /// The store's file.
        path: PathBuf,
    },
    /// The store can be read and replayed but never appended to.
    #[error(
        "replay store {path} is read-only: {reason}; it can still be replayed, but record into \
         a new store"
    )]
    ReadOnly {
        /// The store's file.
        path: PathBuf,
        /// Why it is read-only.
        reason: String,
    },
    /// A stream key was begun twice in one store.
    #[error(
        "stream {key:?} was already begun in replay store {path}: each processor build records \
         under its own key (number builds with StreamKeys)"
    )]
    StreamAlreadyBegun {
        /// The store's file.
        path: PathBuf,
        /// The key.
        key: String,
    },
    /// A stream handle from another store (or another opening of this one).
    #[error(
        "stream handle {handle} does not belong to this opening of replay store {path}: append \
         with the handle its begin() or stream() returned"
    )]
    UnknownStream {
        /// The store's file.
        path: PathBuf,
        /// The handle's stream number.
        handle: u32,
    },
    /// A key that no `(name, ordinal)` produces, such as a legacy key with an unescaped `#`.
    #[error(
        "ambiguous legacy stream key {key:?}: {reason} (a # in a processor name is written ##, \
         and a single # is followed by a build ordinal of 2 or more); record the stream again"
    )]
    InvalidStreamKey {
        /// The key.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// One entry is too large for a frame.
    #[error(
        "an entry of {size} bytes exceeds the replay store's frame limit of {limit} bytes: \
         record that input as Failed (it could not be copied), or journal its feed so it is \
         recorded by sequence instead of inline"
    )]
    FrameTooLarge {
        /// The encoded size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// A codec could not encode or decode an inline payload.
    #[error(
        "the codec could not {action} an inline payload: {reason} (check that the recording \
         and the replay use the same codec for the feed)"
    )]
    Codec {
        /// "encode" or "decode".
        action: &'static str,
        /// The codec's explanation.
        reason: String,
    },
    /// A frame could not be encoded (a bug of this crate).
    #[error("could not encode a replay store frame: {reason} (this is a bug: please report it)")]
    Encode {
        /// The serializer's explanation.
        reason: String,
    },
}
