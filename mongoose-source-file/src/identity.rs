//! The identity of an input file: its file key (device and inode on Unix), hashed; and
//! the epoch of its identity ([`identity_epoch_of`]), the position space its lines are
//! keyed under.
//!
//! Never a changing file time: an append, or a tool that touches the file, must not
//! look like a replacement (book: guarantees/epochs-and-identity.md). The birth time
//! never changes once a file exists, so it tells a file made again on a reused inode.
//!
//! The identity rules are pure functions of what was observed, so their table is
//! tested without files: [`reset_reason`] decides, at an open, whether the pointer is
//! kept or reset under a new epoch; [`end_of_file_change`] decides, at the end of the
//! open file, whether it was truncated or the path names another file.

use std::fs::Metadata;
use std::path::Path;

use crate::pointer::{fnv1a_continue, PointerRecord};

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

/// The most leading bytes the identity epoch covers when the first line is longer.
const IDENTITY_BYTES: usize = 4096;

/// The epoch of the input file `file`'s identity: a hash of its file key (device and
/// inode), its birth time where the file system keeps one, and its first line (up to
/// 4 KiB), so the same line of the same file has the same `(epoch, position)` (and its
/// outputs the same keys) on every read of it, whatever became of a pointer
/// (invariant 9). A file made again on a reused inode has another birth time or first
/// line; a file cut and written again in place (copytruncate) another first line.
///
/// `None` until the file holds its whole first line (or 4 KiB): nothing can be read
/// from it before, and the epoch is taken when its first line is.
pub(crate) fn identity_epoch_of(file: &std::fs::File) -> Option<u64> {
    let metadata = file.metadata().ok()?;
    let mut lead = vec![0u8; (metadata.len() as usize).min(IDENTITY_BYTES)];
    crate::positional::read_exact_at(file, &mut lead, 0).ok()?;
    let first = match lead.iter().position(|byte| *byte == b'\n') {
        Some(end) => &lead[..=end],
        None if lead.len() == IDENTITY_BYTES => &lead[..],
        None => return None,
    };
    let mut hash = crate::pointer::fnv1a(b"mongoose input identity 1");
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        hash = fnv1a_continue(hash, &metadata.dev().to_be_bytes());
        hash = fnv1a_continue(hash, &metadata.ino().to_be_bytes());
    }
    let born = metadata
        .created()
        .ok()
        .and_then(|born| born.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |since| since.as_nanos());
    hash = fnv1a_continue(hash, &born.to_be_bytes());
    hash = fnv1a_continue(hash, first);
    Some(tagged(hash))
}

/// The low byte every identity epoch carries ([`is_identity_epoch`]): an epoch drawn at
/// random by an older layout carries it by chance once in 256.
const IDENTITY_TAG: u64 = 0x69;

/// `hash` as an identity epoch: positive as a Java long, the tag in its low byte (never
/// 0, no epoch).
fn tagged(hash: u64) -> u64 {
    ((hash >> 1) & !0xff) | IDENTITY_TAG
}

/// Whether `epoch` is an input file's identity epoch (of this input or of another),
/// rather than one drawn at random by an older layout (whose state cannot be told from
/// this input's).
pub(crate) fn is_identity_epoch(epoch: u64) -> bool {
    epoch & 0xff == IDENTITY_TAG
}

/// The epoch after `previous` for a file whose identity is `identity` but whose
/// content was replaced in place (a truncation with the same first line): a
/// deterministic step from the previous epoch, never the identity itself.
pub(crate) fn next_epoch(identity: u64, previous: u64) -> u64 {
    if identity != previous {
        return identity;
    }
    let hash = fnv1a_continue(identity, &previous.to_be_bytes());
    let next = tagged(hash);
    if next == previous {
        tagged(hash.wrapping_add(1 << 9))
    } else {
        next
    }
}

/// What an open of the input observed, for the identity check of the pointer
/// ([`reset_reason`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Observed {
    /// The opened file's key (from its handle); `None` on a platform without keys.
    pub(crate) key: Option<FileKey>,
    /// The opened file's size.
    pub(crate) size: u64,
    /// Whether the opened file starts with the bytes the pointer fingerprinted (not
    /// looked at when the pointer holds no fingerprint).
    pub(crate) same_leading_bytes: bool,
    /// The pointer's file was found rotated at the restart and was just read to its
    /// end: the file at the path is another file.
    pub(crate) rotated_finished: bool,
    /// Where this run read the file to before a mid-run reopen, if it did.
    pub(crate) read_through: Option<u64>,
}

