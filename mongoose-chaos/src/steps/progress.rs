//! Progress under a crash loop: every few kills, what the consumers applied (the
//! ledger's count) or wrote (the sink's outputs) must have grown while lines wait.

use std::collections::HashSet;

use mongoose_ledger::LedgerState;

use crate::scenario::{SinkKind, Workload};
use crate::truth::FailureKind;
use crate::world::World;

/// What the crash loop's progress checks saw so far.
#[derive(Clone, Debug)]
pub struct Progress {
    /// Kills between two checks.
    pub every: u32,
    /// What was applied at the last check.
    pub last: u64,
    /// The windows of kills that left nothing more applied while lines waited.
    pub stalls: Vec<String>,
}

impl World {
    /// What the consumers hold so far: the ledger's applied count, or the outputs the
    /// workload's sink holds (distinct keys over HTTP). Read with the server stopped.
    pub fn applied(&self) -> u64 {
        match self.scenario.workload {
            Workload::Ledger => LedgerState::load(&self.path("state"))
                .map(|state| state.applied)
                .unwrap_or(0),
            // the aggregate family's crash loop checks its final state only
            Workload::Aggregate => 0,
            Workload::Forward => match self.scenario.sink {
                SinkKind::File => std::fs::read(self.path("out/out.txt"))
                    .map(|bytes| bytes.iter().filter(|byte| **byte == b'\n').count() as u64)
                    .unwrap_or(0),
                SinkKind::Http => {
                    let log =
                        std::fs::read_to_string(self.path("peers/http.log")).unwrap_or_default();
                    log.lines()
                        .filter(|line| line.starts_with('2'))
                        .filter_map(|line| line.split('\t').nth(1))
                        .collect::<HashSet<&str>>()
                        .len() as u64
                }
                _ => 0,
            },
        }
    }

    /// Starts the progress checks of a crash loop that checks every `every` kills.
    pub fn start_progress(&mut self, every: u32) -> Progress {
        let last = self.applied();
        self.event(format!("progress: {last} applied before the crash loop"));
        Progress {
            every: every.max(1),
            last,
            stalls: Vec::new(),
        }
    }

    /// The check after `kills` kills: more applied than at the last check, unless
    /// nothing waits.
    pub fn check_progress(&mut self, progress: &mut Progress, kills: u32) {
        let applied = self.applied();
        let written = self.truth.lines.len() as u64;
        let first = kills + 1 - progress.every;
        self.event(format!(
            "progress: kills {first}-{kills} applied {} more ({applied} of {written} lines)",
            applied.saturating_sub(progress.last)
        ));
        if applied <= progress.last && applied < written {
            progress
                .stalls
                .push(format!("kills {first}-{kills} at {applied}"));
        }
        progress.last = progress.last.max(applied);
    }

    /// The end of a crash loop's progress checks: a failure naming every window of
    /// kills that left no progress.
    pub fn end_progress(&mut self, progress: Progress, kills: u32) {
        if progress.stalls.is_empty() {
            return;
        }
        let written = self.truth.lines.len();
        self.fail(
            FailureKind::NoProgress,
            format!(
                "{} of the crash loop's {} windows of {} kills left nothing more applied while lines waited ({} lines written; {})",
                progress.stalls.len(),
                kills / progress.every,
                progress.every,
                written,
                progress.stalls.join(", ")
            ),
        );
    }
}
