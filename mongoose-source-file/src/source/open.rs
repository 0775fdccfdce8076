//! Opening the input of a [`FileEventSource`]: the identity of the opened handle, the
//! identity check of the pointer (keep it, or reset it under a new epoch), following
//! the pointer's file among the rotation candidates at a restart, and reconciling the
//! pointer with what the consumers saved with their state.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use mongoose_core::{CoreError, Epoch, SourceState};
use tracing::{debug, info, warn};

use super::read::OpenInput;
use super::FileEventSource;
use crate::config::ReadStrategy;
use crate::identity::{
    identity_epoch_of, key_of, new_key_same_bytes, next_epoch, reset_reason, FileKey, Observed,
};
use crate::pointer::{fnv1a, owner_of, PointerRecord, LAYOUT_VERSION};
use crate::positional::{
    align_to_line_start, end_of_last_line, fingerprint_of, starts_as_fingerprinted,
};
use crate::rotation;

impl<T: Send + 'static> FileEventSource<T> {
    /// Opens the input (identity from the opened handle) and positions the reader.
    /// Returns false when there is no input to open yet.
    pub(super) fn open_input(&mut self) -> Result<bool, CoreError> {
        if !self.backoff.ready() {
            // the last attempt failed: no busy loop of reopens (issue 10, item 8)
            return Ok(false);
        }
        let path = self.config.path.clone();
        let opened = match self.next_file.take() {
            Some(file) => Ok(file),
            None => File::open(&path),
        };
        let file = match opened {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                if self.config.strategy.has_pointer()
                    && !self.opened_since_start
                    && self.follow_rotation(None)?
                {
                    return Ok(true);
                }
                self.report(
                    SourceState::Behind,
                    Some(format!(
                        "waiting for the input file {} to exist",
                        path.display()
                    )),
                );
                return Ok(false);
            }
            Err(error) => {
                self.backoff.failed();
                if let Some(unlogged) = self.open_failures.occurred() {
                    warn!(source = %self.config.name, path = %path.display(), %error,
                        failures = self.open_failures.total, unlogged,
                        "cannot open the input file; retrying with a back-off (up to 1 s; this warning is repeated at most every 10 s, with a count)");
                }
                self.report(
                    SourceState::Behind,
                    Some(format!(
                        "cannot open the input file {}: {error}",
                        path.display()
                    )),
                );
                return Ok(false);
            }
        };
        if let Some(failures) = self.open_failures.cleared() {
            info!(source = %self.config.name, path = %path.display(), failures, "the input file opens again");
        }
        #[cfg(feature = "testsuite")]
        if let Some(hook) = self.open_hook.as_mut() {
            hook();
        }
        // The identity is the opened file's (fstat of the handle), never the path's: a
        // rotation between the open and this read cannot label the old file with the
        // new file's key (book: guarantees/epochs-and-identity.md).
        let metadata = file
            .metadata()
            .map_err(|error| CoreError::io("cannot read the input file's identity", error))?;
        let key = key_of(&metadata);
        let size = metadata.len();
        let file = Arc::new(file);
        let reopen = self.opened_since_start;
        if self.config.strategy.has_pointer()
            && !reopen
            && self.follow_rotation(Some((&file, key, size)))?
        {
            return Ok(true);
        }
        if self.rotated_finished {
            if let Some(seen) = self.seen_at_path.take() {
                self.check_seen_at_path(&file, key, size, seen);
            }
        }
        let reopen_from = self.reopen_from.take();
        // the same file again (a reopen after a read error) resumes where it was
        let same_file_from =
            reopen_from.filter(|from| key.is_some() && key == self.last_key && size >= *from);
        let start_at = match (self.config.strategy, same_file_from) {
            (ReadStrategy::Committed, _) => self.adopt_pointer(&file, key, size, reopen_from)?,
            (_, Some(from)) => from,
            (ReadStrategy::Earliest | ReadStrategy::OnceEarliest, None) => {
                self.set_epoch(identity_epoch(key, &path));
                0
            }
            (ReadStrategy::Latest | ReadStrategy::OnceLatest, None) => {
                self.set_epoch(identity_epoch(key, &path));
                // the new file of a rotation is read from its start
                if reopen {
                    0
                } else if self.config.strategy == ReadStrategy::Latest {
                    end_of_last_line(&file, size)
                } else {
                    size // ONCE_LATEST: nothing to read, nothing unterminated
                }
            }
        };
        self.last_key = key;
        if reopen {
            self.status.reopens += 1;
        }
        self.opened_since_start = true;
        if let Some(wake) = self.wake.as_mut() {
            wake.follow_open_file(&path);
        }
        self.input = Some(OpenInput::new(file, key, Arc::clone(&self.path), start_at));
        self.status.read_position = start_at;
        debug!(source = %self.config.name, path = %path.display(), start_at, epoch = %self.epoch, "opened the input file");
        Ok(true)
    }

    /// The rotation globs of the input (the configured ones, or the defaults).
    pub(super) fn rotation_globs(&self) -> Vec<String> {
        if self.config.rotated.is_empty() {
            rotation::default_globs(&self.config.path)
        } else {
            self.config.rotated.clone()
        }
    }

    /// At the first open after start (COMMITED): when the path does not name the
    /// pointer's file (`at_path` is the file there, if any), looks for the pointer's
    /// file among the rotation candidates, by file key and fingerprint. Found: opens it
    /// at the pointer's offset under the pointer's epoch, to be read to its end (and its
    /// lines committed) before the file at the path, and returns true. Not found while
    /// the pointer's offset is past 0 and the path's file does not continue the
    /// pointer's: the rotated file was compressed or deleted before it was read, so its
    /// tail may be lost: a WARN naming it, counted, reported to the output (the feed is
    /// not lossless). Returns false to open the path's file as usual.
    fn follow_rotation(
        &mut self,
        at_path: Option<(&File, Option<FileKey>, u64)>,
    ) -> Result<bool, CoreError> {
        let record = {
            let shared = self.shared.lock();
            match shared.pointer.as_ref() {
                Some(pointer) => pointer.read(),
                None => shared.record,
            }
        };
        // a pointer naming no file has nothing to follow (a pointer whose file had no
        // whole first line yet has no epoch, but its file key)
        if record.file_key == 0 {
            return Ok(false);
        }
        let name = self.config.name.clone();
        let path = self.config.path.clone();
        let globs = self.rotation_globs();
        if let Some((file, key, size)) = at_path {
            let Some(key) = key else {
                return Ok(false);
            };
            if key.0 == record.file_key {
                // the pointer's key at the path: the pointer's file (an append), unless
                // it is shorter than the pointer or its leading bytes differ: cut in
                // place, or an inode reused by a new file after the old one was deleted
                let same_bytes =
                    record.fingerprint_length == 0 || starts_as_fingerprinted(file, &record);
                let shorter = size < record.offset;
                if same_bytes && !shorter {
                    return Ok(false);
                }
                // logrotate's copytruncate while the source was down: the lines after
                // the pointer are in the copy
                if let Some((copy, copied)) = rotation::find_copy(
                    &path,
                    &globs,
                    &record,
                    record.offset,
                    Some(record.file_key),
                    &[],
                ) {
                    info!(source = %name, path = %path.display(), copy = %copy.display(), offset = record.offset, epoch = record.epoch,
                        "rotated by truncation while stopped (copytruncate): reading the lines after the pointer from the copy, under the pointer's epoch, before the new content from 0 under a new epoch");
                    self.rotation_announced = true;
                    self.finish_elsewhere(copy, copied, record.epoch, record.offset, "the copy")?;
                    self.hold_at_path(file, key, size);
                    return Ok(true);
                }
                if shorter && same_bytes {
                    // truncated, no copy: the identity check resets it (a WARN)
                    return Ok(false);
                }
                // other leading bytes: another file on a reused inode (the pointer's
                // file deleted, a new one made at the path), looked for among the
                // rotations and else a possible loss, as with another key
                // (glob-churn seed 1796197179105)
            }
        }
        if let Some((rotated_path, file)) = rotation::find_pointer_file(&path, &globs, &record) {
            // an ordinary rotation while stopped: nothing is lost (INFO)
            info!(source = %name, path = %path.display(), rotated = %rotated_path.display(),
                offset = record.offset, epoch = record.epoch,
                "the input was rotated: finishing the pointer's file (found by file key and fingerprint) from the pointer to its end, under its epoch, before the file at the path");
            self.finish_elsewhere(
                rotated_path.clone(),
                file,
                record.epoch,
                record.offset,
                "the rotated file",
            )?;
            if let Some((file, Some(key), size)) = at_path {
                self.hold_at_path(file, key, size);
            }
            // a file written after the pointer's file was rotated, other than the
            // one at the path: the current file between two rotations while the
            // source was down. It cannot be proven a rotation (a copy would be read
            // twice), so it is not read: reported as a possible loss, never silent.
            let at_path_key = at_path.and_then(|(_, key, _)| key).map(|key| key.0);
            for skipped in rotation::written_after(&path, &globs, &rotated_path, at_path_key) {
                warn!(source = %name, path = %path.display(), file = %skipped.display(),
                    "the input was rotated more than once while the source was stopped: this file was written after the pointer's file and may hold lines never read (counted as a possible loss; the feed is not lossless). If it is a rotation of the input, read it with a ONCE feed; a glob feed reads every file");
                let skipped = skipped.display().to_string();
                self.report_unread(
                    &skipped,
                    &format!("{skipped}, written after the rotated file {} while the source was stopped, was not read (a possible loss)", rotated_path.display()),
                );
            }
            return Ok(true);
        }
        if record.offset == 0 && record.fingerprint_length == 0 {
            // the pointer's file held no bytes when last seen: nothing can be unread
            return Ok(false);
        }
        if let Some((file, _, size)) = at_path {
            // another key but the same leading bytes and not shorter: the pointer's
            // file copied into place, kept by the identity check
            let continues = record.fingerprint_length > 0
                && size >= record.offset
                && starts_as_fingerprinted(file, &record);
            if continues {
                return Ok(false);
            }
        } else if self.glob_member {
            // a glob's file gone from its path, not found among its rotations: the
            // glob decides whether it was renamed inside the glob, or deleted with
            // unread lines (a loss it counts once)
            return Ok(false);
        }
        let compressed = rotation::compressed_candidates(&path, &globs);
        let named = if compressed.is_empty() {
            format!(
                "the input's previous file (read to byte {} under epoch {}; not found among {})",
                record.offset,
                record.epoch,
                globs.join(", ")
            )
        } else {
            compressed
                .iter()
                .map(|candidate| candidate.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        warn!(source = %name, path = %path.display(), file = %named, pointer = record.offset, epoch = record.epoch,
            "the input was rotated and the pointer's file was compressed or deleted before it was read to its end: the lines it held after the pointer (an unknown number of bytes) cannot be read and are counted as a possible loss (the feed is not lossless). Decompress it into a file that is read by a ONCE feed if they are needed");
        self.report_unread(
            &named,
            &format!(
                "{}: rotated, and compressed or deleted before it was read to its end ({named}): the lines after byte {} are a possible loss",
                path.display(),
                record.offset
            ),
        );
        Ok(false)
    }

    /// The open file was seen replaced at its end, while running: the file now at the
    /// path is held to be read next. A rotation candidate written after the open file
    /// (found among the candidates by its key), other than the one held, is the file of
    /// the time between two rotations made before the source reached the end of its
    /// file: it cannot be proven a rotation (a copy would be read twice), so, as at a
    /// restart, it is not read but reported as a possible loss naming it, and recorded
    /// beside the pointer (chaos seed 1796199420421), never skipped silently.
    pub(super) fn report_files_between(&mut self) {
        let Some(open_key) = self.input.as_ref().and_then(|input| input.key()) else {
            return;
        };
        let path = self.config.path.clone();
        let globs = self.rotation_globs();
        let key_at = |candidate: &Path| {
            std::fs::metadata(candidate)
                .ok()
                .and_then(|metadata| key_of(&metadata))
        };
        let Some(open_now) = rotation::candidates(&path, &globs)
            .into_iter()
            .find(|candidate| key_at(candidate) == Some(open_key))
        else {
            return;
        };
        let held_key = self
            .next_file
            .as_ref()
            .and_then(|file| file.metadata().ok())
            .and_then(|metadata| key_of(&metadata))
            .map(|key| key.0);
        for skipped in rotation::written_after(&path, &globs, &open_now, held_key) {
            warn!(source = %self.config.name, path = %path.display(), file = %skipped.display(), rotated = %open_now.display(),
                "the input was rotated more than once before the source reached the end of its file: this file was written after it and may hold lines never read (counted as a possible loss; the feed is not lossless). If it is a rotation of the input, read it with a ONCE feed; a glob feed reads every file");
            let skipped = skipped.display().to_string();
            self.report_unread(
                &skipped,
                &format!(
                    "{skipped}, written after {} while the source was still reading it, was not read (a possible loss)",
                    open_now.display()
                ),
            );
        }
    }

    /// A restart finishes another file first (the pointer's file rotated away, or a
    /// copy of it): the file at the path now is held, to be read next even if a rotation
    /// renames it away meanwhile (as a live rotation holds it, issue 11), and what it
    /// holds now is noted, to tell at the switch whether it was cut in place meanwhile.
    fn hold_at_path(&mut self, file: &File, key: FileKey, size: u64) {
        self.next_file = file.try_clone().ok();
        self.seen_at_path = Some(SeenAtPath {
            key,
            size,
            fingerprint: fingerprint_of(file),
        });
    }

    /// At the switch from the file a restart finished to the file at the path: that
    /// file must still hold what it held at the restart (`seen`). Shorter, or with
    /// other leading bytes, it was cut in place (a second copytruncate) while the other
    /// file was read: the lines it held are only in a newer copy, which cannot be proven
    /// a rotation of the input and is not read: a possible loss, reported and recorded
    /// beside the pointer (chaos seed 1796199420174). Another file than the one held is
    /// the same loss (the held file could not be kept open).
    fn check_seen_at_path(
        &mut self,
        file: &File,
        key: Option<FileKey>,
        size: u64,
        seen: SeenAtPath,
    ) {
        let path = self.config.path.display().to_string();
        let what = if key != Some(seen.key) {
            format!(
                "{path}: the file at the path when the restart began finishing a rotated file ({} bytes) is no longer there: its lines are a possible loss",
                seen.size
            )
        } else {
            let same_leading = seen.fingerprint.is_none_or(|(length, fingerprint)| {
                let record = PointerRecord {
                    fingerprint_length: length,
                    fingerprint,
                    ..PointerRecord::default()
                };
                size >= length && starts_as_fingerprinted(file, &record)
            });
            if size >= seen.size && same_leading {
                return;
            }
            format!(
                "{path}: cut in place again (copytruncate) while the source finished the copy of an earlier cut: the {} bytes it held at the restart are only in a newer copy, which is not read (a possible loss)",
                seen.size
            )
        };
        warn!(source = %self.config.name, path = %path, held = seen.size, now = size,
            "the input file was cut in place or replaced while the source finished a rotated file or copy: the lines it held then were not read (counted as a possible loss; the feed is not lossless). If they are needed, read the newer copy with a ONCE feed");
        self.report_unread(&path, &what);
    }

    /// Opens `file` (`at`: the pointer's file rotated away, or a copy of it) to be read
    /// from `from` to its end under `epoch` before the file at the path: the pointer
    /// names it (its file key) until then, so a restart finds it again.
    fn finish_elsewhere(
        &mut self,
        at: std::path::PathBuf,
        file: File,
        epoch: u64,
        from: u64,
        what: &str,
    ) -> Result<(), CoreError> {
        let metadata = file
            .metadata()
            .map_err(|error| CoreError::io("cannot read the rotated file's identity", error))?;
        let key = key_of(&metadata);
        let file = Arc::new(file);
        {
            let mut shared = self.shared.lock();
            shared.input = Some(Arc::clone(&file));
            if let Some(key) = key {
                if shared.record.file_key != key.0 && shared.record.epoch == epoch {
                    let record = PointerRecord {
                        file_key: key.0,
                        ..shared.record
                    };
                    shared.write_record(record)?;
                }
            }
        }
        self.front.epoch.store(epoch, Ordering::Release);
        // the pointer's file had no whole first line when its epoch was to be taken:
        // taken at its first line now
        self.identity_pending = epoch == 0;
        self.set_epoch(Epoch(epoch));
        self.last_key = key;
        self.opened_since_start = true;
        if let Some(wake) = self.wake.as_mut() {
            wake.follow_open_file(&at);
        }
        self.input = Some(OpenInput::new(file, key, Arc::from(at.as_path()), from));
        self.status.read_position = from;
        self.status.rotated_files_finished += 1;
        let reason = format!(
            "finishing {what} {} before the input file {}",
            at.display(),
            self.config.path.display()
        );
        self.report(SourceState::Behind, Some(reason.clone()));
        self.draining = Some(reason);
        self.finishing_rotated = Some(at);
        Ok(())
    }

    /// The open file was found cut in place (shorter than what was read): when a copy
    /// of it holds what was read and more (logrotate's `copytruncate`), the lines after
    /// `from` are read from the copy under the same epoch, then the truncated file from
    /// its start under a new epoch. Returns true when the copy was found.
    pub(super) fn finish_copy(&mut self, from: u64) -> Result<bool, CoreError> {
        let Some(input) = self.input.as_ref() else {
            return Ok(false);
        };
        let record = self.shared.lock().record;
        if record.epoch != self.epoch.get() {
            return Ok(false);
        }
        let original = input.key().map(|key| key.0);
        let tail = input.taken_tail(4096).to_vec();
        let globs = self.rotation_globs();
        let Some((copy, copied)) =
            rotation::find_copy(&self.config.path, &globs, &record, from, original, &tail)
        else {
            return Ok(false);
        };
        // logrotate's copytruncate: nothing is lost, the lines not read yet are in the copy
        let copy_size = copied.metadata().map_or(from, |metadata| metadata.len());
        if copy_size <= from {
            info!(source = %self.config.name, path = %self.config.path.display(), copy = %copy.display(), epoch = record.epoch,
                "rotated by truncation: all {from} bytes were read before; reading the new content from 0");
        } else {
            info!(source = %self.config.name, path = %self.config.path.display(), epoch = record.epoch,
                "rotated by truncation (copytruncate): {from} bytes were read before, the {} after them are read from the copy {}; then the new content from 0",
                copy_size - from, copy.display());
        }
        self.rotation_announced = true;
        self.close_input();
        self.finish_elsewhere(copy, copied, record.epoch, from, "the copy")?;
        Ok(true)
    }

    /// The identity check of a COMMITED open: keeps the pointer, or resets it to 0
    /// under a new epoch when the file was replaced or truncated. Returns where to read.
    fn adopt_pointer(
        &mut self,
        file: &Arc<File>,
        key: Option<FileKey>,
        size: u64,
        reopen_from: Option<u64>,
    ) -> Result<u64, CoreError> {
        let name = self.config.name.clone();
        let path = self.config.path.clone();
        let mut shared = self.shared.lock();
        let mut record = match shared.pointer.as_ref() {
            Some(pointer) => pointer.read(),
            None => shared.record,
        };
        let observed = Observed {
            key,
            size,
            same_leading_bytes: record.fingerprint_length > 0
                && starts_as_fingerprinted(file, &record),
            rotated_finished: std::mem::take(&mut self.rotated_finished),
            read_through: reopen_from,
        };
        let announced = std::mem::take(&mut self.rotation_announced);
        let reason_to_reset = reset_reason(&record, &observed).map(|reason| reason.message(&path));
        if reason_to_reset.is_none() && new_key_same_bytes(&record, &observed) {
            // an NFS remount, an overlay copy-up, a writer that renames a copy into
            // place
            warn!(source = %name, path = %path.display(),
                "the input file has a new file key but the same leading bytes and is not shorter than the pointer: keeping the pointer and epoch");
        }
        let start_at;
        // the epoch of a file read from its start is its identity (taken at its first
        // line when it has none yet): the same on every read of it (invariant 9)
        let identity = identity_epoch_of(file);
        if let Some(reason) = reason_to_reset {
            let old_epoch = record.epoch;
            if announced || observed.rotated_finished {
                // an ordinary rotation, said at INFO when it was seen: the new file is
                // read from its start, nothing was lost
                info!(source = %name, path = %path.display(),
                    "reading the new file at the path from its start under its own epoch (after a rotation)");
            } else {
                warn!(source = %name, %reason, "resetting the pointer to 0 under the new file's epoch (its identity)");
            }
            record.offset = 0;
            record.epoch = identity.map_or(0, |identity| next_epoch(identity, old_epoch));
            // forget what the old file acknowledged
            shared.acknowledged = None;
            self.front.reset_to(record.epoch);
            self.status.resets += 1;
            start_at = 0;
        } else {
            if record.epoch == 0 {
                // a new pointer file, or one of a layout without epochs
                record.epoch = identity.unwrap_or(0);
                if record.offset > 0 {
                    let aligned = align_to_line_start(file, record.offset, size);
                    if aligned != record.offset {
                        warn!(source = %name, from = record.offset, to = aligned,
                            "a pointer without an epoch points inside a line: resuming after the line's terminator");
                        record.offset = aligned;
                    }
                }
            }
            start_at = reopen_from.unwrap_or(0).max(record.offset);
        }
        record.file_key = key.map_or(0, |key| key.0);
        record.layout_version = LAYOUT_VERSION;
        record.owner = owner_of(&path);
        if let Some((length, fingerprint)) = fingerprint_of(file) {
            record.fingerprint_length = length;
            record.fingerprint = fingerprint;
        }
        shared.input = Some(Arc::clone(file));
        shared.write_record(record)?;
        self.front.epoch.store(record.epoch, Ordering::Release);
        let epoch = Epoch(record.epoch);
        drop(shared);
        // no epoch yet: the file holds no whole line, and its identity is taken with its
        // first one ([`FileEventSource::establish_identity`])
        self.identity_pending = record.epoch == 0;
        self.set_epoch(epoch);
        Ok(start_at)
    }

    /// A file opened before its first line was whole has no epoch yet: once it holds
    /// it, its identity becomes the epoch (pointer, acknowledgement front, output), before
    /// anything of it is published. Returns whether the epoch is there.
    pub(super) fn establish_identity(&mut self) -> Result<bool, CoreError> {
        if !self.identity_pending {
            return Ok(true);
        }
        let Some(identity) = self
            .input
            .as_ref()
            .and_then(|input| identity_epoch_of(&input.file))
        else {
            return Ok(false);
        };
        let mut shared = self.shared.lock();
        let record = PointerRecord {
            epoch: identity,
            ..shared.record
        };
        shared.acknowledged = None;
        shared.write_record(record)?;
        self.front.reset_to(identity);
        drop(shared);
        self.identity_pending = false;
        debug!(source = %self.config.name, epoch = %Epoch(identity), "the input's first line: its identity is the epoch");
        self.set_epoch(Epoch(identity));
        Ok(true)
    }
}

/// Writes the identity of a glob's newly found file and its `lane` into its pointer
/// file, before it is read: a new epoch, offset 0, the file key and the fingerprint of
/// its first bytes. From then on the file is known by identity even while it waits for
/// an open-file slot: renamed inside the glob it keeps its lane, rotated it is followed,
/// and gone before it was opened its lines are counted lost; and a lost or damaged lane
/// registry is rebuilt from the lanes the pointers record. A pointer file already there
/// is left as it is but for its lane (the identity check of the first open decides).
/// Returns what the pointer holds, or `None` when the file cannot be opened (gone
/// already). The pointer is in `state_dir`, or beside the input without one.
pub(crate) fn write_identity(
    state_dir: Option<&Path>,
    input: &Path,
    lane: u32,
) -> Result<Option<PointerRecord>, CoreError> {
    let file = match File::open(input) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(CoreError::io(
                format!("cannot open {} to read its identity", input.display()),
                error,
            ))
        }
    };
    let metadata = file
        .metadata()
        .map_err(|error| CoreError::io("cannot read the input file's identity", error))?;
    let Some(key) = key_of(&metadata) else {
        return Ok(None);
    };
    let pointer_path = crate::pointer::pointer_path_in(state_dir, input);
    let mut opened = crate::pointer::PointerFile::open(&pointer_path).map_err(|error| {
        CoreError::io(
            format!("cannot open the pointer file {}", pointer_path.display()),
            error,
        )
    })?;
    let existing = opened.decoded.record;
    let write = |opened: &mut crate::pointer::OpenedPointer, record: &PointerRecord| {
        opened.file.write(record).map_err(|error| {
            CoreError::io(
                format!("cannot write the pointer file {}", pointer_path.display()),
                error,
            )
        })
    };
    if !opened.created && existing.epoch != 0 {
        if existing.lane != lane {
            let record = PointerRecord { lane, ..existing };
            write(&mut opened, &record)?;
            return Ok(Some(record));
        }
        return Ok(Some(existing));
    }
    let (fingerprint_length, fingerprint) = fingerprint_of(&file).unwrap_or((0, 0));
    let record = PointerRecord {
        offset: 0,
        // its identity, or none yet (taken at its first line)
        epoch: identity_epoch_of(&file).unwrap_or(0),
        file_key: key.0,
        layout_version: LAYOUT_VERSION,
        fingerprint_length,
        fingerprint,
        owner: crate::pointer::owner_of(input),
        lane,
    };
    write(&mut opened, &record)?;
    Ok(Some(record))
}

/// The epoch of a strategy without a pointer: the input file's identity.
fn identity_epoch(key: Option<FileKey>, path: &Path) -> Epoch {
    let hash = match key {
        Some(key) => key.0,
        None => fnv1a(path.as_os_str().to_string_lossy().as_bytes()),
    };
    Epoch((hash >> 1).max(1))
}

/// What the file at the path held when a restart began finishing another file
/// ([`FileEventSource::hold_at_path`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct SeenAtPath {
    key: FileKey,
    size: u64,
    /// The fingerprint of its leading bytes (length, FNV-1a), when they could be read.
    fingerprint: Option<(u64, u64)>,
}
