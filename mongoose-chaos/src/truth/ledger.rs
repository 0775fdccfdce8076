//! The ledger's state against the truth: every line applied exactly once (each line's
//! own account), the shared accounts' balances among the sums their lines can give,
//! the applied count, nothing invented; and a ledger without its guard (at least once).

use std::collections::BTreeMap;

use mongoose_ledger::LedgerState;

use super::{sample, Expect, Failure, FailureKind, Truth};

impl Truth {
    /// Checks the ledger's state against the lines. Returns the failures and the number
    /// of maybe-lines missing that must be reported.
    pub fn check_ledger(&self, state: &LedgerState) -> (Vec<Failure>, usize) {
        let mut failures = Vec::new();
        let mut lost = Vec::new();
        let mut doubled = Vec::new();
        let mut wrong = Vec::new();
        let mut missing_reported = 0usize;
        let mut present = 0u64;
        let mut shared: BTreeMap<&str, Shared> = BTreeMap::new();
        for record in &self.lines {
            if record.hot {
                let account = shared.entry(record.account.as_str()).or_default();
                match record.expect {
                    Expect::Must => {
                        account.must += record.amount;
                        account.must_lines += 1;
                    }
                    Expect::Maybe { .. } => account.maybe.push(record.amount),
                }
                continue;
            }
            match (state.balances.get(&record.account), record.expect) {
                (None, Expect::Must) => lost.push(record.text.as_str()),
                (None, Expect::Maybe { report }) => {
                    if report {
                        missing_reported += 1;
                    }
                }
                (Some(balance), _) if *balance == record.amount => present += 1,
                (Some(balance), _) if *balance == 2 * record.amount => {
                    present += 2;
                    doubled.push(record.text.as_str());
                }
                (Some(balance), _) => wrong.push(format!("{} = {balance}", record.account)),
            }
        }
        if !lost.is_empty() {
            failures.push(Failure::new(
                FailureKind::Lost,
                format!(
                    "{} of {} lines never applied to the ledger (first: {})",
                    lost.len(),
                    self.lines.len(),
                    sample(&lost)
                ),
            ));
        }
        if !doubled.is_empty() {
            failures.push(Failure::new(
                FailureKind::Doubled,
                format!(
                    "{} lines applied twice to the ledger (first: {})",
                    doubled.len(),
                    sample(&doubled)
                ),
            ));
        }
        if !wrong.is_empty() {
            failures.push(Failure::new(
                FailureKind::Doubled,
                format!(
                    "{} accounts hold a balance no count of their line gives (first: {})",
                    wrong.len(),
                    wrong[0]
                ),
            ));
        }
        // a shared account's balance is the sum of its lines that must be applied plus
        // some of those that may be missing, each at most once: exactly the sums of the
        // subsets of the maybe lines (never skipped for a stream with a maybe line)
        for (account, lines) in &shared {
            let actual = state.balances.get(*account).copied().unwrap_or(0);
            if lines.can_hold(actual) {
                continue;
            }
            let detail = if lines.maybe.is_empty() {
                format!(
                    "shared account {account} holds {actual}, its lines add up to {}",
                    lines.must
                )
            } else {
                format!(
                    "shared account {account} holds {actual}: its lines that must be applied add up to {} and no subset of its {} lines that may be missing adds up to the difference",
                    lines.must,
                    lines.maybe.len()
                )
            };
            failures.push(Failure::new(
                if lines.maybe.is_empty() && actual.abs() < lines.must.abs() {
                    FailureKind::Lost
                } else {
                    FailureKind::Doubled
                },
                detail,
            ));
        }
        let named: std::collections::HashSet<&str> = self
            .lines
            .iter()
            .map(|record| record.account.as_str())
            .collect();
        let invented: Vec<&String> = state
            .balances
            .keys()
            .filter(|account| !named.contains(account.as_str()))
            .collect();
        if !invented.is_empty() {
            failures.push(Failure::new(
                FailureKind::Invented,
                format!(
                    "{} accounts in the ledger that no line names (first: {})",
                    invented.len(),
                    invented[0]
                ),
            ));
        }
        // the shared accounts' lines applied: every must line, some of the maybes
        let hot_must: u64 = shared.values().map(|lines| lines.must_lines).sum();
        let hot_maybe: u64 = shared.values().map(|lines| lines.maybe.len() as u64).sum();
        let low = present + hot_must;
        let high = low + hot_maybe;
        if failures.is_empty() && !(low..=high).contains(&state.applied) {
            failures.push(Failure::new(
                FailureKind::Doubled,
                format!(
                    "the ledger counts {} lines applied, its balances show {}",
                    state.applied,
                    if low == high {
                        low.to_string()
                    } else {
                        format!("{low} to {high}")
                    }
                ),
            ));
        }
        if state.rejected > 0 {
            failures.push(Failure::new(
                FailureKind::Invented,
                format!(
                    "the ledger rejected {} lines (every line is valid)",
                    state.rejected
                ),
            ));
        }
        (failures, missing_reported)
    }

