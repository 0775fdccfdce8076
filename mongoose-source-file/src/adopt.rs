//! Adopting a state file an older run wrote beside its input (a pointer, a lane
//! registry, a loss file) into the state folder a source is given now
//! ([`FileSourceConfig::state_dir`](crate::FileSourceConfig::state_dir)).
//!
//! Crash-safe: the state folder's copy is complete before the old one is removed (a
//! rename, or a copy to a temporary name, synced and renamed into place), and when
//! both exist the state folder's copy wins (a crash between the two steps, or an old
//! file in a folder the server may not write).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use tracing::{info, warn};

/// What [`adopt`] did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Adopted {
    /// Nothing beside the input to adopt.
    Nothing,
    /// Moved: the old file is gone.
    Moved,
    /// Copied: the old file could not be removed (a folder the server may only read).
    Copied,
    /// Both existed: the state folder's copy was kept, the old one left alone.
    KeptNewer,
}

/// Adopts `old` (a state file beside an input) as `new` (its place in the state
/// folder), creating `new`'s folder. Logs what it did, naming both paths, under
/// `source`.
///
/// # Errors
/// The old file cannot be read, or the new one cannot be written.
pub fn adopt(source: &str, old: &Path, new: &Path) -> io::Result<Adopted> {
    if old == new || fs::symlink_metadata(old).is_err() {
        return Ok(Adopted::Nothing);
    }
    if fs::symlink_metadata(new).is_ok() {
        warn!(source, old = %old.display(), new = %new.display(),
            "a state file beside the input and one in the data folder: the data folder's is used, the old one is left as it is (remove it)");
        return Ok(Adopted::KeptNewer);
    }
    let folder = new.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(folder)?;
    // refused across filesystems, or in a folder the server may not write: copied
    if fs::rename(old, new).is_ok() {
        sync_folder(folder)?;
        info!(source, from = %old.display(), to = %new.display(),
            "adopted a state file an older run wrote beside its input: moved into the data folder");
        return Ok(Adopted::Moved);
    }
    // the copy goes through a replace (temporary, fsync, rename, fsync of the folder),
    // under the `.adopting` name older runs used
    let mut temporary = new.as_os_str().to_owned();
    temporary.push(".adopting");
    let temporary = PathBuf::from(temporary);
    mongoose_durable::replace::replace_through(new, &temporary, &fs::read(old)?)?;
    match fs::remove_file(old) {
        Ok(()) => {
            info!(source, from = %old.display(), to = %new.display(),
                "adopted a state file an older run wrote beside its input: copied into the data folder, the old one removed");
            Ok(Adopted::Moved)
        }
        Err(error) => {
            warn!(source, from = %old.display(), to = %new.display(), %error,
                "adopted a state file an older run wrote beside its input: copied into the data folder; the old one cannot be removed (remove it when you can: it is no longer read)");
            Ok(Adopted::Copied)
        }
    }
}

/// Adopts a pointer file and its loss files (`.losses`, `.losses.reported`,
/// `.losses.damaged`).
///
/// # Errors
/// As [`adopt`].
pub fn adopt_with_losses(source: &str, old: &Path, new: &Path) -> io::Result<Adopted> {
    for suffix in [".losses", ".losses.reported", ".losses.damaged"] {
        let with = |path: &Path| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            PathBuf::from(name)
        };
        adopt(source, &with(old), &with(new))?;
    }
    adopt(source, old, new)
}

/// Syncs a folder's entries (a rename into it is durable).
fn sync_folder(folder: &Path) -> io::Result<()> {
    mongoose_durable::disk::sync_folder(folder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_moved_once_and_a_newer_copy_wins() {
        let dir = tempfile::tempdir().expect("temp dir");
        let old = dir.path().join("in.txt.readPointer");
        let new = dir.path().join("data/feeds/x/in.txt.readPointer");
        fs::write(&old, b"old").expect("write");
        assert_eq!(adopt("x", &old, &new).expect("adopt"), Adopted::Moved);
        assert!(!old.exists());
        assert_eq!(fs::read(&new).expect("read"), b"old");
        assert_eq!(adopt("x", &old, &new).expect("adopt"), Adopted::Nothing);
        fs::write(&old, b"older").expect("write");
        assert_eq!(adopt("x", &old, &new).expect("adopt"), Adopted::KeptNewer);
        assert_eq!(fs::read(&new).expect("read"), b"old");
    }
}
