//! Adoption of the state an older release kept under a path as spelled (issue 36,
//! item 1).
//!
//! State folders are keyed on an input's (or output's) canonical path
//! ([`super::data_dir::canonical_path`]). Before, they were keyed on the absolute path
//! as spelled, so the same config started as `sib/../app/m.toml`, or through a
//! symlinked folder, found no state: an HTTP forward sent every line again, a file
//! sink refused to start. At a start (and when a reload adds a feed or a sink), before
//! anything opens, the state of a feed or a sink found under another key of its name
//! is taken over:
//!
//! * the folder of the path as spelled now, keyed the old way (what an older release
//!   used for this very config), and
//! * any other folder of the same feed or sink name whose state names the same file:
//!   a pointer whose file key (device and inode) is the input's (the evidence the file
//!   source itself accepts a pointer of another path by), a sink state recording the
//!   output's device and inode. This also finds the state of an input whose folder is
//!   reached through a symlink that moved while the server ran (`current ->
//!   releases/43`): the source followed the new file at the path, its pointer names
//!   it, and the folder's key is of the folder the link named at the start.
//!
//! One such folder, and none at the canonical key: it is renamed to the canonical key
//! (one `rename` of the folder, then an fsync of `feeds/` or `sinks/`): a kill at any
//! point leaves one folder, under one name or the other, and the next start finishes
//! the job. More than one (two spellings used by older runs, or one beside state at
//! the canonical key): the start is refused, naming every folder, since one input has
//! one position and which one to resume from is the operator's choice.

use std::fs::File;
use std::path::{Path, PathBuf};

use mongoose_source_file::pointer::{fnv1a, PointerRecord};
use tracing::info;

use super::data_dir::{folder_name, state_key_as_spelled};
use super::{ServerConfig, SinkConfig};
use crate::error::ServerError;

impl ServerConfig {
    /// Adopts the state of configured feed `index` (a file feed that keeps a pointer,
    /// a glob's too) that an older release kept under another spelling of its path
    /// (see the [module documentation](self)). Call it with the data folder locked,
    /// before the feed's source is made.
    ///
    /// # Errors
    /// [`ServerError::StateRefused`] when its state is in more than one folder, or the
    /// folder cannot be renamed.
    pub(crate) fn adopt_feed_state(&self, index: usize) -> Result<(), ServerError> {
        let feed = &self.feeds[index];
        let input = self.resolve(&feed.path);
        let folder = self.feed_state_dir(index);
        let spelled = folder.with_file_name(state_key_as_spelled(&feed.name, &input));
        let glob = feed.is_glob();
        let evidence = |candidate: &Path| {
            if glob {
                pointers_name_files_of_the_glob(candidate, &input)
            } else {
                pointer_names_the_file(candidate, &input)
            }
        };
        adopt_folder(
            &format!("feeds.{}", feed.name),
            &feed.name,
            &folder,
            &spelled,
            evidence,
        )
    }

    /// Adopts the state of file sink `sink` writing `output` (resolved) that an older
    /// release kept under another spelling of its path, as
    /// [`ServerConfig::adopt_feed_state`] does for a feed.
    ///
    /// # Errors
    /// As [`ServerConfig::adopt_feed_state`].
    pub(crate) fn adopt_sink_state(
        &self,
        sink: &SinkConfig,
        output: &Path,
    ) -> Result<(), ServerError> {
        let state = self.sink_state_file(sink, output);
        let (Some(folder), Some(state_name)) = (state.parent(), state.file_name()) else {
            return Ok(());
        };
        let spelled = folder.with_file_name(state_key_as_spelled(&sink.name, output));
        let target = std::fs::metadata(output).ok().map(|meta| {
            use std::os::unix::fs::MetadataExt;
            (meta.dev(), meta.ino())
        });
        let evidence = |candidate: &Path| {
            target.is_some()
                && mongoose_sink::file::state_target(&candidate.join(state_name)) == target
        };
        adopt_folder(
            &format!("sinks.{}", sink.name),
            &sink.name,
            folder,
            &spelled,
            evidence,
        )
    }
}

/// Whether `folder` holds anything (a folder that does not exist holds nothing).
fn holds_state(folder: &Path) -> bool {
    std::fs::read_dir(folder).is_ok_and(|mut entries| entries.next().is_some())
}

/// The file key the file source gives the file at `path` (`identity::key_of` of
/// mongoose-source-file: FNV-1a 64 of its device then its inode, big-endian, never
/// 0), or `None` when there is no file.
fn file_key(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&meta.dev().to_be_bytes());
    bytes[8..].copy_from_slice(&meta.ino().to_be_bytes());
    Some(fnv1a(&bytes).max(1))
}