    /// Checks the state of a ledger without its guard (`guard = false`: a line read
    /// again is applied again): every line it owes (`owes(index)`, and not a maybe)
    /// applied at least once, each own account a whole number of its line's amount,
    /// nothing invented. Shared accounts are not checked: their balances depend on how
    /// often each line was read again.
    pub fn check_ledger_at_least_once(
        &self,
        state: &LedgerState,
        name: &str,
        owes: impl Fn(usize) -> bool,
    ) -> Vec<Failure> {
        let mut lost = Vec::new();
        let mut wrong = Vec::new();
        for (index, record) in self.lines.iter().enumerate() {
            if record.hot {
                continue;
            }
            let owed = owes(index) && record.expect == Expect::Must;
            match state.balances.get(&record.account) {
                None if owed => lost.push(record.text.as_str()),
                None => {}
                Some(balance) if *balance % record.amount != 0 || *balance / record.amount < 1 => {
                    wrong.push(format!("{} = {balance}", record.account));
                }
                Some(_) => {}
            }
        }
        let named: std::collections::HashSet<&str> = self
            .lines
            .iter()
            .map(|record| record.account.as_str())
            .collect();
        let invented: Vec<&String> = state
            .balances
            .keys()
            .filter(|account| !named.contains(account.as_str()))
            .collect();
        let mut failures = Vec::new();
        if !lost.is_empty() {
            failures.push(Failure::new(
                FailureKind::Lost,
                format!(
                    "{name}: {} of {} lines never applied (first: {})",
                    lost.len(),
                    self.lines.len(),
                    sample(&lost)
                ),
            ));
        }
        if !wrong.is_empty() {
            failures.push(Failure::new(
                FailureKind::Invented,
                format!(
                    "{name}: {} accounts hold a balance no count of their line gives (first: {})",
                    wrong.len(),
                    wrong[0]
                ),
            ));
        }
        if !invented.is_empty() {
            failures.push(Failure::new(
                FailureKind::Invented,
                format!(
                    "{name}: {} accounts that no line names (first: {})",
                    invented.len(),
                    invented[0]
                ),
            ));
        }
        failures
    }
}

/// A shared account's lines: the sum of those that must be applied, and the amounts of
/// those that may be missing.
#[derive(Debug, Default)]
pub(super) struct Shared {
    pub(super) must: i64,
    pub(super) must_lines: u64,
    pub(super) maybe: Vec<i64>,
}

impl Shared {
    /// Whether `balance` is the must-sum plus the sum of some subset of the maybes
    /// (each at most once).
    pub(super) fn can_hold(&self, balance: i64) -> bool {
        let target = balance - self.must;
        let low: i64 = self.maybe.iter().filter(|amount| **amount < 0).sum();
        let high: i64 = self.maybe.iter().filter(|amount| **amount > 0).sum();
        if !(low..=high).contains(&target) {
            return false;
        }
        // the reachable sums, offset by `low`
        let width = (high - low) as usize + 1;
        let mut reachable = vec![false; width];
        reachable[(-low) as usize] = true;
        for amount in &self.maybe {
            let step = amount.unsigned_abs() as usize;
            if *amount > 0 {
                for at in (0..width - step.min(width)).rev() {
                    if reachable[at] {
                        reachable[at + step] = true;
                    }
                }
            } else {
                for at in step..width {
                    if reachable[at] {
                        reachable[at - step] = true;
                    }
                }
            }
        }
        reachable[(target - low) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{state_of, truth};
    use super::*;
    use crate::scenario::Workload;

    #[test]
    fn the_ledger_check_finds_a_lost_and_a_doubled_line() {
        let truth = truth(Workload::Ledger);
        let exact = state_of(&truth, |_| 1);
        assert_eq!(truth.check_ledger(&exact), (Vec::new(), 0));
        let lossy = state_of(&truth, |index| i64::from(index != 3));
        let (failures, _) = truth.check_ledger(&lossy);
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert_eq!(failures[0].kind, FailureKind::Lost);
        let doubled = state_of(&truth, |index| if index == 5 { 2 } else { 1 });
        let (failures, _) = truth.check_ledger(&doubled);
        assert_eq!(failures[0].kind, FailureKind::Doubled, "{failures:?}");
    }

    #[test]
    fn a_missing_maybe_line_is_counted_for_the_status_check() {
        let mut truth = truth(Workload::Ledger);
        truth.mark_maybe([3], true);
        let state = state_of(&truth, |index| i64::from(index != 3));
        assert_eq!(truth.check_ledger(&state), (Vec::new(), 1));
    }
}
