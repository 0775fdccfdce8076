//! A file's life in a [`GlobFileSource`]: started in an open-file slot or left waiting
//! for one, parked to give its slot to a waiting file, reopened from its pointer, and
//! forgotten once gone from the glob: read to its end from its open handle and
//! committed, or (gone before it could be read to its end) counted once as a loss.

use std::fs;
use std::io;
use std::path::Path;
use std::sync::Arc;

use mongoose_core::{CoreError, EventSource, SourceOutput, SourceState};
use tracing::{debug, info, warn};

use super::adapter::LaneOutput;
use super::{GlobFileSource, Tracked};
use crate::config::{FileSourceConfig, ReadStrategy};
use crate::pointer::PointerRecord;
use crate::rotation;
use crate::source::FileEventSource;

impl<T: Send + 'static> GlobFileSource<T> {
    /// Starts a source for a file on its lane. Returns it started.
    fn start_file(
        &mut self,
        lane: u32,
        path: &Path,
        strategy: ReadStrategy,
    ) -> Result<FileEventSource<T>, CoreError> {
        let name = path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut file_config =
            FileSourceConfig::new(format!("{}:{name}", self.config.name), path, strategy);
        file_config.read_buffer_bytes = self.config.read_buffer_bytes;
        file_config.max_bytes_per_cycle = self.config.max_bytes_per_turn;
        file_config.rotated = self.config.rotated.clone();
        file_config.state_dir = self.config.state_dir.clone();
        self.hub.state.lock().lanes.entry(lane).or_default();
        let lane_output = Arc::new(LaneOutput {
            lane,
            hub: Arc::clone(&self.hub),
        });
        let mut source = (self.build)(
            file_config,
            Arc::clone(&lane_output) as Arc<dyn SourceOutput<T, u64>>,
        );
        source.set_glob_member(lane);
        let start = source.start()?;
        lane_output.apply_start(start)?;
        Ok(source)
    }

    /// Tracks a file on `lane`: opened now when a slot is free, else waiting.
    /// `record`: what its pointer holds, if known.
    pub(super) fn track(
        &mut self,
        lane: u32,
        name: &str,
        strategy: ReadStrategy,
        matched: bool,
        record: Option<PointerRecord>,
    ) -> Result<(), CoreError> {
        let path = self.config.folder().join(name);
        let slot_free = !self.has_pointer() || self.open_files() < self.config.max_open_files;
        let source = if slot_free {
            Some(self.start_file(lane, &path, strategy)?)
        } else {
            self.waiting.push_back(lane);
            None
        };
        self.files.insert(
            lane,
            Tracked {
                lane,
                path,
                name: name.to_owned(),
                source,
                strategy,
                matched,
                cycles: 0,
                committed: 0,
                size: 0,
                parked_size: None,
                deleted_tail: None,
                record,
                seen_size: None,
                written: false,
                replaced: false,
            },
        );
        Ok(())
    }

    /// Settles the files gone from the glob, and gives slots to waiting files.
    pub(super) fn settle(&mut self) -> Result<(), CoreError> {
        let gone: Vec<u32> = self
            .files
            .values()
            .filter(|file| !file.matched)
            .map(|file| file.lane)
            .collect();
        for lane in gone {
            self.settle_gone(lane)?;
        }
        if !self.has_pointer() {
            return Ok(());
        }
        // files not open whose path names another file now (deleted and made again,
        // or rotated): not among their rotations, they are gone, and the new file is
        // another file, on a new lane
        let replaced: Vec<u32> = self
            .files
            .values()
            .filter(|file| file.source.is_none() && file.matched && file.replaced)
            .map(|file| file.lane)
            .collect();
        for lane in replaced {
            self.settle_replaced(lane)?;
        }
        // parked files that changed want a slot again
        for file in self.files.values() {
            if file.source.is_none()
                && !self.waiting.contains(&file.lane)
                && file.parked_size.is_none_or(|size| size != file.size)
            {
                self.waiting.push_back(file.lane);
            }
        }
        while let Some(&lane) = self.waiting.front() {
            if self.open_files() >= self.config.max_open_files && !self.park_one()? {
                break;
            }
            self.waiting.pop_front();
            self.unpark(lane)?;
        }
        Ok(())
    }

    /// A file the last scan did not find (its name is not in the glob any more, and no
    /// other name of the glob holds it). Still open: read to its end from the handle,
    /// and forgotten once everything read is committed. Not open: when its pointer's
    /// file is among its rotations, it waits for a slot to be finished there; else it
    /// is gone: forgotten, its unread lines (if it may have held any) counted once as
    /// a loss.
    fn settle_gone(&mut self, lane: u32) -> Result<(), CoreError> {
        let has_pointer = self.has_pointer();
        let Some(file) = self.files.get_mut(&lane) else {
            return Ok(());
        };
        if fs::symlink_metadata(&file.path).is_ok() {
            // the path names something again (not matched: not a file, or taken for
            // a rotation): left as it is
            return Ok(());
        }
        if !has_pointer {
            if forgettable(file) {
                self.forget(lane, None)?;
            }
            return Ok(());
        }
        match file.source.as_ref() {
            Some(source) if source.open_file_key().is_some() => {
                if forgettable(file) {
                    self.forget(lane, None)?;
                }
                Ok(())
            }
            Some(source) => {
                // its source looked for it (among its rotations too) and did not find
                // it; what it read is committed first
                let status = source.status();
                if file.cycles == 0
                    || source.has_pending_line()
                    || status.read_position > status.committed_position
                {
                    return Ok(());
                }
                let record = source.pointer_record();
                let unread = unread_of(file, &record, self.watch.is_active());
                self.forget(lane, unread)
            }
            None => {
                let record = fs::read(self.config.pointer_path(&file.path))
                    .map(|bytes| PointerRecord::decode(&bytes).record)
                    .unwrap_or_default();
                let globs = if self.config.rotated.is_empty() {
                    rotation::default_globs(&file.path)
                } else {
                    self.config.rotated.clone()
                };
                if record.epoch != 0
                    && rotation::find_pointer_file(&file.path, &globs, &record).is_some()
                {
                    // rotated away: its source finishes it there once it has a slot
                    if !self.waiting.contains(&lane) {
                        self.waiting.push_back(lane);
                    }
                    return Ok(());
                }
                file.committed = record.offset;
                let unread = unread_of(file, &record, self.watch.is_active());
                self.forget(lane, unread)
            }
        }
    }

    /// A file without a slot whose path names another file now. Its pointer's file
    /// among its rotations: its source finishes it there when it gets a slot (then
    /// the file at the path, under a new epoch). Else it is gone: forgotten (its loss
    /// counted once if it may have held unread lines), and the file at the path is a
    /// new file that the next scan reads on a new lane.
    fn settle_replaced(&mut self, lane: u32) -> Result<(), CoreError> {
        let Some(file) = self.files.get_mut(&lane) else {
            return Ok(());
        };
        let record = fs::read(self.config.pointer_path(&file.path))
            .map(|bytes| PointerRecord::decode(&bytes).record)
            .unwrap_or_default();
        if record.file_key == 0 || Some(record.file_key) != file.key() {
            return Ok(());
        }
        let globs = if self.config.rotated.is_empty() {
            rotation::default_globs(&file.path)
        } else {
            self.config.rotated.clone()
        };
        if rotation::find_pointer_file(&file.path, &globs, &record).is_some() {
            return Ok(());
        }
        file.committed = record.offset;
        let unread = unread_of(file, &record, self.watch.is_active());
        info!(source = %self.config.name, file = %file.path.display(), lane,
            "the file at the path is another file, and the lane's file is not among its rotations: the lane's file is gone; the new file is read on a new lane");
        self.forget(lane, unread)
    }

    /// Closes one open file with everything it read committed: at its end, or after
    /// its [`GlobSourceConfig::turns_per_slot`] turns (the one open the longest).
    /// False when none can give its slot now.
    fn park_one(&mut self) -> Result<bool, CoreError> {
        let turns = self.config.turns_per_slot;
        let candidate = self
            .files
            .values()
            .filter(|file| {
                file.matched
                    && file
                        .source
                        .as_ref()
                        .is_some_and(|source| parkable(source, file.cycles >= turns))
            })
            .max_by_key(|file| file.cycles)
            .map(|file| file.lane);
        let Some(lane) = candidate else {
            return Ok(false);
        };
        let Some(file) = self.files.get_mut(&lane) else {
            return Ok(false);
        };
        if let Some(mut source) = file.source.take() {
            let status = source.status();
            let record = source.pointer_record();
            source.stop()?;
            file.committed = status.committed_position;
            file.record = Some(record).filter(|record| record.epoch != 0);
            file.replaced = false;
            file.size = fs::metadata(&file.path).map_or(status.read_position, |m| m.len());
            // before its end (its turns were over): it waits for a slot again at once
            file.parked_size = (status.state == SourceState::CaughtUp).then_some(file.size);
            debug!(source = %self.config.name, file = %file.path.display(), lane, "gave its open-file slot to a waiting file");
        }
        Ok(true)
    }

    pub(super) fn unpark(&mut self, lane: u32) -> Result<(), CoreError> {
        let Some((path, strategy)) = self
            .files
            .get(&lane)
            .filter(|file| file.source.is_none())
            .map(|file| (file.path.clone(), file.strategy))
        else {
            return Ok(());
        };
        let source = self.start_file(lane, &path, strategy)?;
        if let Some(file) = self.files.get_mut(&lane) {
            file.source = Some(source);
            file.cycles = 0;
            file.parked_size = None;
        }
        Ok(())
    }

    /// Forgets a file gone from the glob: its source stopped, its pointer file and
    /// its lane removed. `unread`: it was gone before it was read to its end (the
    /// bytes known unread, or `None` when unknown): a loss, counted once and recorded
    /// (the loss file beside the registry) before the lane is forgotten, so a kill
    /// cannot make it forgotten.
    fn forget(&mut self, lane: u32, unread: Option<Option<u64>>) -> Result<(), CoreError> {
        let Some(mut file) = self.files.remove(&lane) else {
            return Ok(());
        };
        if let Some(unread) = unread {
            let path = file.path.display().to_string();
            let bytes = match unread {
                Some(bytes) => format!("at least {bytes} bytes after it were never read"),
                None => "it may have held lines after it that were never read (written after it was last seen)".to_owned(),
            };
            let what = format!(
                "the file {path} was deleted before it was read to its end (lane {lane}, committed to byte {}): {bytes}",
                file.committed
            );
            warn!(source = %self.config.name, file = %path, lane, committed = file.committed,
                "{what}: counted once as a loss (the feed is not lossless)");
            self.hub.record_loss(&path, &what);
        }
        if let Some(mut source) = file.source.take() {
            source.stop()?;
        }
        self.waiting.retain(|waiting| *waiting != lane);
        self.hub.committers.lock().remove(&lane);
        self.hub.state.lock().lanes.remove(&lane);
        if self.has_pointer() {
            // the pointer first: a crash before the registry write leaves a lane whose
            // file and pointer are gone, forgotten again at the next start
            let pointer = self.config.pointer_path(&file.path);
            match fs::remove_file(&pointer) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => {
                    return Err(CoreError::io(
                        format!("cannot remove the pointer file {}", pointer.display()),
                        error,
                    ))
                }
            }
        }
        self.registry.forget(&file.name)?;
        if let Some(tail) = file.deleted_tail.filter(|tail| *tail > 0) {
            warn!(source = %self.config.name, file = %file.path.display(), lane, bytes = tail,
                "the deleted file ended with bytes after its last line terminator: they were not published");
        }
        let renamed = if unread.is_none() {
            file.key()
                .and_then(|key| crate::rotation::renamed_to(&file.path, key))
        } else {
            None
        };
        match renamed {
            Some(to) => info!(source = %self.config.name, file = %file.path.display(), lane,
                "rotated: {} was renamed to {}; read to its end, then the new file at {} is read from its start (on a lane of its own); this lane and its pointer are removed",
                file.path.display(), to.display(), file.path.display()),
            None => info!(source = %self.config.name, file = %file.path.display(), lane,
                "the file left the glob (deleted, or renamed out of its folder) and everything read of it is committed: its lane and pointer are removed"),
        }
        Ok(())
    }
}

