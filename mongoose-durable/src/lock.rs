//! The exclusive, non-blocking lock on a folder or a file: an `flock(2)` on an open
//! file, held while the file stays open and let go by the kernel when the holder closes
//! it or dies (a SIGKILL included), so a crash never leaves a stale lock.
//!
//! `flock` locks belong to the open file description: a second attempt in the same
//! process is refused as one from another process is. A child forked by another thread
//! shares the description until it execs, so a lock can look held for an instant after
//! its holder let go: [`FileLock::acquire_within`] tries again for a while.
//! (`File::try_lock` would do, but needs Rust 1.89; the workspace's minimum is 1.86.)

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::DurableError;

/// An exclusive lock on a file, held until dropped.
#[derive(Debug)]
pub struct FileLock {
    file: File,
    path: PathBuf,
}

impl FileLock {
    /// Opens (creating it) `path` and takes its lock without waiting.
    ///
    /// # Errors
    /// [`DurableError::Locked`] when someone holds it (naming the holder when it wrote
    /// itself into the file with [`FileLock::record_holder`]);
    /// [`DurableError::Io`] when the file cannot be opened or locked.
    pub fn try_acquire(path: &Path) -> Result<FileLock, DurableError> {
        FileLock::acquire_within(path, 0, Duration::ZERO)
    }

    /// As [`FileLock::try_acquire`], trying `retries` more times, `pause` apart, while
    /// the lock is held (a lock held for an instant by a forked child is waited for, a
    /// second owner is not).
    ///
    /// # Errors
    /// As [`FileLock::try_acquire`].
    pub fn acquire_within(
        path: &Path,
        retries: u32,
        pause: Duration,
    ) -> Result<FileLock, DurableError> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(DurableError::io("open the lock file", path))?;
        let mut tries = 0;
        loop {
            if try_lock(&file).map_err(DurableError::io("lock", path))? {
                return Ok(FileLock {
                    file,
                    path: path.to_path_buf(),
                });
            }
            if tries >= retries {
                return Err(DurableError::Locked {
                    path: path.to_path_buf(),
                    holder: holder(&mut file),
                });
            }
            tries += 1;
            std::thread::sleep(pause);
        }
    }

    /// Writes this process's id into the lock file, so that one refused names it.
    ///
    /// # Errors
    /// The operating system's (the lock holds all the same).
    pub fn record_holder(&mut self) -> io::Result<()> {
        self.file.set_len(0)?;
        self.file.rewind()?;
        self.file
            .write_all(std::process::id().to_string().as_bytes())
    }

    /// The locked file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Who wrote itself into a lock file: `"the process <pid>"`, or `None`.
fn holder(file: &mut File) -> Option<String> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.read_to_string(&mut text).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| format!("the process {text}"))
}

/// Takes an exclusive `flock` on `file` (already open) without waiting: `true` when
/// taken, `false` when someone holds it. The one `flock` call of the server.
///
/// # Errors
/// The operating system's, for anything but "held".
pub fn try_lock(file: &File) -> io::Result<bool> {
    match rustix::fs::flock(file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(errno) => Err(errno.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_until_the_first_is_dropped() {
        let folder = tempfile::tempdir().expect("folder");
        let path = folder.path().join("lock");
        let mut first = FileLock::try_acquire(&path).expect("first");
        match FileLock::try_acquire(&path) {
            Err(DurableError::Locked { holder: None, .. }) => {}
            other => panic!("{other:?}"),
        }
        first.record_holder().expect("pid");
        let refused =
            FileLock::acquire_within(&path, 2, Duration::from_millis(1)).expect_err("held");
        let message = refused.to_string();
        assert!(
            message.contains(&format!("the process {}", std::process::id())),
            "{message}"
        );
        drop(first);
        FileLock::try_acquire(&path).expect("free again");
    }
}
