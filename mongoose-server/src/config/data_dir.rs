//! The data folder (`data_dir`): where the server keeps what it writes for a feed or a
//! sink, apart from inputs and outputs (as Vector's `data_dir` or Filebeat's
//! `path.data`), so a log folder the server may only read can be tailed.
//!
//! ```text
//! <data_dir>/lock                                     held by the running server
//! <data_dir>/feeds/<feed>-<key>/<file>.readPointer    a file feed's pointer (+ .losses)
//! <data_dir>/feeds/<feed>-<key>/<feed>.lanes          a glob feed's lane registry
//! <data_dir>/sinks/<sink>-<key>/<file>.sinkstate      a file sink's state
//! ```
//!
//! `<key>` is the first 12 hex digits of the SHA-256 of the input's (or output's)
//! canonical path ([`canonical_path`]: its folder with symlinks and `..` resolved, its
//! file name as written; a glob's pattern as written): two feeds never share a folder,
//! one input reached by two spellings of its path (`sib/../app/m.toml`, a symlinked
//! folder) keeps one, and a feed renamed or pointed at another file starts a new one
//! (the old folder is named at start, to move by hand when the change was only a
//! rename). State kept under another spelling of the path (an older release keyed it
//! on the path as spelled) is adopted at the start, or refused when there are two
//! (book: operating/data-folder.md).

use std::path::{Component, Path, PathBuf};

use mongoose_durable::lock::FileLock;
use mongoose_durable::DurableError;
use sha2::{Digest, Sha256};
use tracing::warn;

use crate::config::{ServerConfig, SinkConfig};
use crate::error::ServerError;

/// The default `data_dir`: `data`, beside the config file.
pub fn default_data_dir() -> PathBuf {
    PathBuf::from("data")
}

/// The folder name of a feed's or a sink's state: its name (a `/` or `\` as `_`), a
/// dash and the first 12 hex digits of the SHA-256 of the [`canonical_path`] of
/// `path`, so every spelling of one path gives one key.
pub fn state_key(name: &str, path: &Path) -> String {
    key_of(name, &canonical_path(path))
}

/// The key [`state_key`] gave before it resolved paths (releases before issue 36): of
/// the absolute path as spelled (`..` and symlinks kept). Only to find, and adopt,
/// the state an older run kept under it.
pub fn state_key_as_spelled(name: &str, path: &Path) -> String {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    key_of(name, &absolute)
}

/// `<name>-<12 hex digits of the SHA-256 of path>`.
fn key_of(name: &str, path: &Path) -> String {
    let digest = Sha256::digest(path.as_os_str().as_encoded_bytes());
    let hex: String = digest[..6]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("{}-{hex}", folder_name(name))
}

/// A feed's or sink's name as the first part of its state folder's name (a `/` or
/// `\` as `_`).
pub(crate) fn folder_name(name: &str) -> String {
    name.chars()
        .map(|c| if c == '/' || c == '\\' { '_' } else { c })
        .collect()
}

/// The path an input or output is keyed by: absolute, its folder resolved
/// ([`canonical_folder`]: symlinks and `..`) and its file name as written. The file
/// name itself is not resolved: an input that is a symlink is what the source opens
/// and follows at every rotation (`current.log -> app-7.log`), so resolving it would
/// give a new state folder each time the link is moved. A path ending in `..` (no
/// file name) is resolved whole.
pub fn canonical_path(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    match (absolute.parent(), absolute.file_name()) {
        (Some(folder), Some(name)) => canonical_folder(folder).join(name),
        _ => canonical_folder(&absolute),
    }
}

/// `folder` made absolute with its symlinks and `..` resolved: `std::fs::canonicalize`
/// of it when it exists, else of its nearest existing ancestor, the rest of it
/// appended (a `..` in the rest drops the component before it, as the folders it
/// names do not exist yet).
pub fn canonical_folder(folder: &Path) -> PathBuf {
    let absolute = std::path::absolute(folder).unwrap_or_else(|_| folder.to_path_buf());
    for ancestor in absolute.ancestors() {
        let Ok(mut resolved) = std::fs::canonicalize(ancestor) else {
            continue;
        };
        let rest = absolute.strip_prefix(ancestor).unwrap_or(Path::new(""));
        for component in rest.components() {
            match component {
                Component::Normal(part) => resolved.push(part),
                Component::ParentDir => {
                    resolved.pop();
                }
                Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
            }
        }
        return resolved;
    }
    absolute
}

