//! Issue 24, item 8: the ledger's state has an identity, checked at open
//! (invariant 6; STYLE, "identity before trust"): a state that is another ledger's, or
//! only part of this one's, is refused with the file and the fix, never applied. Each
//! case is made by hand on the state folder of a real `mongoose` run, between runs, as
//! an operator (or a backup tool) would: another run's outbox segment copied in, two
//! ledgers' folders swapped, a segment or the snapshot deleted, the outbox cut short
//! (book: guarantees/commit-after-processing.md: the commit is never ahead of durable state, so a cut
//! of durable records is never a torn write).

use crate::support;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use mongoose_testkit::{build_plugin, plugin_dir};
use support::{assert_applied_once, ledger_config, plugin_ledger_config, LedgerRun};

/// `count` lines from `first` on, on accounts named `prefix0..prefix36`.
fn lines(prefix: &str, first: usize, count: usize) -> Vec<String> {
    (first..first + count)
        .map(|index| format!("{prefix}{},{}", index % 37, (index % 11) as i64 - 6))
        .collect()
}

fn text(lines: &[String]) -> String {
    lines.iter().map(|line| format!("{line}\n")).collect()
}

/// The ledger's settings with `extra` (`compact_every = 300`, say).
fn settings(extra: &str) -> String {
    let mut settings = r#"state_dir = "state", alerts = "alerts.txt""#.to_owned();
    if !extra.is_empty() {
        settings.push_str(", ");
        settings.push_str(extra);
    }
    settings
}

/// A ledger run over `input`, run to its end (settled, exit 0).
fn settled(input: &[String], extra: &str) -> LedgerRun {
    let run = LedgerRun::new(&text(input), &ledger_config("", "", &settings(extra)));
    let (code, log) = run.finish_with_log();
    assert_eq!(code, 0, "the first run: {log}");
    assert_applied_once(&run.state_in("state"), input, "the first run");
    run
}

fn append(run: &LedgerRun, lines: &[String]) {
    std::fs::OpenOptions::new()
        .append(true)
        .open(run.path("input.txt"))
        .expect("input")
        .write_all(text(lines).as_bytes())
        .expect("append");
}

/// The outbox segments of the state folder `state`, oldest first.
fn segments(state: &Path) -> Vec<PathBuf> {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(state.join("outbox"))
        .expect("outbox folder")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .collect();
    segments.sort();
    segments
}

/// Every file below `dir` with its bytes.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut found = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            found.extend(files(&path));
        } else {
            found.insert(path.clone(), std::fs::read(&path).expect("readable"));
        }
    }
    found
}

/// Swaps two files or folders.
fn swap(first: &Path, second: &Path) {
    let aside = first.with_extension("swapping");
    std::fs::rename(first, &aside).expect("rename");
    std::fs::rename(second, first).expect("rename");
    std::fs::rename(&aside, second).expect("rename");
}

/// What the next run must do.
#[derive(Debug)]
enum Expect {
    /// Refuse to start (exit 1 or 2), naming this file in its message with a way out,
    /// and change nothing in the state folder or the alerts.
    Refused(PathBuf),
    /// Refuse as [`Expect::Refused`], or run to its end with every line applied once.
    RefusedOrExact(PathBuf),
}

/// One row: the run whose state was touched, the lines its state must hold if it
/// runs, and what it must do. `_other` keeps a second run's folder alive.
struct Case {
    name: &'static str,
    run: LedgerRun,
    lines: Vec<String>,
    expect: Expect,
    _other: Option<LedgerRun>,
}

