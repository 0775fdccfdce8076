//! `aggregate_apply`: lines/s of the aggregate's pure apply, 3 sums by key, over CSV
//! and over JSON, and the ledger's rules on the same keys and amounts.
//!
//! The ledger has no public pure apply (its `apply_line_to` writes a rejected log and
//! alerts as it applies), so `ledger_rules` is its per-line work copied here: split at
//! the comma, check the account, parse the `i64`, one look-up and add in a
//! `BTreeMap<String, i64>` (one sum, where the aggregates do three).

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use mongoose_aggregate::{Aggregate, AggregateSettings, Aggregator, LinePosition};

const LINES: usize = 100_000;
const KEYS: u64 = 1_000;

fn rng(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn input() -> Vec<(String, i64, i64, i64)> {
    let mut state = 0x2545_F491_4F6C_DD1D;
    (0..LINES)
        .map(|_| {
            let account = format!("acc{}", rng(&mut state) % KEYS);
            let mut amount = || (rng(&mut state) % 20_001) as i64 - 10_000;
            (account, amount(), amount(), amount())
        })
        .collect()
}

fn aggregate(settings: &str) -> Aggregate {
    let settings: AggregateSettings = toml::from_str(settings).expect("settings");
    Aggregate::new(Aggregator::compile(settings, "bench").expect("compiles"))
}

fn apply_all(settings: &str, lines: &[String]) -> u64 {
    let mut aggregate = aggregate(settings);
    let mut position = 0;
    for line in lines {
        position += line.len() as u64 + 1;
        black_box(aggregate.apply(LinePosition::at(1, position), line.as_bytes()));
    }
    aggregate.state().counters.applied
}

const CSV: &str = r#"
    format = "csv"
    columns = ["account", "a", "b", "c"]
    fields = { account = "string", a = "integer", b = "integer", c = "decimal" }
    group_by = ["account"]
    aggregates = { sa = "sum(a)", sb = "sum(b)", sc = "sum(c)" }
"#;

const JSON: &str = r#"
    format = "json"
    fields = { account = "string", a = "integer", b = "integer", c = "decimal" }
    group_by = ["account"]
    aggregates = { sa = "sum(a)", sb = "sum(b)", sc = "sum(c)" }
"#;

fn ledger_rules(lines: &[String]) -> usize {
    let mut balances: BTreeMap<String, i64> = BTreeMap::new();
    for line in lines {
        let Some((account, amount)) = line.split_once(',') else {
            continue;
        };
        let valid = !account.is_empty()
            && account.len() <= 64
            && account
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-');
        let Ok(amount) = amount.trim_end().parse::<i64>() else {
            continue;
        };
        if !valid {
            continue;
        }
        match balances.get_mut(account) {
            Some(balance) => *balance += amount,
            None => {
                balances.insert(account.to_owned(), amount);
            }
        }
    }
    balances.len()
}

fn bench(c: &mut Criterion) {
    let input = input();
    let csv: Vec<String> = input
        .iter()
        .map(|(account, a, b, cents)| {
            format!(
                "{account},{a},{b},{}.{:02}",
                cents / 100,
                (cents % 100).abs()
            )
        })
        .collect();
    let json: Vec<String> = input
        .iter()
        .map(|(account, a, b, cents)| {
            format!(
                r#"{{"account":"{account}","a":{a},"b":{b},"c":"{}.{:02}"}}"#,
                cents / 100,
                (cents % 100).abs()
            )
        })
        .collect();
    let ledger: Vec<String> = input
        .iter()
        .map(|(account, a, _, _)| format!("{account},{a}"))
        .collect();
    assert_eq!(apply_all(CSV, &csv), LINES as u64);
    assert_eq!(apply_all(JSON, &json), LINES as u64);

    let mut group = c.benchmark_group("aggregate_apply");
    group.throughput(Throughput::Elements(LINES as u64));
    group.sample_size(10);
    group.bench_function("csv_3_sums_by_key", |b| b.iter(|| apply_all(CSV, &csv)));
    group.bench_function("json_3_sums_by_key", |b| b.iter(|| apply_all(JSON, &json)));
    group.bench_function("ledger_rules", |b| b.iter(|| ledger_rules(&ledger)));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
