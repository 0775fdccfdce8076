//! The ledger demo tells the truth (issue 28, item 10): its closing hints work as
//! printed, and it lists only files that exist.
//!
//! Before, the demo wiped its folder at every start (so "run it again: nothing is
//! applied twice" could not be seen), ended in a fraction of a second (so "kill -9 it
//! mid-run" could not be done) and listed a `state.json` that did not exist. The test
//! runs the real example binary (`cargo test` builds the examples next to the
//! binaries), and the hint lines through `sh` as the demo prints them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The example binary `ledger`, built by `cargo test` beside the `mongoose` binary.
fn demo_binary() -> PathBuf {
    let binary = Path::new(env!("CARGO_BIN_EXE_mongoose"))
        .parent()
        .expect("the binary's folder")
        .join("examples")
        .join("ledger");
    assert!(
        binary.exists(),
        "{} is missing: `cargo test --workspace` builds it; alone, run `cargo build -p mongoose --example ledger` first",
        binary.display()
    );
    binary
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs `command` through `sh -c`, as an operator pasting it would.
fn shell(command: &str) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(command)
        .output()
        .expect("sh runs")
}

/// The line after the line `heading` in `text`, trimmed.
fn line_after(text: &str, heading: &str) -> String {
    let mut lines = text.lines();
    lines
        .by_ref()
        .find(|line| line.starts_with(heading))
        .unwrap_or_else(|| panic!("no line {heading:?} in:\n{text}"));
    lines.next().expect("a command line").trim().to_owned()
}

/// The "all runs" line's counts: applied, rejected, input lines.
fn all_runs(text: &str) -> (u64, u64, u64) {
    let line = text
        .lines()
        .find(|line| line.starts_with("all runs: "))
        .unwrap_or_else(|| panic!("no 'all runs' line in:\n{text}"));
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|word| !word.is_empty())
        .map(|word| word.parse().expect("a number"))
        .collect();
    (numbers[0], numbers[1], numbers[3])
}

/// Every listed file exists, with the size printed.
fn check_listed_files(text: &str) -> usize {
    let mut listed = 0;
    let files = text
        .lines()
        .skip_while(|line| !line.starts_with("the demo's files"))
        .skip(1)
        .take_while(|line| line.starts_with("  "));
    for line in files {
        let (path, size) = line
            .trim()
            .rsplit_once(" (")
            .unwrap_or_else(|| panic!("a file line is `path (N bytes)`: {line}"));
        let size: u64 = size.trim_end_matches(" bytes)").parse().expect("a size");
        let metadata = std::fs::metadata(path)
            .unwrap_or_else(|error| panic!("the demo lists {path}, which does not exist: {error}"));
        assert!(metadata.len() >= size, "{path} is smaller than listed");
        listed += 1;
    }
    listed
}

/// Lines the test's own count finds in the demo's input.
fn input_lines(dir: &Path) -> u64 {
    std::fs::read(dir.join("input.txt"))
        .expect("the demo keeps its input")
        .iter()
        .filter(|&&byte| byte == b'\n')
        .count() as u64
}

#[test]
fn the_demo_keeps_its_folder_and_its_hints_work_as_printed() {
    let folder = tempfile::tempdir().expect("temp dir");
    let dir = folder.path().join("demo");
    let binary = demo_binary();

    // the first run: the whole input, each line once
    let first = Command::new(&binary)
        .arg("--demo-dir")
        .arg(&dir)
        .output()
        .expect("the demo runs");
    let text = stdout(&first);
    assert!(first.status.success(), "the demo failed: {text}");
    let (applied, rejected, lines) = all_runs(&text);
    assert_eq!(lines, input_lines(&dir));
    assert_eq!(applied + rejected, lines, "{text}");
    assert!(check_listed_files(&text) >= 4, "{text}");

    // "run it again": the printed command, as printed, applies nothing twice
    let again = line_after(&text, "run it again");
    let second = shell(&again);
    let second_text = stdout(&second);
    assert!(second.status.success(), "{again}: {second_text}");
    assert!(
        second_text.contains("this run: 0 lines applied, 0 rejected"),
        "{second_text}"
    );
    assert_eq!(all_runs(&second_text), (applied, rejected, lines));
    check_listed_files(&second_text);

    // "kill -9 it mid-run and run it again": the printed line, with a smaller input
    // (the printed count is sized for a release build; this one may be a debug build)
    let kill = line_after(&text, "kill -9 it mid-run");
    assert!(kill.contains("--lines 2000000"), "{kill}");
    let kill = kill.replace("--lines 2000000", "--lines 150000");
    let killed = shell(&kill);
    let killed_text = stdout(&killed);
    assert!(killed.status.success(), "{kill}: {killed_text}");
    let (applied, rejected, lines) = all_runs(&killed_text);
    assert_eq!(lines, 150_000);
    assert_eq!(lines, input_lines(&dir));
    assert_eq!(
        applied + rejected,
        lines,
        "after a kill -9 and a rerun: {killed_text}"
    );
    // the kill landed mid-run when the rerun found lines applied by the killed run (a
    // killed run that had not started applying proves less, but nothing false)
    if !killed_text.contains("applied by earlier runs") {
        eprintln!("the kill landed before the killed run applied anything");
    }
    check_listed_files(&killed_text);
}
