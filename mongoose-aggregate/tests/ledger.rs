//! The ledger's rules as an aggregate config: balances and alerts as the ledger's.
//!
//! The ledger (`mongoose-ledger/src/apply.rs`) has no public pure apply (it writes its
//! rejected log and alerts as it applies), so the truth is its rules written out here:
//! a line is `account,amount` (amount a signed 64-bit integer), the balance of an
//! account is the sum of its amounts, a malformed line is rejected and counted, and
//! every line that leaves a balance negative writes the alert
//! `position,account,balance` (`mongoose-ledger/src/alerts.rs`: one per such line, not
//! only on the way down: the aggregate's rule says `fire = "every"`). The ledger also
//! rejects a line whose balance would overflow an `i64`; the aggregate sums in an
//! `i128`, so the input keeps far from that bound.

mod common;

use std::collections::BTreeMap;

use common::Rng;
use mongoose_aggregate::{LinePosition, Outcome};

const LEDGER_AS_AGGREGATE: &str = r#"
    format = "csv"
    columns = ["account", "amount"]
    fields = { account = "string", amount = "integer" }
    group_by = ["account"]
    aggregates = { balance = "sum(amount)" }
    rules = [{ name = "negative", when = "balance < 0", emit = "{account},{balance}", fire = "every" }]
"#;

/// The ledger's rules: balances, rejected lines, alerts (`position,account,balance`).
fn ledger_truth(lines: &[(u64, String)]) -> (BTreeMap<String, i64>, u64, Vec<String>) {
    let mut balances = BTreeMap::new();
    let mut rejected = 0;
    let mut alerts = Vec::new();
    for (position, line) in lines {
        let parsed = line.split_once(',').and_then(|(account, amount)| {
            let valid = !account.is_empty()
                && account.len() <= 64
                && account
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-');
            Some((account, amount.trim_end().parse::<i64>().ok()?)).filter(|_| valid)
        });
        let Some((account, amount)) = parsed else {
            rejected += 1;
            continue;
        };
        let balance = balances.entry(account.to_owned()).or_insert(0i64);
        *balance += amount;
        if *balance < 0 {
            alerts.push(format!("{position},{account},{balance}"));
        }
    }
    (balances, rejected, alerts)
}

#[test]
fn the_ledger_as_an_aggregate_config_gives_the_ledgers_balances_and_alerts() {
    for seed in 1..=20u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut position = 0u64;
        let lines: Vec<(u64, String)> = (0..2_000)
            .map(|_| {
                let account = format!("acc{}", rng.below(40));
                let amount = rng.below(2_001) as i64 - 1_000;
                let line = match rng.below(50) {
                    0 => account.clone(),                        // no amount
                    1 => format!("{account},ten"),               // not an integer
                    2 => format!("{account},{amount},{amount}"), // one column too many
                    _ => format!("{account},{amount}"),
                };
                position += line.len() as u64 + 1;
                (position, line)
            })
            .collect();
        let (balances, rejected, alerts) = ledger_truth(&lines);

        let mut aggregate = common::aggregate(LEDGER_AS_AGGREGATE);
        let mut emitted = Vec::new();
        for (position, line) in &lines {
            if let Outcome::Applied { emits, .. } =
                aggregate.apply(LinePosition::at(1, *position), line.as_bytes())
            {
                emitted.extend(
                    emits
                        .into_iter()
                        .map(|emit| format!("{position},{}", emit.text)),
                );
            }
        }
        assert_eq!(emitted, alerts, "seed {seed}: the alerts, in order");
        assert_eq!(
            aggregate.state().counters.rejected_total(),
            rejected,
            "seed {seed}"
        );
        assert_eq!(aggregate.state().keys.len(), balances.len(), "seed {seed}");
        for (account, balance) in &balances {
            let view = aggregate.key(&[account]).expect("every account is a key");
            assert_eq!(
                view.to_json()["values"]["balance"],
                *balance,
                "seed {seed}, {account}"
            );
        }
    }
}
