//! The exclusive, non-blocking lock on a folder or a file: an `flock(2)` on an open
//! file, held while the file stays open and let go by the kernel when the holder closes
//! it or dies (a SIGKILL included), so a crash never leaves a stale lock.
//!
//! `flock` locks belong to the open file description: a second attempt in the same
//! process is refused as one from another process is. A child forked by another thread
//! shares the description until it execs, so a lock can look held for an instant after
//! its holder let go: [`FileLock::acquire`] (every lock of the server) and
//! [`lock_waiting`] try again for a while ([`RETRIES`] times, [`PAUSE`] apart, about a
//! second) before they report the lock held. A second owner holds it for longer, and is
//! refused.
//! (`File::try_lock` would do, but needs Rust 1.89; the workspace's minimum is 1.86.)

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::DurableError;

/// How many more times [`FileLock::acquire`] and [`lock_waiting`] try a held lock: the
/// one retry policy of the server's locks.
pub const RETRIES: u32 = 50;

/// The pause between two tries of a held lock.
pub const PAUSE: Duration = Duration::from_millis(20);

/// An exclusive lock on a file, held until dropped.
#[derive(Debug)]
pub struct FileLock {
    file: File,
    path: PathBuf,
}

impl FileLock {
    /// Opens (creating it) `path` and takes its lock, waiting about a second
    /// ([`RETRIES`] tries, [`PAUSE`] apart) while it is held: a lock held for an instant
    /// (a child forked while its holder had it, not yet exec'd) is waited for, a second
    /// owner is refused. The way every lock of the server is taken.
    ///
    /// # Errors
    /// As [`FileLock::try_acquire`].
    pub fn acquire(path: &Path) -> Result<FileLock, DurableError> {
        FileLock::acquire_within(path, RETRIES, PAUSE)
    }

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

/// As [`try_lock`], trying again [`RETRIES`] times, [`PAUSE`] apart, while the lock
/// is held (the policy of [`FileLock::acquire`], for a file already open: a file
/// sink's output).
///
/// # Errors
/// As [`try_lock`].
pub fn lock_waiting(file: &File) -> io::Result<bool> {
    for _ in 0..RETRIES {
        if try_lock(file)? {
            return Ok(true);
        }
        std::thread::sleep(PAUSE);
    }
    try_lock(file)
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

    #[test]
    fn a_lock_let_go_within_the_retries_is_taken_and_one_kept_is_refused() {
        let folder = tempfile::tempdir().expect("folder");
        let path = folder.path().join("lock");
        let first = FileLock::try_acquire(&path).expect("first");
        let letting_go = std::thread::spawn(move || {
            std::thread::sleep(PAUSE * 5);
            drop(first);
        });
        FileLock::acquire(&path).expect("taken once the first lets go");
        letting_go.join().expect("thread");
        let kept = FileLock::try_acquire(&folder.path().join("other")).expect("kept");
        let refused = FileLock::acquire(kept.path()).expect_err("kept for good");
        assert!(
            matches!(refused, DurableError::Locked { .. }),
            "{refused:?}"
        );
        let file = File::open(kept.path()).expect("open");
        assert!(!lock_waiting(&file).expect("lock"));
        drop(kept);
        assert!(lock_waiting(&file).expect("free"));
    }
}
