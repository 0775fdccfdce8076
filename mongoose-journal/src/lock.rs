//! An exclusive `flock` on a file: held while the file stays open, released
//! by the kernel when the holder closes it or dies (a SIGKILL included). The lock is the
//! durable layer's ([`mongoose_durable::lock`]); this is the journal's way of asking.

use std::io;
use std::path::Path;

use mongoose_durable::lock::FileLock;
use mongoose_durable::DurableError;

/// Opens (creating it) `path` and takes an exclusive `flock` on it by the durable
/// layer's one policy ([`FileLock::acquire`]: a lock held for an instant by a forked
/// child is waited for); `None` if someone holds it. `flock` locks belong to the open file description, so a
/// second attempt in the same process is refused as one in another process is.
pub(crate) fn try_lock(path: &Path) -> io::Result<Option<FileLock>> {
    match FileLock::acquire(path) {
        Ok(lock) => Ok(Some(lock)),
        Err(DurableError::Locked { .. }) => Ok(None),
        Err(DurableError::Io { source, .. }) => Err(source),
        Err(other) => Err(other.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_lock_held_for_an_instant_is_waited_for_and_a_kept_one_refused() {
        // a child forked while the last appender had the lock keeps it until it execs
        let folder = tempfile::tempdir().expect("folder");
        let path = folder.path().join("appender.lock");
        let held = FileLock::try_acquire(&path).expect("held");
        let letting_go = std::thread::spawn(move || {
            std::thread::sleep(mongoose_durable::lock::PAUSE * 5);
            drop(held);
        });
        let lock = try_lock(&path)
            .expect("lock")
            .expect("taken once the instant is over");
        letting_go.join().expect("thread");
        assert!(
            try_lock(&path).expect("lock").is_none(),
            "a kept lock is refused"
        );
        drop(lock);
    }
}
