//! The lane registry of a glob feed: which file of the folder reads on which lane.
//!
//! A small file per feed, `<folder>/<feed>.lanes`: a record log of the durable layer
//! ([`mongoose_durable::log`]) holding one record, replaced whole by the layer's atomic
//! replace (a temporary file, fsync, rename, fsync of the folder). Its header names the
//! format `mongoose-lanes`, version 3, and as its owner a hash of the glob's absolute
//! path (in decimal: the registry of another glob put in its place is told apart). Its
//! record is text, one item per line:
//!
//! ```text
//! next 4
//! lane 1 a.log
//! lane 3 c.log
//! ```
//!
//! A file keeps its lane while it is tracked, and a lane number is never given to
//! another file of the same registry (`next` only grows), so a consumer's saved
//! `(epoch, position)` of a lane is never taken for another file's.
//!
//! The header and the record each carry a CRC-32: a registry cut short or with a byte
//! changed is found damaged, not read as fewer or other lanes. A registry is replaced
//! whole, so a torn tail (its record cut short) is damage too, reported with where it
//! was cut, and a damaged record that others follow is refused, never skipped. Each
//! file's pointer records its lane too ([`crate::pointer::PointerRecord::lane`]), so a
//! registry missing, damaged or another glob's is rebuilt from the pointers (the glob's
//! `recover` module), and the rebuilt one replaces it. The text layouts before the
//! durable layer's are still read, and rewritten in this one at the next save:
//! `mongoose-lanes 2` (an `owner` line, an `end` line with the FNV-1a 64 of every byte
//! before it) and `mongoose-lanes 1` (neither).

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use mongoose_durable::header::{Header, MAGIC};
use mongoose_durable::DurableError;

use crate::error::FileSourceError;
use crate::pointer::fnv1a;

/// The registry's format name in its durable header.
const FORMAT: &str = "mongoose-lanes";
/// The registry's format version (1 and 2 were the text layouts before the durable
/// layer's).
const VERSION: u32 = 3;

/// The first text layout's header: no owner, no checksum.
const HEADER_V1: &str = "mongoose-lanes 1";
/// The second text layout's header: an `owner` line and an FNV-1a 64 `end` line.
const HEADER_V2: &str = "mongoose-lanes 2";

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
        let parsed = if text.starts_with(&MAGIC) {
            parse_durable(&registry.path, owner)?
        } else {
            parse(&text, owner)
        };
        match parsed {
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
        let mut text = format!("next {}\n", self.next);
        for (name, lane) in &self.lanes {
            text.push_str(&format!("lane {lane} {name}\n"));
        }
        let bytes = mongoose_durable::log::encode(&header(self.owner), [text.as_bytes()]).map_err(
            |error| FileSourceError::Io {
                context: format!("cannot write the lane registry {}", self.path.display()),
                error: error.into(),
            },
        )?;
        // atomically: the old registry or the new one after a crash, never a torn one
        mongoose_durable::replace::replace(&self.path, &bytes).map_err(|error| {
            FileSourceError::Io {
                context: format!("cannot write the lane registry {}", self.path.display()),
                error: error.into(),
            }
        })
    }
}

/// The header of the registry of the glob `owner`.
fn header(owner: u64) -> Header {
    Header::new(FORMAT, VERSION, owner.to_string().into_bytes())
}

/// What a parse found: the lanes, `next`, and whether the registry is this glob's; or
/// what is damaged.
type Parsed = Result<(BTreeMap<String, u32>, u32, Found), String>;

