//! The file operations a durable write is made of, behind a trait: [`RealDisk`] does
//! them, [`RecordingDisk`](crate::crash::RecordingDisk) writes them down so that a test
//! can cut the sequence after each one and see what a crash would leave
//! ([`crash`](crate::crash)).
//!
//! Only the operations whose order matters for a crash are here: create, open for
//! append, write, sync, rename, sync of a folder. Reading and recovery work on real
//! files only.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// A place files are written to.
pub trait Disk {
    /// An open file of this disk.
    type File: DiskFile;

    /// Creates `path` for writing, truncating it when it exists.
    ///
    /// # Errors
    /// The operating system's.
    fn create(&mut self, path: &Path) -> io::Result<Self::File>;

    /// Opens the existing `path` for appending at its end.
    ///
    /// # Errors
    /// The operating system's (`NotFound` when it is not there).
    fn open_append(&mut self, path: &Path) -> io::Result<Self::File>;

    /// Renames `from` to `to`, replacing `to` (atomic: a reader sees one or the other).
    ///
    /// # Errors
    /// The operating system's.
    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()>;

    /// Makes `folder`'s entries (creations, renames) durable.
    ///
    /// # Errors
    /// The operating system's.
    fn sync_folder(&mut self, folder: &Path) -> io::Result<()>;
}

/// A file open for writing on a [`Disk`].
pub trait DiskFile {
    /// Writes all of `bytes` at the file's end (one write: a crash may tear it).
    ///
    /// # Errors
    /// The operating system's.
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()>;

    /// Makes what was written durable (`fsync`).
    ///
    /// # Errors
    /// The operating system's.
    fn sync(&mut self) -> io::Result<()>;
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealDisk;

impl Disk for RealDisk {
    type File = File;

    fn create(&mut self, path: &Path) -> io::Result<File> {
        File::create(path)
    }

    fn open_append(&mut self, path: &Path) -> io::Result<File> {
        OpenOptions::new().append(true).open(path)
    }

    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn sync_folder(&mut self, folder: &Path) -> io::Result<()> {
        sync_folder(folder)
    }
}

impl DiskFile for File {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        Write::write_all(self, bytes)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.sync_all()
    }
}

/// Makes `folder`'s entries durable (`fsync` of the folder; `""` is the current one).
///
/// # Errors
/// The operating system's.
pub fn sync_folder(folder: &Path) -> io::Result<()> {
    let folder = if folder.as_os_str().is_empty() {
        Path::new(".")
    } else {
        folder
    };
    File::open(folder)?.sync_all()
}

/// The folder `path` is in (`.` for a bare name).
pub(crate) fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => folder,
        _ => Path::new("."),
    }
}
