//! The book's page `docs/src/processors/aggregate.md`: its settings compile, and its
//! worked example gives the outputs and the key the page shows.

mod common;

use mongoose_aggregate::{AggregateSettings, Aggregator, LinePosition, Outcome};

const PAGE: &str = include_str!("../../docs/src/processors/aggregate.md");

/// The bodies of the page's fenced blocks of `language`, in order.
fn blocks(language: &str) -> Vec<String> {
    let fence = format!("```{language}\n");
    PAGE.split(&fence)
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap_or_default().to_owned())
        .collect()
}

#[derive(serde::Deserialize)]
struct Table {
    settings: AggregateSettings,
}

#[test]
fn the_books_settings_compile_and_its_worked_example_does_what_the_page_says() {
    // fenced `toml aggregate`: the book's config check leaves them to this test
    let tables = blocks("toml aggregate");
    assert_eq!(tables.len(), 2);
    let mut aggregators = tables.iter().map(|table| {
        let table: Table = toml::from_str(table).expect("the page's settings deserialize");
        Aggregator::compile(table.settings, common::AT).expect("the page's settings compile")
    });
    let mut aggregate = mongoose_aggregate::Aggregate::new(aggregators.next().unwrap());
    assert!(aggregators.next().is_some());

    let input = &blocks("csv")[0];
    let mut shown = Vec::new();
    let mut position = 0;
    for (index, line) in input.lines().enumerate() {
        position += line.len() as u64 + 1;
        let number = index + 1;
        match aggregate.apply(LinePosition::at(1, position), line.as_bytes()) {
            Outcome::Header => shown.push(format!("line {number}: header")),
            Outcome::Rejected(rejection) => {
                shown.push(format!("line {number}: rejected: {}", rejection.message))
            }
            Outcome::Applied { emits, .. } => shown.extend(
                emits
                    .iter()
                    .map(|emit| format!("line {number}: {}: {}", emit.rule, emit.text)),
            ),
            other => shown.push(format!("line {number}: {other:?}")),
        }
    }
    let outputs: Vec<String> = blocks("text")
        .iter()
        .find(|block| block.starts_with("line 1:"))
        .expect("the page's outputs")
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(shown, outputs);

    let key: serde_json::Value =
        serde_json::from_str(&blocks("json")[0]).expect("the page's key is JSON");
    assert_eq!(aggregate.key(&["c1"]).expect("c1").to_json(), key);
}

#[test]
fn the_books_syntax_error_is_the_one_the_code_gives() {
    let settings = r#"
        format = "csv"
        columns = ["card", "amount"]
        fields = { card = "string", amount = "decimal" }
        group_by = ["card"]
        rules = [
            { name = "a", when = "count > 1", emit = "{card}" },
            { name = "b", when = "sum(amount) < ", emit = "x" },
        ]
    "#;
    let error = common::compile(settings).unwrap_err().to_string();
    let shown = blocks("text")
        .into_iter()
        .find(|block| block.starts_with("processors[alerts]"))
        .expect("the page's error");
    assert_eq!(format!("{error}\n"), shown);
}