impl ServerConfig {
    /// The data folder, resolved against the config file's folder (as spelled).
    pub fn data_folder(&self) -> PathBuf {
        self.resolve(&self.data_dir)
    }

    /// The data folder the server locks and keeps its state in: [`Self::data_folder`]
    /// with its symlinks and `..` resolved ([`canonical_folder`]), so two spellings of
    /// one folder (a symlink to it among them) are one folder, and a symlink moved
    /// while the server runs moves nothing it keeps.
    pub fn canonical_data_folder(&self) -> PathBuf {
        canonical_folder(&self.data_folder())
    }

    /// Whether the server keeps anything in the data folder: a file feed with a pointer
    /// (a glob's too) or a file sink. A server that keeps nothing there neither makes
    /// nor locks it.
    pub fn keeps_state(&self) -> bool {
        self.feeds
            .iter()
            .any(|feed| feed.is_file() && feed.read_strategy.has_pointer())
            || self.sinks.iter().any(|sink| sink.kind == "file")
    }

    /// The state folder of configured feed `index` (a file feed's pointers, lane
    /// registry and loss files): `<data_dir>/feeds/<feed>-<key of its path>`.
    pub fn feed_state_dir(&self, index: usize) -> PathBuf {
        let feed = &self.feeds[index];
        self.canonical_data_folder()
            .join("feeds")
            .join(state_key(&feed.name, &self.resolve(&feed.path)))
    }

    /// The state file of file sink `sink` writing `output` (resolved):
    /// `<data_dir>/sinks/<sink>-<key of output>/<output file name>.sinkstate`.
    pub fn sink_state_file(&self, sink: &SinkConfig, output: &Path) -> PathBuf {
        let mut name = output
            .file_name()
            .map(|name| name.to_os_string())
            .unwrap_or_default();
        name.push(".sinkstate");
        self.canonical_data_folder()
            .join("sinks")
            .join(state_key(&sink.name, output))
            .join(name)
    }

    /// Warns about a feed's or sink's state folder that is new while one of the same
    /// name (another path) or of the same path (another name) is there: a renamed feed
    /// or a moved input starts afresh; the operator may move the old folder.
    pub(crate) fn warn_about_orphan_state(&self, kind: &str, folder: &Path) {
        if folder.exists() {
            return;
        }
        let (Some(parent), Some(key)) = (folder.parent(), folder.file_name()) else {
            return;
        };
        let key = key.to_string_lossy();
        let Some((name, hash)) = key.rsplit_once('-') else {
            return;
        };
        let Ok(entries) = std::fs::read_dir(parent) else {
            return;
        };
        for entry in entries.filter_map(Result::ok) {
            let other = entry.file_name().to_string_lossy().into_owned();
            let Some((other_name, other_hash)) = other.rsplit_once('-') else {
                continue;
            };
            if (other_name == name) != (other_hash == hash) {
                warn!(new = %folder.display(), old = %entry.path().display(),
                    "a {kind} starts with a new state folder while one for the same name or the same path is there: \
                     when only its name or its path changed, stop the server and rename the old folder to the new one to resume from it");
            }
        }
    }
}

/// The exclusive lock on a data folder: held while this value lives (an `flock` on
/// `<data_dir>/lock`, released by the kernel when the process ends, however it ends).
#[derive(Debug)]
pub struct DataFolderLock {
    // kept open: the lock lives as long as the open file
    _lock: FileLock,
    /// The folder locked.
    folder: PathBuf,
}

