//! The lane registry of a glob feed: which file of the folder reads on which lane.
//!
//! A small text file per feed, `<folder>/<feed>.lanes`, written atomically (a temporary
//! file, fsync, rename, fsync of the folder):
//!
//! ```text
//! mongoose-lanes 1
//! next 4
//! lane 1 a.log
//! lane 3 c.log
//! ```
//!
//! A file keeps its lane while it is tracked, and a lane number is never given to
//! another file of the same registry (`next` only grows), so a consumer's saved
//! `(epoch, position)` of a lane is never taken for another file's.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::error::FileSourceError;

const HEADER: &str = "mongoose-lanes 1";

/// The lanes of one glob feed, by file name.
#[derive(Debug)]
pub(crate) struct LaneRegistry {
    path: PathBuf,
    lanes: BTreeMap<String, u32>,
    next: u32,
    /// Written to disk (a feed without a pointer keeps its lanes in memory).
    persistent: bool,
    /// The registry file existed when loaded.
    existed: bool,
}

impl LaneRegistry {
    /// An in-memory registry (strategies without a pointer).
    pub(crate) fn in_memory(path: PathBuf) -> Self {
        LaneRegistry {
            path,
            lanes: BTreeMap::new(),
            next: 1,
            persistent: false,
            existed: false,
        }
    }

    /// Loads the registry at `path`, or an empty one when there is none. A registry
    /// that cannot be parsed refuses the start: lanes taken afresh could give a file
    /// the lane of another file's saved positions.
    pub(crate) fn load(path: PathBuf) -> Result<Self, FileSourceError> {
        let mut registry = LaneRegistry {
            path,
            lanes: BTreeMap::new(),
            next: 1,
            persistent: true,
            existed: false,
        };
        let text = match fs::read_to_string(&registry.path) {
            Ok(text) if text.is_empty() => {
                // created, never written (a crash before the first write)
                registry.existed = true;
                return Ok(registry);
            }
            Ok(text) => text,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(registry),
            Err(error) => {
                return Err(FileSourceError::Io {
                    context: format!("cannot read the lane registry {}", registry.path.display()),
                    error,
                })
            }
        };
        let damaged = |line: &str| FileSourceError::DamagedLaneRegistry {
            path: registry.path.clone(),
            line: line.to_owned(),
        };
        registry.existed = true;
        let mut lines = text.lines();
        if lines.next() != Some(HEADER) {
            return Err(damaged(text.lines().next().unwrap_or("")));
        }
        for line in lines {
            if line.is_empty() {
                continue;
            }
            if let Some(next) = line.strip_prefix("next ") {
                registry.next = next.parse().map_err(|_| damaged(line))?;
            } else if let Some(rest) = line.strip_prefix("lane ") {
                let (lane, name) = rest.split_once(' ').ok_or_else(|| damaged(line))?;
                let lane: u32 = lane.parse().map_err(|_| damaged(line))?;
                if lane == 0 || name.is_empty() {
                    return Err(damaged(line));
                }
                registry.lanes.insert(name.to_owned(), lane);
            } else {
                return Err(damaged(line));
            }
        }
        let highest = registry.lanes.values().copied().max().unwrap_or(0);
        registry.next = registry.next.max(highest + 1).max(1);
        Ok(registry)
    }

    /// Whether the registry file existed when loaded.
    pub(crate) fn existed(&self) -> bool {
        self.existed
    }

    /// The registry file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The tracked files and their lanes.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&str, u32)> {
        self.lanes.iter().map(|(name, lane)| (name.as_str(), *lane))
    }

    /// The lane of `name`, if tracked.
    pub(crate) fn lane_of(&self, name: &str) -> Option<u32> {
        self.lanes.get(name).copied()
    }

    /// Gives `name` a new lane (never one given before) and saves the registry.
    pub(crate) fn assign(&mut self, name: &str) -> Result<u32, FileSourceError> {
        if let Some(lane) = self.lane_of(name) {
            return Ok(lane);
        }
        let lane = self.next;
        self.next = self
            .next
            .checked_add(1)
            .ok_or_else(|| FileSourceError::Io {
                context: format!(
                    "the lane registry {} ran out of lane numbers",
                    self.path.display()
                ),
                error: io::Error::other(
                    "lane numbers exhausted: move the registry and the pointers away to start over",
                ),
            })?;
        self.lanes.insert(name.to_owned(), lane);
        self.save()?;
        Ok(lane)
    }

    /// Gives `old`'s lane to `new` (the same file under another name) and saves the
    /// registry.
    pub(crate) fn rename(&mut self, old: &str, new: &str) -> Result<(), FileSourceError> {
        if let Some(lane) = self.lanes.remove(old) {
            self.lanes.insert(new.to_owned(), lane);
            self.save()?;
        }
        Ok(())
    }

    /// Forgets `name` (its lane number is never given again) and saves the registry.
    pub(crate) fn forget(&mut self, name: &str) -> Result<(), FileSourceError> {
        if self.lanes.remove(name).is_some() {
            self.save()?;
        }
        Ok(())
    }

    fn save(&self) -> Result<(), FileSourceError> {
        if !self.persistent {
            return Ok(());
        }
        let mut text = format!("{HEADER}\nnext {}\n", self.next);
        for (name, lane) in &self.lanes {
            text.push_str(&format!("lane {lane} {name}\n"));
        }
        write_atomically(&self.path, text.as_bytes()).map_err(|error| FileSourceError::Io {
            context: format!("cannot write the lane registry {}", self.path.display()),
            error,
        })
    }
}

/// Writes `bytes` to `path` so that a crash leaves the old or the new content: a
/// temporary file beside it, fsync, rename over it, fsync of the folder.
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    {
        let mut file = File::create(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    fs::rename(&temporary, path)?;
    #[cfg(unix)]
    if let Some(folder) = path.parent() {
        let folder = if folder.as_os_str().is_empty() {
            Path::new(".")
        } else {
            folder
        };
        File::open(folder)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_survive_a_reload_and_are_never_reused() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("logs.lanes");
        let mut registry = LaneRegistry::load(path.clone()).expect("new");
        assert_eq!(registry.assign("a.log").expect("a"), 1);
        assert_eq!(registry.assign("b.log").expect("b"), 2);
        registry.forget("b.log").expect("forget");
        let mut reloaded = LaneRegistry::load(path.clone()).expect("reload");
        assert_eq!(reloaded.lane_of("a.log"), Some(1));
        assert_eq!(reloaded.lane_of("b.log"), None);
        assert_eq!(
            reloaded.assign("b.log").expect("b again"),
            3,
            "lane 2 is never reused"
        );
        assert_eq!(reloaded.assign("with space.log").expect("space"), 4);
        let again = LaneRegistry::load(path).expect("reload");
        assert_eq!(again.lane_of("with space.log"), Some(4));
    }

    #[test]
    fn a_damaged_registry_refuses_the_start() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("logs.lanes");
        fs::write(&path, "mongoose-lanes 1\nlane x a.log\n").expect("write");
        let error = LaneRegistry::load(path).expect_err("damaged");
        assert!(error.to_string().contains("lane x a.log"), "{error}");
    }
}
