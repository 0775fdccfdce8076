//! The `aggregate` processor's state against the truth (the `aggregate` family): per
//! account, its `count` and `sum` exactly (every line applied once, a line that may be
//! gone at most once), the `/status` counters agreeing with the keys, every line that
//! does not parse counted and dead-lettered once, nothing invented.
//!
//! The aggregate's lines are on a few shared accounts per stream (`k<stream>x<n>`,
//! [`AGGREGATE_KEYS`] of them), so that the harness can ask for every key through the
//! state query API: a key's count says how many of its lines were applied, its sum
//! which (among the subsets of the lines that may be gone).

use std::collections::{BTreeMap, HashMap, HashSet};

use rand::Rng;

use super::ledger::Shared;
use super::{sample, Expect, Failure, FailureKind, LineRecord, Truth};

/// The accounts of a stream of the aggregate family.
pub(crate) const AGGREGATE_KEYS: u32 = 12;

/// One key's aggregates as the state query answers them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyTotals {
    /// `count`: lines applied to the key.
    pub count: u64,
    /// `sum(amount)`.
    pub sum: i64,
}

/// What the aggregate holds after the run, as its state query and `/status` answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AggregateView {
    /// The keys the query found (a key it answers 404 for is absent).
    pub keys: BTreeMap<String, KeyTotals>,
    /// `/status`'s `applied`.
    pub applied: u64,
    /// `/status`'s `rejected`.
    pub rejected: u64,
}

/// The input line a dead letter (one JSON line of the dead-letter sink) carries.
pub fn dead_letter_line(text: &str) -> Option<String> {
    let json: serde_json::Value = serde_json::from_str(text).ok()?;
    json.get("rejected")?;
    json.get("line")?.as_str().map(str::to_owned)
}

/// A key's lines: those that must be applied, the amounts of those that may be gone,
/// and how many of those are gone quietly (no loss to report).
#[derive(Debug, Default)]
struct KeyLines {
    shared: Shared,
    quiet: usize,
}

impl Truth {
    /// A line of the aggregate family: `account,amount` (or its JSON) on one of the
    /// stream's shared accounts, or, `bad_percent` of the time, a line that does not
    /// parse (its amount is no integer), unique by stream and sequence.
    pub(super) fn aggregate_line(&mut self, stream: u32, seq: u64) -> LineRecord {
        let bad = self.random.random_range(0..100) < self.bad_percent;
        let negative = self.random.random_range(0..100) < self.negative_percent;
        let account = format!("k{stream}x{}", self.random.random_range(0..AGGREGATE_KEYS));
        let size: i64 = self.random.random_range(1..=3);
        let amount = if negative { -size } else { size };
        let text = match (bad, self.json) {
            (false, false) => format!("{account},{amount}"),
            (false, true) => format!("{{\"account\":\"{account}\",\"amount\":{amount}}}"),
            (true, false) => format!("{account},x{stream}y{seq}"),
            (true, true) => format!("{{\"account\":\"{account}\",\"amount\":\"x{stream}y{seq}\"}}"),
        };
        LineRecord {
            stream,
            text,
            account: if bad { String::new() } else { account },
            amount: if bad { 0 } else { amount },
            hot: !bad,
            rejected: bad,
            expect: Expect::Must,
        }
    }

