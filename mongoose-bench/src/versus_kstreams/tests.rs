use std::collections::BTreeMap;

use super::runs::percentile;
use super::sides::{our_config, Names};
use super::truth::{check, parse_line, position, record, record_of, Truth};
use super::Options;

fn arguments(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_owned).collect()
}

impl Options {
    fn parse(arguments: &[String]) -> Result<Options, clap::Error> {
        crate::parse_options(arguments)
    }
}

#[test]
fn the_options_default_to_a_short_run_and_take_every_flag() {
    let defaults = Options::parse(&[]).expect("defaults");
    assert_eq!(defaults, Options::default());
    assert_eq!(defaults.instances, vec![1, 3]);
    let options = Options::parse(&arguments(
        "--runs 5 --warmup 0 --records 1000 --paced 10 --rate 50 --instances 1,2,3 --partitions 3 --brokers 127.0.0.1:29092 --keep /tmp/k",
    ))
    .expect("options");
    assert_eq!(options.runs, 5);
    assert_eq!(options.warmup, 0);
    assert_eq!(options.records, 1000);
    assert_eq!(options.paced, 10);
    assert_eq!(options.rate, 50);
    assert_eq!(options.instances, vec![1, 2, 3]);
    assert_eq!(options.partitions, 3);
    assert_eq!(options.brokers, "127.0.0.1:29092");
    assert!(Options::parse(&arguments("--instances 1,x")).is_err());
    assert!(Options::parse(&arguments("--records 0")).is_err());
    assert!(Options::parse(&arguments("--warmup x")).is_err());
    assert!(Options::parse(&arguments("--runs")).is_err());
    assert!(Options::parse(&arguments("--bogus 1")).is_err());
}

#[test]
fn a_line_is_parsed_as_the_ledger_parses_it() {
    assert_eq!(parse_line("acc1,-3"), Some(("acc1", -3)));
    assert_eq!(parse_line("a-b_C9,+4  "), Some(("a-b_C9", 4)));
    assert_eq!(parse_line("acc1;3"), None);
    assert_eq!(parse_line(",3"), None);
    assert_eq!(parse_line("acc 1,3"), None);
    assert_eq!(parse_line("acc1,3,4"), None);
    assert_eq!(parse_line("acc1,99999999999999999999"), None);
    assert_eq!(parse_line(&format!("{},1", "a".repeat(65))), None);
    assert_eq!(
        parse_line(&format!("{},1", "a".repeat(64))).map(|(_, amount)| amount),
        Some(1)
    );
}

#[test]
fn an_alert_names_its_input_record_as_ours_writes_a_kafka_position() {
    assert_eq!(position(0, 0), "1");
    assert_eq!(position(3, 41), "3:42");
    assert_eq!(record_of("3:42,acc1,-2"), Some((3, 41)));
    assert_eq!(record_of("1,acc1,-2"), Some((0, 0)));
    assert_eq!(record_of("0,acc1,-2"), None);
    assert_eq!(record_of("x,acc1,-2"), None);
}

#[test]
fn the_records_are_keyed_by_account_with_a_malformed_line_every_thousand() {
    assert_eq!(record(0), ("acc0".to_owned(), "acc0,-3".to_owned()));
    assert_eq!(record(201), ("acc1".to_owned(), "acc1,2".to_owned()));
    assert_eq!(record(999), ("acc199".to_owned(), "acc199;2".to_owned()));
    assert_eq!(parse_line(&record(999).1), None);
}

#[test]
fn the_truth_applies_each_partition_in_order_and_alerts_on_a_negative_balance() {
    let zero: Vec<(i64, &[u8])> = vec![(0, b"a,5"), (1, b"a,-7"), (2, b"bad"), (3, b"a,2")];
    let two: Vec<(i64, &[u8])> = vec![(0, b"b,-1"), (1, b"b,9223372036854775807")];
    let truth = Truth::of([(0, zero), (2, two)]);
    assert_eq!(
        truth.balances,
        BTreeMap::from([("a".to_owned(), 0), ("b".to_owned(), 9223372036854775806)])
    );
    assert_eq!(truth.applied, 5);
    assert_eq!(truth.rejected, 1);
    assert_eq!(
        truth.alerts,
        vec!["2,a,-2".to_owned(), "2:1,b,-1".to_owned()]
    );
    // an overflow is rejected, not applied
    let over: Vec<(i64, &[u8])> = vec![(0, b"c,9223372036854775807"), (1, b"c,1")];
    let truth = Truth::of([(1, over)]);
    assert_eq!(truth.rejected, 1);
    assert_eq!(truth.balances["c"], i64::MAX);
}