/// What a file gone before it was read to its end may have left unread: `None` when
/// nothing (it was seen in this run at the size committed and not written to since,
/// or its pointer says it never held a byte), `Some(Some(bytes))` when `bytes` at
/// least were never read, `Some(None)` when an unknown number may have been (written
/// to after it was last seen; not seen in this run while its pointer held bytes; no
/// folder watch to tell writes).
fn unread_of<T>(file: &Tracked<T>, record: &PointerRecord, watched: bool) -> Option<Option<u64>> {
    let committed = file.committed.max(record.offset);
    match file.seen_size {
        Some(size) if size > committed => Some(Some(size - committed)),
        Some(_) if file.written || !watched => Some(None),
        Some(_) => None,
        None if record.offset > 0 || record.fingerprint_length > 0 => Some(None),
        None => None,
    }
}

/// Whether a deleted file's source read its handle to the end and committed all of it
/// (or never had the file open in this run).
fn forgettable<T: Send + 'static>(file: &mut Tracked<T>) -> bool {
    let Some(source) = file.source.as_ref() else {
        return false;
    };
    if file.cycles == 0 || source.has_pending_line() {
        return false;
    }
    let status = source.status();
    let committed =
        !file.strategy.has_pointer() || status.committed_position == status.read_position;
    match source.open_file_unread_bytes() {
        None => true,
        Some(unread) => {
            if status.state != SourceState::CaughtUp || !committed {
                file.deleted_tail = None;
                return false;
            }
            if unread == 0 {
                return true;
            }
            // an unterminated last line: forgotten once it stopped growing
            let stable = file.deleted_tail == Some(unread);
            file.deleted_tail = Some(unread);
            stable
        }
    }
}

/// Whether an open file can give its slot: everything it read committed, nothing
/// pending, and at its end (or its turns are over).
fn parkable<T: Send + 'static>(source: &FileEventSource<T>, turns_over: bool) -> bool {
    let status = source.status();
    (turns_over || status.state == SourceState::CaughtUp)
        && status.committed_position == status.read_position
        && !source.has_pending_line()
        && !source.path_replaced()
        && !source.finishing_rotated()
}
