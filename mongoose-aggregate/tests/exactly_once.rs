//! Exactly-once effect by position: a re-read changes nothing, and a state saved after
//! any line, read back and given the rest (from any earlier line), ends as one pass.

mod common;

use mongoose_aggregate::{Aggregate, AggregateState, LinePosition, Outcome};
use mongoose_core::{Epoch, PositionValue};
use proptest::prelude::*;

/// Windowed, with rules, a count_distinct at a small bound, min/max/last.
const WINDOWED: &str = r#"
    format = "csv"
    columns = ["ts", "card", "merchant", "amount"]
    fields = { ts = { type = "timestamp", format = "unix_ms" }, card = "string", merchant = "string", amount = "decimal" }
    group_by = ["card"]
    aggregates = { total = "sum(amount)", n = "count", merchants = "count_distinct(merchant)", lo = "min(amount)", hi = "max(amount)", last_seen = "last(ts)" }
    count_distinct_bound = 3
    window = { field = "ts", size = "1m", allowed_lateness = "15s" }
    rules = [{ name = "many", when = "n >= 3 or merchants > 2", emit = "{card} {n} {total}" }]
"#;

/// Per key since the start, with rules on the transition and on every line.
const RUNNING: &str = r#"
    format = "csv"
    columns = ["ts", "card", "merchant", "amount"]
    fields = { ts = { type = "timestamp", format = "unix_ms" }, card = "string", merchant = "string", amount = "decimal" }
    group_by = ["card", "merchant"]
    aggregates = { total = "sum(amount)", n = "count", lo = "min(amount)", last_seen = "last(ts)" }
    rules = [
        { name = "negative", when = "total < 0", emit = "{card}/{merchant} {total}" },
        { name = "each", when = "n > 2 and not (lo >= -10)", emit = "{card} low {lo}", fire = "every" },
    ]
"#;

/// A line and where it is: `(lane, offset)`.
#[derive(Clone, Debug)]
struct Placed {
    lane: u32,
    offset: u64,
    line: String,
}

fn stream() -> impl Strategy<Value = Vec<Placed>> {
    prop::collection::vec(
        (
            0u32..2,
            0u8..4,
            0u8..5,
            -5000i32..5000,
            -20_000i64..40_000,
            0u8..12,
        ),
        1..60,
    )
    .prop_map(|items| {
        let mut time = 1_700_000_000_000i64;
        let mut offsets = [0u64; 2];
        items
            .into_iter()
            .map(|(lane, card, merchant, cents, step, fault)| {
                time += step;
                let line = match fault {
                    0 => format!("{time},c{card}"),
                    1 => format!("{time},c{card},m{merchant},x"),
                    _ => format!(
                        "{time},c{card},m{merchant},{}.{:02}",
                        cents / 100,
                        (cents % 100).abs()
                    ),
                };
                offsets[lane as usize] += line.len() as u64 + 1;
                Placed {
                    lane,
                    offset: offsets[lane as usize],
                    line,
                }
            })
            .collect()
    })
}

fn at(placed: &Placed) -> LinePosition {
    LinePosition {
        epoch: Epoch(7),
        position: PositionValue {
            lane: placed.lane,
            offset: placed.offset,
        },
    }
}

/// What a line emitted, as comparable values.
fn outputs(outcome: &Outcome) -> Vec<String> {
    match outcome {
        Outcome::Applied { emits, closed } => emits
            .iter()
            .map(|emit| format!("emit {} {}", emit.rule, emit.text))
            .chain(closed.iter().map(|window| {
                format!(
                    "closed {:?} {} {:?}",
                    window.key, window.start, window.values
                )
            }))
            .collect(),
        Outcome::Rejected(rejection) => vec![format!("rejected {}", rejection.message)],
        Outcome::Late(late) => vec![format!("late {late:?}")],
        Outcome::Header | Outcome::AlreadyApplied => Vec::new(),
    }
}

fn one_pass(settings: &str, lines: &[Placed]) -> (Aggregate, Vec<Vec<String>>, Vec<Vec<u8>>) {
    let mut aggregate = common::aggregate(settings);
    let mut emitted = Vec::new();
    let mut saved = vec![aggregate.state().to_bytes()];
    for placed in lines {
        emitted.push(outputs(
            &aggregate.apply(at(placed), placed.line.as_bytes()),
        ));
        saved.push(aggregate.state().to_bytes());
    }
    (aggregate, emitted, saved)
}

