//! The strict truth model (issue 35): each check against a constructed run, through the
//! harness's own code, so that a check that cannot fail is seen failing here.
//!
//! * a refusal counts only where the book promises one, and names the damaged file;
//! * an exit 3 with nothing lost is a false alarm, however many faults could have lost;
//! * a shared account is checked with the exact sums its possibly-missing lines allow,
//!   also after the source was re-created;
//! * a crash loop whose kills leave nothing more applied while lines wait fails.

use std::path::Path;

use mongoose_chaos::run::{false_alarm, LossFacts};
use mongoose_chaos::scenario::{Damage, StateFile, Step};
use mongoose_chaos::steps::Touched;
use mongoose_chaos::truth::{Expect, FailureKind, Truth};
use mongoose_chaos::world::World;
use mongoose_ledger::LedgerState;

mod common;

/// A world of the `state-damage` family's seed 1071 (forward or ledger into a file
/// sink); nothing runs the binary.
fn world(scratch: &Path) -> World {
    common::seed_world("state-damage", 1071, scratch.join("no-mongoose"), scratch)
}

fn kinds(world: &World) -> Vec<FailureKind> {
    world.failures.iter().map(|failure| failure.kind).collect()
}

#[test]
fn the_truth_model_fails_a_refusal_that_names_no_file() {
    let scratch = tempfile::tempdir().expect("scratch");
    let mut world = world(scratch.path());
    world.touched.push(Touched {
        what: StateFile::SinkState,
        how: Some(Damage::FlipByte { at: 500 }),
    });
    // refused, but naming nothing an operator could act on
    assert!(world.refused_after_fault(1, "mongoose: the server could not start: invalid state"));
    assert_eq!(
        kinds(&world),
        [FailureKind::BadRefusal],
        "{:?}",
        world.failures
    );

    // the same refusal naming the damaged file passes
    let mut world = self::world(&scratch.path().join("second"));
    world.touched.push(Touched {
        what: StateFile::SinkState,
        how: Some(Damage::FlipByte { at: 500 }),
    });
    assert!(world.refused_after_fault(
        1,
        "sink 'out': refusing to start on data/sinks/out-1/out.txt.sinkstate: the record at byte 228 is damaged"
    ));
    assert_eq!(kinds(&world), [], "{:?}", world.failures);

    // a refusal where the book promises a recovery (a deleted ledger state starts over)
    let mut world = self::world(&scratch.path().join("third"));
    world.touched.push(Touched {
        what: StateFile::LedgerStateDir,
        how: None,
    });
    world.refused_after_fault(
        1,
        &format!("the state {} is gone", world.path("state").display()),
    );
    assert_eq!(
        kinds(&world),
        [FailureKind::BadRefusal],
        "{:?}",
        world.failures
    );
}

#[test]
fn the_truth_model_fails_exit_3_when_nothing_was_lost() {
    // faults that could lose, each of which the server can tell: nothing missing
    let faults = ["copytruncate".to_owned(), "delete-input".to_owned()];
    let failure = false_alarm(&LossFacts::default(), &faults).expect("a false alarm");
    assert_eq!(failure.kind, FailureKind::FalseAlarm);
    assert!(
        failure.detail.contains("copytruncate"),
        "{}",
        failure.detail
    );
    // something missing, or a fault the server could not tell about: exit 3 stands
    let missing = LossFacts {
        missing_reported: 1,
        ..LossFacts::default()
    };
    assert!(false_alarm(&missing, &faults).is_none());
    let unseen = LossFacts {
        uncertain: vec!["recreate-source (while stopped)".to_owned()],
        ..LossFacts::default()
    };
    assert!(false_alarm(&unseen, &faults).is_none());
}

