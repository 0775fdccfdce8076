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
