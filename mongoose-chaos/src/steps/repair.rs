//! Refusals after a state fault, judged and repaired as an operator would.
//!
//! A start refused (exit 1 or 2) after a state file was deleted or damaged is a pass
//! only where the book promises a refusal (a damaged or foreign state that cannot be
//! trusted), and only when its message names what it refuses (the file). The harness
//! then does what the message tells an operator to do (moves the sink's output and
//! state away, or the ledger's state folder and the feed's pointers), starts the server
//! again and goes on with the schedule: the run is checked to its end like any other.

use std::path::{Path, PathBuf};

use crate::scenario::{Damage, SinkKind, StateFile, Workload};
use crate::truth::FailureKind;
use crate::world::World;

/// A state file deleted or damaged since the server last settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Touched {
    /// Which.
    pub what: StateFile,
    /// How (`None`: deleted).
    pub how: Option<Damage>,
}

/// The most repairs of one scenario (a repair that does not help is a finding).
const MOST_REPAIRS: usize = 3;

/// Whether the book promises a refusal (rather than a recovery) for `touched`.
///
/// A damaged, cut, older or foreign state file cannot be trusted and may be refused.
/// A deleted file is recovered from what is left where the book says so: a deleted
/// ledger state folder starts over (its feed re-reads the input), a deleted pointer,
/// lane registry or tailer store resumes from what the consumers hold. A deleted
/// `.sinkstate` beside a non-empty output is refused (the output cannot be trusted
/// without it).
pub fn refusal_promised(touched: Touched) -> bool {
    match (touched.what, touched.how) {
        (StateFile::LedgerStateDir, None) => false,
        // a partial ledger state (outbox segments deleted with the snapshot kept, the
        // snapshot deleted) is refused, naming the file (crashes/measured.md)
        (StateFile::SinkState | StateFile::LedgerOutbox | StateFile::LedgerSnapshot, None) => true,
        // the consumers' positions may disagree or not fit the input: documented
        (StateFile::Pointer | StateFile::Lanes, _) => true,
        (_, None) => false,
        (_, Some(_)) => true,
    }
}

/// The names a refusal of `what` may use for it: the file's name, and its folder's for
/// a state folder.
pub(crate) fn names_of(world: &World, what: StateFile) -> Vec<String> {
    let path = world.state_path(what);
    let mut names = Vec::new();
    if matches!(
        what,
        StateFile::LedgerStateDir | StateFile::LedgerOutbox | StateFile::LedgerSnapshot
    ) {
        // a file of the ledger's state folder: named by its path (the folder's bare
        // name, `state`, is in many a sentence), or the ledger by its name (a source's
        // refusal names the consumer whose state does not match)
        names.push(world.path("state").display().to_string());
        names.push("state/".to_owned());
        names.push("ledger/ledger".to_owned());
        // the aggregate family's processor
        names.push(crate::world::aggregate::AGGREGATE_PROCESSOR.to_owned());
    } else if let Some(name) = path.file_name() {
        names.push(name.to_string_lossy().into_owned());
    }
    names
}

/// Whether the refusal `said` names one of the files `touched`.
pub fn refusal_names(said: &str, names: &[Vec<String>]) -> bool {
    names
        .iter()
        .flatten()
        .any(|name| !name.is_empty() && said.contains(name.as_str()))
}

