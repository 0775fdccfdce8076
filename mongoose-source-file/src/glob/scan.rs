//! Discovery: the folder scanned for the files the glob matches (not bookkeeping, not
//! a tracked file's rotation), a file renamed inside the glob recognised by its open
//! handle or its pointer and kept on its lane (its pointer moved with it), the files'
//! sizes for the status, and the refusal of new lanes for files whose lanes a consumer
//! saved positions of.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::Path;

use mongoose_core::CoreError;
use tracing::{info, warn};

use super::pattern::glob_matches;
use super::GlobFileSource;
use crate::config::ReadStrategy;
use crate::identity::key_of;
use crate::pointer::{pointer_path_in, PointerRecord};
use crate::positional::starts_as_fingerprinted;
use crate::rotation;
use crate::source::{write_identity, FileEventSource};
use crate::watch::FolderChanges;

/// Moves a pointer file (in `state_dir`, or beside its file without one) with its file
/// (a missing one is no error: nothing to move).
pub(super) fn move_pointer(
    state_dir: Option<&Path>,
    from: &Path,
    to: &Path,
) -> Result<(), CoreError> {
    let (from, to) = (
        pointer_path_in(state_dir, from),
        pointer_path_in(state_dir, to),
    );
    match crate::pointer::rename_pointer(&from, &to) {
        Ok(_) => Ok(()),
        Err(error) => Err(CoreError::io(
            format!(
                "cannot move the pointer file {} to {} after a rename inside the glob",
                from.display(),
                to.display()
            ),
            error,
        )),
    }
}

