//! The lane registry of a glob feed: which file of the folder reads on which lane.
//!
//! A small text file per feed, `<folder>/<feed>.lanes`, written atomically (a temporary
//! file, fsync, rename, fsync of the folder):
//!
//! ```text
//! mongoose-lanes 2
//! owner 8215367001928344271
//! next 4
//! lane 1 a.log
//! lane 3 c.log
//! end 5d0f9b3c1e2a4f67
//! ```
//!
//! A file keeps its lane while it is tracked, and a lane number is never given to
//! another file of the same registry (`next` only grows), so a consumer's saved
//! `(epoch, position)` of a lane is never taken for another file's.
//!
//! `owner` is a hash of the glob's absolute path (the registry of another glob put in
//! its place is told apart), and `end` the FNV-1a 64 of every byte before it: a
//! registry cut short or with a byte changed is found damaged, not read as fewer or
//! other lanes. Each file's pointer records its lane too
//! ([`crate::pointer::PointerRecord::lane`]), so a registry missing, damaged or another
//! glob's is rebuilt from the pointers (the glob's `recover` module). The first layout
//! (`mongoose-lanes 1`, no owner, no `end`) is still read.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::FileSourceError;
use crate::pointer::fnv1a;

/// The first layout's header: no owner, no checksum.
const HEADER_V1: &str = "mongoose-lanes 1";
/// The header this crate writes.
const HEADER: &str = "mongoose-lanes 2";

/// What [`LaneRegistry::load`] found at the registry's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// A whole registry of this glob (or of the first layout, which names none).
    Whole,
    /// No registry file, or an empty one (created and never written).
    Missing,
    /// A registry that cannot be read, cut short or changed: what is wrong with it.
    Damaged(String),
    /// A whole registry written for another glob (another feed's or another folder's
    /// copy put in place).
    Foreign,
}

/// The lanes of one glob feed, by file name.
#[derive(Debug)]
pub(crate) struct LaneRegistry {
    path: PathBuf,
    lanes: BTreeMap<String, u32>,
    next: u32,
    /// Written to disk (a feed without a pointer keeps its lanes in memory).
    persistent: bool,
    /// The hash of the glob it is written for (`owner` line).
    owner: u64,
}

impl LaneRegistry {
    /// An in-memory registry (strategies without a pointer).
    pub(crate) fn in_memory(path: PathBuf) -> Self {
        LaneRegistry {
            path,
            lanes: BTreeMap::new(),
            next: 1,
            persistent: false,
            owner: 0,
        }
    }

    /// An empty registry at `path` for the glob `owner`, written at its first change.
    pub(crate) fn empty(path: PathBuf, owner: u64) -> Self {
        LaneRegistry {
            path,
            lanes: BTreeMap::new(),
            next: 1,
            persistent: true,
            owner,
        }
    }