/// Why the pointer is reset to 0 under a new epoch.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ResetReason {
    /// A rotated file was finished: the file at the path is a new one.
    RotatedFinished,
    /// The file is shorter than the pointer, or than what this run read of it.
    Truncated {
        /// The file's size.
        size: u64,
        /// What was read (or committed) of it.
        read_through: u64,
    },
    /// The file's leading bytes differ from those the pointer fingerprinted.
    OtherLeadingBytes {
        /// Bytes the fingerprint covers.
        fingerprint_length: u64,
    },
    /// Another file key, and no fingerprint to compare.
    OtherKey,
}

impl ResetReason {
    /// The reason as logged and reported, naming the input file.
    pub(crate) fn message(&self, path: &Path) -> String {
        let path = path.display();
        match *self {
            ResetReason::RotatedFinished => {
                format!("the rotated file was read to its end: {path} is a new file")
            }
            ResetReason::Truncated { size, read_through } => format!(
                "the input file {path} was truncated: {size} bytes, shorter than the {read_through} already read"
            ),
            ResetReason::OtherLeadingBytes { fingerprint_length } => format!(
                "the input file {path} was replaced: its first {fingerprint_length} bytes differ from those fingerprinted"
            ),
            ResetReason::OtherKey => format!(
                "the input file {path} was replaced: another file key, and no fingerprint to match"
            ),
        }
    }
}

/// The identity check of a COMMITED open: `None` keeps the pointer (an append, or the
/// same file), a reason resets it to 0 under a new epoch (book: guarantees/epochs-and-identity.md).
///
/// In this order: a rotated file was just finished (the path names the next file,
/// even with the same leading bytes); the file is shorter than the pointer or than
/// what this run read of it (a truncation); the pointer holds a fingerprint and the
/// leading bytes differ (a replacement, whatever the key); no fingerprint and another
/// key (a replacement). The same leading bytes under a new key keep the pointer (a
/// copy renamed into place: see [`new_key_same_bytes`]).
pub(crate) fn reset_reason(record: &PointerRecord, observed: &Observed) -> Option<ResetReason> {
    // a mid-run reopen must not resume before what it read of the same file
    let read_through = observed.read_through.unwrap_or(0).max(record.offset);
    if observed.rotated_finished {
        return Some(ResetReason::RotatedFinished);
    }
    if observed.size < read_through {
        return Some(ResetReason::Truncated {
            size: observed.size,
            read_through,
        });
    }
    if record.fingerprint_length > 0 {
        return (!observed.same_leading_bytes).then_some(ResetReason::OtherLeadingBytes {
            fingerprint_length: record.fingerprint_length,
        });
    }
    match observed.key {
        Some(key) if record.file_key != 0 && record.file_key != key.0 => {
            Some(ResetReason::OtherKey)
        }
        _ => None,
    }
}

/// Whether a kept pointer's file has a new key (an NFS remount, an overlay copy-up, a
/// writer that renames a copy into place): kept because its leading bytes are the
/// fingerprinted ones, worth a warning. Meaningful when [`reset_reason`] gave `None`.
pub(crate) fn new_key_same_bytes(record: &PointerRecord, observed: &Observed) -> bool {
    record.fingerprint_length > 0
        && observed.same_leading_bytes
        && observed
            .key
            .is_some_and(|key| record.file_key != 0 && record.file_key != key.0)
}

/// What the source observed at the end of the open file, before reporting CAUGHT_UP
/// ([`end_of_file_change`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct ObservedAtEnd {
    /// The open file's size by `fstat` of its handle; `None` when that failed.
    pub(crate) open_size: Option<u64>,
    /// Bytes read from the open file.
    pub(crate) read_through: u64,
    /// The open file's key.
    pub(crate) open_key: Option<FileKey>,
    /// What the path names now: `None` when nothing (a rotation in progress),
    /// `Some(None)` a file without a key.
    pub(crate) path_key: Option<Option<FileKey>>,
}

/// A change of the input seen at the end of the open file.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum EndOfFileChange {
    /// The open file is shorter than what was read of it: reopened.
    Truncated {
        /// Its size now.
        size: u64,
        /// What was read of it.
        read_through: u64,
    },
    /// The path names another file: the open one is read to its end, then the new
    /// one is opened.
    Replaced,
}

