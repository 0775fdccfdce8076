//! A tailing file source whose pointer is never ahead of processing.
//!
//! [`FileEventSource`] reads a file by bytes, splits it into lines on `\n`, `\r` and
//! `\r\n`, decodes each line as UTF-8 (U+FFFD for bytes that are not), maps it to the
//! feed's item with a data mapper and publishes it with
//! [`SourceOutput::try_publish`](mongoose_core::SourceOutput::try_publish), the position
//! being the byte offset just after the line.
//!
//! With [`ReadStrategy::Commited`] the source keeps a 1,024-byte memory-mapped pointer
//! file beside the input (`<input file name>.readPointer`, layout in [`pointer`]). The
//! pointer is written only by the source's committer, when the output acknowledges that
//! every consumer processed the lines it covers: after a crash the lines after it are
//! delivered again, never skipped. The pointer also holds an epoch (the position space),
//! the input's file key and a fingerprint of its first bytes, so a replaced or truncated
//! input resets it to 0 under a new epoch, while an append never does.
//!
//! A full subscriber queue pauses the source (PAUSE is the default policy of a file
//! feed): it keeps the line and reads nothing more until the queue has room.
//!
//! # Example
//!
//! ```
//! # fn main() {}
//! ```
#![deny(unsafe_code)]

mod error;
mod identity;
pub mod pointer;
mod source;
pub mod split;

pub use error::FileSourceError;
pub use source::{DataMapper, FileEventSource, FileSourceConfig, FileSourceStatus, ReadStrategy};