#[test]
fn the_truth_model_checks_shared_accounts_after_a_recreated_source() {
    let scratch = tempfile::tempdir().expect("scratch");
    let world = world(scratch.path());
    let mut truth = Truth::new(
        mongoose_chaos::scenario::Workload::Ledger,
        1,
        &world.scenario.options,
        1,
    );
    truth.new_lines(0, 6, None);
    // six lines of one shared account
    for (record, amount) in truth.lines.iter_mut().zip([1, 2, -1, 3, 1, -2]) {
        record.account = "h0x0".to_owned();
        record.amount = amount;
        record.hot = true;
        record.text = format!("h0x0,{amount}");
    }
    // the source was deleted and made again: its first two lines may never have been
    // read (no report owed)
    truth.mark_maybe([0, 1], false);
    assert!(matches!(truth.lines[0].expect, Expect::Maybe { .. }));
    let state = |balance: i64, applied: u64| {
        let mut state = LedgerState::default();
        state.balances.insert("h0x0".to_owned(), balance);
        state.applied = applied;
        state
    };
    // the must lines add up to 1; the maybes (1, 2) may add 0, 1, 2 or 3
    for (balance, applied) in [(1, 4), (2, 5), (3, 5), (4, 6)] {
        let (failures, _) = truth.check_ledger(&state(balance, applied));
        assert!(failures.is_empty(), "{balance}: {failures:?}");
    }
    // the line of 3 applied twice, with both maybes: 7, which no subset gives
    let (failures, _) = truth.check_ledger(&state(7, 7));
    assert_eq!(
        failures
            .iter()
            .map(|failure| failure.kind)
            .collect::<Vec<_>>(),
        [FailureKind::Doubled],
        "{failures:?}"
    );
    // a balance within reach, but more lines counted applied than there are
    let (failures, _) = truth.check_ledger(&state(4, 7));
    assert_eq!(failures.len(), 1, "{failures:?}");
}

#[test]
fn the_crash_loop_family_fails_a_run_without_progress() {
    let scratch = tempfile::tempdir().expect("scratch");
    let mut world = common::seed_world(
        "crash-loop-progress",
        2,
        scratch.path().join("no-mongoose"),
        scratch.path(),
    );
    // the seed's first step: a large input
    let Step::Append { lines, stream, .. } = world.scenario.steps[0].clone() else {
        panic!("the family starts with an input");
    };
    world
        .step(&Step::Append {
            lines: lines.min(2_000),
            stream,
            bytes: None,
        })
        .expect("input");
    let mut progress = world.start_progress(10);
    assert_eq!(progress.last, 0);
    // ten kills, nothing applied: a stall
    world.check_progress(&mut progress, 10);
    // ten more that applied something: progress
    write_applied(&world, 100);
    world.check_progress(&mut progress, 20);
    world.end_progress(progress, 20);
    assert_eq!(
        kinds(&world),
        [FailureKind::NoProgress],
        "{:?}",
        world.failures
    );
    assert!(
        world.failures[0].detail.contains("kills 1-10"),
        "{}",
        world.failures[0].detail
    );

    // a loop that moves every ten kills passes
    let mut world = common::seed_world(
        "crash-loop-progress",
        2,
        scratch.path().join("no-mongoose"),
        &scratch.path().join("second"),
    );
    world
        .step(&Step::Append {
            lines: 500,
            stream: 0,
            bytes: None,
        })
        .expect("input");
    let mut progress = world.start_progress(10);
    write_applied(&world, 10);
    world.check_progress(&mut progress, 10);
    write_applied(&world, 20);
    world.check_progress(&mut progress, 20);
    world.end_progress(progress, 20);
    assert_eq!(kinds(&world), [], "{:?}", world.failures);
}

