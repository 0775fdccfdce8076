//! The tests issue 40 names, on the pure core (the processor-level halves, with a
//! dead-letter sink and a server, come with the processor kind).

mod common;

use common::{aggregate, apply_all, compile};
use mongoose_aggregate::{AggregateError, LinePosition, Outcome, Value};

#[test]
fn a_rule_with_a_syntax_error_is_a_config_error_at_its_key() {
    let settings = |when: &str| {
        format!(
            r#"
            format = "csv"
            columns = ["card", "amount"]
            fields = {{ card = "string", amount = "decimal" }}
            group_by = ["card"]
            aggregates = {{ total = "sum(amount)" }}
            rules = [
                {{ name = "fine", when = "count > 5", emit = "{{card}}" }},
                {{ name = "overdraft", when = "{when}", emit = "{{card}} overdrawn: {{total}}" }},
            ]
            "#
        )
    };
    assert!(compile(&settings("sum(amount) < 0")).is_ok());
    let error = compile(&settings("sum(amount) < ")).unwrap_err();
    let AggregateError::Config { at, message } = &error else {
        panic!("a config error: {error}")
    };
    assert_eq!(at, "processors[alerts].settings.rules[1].when");
    assert!(message.contains("at column 15"), "{message}");
    assert!(
        message.ends_with("\n  sum(amount) < \n                ^"),
        "the caret under column 15:\n{message}"
    );
    // the whole message, as the operator reads it
    assert!(
        error
            .to_string()
            .starts_with("processors[alerts].settings.rules[1].when: expected"),
        "{error}"
    );

    for (when, column) in [
        ("sum(amount) < 0 and", 20),
        ("(count > 1", 11),
        ("count >> 1", 8),
        ("sum(amount < 0", 12),
        ("count > 1 or", 13),
        ("not", 4),
    ] {
        let error = compile(&settings(when)).unwrap_err();
        let AggregateError::Config { at, message } = &error else {
            panic!("{error}")
        };
        assert_eq!(at, "processors[alerts].settings.rules[1].when", "{when}");
        assert!(
            message.contains(&format!("at column {column}\n")),
            "{when}: {message}"
        );
    }
    // names that do not resolve are errors at their column too
    for (when, column, says) in [
        ("balance < 0", 1, "`balance` is not an aggregate"),
        (
            "count > 1 and avg(amount) > 2",
            15,
            "unknown function `avg`",
        ),
        ("sum(card) > 2", 1, "sum needs an integer or decimal field"),
        ("sum(nope) > 2", 1, "`nope` is not a field"),
        ("count", 1, "a condition needs a comparison"),
    ] {
        let error = compile(&settings(when)).unwrap_err();
        let AggregateError::Config { message, .. } = &error else {
            panic!("{error}")
        };
        assert!(
            message.contains(says) && message.contains(&format!("at column {column}\n")),
            "{when}: {message}"
        );
    }
}

fn cards() -> String {
    r#"
    format = "csv"
    columns = ["ts", "card", "amount"]
    header = true
    fields = { ts = { type = "timestamp", format = "unix" }, card = "string", amount = "decimal" }
    group_by = ["card"]
    aggregates = { total = "sum(amount)", n = "count" }
    "#
    .to_owned()
}

