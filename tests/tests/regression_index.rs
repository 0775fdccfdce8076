//! `tests/REGRESSIONS.md` names, for each finding behind the book's guarantees, the test that pins
//! its fix. This checks that every test it names exists, so a rename or a deletion
//! cannot silently leave a finding without its test.

use std::fs;
use std::path::Path;

/// Every `crate/dir/file.rs::name` in backticks of the index.
fn named_tests(index: &str) -> Vec<(String, String)> {
    let mut named = Vec::new();
    for quoted in index.split('`').skip(1).step_by(2) {
        if let Some((file, name)) = quoted.split_once(".rs::") {
            named.push((format!("{file}.rs"), name.to_owned()));
        }
    }
    named
}

#[test]
fn every_test_the_regression_index_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let index = fs::read_to_string(root.join("tests/REGRESSIONS.md")).expect("the index");
    let named = named_tests(&index);
    assert!(
        named.len() > 40,
        "the index names its tests: {}",
        named.len()
    );
    let missing: Vec<String> = named
        .iter()
        .filter(|(file, name)| {
            let text = fs::read_to_string(root.join(file)).unwrap_or_default();
            !text.contains(&format!("fn {name}("))
        })
        .map(|(file, name)| format!("{file}::{name}"))
        .collect();
    assert!(
        missing.is_empty(),
        "tests named in REGRESSIONS.md that do not exist: {missing:#?}"
    );
}
