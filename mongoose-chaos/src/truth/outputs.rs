//! The sinks' outputs against the truth: each output the lines make present as often
//! as its sink promises (exactly once, at least once, at least once under one key),
//! nothing invented.

use std::collections::{HashMap, HashSet};

use super::{
    alert_identity, identity_of, sample, Expect, Failure, FailureKind, OutputCounts, OutputRecord,
    Promise, Truth,
};
use crate::scenario::Workload;

impl Truth {
    /// The outputs the run must have written, by the text that identifies them, each
    /// with how many must and how many may be there, and whether a missing maybe must be
    /// reported.
    fn expected_outputs(&self) -> HashMap<String, (usize, usize, bool)> {
        let mut expected: HashMap<String, (usize, usize, bool)> = HashMap::new();
        let mut add = |identity: String, expect: Expect| {
            let entry = expected.entry(identity).or_insert((0, 0, false));
            match expect {
                Expect::Must => entry.0 += 1,
                Expect::Maybe { report } => {
                    entry.1 += 1;
                    entry.2 |= report;
                }
            }
        };
        match self.workload {
            Workload::Forward => {
                for record in &self.lines {
                    add(record.text.clone(), record.expect);
                }
            }
            Workload::Ledger | Workload::Aggregate => {
                let uncertain = self.unpredictable_alert_streams();
                let mut balances: HashMap<&str, i64> = HashMap::new();
                for record in &self.lines {
                    if record.rejected {
                        // dead-lettered, not applied (checked by `check_dead_letters`)
                        continue;
                    }
                    let balance = balances.entry(record.account.as_str()).or_insert(0);
                    *balance += record.amount;
                    if *balance < 0 {
                        let expect = if record.hot && uncertain.contains(&record.stream) {
                            Expect::Maybe { report: false }
                        } else {
                            record.expect
                        };
                        add(alert_identity(&record.account, *balance), expect);
                    }
                    if self.writers > 1 {
                        add(record.text.clone(), record.expect);
                    }
                }
            }
        }
        expected
    }

    /// Checks the sink's outputs against the lines. Returns the failures, the counts,
    /// and the number of maybe-outputs missing that must be reported.
    ///
    /// `excused` are identities ([`identity_of`]) of outputs the target refused as often
    /// as the sink may try: they may be missing if the run reports the loss.
    pub fn check_outputs(
        &self,
        outputs: &[OutputRecord],
        promise: Promise,
        excused: &HashSet<String>,
    ) -> (Vec<Failure>, OutputCounts) {
        self.check_against(
            self.expected_outputs(),
            outputs,
            promise,
            excused,
            0,
            |body| identity_of(self.workload, body),
        )
    }

    /// Checks the outputs of a consumer that forwards every line as it is (an
    /// also-consumer's, its prefix taken off): each line it `owes` as the truth expects
    /// it, the others may be missing. `key_slack`: distinct keys a line may have beyond
    /// one (its writer was renamed by a reload that replaced it).
    pub fn check_forwarded(
        &self,
        outputs: &[OutputRecord],
        promise: Promise,
        owes: impl Fn(usize) -> bool,
        key_slack: usize,
    ) -> (Vec<Failure>, OutputCounts) {
        let mut expected: HashMap<String, (usize, usize, bool)> = HashMap::new();
        for (index, record) in self.lines.iter().enumerate() {
            let entry = expected.entry(record.text.clone()).or_insert((0, 0, false));
            match (owes(index), record.expect) {
                (true, Expect::Must) => entry.0 += 1,
                (true, Expect::Maybe { report }) => {
                    entry.1 += 1;
                    entry.2 |= report;
                }
                (false, _) => entry.1 += 1,
            }
        }
        self.check_against(
            expected,
            outputs,
            promise,
            &HashSet::new(),
            key_slack,
            |body| Some(body.to_owned()),
        )
    }

