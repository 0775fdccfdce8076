//! Crash points: a [`RecordingDisk`] writes down a durable write's file operations, and
//! [`crash_states`] gives every state the disk may be in after a crash at each point of
//! that sequence, so that a test can run the real recovery over each (SQLite's and
//! redb's way of testing recovery).
//!
//! The media model (what the book's storage chapter assumes of the disk):
//!
//! * a file's content is durable once the file is synced; before that, a crash may keep
//!   all of it, none of it, or a torn last write (a prefix of it, or the whole length
//!   with zeros where the data did not reach the disk);
//! * a folder's entries (a creation, a rename) are durable once the folder is synced;
//!   before that, a crash may keep the old entries or the new ones, independently of
//!   whether the files' contents were kept (a rename whose file was not synced can
//!   survive with an empty file: the ext4 `data=writeback` case).
//!
//! ```
//! use std::collections::BTreeMap;
//! use mongoose_durable::crash::{crash_states, RecordingDisk};
//!
//! let folder = tempfile::tempdir().unwrap();
//! let path = folder.path().join("state");
//! let mut disk = RecordingDisk::default();
//! mongoose_durable::replace::replace_on(&mut disk, &path, b"new").unwrap();
//! let before = BTreeMap::from([(path.clone(), b"old".to_vec())]);
//! for state in crash_states(&before, &disk.operations()) {
//!     state.materialise(folder.path()).unwrap();
//!     mongoose_durable::replace::remove_leftover(&path).unwrap();
//!     let content = std::fs::read(&path).unwrap();
//!     assert!(content == b"old" || content == b"new", "{state:?}");
//! }
//! ```

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::disk::{folder_of, Disk, DiskFile};

/// One file operation, as a [`RecordingDisk`] saw it. Open files are numbered in the
/// order they were opened (`handle`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    /// `path` created (or truncated) as open file `handle`.
    Create {
        /// The file.
        path: PathBuf,
        /// The open file's number.
        handle: usize,
    },
    /// `path` opened for appending as open file `handle`.
    OpenAppend {
        /// The file.
        path: PathBuf,
        /// The open file's number.
        handle: usize,
    },
    /// `bytes` written at the end of open file `handle`.
    Write {
        /// The open file's number.
        handle: usize,
        /// What was written.
        bytes: Vec<u8>,
    },
    /// Open file `handle` synced.
    Sync {
        /// The open file's number.
        handle: usize,
    },
    /// `from` renamed to `to`.
    Rename {
        /// The old name.
        from: PathBuf,
        /// The new name.
        to: PathBuf,
    },
    /// `folder` synced.
    SyncFolder {
        /// The folder.
        folder: PathBuf,
    },
}

/// A [`Disk`] that only writes its operations down (nothing reaches a real file).
#[derive(Debug, Default)]
pub struct RecordingDisk {
    operations: std::rc::Rc<std::cell::RefCell<Vec<Operation>>>,
    next_handle: usize,
}

impl RecordingDisk {
    /// The operations so far, in order.
    pub fn operations(&self) -> Vec<Operation> {
        self.operations.borrow().clone()
    }

    /// How many operations so far (a mark to cut at: everything acknowledged up to here).
    pub fn len(&self) -> usize {
        self.operations.borrow().len()
    }

    /// Whether nothing was done yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn open(&mut self, operation: impl FnOnce(usize) -> Operation) -> RecordingFile {
        let handle = self.next_handle;
        self.next_handle += 1;
        self.operations.borrow_mut().push(operation(handle));
        RecordingFile {
            handle,
            operations: self.operations.clone(),
        }
    }
}

/// A file of a [`RecordingDisk`].
#[derive(Debug)]
pub struct RecordingFile {
    handle: usize,
    operations: std::rc::Rc<std::cell::RefCell<Vec<Operation>>>,
}

impl Disk for RecordingDisk {
    type File = RecordingFile;

    fn create(&mut self, path: &Path) -> io::Result<RecordingFile> {
        let path = path.to_path_buf();
        Ok(self.open(|handle| Operation::Create { path, handle }))
    }

    fn open_append(&mut self, path: &Path) -> io::Result<RecordingFile> {
        let path = path.to_path_buf();
        Ok(self.open(|handle| Operation::OpenAppend { path, handle }))
    }

    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        self.operations.borrow_mut().push(Operation::Rename {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
        });
        Ok(())
    }

    fn sync_folder(&mut self, folder: &Path) -> io::Result<()> {
        self.operations.borrow_mut().push(Operation::SyncFolder {
            folder: folder.to_path_buf(),
        });
        Ok(())
    }
}

impl DiskFile for RecordingFile {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.operations.borrow_mut().push(Operation::Write {
            handle: self.handle,
            bytes: bytes.to_vec(),
        });
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.operations.borrow_mut().push(Operation::Sync {
            handle: self.handle,
        });
        Ok(())
    }
}

/// What a crash may leave: the files and their contents, after the first `after`
/// operations (and, when `torn` says so, part of the next one).
#[derive(Debug, Clone)]
pub struct CrashState {
    /// How many operations were done (all of them when `after` is the sequence's length).
    pub after: usize,
    /// Which of the model's choices this is (for a failure message).
    pub how: String,
    /// The files as they are on the disk after the crash.
    pub files: BTreeMap<PathBuf, Vec<u8>>,
}