impl<T: Send + 'static> GlobFileSource<T> {
    /// With a state folder: adopts the lane registry, loss files and the pointers of
    /// matching files an older run left in the glob's folder (moved, or copied when
    /// that folder cannot be written; the state folder's copy wins when both exist).
    pub(super) fn adopt_state_beside_the_files(&self) -> Result<(), CoreError> {
        let Some(state_dir) = self.config.state_dir.as_deref() else {
            return Ok(());
        };
        let name = &self.config.name;
        let failed = |old: &Path, error: io::Error| {
            CoreError::io(
                format!(
                    "source '{name}': cannot adopt {} into the data folder {}",
                    old.display(),
                    state_dir.display()
                ),
                error,
            )
        };
        fs::create_dir_all(state_dir).map_err(|error| {
            CoreError::io(
                format!(
                    "source '{name}': cannot create its state folder {}",
                    state_dir.display()
                ),
                error,
            )
        })?;
        let folder = self.config.folder();
        let registry = self.config.registry_path();
        if let Some(registry_name) = registry.file_name() {
            let old = folder.join(registry_name);
            crate::adopt::adopt_with_losses(name, &old, &registry)
                .map_err(|error| failed(&old, error))?;
        }
        let pattern = self.config.file_pattern();
        let Ok(entries) = fs::read_dir(&folder) else {
            return Ok(());
        };
        let pointers: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
            .filter(|name| {
                name.strip_suffix(".readPointer").is_some_and(|file| {
                    // the glob's files and their rotations (`<file>.*`, `<file>-*`, or
                    // the configured rotation globs)
                    glob_matches(&pattern, file)
                        || file.char_indices().any(|(at, c)| {
                            (c == '.' || c == '-') && glob_matches(&pattern, &file[..at])
                        })
                        || self
                            .config
                            .rotated
                            .iter()
                            .any(|rotated| glob_matches(rotated, file))
                })
            })
            .collect();
        for pointer in pointers {
            let old = folder.join(&pointer);
            crate::adopt::adopt_with_losses(name, &old, &state_dir.join(&pointer))
                .map_err(|error| failed(&old, error))?;
        }
        Ok(())
    }

    /// Whether `name` is the glob's own file or a pointer/registry/loss file.
    pub(super) fn is_bookkeeping(&self, name: &str) -> bool {
        let registry = self
            .registry
            .path()
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        name.ends_with(".readPointer")
            || name.ends_with(".losses")
            || name.ends_with(".losses.reported")
            || name.ends_with(".losses.damaged")
            || name.ends_with(".lanes")
            || name.ends_with(".lanes.tmp")
            || name == registry
    }

    /// The file names in the folder that are inputs: matching the glob, not
    /// bookkeeping, not the rotation of another tracked or matching file.
    fn scan_folder(&self) -> Result<Vec<(String, u64)>, CoreError> {
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
        let mut matched: Vec<(String, u64)> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let size = entry
                    .metadata()
                    .ok()
                    .filter(fs::Metadata::is_file)?
                    .len();
                Some((entry.file_name().to_str()?.to_owned(), size))
            })
            .filter(|(name, _)| glob_matches(&pattern, name) && !self.is_bookkeeping(name))
            .filter(|(name, _)| {
                if name.contains('\n') {
                    warn!(source = %self.config.name, file = %name.escape_debug(), "a file name with a line break is not read");
                    false
                } else {
                    true
                }
            })
            .collect();
        matched.sort();
        let mut owners: BTreeSet<String> = matched.iter().map(|(name, _)| name.clone()).collect();
        owners.extend(self.files.values().map(|file| file.name.clone()));
        matched.retain(|(name, _)| !self.is_rotation(name, &owners));
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
        // the default rotation globs of an owner are `<owner>.*` and `<owner>-*`: `name`
        // is a rotation of an owner that is its prefix up to a '.' or '-' of it. Looking
        // those prefixes up (rather than matching every owner's globs) keeps a scan
        // linear in the files: with a thousand files per glob the scan took seconds.
        name.char_indices()
            .filter(|&(at, c)| at > 0 && (c == '.' || c == '-'))
            .any(|(at, _)| owners.contains(&name[..at]))
    }

    /// Scans the folder: files renamed inside the glob are followed, new files are
    /// tracked, files no longer found are marked.
    pub(super) fn scan(&mut self) -> Result<(), CoreError> {
        let first = self.scans == 0;
        self.scans += 1;
        if !first && self.config.strategy.is_once() {
            return Ok(());
        }
        let listed = self.scan_folder()?;
        let found: Vec<String> = listed.iter().map(|(name, _)| name.clone()).collect();
        let found_set: BTreeSet<&str> = found.iter().map(String::as_str).collect();
        for file in self.files.values_mut() {
            file.matched = found_set.contains(file.name.as_str());
        }
        let strategy = match self.config.strategy {
            // files found after the start are read from their start
            ReadStrategy::Latest if !first => ReadStrategy::Earliest,
            other => other,
        };
        // renames first: the name a renamed file left may already hold a new file
        // (logrotate's `create`), which is another file, on a new lane
        if self.has_pointer() {
            for name in &found {
                let holder = self.lane_named(name);
                if holder.is_some_and(|lane| self.holds_own_file(lane)) {
                    continue;
                }
                if let Some(lane) = self.renamed_from(name) {
                    if let Some(replaced) = holder {
                        // renamed over another tracked file: that one lost its name
                        self.detach(replaced)?;
                    }
                    self.follow(lane, name)?;
                }
            }
        }
        for (name, size) in &listed {
            if self.is_tracked(name) {
                continue;
            }
            // its lane: its pointer's, or the one its consumers hold of its identity,
            // else a new one
            let lane = self
                .has_pointer()
                .then(|| self.lane_for_new(name))
                .flatten()
                .unwrap_or_else(|| self.registry.next());
            // its identity and lane first (COMMITED): a crash after it and before the
            // registry write leaves a pointer at offset 0, nothing read, that records
            // the lane the file gets again
            let record = if self.has_pointer() {
                write_identity(
                    self.config.state_dir.as_deref(),
                    &self.config.folder().join(name),
                    lane,
                )?
            } else {
                None
            };
            self.registry.assign_as(name, lane)?;
            info!(source = %self.config.name, file = %name, lane, "a file matching the glob: reading it on its own lane");
            self.track(lane, name, strategy, true, record)?;
            if let Some(file) = self.files.get_mut(&lane) {
                // the size it was listed with: a file deleted before its identity was
                // written (no pointer to tell) held that many bytes, never read
                // (seed 1122: it was forgotten as a file that held nothing)
                file.seen_size = Some(*size);
            }
        }
        self.refresh_sizes();
        Ok(())
    }

    fn is_tracked(&self, name: &str) -> bool {
        self.files.values().any(|file| file.name == name)
    }

    /// The lane tracked under `name`.
    fn lane_named(&self, name: &str) -> Option<u32> {
        self.files
            .values()
            .find(|file| file.name == name)
            .map(|file| file.lane)
    }

    /// Whether `lane`'s path names the lane's own file (as far as its open handle, or
    /// its pointer's file key, tells; unknown counts as yes).
    fn holds_own_file(&self, lane: u32) -> bool {
        let Some(file) = self.files.get(&lane) else {
            return true;
        };
        let own = file
            .source
            .as_ref()
            .and_then(FileEventSource::open_file_key)
            .map(|key| key.0)
            .or(file.key());
        let Some(own) = own else {
            return true;
        };
        fs::metadata(&file.path)
            .ok()
            .and_then(|metadata| key_of(&metadata))
            .is_none_or(|key| key.0 == own)
    }

    /// `lane`'s name was taken by another tracked file renamed over it: the lane
    /// lets go of the name (its registry entry goes, its pointer file moves to a
    /// bookkeeping name) and is then a file gone from the glob: read from its open
    /// handle to its end, or counted lost if it may have held unread lines.
    fn detach(&mut self, lane: u32) -> Result<(), CoreError> {
        let folder = self.config.folder();
        let Some(file) = self.files.get_mut(&lane) else {
            return Ok(());
        };
        let gone_name = format!(".{}.lane-{lane}.replaced", file.name);
        let gone_path = folder.join(&gone_name);
        let old_name = std::mem::replace(&mut file.name, gone_name);
        let old_path = std::mem::replace(&mut file.path, gone_path.clone());
        file.matched = false;
        self.registry.forget(&old_name)?;
        match file.source.as_mut() {
            Some(source) => source.follow_rename(&gone_path)?,
            None => move_pointer(self.config.state_dir.as_deref(), &old_path, &gone_path)?,
        }
        warn!(source = %self.config.name, file = %old_path.display(), lane,
            "another file of the glob was renamed over this one: this lane's file is read to its end from its open handle (or, not open, counted lost if it held unread lines), then forgotten");
        Ok(())
    }

    /// The lane whose file is now named `name` (another name of the glob): a tracked
    /// file whose path no longer names it (gone, or another file there now), known by
    /// its open handle's file key, or by its pointer (file key, leading bytes, not
    /// shorter than the pointer). COMMITED only (the others have no pointer to tell).
    fn renamed_from(&self, name: &str) -> Option<u32> {
        let path = self.config.folder().join(name);
        let file = fs::File::open(&path).ok()?;
        let key = key_of(&file.metadata().ok()?)?;
        self.files
            .values()
            .find(|tracked| {
                let at_path = fs::metadata(&tracked.path)
                    .ok()
                    .and_then(|metadata| key_of(&metadata));
                if let Some(open) = tracked
                    .source
                    .as_ref()
                    .and_then(FileEventSource::open_file_key)
                {
                    return open == key && at_path != Some(open);
                }
                if tracked.key() != Some(key.0) || at_path == Some(key) {
                    return false;
                }
                let Ok(bytes) = fs::read(self.config.pointer_path(&tracked.path)) else {
                    return false;
                };
                let record = PointerRecord::decode(&bytes).record;
                record.epoch != 0
                    && record.file_key == key.0
                    && rotation::is_pointer_file(&file, &record)
            })
            .map(|tracked| tracked.lane)
    }

    /// `lane`'s file is now named `name`: the lane follows it. Its registry entry is
    /// renamed first (a crash before its pointer file moved leaves the pointer under
    /// the old name, moved at the next start: [`GlobFileSource::complete_moves`]),
    /// then its pointer file; an open source reads on from its handle, nothing read
    /// twice and nothing in flight lost.
    fn follow(&mut self, lane: u32, name: &str) -> Result<(), CoreError> {
        let new_path = self.config.folder().join(name);
        let Some(file) = self.files.get_mut(&lane) else {
            return Ok(());
        };
        let old_name = std::mem::replace(&mut file.name, name.to_owned());
        let old_path = std::mem::replace(&mut file.path, new_path.clone());
        file.matched = true;
        file.deleted_tail = None;
        self.registry.rename(&old_name, name)?;
        match file.source.as_mut() {
            Some(source) => source.follow_rename(&new_path)?,
            None => move_pointer(self.config.state_dir.as_deref(), &old_path, &new_path)?,
        }
        info!(source = %self.config.name, from = %old_path.display(), to = %new_path.display(), lane,
            "a file renamed inside the glob keeps its lane and its pointer");
        Ok(())
    }

    /// Completes the moves a crash interrupted: a registry entry whose pointer file is
    /// missing takes the pointer file of a name the registry does not hold when that
    /// pointer describes the entry's file (file key and leading bytes).
    pub(super) fn complete_moves(&mut self) -> Result<(), CoreError> {
        let folder = self.config.folder();
        let missing: Vec<String> = self
            .registry
            .entries()
            .map(|(name, _)| name.to_owned())
            .filter(|name| !self.config.pointer_path(&folder.join(name)).exists())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let Ok(entries) = fs::read_dir(self.config.state_folder()) else {
            return Ok(());
        };
        let orphans: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
            .filter_map(|name| name.strip_suffix(".readPointer").map(str::to_owned))
            .filter(|name| self.registry.lane_of(name).is_none())
            .collect();
        for name in missing {
            let path = folder.join(&name);
            let Ok(file) = fs::File::open(&path) else {
                continue;
            };
            let orphan = orphans.iter().find(|orphan| {
                fs::read(self.config.pointer_path(&folder.join(orphan))).is_ok_and(|bytes| {
                    let record = PointerRecord::decode(&bytes).record;
                    record.epoch != 0 && rotation::is_pointer_file(&file, &record)
                })
            });
            if let Some(orphan) = orphan {
                let from = folder.join(orphan);
                warn!(source = %self.config.name, from = %from.display(), to = %path.display(),
                    "completing a move of a pointer file that a crash interrupted (the file was renamed inside the glob)");
                move_pointer(self.config.state_dir.as_deref(), &from, &path)?;
            }
        }
        Ok(())
    }

    /// The committed offset and size of every file, for the status, and the size of
    /// each lane's own file as seen now.
    fn refresh_sizes(&mut self) {
        for file in self.files.values_mut() {
            let open_key = file
                .source
                .as_ref()
                .and_then(FileEventSource::open_file_key);
            if let Some(source) = file.source.as_ref() {
                let status = source.status();
                file.committed = if file.strategy.has_pointer() {
                    status.committed_position
                } else {
                    status.read_position
                };
            }
            let own_key = open_key.map(|key| key.0).or(file.key());
            if let Ok(metadata) = fs::metadata(&file.path) {
                let grew = metadata.len() != file.size;
                file.size = metadata.len();
                let path_key = key_of(&metadata).map(|key| key.0);
                if own_key.is_some() && path_key == own_key {
                    file.seen_size = Some(metadata.len());
                    file.written = false;
                }
                // no slot: is the file at the path still the lane's? (another key; or
                // the same key, an inode reused by a new file: shorter than the
                // pointer, or other leading bytes, looked at when the size changed)
                file.replaced = open_key.is_none()
                    && file.record.is_some_and(|record| {
                        path_key != own_key
                            || metadata.len() < record.offset
                            || ((grew || file.written)
                                && record.fingerprint_length > 0
                                && !fs::File::open(&file.path)
                                    .is_ok_and(|opened| starts_as_fingerprinted(&opened, &record)))
                    });
            } else if let Some(unread) = file
                .source
                .as_ref()
                .and_then(FileEventSource::open_file_unread_bytes)
            {
                let read = file.source.as_ref().map_or(0, |s| s.status().read_position);
                file.size = read + unread;
                file.seen_size = Some(file.size);
                file.written = false;
            }
        }
    }

    /// Notes the files written to since the last look (inotify), whose size a deletion
    /// before the next scan would leave unknown.
    ///
    /// Returns true when a file without an open handle (waiting for a slot, or parked)
    /// or one the glob matches and does not track yet was written to: a scan sees its
    /// new size now.
    pub(super) fn note_written(&mut self, changes: &FolderChanges) -> bool {
        if changes.overflowed {
            for file in self.files.values_mut() {
                file.written = true;
            }
            return true;
        }
        let mut closed_written = false;
        for name in &changes.written {
            match self
                .files
                .values_mut()
                .find(|file| name.to_str() == Some(file.name.as_str()))
            {
                Some(file) => {
                    file.written = true;
                    closed_written |= file.source.is_none();
                }
                // a file the glob matches that no scan saw yet
                None => {
                    closed_written |= name
                        .to_str()
                        .is_some_and(|name| glob_matches(&self.config.file_pattern(), name));
                }
            }
        }
        closed_written
    }

    /// How long until the next periodic scan: `scan_interval`, or, while the folder's
    /// watch reports every change and nothing waits on a scan (no file waits for a
    /// slot, none is deleted or gone from the glob and not yet forgotten, every open
    /// file is read to its end and every closed one was parked at its end),
    /// at least [`SAFETY_LOOK`](crate::wake::SAFETY_LOOK): the scan is then only the
    /// safety look for a change the watch did not report.
    pub(super) fn scan_every(&self) -> std::time::Duration {
        let interval = self.config.scan_interval;
        let scan_waits = !self.watch.is_active()
            || !self.waiting.is_empty()
            || self.files.values().any(|file| {
                !file.matched
                    || file.deleted_tail.is_some()
                    || match file.source.as_ref() {
                        Some(source) => !source.read_to_the_end(),
                        // only a file parked at its end waits for nothing but a change
                        None => file.parked_size.is_none(),
                    }
            });
        if scan_waits {
            interval
        } else {
            interval.max(crate::wake::SAFETY_LOOK)
        }
    }
}