    /// The accounts the aggregate's lines name (the keys the check asks for).
    pub fn aggregate_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .lines
            .iter()
            .filter(|record| !record.rejected)
            .map(|record| record.account.clone())
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// Checks the aggregate's keys and counters against the lines. Returns the failures
    /// and how many lines whose loss must be reported are missing (at least).
    pub fn check_aggregate(&self, view: &AggregateView) -> (Vec<Failure>, usize) {
        let mut by_key: BTreeMap<&str, KeyLines> = BTreeMap::new();
        let (mut bad_must, mut bad_maybe) = (0u64, 0u64);
        for record in &self.lines {
            if record.rejected {
                match record.expect {
                    Expect::Must => bad_must += 1,
                    Expect::Maybe { .. } => bad_maybe += 1,
                }
                continue;
            }
            let key = by_key.entry(record.account.as_str()).or_default();
            match record.expect {
                Expect::Must => {
                    key.shared.must += record.amount;
                    key.shared.must_lines += 1;
                }
                Expect::Maybe { report } => {
                    key.shared.maybe.push(record.amount);
                    if !report {
                        key.quiet += 1;
                    }
                }
            }
        }
        let mut failures = Vec::new();
        let mut lost = Vec::new();
        let mut doubled = Vec::new();
        let mut wrong_sum = Vec::new();
        let mut missing_reported = 0usize;
        for (account, lines) in &by_key {
            let totals = view.keys.get(*account).copied().unwrap_or_default();
            let must = lines.shared.must_lines;
            let most = must + lines.shared.maybe.len() as u64;
            if totals.count < must {
                lost.push(format!(
                    "{account}: count {} of the {must} lines that must be applied",
                    totals.count
                ));
            } else if totals.count > most {
                doubled.push(format!(
                    "{account}: count {} of at most {most} lines",
                    totals.count
                ));
            } else {
                let missing = (most - totals.count) as usize;
                missing_reported += missing.saturating_sub(lines.quiet);
            }
            if !lines.shared.can_hold(totals.sum) {
                wrong_sum.push(format!(
                    "{account}: sum {} where its lines that must be applied add up to {} and {} more may be gone",
                    totals.sum,
                    lines.shared.must,
                    lines.shared.maybe.len()
                ));
            }
        }
        let mut push = |kind: FailureKind, what: &str, items: &[String]| {
            if !items.is_empty() {
                let shown: Vec<&str> = items.iter().map(String::as_str).collect();
                failures.push(Failure::new(
                    kind,
                    format!(
                        "{} keys of the aggregate {what} (first: {})",
                        items.len(),
                        sample(&shown)
                    ),
                ));
            }
        };
        push(FailureKind::Lost, "miss lines", &lost);
        push(FailureKind::Doubled, "count lines twice", &doubled);
        push(
            FailureKind::Doubled,
            "hold a sum no set of their lines gives",
            &wrong_sum,
        );
        let invented: Vec<String> = view
            .keys
            .keys()
            .filter(|key| !by_key.contains_key(key.as_str()))
            .cloned()
            .collect();
        push(FailureKind::Invented, "are named by no line", &invented);
        let counted: u64 = view.keys.values().map(|totals| totals.count).sum();
        if view.applied != counted {
            failures.push(Failure::new(
                FailureKind::DishonestCount,
                format!(
                    "the aggregate's /status says {} lines applied, its keys count {counted}",
                    view.applied
                ),
            ));
        }
        if view.rejected < bad_must {
            failures.push(Failure::new(
                FailureKind::Lost,
                format!(
                    "the aggregate counts {} lines rejected, {bad_must} lines that do not parse were written",
                    view.rejected
                ),
            ));
        } else if view.rejected > bad_must + bad_maybe {
            failures.push(Failure::new(
                FailureKind::Doubled,
                format!(
                    "the aggregate counts {} lines rejected, at most {} lines that do not parse were written",
                    view.rejected,
                    bad_must + bad_maybe
                ),
            ));
        }
        (failures, missing_reported)
    }

