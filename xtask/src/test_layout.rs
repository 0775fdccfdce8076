//! The end-to-end tests' layout, checked (part of `cargo xtask layout`): the tests of
//! the `mongoose` binary link into one test binary (`mongoose/tests/suite.rs`, its
//! modules in `mongoose/tests/suite/`), so at most [`MAX_TEST_BINARIES`] `.rs` files
//! lie directly in `mongoose/tests/` (each is a test binary linked against the whole
//! server); and every `mongoose/tests/...` path the book, the README, the regression
//! index, the chaos seeds or CI's script names exists, so a moved test file cannot
//! leave a chapter pointing at nothing.

use std::path::{Path, PathBuf};

/// The folder of the `mongoose` binary's integration tests, from the workspace root.
pub(crate) const TESTS: &str = "mongoose/tests";

/// The most `.rs` files (test binaries) directly in [`TESTS`]: the one suite, the crash
/// loops run against the release binary, the file-only build's test, and room for two.
pub(crate) const MAX_TEST_BINARIES: usize = 5;

/// The files, besides the book's chapters (`docs/src/**/*.md`), whose test paths must
/// resolve.
const NAMING_FILES: &[&str] = &[
    "README.md",
    "tests/REGRESSIONS.md",
    "mongoose-chaos/seeds.toml",
    ".ci/run",
];

/// Runs both checks; prints each finding and returns false when there is one.
pub(crate) fn check(root: &Path) -> bool {
    let binaries = check_binaries(root);
    let paths = check_paths(root);
    binaries && paths
}

fn check_binaries(root: &Path) -> bool {
    let mut binaries: Vec<String> = std::fs::read_dir(root.join(TESTS))
        .map(|entries| {
            entries
                .flatten()
                .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_file()))
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .filter(|name| name.ends_with(".rs"))
                .collect()
        })
        .unwrap_or_default();
    binaries.sort();
    if binaries.len() > MAX_TEST_BINARIES {
        eprintln!(
            "xtask layout: {TESTS}/ has {} test binaries ({}), over {MAX_TEST_BINARIES}: put an end-to-end test in a module of {TESTS}/suite/ (see {TESTS}/suite.rs)",
            binaries.len(),
            binaries.join(", ")
        );
        return false;
    }
    println!(
        "layout: {TESTS}/ has {} test binaries ({}; at most {MAX_TEST_BINARIES})",
        binaries.len(),
        binaries.join(", ")
    );
    true
}

fn check_paths(root: &Path) -> bool {
    let mut files: Vec<PathBuf> = NAMING_FILES.iter().map(|file| root.join(file)).collect();
    chapters(&root.join("docs/src"), &mut files);
    files.sort();
    let mut named = 0;
    let mut ok = true;
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for (line, path) in test_paths(&text) {
            named += 1;
            if !root.join(&path).exists() {
                eprintln!(
                    "xtask layout: {}:{line} names {path}, which does not exist: the end-to-end tests are in {TESTS}/suite/<part>/",
                    file.strip_prefix(root).unwrap_or(file).display()
                );
                ok = false;
            }
        }
    }
    if ok {
        println!("layout: {named} paths of {TESTS}/ named by the book, the README, the regression index, the chaos seeds and CI, each existing");
    }
    ok
}

/// Every `.md` file under `dir`.
fn chapters(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            chapters(&path, files);
        } else if path.extension().is_some_and(|extension| extension == "md") {
            files.push(path);
        }
    }
}

/// Each `(line, path)` of `text` that names a path below [`TESTS`]: the longest run of
/// path characters after `mongoose/tests/` (a trailing `.` or `/` left out).
fn test_paths(text: &str) -> Vec<(usize, String)> {
    let prefix = format!("{TESTS}/");
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        for (at, _) in line.match_indices(&prefix) {
            // `other-mongoose/tests/` is another crate's folder
            let before = line[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_')) {
                continue;
            }
            let rest = &line[at + prefix.len()..];
            let tail: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-' | '.'))
                .collect();
            let path = format!("{prefix}{tail}");
            found.push((index + 1, path.trim_end_matches(['.', '/']).to_owned()));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_paths_are_found_with_their_lines_and_without_trailing_punctuation() {
        let text = "see `mongoose/tests/suite/connectors/kafka.rs::a_test`\nin mongoose/tests/suite/guarantees/.\nnot other-mongoose/tests/x.rs, but mongoose/tests/ itself\n";
        assert_eq!(
            test_paths(text),
            [
                (1, "mongoose/tests/suite/connectors/kafka.rs".to_owned()),
                (2, "mongoose/tests/suite/guarantees".to_owned()),
                (3, "mongoose/tests".to_owned()),
            ]
        );
    }

    #[test]
    fn too_many_test_binaries_or_a_missing_path_fail() {
        let root = std::env::temp_dir().join(format!("xtask-test-layout-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join(TESTS).join("suite")).unwrap();
        std::fs::create_dir_all(root.join("docs/src")).unwrap();
        std::fs::write(root.join(TESTS).join("suite.rs"), "").unwrap();
        std::fs::write(
            root.join("docs/src/chapter.md"),
            "Tests: `mongoose/tests/suite.rs`\n",
        )
        .unwrap();
        assert!(check(&root));
        std::fs::write(
            root.join("docs/src/chapter.md"),
            "Tests: `mongoose/tests/kafka.rs`\n",
        )
        .unwrap();
        assert!(!check(&root));
        std::fs::write(root.join("docs/src/chapter.md"), "").unwrap();
        for index in 0..MAX_TEST_BINARIES {
            std::fs::write(root.join(TESTS).join(format!("t{index}.rs")), "").unwrap();
        }
        assert!(!check(&root));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
