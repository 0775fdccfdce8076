//! The code cites the book, never a text outside the repository: every chapter path
//! after `book:` in a Rust source (and each further path of a list after it) names a
//! chapter under `docs/src/`, and no citation of the old specification (its file name, or a section
//! sign) is left (issue 28 item 8).

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file of the repository but `target/` and hidden folders.
fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("a folder") {
        let path = entry.expect("an entry").path();
        let name = path
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or("");
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, into);
            }
        } else if name.ends_with(".rs") {
            into.push(path);
        }
    }
}

/// The chapters `text` cites: each path after `book: `, and each further path of a list
/// right after one.
fn cited_chapters(text: &str) -> Vec<String> {
    let mut cited = Vec::new();
    for (start, _) in text.match_indices("book: ") {
        let mut rest = &text[start + "book: ".len()..];
        loop {
            let path: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.'))
                .collect();
            let path = path.trim_end_matches('.').to_owned();
            if !path.ends_with(".md") {
                break;
            }
            rest = &rest[path.len()..];
            cited.push(path);
            let next = [", ", " and "]
                .iter()
                .find_map(|separator| rest.strip_prefix(separator));
            match next {
                Some(after)
                    if after.split_whitespace().next().is_some_and(|word| {
                        word.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
                            .ends_with(".md")
                    }) =>
                {
                    rest = after;
                }
                _ => break,
            }
        }
    }
    cited
}

#[test]
fn every_book_chapter_the_code_cites_exists_and_no_old_citation_is_left() {
    let root = root();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let old_name = concat!("feed-delivery-", "guarantees");
    let section_sign = '\u{a7}';
    let mut citations = 0;
    let mut missing = Vec::new();
    let mut old = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).unwrap_or_default();
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        for chapter in cited_chapters(&text) {
            citations += 1;
            if !root.join("docs/src").join(&chapter).is_file() {
                missing.push(format!("{shown}: book: {chapter}"));
            }
        }
        for (number, line) in text.lines().enumerate() {
            if line.contains(old_name) || line.contains(section_sign) {
                old.push(format!("{shown}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    assert!(
        citations > 100,
        "the code cites the book: {citations} citations found"
    );
    assert!(
        missing.is_empty(),
        "citations of chapters that are not in docs/src/:\n{}",
        missing.join("\n")
    );
    assert!(
        old.is_empty(),
        "citations of a text outside the repository (cite `book:` and the chapter's path under docs/src instead):\n{}",
        old.join("\n")
    );
}

#[test]
fn a_citation_list_names_each_chapter() {
    assert_eq!(
        cited_chapters("x (book: guarantees/pause.md, crashes/measured.md): y"),
        ["guarantees/pause.md", "crashes/measured.md"]
    );
    assert_eq!(
        cited_chapters("// book: guarantees/status.md. Next"),
        ["guarantees/status.md"]
    );
    assert_eq!(
        cited_chapters("book: guarantees/pause.md and book: guarantees/status.md"),
        ["guarantees/pause.md", "guarantees/status.md"]
    );
}