/// Runs one case and says what was wrong with it, if anything.
fn check(case: Case) -> Option<String> {
    let Case {
        name,
        run,
        lines,
        expect,
        ..
    } = case;
    let state_before = files(&run.path("state"));
    let alerts_before = std::fs::read(run.path("alerts.txt")).unwrap_or_default();
    let (code, log) = run.finish_with_log();
    let said = log
        .lines()
        .filter(|line| line.contains("mongoose:") || line.contains("ERROR"))
        .collect::<Vec<_>>()
        .join("\n");
    let (file, exact_allowed) = match &expect {
        Expect::Refused(file) => (file, false),
        Expect::RefusedOrExact(file) => (file, true),
    };
    if code == 1 || code == 2 {
        let file = file.display().to_string();
        if !said.contains(&file) {
            return Some(format!(
                "{name}: refused (exit {code}) without naming {file}: {said}"
            ));
        }
        if !["restore", "Restore", "move", "remove", "Put back"]
            .iter()
            .any(|fix| said.contains(fix))
        {
            return Some(format!("{name}: refused without saying what to do: {said}"));
        }
        if files(&run.path("state")) != state_before {
            return Some(format!(
                "{name}: the refused start changed the state folder"
            ));
        }
        if std::fs::read(run.path("alerts.txt")).unwrap_or_default() != alerts_before {
            return Some(format!("{name}: the refused start changed the alerts"));
        }
        eprintln!("{name}: refused, exit {code}: {said}");
        return None;
    }
    let state = mongoose_ledger::LedgerState::load(&run.path("state"));
    let outcome = match &state {
        Ok(state) => format!(
            "exit {code}, {} of {} lines applied, balances {}",
            state.applied,
            lines.len(),
            if state.balances == support::balances_of(lines.iter().map(String::as_str)) {
                "exact"
            } else {
                "wrong"
            }
        ),
        Err(error) => format!("exit {code}, state unreadable: {error}"),
    };
    let exact = code == 0
        && state.as_ref().is_ok_and(|state| {
            state.applied == lines.len() as u64
                && state.balances == support::balances_of(lines.iter().map(String::as_str))
        });
    if exact && exact_allowed {
        eprintln!("{name}: exact ({outcome})");
        return None;
    }
    Some(format!("{name}: not refused: {outcome}"))
}

