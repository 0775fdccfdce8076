//! Every TOML config example of the book (`docs/src/**/*.md`) and of the README is a
//! config `mongoose validate` accepts, and the main example of "Running a server from a
//! config" and the README's tour also run to settled, twice (issue 28 item 8).
//!
//! A block is fenced ```` ```toml ````; one that is not a whole config says so in its
//! fence (```` ```toml fragment ````, ```` ```toml cargo ```` for a Cargo manifest) and is
//! skipped, counted; one fenced ```` ```toml tests ```` is a `mongoose test` file and must
//! parse as one. Each config is written two folders deep in a fresh folder (so a
//! `../../` path stays inside it) with the files the examples read: `input.txt` and
//! `logs/app.log` (account lines), the plugins of `plugins/` its `plugin_dir` needs, and a
//! free port instead of the admin API's 8089.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use mongoose_testkit::build_plugin;

/// One TOML block of a Markdown file.
#[derive(Debug)]
struct Block {
    /// `file:line` of its fence.
    place: String,
    /// The words after `toml` in its fence (`fragment`, `cargo`).
    tags: Vec<String>,
    text: String,
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, into: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .expect("the book's folder")
            .map(|entry| entry.expect("an entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, into);
            } else if path.extension().is_some_and(|extension| extension == "md") {
                into.push(path);
            }
        }
    }
    let mut files = vec![repository().join("README.md")];
    walk(&repository().join("docs/src"), &mut files);
    files
}

/// The ```toml blocks of `file`, with a list item's indentation taken off.
fn toml_blocks(file: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(file).expect("a Markdown file");
    let name = file
        .strip_prefix(repository())
        .unwrap_or(file)
        .display()
        .to_string();
    let mut blocks = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((number, line)) = lines.next() {
        let trimmed = line.trim_start();
        let Some(info) = trimmed.strip_prefix("```toml") else {
            continue;
        };
        let indent = line.len() - trimmed.len();
        let mut body = String::new();
        for (_, inner) in lines.by_ref() {
            if inner.trim_start().starts_with("```") {
                break;
            }
            body.push_str(inner.get(indent..).unwrap_or(inner.trim_start()));
            body.push('\n');
        }
        blocks.push(Block {
            place: format!("{name}:{}", number + 1),
            tags: info.split_whitespace().map(str::to_owned).collect(),
            text: body,
        });
    }
    blocks
}

fn all_blocks() -> Vec<Block> {
    markdown_files()
        .iter()
        .flat_map(|file| toml_blocks(file))
        .collect()
}

/// A port nobody listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .expect("its address")
        .port()
}

/// The plugins a config's source and sink kinds need (`plugins/<name>`'s package).
fn plugins_for(config: &toml::Table) -> Vec<&'static str> {
    let mut kinds: Vec<String> = Vec::new();
    for (section, key) in [("feeds", "source"), ("sinks", "kind")] {
        if let Some(items) = config.get(section).and_then(toml::Value::as_array) {
            for item in items {
                if let Some(kind) = item.get(key).and_then(toml::Value::as_str) {
                    kinds.push(kind.to_owned());
                }
            }
        }
    }
    let mut packages = Vec::new();
    for kind in kinds {
        let package = match kind.as_str() {
            "counter" | "append" => "template-plugin",
            "journal" => "journal-plugin",
            "archive" => "archive-plugin",
            "kafka" => "kafka-plugin",
            _ => continue,
        };
        if !packages.contains(&package) {
            packages.push(package);
        }
    }
    packages
}

/// A fresh folder holding `block` as `a/b/mongoose.toml` and what it reads; the config's
/// path.
fn lay_out(block: &Block, scratch: &Path) -> PathBuf {
    let port = free_port();
    let text = block
        .text
        .replace("127.0.0.1:8089", &format!("127.0.0.1:{port}"));
    let config: toml::Table = text
        .parse()
        .unwrap_or_else(|error| panic!("{}: not TOML: {error}", block.place));
    let folder = scratch.join("a").join("b");
    std::fs::create_dir_all(folder.join("logs")).expect("the config's folder");
    let lines: String = (0..200)
        .map(|index| format!("acct-{},{}\n", index % 7, index % 11))
        .collect();
    std::fs::write(folder.join("input.txt"), &lines).expect("input.txt");
    std::fs::write(folder.join("logs/app.log"), &lines).expect("logs/app.log");
    if let Some(plugin_dir) = config.get("plugin_dir").and_then(toml::Value::as_str) {
        let dir = folder.join(plugin_dir);
        std::fs::create_dir_all(&dir).expect("the plugin folder");
        for package in plugins_for(&config) {
            let library = build_plugin(package, &[]);
            let name = library.file_name().expect("a library file");
            std::fs::copy(&library, dir.join(name)).expect("copy the plugin");
        }
    }
    let path = folder.join("mongoose.toml");
    std::fs::write(&path, text).expect("the config");
    path
}

