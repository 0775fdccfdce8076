//! Discovery: the folder scanned for the files the glob matches (not bookkeeping, not
//! a tracked file's rotation), a file renamed inside the glob recognised by its pointer
//! and kept on its lane, the files' sizes for the status, and the refusal of new lanes
//! for files whose lanes a consumer saved positions of.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::Path;

use mongoose_core::{CoreError, EventSource};
use tracing::{info, warn};

use super::pattern::glob_matches;
use super::GlobFileSource;
use crate::config::ReadStrategy;
use crate::identity::key_of;
use crate::pointer::{pointer_path_for, PointerRecord};
use crate::rotation;
use crate::source::FileEventSource;

impl<T: Send + 'static> GlobFileSource<T> {
    /// Whether `name` is the glob's own file or a pointer/registry/loss file.
    fn is_bookkeeping(&self, name: &str) -> bool {
        let registry = self
            .registry
            .path()
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        name.ends_with(".readPointer")
            || name.ends_with(".losses")
            || name.ends_with(".lanes")
            || name.ends_with(".lanes.tmp")
            || name == registry
    }

    /// The file names in the folder that are inputs: matching the glob, not
    /// bookkeeping, not the rotation of another tracked or matching file.
    fn scan_folder(&self) -> Result<Vec<String>, CoreError> {
        let folder = self.config.folder();
        let entries = match fs::read_dir(&folder) {
            Ok(entries) => entries,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => {
                return Err(CoreError::io(
                    format!(
                        "source '{}': cannot list the folder {} of the glob",
                        self.config.name,
                        folder.display()
                    ),
                    error,
                ))
            }
        };
        let pattern = self.config.file_pattern();
        let mut matched: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|entry| {
                entry
                    .metadata()
                    .is_ok_and(|metadata| metadata.is_file())
            })
            .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
            .filter(|name| glob_matches(&pattern, name) && !self.is_bookkeeping(name))
            .filter(|name| {
                if name.contains('\n') {
                    warn!(source = %self.config.name, file = %name.escape_debug(), "a file name with a line break is not read");
                    false
                } else {
                    true
                }
            })
            .collect();
        matched.sort();
        let mut owners: BTreeSet<String> = matched.iter().cloned().collect();
        owners.extend(self.files.values().map(|file| file.name.clone()));
        matched.retain(|name| !self.is_rotation(name, &owners));
        Ok(matched)
    }

    /// Whether `name` is the rotation of another of `owners`.
    fn is_rotation(&self, name: &str, owners: &BTreeSet<String>) -> bool {
        if self
            .config
            .rotated
            .iter()
            .any(|glob| glob_matches(glob, name))
        {
            return true;
        }
        owners.iter().any(|owner| {
            owner != name
                && rotation::default_globs(Path::new(owner))
                    .iter()
                    .any(|glob| glob_matches(glob, name))
        })
    }

    /// Scans the folder: new files are tracked, files no longer found are marked.
    pub(super) fn scan(&mut self) -> Result<(), CoreError> {
        let first = self.scans == 0;
        self.scans += 1;
        if !first && self.config.strategy.is_once() {
            return Ok(());
        }
        let found = self.scan_folder()?;
        let found_set: BTreeSet<&str> = found.iter().map(String::as_str).collect();
        for file in self.files.values_mut() {
            file.matched = found_set.contains(file.name.as_str());
        }
        let strategy = match self.config.strategy {
            // files found after the start are read from their start
            ReadStrategy::Latest if !first => ReadStrategy::Earliest,
            other => other,
        };
        for name in &found {
            if self.files.values().any(|file| &file.name == name) {
                continue;
            }
            if let Some(lane) = self.renamed_from(name) {
                self.renamed(lane, name)?;
                continue;
            }
            let lane = self.registry.assign(name)?;
            info!(source = %self.config.name, file = %name, lane, "a file matching the glob: reading it on its own lane");
            self.track(lane, name, strategy, true)?;
        }
        self.refresh_sizes();
        Ok(())
    }

    /// The lane of a tracked file whose name is gone and whose pointer describes the
    /// file now named `name` (file key, leading bytes, not shorter than the pointer):
    /// the same file renamed inside the glob. COMMITED only (the others have no
    /// pointer to tell).
    fn renamed_from(&self, name: &str) -> Option<u32> {
        if !self.has_pointer() {
            return None;
        }
        let path = self.config.folder().join(name);
        let file = fs::File::open(&path).ok()?;
        let key = key_of(&file.metadata().ok()?)?;
        self.files
            .values()
            .filter(|tracked| fs::symlink_metadata(&tracked.path).is_err())
            .find(|tracked| {
                let Ok(bytes) = fs::read(pointer_path_for(&tracked.path)) else {
                    return false;
                };
                let record = PointerRecord::decode(&bytes).record;
                record.epoch != 0
                    && record.file_key == key.0
                    && rotation::is_pointer_file(&file, &record)
            })
            .map(|tracked| tracked.lane)
    }

    /// `lane`'s file is now named `name`: moved at once when its source read nothing
    /// yet in this run (a rename while down) or gave its slot; else once what it read
    /// from its open handle is committed ([`GlobFileSource::settle`]).
    fn renamed(&mut self, lane: u32, name: &str) -> Result<(), CoreError> {
        let Some(file) = self.files.get_mut(&lane) else {
            return Ok(());
        };
        if file.source.is_none() || file.cycles == 0 {
            return self.move_lane(lane, name);
        }
        if file.renamed_to.as_deref() != Some(name) {
            info!(source = %self.config.name, file = %file.path.display(), renamed = %name, lane,
                "the file was renamed inside the glob: the same file, kept on its lane (finishing what was read from the open handle first)");
            file.renamed_to = Some(name.to_owned());
        }
        Ok(())
    }

    /// Moves `lane` to the file's new name: its source stopped, its pointer file
    /// renamed (first: a crash before the registry write leaves the pointer with the
    /// file, never a registry entry without its pointer, which would read the file
    /// again from its start), the registry entry renamed, and the source started on
    /// the new name, where the pointer resumes it.
    pub(super) fn move_lane(&mut self, lane: u32, name: &str) -> Result<(), CoreError> {
        let folder = self.config.folder();
        let Some(file) = self.files.get_mut(&lane) else {
            return Ok(());
        };
        let had_slot = file.source.is_some();
        if let Some(mut source) = file.source.take() {
            source.stop()?;
        }
        let new_path = folder.join(name);
        let (old_pointer, new_pointer) =
            (pointer_path_for(&file.path), pointer_path_for(&new_path));
        match fs::rename(&old_pointer, &new_pointer) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => {
                return Err(CoreError::io(
                    format!(
                        "cannot move the pointer file {} to {} after a rename inside the glob",
                        old_pointer.display(),
                        new_pointer.display()
                    ),
                    error,
                ))
            }
        }
        let old_name = std::mem::replace(&mut file.name, name.to_owned());
        self.registry.rename(&old_name, name)?;
        info!(source = %self.config.name, from = %file.path.display(), to = %new_path.display(), lane,
            "a file renamed inside the glob keeps its lane and its pointer");
        file.path = new_path;
        file.matched = true;
        file.renamed_to = None;
        file.cycles = 0;
        file.parked_size = None;
        file.deleted_tail = None;
        self.waiting.retain(|waiting| *waiting != lane);
        if had_slot {
            self.unpark(lane)?;
        } else {
            self.waiting.push_back(lane);
        }
        Ok(())
    }

    /// The committed offset and size of every file, for the status.
    fn refresh_sizes(&mut self) {
        for file in self.files.values_mut() {
            if let Some(source) = file.source.as_ref() {
                let status = source.status();
                file.committed = if file.strategy.has_pointer() {
                    status.committed_position
                } else {
                    status.read_position
                };
            }
            if let Ok(metadata) = fs::metadata(&file.path) {
                file.size = metadata.len();
            } else if let Some(unread) = file
                .source
                .as_ref()
                .and_then(FileEventSource::open_file_unread_bytes)
            {
                let read = file.source.as_ref().map_or(0, |s| s.status().read_position);
                file.size = read + unread;
            }
        }
    }

    /// Without a registry, files that have pointers would get new lanes: a consumer
    /// that saved positions per lane would not know their lines and apply them again.
    /// Refused when a consumer holds positions of lanes; a warning otherwise.
    pub(super) fn refuse_new_lanes_for_saved_ones(&self) -> Result<(), CoreError> {
        if self.registry.existed() {
            return Ok(());
        }
        let folder = self.config.folder();
        let pattern = self.config.file_pattern();
        let Ok(entries) = fs::read_dir(&folder) else {
            return Ok(());
        };
        let with_pointers: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
            .filter_map(|name| name.strip_suffix(".readPointer").map(str::to_owned))
            .filter(|name| glob_matches(&pattern, name))
            .collect();
        if with_pointers.is_empty() {
            return Ok(());
        }
        let lanes_saved = self.hub.state.lock().saved.iter().any(|consumer| {
            consumer
                .saved
                .is_some_and(|(_, position)| position.lane > 0)
        });
        let message = format!(
            "the lane registry {} is missing but {} files of the glob have pointer files ({}): they would be read on new lanes",
            self.registry.path().display(),
            with_pointers.len(),
            with_pointers.join(", ")
        );
        if lanes_saved {
            return Err(CoreError::Source {
                source_name: self.config.name.clone(),
                message: format!(
                    "{message}, and the feed's consumers hold saved positions of lanes, which would not match: their lines would be applied again. Restore the registry from a backup (it belongs with the pointers); or, to start over, move the pointer files and the consumers' saved state away"
                ),
            });
        }
        warn!(source = %self.config.name, "{message}: each resumes from its pointer");
        Ok(())
    }
}