    /// Loads the registry at `path` of the glob `owner` and says what it found. A
    /// missing or damaged registry loads empty (a damaged one keeps the `next` it
    /// holds, when that line can be read); another glob's loads as it is. Only an
    /// error reading the file is an error.
    pub(crate) fn load(path: PathBuf, owner: u64) -> Result<(Self, Found), FileSourceError> {
        let mut registry = LaneRegistry::empty(path, owner);
        let text = match fs::read(&registry.path) {
            Ok(bytes) if bytes.is_empty() => return Ok((registry, Found::Missing)),
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Ok((registry, Found::Missing))
            }
            Err(error) => {
                return Err(FileSourceError::Io {
                    context: format!("cannot read the lane registry {}", registry.path.display()),
                    error,
                })
            }
        };
        match parse(&text, owner) {
            Ok((lanes, next, found)) => {
                registry.lanes = lanes;
                let highest = registry.lanes.values().copied().max().unwrap_or(0);
                registry.next = next.max(highest.saturating_add(1)).max(1);
                Ok((registry, found))
            }
            Err(damage) => {
                registry.next = salvaged_next(&text).unwrap_or(1).max(1);
                Ok((registry, Found::Damaged(damage)))
            }
        }
    }

    /// The same registry without its lanes (it is rebuilt), keeping its `next`.
    pub(crate) fn cleared(mut self) -> Self {
        self.lanes.clear();
        self
    }

    /// The registry file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The tracked files and their lanes.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&str, u32)> {
        self.lanes.iter().map(|(name, lane)| (name.as_str(), *lane))
    }

    /// The lane the next new file gets.
    pub(crate) fn next(&self) -> u32 {
        self.next
    }

    /// The lane of `name`, if tracked.
    pub(crate) fn lane_of(&self, name: &str) -> Option<u32> {
        self.lanes.get(name).copied()
    }

    /// Whether a file has `lane`.
    pub(crate) fn holds(&self, lane: u32) -> bool {
        self.lanes.values().any(|held| *held == lane)
    }

    /// Gives `name` the lane `lane` (one no other file holds: its pointer's, or the one
    /// its consumers hold positions of), keeps `next` above it, and saves the registry.
    pub(crate) fn assign_as(&mut self, name: &str, lane: u32) -> Result<(), FileSourceError> {
        self.insert(name, lane)?;
        self.save()
    }

    /// Gives `name` the lane `lane` without saving (a registry being rebuilt), keeping
    /// `next` above it.
    pub(crate) fn insert(&mut self, name: &str, lane: u32) -> Result<(), FileSourceError> {
        let after = lane.checked_add(1).ok_or_else(|| FileSourceError::Io {
            context: format!(
                "the lane registry {} ran out of lane numbers",
                self.path.display()
            ),
            error: io::Error::other(
                "lane numbers exhausted: move the registry and the pointers away to start over",
            ),
        })?;
        self.lanes.insert(name.to_owned(), lane);
        self.next = self.next.max(after);
        Ok(())
    }

    /// Keeps `next` above `lane` (a lane a pointer or a consumer holds).
    pub(crate) fn keep_above(&mut self, lane: u32) {
        if let Some(after) = lane.checked_add(1) {
            self.next = self.next.max(after);
        }
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

    /// Writes the registry (nothing for an in-memory one).
    pub(crate) fn save(&self) -> Result<(), FileSourceError> {
        if !self.persistent {
            return Ok(());
        }
        let mut text = format!("{HEADER}\nowner {}\nnext {}\n", self.owner, self.next);
        for (name, lane) in &self.lanes {
            text.push_str(&format!("lane {lane} {name}\n"));
        }
        text.push_str(&format!("end {:016x}\n", fnv1a(text.as_bytes())));
        // atomically: the old registry or the new one after a crash, never a torn one
        mongoose_durable::replace::replace(&self.path, text.as_bytes()).map_err(|error| {
            FileSourceError::Io {
                context: format!("cannot write the lane registry {}", self.path.display()),
                error: error.into(),
            }
        })
    }
}

/// The lanes a registry's bytes hold, its `next`, and whether it is this glob's (of
/// `owner`); or what is damaged.
fn parse(bytes: &[u8], owner: u64) -> Result<(BTreeMap<String, u32>, u32, Found), String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "bytes that are not UTF-8".to_owned())?;
    let quoted = |line: &str| format!("at '{line}'");
    let first = text.lines().next().unwrap_or("");
    let body = match first {
        HEADER_V1 => &text[HEADER_V1.len()..],
        HEADER => {
            // every byte before the `end` line is checked: a registry cut short or
            // with a byte changed is damaged, never read as other lanes
            let trimmed = text.strip_suffix('\n').ok_or("cut short (no end line)")?;
            let (before, end) = match trimmed.rsplit_once('\n') {
                Some((before, end)) => (&text[..before.len() + 1], end),
                None => return Err("cut short (no end line)".to_owned()),
            };
            let sum = end
                .strip_prefix("end ")
                .and_then(|sum| u64::from_str_radix(sum, 16).ok())
                .ok_or_else(|| format!("cut short ({})", quoted(end)))?;
            if sum != fnv1a(before.as_bytes()) {
                return Err("its checksum does not match (a byte changed)".to_owned());
            }
            &before[HEADER.len()..]
        }
        other => return Err(quoted(other)),
    };
    let mut lanes = BTreeMap::new();
    let mut next = 1u32;
    let mut written_for = None;
    for line in body.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(value) = line.strip_prefix("next ") {
            next = value.parse().map_err(|_| quoted(line))?;
        } else if let Some(value) = line.strip_prefix("owner ") {
            written_for = Some(value.parse::<u64>().map_err(|_| quoted(line))?);
        } else if let Some(rest) = line.strip_prefix("lane ") {
            let (lane, name) = rest.split_once(' ').ok_or_else(|| quoted(line))?;
            let lane: u32 = lane.parse().map_err(|_| quoted(line))?;
            if lane == 0 || name.is_empty() {
                return Err(quoted(line));
            }
            lanes.insert(name.to_owned(), lane);
        } else {
            return Err(quoted(line));
        }
    }
    let found = match written_for {
        Some(written_for) if written_for != owner => Found::Foreign,
        _ => Found::Whole,
    };
    Ok((lanes, next, found))
}

