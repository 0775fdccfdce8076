//! An exclusive, non-blocking `flock` on a file: held while the file stays open, released
//! by the kernel when the holder closes it or dies (a SIGKILL included).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// An exclusive lock on a file, held until dropped.
#[derive(Debug)]
pub(crate) struct FileLock {
    file: File,
}

impl FileLock {
    /// Opens (creating it) `path` and takes an exclusive `flock` on it without waiting;
    /// `None` if someone holds it. `flock` locks belong to the open file description, so
    /// a second attempt in the same process is refused as one in another process is.
    pub(crate) fn try_lock(path: &Path) -> io::Result<Option<FileLock>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        // SAFETY: `flock` on a file descriptor we own and keep open; no memory is shared.
        let result = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if result == 0 {
            return Ok(Some(FileLock { file }));
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
            Ok(None)
        } else {
            Err(error)
        }
    }

    /// The locked file.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }
}