fn mongoose(arguments: &[&str], config: &Path) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mongoose"));
    command
        .args(arguments)
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mongoose");
    // a deadline that only makes a hang fail
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while child.try_wait().expect("its status").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().expect("its output")
}

fn describe(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn every_config_example_of_the_book_validates() {
    let blocks = all_blocks();
    // a block fenced ```toml tests is a `mongoose test` file: it parses as one
    let (tests, blocks): (Vec<&Block>, Vec<&Block>) =
        blocks.iter().partition(|block| block.tags == ["tests"]);
    for block in &tests {
        if let Err(error) = toml::from_str::<mongoose_server::unit_tests::TestFile>(&block.text) {
            panic!("{}: not a tests file: {error}", block.place);
        }
    }
    // the settings table alone of an `aggregate` processor (the core's worked example):
    // mongoose-aggregate/tests/book.rs compiles and runs them; the page's whole configs
    // are validated here
    let blocks: Vec<&Block> = blocks
        .into_iter()
        .filter(|block| block.tags != ["aggregate"])
        .collect();
    let (skipped, configs): (Vec<&Block>, Vec<&Block>) =
        blocks.into_iter().partition(|block| !block.tags.is_empty());
    assert!(
        configs.len() >= 10,
        "the book's config examples were found: {configs:#?}"
    );
    for block in &skipped {
        assert!(
            block
                .tags
                .iter()
                .all(|tag| tag == "fragment" || tag == "cargo"),
            "{}: an unknown mark on a toml block: {:?} (use `fragment` or `cargo`)",
            block.place,
            block.tags
        );
    }
    eprintln!(
        "{} config examples validated, {} skipped: {}",
        configs.len(),
        skipped.len(),
        skipped
            .iter()
            .map(|block| format!("{} ({})", block.place, block.tags.join(" ")))
            .collect::<Vec<_>>()
            .join(", ")
    );
    assert!(
        skipped.len() <= 4,
        "keep the fragments few: make an example a whole config: {skipped:#?}"
    );
    let mut failures = Vec::new();
    for block in configs {
        let scratch = tempfile::tempdir().expect("a scratch folder");
        let config = lay_out(block, scratch.path());
        let output = mongoose(&["validate"], &config);
        if output.status.code() != Some(0) {
            failures.push(format!("{}: {}", block.place, describe(&output)));
        }
    }
    assert!(
        failures.is_empty(),
        "book config examples that do not validate:\n{}",
        failures.join("\n\n")
    );
}

/// The block of `file` whose text holds `marker`.
fn block_with(file: &str, marker: &str) -> Block {
    toml_blocks(&repository().join(file))
        .into_iter()
        .find(|block| block.text.contains(marker))
        .unwrap_or_else(|| panic!("{file} has a toml block with {marker:?}"))
}

/// Validates `block`, runs it to settled (exit 0), and runs it again (exit 0: nothing
/// left by the first run refuses the second).
fn runs_to_settled_twice(block: &Block) {
    let scratch = tempfile::tempdir().expect("a scratch folder");
    let config = lay_out(block, scratch.path());
    let validate = mongoose(&["validate"], &config);
    assert_eq!(
        validate.status.code(),
        Some(0),
        "{}: {}",
        block.place,
        describe(&validate)
    );
    for run in ["first", "second"] {
        let output = mongoose(&["run", "--exit-when-settled"], &config);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}: the {run} run did not settle lossless: {}",
            block.place,
            describe(&output)
        );
    }
}

#[test]
fn the_main_config_example_validates_and_runs_to_settled_twice() {
    runs_to_settled_twice(&block_with("docs/src/running/config.md", "# mongoose.toml"));
}

#[test]
fn the_readme_tour_config_runs_to_settled_twice() {
    let block = block_with("README.md", "# tour.toml");
    runs_to_settled_twice(&block);
}
