//! The lanes of a glob at its start, and of each new file: the registry loaded, or
//! rebuilt from the lanes the pointer files record when it is missing, damaged or
//! another glob's; and a new file's lane taken from its pointer, or from what the
//! consumers hold of its identity, before a new number is drawn (invariant 9:
//! an output's key is the input's identity and the line's position, so a file keeps
//! its lane whatever became of the registry).

use std::fs;
use std::path::Path;

use mongoose_core::{CoreError, Held};
use tracing::warn;

use super::pattern::glob_matches;
use super::GlobFileSource;
use crate::error::FileSourceError;
use crate::identity::{identity_epoch_of, key_of};
use crate::lanes::{Found, LaneRegistry};
use crate::pointer::{owner_of, PointerFile, PointerRecord, POINTER_FILE_SIZE};

/// A pointer file of the glob's state folder and the lane it records.
#[derive(Debug)]
struct PointerLane {
    /// The file it is the pointer of (its name in the glob's folder).
    name: String,
    /// Its lane; `None` when it records none this file can trust (written before
    /// pointers recorded their lane, the lane field damaged, or another input's
    /// pointer put in its place).
    lane: Option<u32>,
}

impl<T: Send + 'static> GlobFileSource<T> {
    /// Loads the lane registry (COMMITED). A registry missing while pointer files
    /// exist, damaged, or another glob's is rebuilt from the lanes the pointers
    /// record (a WARN names it and the lanes recovered). Only pointers that record no
    /// lane keep the refusals of before: a damaged registry is refused, a missing one
    /// when the consumers hold positions of lanes, and another glob's is used as it is.
    /// `next` is kept above every lane a pointer or a consumer holds.
    pub(super) fn load_lanes(&mut self) -> Result<(), CoreError> {
        let path = self.config.registry_path();
        let owner = owner_of(&self.config.pattern);
        let (mut registry, found) = LaneRegistry::load(path.clone(), owner)?;
        let pointers = self.pointer_lanes();
        // a lane a pointer or a consumer holds is never drawn for a new file (the
        // registry writes it with its next change)
        let highest = pointers
            .iter()
            .filter_map(|pointer| pointer.lane)
            .chain(self.highest_consumer_lane())
            .max();
        if let Some(highest) = highest {
            registry.keep_above(highest);
        }
        let what = match &found {
            Found::Whole => None,
            Found::Missing if pointers.is_empty() => None,
            Found::Missing => Some("is missing".to_owned()),
            Found::Damaged(damage) => Some(format!("is damaged ({damage})")),
            Found::Foreign => Some("was written for another glob".to_owned()),
        };
        if let Some(what) = what {
            let unknown: Vec<&str> = pointers
                .iter()
                .filter(|pointer| pointer.lane.is_none())
                .map(|pointer| pointer.name.as_str())
                .collect();
            match (&found, unknown.is_empty()) {
                (Found::Damaged(damage), false) => {
                    return Err(FileSourceError::DamagedLaneRegistry {
                        path,
                        line: damage.clone(),
                        unknown: unknown.join(", "),
                    }
                    .into());
                }
                (Found::Foreign, false) => {
                    warn!(source = %self.config.name, registry = %path.display(), files = %unknown.join(", "),
                        "the lane registry was written for another glob (or for another spelling of its path), and these files' pointers record no lane this glob can trust to rebuild it from (written by an older release, or for another path): it is used as it is");
                }
                _ => {
                    if !unknown.is_empty() {
                        self.refuse_new_lanes_for_saved_ones(&path, &unknown)?;
                    }
                    // `next` as the registry held it (when it could be read), and above
                    // every lane a pointer or a consumer holds
                    registry = registry.cleared();
                    let mut recovered = 0usize;
                    for pointer in &pointers {
                        let Some(lane) = pointer.lane else { continue };
                        if registry.holds(lane) {
                            warn!(source = %self.config.name, file = %pointer.name, lane,
                                "two pointer files record this lane: the second file gets a new lane");
                            continue;
                        }
                        registry.insert(&pointer.name, lane)?;
                        recovered += 1;
                    }
                    registry.save()?;
                    let without = if unknown.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "; the files whose pointers record none get new lanes: {}",
                            unknown.join(", ")
                        )
                    };
                    warn!(source = %self.config.name, lanes = recovered, next = registry.next(),
                        "the lane registry {} {what}: rebuilt from the lanes its pointer files record ({recovered} lanes recovered: each of those files keeps its lane{without})",
                        path.display());
                }
            }
        }
        if found == Found::Whole {
            self.write_lanes_into(&registry, &pointers);
        }
        self.registry = registry;
        Ok(())
    }

    /// Writes each file's lane into its pointer where it records none (a pointer of an
    /// older release, or whose lane bytes were damaged), at once rather than when the
    /// file's source first opens it (a file that waits for an open-file slot may wait
    /// long): a registry lost later is rebuilt with every lane. A pointer damaged
    /// otherwise is left as it is, for its source to judge.
    fn write_lanes_into(&self, registry: &LaneRegistry, pointers: &[PointerLane]) {
        let folder = self.config.folder();
        for pointer in pointers.iter().filter(|pointer| pointer.lane.is_none()) {
            let Some(lane) = registry.lane_of(&pointer.name) else {
                continue;
            };
            let path = self.config.pointer_path(&folder.join(&pointer.name));
            let written = PointerFile::open(&path).and_then(|mut opened| {
                if opened.decoded.damage.is_some() {
                    return Ok(());
                }
                let record = PointerRecord {
                    lane,
                    ..opened.decoded.record
                };
                opened.file.write(&record)
            });
            if let Err(error) = written {
                warn!(source = %self.config.name, pointer = %path.display(), lane, %error,
                    "cannot write the file's lane into its pointer: its source writes it when it opens the file");
            }
        }
    }

    /// The lane of the glob's new file `name`: its pointer's, when it records one no
    /// other file holds (a start killed between the pointer's write and the registry's,
    /// a registry rebuilt without it); else the lane a consumer holds positions of
    /// under the file's identity, when no other file holds it (a start over: the
    /// registry and the pointers moved away, the consumers' state kept); else `None`,
    /// a new lane.
    pub(super) fn lane_for_new(&self, name: &str) -> Option<u32> {
        let path = self.config.folder().join(name);
        let free = |lane: u32| !self.registry.holds(lane) && !self.files.contains_key(&lane);
        let pointer = self.config.pointer_path(&path);
        if let Some(lane) = fs::read(&pointer)
            .ok()
            .and_then(|bytes| own_lane(&PointerRecord::decode(&bytes).record, &path))
            .filter(|lane| free(*lane))
        {
            return Some(lane);
        }
        self.highest_consumer_lane()?;
        let identity = fs::File::open(&path)
            .ok()
            .as_ref()
            .and_then(identity_epoch_of)?;
        let state = self.hub.state.lock();
        state
            .positions
            .iter()
            .filter_map(|consumer| held_lane(&consumer.held))
            .filter(|(epoch, lane)| *epoch == identity && free(*lane))
            .map(|(_, lane)| lane)
            .min()
    }

    /// The highest lane a consumer holds a position of, if any.
    fn highest_consumer_lane(&self) -> Option<u32> {
        let state = self.hub.state.lock();
        state
            .positions
            .iter()
            .filter_map(|consumer| held_lane(&consumer.held))
            .map(|(_, lane)| lane)
            .max()
    }

    /// The pointer files of the glob's files in its state folder (not blank ones, nor
    /// those of a lane that let go of its name), sorted by name, with their lanes.
    fn pointer_lanes(&self) -> Vec<PointerLane> {
        let Ok(entries) = fs::read_dir(self.config.state_folder()) else {
            return Vec::new();
        };
        let pattern = self.config.file_pattern();
        let folder = self.config.folder();
        let mut pointers: Vec<PointerLane> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
            .filter_map(|file| file.strip_suffix(".readPointer").map(str::to_owned))
            .filter(|name| {
                glob_matches(&pattern, name) && !self.is_bookkeeping(name) && !is_detached(name)
            })
            .filter_map(|name| {
                let path = folder.join(&name);
                let bytes = fs::read(self.config.pointer_path(&path)).ok()?;
                if bytes.len() == POINTER_FILE_SIZE && bytes.iter().all(|byte| *byte == 0) {
                    return None;
                }
                let lane = own_lane(&PointerRecord::decode(&bytes).record, &path);
                Some(PointerLane { name, lane })
            })
            .collect();
        pointers.sort_by(|a, b| a.name.cmp(&b.name));
        pointers
    }

    /// Without a registry, files whose pointers record no lane would get new lanes: a
    /// consumer that saved positions per lane would not know their lines and apply
    /// them again. Refused when a consumer holds positions of lanes; a warning
    /// otherwise.
    fn refuse_new_lanes_for_saved_ones(
        &self,
        registry: &Path,
        unknown: &[&str],
    ) -> Result<(), CoreError> {
        let lanes_saved =
            self.hub
                .state
                .lock()
                .positions
                .iter()
                .any(|consumer| match consumer.held {
                    Held::Saved(Some((_, position))) => position.lane > 0,
                    _ => false,
                });
        let message = format!(
            "the lane registry {} is missing and {} files of the glob have pointer files that record no lane (written by an older release: {}): they would be read on new lanes",
            registry.display(),
            unknown.len(),
            unknown.join(", ")
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

/// The epoch and lane of a consumer's saved or written position, when it has a lane.
fn held_lane(held: &Held) -> Option<(u64, u32)> {
    match *held {
        Held::Saved(Some((epoch, position))) | Held::Written((epoch, position))
            if position.lane != 0 =>
        {
            Some((epoch.get(), position.lane))
        }
        _ => None,
    }
}

/// The lane `record` records for the glob's file at `path`: `None` when it records
/// none, or is not this file's pointer (written for another path, and naming another
/// file than the one at the path: another input's pointer put in place).
fn own_lane(record: &PointerRecord, path: &Path) -> Option<u32> {
    if record.lane == 0 {
        return None;
    }
    if record.owner == owner_of(path) {
        return Some(record.lane);
    }
    let key = fs::metadata(path).ok().as_ref().and_then(key_of)?;
    (record.file_key == key.0).then_some(record.lane)
}

/// Whether `name` is the bookkeeping name of a lane that let go of its name (another
/// file of the glob renamed over it: `.<name>.lane-<lane>.replaced`).
fn is_detached(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".replaced") && name.contains(".lane-")
}