    /// Checks `outputs` against the `expected` ones (by identity: how many must, how
    /// many may be there, whether a missing maybe must be reported).
    fn check_against(
        &self,
        mut expected: HashMap<String, (usize, usize, bool)>,
        outputs: &[OutputRecord],
        promise: Promise,
        excused: &HashSet<String>,
        key_slack: usize,
        identity_of: impl Fn(&str) -> Option<String>,
    ) -> (Vec<Failure>, OutputCounts) {
        for identity in excused {
            if let Some(entry) = expected.get_mut(identity) {
                // one of them may be gone, counted lost by the sink
                if entry.0 > 0 {
                    entry.0 -= 1;
                    entry.1 += 1;
                }
                entry.2 = true;
            }
        }
        let mut seen: HashMap<String, Vec<Option<&str>>> = HashMap::new();
        let mut invented = Vec::new();
        // a shared account of a stream with a line that may be gone has alerts whose
        // balances cannot be told in advance
        let uncertain = self.unpredictable_alert_streams();
        let unpredictable: HashSet<&str> = self
            .lines
            .iter()
            .filter(|record| record.hot && uncertain.contains(&record.stream))
            .map(|record| record.account.as_str())
            .collect();
        for output in outputs {
            let Some(identity) = identity_of(&output.body) else {
                invented.push(output.body.clone());
                continue;
            };
            if !expected.contains_key(&identity) {
                let account = output.body.split(',').nth(1).unwrap_or_default();
                if !unpredictable.contains(account) {
                    invented.push(output.body.clone());
                }
                continue;
            }
            seen.entry(identity)
                .or_default()
                .push(output.key.as_deref());
        }
        let mut failures = Vec::new();
        let mut counts = OutputCounts::default();
        let mut lost = Vec::new();
        let mut doubled = Vec::new();
        for (identity, (must, maybe, report)) in &expected {
            counts.expected += must + maybe;
            let copies = seen.get(identity);
            let present = match (promise, copies) {
                (_, None) => 0,
                (Promise::AtLeastOnceKeyed, Some(keys)) => {
                    let mut distinct: Vec<&Option<&str>> = keys.iter().collect();
                    distinct.sort_unstable();
                    distinct.dedup();
                    distinct.len()
                }
                (Promise::AtLeastOnce, Some(copies)) => copies.len().min(must + maybe),
                (Promise::ExactlyOnce, Some(copies)) => copies.len(),
            };
            counts.present += present.min(must + maybe);
            // a shared account of a stream that lost lines can pass through one balance
            // more often than the lines in full would: its alerts are not counted
            let unpredictable_alert = identity
                .strip_prefix("alert ")
                .and_then(|rest| rest.split(' ').next())
                .is_some_and(|account| unpredictable.contains(account));
            if present < *must {
                lost.push(identity.as_str());
            } else if present > (must + maybe) * (1 + key_slack) && !unpredictable_alert {
                doubled.push(identity.as_str());
            } else if present < must + maybe && excused.contains(identity) {
                // refused as often as the sink may try: counted lost by the sink
                counts.missing_excused += must + maybe - present;
            } else if present < must + maybe && *report {
                // a maybe whose loss must be reported (an unreported one may just be gone)
                counts.missing_maybe += must + maybe - present;
            }
        }
        lost.sort_unstable();
        doubled.sort_unstable();
        counts.missing_must = lost.len();
        if !lost.is_empty() {
            failures.push(Failure::new(
                FailureKind::Lost,
                format!(
                    "{} of {} outputs missing from the sink's target (first: {})",
                    lost.len(),
                    counts.expected,
                    sample(&lost)
                ),
            ));
        }
        if !doubled.is_empty() {
            failures.push(Failure::new(
                FailureKind::Doubled,
                format!(
                    "{} outputs {} (first: {})",
                    doubled.len(),
                    if promise == Promise::AtLeastOnceKeyed {
                        "under more than one key"
                    } else {
                        "written twice"
                    },
                    sample(&doubled)
                ),
            ));
        }
        if !invented.is_empty() {
            failures.push(Failure::new(
                FailureKind::Invented,
                format!(
                    "{} outputs that no input made (first: {:?})",
                    invented.len(),
                    invented[0].chars().take(80).collect::<String>()
                ),
            ));
        }
        (failures, counts)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::truth;
    use super::*;
    use crate::scenario::Options;

    #[test]
    fn the_output_check_finds_lost_doubled_and_invented_outputs() {
        let truth = truth(Workload::Forward);
        let mut outputs: Vec<OutputRecord> = truth
            .lines
            .iter()
            .map(|record| OutputRecord {
                key: None,
                body: record.text.clone(),
            })
            .collect();
        let (failures, counts) =
            truth.check_outputs(&outputs, Promise::ExactlyOnce, &HashSet::new());
        assert!(failures.is_empty(), "{failures:?}");
        assert_eq!(counts.present, 20);
        outputs.remove(4);
        outputs.push(outputs[0].clone());
        outputs.push(OutputRecord {
            key: None,
            body: "E0x000".to_owned(),
        });
        let (failures, _) = truth.check_outputs(&outputs, Promise::ExactlyOnce, &HashSet::new());
        let kinds: Vec<FailureKind> = failures.iter().map(|failure| failure.kind).collect();
        assert_eq!(
            kinds,
            [
                FailureKind::Lost,
                FailureKind::Doubled,
                FailureKind::Invented
            ]
        );
    }

    #[test]
    fn a_keyed_output_under_two_keys_is_doubled_and_a_retry_under_one_is_not() {
        let truth = truth(Workload::Forward);
        let mut outputs: Vec<OutputRecord> = truth
            .lines
            .iter()
            .enumerate()
            .map(|(index, record)| OutputRecord {
                key: Some(format!("k{index}")),
                body: record.text.clone(),
            })
            .collect();
        outputs.push(outputs[2].clone());
        let (failures, _) =
            truth.check_outputs(&outputs, Promise::AtLeastOnceKeyed, &HashSet::new());
        assert!(failures.is_empty(), "a retry under its key: {failures:?}");
        outputs.push(OutputRecord {
            key: Some("other".to_owned()),
            body: outputs[2].body.clone(),
        });
        let (failures, _) =
            truth.check_outputs(&outputs, Promise::AtLeastOnceKeyed, &HashSet::new());
        assert_eq!(failures[0].kind, FailureKind::Doubled, "{failures:?}");
    }

    #[test]
    fn alerts_are_compared_by_account_and_balance() {
        let options = Options {
            hot_percent: 0,
            negative_percent: 100,
            ..Options::default()
        };
        let mut truth = Truth::new(Workload::Ledger, 1, &options, 1);
        truth.new_lines(0, 3, None);
        let outputs: Vec<OutputRecord> = truth
            .lines
            .iter()
            .enumerate()
            .map(|(index, record)| OutputRecord {
                key: None,
                body: format!("{},{},-1", index * 9, record.account),
            })
            .collect();
        let (failures, counts) =
            truth.check_outputs(&outputs, Promise::ExactlyOnce, &HashSet::new());
        assert!(failures.is_empty(), "{failures:?}");
        assert_eq!(counts.present, 3);
    }

    // seed 1147 (debug builds): logrotate `create` under a glob; the old and the new
    // file are two lanes read at once, so a shared account's alerts follow another order
    #[test]
    fn a_shared_accounts_alerts_on_an_unordered_stream_may_follow_another_order() {
        let options = Options {
            hot_percent: 100,
            negative_percent: 60,
            ..Options::default()
        };
        let mut truth = Truth::new(Workload::Ledger, 1, &options, 7);
        truth.new_lines(0, 40, None);
        // the alerts of the lines applied last first
        let mut balances: HashMap<&str, i64> = HashMap::new();
        let mut outputs = Vec::new();
        for (index, record) in truth.lines.iter().enumerate().rev() {
            let balance = balances.entry(record.account.as_str()).or_insert(0);
            *balance += record.amount;
            if *balance < 0 {
                outputs.push(OutputRecord {
                    key: None,
                    body: format!("{},{},{}", index * 9, record.account, *balance),
                });
            }
        }
        let (failures, _) = truth.check_outputs(&outputs, Promise::ExactlyOnce, &HashSet::new());
        assert!(!failures.is_empty(), "another order gives other alerts");
        truth.unordered.insert(0);
        let (failures, _) = truth.check_outputs(&outputs, Promise::ExactlyOnce, &HashSet::new());
        assert!(failures.is_empty(), "{failures:?}");
    }
}