/// Makes the consumers' applied count `count`: the ledger's state, or the sink's lines.
fn write_applied(world: &World, count: u64) {
    match world.scenario.workload {
        mongoose_chaos::scenario::Workload::Ledger => {
            let mut state = LedgerState::default();
            for index in 0..count {
                state.balances.insert(format!("u0x{index}"), 1);
            }
            state.applied = count;
            state
                .save(&world.path("state"), false)
                .expect("a ledger state");
        }
        mongoose_chaos::scenario::Workload::Forward => {
            let lines: String = (0..count).map(|index| format!("line {index}\n")).collect();
            std::fs::write(world.path("out/out.txt"), lines).expect("the output");
        }
        mongoose_chaos::scenario::Workload::Aggregate => {
            unreachable!("the aggregate family's crash loop checks no progress")
        }
    }
}

#[test]
fn the_reload_check_fails_a_data_dir_change_that_was_not_refused() {
    use mongoose_chaos::scenario::ReloadChange;
    use mongoose_chaos::steps::reload_verdict;
    // the code before issue 36 answered `unchanged` (reload family seeds 11 and 22)
    let found = reload_verdict(ReloadChange::DataDir, true, "unchanged", "");
    assert!(
        found
            .as_deref()
            .is_some_and(|detail| detail.contains("data_dir")),
        "{found:?}"
    );
    // refused, naming the key: as promised
    assert_eq!(
        reload_verdict(
            ReloadChange::DataDir,
            true,
            "refused",
            "`data_dir` changed: restart to move it"
        ),
        None
    );
    // an empty file refused for another reason (the admin address) names no file
    assert!(reload_verdict(
        ReloadChange::Empty,
        true,
        "refused",
        "`admin` changed: restart to apply it"
    )
    .is_some());
    // a replacement must be taken
    assert!(reload_verdict(
        ReloadChange::ReplaceSink { consumer: 1 },
        true,
        "refused",
        "x"
    )
    .is_some());
    // a stopped server reads the file at its next start: no reload to judge
    assert_eq!(
        reload_verdict(ReloadChange::DataDir, false, "unchanged", ""),
        None
    );
}

#[test]
fn the_mixed_consumer_check_finds_what_a_keyless_consumer_missed_or_got_under_two_keys() {
    use mongoose_chaos::truth::{OutputRecord, Promise};
    let scratch = tempfile::tempdir().expect("scratch");
    let world = world(scratch.path());
    let mut truth = Truth::new(
        mongoose_chaos::scenario::Workload::Forward,
        1,
        &world.scenario.options,
        5,
    );
    truth.new_lines(0, 10, None);
    let keyed = |range: std::ops::Range<usize>, key: &str| -> Vec<OutputRecord> {
        range
            .map(|index| OutputRecord {
                key: Some(format!("{key}{index}")),
                body: truth.lines[index].text.clone(),
            })
            .collect()
    };
    // the HTTP consumer beside a file sink got only the lines after the sink's
    // position (mixed-consumers seed 53 on the code before issue 36)
    let (failures, _) =
        truth.check_forwarded(&keyed(6..10, "k"), Promise::AtLeastOnceKeyed, |_| true, 0);
    assert_eq!(
        failures
            .iter()
            .map(|failure| failure.kind)
            .collect::<Vec<_>>(),
        [FailureKind::Lost]
    );
    // every line, the first six twice under another key (seed 34)
    let mut twice = keyed(0..10, "k");
    twice.extend(keyed(0..6, "other"));
    let (failures, _) = truth.check_forwarded(&twice, Promise::AtLeastOnceKeyed, |_| true, 0);
    assert_eq!(
        failures
            .iter()
            .map(|failure| failure.kind)
            .collect::<Vec<_>>(),
        [FailureKind::Doubled]
    );
    // a writer renamed once by a reload may carry a second key
    let (failures, _) = truth.check_forwarded(&twice, Promise::AtLeastOnceKeyed, |_| true, 1);
    assert!(failures.is_empty(), "{failures:?}");
    // a line written while the consumer was removed is not owed
    let (failures, _) = truth.check_forwarded(
        &keyed(0..6, "k"),
        Promise::AtLeastOnceKeyed,
        |index| index < 6,
        0,
    );
    assert!(failures.is_empty(), "{failures:?}");
}
