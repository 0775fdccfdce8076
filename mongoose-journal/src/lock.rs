//! An exclusive, non-blocking `flock` on a file: held while the file stays open, released
//! by the kernel when the holder closes it or dies (a SIGKILL included). The lock is the
//! durable layer's ([`mongoose_durable::lock`]); this is the journal's way of asking.

use std::io;
use std::path::Path;

use mongoose_durable::lock::FileLock;
use mongoose_durable::DurableError;

/// Opens (creating it) `path` and takes an exclusive `flock` on it without waiting;
/// `None` if someone holds it. `flock` locks belong to the open file description, so a
/// second attempt in the same process is refused as one in another process is.
pub(crate) fn try_lock(path: &Path) -> io::Result<Option<FileLock>> {
    match FileLock::try_acquire(path) {
        Ok(lock) => Ok(Some(lock)),
        Err(DurableError::Locked { .. }) => Ok(None),
        Err(DurableError::Io { source, .. }) => Err(source),
        Err(other) => Err(other.into()),
    }
}