/// The file key a pointer file records (0: none, or no pointer).
fn recorded_key(pointer: &Path) -> u64 {
    std::fs::read(pointer).map_or(0, |bytes| PointerRecord::decode(&bytes).record.file_key)
}

/// Whether `candidate` holds a pointer of the file at `input`: `<name>.readPointer`
/// recording the input's file key.
fn pointer_names_the_file(candidate: &Path, input: &Path) -> bool {
    let Some(name) = input.file_name() else {
        return false;
    };
    let mut pointer = name.to_os_string();
    pointer.push(".readPointer");
    let recorded = recorded_key(&candidate.join(pointer));
    recorded != 0 && file_key(input) == Some(recorded)
}

/// Whether `candidate` holds a pointer of a file in the folder of the glob `pattern`:
/// some `<name>.readPointer` recording the file key of `<folder>/<name>`.
fn pointers_name_files_of_the_glob(candidate: &Path, pattern: &Path) -> bool {
    let (Some(folder), Ok(entries)) = (pattern.parent(), std::fs::read_dir(candidate)) else {
        return false;
    };
    entries.filter_map(Result::ok).any(|entry| {
        let name = entry.file_name();
        let Some(file) = name.to_str().and_then(|n| n.strip_suffix(".readPointer")) else {
            return false;
        };
        let recorded = recorded_key(&entry.path());
        recorded != 0 && file_key(&folder.join(file)) == Some(recorded)
    })
}

/// Adopts into `folder` (the canonical state folder of `name`) the one folder that
/// holds its state under another key: `spelled` (the key of the path as spelled, the
/// one an older release used), or another `<name>-<key>` for which `evidence` holds.
fn adopt_folder(
    what: &str,
    name: &str,
    folder: &Path,
    spelled: &Path,
    evidence: impl Fn(&Path) -> bool,
) -> Result<(), ServerError> {
    let Some(parent) = folder.parent() else {
        return Ok(());
    };
    let mut candidates: Vec<PathBuf> = Vec::new();
    if spelled != folder && holds_state(spelled) {
        candidates.push(spelled.to_path_buf());
    }
    let prefix = format!("{}-", folder_name(name));
    if let Ok(entries) = std::fs::read_dir(parent) {
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path == folder || path == spelled {
                continue;
            }
            let entry_name = entry.file_name();
            let is_key = entry_name
                .to_str()
                .and_then(|entry_name| entry_name.strip_prefix(&prefix))
                .is_some_and(|hash| {
                    hash.len() == 12 && hash.bytes().all(|byte| byte.is_ascii_hexdigit())
                });
            if is_key && holds_state(&path) && evidence(&path) {
                candidates.push(path);
            }
        }
    }
    if candidates.is_empty() {
        return Ok(());
    }
    candidates.sort();
    if holds_state(folder) || candidates.len() > 1 {
        let mut all: Vec<String> = Vec::new();
        if holds_state(folder) {
            all.push(format!("{} (its key now)", folder.display()));
        }
        all.extend(
            candidates.iter().map(|candidate| {
                format!("{} (an older spelling of its path)", candidate.display())
            }),
        );
        return Err(ServerError::StateRefused {
            what: what.to_owned(),
            message: format!(
                "its state is kept in {} folders: {}. One input or output has one state, and which one to resume \
                 from is yours to decide: keep the folder to resume from, move the others out of {}, then start \
                 again (the one left is renamed to {} if it is not already). None of them was moved",
                all.len(),
                all.join(", "),
                parent.display(),
                folder
                    .file_name()
                    .map_or_else(String::new, |key| key.to_string_lossy().into_owned()),
            ),
        });
    }
    let old = &candidates[0];
    let io = |action: &str| {
        let context = format!(
            "{what}: cannot {action} (adopting {} as {}): check that the server may write the data folder",
            old.display(),
            folder.display()
        );
        move |error| ServerError::Io { context, error }
    };
    // one rename: a kill leaves the folder under one name or the other, never two
    std::fs::rename(old, folder).map_err(io("rename the state folder"))?;
    File::open(parent)
        .and_then(|handle| handle.sync_all())
        .map_err(io("sync the folder of state folders"))?;
    info!(from = %old.display(), to = %folder.display(),
        "{what}: adopted the state folder kept under another spelling of its path (the path as spelled, an older release's key, or a folder a symlink named before it moved): state folders are keyed on the canonical path");
    Ok(())
}