/// Issue 24, item 8 (table-driven): every case is refused with the file and the fix,
/// or (where the row allows it) ends exact. Before the fix each was silently applied:
/// lines skipped, another ledger's balances taken, records dropped at every load,
/// accounts vanished, exit 0.
#[test]
fn a_foreign_or_partial_ledger_state_is_refused_never_silently_applied() {
    let first = lines("a", 0, 2_000);
    let later = lines("a", 2_000, 1_000);
    let all: Vec<String> = first.iter().chain(&later).cloned().collect();
    let mut cases = Vec::new();

    // another run of the same input (another pointer: another epoch) that read less:
    // its outbox segment copied over this one's
    {
        let run = settled(&first, "");
        let other = settled(&first[..1_000], "");
        append(&run, &later);
        let ours = segments(&run.path("state")).pop().expect("a segment");
        let theirs = segments(&other.path("state")).pop().expect("a segment");
        std::fs::copy(&theirs, &ours).expect("copy");
        cases.push(Case {
            name: "another run's outbox segment",
            run,
            lines: all.clone(),
            expect: Expect::Refused(ours),
            _other: Some(other),
        });
    }

    // two ledgers (other inputs) with their state folders swapped
    {
        let run = settled(&first, "");
        let other = settled(&lines("b", 0, 1_500), "");
        swap(&run.path("state"), &other.path("state"));
        append(&run, &later);
        cases.push(Case {
            name: "two ledgers' state folders swapped",
            expect: Expect::Refused(run.pointer_path()),
            run,
            lines: all.clone(),
            _other: Some(other),
        });
    }

    // two ledgers with their outboxes swapped
    {
        let run = settled(&first, "");
        let other = settled(&lines("b", 0, 1_500), "");
        swap(&run.path("state/outbox"), &other.path("state/outbox"));
        append(&run, &later);
        let segment = segments(&run.path("state")).pop().expect("a segment");
        cases.push(Case {
            name: "two ledgers' outboxes swapped",
            run,
            lines: all.clone(),
            expect: Expect::Refused(segment),
            _other: Some(other),
        });
    }

    // snapshots taken (every 300 records), then every outbox segment deleted
    {
        let run = settled(&first, "compact_every = 300");
        for segment in segments(&run.path("state")) {
            std::fs::remove_file(segment).expect("delete");
        }
        append(&run, &later);
        cases.push(Case {
            name: "the outbox segments deleted, the snapshot kept",
            expect: Expect::Refused(run.path("state/outbox")),
            run,
            lines: all.clone(),
            _other: None,
        });
    }

    // the newest outbox segment deleted
    {
        let run = settled(&first, "compact_every = 300");
        let newest = segments(&run.path("state")).pop().expect("a segment");
        std::fs::remove_file(&newest).expect("delete");
        append(&run, &later);
        cases.push(Case {
            name: "the newest outbox segment deleted",
            expect: Expect::Refused(run.path("state/outbox")),
            run,
            lines: all.clone(),
            _other: None,
        });
    }

    // the snapshot deleted after its records were compacted away
    {
        let run = settled(&first, "compact_every = 300");
        append(&run, &later[..10]);
        let (code, log) = run.finish_with_log();
        assert_eq!(
            code, 0,
            "a second run, so that the first run's segment goes: {log}"
        );
        std::fs::remove_file(run.path("state/state.json")).expect("delete");
        append(&run, &later[10..]);
        cases.push(Case {
            name: "the snapshot deleted after compaction",
            expect: Expect::Refused(run.path("state/state.json")),
            run,
            lines: all.clone(),
            _other: None,
        });
    }

    // the snapshot deleted while the outbox still holds every record: rebuilt from them
    {
        let run = settled(&first, "");
        // (an earlier build wrote no snapshot before its first compaction)
        let _ = std::fs::remove_file(run.path("state/state.json"));
        append(&run, &later);
        cases.push(Case {
            name: "the snapshot deleted before any compaction",
            expect: Expect::RefusedOrExact(run.path("state/state.json")),
            run,
            lines: all.clone(),
            _other: None,
        });
    }

    // the outbox cut short by whole records it had reported durable (their lines are
    // committed): a file feed can read them again, or the start is refused
    {
        let run = settled(&first, "");
        let segment = segments(&run.path("state")).pop().expect("a segment");
        let length = std::fs::metadata(&segment).expect("segment").len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&segment)
            .expect("segment")
            .set_len(length * 84 / 100)
            .expect("cut");
        append(&run, &later);
        cases.push(Case {
            name: "the outbox cut short on a file feed",
            run,
            lines: all.clone(),
            expect: Expect::RefusedOrExact(segment),
            _other: None,
        });
    }

    // the same on a journal feed, whose tailer's committed index is past the cut
    cases.push(journal_feed_cut_short(&first, &later));

    let failures: Vec<String> = cases.into_iter().filter_map(check).collect();
    assert!(
        failures.is_empty(),
        "{} cases applied foreign or partial state:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Appends `lines` to the journal `journal` through `mongoose journal append`.
fn journal_append(journal: &Path, lines: &[String]) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mongoose"))
        .args(["journal", "append"])
        .arg(journal)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the journal writer starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text(lines).as_bytes())
        .expect("the writer reads");
    assert!(child.wait().expect("reaped").success(), "journal append");
}

/// The ledger on a journal feed (the journal plugin), settled over `first`; its outbox
/// cut to 84 %; `later` appended.
fn journal_feed_cut_short(first: &[String], later: &[String]) -> Case {
    let library = build_plugin("journal-plugin", &[]);
    let run = LedgerRun::new("", "");
    plugin_dir(run.dir.path(), &[&library]);
    let journal = run.path("journal");
    std::fs::write(
        run.path("mongoose.toml"),
        plugin_ledger_config(
            &run.path("plugins").display().to_string(),
            "journal",
            &format!(r#"path = "{}", tailer = "ledger""#, journal.display()),
            &settings(""),
        ),
    )
    .expect("config");
    journal_append(&journal, first);
    let (code, log) = run.finish_with_log();
    assert_eq!(code, 0, "the first run on the journal: {log}");
    assert_applied_once(
        &run.state_in("state"),
        first,
        "the first run on the journal",
    );
    let segment = segments(&run.path("state")).pop().expect("a segment");
    let length = std::fs::metadata(&segment).expect("segment").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .expect("segment")
        .set_len(length * 84 / 100)
        .expect("cut");
    journal_append(&journal, later);
    Case {
        name: "the outbox cut short on a journal feed",
        run,
        lines: first.iter().chain(later).cloned().collect(),
        expect: Expect::RefusedOrExact(segment),
        _other: None,
    }
}
