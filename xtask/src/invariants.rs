//! The invariant citations, checked (part of `cargo xtask layout`): every
//! `invariant N` (and `invariants N and M`, `invariants N-M`) in a comment of a Rust
//! file names an invariant that `docs/src/reference/invariants.md` has, as a heading
//! with the anchor `{#invariant-N}`. A finding names the file, the line and the number.

use std::path::{Path, PathBuf};

/// The page that lists the invariants, from the workspace root.
pub(crate) const PAGE: &str = "docs/src/reference/invariants.md";

/// Checks every citation; prints each finding and returns false when there is one.
pub(crate) fn check(root: &Path) -> bool {
    let page = root.join(PAGE);
    let Ok(text) = std::fs::read_to_string(&page) else {
        eprintln!("xtask layout: {PAGE} is missing: it lists the invariants the code cites");
        return false;
    };
    let listed = anchors(&text);
    if listed.is_empty() {
        eprintln!("xtask layout: {PAGE} has no `{{#invariant-N}}` heading");
        return false;
    }
    let mut files = Vec::new();
    rust_files(root, &mut files);
    files.sort();
    let mut citations = 0;
    let mut ok = true;
    for file in &files {
        let Ok(source) = std::fs::read_to_string(file) else {
            continue;
        };
        for (line, number) in cited(&source) {
            citations += 1;
            if !listed.contains(&number) {
                eprintln!(
                    "xtask layout: {}:{line} cites invariant {number}, which {PAGE} does not list (it lists {listed:?}): cite one it lists, or add it there",
                    file.strip_prefix(root).unwrap_or(file).display()
                );
                ok = false;
            }
        }
    }
    if ok {
        println!("layout: {citations} invariant citations in Rust comments, each listed in {PAGE}");
    }
    ok
}

/// The invariant numbers a page lists: each `{#invariant-N}` anchor.
fn anchors(page: &str) -> Vec<u32> {
    let mut numbers: Vec<u32> = page
        .match_indices("{#invariant-")
        .filter_map(|(at, found)| {
            let rest = &page[at + found.len()..];
            let end = rest.find('}')?;
            rest[..end].parse().ok()
        })
        .collect();
    numbers.sort_unstable();
    numbers.dedup();
    numbers
}

/// Each `(line, number)` a comment of `source` cites: `invariant N`, `invariants N and
/// M`, `invariants N, M`, `invariants N-M` (every number of the range), case
/// insensitive, in the part of a line after `//`.
fn cited(source: &str) -> Vec<(usize, u32)> {
    let mut found = Vec::new();
    for (index, line) in source.lines().enumerate() {
        let Some(comment_at) = line.find("//") else {
            continue;
        };
        let comment = line[comment_at..].to_ascii_lowercase();
        for (at, word) in comment.match_indices("invariant") {
            let after = &comment[at + word.len()..];
            let after = after.strip_prefix('s').unwrap_or(after);
            // a space, then a number: `invariant_3` or `invariant:` is no citation
            let Some(mut rest) = after.strip_prefix(' ') else {
                continue;
            };
            let mut range_from = None;
            while let Some((number, tail)) = leading_number(rest) {
                match range_from.take() {
                    Some(from) => found.extend((from..=number).map(|n| (index + 1, n))),
                    None => found.push((index + 1, number)),
                }
                rest = if let Some(tail) = tail.strip_prefix('-') {
                    // `from` was pushed already: the range adds what follows it
                    range_from = Some(number + 1);
                    tail
                } else if let Some(tail) = [", ", " and "]
                    .iter()
                    .find_map(|separator| tail.strip_prefix(separator))
                {
                    tail
                } else {
                    break;
                };
            }
        }
    }
    found
}

/// The number `text` starts with, and what follows it.
fn leading_number(text: &str) -> Option<(u32, &str)> {
    let digits = text.len() - text.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let number = text[..digits].parse().ok()?;
    Some((number, &text[digits..]))
}

/// Every `.rs` file of the workspace but `target/` and hidden folders (sources, tests,
/// examples, benches and fuzz targets alike).
pub(crate) fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, files);
            }
        } else if name.ends_with(".rs") {
            files.push(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn citations_in_comments_are_found_with_their_lines() {
        let source = "fn f() {}\n// DESIGN invariant 3: never waits\n/// (invariant 10 (docs/src/reference/invariants.md))\nlet invariant = 5; // the invariant: sorted\n//! invariants 2 and 4, invariants 6-8\n";
        assert_eq!(
            cited(source),
            [(2, 3), (3, 10), (5, 2), (5, 4), (5, 6), (5, 7), (5, 8)]
        );
        assert!(cited("let invariant_3 = 1;\nlet s = \"invariant 3\";\n").is_empty());
    }

    #[test]
    fn the_page_lists_its_anchors_and_a_missing_number_fails() {
        assert_eq!(
            anchors(
                "## 1. One {#invariant-1}\ntext\n## 2. Two {#invariant-2}\n[see](#invariant-1)\n"
            ),
            [1, 2]
        );
        let root = std::env::temp_dir().join(format!("xtask-invariants-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("docs/src/reference")).unwrap();
        std::fs::create_dir_all(root.join("a/src")).unwrap();
        std::fs::write(root.join(PAGE), "## 1. One {#invariant-1}\n").unwrap();
        std::fs::write(root.join("a/src/lib.rs"), "// invariant 1\n").unwrap();
        assert!(check(&root));
        // a number the page does not list (spelled so that this file cites none)
        let missing = concat!("/", "/ invariant 1", "1\n");
        std::fs::write(root.join("a/src/lib.rs"), missing).unwrap();
        assert!(!check(&root));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
