//! Settings that do not load name their key; rules fire on the transition; the
//! readers' options.

mod common;

use common::{aggregate, apply_all, compile, AT};
use mongoose_aggregate::{AggregateError, AggregateSettings, Outcome};

fn refused_at(settings: &str) -> (String, String) {
    match compile(settings).unwrap_err() {
        AggregateError::Config { at, message } => (at.trim_start_matches(AT).to_owned(), message),
        other => panic!("a config error: {other}"),
    }
}

const BASE: &str = r#"
    format = "csv"
    columns = ["ts", "card", "amount"]
    fields = { ts = "timestamp", card = "string", amount = "decimal" }
    group_by = ["card"]
    aggregates = { total = "sum(amount)" }
"#;

#[test]
fn each_setting_that_does_not_load_names_its_key() {
    let unknown =
        toml::from_str::<AggregateSettings>(&format!("{BASE}\nwindow_size = \"1m\"")).unwrap_err();
    assert!(
        unknown.to_string().contains("unknown field `window_size`"),
        "{unknown}"
    );

    for (settings, at, says) in [
        (BASE.replace("columns = [\"ts\", \"card\", \"amount\"]", ""), ".columns", "needs columns"),
        (format!("{BASE}\ndelimiter = \";;\""), ".delimiter", "is not one byte"),
        (BASE.replace("group_by = [\"card\"]", "group_by = [\"card\", \"shop\"]"), ".group_by[1]", "\"shop\" is not a field"),
        (BASE.replace("sum(amount)", "sum(card)"), ".aggregates.total", "sum needs an integer or decimal field"),
        (BASE.replace("sum(amount)", "median(amount)"), ".aggregates.total", "unknown function `median`"),
        (BASE.replace("sum(amount)", "sum(amount"), ".aggregates.total", "at column 11"),
        (format!("{BASE}\nwindow = {{ field = \"card\", size = \"1m\" }}"), ".window.field", "not a timestamp field"),
        (format!("{BASE}\nwindow = {{ field = \"ts\", size = \"1 minute\" }}"), ".window.size", "is not a duration"),
        (format!("{BASE}\nwindow = {{ field = \"ts\", size = \"0s\" }}"), ".window.size", "is not a duration"),
        (
            format!("{BASE}\nrules = [{{ name = \"r\", when = \"total < 0\", emit = \"{{card}} {{balance}}\" }}]"),
            ".rules[0].emit",
            "`balance` is not a group_by field or an aggregate name at column 9",
        ),
        (
            format!("{BASE}\nrules = [{{ name = \"r\", when = \"total < 0\", emit = \"{{card\" }}]"),
            ".rules[0].emit",
            "an unmatched brace",
        ),
        (
            BASE.replace("ts = \"timestamp\"", "ts = { type = \"timestamp\", format = \"%Q\" }"),
            ".fields.ts.format",
            "is not a time format",
        ),
        (
            BASE.replace("card = \"string\"", "card = { type = \"string\", path = \"a.b\" }"),
            ".fields.card.path",
            "a path is for format = \"json\"",
        ),
        (BASE.replace("format = \"csv\"", "format = \"json\""), ".columns", "is a csv setting"),
    ] {
        let (key, message) = refused_at(&settings);
        assert_eq!(key, at, "{message}");
        assert!(message.contains(says), "{at}: {message}");
    }
}

#[test]
fn a_rule_fires_when_it_becomes_true_not_on_every_line() {
    let mut aggregate = aggregate(&format!(
        "{BASE}\nrules = [{{ name = \"overdraft\", when = \"total < 0 and card != \\\"vip\\\"\", emit = \"{{card}} overdrawn: {{total}}\" }}]"
    ));
    let lines: Vec<String> = [
        "c1,-5", "c1,-1", "c1,10", "c1,-20", "vip,-100", "c2,-1", "c1,-1",
    ]
    .iter()
    .map(|line| format!("2026-01-01T00:00:00Z,{line}"))
    .collect();
    let emitted: Vec<String> = apply_all(&mut aggregate, &lines)
        .into_iter()
        .flat_map(|outcome| match outcome {
            Outcome::Applied { emits, .. } => {
                emits.into_iter().map(|emit| emit.text).collect::<Vec<_>>()
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        emitted,
        ["c1 overdrawn: -5", "c1 overdrawn: -16", "c2 overdrawn: -1"]
    );
    assert_eq!(aggregate.state().counters.emits, 3);
}

#[test]
fn csv_options_and_json_decimals_read_exactly() {
    let mut aggregate = aggregate(
        r#"
        format = "csv"
        columns = ["when", "shop", "price"]
        delimiter = ";"
        quote = "'"
        fields = { at = { type = "timestamp", column = "when", format = "%d/%m/%Y %H:%M" }, shop = "string", price = "decimal" }
        group_by = ["shop"]
        aggregates = { total = "sum(price)", first = "min(at)", latest = "max(at)" }
        "#,
    );
    let lines: Vec<String> = [
        "01/02/2026 10:30;'a;b';0.10",
        "01/02/2026 09:00;'a;b';0.20",
        "x;y",
    ]
    .iter()
    .map(|line| (*line).to_owned())
    .collect();
    let outcomes = apply_all(&mut aggregate, &lines);
    assert!(matches!(outcomes[2], Outcome::Rejected(_)));
    let view = aggregate.key(&["a;b"]).unwrap().to_json();
    assert_eq!(view["values"]["total"], "0.30", "0.1 + 0.2 is 0.3 exactly");
    assert_eq!(view["values"]["first"], "2026-02-01T09:00:00.000Z");
    assert_eq!(view["values"]["latest"], "2026-02-01T10:30:00.000Z");

    let mut json = common::aggregate(
        r#"
        format = "json"
        fields = { service = { type = "string", path = "svc.name" }, level = "string", ms = "decimal", at = { type = "timestamp", format = "unix" } }
        group_by = ["service", "level"]
        aggregates = { n = "count", total = "sum(ms)" }
        "#,
    );
    let lines: Vec<String> = [
        r#"{"svc": {"name": "api"}, "level": "error", "ms": 0.1, "at": 1767225600}"#,
        r#"{"svc": {"name": "api"}, "level": "error", "ms": 0.2, "at": 1767225600.5}"#,
        r#"{"svc": {"name": "api"}, "level": "error", "ms": "0.05", "at": "1767225601"}"#,
    ]
    .iter()
    .map(|line| (*line).to_owned())
    .collect();
    assert!(apply_all(&mut json, &lines)
        .iter()
        .all(|outcome| matches!(outcome, Outcome::Applied { .. })));
    assert_eq!(
        json.key(&["api", "error"]).unwrap().to_json()["values"]["total"],
        "0.35"
    );
}

#[test]
fn without_group_by_every_line_is_one_key_with_no_parts() {
    let mut aggregate = aggregate(&format!(
        "{}\nrules = [{{ name = \"big\", when = \"total > 10\", emit = \"total {{total}}\" }}]",
        BASE.replace("group_by = [\"card\"]", "")
    ));
    let lines: Vec<String> = ["2026-01-01T00:00:00Z,c1,6", "2026-01-01T00:00:00Z,c2,6"]
        .iter()
        .map(|line| (*line).to_owned())
        .collect();
    let outcomes = apply_all(&mut aggregate, &lines);
    let Outcome::Applied { emits, .. } = &outcomes[1] else {
        panic!("{:?}", outcomes[1])
    };
    assert_eq!(emits[0].key, Vec::<String>::new());
    assert_eq!(emits[0].text, "total 12");
    assert_eq!(aggregate.key(&[]).unwrap().to_json()["values"]["total"], 12);
}
