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
    replace_on(&mut RealDisk, path, bytes)
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