impl World {
    /// Judges a refusal after the state faults `self.touched`, then repairs as the
    /// message tells an operator to. Returns whether the harness may start again
    /// (`false`: nothing it knows how to repair, or too many repairs).
    pub fn refused_after_fault(&mut self, code: i32, said: &str) -> bool {
        self.event(format!("the server refused to start (exit {code}): {said}"));
        self.refusals.push(said.to_owned());
        let touched = std::mem::take(&mut self.touched);
        let names: Vec<Vec<String>> = touched
            .iter()
            .map(|touched| names_of(self, touched.what))
            .collect();
        if !touched.iter().any(|touched| refusal_promised(*touched)) {
            self.fail(
                FailureKind::BadRefusal,
                format!(
                    "the server refused to start after {} where the book promises it recovers: {said}",
                    describe(&touched)
                ),
            );
        } else if !refusal_names(said, &names) {
            self.fail(
                FailureKind::BadRefusal,
                format!(
                    "the refusal after {} names none of {}: {said}",
                    describe(&touched),
                    names
                        .iter()
                        .flatten()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
        if self.refusals.len() > MOST_REPAIRS {
            self.fail(
                FailureKind::BadRefusal,
                format!(
                    "the server refused to start {} times, each repaired as its message says: {said}",
                    self.refusals.len()
                ),
            );
            return false;
        }
        self.repair(said, &touched);
        true
    }

    /// Does what the refusal `said` tells an operator to do, for what it names: a file
    /// sink's state moves the output and its state away (a new output file), the
    /// ledger's state moves the state folder away and removes the feed's pointers (the
    /// input is read again from its start); anything else named among `touched` is
    /// removed.
    fn repair(&mut self, said: &str, touched: &[Touched]) {
        if said.contains(".sinkstate") && self.scenario.sink == SinkKind::File {
            let moved = self.path(&format!("copies/moved-{}", self.moved_outputs.len()));
            let _ = std::fs::create_dir_all(&moved);
            let output = self.path("out/out.txt");
            let state = self.state_path(StateFile::SinkState);
            let kept = moved.join("out.txt");
            move_file(&output, &kept);
            move_file(&state, &moved.join("out.txt.sinkstate"));
            self.moved_outputs.push(kept);
            self.event(format!(
                "repair: moved out/out.txt and its state to {} (a new output file)",
                moved.display()
            ));
            return;
        }
        let ledger_names = names_of(self, StateFile::LedgerStateDir);
        let positions = touched
            .iter()
            .any(|touched| matches!(touched.what, StateFile::Pointer | StateFile::Lanes));
        if ledger_names.iter().any(|name| said.contains(name.as_str()))
            || (positions
                && matches!(
                    self.scenario.workload,
                    Workload::Ledger | Workload::Aggregate
                ))
        {
            // "move the state folder away and remove the pointer" / "to start over,
            // move it, the feed's pointer files and the consumers' saved state away"
            let moved = self.path(&format!("copies/state-{}", self.refusals.len()));
            move_file(&self.path("state"), &moved);
            let _ = std::fs::create_dir_all(self.path("state"));
            self.forget_positions();
            self.forget_damaged_lanes(touched);
            self.event(format!(
                "repair: moved the ledger's state folder to {} and removed the feed's pointers (read again from the start)",
                moved.display()
            ));
            return;
        }
        if positions {
            // "restore it from a backup; or, to start over, move it and the feed's
            // pointer files away": the feed starts over, the sinks drop the repeats
            self.forget_positions();
            self.forget_damaged_lanes(touched);
            self.event("repair: removed the feed's pointers (read again from the start)");
            return;
        }
        for touched in touched {
            let path = self.state_path(touched.what);
            if touched.what != StateFile::JournalExcerpt {
                super::remove(&path);
                self.event(format!("repair: removed {}", path.display()));
            }
        }
    }

    /// Removes the glob's lane registry when it is what was damaged ("move it ... away").
    fn forget_damaged_lanes(&mut self, touched: &[Touched]) {
        if touched
            .iter()
            .any(|touched| touched.what == StateFile::Lanes)
        {
            let lanes = self.state_path(StateFile::Lanes);
            super::remove(&lanes);
            self.event(format!("repair: removed {}", lanes.display()));
        }
    }

    /// Removes the feed's read positions (its pointer files, the tailer store, the
    /// archive pointer): the feed starts over. A glob's lane registry stays (the
    /// refusals name the pointers to remove, not the registry: without it the files
    /// would read on other lanes).
    fn forget_positions(&mut self) {
        let feed = crate::foreign::state_folder_in(&self.dir, "feeds", "lines");
        for pointer in super::files_below(&feed) {
            if pointer
                .extension()
                .is_some_and(|extension| extension == "readPointer")
            {
                super::remove(&pointer);
            }
        }
        for what in [StateFile::TailerStore, StateFile::ArchivePointer] {
            super::remove(&self.state_path(what));
        }
    }
}

fn describe(touched: &[Touched]) -> String {
    touched
        .iter()
        .map(|touched| match touched.how {
            None => format!("{:?} deleted", touched.what),
            Some(how) => format!("{:?} damaged ({how:?})", touched.what),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn move_file(from: &Path, to: &Path) {
    if let Some(parent) = to.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    if std::fs::rename(from, to).is_err() && from.exists() {
        let _ = super::copy_path(from, to);
        super::remove(from);
    }
}

/// The output files an operator moved away, oldest first, then the live one.
pub fn output_files(world: &World) -> Vec<PathBuf> {
    let mut files = world.moved_outputs.clone();
    files.push(world.path("out/out.txt"));
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_must_name_a_damaged_file() {
        let names = vec![vec!["out.txt.sinkstate".to_owned()]];
        assert!(refusal_names(
            "sink 'out': refusing to start on /x/out.txt.sinkstate: the record at byte 228 is damaged",
            &names
        ));
        assert!(!refusal_names(
            "mongoose: the server could not start: invalid state",
            &names
        ));
    }

    #[test]
    fn a_deleted_ledger_state_is_recovered_not_refused() {
        assert!(!refusal_promised(Touched {
            what: StateFile::LedgerStateDir,
            how: None,
        }));
        assert!(refusal_promised(Touched {
            what: StateFile::LedgerOutbox,
            how: Some(Damage::FlipByte { at: 3 }),
        }));
        assert!(refusal_promised(Touched {
            what: StateFile::SinkState,
            how: None,
        }));
    }
}
