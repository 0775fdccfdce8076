//! The outbox folder's files: segment creation and headers, the folder's lock, and
//! directory syncs.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use mongoose_durable::lock::FileLock;
use mongoose_durable::DurableError;

use crate::format::{segment_file_name, segment_header};
use crate::OutboxError;

/// Creates a segment with its header and makes its name durable.
pub(super) fn create_segment(
    dir: &Path,
    first_seq: u64,
    owner: [u8; 16],
) -> Result<File, OutboxError> {
    let path = dir.join(segment_file_name(first_seq));
    let file = create_segment_file(dir, first_seq, owner)
        .map_err(|source| io_error("create", &path, source))?;
    file.sync_data()
        .map_err(|source| io_error("sync", &path, source))?;
    Ok(file)
}

/// Creates a segment file with its header (not synced).
pub(super) fn create_segment_file(dir: &Path, first_seq: u64, owner: [u8; 16]) -> io::Result<File> {
    let path = dir.join(segment_file_name(first_seq));
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    file.write_all(&segment_header(first_seq, owner))?;
    Ok(file)
}

/// Writes the header of a segment whose header was torn.
pub(super) fn write_header(
    mut file: File,
    path: &Path,
    first_seq: u64,
    owner: [u8; 16],
) -> Result<File, OutboxError> {
    file.write_all(&segment_header(first_seq, owner))
        .map_err(|source| io_error("write", path, source))?;
    Ok(file)
}

/// The name of the lock file in an outbox folder.
const LOCK_FILE: &str = "LOCK";

/// Takes the folder's lock (an exclusive flock on its LOCK file, the durable layer's),
/// or says who has it.
pub(super) fn lock_folder(dir: &Path) -> Result<FileLock, OutboxError> {
    let path = dir.join(LOCK_FILE);
    // a lock can be held for an instant by a process forked from one that just let go
    // of it (the child shares the open file until it execs): the durable layer's one
    // policy waits for that, and a lock still held after it is another outbox's
    match FileLock::acquire(&path) {
        Ok(lock) => Ok(lock),
        Err(DurableError::Locked { .. }) => Err(OutboxError::Locked {
            dir: dir.to_path_buf(),
        }),
        Err(DurableError::Io { action, source, .. }) => Err(io_error(
            if action == "lock" { "lock" } else { "create" },
            &path,
            source,
        )),
        Err(other) => Err(io_error("lock", &path, other.into())),
    }
}

/// Makes the folder's entries durable.
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

pub(super) fn io_error(action: &'static str, path: &Path, source: io::Error) -> OutboxError {
    OutboxError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}
