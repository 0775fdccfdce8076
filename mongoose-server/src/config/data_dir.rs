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
//! absolute path, as configured (a glob as written): two feeds never share a folder,
//! and a feed renamed or pointed at another file starts a new one (the old folder is
//! named at start, to move by hand when the change was only a rename).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tracing::warn;

use crate::config::{ServerConfig, SinkConfig};
use crate::error::ServerError;

/// The default `data_dir`: `data`, beside the config file.
pub fn default_data_dir() -> PathBuf {
    PathBuf::from("data")
}

/// The folder name of a feed's or a sink's state: its name (a `/` or `\` as `_`), a
/// dash and the first 12 hex digits of the SHA-256 of the absolute `path`.
pub fn state_key(name: &str, path: &Path) -> String {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let digest = Sha256::digest(absolute.as_os_str().as_encoded_bytes());
    let hex: String = digest[..6]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let name: String = name
        .chars()
        .map(|c| if c == '/' || c == '\\' { '_' } else { c })
        .collect();
    format!("{name}-{hex}")
}

impl ServerConfig {
    /// The data folder, resolved against the config file's folder.
    pub fn data_folder(&self) -> PathBuf {
        self.resolve(&self.data_dir)
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
        self.data_folder()
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
        self.data_folder()
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
    _file: File,
}

impl DataFolderLock {
    /// Creates `folder` and takes its lock without waiting, writing this process's id
    /// into the lock file.
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
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io(format!("cannot open {}", path.display())))?;
        // `File::try_lock` needs Rust 1.89 (the workspace's minimum is 1.86): flock(2)
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(ServerError::DataFolderLocked {
                    folder: folder.display().to_string(),
                    holder: if holder.is_empty() {
                        "another process".to_owned()
                    } else {
                        format!("the process {holder}")
                    },
                });
            }
            Err(error) => {
                return Err(io(format!("cannot lock {}", path.display()))(
                    std::io::Error::from(error),
                ))
            }
        }
        let pid = std::process::id().to_string();
        let written = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(pid.as_bytes()));
        if let Err(error) = written {
            // the lock holds without the pid: a second server says "another process"
            warn!(file = %path.display(), %error, "cannot write the pid into the data folder's lock file");
        }
        Ok(DataFolderLock { _file: file })
    }
}
