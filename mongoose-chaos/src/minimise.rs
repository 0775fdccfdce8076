//! Minimising a failing schedule: drop steps, one at a time from the end, while the
//! run still fails the same way; what is left is the regression schedule to keep.

use std::path::Path;

use crate::run::{run_scenario, Outcome};
use crate::scenario::Scenario;
use crate::truth::FailureKind;
use crate::world::Binaries;

/// Whether `outcome` fails with one of the `kinds` (the original run's signature).
fn still_fails(outcome: &Outcome, kinds: &[FailureKind]) -> bool {
    outcome
        .failures
        .iter()
        .any(|failure| kinds.contains(&failure.kind) && failure.kind != FailureKind::Harness)
}

/// Drops the steps of `scenario` that the failure does not need. `progress` is told
/// each try. Returns the smallest schedule found and its outcome (`None` when the
/// schedule did not fail at all).
pub fn minimise(
    scenario: &Scenario,
    bins: &Binaries,
    dir: &Path,
    mut progress: impl FnMut(&str),
) -> Option<(Scenario, Outcome)> {
    let first = run_scenario(scenario, bins, dir);
    if first.passed() {
        progress("the schedule passed: nothing to minimise");
        return None;
    }
    let kinds = first.signature();
    let mut best = scenario.clone();
    let mut best_outcome = first;
    let mut index = best.steps.len();
    while index > 0 {
        index -= 1;
        let mut candidate = best.clone();
        let removed = candidate.steps.remove(index);
        let outcome = run_scenario(&candidate, bins, dir);
        if still_fails(&outcome, &kinds) {
            progress(&format!("dropped step {index} ({removed}): still fails"));
            best = candidate;
            best_outcome = outcome;
        } else {
            progress(&format!(
                "kept step {index} ({removed}): the failure needs it"
            ));
        }
    }
    Some((best, best_outcome))
}
