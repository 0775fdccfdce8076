//! The identity of an input file: its file key (device and inode on Unix), hashed.
//!
//! Never a file time: an append, or a tool that touches the file, must not look like a
//! replacement (feed-delivery-guarantees §4, review 2, finding 1).

use std::fs::Metadata;

use crate::pointer::fnv1a_continue;

/// A hash of a file's key (device and inode). Never 0.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct FileKey(pub(crate) u64);

/// The key of the file `metadata` describes; `None` on a platform without file keys.
#[cfg(unix)]
pub(crate) fn key_of(metadata: &Metadata) -> Option<FileKey> {
    use std::os::unix::fs::MetadataExt;
    let mut hash = crate::pointer::fnv1a(&metadata.dev().to_be_bytes());
    hash = fnv1a_continue(hash, &metadata.ino().to_be_bytes());
    Some(FileKey(hash.max(1)))
}

/// The key of the file `metadata` describes; `None` on a platform without file keys.
#[cfg(not(unix))]
pub(crate) fn key_of(_metadata: &Metadata) -> Option<FileKey> {
    let _ = fnv1a_continue;
    None
}
