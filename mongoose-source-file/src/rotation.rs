//! Finding the pointer's file after a rotation: the candidates beside the input whose
//! names match the feed's `rotated` globs, matched by file key *and* fingerprint.
//!
//! A candidate is the pointer's file only when its file key equals the key the pointer
//! stored and its first `fingerprint_length` bytes hash to the stored fingerprint: a
//! file with the same leading bytes under another key (a new file with a fixed
//! preamble) is never taken for the old file's continuation, nor is a file with the
//! old key but other leading bytes (an inode reused after a delete).

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use crate::glob::glob_matches;
use crate::identity::key_of;
use crate::pointer::PointerRecord;

/// Extensions of compressed rotations: such a file cannot be the pointer's file (its
/// bytes are not the input's), and its existence means a rotated file may have been
/// compressed before it was read to its end.
const COMPRESSED_EXTENSIONS: [&str; 5] = ["gz", "zst", "bz2", "xz", "lz4"];

/// The default rotation globs of an input named `name`: `<name>.*` and `<name>-*`.
pub(crate) fn default_globs(input: &Path) -> Vec<String> {
    let name = input
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    vec![format!("{name}.*"), format!("{name}-*")]
}

/// Whether the file is a compressed rotation (by its extension).
pub(crate) fn is_compressed(path: &Path) -> bool {
    path.extension()
        .map(|extension| extension.to_string_lossy().to_ascii_lowercase())
        .is_some_and(|extension| COMPRESSED_EXTENSIONS.contains(&extension.as_str()))
}

/// The files in the input's directory whose names match one of `globs` (the input
/// itself and pointer files excepted), sorted by name.
pub(crate) fn candidates(input: &Path, globs: &[String]) -> Vec<PathBuf> {
    let directory = match input.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let input_name = input.file_name().map(|name| name.to_os_string());
    let Ok(entries) = fs::read_dir(&directory) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|entry| Some(entry.file_name()) != input_name)
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_file()))
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            !name.ends_with(".readPointer")
                && !name.ends_with(".losses")
                && !name.ends_with(".losses.reported")
                && !name.ends_with(".losses.damaged")
                && globs.iter().any(|glob| glob_matches(glob, &name))
        })
        .map(|entry| entry.path())
        .collect();
    found.sort();
    found
}

/// Whether the open `file` is the one `record` describes: the same file key, the same
/// leading bytes, and not shorter than the pointer's offset.
pub(crate) fn is_pointer_file(file: &File, record: &PointerRecord) -> bool {
    let Ok(metadata) = file.metadata() else {
        return false;
    };
    let Some(key) = key_of(&metadata) else {
        return false;
    };
    if record.file_key == 0 || key.0 != record.file_key || metadata.len() < record.offset {
        return false;
    }
    if record.fingerprint_length == 0 {
        return record.offset == 0;
    }
    crate::positional::starts_as_fingerprinted(file, record)
}

/// The pointer's file among the candidates, opened, with its path.
pub(crate) fn find_pointer_file(
    input: &Path,
    globs: &[String],
    record: &PointerRecord,
) -> Option<(PathBuf, File)> {
    candidates(input, globs)
        .into_iter()
        .filter(|path| !is_compressed(path))
        .find_map(|path| {
            let file = File::open(&path).ok()?;
            is_pointer_file(&file, record).then_some((path, file))
        })
}