fn applying_twice_changes_nothing(settings: &str, lines: &[Placed]) -> Result<(), TestCaseError> {
    let (mut aggregate, _, saved) = one_pass(settings, lines);
    let before = aggregate.state().clone();
    for placed in lines {
        let outcome = aggregate.apply(at(placed), placed.line.as_bytes());
        prop_assert_eq!(outcome, Outcome::AlreadyApplied);
    }
    prop_assert_eq!(aggregate.state(), &before);
    prop_assert_eq!(&aggregate.state().to_bytes(), saved.last().unwrap());
    let counters = &before.counters;
    prop_assert_eq!(
        counters.applied + counters.rejected_total() + counters.late + counters.headers,
        lines.len() as u64,
        "each line counted once"
    );
    Ok(())
}

fn a_saved_state_then_the_rest_is_one_pass(
    settings: &str,
    lines: &[Placed],
    resume: &[usize],
) -> Result<(), TestCaseError> {
    let (aggregate, emitted, saved) = one_pass(settings, lines);
    for (kill_after, bytes) in saved.iter().enumerate() {
        let state = AggregateState::from_bytes(bytes).expect("a saved state reads back");
        let mut restarted =
            Aggregate::restore(common::compile(settings).unwrap(), state).expect("its own config");
        // the feed resumes at or before the first line the state does not hold
        let from = resume[kill_after % resume.len()] % (kill_after + 1);
        let mut after = Vec::new();
        for (index, placed) in lines.iter().enumerate().skip(from) {
            let outputs = outputs(&restarted.apply(at(placed), placed.line.as_bytes()));
            if index < kill_after {
                prop_assert!(
                    outputs.is_empty(),
                    "line {} is in the saved state: nothing again",
                    index
                );
            } else {
                after.push(outputs);
            }
        }
        prop_assert_eq!(
            restarted.state(),
            aggregate.state(),
            "killed after line {}",
            kill_after
        );
        prop_assert_eq!(
            &after[..],
            &emitted[kill_after..],
            "the outputs after the kill, once each"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn applying_a_stream_twice_leaves_the_state_and_the_outputs_unchanged(lines in stream()) {
        applying_twice_changes_nothing(WINDOWED, &lines)?;
        applying_twice_changes_nothing(RUNNING, &lines)?;
    }

    #[test]
    fn a_state_saved_after_any_line_and_read_back_then_the_rest_equals_one_pass(
        lines in stream(),
        resume in prop::collection::vec(0usize..64, 1..8),
    ) {
        a_saved_state_then_the_rest_is_one_pass(WINDOWED, &lines, &resume)?;
        a_saved_state_then_the_rest_is_one_pass(RUNNING, &lines, &resume)?;
    }
}

#[test]
fn a_new_epoch_on_a_lane_is_applied_and_another_config_refuses_the_state() {
    let mut aggregate = common::aggregate(RUNNING);
    let line = b"1700000000000,c1,m1,5";
    assert!(matches!(
        aggregate.apply(LinePosition::at(1, 100), line),
        Outcome::Applied { .. }
    ));
    assert_eq!(
        aggregate.apply(LinePosition::at(1, 40), line),
        Outcome::AlreadyApplied
    );
    // a re-created input is a new epoch: its lines are new, whatever their offsets
    assert!(matches!(
        aggregate.apply(LinePosition::at(2, 40), line),
        Outcome::Applied { .. }
    ));
    assert_eq!(aggregate.state().counters.applied, 2);

    let other = common::compile(&RUNNING.replace(", last_seen = \"last(ts)\"", "")).unwrap();
    let refused = Aggregate::restore(other, aggregate.state().clone()).unwrap_err();
    assert!(
        refused.to_string().contains("written for another config"),
        "{refused}"
    );

    let mut bytes = aggregate.state().to_bytes();
    bytes[8] = 9;
    assert!(AggregateState::from_bytes(&bytes)
        .unwrap_err()
        .to_string()
        .contains("version is 9"));
    assert!(AggregateState::from_bytes(b"not a state").is_err());
}

#[test]
fn a_count_distinct_that_reaches_its_bound_is_flagged_and_counted() {
    let mut aggregate = common::aggregate(&WINDOWED.replace("window = ", "# window = "));
    let lines: Vec<String> = (0..6)
        .map(|merchant| format!("1700000000000,c1,m{merchant},1"))
        .collect();
    common::apply_all(&mut aggregate, &lines);
    let view = aggregate.key(&["c1"]).unwrap();
    assert_eq!(view.saturated, ["merchants"]);
    assert_eq!(
        view.to_json()["values"]["merchants"],
        3,
        "the bound: a lower bound from then on"
    );
    assert_eq!(
        aggregate.state().counters.count_distinct_saturated,
        1,
        "counted once per key"
    );
}