/// Reads the registry at `path` of the durable layout (the glob `owner`'s, or another
/// glob's), without changing it. Only an error reading it is an error.
fn parse_durable(path: &Path, owner: u64) -> Result<Parsed, FileSourceError> {
    let found = match Header::decode(path, &fs::read(path).unwrap_or_default()) {
        Ok((found, _)) => found,
        Err(DurableError::DamagedHeader { reason, .. }) => {
            return Ok(Err(format!("its header is damaged ({reason})")))
        }
        Err(other) => return Ok(Err(other.to_string())),
    };
    let expected = Header::new(FORMAT, VERSION, found.owner.clone());
    if let Err(error) = expected.check(path, &found) {
        return Ok(Err(match error {
            DurableError::WrongFormat { found, .. } => format!("a {found} file"),
            DurableError::WrongVersion { found, .. } => {
                format!("version {found}, and this build reads version {VERSION}")
            }
            other => other.to_string(),
        }));
    }
    let recovery = match mongoose_durable::log::read(path, &expected) {
        Ok(recovery) => recovery,
        Err(DurableError::Io { source, .. }) => {
            return Err(FileSourceError::Io {
                context: format!("cannot read the lane registry {}", path.display()),
                error: source,
            })
        }
        Err(DurableError::DamagedRecord { offset, reason, .. }) => {
            return Ok(Err(format!(
                "the record at byte {offset} is damaged ({reason}), and valid records follow it"
            )))
        }
        Err(other) => return Ok(Err(other.to_string())),
    };
    if let Some(torn) = recovery.torn_tail {
        // replaced whole: a registry cut short was cut after the replace, not by it
        return Ok(Err(format!(
            "cut short at byte {} ({} bytes of its record cut or changed)",
            torn.offset, torn.bytes_cut
        )));
    }
    let [record] = recovery.records.as_slice() else {
        return Ok(Err(format!(
            "{} records, and a registry holds one",
            recovery.records.len()
        )));
    };
    let text = std::str::from_utf8(record).map_err(|_| "bytes that are not UTF-8".to_owned());
    Ok(text.and_then(|text| {
        let (lanes, next, _) = parse_lines(text, None)?;
        let whose = if found.owner == owner.to_string().into_bytes() {
            Found::Whole
        } else {
            Found::Foreign
        };
        Ok((lanes, next, whose))
    }))
}

/// The lanes a registry's bytes of a text layout hold, its `next`, and whether it is
/// this glob's (of `owner`); or what is damaged.
fn parse(bytes: &[u8], owner: u64) -> Parsed {
    let text = std::str::from_utf8(bytes).map_err(|_| "bytes that are not UTF-8".to_owned())?;
    let quoted = |line: &str| format!("at '{line}'");
    let first = text.lines().next().unwrap_or("");
    let body = match first {
        HEADER_V1 => &text[HEADER_V1.len()..],
        HEADER_V2 => {
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
            &before[HEADER_V2.len()..]
        }
        other => return Err(quoted(other)),
    };
    parse_lines(body, Some(owner))
}

/// The lanes and `next` of a registry's lines (`next`, `lane`, and `owner` in the
/// second text layout), and whether it is the glob `owner`'s (when the lines name one).
fn parse_lines(body: &str, owner: Option<u64>) -> Parsed {
    let quoted = |line: &str| format!("at '{line}'");
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
    let found = match (written_for, owner) {
        (Some(written_for), Some(owner)) if written_for != owner => Found::Foreign,
        _ => Found::Whole,
    };
    Ok((lanes, next, found))
}