/// The copy of the pointer's file among the candidates (logrotate's `copytruncate`:
/// the input copied to a rotation name, then cut to 0 in place): an uncompressed
/// candidate that is not the file with key `original` (the truncated input itself),
/// whose first `fingerprint_length` bytes are the fingerprinted ones, at least
/// `position` bytes long, with a line end just before `position` and, when `tail` is
/// given, the bytes just before `position` equal to it (what the source read last).
/// `None` when none fits, or when more than one does (an older copy with the same
/// leading bytes: which one holds the lines is not known, and reading the wrong one
/// would deliver lines that are not the input's).
pub(crate) fn find_copy(
    input: &Path,
    globs: &[String],
    record: &PointerRecord,
    position: u64,
    original: Option<u64>,
    tail: &[u8],
) -> Option<(PathBuf, File)> {
    if record.fingerprint_length == 0 {
        return None;
    }
    let mut found = candidates(input, globs)
        .into_iter()
        .filter(|path| !is_compressed(path))
        .filter_map(|path| {
            let file = File::open(&path).ok()?;
            let metadata = file.metadata().ok()?;
            let key = key_of(&metadata).map(|key| key.0);
            if (original.is_some() && key == original) || metadata.len() < position {
                return None;
            }
            if !crate::positional::starts_as_fingerprinted(&file, record) {
                return None;
            }
            if position > 0 {
                let mut last = [0u8; 1];
                crate::positional::read_exact_at(&file, &mut last, position - 1).ok()?;
                if last[0] != b'\n' && last[0] != b'\r' {
                    return None;
                }
            }
            if !tail.is_empty() {
                let start = position.checked_sub(tail.len() as u64)?;
                let mut bytes = vec![0u8; tail.len()];
                crate::positional::read_exact_at(&file, &mut bytes, start).ok()?;
                if bytes != tail {
                    return None;
                }
            }
            Some((path, file))
        });
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

/// The uncompressed candidates other than `found` (the pointer's file) and the file
/// with `at_path_key` (the one at the input's path) that were modified after `found`:
/// files that were written after the pointer's file was rotated, so possibly the
/// current file of the time between two rotations, which the source never read.
pub(crate) fn written_after(
    input: &Path,
    globs: &[String],
    found: &Path,
    at_path_key: Option<u64>,
) -> Vec<PathBuf> {
    let Ok(found_modified) = fs::metadata(found).and_then(|meta| meta.modified()) else {
        return Vec::new();
    };
    candidates(input, globs)
        .into_iter()
        .filter(|path| path != found && !is_compressed(path))
        .filter(|path| {
            fs::metadata(path).is_ok_and(|meta| {
                let key = key_of(&meta).map(|key| key.0);
                meta.len() > 0
                    && (at_path_key.is_none() || key != at_path_key)
                    && meta
                        .modified()
                        .is_ok_and(|modified| modified > found_modified)
            })
        })
        .collect()
}

/// The compressed candidates (a rotated file may have been compressed before it was
/// read to its end).
pub(crate) fn compressed_candidates(input: &Path, globs: &[String]) -> Vec<PathBuf> {
    candidates(input, globs)
        .into_iter()
        .filter(|path| is_compressed(path))
        .collect()
}

/// Where the file of `key` went after a rename in the input's folder: the first
/// other file there with that key (its new name), `None` when it left the folder or
/// was deleted. Read once per rotation, for the log line that says what happened.
pub(crate) fn renamed_to(input: &Path, key: u64) -> Option<PathBuf> {
    let directory = match input.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let input_name = input.file_name().map(|name| name.to_os_string());
    let mut found: Vec<PathBuf> = fs::read_dir(&directory)
        .ok()?
        .filter_map(Result::ok)
        .filter(|entry| Some(entry.file_name()) != input_name)
        .filter(|entry| {
            entry
                .metadata()
                .ok()
                .and_then(|metadata| key_of(&metadata))
                .is_some_and(|found| found.0 == key)
        })
        .map(|entry| entry.path())
        .collect();
    found.sort();
    found.into_iter().next()
}

/// The log line of a rotation by rename: what happened to `input` (its file of `key`
/// renamed, found by its key beside it, or gone from its folder) and what is read next.
pub(crate) fn renamed_line(input: &Path, key: Option<u64>) -> String {
    let renamed = key.and_then(|key| renamed_to(input, key));
    let input = input.display();
    match renamed {
        Some(to) => format!(
            "rotated: {input} was renamed to {}; read to its end, then the new file at {input} is read from its start",
            to.display()
        ),
        None => format!(
            "rotated: {input} was renamed out of its folder or deleted; its open file is read to its end, then the new file at {input} is read from its start"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_globs_match_like_the_glob_feeds_own() {
        // one matcher for both: a `rotated` glob with a class (`[0-9]`) that the glob
        // feed's scan understood was taken literally here, so such a rotation was
        // never followed and its tail reported lost
        assert!(glob_matches("tx.csv.*", "tx.csv.1"));
        assert!(glob_matches("tx.csv.*", "tx.csv.1.gz"));
        assert!(glob_matches("tx.csv-*", "tx.csv-20261201"));
        assert!(!glob_matches("tx.csv.*", "tx.csv"));
        assert!(!glob_matches("tx.csv.*", "other.csv.1"));
        assert!(glob_matches("*.log.?", "app.log.2"));
        assert!(!glob_matches("*.log.?", "app.log.12"));
        let dir = tempfile::tempdir().expect("dir");
        let input = dir.path().join("app.log");
        std::fs::write(dir.path().join("app.log.1"), b"x\n").expect("rotation");
        std::fs::write(dir.path().join("app.log.x"), b"x\n").expect("other");
        let found = candidates(&input, &["app.log.[0-9]".to_owned()]);
        assert_eq!(found, vec![dir.path().join("app.log.1")]);
    }

    #[test]
    fn compressed_rotations_are_known_by_their_extension() {
        assert!(is_compressed(Path::new("tx.csv.1.gz")));
        assert!(is_compressed(Path::new("tx.csv.2.zst")));
        assert!(!is_compressed(Path::new("tx.csv.1")));
    }
}
