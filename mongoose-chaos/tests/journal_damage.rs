//! The harness's truth about a damaged input journal, checked against the real
//! `mongoose journal` tools: a real appender process, real flipped bytes in a real
//! segment, the real refusal of the next appenders. No server runs: what is pinned is
//! which lines the harness holds for input, and which of them a run must report lost
//! if they are missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use mongoose_chaos::scenario::{Damage, StateFile, Step};
use mongoose_chaos::truth::Expect;

mod common;

/// The `mongoose` binary (without the Kafka feature: the journal tools need none of
/// it), built by cargo into the folder the tests' plugin builds use (cargo's own lock
/// serializes builds there; its up-to-date check makes a repeated call cheap).
fn mongoose_binary() -> PathBuf {
    let root = mongoose_testkit::workspace_root();
    let target_dir = root.join("target").join("plugin-builds").join("target");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .current_dir(&root)
        .args([
            "build",
            "--offline",
            "-p",
            "mongoose",
            "--bin",
            "mongoose",
            "--no-default-features",
            "--target-dir",
        ])
        .arg(&target_dir)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .output()
        .expect("run cargo build for the mongoose binary");
    assert!(
        output.status.success(),
        "cargo build -p mongoose failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    target_dir.join("debug").join("mongoose")
}

/// `mongoose journal dump`: (excerpts, indexes of the damaged ones).
fn dump(mongoose: &Path, journal: &Path) -> (usize, Vec<usize>) {
    let output = Command::new(mongoose)
        .args(["journal", "dump"])
        .arg(journal)
        .output()
        .expect("run mongoose journal dump");
    let text = String::from_utf8_lossy(&output.stdout);
    let rows: Vec<(usize, bool)> = text
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            Some((fields.first()?.parse().ok()?, *fields.get(4)? == "ok"))
        })
        .collect();
    let damaged = rows
        .iter()
        .filter(|(_, whole)| !whole)
        .map(|(index, _)| *index)
        .collect();
    (rows.len(), damaged)
}

/// Chaos seed 1796543685089 (journal-faults): an excerpt damaged, lines given to
/// appenders that refused the damaged journal, then a second excerpt damaged. The
/// second damage marked "every line of the journal from its excerpt on" from the
/// harness's list, which still held the lines the refusing appenders never appended:
/// 3,521 lines that were never input were counted as a loss the server had to report,
/// and the server's honest exit 0 was called false lossless. Only lines the journal
/// holds from the first damaged excerpt on may be missing and must then be reported;
/// lines given to a refusing appender are no input.
#[test]
fn lines_given_to_an_appender_that_refused_a_damaged_journal_are_no_loss_to_report() {
    let mongoose = mongoose_binary();
    let scratch = tempfile::tempdir().expect("scratch");
    // the seed's scenario: a ledger fed by a journal (its steps are not run here)
    let mut world = common::seed_world(
        "journal-faults",
        1_796_543_685_089,
        mongoose.clone(),
        scratch.path(),
    );
    let append = |lines| Step::Append {
        lines,
        stream: 0,
        bytes: None,
    };
    let damage = |at| Step::Damage {
        what: StateFile::JournalExcerpt,
        how: Damage::FlipByte { at },
    };
    for step in [
        append(2_000),
        damage(234),
        append(300),
        append(3_000),
        damage(13),
        append(1_000),
    ] {
        world.step(&step).expect("the step runs");
    }
    world.close_writers();

    let (excerpts, damaged) = dump(&mongoose, &world.path("in/journal"));
    let events = world.events.join("\n");
    assert_eq!(
        excerpts, 2_000,
        "only the lines given before the damage are in the journal: {events}"
    );
    assert_eq!(damaged.len(), 2, "two excerpts are damaged: {events}");
    let first_damaged = damaged[0];
    let mut wrong = Vec::new();
    for (index, line) in world.truth.lines.iter().enumerate() {
        let expected = if index < first_damaged {
            // read before any damage, always readable
            Expect::Must
        } else if index < excerpts {
            // in the journal from the first damaged excerpt on: a tailer may stop there
            Expect::Maybe { report: true }
        } else {
            // given to an appender that refused the damaged journal: never input
            Expect::Maybe { report: false }
        };
        if line.expect != expected {
            wrong.push(format!("line {index}: {:?}, not {expected:?}", line.expect));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} lines are judged wrongly (first: {}); events:\n{events}",
        wrong.len(),
        world.truth.lines.len(),
        wrong.first().map_or("", String::as_str)
    );
}
