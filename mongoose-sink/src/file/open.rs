//! Opening a file sink: the file, its lock and its state, checked against each other;
//! a batch a crash left partly written is cut off.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mongoose_durable::disk::{Disk, RealDisk};
use tracing::{info, warn};

use crate::error::SinkError;

use mongoose_durable::log::RecordLog;

use super::state::{
    read_state, state_header, BatchCheck, Identity, Replayed, ReplayedLane, StateLog, Unreadable,
};
use super::{
    io, new_state_id, state_path, unix_millis, FileSink, FileSinkConfig, OLD_MAGIC, OLD_SLOT_BYTES,
};

/// Creates the folder of `new` (a configured state file) and adopts the state an older
/// run left beside the file (`old`): moved, or copied (to a temporary name, synced,
/// renamed) and removed across filesystems. Both there: `new` wins (a crash between
/// the copy and the removal), `old` is left with a warning.
fn adopt_state(sink: &str, old: &Path, new: &Path) -> std::io::Result<()> {
    let folder = new.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(folder)?;
    if std::fs::symlink_metadata(old).is_err() {
        return Ok(());
    }
    if std::fs::symlink_metadata(new).is_ok() {
        warn!(sink, old = %old.display(), new = %new.display(),
            "a sink state beside the file and one in the data folder: the data folder's is used, the old one is left as it is (remove it)");
        return Ok(());
    }
    if std::fs::rename(old, new).is_err() {
        // the copy goes through a replace (temporary, fsync, rename, fsync of the
        // folder), under the `.adopting` name older runs used
        let mut temporary = new.as_os_str().to_owned();
        temporary.push(".adopting");
        let temporary = PathBuf::from(temporary);
        mongoose_durable::replace::replace_through(new, &temporary, &std::fs::read(old)?)?;
        if let Err(error) = std::fs::remove_file(old) {
            warn!(sink, from = %old.display(), to = %new.display(), %error,
                "adopted the sink state an older run wrote beside its file: copied into the data folder; the old one cannot be removed (remove it: it is no longer read)");
            return Ok(());
        }
    } else {
        mongoose_durable::disk::sync_folder(folder)?;
    }
    info!(sink, from = %old.display(), to = %new.display(),
        "adopted the sink state an older run wrote beside its file: moved into the data folder");
    Ok(())
}

/// A refusal of `state` for the sink `sink` writing `path`.
fn refuse(sink: &str, state: &Path, problem: String, fix: String) -> SinkError {
    SinkError::State {
        sink: sink.to_owned(),
        state: state.display().to_string(),
        problem,
        fix,
    }
}

/// What to do when the state cannot be trusted: restore it, or start a new file.
fn restore_or_move(path: &Path, state: &Path) -> String {
    format!(
        "restore {state} as it was with this file, or start a new output file: move {path} and {state} away (the inputs not committed yet are then written to the new file; those written since the last commit are in both)",
        path = path.display(),
        state = state.display()
    )
}

/// CRC32 of the bytes `check` covers in `file`.
fn crc_of(file: &File, check: &BatchCheck) -> std::io::Result<u32> {
    let mut hasher = crc32fast::Hasher::new();
    let mut buffer = vec![0u8; 1 << 16];
    let mut at = check.start;
    while at < check.end {
        let want = ((check.end - at) as usize).min(buffer.len());
        let read = file.read_at(&mut buffer[..want], at)?;
        if read == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the file ended",
            ));
        }
        hasher.update(&buffer[..read]);
        at += read as u64;
    }
    Ok(hasher.finalize())
}

/// The newest valid slot of a state of the older format: the durable length it
/// records.
fn old_format_length(bytes: &[u8]) -> Option<u64> {
    let mut best: Option<(u64, u64)> = None;
    for slot in 0..2usize {
        let start = slot * OLD_SLOT_BYTES;
        let Some(head) = bytes.get(start..start + 24) else {
            continue;
        };
        if &head[..8] != OLD_MAGIC {
            continue;
        }
        let counter = u64::from_le_bytes(head[8..16].try_into().ok()?);
        let len = u32::from_le_bytes(head[16..20].try_into().ok()?) as usize;
        let crc = u32::from_le_bytes(head[20..24].try_into().ok()?);
        let Some(payload) = bytes.get(start + 24..start + 24 + len) else {
            continue;
        };
        if crc32fast::hash(payload) != crc {
            continue;
        }
        // its record starts with the durable length (a postcard varint)
        let Ok((length, _)) = postcard::take_from_bytes::<u64>(payload) else {
            continue;
        };
        if best.is_none_or(|(known, _)| counter > known) {
            best = Some((counter, length));
        }
    }
    best.map(|(_, length)| length)
}