#[test]
fn the_check_fails_a_wrong_balance_a_missing_or_invented_alert_and_counts_duplicates() {
    let lines: Vec<(i64, &[u8])> = vec![(0, b"a,-1"), (1, b"a,-1"), (2, b"x")];
    let truth = Truth::of([(1, lines)]);
    let right = BTreeMap::from([("a".to_owned(), -2)]);
    let alerts = vec!["1:1,a,-1".to_owned(), "1:2,a,-2".to_owned()];
    let ok = check(&truth, &right, Some(1), &alerts);
    assert!(ok.passed(), "{}", ok.problems());
    assert_eq!((ok.alerts_written, ok.truth_alerts), (2, 2));

    let mut doubled = alerts.clone();
    doubled.push("1:1,a,-1".to_owned());
    let duplicates = check(&truth, &right, Some(1), &doubled);
    assert!(duplicates.passed(), "a duplicate is reported, not failed");
    assert_eq!(duplicates.duplicates, 1);

    let wrong = check(
        &truth,
        &BTreeMap::from([("a".to_owned(), -1)]),
        Some(1),
        &alerts,
    );
    assert!(!wrong.passed());
    assert_eq!(wrong.wrong_balances, 1);
    assert!(
        wrong.problems().contains("WRONG BALANCES"),
        "{}",
        wrong.problems()
    );

    let extra_account = BTreeMap::from([("a".to_owned(), -2), ("z".to_owned(), 0)]);
    assert!(!check(&truth, &extra_account, Some(1), &alerts).passed());

    let missing = check(&truth, &right, Some(1), &alerts[..1]);
    assert_eq!(missing.missing, 1);
    assert!(!missing.passed());

    let invented = check(
        &truth,
        &right,
        Some(1),
        &[alerts[0].clone(), alerts[1].clone(), "1:3,a,-3".to_owned()],
    );
    assert_eq!(invented.invented, 1);
    assert!(!invented.passed());

    let miscounted = check(&truth, &right, Some(0), &alerts);
    assert!(!miscounted.passed());
    assert!(miscounted.problems().contains("REJECTED"));
}

#[test]
fn percentiles_are_nearest_rank() {
    let mut values: Vec<f64> = (1..=100).map(f64::from).collect();
    assert_eq!(percentile(&mut values, 50.0), Some(50.0));
    assert_eq!(percentile(&mut values, 99.0), Some(99.0));
    assert_eq!(percentile(&mut [7.0], 99.0), Some(7.0));
    assert_eq!(percentile(&mut [], 50.0), None);
}

#[test]
fn our_instances_run_the_changelog_ledger_with_alerts_in_its_transactions() {
    let names = Names {
        input: "in".to_owned(),
        alerts: "out".to_owned(),
        group: "g".to_owned(),
    };
    let config: toml::Value =
        toml::from_str(&our_config("127.0.0.1:19092", &names)).expect("a TOML config");
    let feed = &config["feeds"][0];
    assert_eq!(feed["source"].as_str(), Some("kafka"));
    assert_eq!(feed["settings"]["topic"].as_str(), Some("in"));
    assert_eq!(feed["settings"]["group"].as_str(), Some("g"));
    assert!(
        config.get("sinks").is_none(),
        "no sink: the alerts go with the state"
    );
    let ledger = &config["groups"][0]["processors"][0]["settings"];
    assert_eq!(ledger["state"].as_str(), Some("changelog"));
    assert_eq!(ledger["alerts_topic"].as_str(), Some("out"));
}