/// The `next` a damaged registry still holds, when that line can be read.
fn salvaged_next(bytes: &[u8]) -> Option<u32> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(|line| line.strip_prefix("next ")?.parse::<u32>().ok())
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWNER: u64 = 77;

    fn load(path: &Path) -> (LaneRegistry, Found) {
        LaneRegistry::load(path.to_path_buf(), OWNER).expect("read")
    }

    /// Gives `name` a new lane, as the glob does a new file without a lane of its own.
    fn assign(registry: &mut LaneRegistry, name: &str) -> u32 {
        let lane = registry.lane_of(name).unwrap_or(registry.next());
        registry.assign_as(name, lane).expect("saved");
        lane
    }

    #[test]
    fn lanes_survive_a_reload_and_are_never_reused() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("logs.lanes");
        let (mut registry, found) = load(&path);
        assert_eq!(found, Found::Missing);
        assert_eq!(assign(&mut registry, "a.log"), 1);
        assert_eq!(assign(&mut registry, "b.log"), 2);
        registry.forget("b.log").expect("forget");
        let (mut reloaded, found) = load(&path);
        assert_eq!(found, Found::Whole);
        assert_eq!(reloaded.lane_of("a.log"), Some(1));
        assert_eq!(reloaded.lane_of("b.log"), None);
        assert_eq!(assign(&mut reloaded, "b.log"), 3, "lane 2 is never reused");
        assert_eq!(assign(&mut reloaded, "with space.log"), 4);
        let (again, _) = load(&path);
        assert_eq!(again.lane_of("with space.log"), Some(4));
    }

    #[test]
    fn a_registry_cut_changed_or_unreadable_is_damaged_and_keeps_its_next() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("logs.lanes");
        let (mut registry, _) = load(&path);
        for name in ["a.log", "b.log", "c.log"] {
            assign(&mut registry, name);
        }
        let whole = fs::read(&path).expect("registry");
        let text = String::from_utf8(whole.clone()).expect("text");
        assert!(
            text.starts_with("mongoose-lanes 2\nowner 77\nnext 4\n"),
            "{text}"
        );
        // cut anywhere, or any byte changed: damaged
        for keep in 0..whole.len() {
            fs::write(&path, &whole[..keep]).expect("cut");
            let (registry, found) = load(&path);
            if keep == 0 {
                assert_eq!(found, Found::Missing);
                continue;
            }
            assert!(
                matches!(found, Found::Damaged(_)),
                "cut to {keep}: {found:?}"
            );
            assert_eq!(registry.entries().count(), 0);
        }
        for at in 0..whole.len() {
            let mut flipped = whole.clone();
            flipped[at] ^= 0x5a;
            fs::write(&path, &flipped).expect("flipped");
            let (_, found) = load(&path);
            assert!(
                matches!(found, Found::Damaged(_)),
                "byte {at} flipped: {found:?}"
            );
        }
        fs::write(&path, "mongoose-lanes 1\nnext 9\nlane x a.log\n").expect("write");
        let (registry, found) = load(&path);
        assert_eq!(found, Found::Damaged("at 'lane x a.log'".to_owned()));
        assert_eq!(registry.next(), 9, "the next it still holds is kept");
    }

    #[test]
    fn another_globs_registry_is_told_apart_and_the_first_layout_is_read() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("logs.lanes");
        let mut other = LaneRegistry::empty(path.clone(), OWNER + 1);
        assign(&mut other, "a.log");
        let (registry, found) = load(&path);
        assert_eq!(found, Found::Foreign);
        assert_eq!(registry.lane_of("a.log"), Some(1), "read as it is");
        fs::write(
            &path,
            "mongoose-lanes 1\nnext 4\nlane 1 a.log\nlane 3 c.log\n",
        )
        .expect("v1");
        let (registry, found) = load(&path);
        assert_eq!(found, Found::Whole);
        assert_eq!(registry.lane_of("c.log"), Some(3));
        assert_eq!(registry.next(), 4);
    }
}
