//! The helpers of the `aggregate` kind's tests (`mongoose/tests/suite/processors/aggregate.rs` and
//! `aggregate_recovery.rs`): its configs, the truth of the totals config computed from
//! the input, and its saved state read back.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::process::{Command, Output};

use mongoose_aggregate::{Aggregate, AggregateSettings, Aggregator};

use super::LedgerRun;

/// The feed `lines` on `input.txt`, the file sinks `out` and `dead`, and the aggregate
/// `agg/totals` with `settings` (TOML lines of its settings table).
pub fn config(top: &str, settings: &str) -> String {
    format!(
        r#"
{top}
[[feeds]]
name = "lines"
source = "file"
path = "input.txt"
read_strategy = "COMMITED"

[[sinks]]
name = "out"
kind = "file"
path = "out.txt"

[[sinks]]
name = "dead"
kind = "file"
path = "dead.txt"

[[groups]]
name = "agg"
idle_strategy = "sleeping-millis:1"

[[groups.processors]]
name = "totals"
kind = "aggregate"
[groups.processors.settings]
{settings}
"#
    )
}

/// Counts and sums by account, a rule when the total goes negative, dead letters.
pub const TOTALS: &str = r#"format = "csv"
columns = ["account", "amount"]
fields = { account = "string", amount = "integer" }
group_by = ["account"]
aggregates = { n = "count", total = "sum(amount)" }
rules = [{ name = "negative", when = "total < 0", emit = "{account} negative: {total}" }]
sink = "out"
dead_letter = "dead"
state_dir = "state"
snapshot_every = 300
"#;

/// The aggregate's state in `state` of `run`, read from its files (`settings` as in the
/// config).
pub fn state_of(run: &LedgerRun, settings: &str) -> Aggregate {
    let settings: AggregateSettings = toml::from_str(settings).expect("settings");
    let aggregator = Aggregator::compile(settings, "settings").expect("compiles");
    mongoose::aggregate::store::load(&run.path("state"), aggregator).expect("state readable")
}

pub fn lines_of(run: &LedgerRun, file: &str) -> Vec<String> {
    std::fs::read_to_string(run.path(file))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The committed offset of the feed (0 before its pointer exists).
pub fn committed(run: &LedgerRun) -> u64 {
    std::fs::read(run.pointer_path())
        .ok()
        .filter(|bytes| bytes.len() >= 8)
        .map_or(0, |bytes| {
            u64::from_be_bytes(bytes[..8].try_into().expect("8"))
        })
}

/// A deterministic input of `count` lines `accN,amount` (amounts from -60 to 39), with
/// a malformed line every 97th.
pub fn ledger_input(count: usize) -> Vec<String> {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    (0..count)
        .map(|index| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            if index % 97 == 50 {
                return format!("acc{},not-a-number", seed % 5);
            }
            format!("acc{},{}", seed % 23, (seed >> 8) % 100) // replaced below
        })
        .enumerate()
        .map(|(index, line)| match line.split_once(',') {
            Some((account, amount)) if amount.parse::<i64>().is_ok() => {
                let amount: i64 = amount.parse().expect("number");
                format!("{account},{}", amount - 60 + (index as i64 % 3))
            }
            _ => line,
        })
        .collect()
}

/// The truth of the totals config over `lines`: per account (count, total), the
/// rule's outputs in order (when a total goes from >= 0 to < 0), and the malformed
/// lines.
pub struct Truth {
    pub keys: BTreeMap<String, (u64, i64)>,
    pub emits: Vec<String>,
    pub malformed: Vec<String>,
}

pub fn truth(lines: &[String]) -> Truth {
    let mut keys: BTreeMap<String, (u64, i64)> = BTreeMap::new();
    let mut negative: BTreeMap<String, bool> = BTreeMap::new();
    let mut emits = Vec::new();
    let mut malformed = Vec::new();
    for line in lines {
        let (account, amount) = line.split_once(',').expect("account,amount");
        let Ok(amount) = amount.parse::<i64>() else {
            malformed.push(line.clone());
            continue;
        };
        let entry = keys.entry(account.to_owned()).or_default();
        entry.0 += 1;
        entry.1 += amount;
        let now = entry.1 < 0;
        let was = negative.insert(account.to_owned(), now).unwrap_or(false);
        if now && !was {
            emits.push(format!("{account} negative: {}", entry.1));
        }
    }
    Truth {
        keys,
        emits,
        malformed,
    }
}

pub fn text_of(lines: &[String]) -> String {
    lines.iter().map(|line| format!("{line}\n")).collect()
}

/// Checks the aggregate's saved state and its outputs against the truth.
pub fn assert_truth(run: &LedgerRun, lines: &[String], context: &str) {
    let truth = truth(lines);
    let aggregate = state_of(run, TOTALS);
    let state = aggregate.state();
    assert_eq!(
        state.counters.applied,
        (lines.len() - truth.malformed.len()) as u64,
        "every good line applied once: {context}"
    );
    assert_eq!(
        state.counters.rejected_total(),
        truth.malformed.len() as u64,
        "every malformed line counted once: {context}"
    );
    for (account, (count, total)) in &truth.keys {
        let view = aggregate.key(&[account]).expect("the key");
        let json = view.to_json();
        assert_eq!(json["values"]["n"], *count, "count of {account}: {context}");
        assert_eq!(
            json["values"]["total"].to_string().trim_matches('"'),
            total.to_string(),
            "total of {account}: {context}"
        );
    }
    assert_eq!(state.keys.len(), truth.keys.len(), "{context}");
    assert_eq!(
        lines_of(run, "out.txt"),
        truth.emits,
        "each rule output written once, in order: {context}"
    );
    let dead = lines_of(run, "dead.txt");
    let dead_lines: Vec<String> = dead
        .iter()
        .map(|line| {
            let json: serde_json::Value = serde_json::from_str(line).expect("a JSON dead letter");
            assert!(json["position"].is_string(), "{line}");
            json["line"].as_str().expect("the line").to_owned()
        })
        .collect();
    assert_eq!(
        dead_lines, truth.malformed,
        "each malformed line dead-lettered once: {context}"
    );
}

/// Card payments `ts,card,amount` (ts in unix seconds), counted per card per minute.
pub const WINDOWED: &str = r#"format = "csv"
columns = ["ts", "card", "amount"]
fields = { ts = { type = "timestamp", format = "unix" }, card = "string", amount = "integer" }
group_by = ["card"]
aggregates = { n = "count", spent = "sum(amount)" }
window = { field = "ts", size = "1m" }
rules = [{ name = "busy", when = "n > 3", emit = "busy {card} {window_start} {n}" }]
sink = "out"
dead_letter = "dead"
state_dir = "state"
snapshot_every = 200
"#;

pub fn mongoose(args: &[&str]) -> Output {
    Command::new(super::binary())
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("the mongoose binary runs")
}