/// Creates the output file `path` that is not there yet, and makes its name durable:
/// its state (in the data folder, another folder) may record bytes of it at the first
/// batch, and a state that records bytes of a file a power loss took away refuses the
/// start ("fewer than the N its state records").
fn create_output<D: Disk>(disk: &mut D, path: &Path) -> std::io::Result<()> {
    drop(disk.create(path)?);
    let folder = match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => folder,
        _ => Path::new("."),
    };
    disk.sync_folder(folder)
}

impl FileSink {
    /// Opens the sink `name` on `config.path`, checking its state against the file
    /// (see the [module documentation](super)).
    ///
    /// # Errors
    /// [`SinkError::State`]: the state does not match the file (damaged, older,
    /// another file's, missing beside a non-empty file): nothing was changed.
    /// [`SinkError::InUse`]: another sink writes the file. [`SinkError::Io`]: the file
    /// or its state cannot be opened, read or written.
    pub fn open(name: &str, config: &FileSinkConfig) -> Result<Self, SinkError> {
        let path = config.path.clone();
        let existed = std::fs::symlink_metadata(&path).is_ok();
        if !existed && config.sync {
            create_output(&mut RealDisk, &path)
                .map_err(io(name, format!("creating {}", path.display())))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(false)
            .open(&path)
            .map_err(io(name, format!("opening {}", path.display())))?;
        let meta = file
            .metadata()
            .map_err(io(name, format!("reading {}", path.display())))?;
        let mut sink = FileSink {
            name: name.to_owned(),
            path: path.clone(),
            state_file: config
                .state_file
                .clone()
                .unwrap_or_else(|| state_path(&path)),
            file,
            state: None,
            sync: config.sync,
            length: meta.len(),
            data_dirty: false,
            lanes: Vec::new(),
            index: HashMap::new(),
            last_lane: usize::MAX,
            batch: 0,
            touched: Vec::new(),
            undo: Vec::new(),
            buffer: Vec::new(),
            plan: Vec::new(),
            held: Vec::new(),
        };
        if !meta.is_file() {
            warn!(sink = name, file = %path.display(),
                "the file sink's target is not a regular file (a device): no state is recorded beside it, so its lines are not de-duplicated after a crash");
            return Ok(sink);
        }
        // The durable layer's flock on the output file itself. A lock is held by an
        // open file description, which a child process forked by another thread shares
        // until it execs (and closes it): a lock held so briefly is waited for, a second
        // writer is not.
        match mongoose_durable::lock::lock_waiting(&sink.file) {
            Ok(true) => {}
            Ok(false) => {
                return Err(SinkError::InUse {
                    sink: name.to_owned(),
                    path: path.display().to_string(),
                })
            }
            Err(error) => return Err(io(name, format!("locking {}", path.display()))(error)),
        }
        if config.state_file.is_some() {
            adopt_state(name, &state_path(&path), &sink.state_file)
                .map_err(io(name, format!("moving {}", state_path(&path).display())))?;
        }
        if let Err(error) = sink.open_state(meta.len(), meta.dev(), meta.ino()) {
            if !existed {
                // a refused start leaves no file it made behind
                let _ = std::fs::remove_file(&path);
            }
            return Err(error);
        }
        Ok(sink)
    }

    /// Reads and checks the state beside the file (`actual` bytes long, on `device`
    /// and `inode`), cutting off a batch a crash left partly written.
    fn open_state(&mut self, actual: u64, device: u64, inode: u64) -> Result<(), SinkError> {
        let name = self.name.clone();
        let path = self.path.clone();
        let state_file = self.state_file.clone();
        // a compaction a crash interrupted: the state itself is still whole
        let _ = mongoose_durable::replace::remove_leftover(&state_file);
        let bytes = match std::fs::read(&state_file) {
            Ok(bytes) => Some(bytes),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
            Err(error) => {
                return Err(io(&name, format!("reading {}", state_file.display()))(
                    error,
                ))
            }
        };
        let fresh = |sink: &mut FileSink, length: u64| -> Result<(), SinkError> {
            let identity = Identity {
                sink: sink.name.clone(),
                path: path.display().to_string(),
                device,
                inode,
                state_id: new_state_id(),
                created_unix_millis: unix_millis(),
            };
            sink.length = length;
            sink.write_snapshot(identity, 0, BatchCheck::default())
                .map_err(io(&name, format!("writing {}", state_file.display())))
        };
        let Some(bytes) = bytes else {
            if actual > 0 {
                return Err(refuse(
                    &name,
                    &state_file,
                    format!(
                        "{} holds {actual} bytes and has no sink state beside it, so which outputs it holds is unknown (a re-delivered input would be written twice)",
                        path.display()
                    ),
                    format!(
                        "if this sink wrote the file, restore {state} as it was with it; to start a new output file, move {path} away",
                        path = path.display(),
                        state = state_file.display()
                    ),
                ));
            }
            return fresh(self, 0);
        };
        if bytes.is_empty() && actual == 0 {
            return fresh(self, 0);
        }
        if bytes.starts_with(OLD_MAGIC) {
            return match old_format_length(&bytes) {
                Some(length) if length == actual => {
                    warn!(sink = %name, file = %path.display(), length,
                        "the sink state is of an older format: taking the file as it is (an input re-delivered from before the last commit may be written again once)");
                    fresh(self, actual)
                }
                recorded => Err(refuse(
                    &name,
                    &state_file,
                    match recorded {
                        Some(length) => format!(
                            "it is of an older format and records {length} bytes written, and {} holds {actual}",
                            path.display()
                        ),
                        None => "it is of an older format and damaged".to_owned(),
                    },
                    restore_or_move(&path, &state_file),
                )),
            };
        }
        let refused = |problem| {
            refuse(
                &name,
                &state_file,
                problem,
                restore_or_move(&path, &state_file),
            )
        };
        // read without changing it: a refusal below leaves it as it is
        let read = read_state(&state_file, &bytes).map_err(|unreadable| match unreadable {
            Unreadable::Io(error) => io(&name, format!("reading {}", state_file.display()))(error),
            Unreadable::Refused(problem) => refused(problem),
        })?;
        let identity = read.identity.clone();
        let mut replayed = Replayed::replay(read.start, &read.frames).map_err(refused)?;
        let same_file = identity.device == device && identity.inode == inode;
        // the file decides whether the last record's batch was written
        let mut cut_to = None;
        if let Some((seq, check, records)) = replayed.tentative.take() {
            if actual < check.start {
                // shorter than what was written before: see below
            } else if actual < check.end {
                // a crash between the record and the end of its bytes: never reported
                cut_to = Some(check.start);
            } else {
                let crc = crc_of(&self.file, &check)
                    .map_err(io(&name, format!("reading {}", path.display())))?;
                if crc == check.crc {
                    replayed.apply(&records).map_err(|problem| {
                        refuse(
                            &name,
                            &state_file,
                            problem,
                            restore_or_move(&path, &state_file),
                        )
                    })?;
                    replayed.committed_seq = seq;
                    replayed.length = check.end;
                    replayed.last = check;
                } else if same_file && actual == check.end {
                    return Err(refuse(
                        &name,
                        &state_file,
                        format!(
                            "the last batch it records (bytes {}..{} of {}) differs from what the file holds there: the file was changed by something else",
                            check.start,
                            check.end,
                            path.display()
                        ),
                        restore_or_move(&path, &state_file),
                    ));
                }
            }
        } else if replayed.last.end == replayed.length
            && replayed.length > 0
            && actual >= replayed.length
        {
            let crc = crc_of(&self.file, &replayed.last)
                .map_err(io(&name, format!("reading {}", path.display())))?;
            if crc != replayed.last.crc && same_file {
                return Err(refuse(
                    &name,
                    &state_file,
                    format!(
                        "the last batch it records (bytes {}..{} of {}) differs from what the file holds there: the file was changed by something else",
                        replayed.last.start,
                        replayed.last.end,
                        path.display()
                    ),
                    restore_or_move(&path, &state_file),
                ));
            }
        }
        let expected = cut_to.unwrap_or(actual);
        if !same_file {
            let matches = cut_to.is_none()
                && expected == replayed.length
                && (replayed.length == 0
                    || (replayed.last.end == replayed.length
                        && crc_of(&self.file, &replayed.last).ok() == Some(replayed.last.crc)));
            if !matches {
                return Err(refuse(
                    &name,
                    &state_file,
                    format!(
                        "it belongs to another file (device {}, inode {}: {} bytes written by sink '{}'), not {} (device {device}, inode {inode}, {actual} bytes): it was copied from elsewhere, or the file was replaced",
                        identity.device,
                        identity.inode,
                        replayed.length,
                        identity.sink,
                        path.display()
                    ),
                    restore_or_move(&path, &state_file),
                ));
            }
        }
        if expected > replayed.length {
            return Err(refuse(
                &name,
                &state_file,
                format!(
                    "{} holds {actual} bytes, and its state records only {} written by this sink: the state is older than the file (restored from a copy, cut, or another run's), or something else wrote to the file",
                    path.display(),
                    replayed.length
                ),
                restore_or_move(&path, &state_file),
            ));
        }
        if expected < replayed.length {
            return Err(refuse(
                &name,
                &state_file,
                format!(
                    "{} holds {actual} bytes, fewer than the {} its state records as written and reported published: the file was truncated, replaced or rotated away",
                    path.display(),
                    replayed.length
                ),
                format!(
                    "put the file back; to start it afresh instead, move {state} away too (outputs of inputs not committed yet may then be written again)",
                    state = state_file.display()
                ),
            ));
        }
        if let Some(start) = cut_to {
            warn!(sink = %name, file = %path.display(), bytes = actual - start, durable_length = start,
                "cutting off a batch a crash left partly written: its outputs were never reported published and come again");
            self.file.set_len(start).map_err(io(
                &name,
                format!("cutting {} back to {start} bytes", path.display()),
            ))?;
            self.file
                .sync_all()
                .map_err(io(&name, format!("syncing {}", path.display())))?;
        }
        if let Some((offset, bytes_cut)) = read.torn {
            warn!(sink = %name, state = %state_file.display(), offset, bytes_cut,
                "the last record of the sink state was cut short by a crash (its batch was not written): cut, and the file decides what was written");
        }
        self.length = replayed.length;
        let mut slots: Vec<(u32, ReplayedLane)> = replayed.lanes.into_iter().collect();
        slots.sort_unstable_by_key(|(slot, _)| *slot);
        let next_slot = slots.last().map_or(0, |(slot, _)| slot + 1);
        for (slot, (name, last, gaps)) in slots {
            let at = self.add_lane(
                &Arc::from(name.feed.as_str()),
                name.lane,
                name.writer,
                name.epoch,
            );
            let lane = &mut self.lanes[at];
            lane.slot = slot;
            lane.persisted = true;
            lane.last = Some(last);
            lane.gaps = gaps.into_iter().collect();
        }
        if same_file && !read.legacy {
            // the checks passed: the torn tail is cut (the layer reports it too)
            let (log, _) = RecordLog::open_or_create(&state_file, &state_header(identity.state_id))
                .map_err(|error| {
                    io(&name, format!("opening {}", state_file.display()))(error.into())
                })?;
            debug_assert_eq!(log.len(), replayed.end, "the log opened as it was read");
            self.state = Some(StateLog {
                log,
                identity: identity.clone(),
                dirty: false,
                seq: replayed.seq,
                committed: replayed.committed_seq,
                last: replayed.last,
                snapshot_len: replayed.snapshot_len,
                compact_after: 0,
                next_slot,
                sync: self.sync,
            });
        }
        if !same_file || read.legacy {
            if !same_file {
                info!(sink = %name, file = %path.display(),
                    "the file was moved or copied with its state (another device or inode, the same bytes): recording it as this file");
            }
            if read.legacy {
                info!(sink = %name, state = %state_file.display(),
                    "the sink state is of the layout before the durable layer's (MGSNKST2): rewritten in the durable layout");
            }
            let identity = Identity {
                device,
                inode,
                path: path.display().to_string(),
                ..identity
            };
            self.write_snapshot(identity, replayed.committed_seq, replayed.last)
                .map_err(io(&name, format!("writing {}", state_file.display())))?;
        } else if identity.sink != self.name {
            warn!(sink = %name, state = %state_file.display(), was = %identity.sink,
                "the sink state was written by a sink of another name (renamed in the configuration?): going on with it");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use mongoose_durable::crash::{crash_states, RecordingDisk};

    use super::*;

    // storage.md gap 4: the output file is created in its folder, its state in another
    // (the data folder) records bytes of it; a power loss after both must never keep
    // the state and lose the file's name.
    #[test]
    fn a_new_output_file_is_never_lost_while_its_state_is_kept() {
        let root = tempfile::tempdir().expect("folder");
        let output = root.path().join("out").join("alerts.jsonl");
        let state = root.path().join("data").join("alerts.sinkstate");
        let mut disk = RecordingDisk::default();
        create_output(&mut disk, &output).expect("create");
        mongoose_durable::replace::replace_on(&mut disk, &state, b"records 120 bytes")
            .expect("state");
        let operations = disk.operations();
        let mut checked = 0;
        for crash in crash_states(&BTreeMap::new(), &operations) {
            if crash
                .files
                .get(&state)
                .is_some_and(|bytes| !bytes.is_empty())
            {
                assert!(
                    crash.files.contains_key(&output),
                    "the state records bytes of a file that is gone, after {} of {} operations ({}): {:?}",
                    crash.after,
                    operations.len(),
                    crash.how,
                    crash.files.keys().collect::<Vec<_>>()
                );
                checked += 1;
            }
        }
        assert!(checked > 0);
    }
}
