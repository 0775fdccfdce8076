//! The records both sides read, the truth the lab computes from them, and the check
//! of a side's final state and alerts against it.

use std::collections::{BTreeMap, HashMap};

/// Accounts the records spread over (as `scale_out_bench`).
pub(super) const ACCOUNTS: u64 = 200;

/// Every this-many-th record is malformed (no comma): counted, not applied.
pub(super) const MALFORMED_EVERY: u64 = 1000;

/// Record `index`: its key (the account) and its value, an `account,amount` line
/// (amounts `index % 7 - 3`, so balances go below zero now and then, as in
/// `scale_out_bench`), or a malformed line every [`MALFORMED_EVERY`] records.
pub(super) fn record(index: u64) -> (String, String) {
    let account = format!("acc{}", index % ACCOUNTS);
    let amount = (index % 7) as i64 - 3;
    let value = if index % MALFORMED_EVERY == MALFORMED_EVERY - 1 {
        format!("{account};{amount}")
    } else {
        format!("{account},{amount}")
    };
    (account, value)
}

/// A line as ours parses it (`mongoose-ledger`'s `apply::parse_line`): the account
/// (1 to 64 of `A-Z a-z 0-9 _ -`) and the amount (a signed 64-bit integer, trailing
/// white space allowed); `None` for a malformed line.
pub(super) fn parse_line(line: &str) -> Option<(&str, i64)> {
    let (account, amount) = line.split_once(',')?;
    let valid = !account.is_empty()
        && account.len() <= 64
        && account
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-');
    if !valid {
        return None;
    }
    Some((account, amount.trim_end().parse().ok()?))
}

/// The position an alert names, as ours writes a Kafka feed's: the offset after the
/// record, `partition:` before it unless the partition is 0.
pub(super) fn position(partition: i32, offset: i64) -> String {
    if partition == 0 {
        (offset + 1).to_string()
    } else {
        format!("{partition}:{}", offset + 1)
    }
}

/// The input record an alert's position names: `(partition, offset)`.
pub(super) fn record_of(alert: &str) -> Option<(i32, i64)> {
    let position = alert.split(',').next()?;
    let (partition, after) = match position.split_once(':') {
        Some((partition, after)) => (partition.parse().ok()?, after.parse::<i64>().ok()?),
        None => (0, position.parse::<i64>().ok()?),
    };
    (after > 0).then_some((partition, after - 1))
}

/// What the records add up to, each applied once in its partition's order.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Truth {
    /// The balance of every account a line touched (summed over the partitions).
    pub(super) balances: BTreeMap<String, i64>,
    /// Lines applied.
    pub(super) applied: u64,
    /// Lines rejected (malformed, or the balance would overflow).
    pub(super) rejected: u64,
    /// Every alert `position,account,balance`, once each (a position is unique).
    pub(super) alerts: Vec<String>,
}

impl Truth {
    /// The truth of `partitions`: each partition's `(offset, value)` records in log
    /// order (an account's lines are in one partition: its balance is whole there).
    pub(super) fn of<'a, P, R>(partitions: P) -> Truth
    where
        P: IntoIterator<Item = (i32, R)>,
        R: IntoIterator<Item = (i64, &'a [u8])>,
    {
        let mut truth = Truth::default();
        for (partition, records) in partitions {
            let mut balances: HashMap<String, i64> = HashMap::new();
            for (offset, value) in records {
                let text = String::from_utf8_lossy(value);
                let Some((account, amount)) = parse_line(&text) else {
                    truth.rejected += 1;
                    continue;
                };
                let balance = balances.get(account).copied().unwrap_or(0);
                let Some(updated) = balance.checked_add(amount) else {
                    truth.rejected += 1;
                    continue;
                };
                balances.insert(account.to_owned(), updated);
                truth.applied += 1;
                if updated < 0 {
                    truth.alerts.push(format!(
                        "{},{account},{updated}",
                        position(partition, offset)
                    ));
                }
            }
            for (account, balance) in balances {
                *truth.balances.entry(account).or_insert(0) += balance;
            }
        }
        truth
    }
}

/// A side's result against the truth.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Checked {
    /// Accounts whose balance differs from the truth (or is missing, or is extra).
    pub(super) wrong_balances: usize,
    /// The first few of them, `account: side != truth`.
    pub(super) wrong_examples: Vec<String>,
    /// The side's rejected count, when it keeps one.
    pub(super) rejected: Option<u64>,
    /// The truth's rejected count.
    pub(super) truth_rejected: u64,
    /// Alert records the side wrote.
    pub(super) alerts_written: usize,
    /// Alerts the truth has.
    pub(super) truth_alerts: usize,
    /// Alert records written more than once (the extra copies).
    pub(super) duplicates: usize,
    /// Alerts of the truth the side never wrote.
    pub(super) missing: usize,
    /// Alert records the truth does not have.
    pub(super) invented: usize,
}

impl Checked {
    /// Whether the side's result is right: every balance, the rejected count, no alert
    /// missing and none invented (duplicates are reported, not failed: ours writes
    /// alerts at least once).
    pub(super) fn passed(&self) -> bool {
        self.wrong_balances == 0
            && self
                .rejected
                .is_none_or(|rejected| rejected == self.truth_rejected)
            && self.missing == 0
            && self.invented == 0
    }

    /// One line saying what is wrong (empty when nothing is).
    pub(super) fn problems(&self) -> String {
        let mut problems = Vec::new();
        if self.wrong_balances > 0 {
            problems.push(format!(
                "{} WRONG BALANCES (first: {})",
                self.wrong_balances,
                self.wrong_examples.join("; ")
            ));
        }
        if let Some(rejected) = self
            .rejected
            .filter(|rejected| *rejected != self.truth_rejected)
        {
            problems.push(format!(
                "REJECTED {rejected} != truth {}",
                self.truth_rejected
            ));
        }
        if self.missing > 0 {
            problems.push(format!("{} ALERTS MISSING", self.missing));
        }
        if self.invented > 0 {
            problems.push(format!("{} ALERTS INVENTED", self.invented));
        }
        problems.join(", ")
    }
}

/// Checks a side's final `balances` (summed over its partitions), its rejected count
/// (`None` when it keeps none) and the alert records it wrote against `truth`.
pub(super) fn check(
    truth: &Truth,
    balances: &BTreeMap<String, i64>,
    rejected: Option<u64>,
    alerts: &[String],
) -> Checked {
    let mut checked = Checked {
        rejected,
        truth_rejected: truth.rejected,
        alerts_written: alerts.len(),
        truth_alerts: truth.alerts.len(),
        ..Checked::default()
    };
    let accounts: std::collections::BTreeSet<&String> =
        truth.balances.keys().chain(balances.keys()).collect();
    for account in accounts {
        let (side, expected) = (balances.get(account), truth.balances.get(account));
        if side != expected {
            checked.wrong_balances += 1;
            if checked.wrong_examples.len() < 3 {
                checked
                    .wrong_examples
                    .push(format!("{account}: {side:?} != truth {expected:?}"));
            }
        }
    }
    let mut written: HashMap<&str, usize> = HashMap::new();
    for alert in alerts {
        *written.entry(alert.as_str()).or_insert(0) += 1;
    }
    for alert in &truth.alerts {
        match written.remove(alert.as_str()) {
            Some(count) => checked.duplicates += count - 1,
            None => checked.missing += 1,
        }
    }
    checked.invented = written.values().sum();
    checked
}