#[test]
fn a_line_that_does_not_parse_is_counted_never_dropped() {
    let mut aggregate = aggregate(&cards());
    let lines: Vec<String> = [
        "ts,card,amount", // a header: skipped, counted
        "1,c1,10.5",      // applied
        "2,c1",           // not enough columns
        "3,c1,x",         // not a decimal
        "4,c1,1e3",       // not a decimal (no floats)
        "5,\"c,2\",2",    // quoted: applied to the key `c,2`
        "x,c1,1",         // not a timestamp
        "6,c1,1,9",       // too many columns
        "7,c1,\"-0.5\"",  // quoted number: applied
        "\u{1}8,c1,1",    // not a timestamp
    ]
    .iter()
    .map(|line| (*line).to_owned())
    .collect();
    let outcomes = apply_all(&mut aggregate, &lines);
    let reasons: Vec<Option<&str>> = outcomes
        .iter()
        .map(|outcome| match outcome {
            Outcome::Rejected(rejection) => Some(rejection.message.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        reasons,
        [
            None,
            None,
            Some("not enough columns: 2 of 3"),
            Some("amount: not a decimal: \"x\""),
            Some("amount: not a decimal: \"1e3\""),
            None,
            Some("ts: not a timestamp: \"x\""),
            Some("too many columns: 4 for 3"),
            None,
            Some("ts: not a timestamp: \"\\u{1}8\""),
        ]
    );
    assert_eq!(outcomes[0], Outcome::Header);
    let counters = &aggregate.state().counters;
    assert_eq!(counters.rejected.get("amount: not a decimal"), Some(&2));
    assert_eq!(counters.rejected.get("ts: not a timestamp"), Some(&2));
    assert_eq!(counters.rejected.get("not enough columns"), Some(&1));
    assert_eq!(counters.rejected.get("too many columns"), Some(&1));
    // every line is counted once, in one place
    assert_eq!(
        counters.applied + counters.rejected_total() + counters.headers,
        lines.len() as u64
    );
    assert_eq!(counters.applied, 3);
    let total = |card: &str| aggregate.key(&[card]).unwrap().values[1].1.clone();
    assert_eq!(
        total("c1"),
        Some(Value::Number(
            mongoose_aggregate::Decimal::parse("10").unwrap()
        ))
    );
    assert!(aggregate.key(&["c,2"]).is_some());

    // JSON: a missing field, a wrong type, not JSON
    let mut json = common::aggregate(
        r#"
        format = "json"
        fields = { user = { type = "string", path = "user.id" }, ms = "integer" }
        group_by = ["user"]
        aggregates = { n = "count", total = "sum(ms)" }
        "#,
    );
    let lines: Vec<String> = [
        r#"{"user": {"id": "u1"}, "ms": 5}"#,
        r#"{"user": {"name": "u1"}, "ms": 5}"#,
        r#"{"user": {"id": "u1"}, "ms": "five"}"#,
        r#"{"user": {"id": "u1"}, "ms": 1.5}"#,
        r#"{"user": "#,
        r#"[1, 2]"#,
        r#"{"user": {"id": 7}, "ms": "12"}"#,
    ]
    .iter()
    .map(|line| (*line).to_owned())
    .collect();
    let outcomes = apply_all(&mut json, &lines);
    let messages: Vec<String> = outcomes
        .iter()
        .map(|outcome| match outcome {
            Outcome::Rejected(rejection) => rejection.message.clone(),
            Outcome::Applied { .. } => "applied".to_owned(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(messages[0], "applied");
    assert_eq!(messages[1], "missing field user.id: not in the line");
    assert_eq!(messages[2], "ms: not an integer: \"five\"");
    assert_eq!(messages[3], "ms: not an integer: 1.5");
    assert!(messages[4].starts_with("not JSON: "), "{}", messages[4]);
    assert_eq!(messages[5], "not a JSON object: a line is one JSON object");
    assert_eq!(
        messages[6], "applied",
        "a number read as a string field, a string as an integer"
    );
    let counters = &json.state().counters;
    assert_eq!(
        counters.applied + counters.rejected_total(),
        lines.len() as u64
    );
    assert_eq!(json.key(&["7"]).unwrap().to_json()["values"]["total"], 12);
}

fn windowed() -> String {
    r#"
    format = "csv"
    columns = ["ts", "card", "amount"]
    fields = { ts = { type = "timestamp", format = "%Y-%m-%d %H:%M:%S" }, card = "string", amount = "decimal" }
    group_by = ["card"]
    aggregates = { total = "sum(amount)", n = "count" }
    window = { field = "ts", size = "1m", allowed_lateness = "10s" }
    rules = [{ name = "busy", when = "count >= 2", emit = "{card}: {n} in {window_start}..{window_end}" }]
    "#
    .to_owned()
}

#[test]
fn a_late_event_is_counted_and_reported() {
    let mut aggregate = aggregate(&windowed());
    let lines: Vec<String> = [
        "2026-01-01 10:00:05,c1,1",
        "2026-01-01 10:01:09,c1,1", // watermark 10:00:59: the 10:00 window is still open
        "2026-01-01 10:00:50,c1,1", // within the lateness: counted in 10:00
        "2026-01-01 10:01:15,c1,1", // watermark 10:01:05: the 10:00 window closes
        "2026-01-01 10:00:58,c1,1", // late: its window closed
        "2026-01-01 10:00:59,c2,1", // late too (another key, same closed window)
        "2026-01-01 10:01:00,c2,1", // the open 10:01 window: applied
    ]
    .iter()
    .map(|line| (*line).to_owned())
    .collect();
    let outcomes = apply_all(&mut aggregate, &lines);
    let late: Vec<usize> = (0..outcomes.len())
        .filter(|at| matches!(outcomes[*at], Outcome::Late(_)))
        .collect();
    assert_eq!(late, [4, 5]);
    let Outcome::Late(event) = &outcomes[4] else {
        unreachable!()
    };
    let minute = |text: &str| {
        chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S")
            .unwrap()
            .and_utc()
            .timestamp_millis()
    };
    assert_eq!(
        event.window,
        (minute("2026-01-01 10:00:00"), minute("2026-01-01 10:01:00"))
    );
    assert_eq!(event.watermark, minute("2026-01-01 10:01:05"));
    assert_eq!(event.event_time, minute("2026-01-01 10:00:58"));
    let counters = &aggregate.state().counters;
    assert_eq!(counters.late, 2);
    assert_eq!(counters.applied, 5);
    assert_eq!(
        counters.applied + counters.late,
        lines.len() as u64,
        "each line counted once"
    );
    // the late lines are in no window: the closed one had 2 lines (10:00:05, 10:00:50)
    let Outcome::Applied { closed, .. } = &outcomes[3] else {
        panic!("{:?}", outcomes[3])
    };
    assert_eq!(closed.len(), 1);
    assert_eq!(
        closed[0].values[1].1,
        Some(Value::Number(mongoose_aggregate::Decimal::from_integer(2)))
    );
}

#[test]
fn a_window_result_is_emitted_once_when_it_closes() {
    let mut aggregate = aggregate(&windowed());
    let lines: Vec<String> = [
        "2026-01-01 10:00:05,c1,1",
        "2026-01-01 10:00:20,c2,5",
        "2026-01-01 10:00:40,c1,2.5",
        "2026-01-01 10:01:05,c1,1", // watermark 10:00:55: nothing closes
        "2026-01-01 10:01:10,c2,1", // watermark 10:01:00: the 10:00 windows close
        "2026-01-01 10:01:30,c1,1", // nothing more closes
        "2026-01-01 10:00:30,c1,9", // late: the 10:00 window does not open again
        "2026-01-01 10:03:00,c3,1", // watermark 10:02:50: the 10:01 windows close
    ]
    .iter()
    .map(|line| (*line).to_owned())
    .collect();
    let outcomes = apply_all(&mut aggregate, &lines);
    let closed_at: Vec<(usize, Vec<String>, i64)> = outcomes
        .iter()
        .enumerate()
        .flat_map(|(at, outcome)| match outcome {
            Outcome::Applied { closed, .. } => closed
                .iter()
                .map(|window| (at, window.key.clone(), window.start))
                .collect::<Vec<_>>(),
            _ => Vec::new(),
        })
        .collect();
    let ten = chrono::NaiveDate::from_ymd_opt(2026, 1, 1)
        .unwrap()
        .and_hms_opt(10, 0, 0)
        .unwrap()
        .and_utc()
        .timestamp_millis();
    assert_eq!(
        closed_at,
        [
            (4, vec!["c1".to_owned()], ten),
            (4, vec!["c2".to_owned()], ten),
            (7, vec!["c1".to_owned()], ten + 60_000),
            (7, vec!["c2".to_owned()], ten + 60_000),
        ],
        "each window once, by the line whose event time passed its end plus the lateness"
    );
    assert!(matches!(outcomes[6], Outcome::Late(_)), "{:?}", outcomes[6]);
    let Outcome::Applied { closed, emits } = &outcomes[4] else {
        unreachable!()
    };
    assert_eq!(
        closed[0].values,
        [
            (
                "n".to_owned(),
                Some(Value::Number(mongoose_aggregate::Decimal::from_integer(2)))
            ),
            (
                "total".to_owned(),
                Some(Value::Number(
                    mongoose_aggregate::Decimal::parse("3.5").unwrap()
                ))
            ),
        ]
    );
    // the rule ran at the close, over the window: c1 had 2 lines, c2 one
    assert_eq!(emits.len(), 1);
    assert_eq!(
        emits[0].text,
        "c1: 2 in 2026-01-01T10:00:00.000Z..2026-01-01T10:01:00.000Z"
    );
    assert_eq!(aggregate.state().counters.windows_closed, 4);
    // a replay of the closing line emits nothing again
    assert_eq!(
        aggregate.apply(LinePosition::at(1, 5), lines[4].as_bytes()),
        Outcome::AlreadyApplied
    );
    // the open windows are what a query shows
    let view = aggregate.key(&["c3"]).unwrap();
    assert_eq!(view.windows.len(), 1);
    assert!(
        aggregate.key(&["c2"]).is_none(),
        "c2 has no open window left"
    );
    assert_eq!(
        aggregate.state().closing.len(),
        1,
        "only the 10:03 window is open"
    );
}