/// The `next` a damaged registry still holds, when that line can be read (in the
/// durable layout it follows the header and the record's frame on its line). Only ever
/// taken higher than it was: a lane number is then skipped, never given twice.
fn salvaged_next(bytes: &[u8]) -> Option<u32> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter(|line| !line.starts_with("lane "))
        .filter_map(|line| {
            let (_, value) = line.split_once("next ")?;
            value.parse::<u32>().ok()
        })
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
        assert!(whole.starts_with(&MAGIC), "the durable layout");
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

    /// The one record of the registry at `path`, read through the durable layer.
    fn record_of(path: &Path) -> String {
        let bytes = fs::read(path).expect("registry");
        let (header, _) = Header::decode(path, &bytes).expect("a durable header");
        assert_eq!(
            (
                header.format.as_str(),
                header.version,
                header.owner.as_slice()
            ),
            ("mongoose-lanes", 3, &b"77"[..]),
            "format, version and the glob's hash as its owner"
        );
        let mut recovery = mongoose_durable::log::read(path, &header).expect("whole");
        assert_eq!(recovery.records.len(), 1, "one record");
        String::from_utf8(recovery.records.remove(0)).expect("text")
    }

    // Issue 38: the registry is a one-record log of the durable layer (CRC-32 of its
    // header and of its record), its owner the glob's hash.
    #[test]
    fn a_registry_is_a_durable_log_owned_by_its_glob() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("logs.lanes");
        let (mut registry, _) = load(&path);
        assign(&mut registry, "a.log");
        assign(&mut registry, "c.log");
        registry.forget("a.log").expect("forget");
        assert_eq!(record_of(&path), "next 3\nlane 2 c.log\n");
        let (other, found) = LaneRegistry::load(path.clone(), OWNER + 1).expect("read");
        assert_eq!(found, Found::Foreign, "another glob's owner");
        assert_eq!(other.lane_of("c.log"), Some(2), "read as it is");
    }

    // Issue 38: a registry of the earlier layouts (`mongoose-lanes 2` with its FNV-1a
    // 64 `end` line, `mongoose-lanes 1`) is read, and rewritten in the durable layout at
    // its next save.
    #[test]
    fn a_registry_of_the_earlier_layouts_is_read_and_rewritten() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("logs.lanes");
        let v2 = "mongoose-lanes 2\nowner 77\nnext 4\nlane 1 a.log\nlane 3 c.log\n";
        let v2 = format!("{v2}end {:016x}\n", fnv1a(v2.as_bytes()));
        let v1 = "mongoose-lanes 1\nnext 4\nlane 1 a.log\nlane 3 c.log\n".to_owned();
        for earlier in [v2, v1] {
            fs::write(&path, &earlier).expect("earlier layout");
            let (mut registry, found) = load(&path);
            assert_eq!(found, Found::Whole, "{earlier}");
            assert_eq!(registry.lane_of("c.log"), Some(3));
            assert_eq!(assign(&mut registry, "d.log"), 4);
            assert_eq!(
                record_of(&path),
                "next 5\nlane 1 a.log\nlane 3 c.log\nlane 4 d.log\n"
            );
            assert_eq!(load(&path).1, Found::Whole);
        }
    }

    // Issue 38: a registry is replaced whole, so a torn tail (its record cut short or
    // changed) is damage, reported with where it was cut; it is not read as fewer lanes,
    // and the next save replaces it whole. A damaged record that a whole one follows is
    // refused, never skipped for the one after it.
    #[test]
    fn a_torn_or_damaged_registry_is_reported_where_and_never_read_as_fewer_lanes() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("logs.lanes");
        let (mut registry, _) = load(&path);
        assign(&mut registry, "a.log");
        assign(&mut registry, "b.log");
        let whole = fs::read(&path).expect("registry");
        let record_at = Header::decode(&path, &whole).expect("header").1;
        fs::write(&path, &whole[..whole.len() - 3]).expect("torn");
        let (registry, found) = load(&path);
        match &found {
            Found::Damaged(what) => assert!(
                what.contains(&format!("cut short at byte {record_at}")),
                "{what}"
            ),
            other => panic!("a torn registry: {other:?}"),
        }
        let mut registry = registry.cleared();
        assert_eq!(registry.next(), 3, "its next is kept");
        registry.assign_as("a.log", 1).expect("saved");
        assert_eq!(record_of(&path), "next 3\nlane 1 a.log\n", "replaced whole");
        // two records, the first damaged: refused with its byte, the second not read
        let header = Header::new(FORMAT, VERSION, b"77".to_vec());
        let mut bytes = mongoose_durable::log::encode(
            &header,
            [&b"next 3\nlane 1 a.log\n"[..], &b"next 9\n"[..]],
        )
        .expect("encode");
        bytes[record_at + 9] ^= 0x01;
        fs::write(&path, &bytes).expect("damaged");
        match load(&path).1 {
            Found::Damaged(what) => assert!(
                what.contains(&format!("the record at byte {record_at} is damaged"))
                    && what.contains("valid records follow"),
                "{what}"
            ),
            other => panic!("damage in the middle: {other:?}"),
        }
    }
}
