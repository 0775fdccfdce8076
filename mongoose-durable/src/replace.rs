//! Atomic replace of a file's content: the new content is written to a temporary file
//! in the same folder ([`temporary_path`]: the name with `.tmp` appended), synced, renamed
//! over the file, and the folder synced. A crash at any point leaves the old content or
//! the new one, never a mix, an empty file or a missing one (when there was one); once
//! [`replace`] returns, the new content is durable.
//!
//! A kill between the temporary file's creation and the rename leaves that file behind:
//! [`remove_leftover`] removes it (a recovery calls it before reading the file; the file
//! itself is whole either way).
//!
//! ```
//! let folder = tempfile::tempdir().unwrap();
//! let path = folder.path().join("pointer");
//! mongoose_durable::replace::replace(&path, b"offset 1").unwrap();
//! mongoose_durable::replace::replace(&path, b"offset 2").unwrap();
//! assert_eq!(std::fs::read(&path).unwrap(), b"offset 2");
//! assert!(!mongoose_durable::replace::remove_leftover(&path).unwrap());
//! ```

use std::path::{Path, PathBuf};

use tracing::info;

use crate::disk::{folder_of, Disk, DiskFile, RealDisk};
use crate::DurableError;

/// The temporary file a replace of `path` writes first: `path` with `.tmp` appended.
pub fn temporary_path(path: &Path) -> PathBuf {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    PathBuf::from(temporary)
}

/// Replaces `path`'s content with `bytes`, atomically and durably (see the module).
///
/// # Errors
/// [`DurableError::Io`] naming the step that failed; `path` then still holds its old
/// content (the temporary file may be left: [`remove_leftover`]).
pub fn replace(path: &Path, bytes: &[u8]) -> Result<(), DurableError> {
    let replaced = replace_on(&mut RealDisk, path, bytes);
    if replaced.is_err() {
        // a failed replace keeps no half-written copy taking space (a full disk)
        let _ = std::fs::remove_file(temporary_path(path));
    }
    replaced
}

/// As [`replace`] through the temporary file `temporary` (in `path`'s folder; see
/// [`replace_via`]).
///
/// # Errors
/// As [`replace`].
pub fn replace_through(path: &Path, temporary: &Path, bytes: &[u8]) -> Result<(), DurableError> {
    let replaced = replace_via(&mut RealDisk, path, temporary, bytes);
    if replaced.is_err() {
        let _ = std::fs::remove_file(temporary);
    }
    replaced
}

/// As [`replace`] without the two syncs: a process crash (a kill) still leaves the old
/// content or the new one, never a torn file, but a power loss may lose the replace, or
/// (on some file systems) leave an empty file. For a format its owner configured not to
/// sync (a file sink's `sync = false`, the ledger's unsynced snapshots).
///
/// # Errors
/// As [`replace`].
pub fn replace_unsynced(path: &Path, bytes: &[u8]) -> Result<(), DurableError> {
    let temporary = temporary_path(path);
    let replaced = (|| {
        let mut file = RealDisk
            .create(&temporary)
            .map_err(DurableError::io("create", &temporary))?;
        file.write_all(bytes)
            .map_err(DurableError::io("write", &temporary))?;
        drop(file);
        RealDisk
            .rename(&temporary, path)
            .map_err(DurableError::io("rename into place", path))
    })();
    if replaced.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    replaced
}

/// As [`replace`], on `disk` (a [`RecordingDisk`](crate::crash::RecordingDisk) in the
/// crash-point tests).
///
/// # Errors
/// As [`replace`].
pub fn replace_on<D: Disk>(disk: &mut D, path: &Path, bytes: &[u8]) -> Result<(), DurableError> {
    replace_via(disk, path, &temporary_path(path), bytes)
}

/// As [`replace_on`], through the temporary file `temporary` (which must be in `path`'s
/// folder) instead of [`temporary_path`]: for a format whose temporary name is already
/// on disks in the field.
///
/// # Errors
/// As [`replace`].
pub fn replace_via<D: Disk>(
    disk: &mut D,
    path: &Path,
    temporary: &Path,
    bytes: &[u8],
) -> Result<(), DurableError> {
    debug_assert_eq!(
        folder_of(path),
        folder_of(temporary),
        "a rename across folders"
    );
    let mut file = disk
        .create(temporary)
        .map_err(DurableError::io("create", temporary))?;
    file.write_all(bytes)
        .map_err(DurableError::io("write", temporary))?;
    file.sync().map_err(DurableError::io("sync", temporary))?;
    drop(file);
    disk.rename(temporary, path)
        .map_err(DurableError::io("rename into place", path))?;
    let folder = folder_of(path);
    disk.sync_folder(folder)
        .map_err(DurableError::io("sync the folder", folder))
}

/// Removes the temporary file ([`temporary_path`]) a replace of `path` cut short left;
/// `true` when there was one. Logged: it is only space, the file itself is whole.
///
/// # Errors
/// [`DurableError::Io`] when it is there and cannot be removed.
pub fn remove_leftover(path: &Path) -> Result<bool, DurableError> {
    let temporary = temporary_path(path);
    match std::fs::remove_file(&temporary) {
        Ok(()) => {
            info!(file = %temporary.display(), "removed the temporary file of a replace a stop cut short (the file it was to replace is whole)");
            Ok(true)
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(DurableError::io("remove the leftover", &temporary)(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_replace_leaves_the_new_content_and_no_temporary_file() {
        let folder = tempfile::tempdir().expect("folder");
        let path = folder.path().join("state");
        replace(&path, b"one").expect("replace");
        replace_unsynced(&path, b"two").expect("unsynced");
        assert_eq!(std::fs::read(&path).expect("read"), b"two");
        let adopting = folder.path().join("state.adopting");
        replace_through(&path, &adopting, b"three").expect("through");
        assert_eq!(std::fs::read(&path).expect("read"), b"three");
        assert!(!temporary_path(&path).exists() && !adopting.exists());
    }

    #[test]
    fn a_failed_replace_keeps_the_old_content_and_removes_its_temporary_file() {
        let folder = tempfile::tempdir().expect("folder");
        // a folder where the file should be: the rename fails
        let path = folder.path().join("state");
        std::fs::create_dir(&path).expect("folder in the way");
        std::fs::write(path.join("inside"), b"old").expect("write");
        let error = replace(&path, b"new").expect_err("a folder is in the way");
        assert!(error.to_string().contains("rename into place"), "{error}");
        assert!(
            !temporary_path(&path).exists(),
            "the temporary file is removed"
        );
        assert!(replace_unsynced(&path, b"new").is_err());
        assert!(!temporary_path(&path).exists());
        // a leftover from a kill is removed once
        std::fs::write(temporary_path(&path), b"torn").expect("leftover");
        assert!(remove_leftover(&path).expect("remove"));
        assert!(!remove_leftover(&path).expect("nothing left"));
    }
}