impl DataFolderLock {
    /// Creates `folder` and takes its lock (the durable layer's [`FileLock::acquire`]: a
    /// lock held for an instant by a forked child is waited for), writing this process's
    /// id into the lock file.
    ///
    /// # Errors
    /// [`ServerError::DataFolderLocked`] when another process holds it (with its pid
    /// when the lock file names one); an I/O error when the folder or the file cannot be
    /// made.
    pub fn acquire(folder: &Path) -> Result<Self, ServerError> {
        let io = |context: String| {
            move |error| ServerError::Io {
                context: format!(
                    "{context}: check that the server may write the data folder (data_dir)"
                ),
                error,
            }
        };
        std::fs::create_dir_all(folder).map_err(io(format!(
            "cannot create the data folder {}",
            folder.display()
        )))?;
        let path = folder.join("lock");
        let mut lock = match FileLock::acquire(&path) {
            Ok(lock) => lock,
            Err(DurableError::Locked { holder, .. }) => {
                return Err(ServerError::DataFolderLocked {
                    folder: folder.display().to_string(),
                    holder: holder.unwrap_or_else(|| "another process".to_owned()),
                });
            }
            Err(DurableError::Io { action, source, .. }) => {
                let verb = if action == "lock" { "lock" } else { "open" };
                return Err(io(format!("cannot {verb} {}", path.display()))(source));
            }
            Err(other) => return Err(io(format!("cannot lock {}", path.display()))(other.into())),
        };
        if let Err(error) = lock.record_holder() {
            // the lock holds without the pid: a second server says "another process"
            warn!(file = %path.display(), %error, "cannot write the pid into the data folder's lock file");
        }
        Ok(DataFolderLock {
            _lock: lock,
            folder: folder.to_path_buf(),
        })
    }

    /// The folder this lock holds (as given to [`DataFolderLock::acquire`]).
    pub fn folder(&self) -> &Path {
        &self.folder
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh scratch folder with `app/logs` and `sib` in it.
    fn scratch(name: &str) -> PathBuf {
        let folder =
            std::env::temp_dir().join(format!("mongoose-data-dir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&folder);
        std::fs::create_dir_all(folder.join("app/logs")).expect("folders");
        std::fs::create_dir_all(folder.join("sib")).expect("folders");
        folder
    }

    #[test]
    fn every_spelling_of_one_folder_gives_one_key() {
        let root = scratch("spellings");
        std::os::unix::fs::symlink(root.join("app"), root.join("link")).expect("symlink");
        let real = state_key("lines", &root.join("app/logs/input.txt"));
        for spelled in [
            "sib/../app/logs/input.txt",
            "link/logs/input.txt",
            "app/./logs/input.txt",
            "link/../app/logs/../logs/input.txt",
        ] {
            assert_eq!(state_key("lines", &root.join(spelled)), real, "{spelled}");
        }
        // the key of an older release was of the path as spelled
        assert_ne!(
            state_key_as_spelled("lines", &root.join("sib/../app/logs/input.txt")),
            real
        );
        // a path that does not exist yet: its nearest existing folder is resolved
        assert_eq!(
            canonical_path(&root.join("link/out/new/x.txt")),
            canonical_folder(&root.join("app")).join("out/new/x.txt")
        );
        assert_eq!(
            canonical_folder(&root.join("link/missing/../other")),
            canonical_folder(&root.join("app")).join("other")
        );
        std::fs::remove_dir_all(&root).expect("cleaned");
    }

    #[test]
    fn an_input_that_is_a_symlink_keeps_its_own_name() {
        // a rotation by moving the link (`current.log -> app-2.log`) keeps the state
        let root = scratch("link-name");
        std::fs::write(root.join("app/logs/app-1.log"), "").expect("file");
        std::os::unix::fs::symlink("app-1.log", root.join("app/logs/current.log"))
            .expect("symlink");
        let path = root.join("app/logs/current.log");
        assert_eq!(
            canonical_path(&path),
            canonical_folder(&root.join("app/logs")).join("current.log")
        );
        std::fs::remove_dir_all(&root).expect("cleaned");
    }

    #[test]
    fn a_data_folder_lock_held_for_an_instant_is_waited_for_and_a_kept_one_refused() {
        // a child forked while the last holder had the lock keeps it until it execs:
        // the lock held by another description for a moment, then let go
        let root = scratch("lock-instant");
        let held = FileLock::try_acquire(&root.join("lock")).expect("held");
        let letting_go = std::thread::spawn(move || {
            std::thread::sleep(mongoose_durable::lock::PAUSE * 5);
            drop(held);
        });
        let lock = DataFolderLock::acquire(&root).expect("taken once the instant is over");
        letting_go.join().expect("thread");
        match DataFolderLock::acquire(&root) {
            Err(ServerError::DataFolderLocked { holder, .. }) => {
                assert_eq!(holder, format!("the process {}", std::process::id()));
            }
            other => panic!("a kept lock is refused: {other:?}"),
        }
        drop(lock);
        std::fs::remove_dir_all(&root).expect("cleaned");
    }
}