    /// Checks the dead-letter sink's file (`dead`: the input lines its dead letters
    /// carry, [`dead_letter_line`]): each line that does not parse there once (a line
    /// that may be gone at most once), no other line. Returns the failures and the
    /// missing lines whose loss must be reported.
    pub fn check_dead_letters(&self, dead: &[String]) -> (Vec<Failure>, usize) {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for line in dead {
            *seen.entry(line.as_str()).or_insert(0) += 1;
        }
        let bad: HashSet<&str> = self
            .lines
            .iter()
            .filter(|record| record.rejected)
            .map(|record| record.text.as_str())
            .collect();
        let mut lost = Vec::new();
        let mut doubled = Vec::new();
        let mut missing_reported = 0usize;
        for record in self.lines.iter().filter(|record| record.rejected) {
            let copies = seen.get(record.text.as_str()).copied().unwrap_or(0);
            match (copies, record.expect) {
                (0, Expect::Must) => lost.push(record.text.as_str()),
                (0, Expect::Maybe { report: true }) => missing_reported += 1,
                (0 | 1, _) => {}
                _ => doubled.push(record.text.as_str()),
            }
        }
        let invented: Vec<&str> = seen
            .keys()
            .filter(|line| !bad.contains(*line))
            .copied()
            .collect();
        let mut failures = Vec::new();
        if !lost.is_empty() {
            failures.push(Failure::new(
                FailureKind::Lost,
                format!(
                    "{} of {} lines that do not parse are missing from the dead-letter sink (first: {})",
                    lost.len(),
                    bad.len(),
                    sample(&lost)
                ),
            ));
        }
        if !doubled.is_empty() {
            failures.push(Failure::new(
                FailureKind::Doubled,
                format!(
                    "{} lines dead-lettered twice (first: {})",
                    doubled.len(),
                    sample(&doubled)
                ),
            ));
        }
        if !invented.is_empty() {
            failures.push(Failure::new(
                FailureKind::Invented,
                format!(
                    "{} dead letters carry a line that parses or was never written (first: {})",
                    invented.len(),
                    sample(&invented)
                ),
            ));
        }
        (failures, missing_reported)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::scenario::{Options, Workload};
    use crate::truth::{OutputRecord, Promise};

    fn truth() -> Truth {
        let options = Options {
            negative_percent: 50,
            bad_percent: 20,
            ..Options::default()
        };
        let mut truth = Truth::new(Workload::Aggregate, 1, &options, 11);
        truth.new_lines(0, 300, None);
        truth
    }

    /// The view of an aggregate that applied line `index` `times(index)` times.
    fn view_of(truth: &Truth, times: impl Fn(usize) -> u64) -> AggregateView {
        let mut view = AggregateView::default();
        for (index, record) in truth.lines.iter().enumerate() {
            let count = times(index);
            if record.rejected {
                view.rejected += count;
            } else if count > 0 {
                let totals = view.keys.entry(record.account.clone()).or_default();
                totals.count += count;
                totals.sum += record.amount * count as i64;
                view.applied += count;
            }
        }
        view
    }

    /// The alerts the ledger's rule gives for the lines applied in order: the rule's
    /// `alert,ACCOUNT,BALANCE` after every line that leaves the sum below zero.
    fn alerts_of(truth: &Truth) -> Vec<OutputRecord> {
        let mut balances: HashMap<&str, i64> = HashMap::new();
        let mut alerts = Vec::new();
        for record in truth.lines.iter().filter(|record| !record.rejected) {
            let balance = balances.entry(record.account.as_str()).or_insert(0);
            *balance += record.amount;
            if *balance < 0 {
                alerts.push(OutputRecord {
                    key: None,
                    body: format!("alert,{},{balance}", record.account),
                });
            }
        }
        alerts
    }

    fn first_good(truth: &Truth) -> usize {
        truth
            .lines
            .iter()
            .position(|record| !record.rejected)
            .expect("a line that parses")
    }

    #[test]
    fn the_aggregate_lines_parse_or_are_unique_rejects() {
        let truth = truth();
        let bad = truth.lines.iter().filter(|record| record.rejected).count();
        assert!((20..=100).contains(&bad), "{bad} of 300 do not parse");
        assert!(truth.aggregate_keys().len() <= AGGREGATE_KEYS as usize);
        let exact = view_of(&truth, |_| 1);
        assert_eq!(truth.check_aggregate(&exact), (Vec::new(), 0));
    }

    #[test]
    fn the_aggregate_check_fails_a_line_applied_twice_or_never() {
        let truth = truth();
        let line = first_good(&truth);
        let doubled = view_of(&truth, |index| if index == line { 2 } else { 1 });
        let (failures, _) = truth.check_aggregate(&doubled);
        assert!(
            failures
                .iter()
                .any(|failure| failure.kind == FailureKind::Doubled),
            "{failures:?}"
        );
        let lossy = view_of(&truth, |index| u64::from(index != line));
        let (failures, _) = truth.check_aggregate(&lossy);
        assert!(
            failures
                .iter()
                .any(|failure| failure.kind == FailureKind::Lost),
            "{failures:?}"
        );
        // a status that counts a line the keys do not hold
        let mut dishonest = view_of(&truth, |_| 1);
        dishonest.applied += 1;
        let (failures, _) = truth.check_aggregate(&dishonest);
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert_eq!(failures[0].kind, FailureKind::DishonestCount);
        // a rejected line counted twice, or not at all
        let bad = truth
            .lines
            .iter()
            .position(|record| record.rejected)
            .expect("a line that does not parse");
        let (failures, _) =
            truth.check_aggregate(&view_of(&truth, |index| if index == bad { 2 } else { 1 }));
        assert_eq!(failures[0].kind, FailureKind::Doubled, "{failures:?}");
        let (failures, _) =
            truth.check_aggregate(&view_of(&truth, |index| u64::from(index != bad)));
        assert_eq!(failures[0].kind, FailureKind::Lost, "{failures:?}");
    }

    #[test]
    fn a_missing_line_that_may_be_gone_is_counted_for_the_status_check() {
        let mut truth = truth();
        let line = first_good(&truth);
        truth.mark_maybe([line], true);
        let view = view_of(&truth, |index| u64::from(index != line));
        assert_eq!(truth.check_aggregate(&view), (Vec::new(), 1));
        // applied twice is no better for a maybe
        let view = view_of(&truth, |index| if index == line { 2 } else { 1 });
        assert!(!truth.check_aggregate(&view).0.is_empty());
    }

    #[test]
    fn the_dead_letter_check_fails_a_missing_a_doubled_and_an_invented_letter() {
        let truth = truth();
        let bad: Vec<String> = truth
            .lines
            .iter()
            .filter(|record| record.rejected)
            .map(|record| record.text.clone())
            .collect();
        assert_eq!(truth.check_dead_letters(&bad), (Vec::new(), 0));
        let (failures, _) = truth.check_dead_letters(&bad[1..]);
        assert_eq!(failures[0].kind, FailureKind::Lost, "{failures:?}");
        let mut twice = bad.clone();
        twice.push(bad[0].clone());
        let (failures, _) = truth.check_dead_letters(&twice);
        assert_eq!(failures[0].kind, FailureKind::Doubled, "{failures:?}");
        let mut invented = bad.clone();
        invented.push(truth.lines[first_good(&truth)].text.clone());
        let (failures, _) = truth.check_dead_letters(&invented);
        assert_eq!(failures[0].kind, FailureKind::Invented, "{failures:?}");
        let letter = serde_json::json!({"processor": "agg/agg", "rejected": "amount: not an integer", "line": bad[0]});
        assert_eq!(dead_letter_line(&letter.to_string()), Some(bad[0].clone()));
    }

    #[test]
    fn the_aggregate_alerts_check_fails_a_missing_and_a_doubled_alert() {
        let truth = truth();
        let alerts = alerts_of(&truth);
        assert!(alerts.len() > 2, "{} alerts", alerts.len());
        let none = HashSet::new();
        let (failures, _) = truth.check_outputs(&alerts, Promise::ExactlyOnce, &none);
        assert!(failures.is_empty(), "{failures:?}");
        let (failures, _) = truth.check_outputs(&alerts[1..], Promise::ExactlyOnce, &none);
        assert_eq!(failures[0].kind, FailureKind::Lost, "{failures:?}");
        let mut twice = alerts.clone();
        twice.push(alerts[0].clone());
        let (failures, _) = truth.check_outputs(&twice, Promise::ExactlyOnce, &none);
        assert_eq!(failures[0].kind, FailureKind::Doubled, "{failures:?}");
    }
}