/// The check at the end of the open file (book: guarantees/epochs-and-identity.md): a
/// truncation of the open file first, then another file key at the path. A path that
/// names nothing is a rotation in progress: no change, the open file is read on.
pub(crate) fn end_of_file_change(observed: &ObservedAtEnd) -> Option<EndOfFileChange> {
    if let Some(size) = observed.open_size {
        if size < observed.read_through {
            return Some(EndOfFileChange::Truncated {
                size,
                read_through: observed.read_through,
            });
        }
    }
    match (observed.open_key, observed.path_key) {
        (Some(open_key), Some(Some(path_key))) if open_key != path_key => {
            Some(EndOfFileChange::Replaced)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    //! The identity rules as a table, without files (issue 12, item 5).
    use std::path::Path;

    use super::*;
    use crate::pointer::PointerRecord;

    const OLD_KEY: FileKey = FileKey(0x1111);
    const NEW_KEY: FileKey = FileKey(0x2222);

    /// A pointer of the file `OLD_KEY` committed at 100 bytes, its first 64 bytes
    /// fingerprinted.
    fn pointer() -> PointerRecord {
        PointerRecord {
            offset: 100,
            epoch: 7,
            file_key: OLD_KEY.0,
            layout_version: crate::pointer::LAYOUT_VERSION,
            fingerprint_length: 64,
            fingerprint: 0xfeed,
            owner: 0,
            lane: 0,
        }
    }

    /// The pointer's own file, grown to 150 bytes, read nowhere yet in this run.
    fn observed() -> Observed {
        Observed {
            key: Some(OLD_KEY),
            size: 150,
            same_leading_bytes: true,
            rotated_finished: false,
            read_through: None,
        }
    }

    #[test]
    fn an_append_keeps_the_pointer() {
        assert_eq!(reset_reason(&pointer(), &observed()), None);
        // at exactly the pointer's size: nothing appended, nothing lost
        let same_size = Observed {
            size: 100,
            ..observed()
        };
        assert_eq!(reset_reason(&pointer(), &same_size), None);
        assert!(!new_key_same_bytes(&pointer(), &observed()));
    }

    #[test]
    fn a_file_shorter_than_the_pointer_was_truncated() {
        let truncated = Observed {
            size: 99,
            ..observed()
        };
        assert_eq!(
            reset_reason(&pointer(), &truncated),
            Some(ResetReason::Truncated {
                size: 99,
                read_through: 100
            })
        );
        // a mid-run reopen: shorter than what this run read of it, though not than the
        // pointer
        let reread = Observed {
            size: 120,
            read_through: Some(130),
            ..observed()
        };
        assert_eq!(
            reset_reason(&pointer(), &reread),
            Some(ResetReason::Truncated {
                size: 120,
                read_through: 130
            })
        );
        // a reopen before the pointer never resumes before it
        let behind = Observed {
            size: 99,
            read_through: Some(50),
            ..observed()
        };
        assert_eq!(
            reset_reason(&pointer(), &behind),
            Some(ResetReason::Truncated {
                size: 99,
                read_through: 100
            })
        );
    }

    #[test]
    fn other_leading_bytes_are_a_replacement_whatever_the_key() {
        for key in [Some(OLD_KEY), Some(NEW_KEY), None] {
            let replaced = Observed {
                key,
                same_leading_bytes: false,
                ..observed()
            };
            assert_eq!(
                reset_reason(&pointer(), &replaced),
                Some(ResetReason::OtherLeadingBytes {
                    fingerprint_length: 64
                }),
                "key {key:?}"
            );
        }
    }

    #[test]
    fn another_key_without_a_fingerprint_is_a_replacement() {
        let unfingerprinted = PointerRecord {
            fingerprint_length: 0,
            fingerprint: 0,
            ..pointer()
        };
        let replaced = Observed {
            key: Some(NEW_KEY),
            same_leading_bytes: false,
            ..observed()
        };
        assert_eq!(
            reset_reason(&unfingerprinted, &replaced),
            Some(ResetReason::OtherKey)
        );
        // the same key: kept (what the leading bytes hold does not matter without a
        // fingerprint)
        let same = Observed {
            same_leading_bytes: false,
            ..observed()
        };
        assert_eq!(reset_reason(&unfingerprinted, &same), None);
    }

    #[test]
    fn the_same_leading_bytes_under_a_new_key_keep_the_pointer() {
        // an NFS remount, an overlay copy-up, a copy renamed into place
        let copied = Observed {
            key: Some(NEW_KEY),
            ..observed()
        };
        assert_eq!(reset_reason(&pointer(), &copied), None);
        assert!(new_key_same_bytes(&pointer(), &copied));
    }

    #[test]
    fn without_a_key_only_size_and_leading_bytes_decide() {
        let keyless = Observed {
            key: None,
            ..observed()
        };
        assert_eq!(reset_reason(&pointer(), &keyless), None);
        assert!(!new_key_same_bytes(&pointer(), &keyless));
        let unfingerprinted = PointerRecord {
            fingerprint_length: 0,
            fingerprint: 0,
            ..pointer()
        };
        assert_eq!(reset_reason(&unfingerprinted, &keyless), None);
        // a pointer that never knew its file's key (new, or resumed from the consumers'
        // saved positions) takes the key it finds
        let keyless_pointer = PointerRecord {
            file_key: 0,
            ..unfingerprinted
        };
        let any_key = Observed {
            key: Some(NEW_KEY),
            ..observed()
        };
        assert_eq!(reset_reason(&keyless_pointer, &any_key), None);
        assert!(!new_key_same_bytes(&keyless_pointer, &any_key));
    }

    #[test]
    fn after_a_rotated_file_was_finished_the_file_at_the_path_is_new() {
        // even with the same leading bytes (a fixed preamble) and a size past the
        // pointer: the pointer named the rotated file
        let next = Observed {
            key: Some(NEW_KEY),
            rotated_finished: true,
            ..observed()
        };
        assert_eq!(
            reset_reason(&pointer(), &next),
            Some(ResetReason::RotatedFinished)
        );
        // it wins over a truncation
        let short = Observed { size: 3, ..next };
        assert_eq!(
            reset_reason(&pointer(), &short),
            Some(ResetReason::RotatedFinished)
        );
    }

    #[test]
    fn a_truncation_is_named_before_a_replacement() {
        let both = Observed {
            key: Some(NEW_KEY),
            size: 10,
            same_leading_bytes: false,
            ..observed()
        };
        assert_eq!(
            reset_reason(&pointer(), &both),
            Some(ResetReason::Truncated {
                size: 10,
                read_through: 100
            })
        );
    }

    #[test]
    fn the_reasons_name_the_file_and_what_changed() {
        let path = Path::new("/var/log/in.log");
        assert_eq!(
            ResetReason::Truncated { size: 10, read_through: 100 }.message(path),
            "the input file /var/log/in.log was truncated: 10 bytes, shorter than the 100 already read"
        );
        assert_eq!(
            ResetReason::OtherLeadingBytes { fingerprint_length: 64 }.message(path),
            "the input file /var/log/in.log was replaced: its first 64 bytes differ from those fingerprinted"
        );
        assert_eq!(
            ResetReason::OtherKey.message(path),
            "the input file /var/log/in.log was replaced: another file key, and no fingerprint to match"
        );
        assert_eq!(
            ResetReason::RotatedFinished.message(path),
            "the rotated file was read to its end: /var/log/in.log is a new file"
        );
    }

    /// At the end of the open file, 100 bytes read, the path naming it.
    fn at_end() -> ObservedAtEnd {
        ObservedAtEnd {
            open_size: Some(100),
            read_through: 100,
            open_key: Some(OLD_KEY),
            path_key: Some(Some(OLD_KEY)),
        }
    }

    #[test]
    fn at_the_end_of_the_file_an_unchanged_path_is_caught_up() {
        assert_eq!(end_of_file_change(&at_end()), None);
        // grown since the read: read on, nothing changed
        let grown = ObservedAtEnd {
            open_size: Some(200),
            ..at_end()
        };
        assert_eq!(end_of_file_change(&grown), None);
        // the path names nothing: a rotation in progress, the open file is read on
        let moved = ObservedAtEnd {
            path_key: None,
            ..at_end()
        };
        assert_eq!(end_of_file_change(&moved), None);
        // no keys to compare
        let keyless = ObservedAtEnd {
            open_key: None,
            path_key: Some(None),
            ..at_end()
        };
        assert_eq!(end_of_file_change(&keyless), None);
        // the open handle cannot be fstat-ed: the path decides
        let unknown_size = ObservedAtEnd {
            open_size: None,
            ..at_end()
        };
        assert_eq!(end_of_file_change(&unknown_size), None);
    }

    #[test]
    fn at_the_end_of_the_file_a_shorter_open_file_was_truncated() {
        let truncated = ObservedAtEnd {
            open_size: Some(40),
            path_key: Some(Some(NEW_KEY)),
            ..at_end()
        };
        assert_eq!(
            end_of_file_change(&truncated),
            Some(EndOfFileChange::Truncated {
                size: 40,
                read_through: 100
            })
        );
    }

    #[test]
    fn at_the_end_of_the_file_another_key_at_the_path_is_a_replacement() {
        let replaced = ObservedAtEnd {
            path_key: Some(Some(NEW_KEY)),
            ..at_end()
        };
        assert_eq!(
            end_of_file_change(&replaced),
            Some(EndOfFileChange::Replaced)
        );
    }
}