impl CrashState {
    /// Makes `folder` hold exactly [`CrashState::files`] (every other file in it is
    /// removed; the files' paths must be in `folder`).
    ///
    /// # Errors
    /// The operating system's.
    pub fn materialise(&self, folder: &Path) -> io::Result<()> {
        for entry in std::fs::read_dir(folder)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                std::fs::remove_dir_all(entry.path())?;
            } else {
                std::fs::remove_file(entry.path())?;
            }
        }
        for (path, bytes) in &self.files {
            std::fs::write(path, bytes)?;
        }
        Ok(())
    }
}

#[derive(Clone, Default)]
struct Inode {
    durable: Vec<u8>,
    written: Vec<u8>,
}

/// The model disk: names and contents, each as written and as durable.
#[derive(Clone, Default)]
struct Model {
    inodes: Vec<Inode>,
    names: BTreeMap<PathBuf, usize>,
    durable_names: BTreeMap<PathBuf, usize>,
    handles: BTreeMap<usize, usize>,
}

impl Model {
    fn new(before: &BTreeMap<PathBuf, Vec<u8>>) -> Model {
        let mut model = Model::default();
        for (path, bytes) in before {
            let inode = model.inodes.len();
            model.inodes.push(Inode {
                durable: bytes.clone(),
                written: bytes.clone(),
            });
            model.names.insert(path.clone(), inode);
            model.durable_names.insert(path.clone(), inode);
        }
        model
    }

    fn apply(&mut self, operation: &Operation) {
        match operation {
            Operation::Create { path, handle } => {
                let inode = match self.names.get(path) {
                    Some(&inode) => {
                        self.inodes[inode].written.clear();
                        inode
                    }
                    None => {
                        self.inodes.push(Inode::default());
                        self.names.insert(path.clone(), self.inodes.len() - 1);
                        self.inodes.len() - 1
                    }
                };
                self.handles.insert(*handle, inode);
            }
            Operation::OpenAppend { path, handle } => {
                let inode = *self.names.get(path).unwrap_or_else(|| {
                    panic!("open_append of {} which is not there", path.display())
                });
                self.handles.insert(*handle, inode);
            }
            Operation::Write { handle, bytes } => {
                let inode = self.handles[handle];
                self.inodes[inode].written.extend_from_slice(bytes);
            }
            Operation::Sync { handle } => {
                let inode = &mut self.inodes[self.handles[handle]];
                inode.durable = inode.written.clone();
            }
            Operation::Rename { from, to } => {
                if let Some(inode) = self.names.remove(from) {
                    self.names.insert(to.clone(), inode);
                }
            }
            Operation::SyncFolder { folder } => {
                self.durable_names
                    .retain(|path, _| folder_of(path) != folder);
                for (path, inode) in &self.names {
                    if folder_of(path) == folder {
                        self.durable_names.insert(path.clone(), *inode);
                    }
                }
            }
        }
    }

    /// The files, with the names as written or as durable, the contents likewise.
    fn files(&self, written_names: bool, written_contents: bool) -> BTreeMap<PathBuf, Vec<u8>> {
        let names = if written_names {
            &self.names
        } else {
            &self.durable_names
        };
        names
            .iter()
            .map(|(path, &inode)| {
                let inode = &self.inodes[inode];
                let bytes = if written_contents {
                    &inode.written
                } else {
                    &inode.durable
                };
                (path.clone(), bytes.clone())
            })
            .collect()
    }
}

/// Every state a crash may leave after each prefix of `operations` (from none to all),
/// starting from `before` (files all durable): for each cut, the four choices of names
/// and contents as written or as durable, and, when the next operation is a write, that
/// write torn after every byte (as a prefix, and as its whole length with zeros after
/// the prefix). Paths must be in one folder per [`Operation::SyncFolder`].
pub fn crash_states(
    before: &BTreeMap<PathBuf, Vec<u8>>,
    operations: &[Operation],
) -> Vec<CrashState> {
    let mut states = Vec::new();
    let mut model = Model::new(before);
    for after in 0..=operations.len() {
        for (written_names, written_contents, how) in [
            (true, true, "everything written reached the disk"),
            (false, false, "only what was synced survived"),
            (
                true,
                false,
                "the names changed, unsynced contents were lost",
            ),
            (
                false,
                true,
                "the contents reached the disk, unsynced names were lost",
            ),
        ] {
            states.push(CrashState {
                after,
                how: how.to_owned(),
                files: model.files(written_names, written_contents),
            });
        }
        if let Some(Operation::Write { handle, bytes }) = operations.get(after) {
            for kept in 0..bytes.len() {
                for zeros in [false, true] {
                    let mut torn = model.clone();
                    let mut partial = bytes[..kept].to_vec();
                    if zeros {
                        partial.resize(bytes.len(), 0);
                    }
                    torn.apply(&Operation::Write {
                        handle: *handle,
                        bytes: partial,
                    });
                    states.push(CrashState {
                        after,
                        how: format!(
                            "the next write torn after {kept} of {} bytes{}",
                            bytes.len(),
                            if zeros { ", zeros after" } else { "" }
                        ),
                        files: torn.files(true, true),
                    });
                }
            }
        }
        if let Some(operation) = operations.get(after) {
            model.apply(operation);
        }
    }
    states
}
