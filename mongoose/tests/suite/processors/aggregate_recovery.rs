//! The `aggregate` kind's recovery, against the real `mongoose` binary: a state folder
//! moved away, a glob feed's positions per file across kills, a state of another config
//! or a damaged snapshot refused, and a crash loop that still advances with a bounded
//! replay.

use crate::support;

use std::time::Duration;

use mongoose_aggregate::{AggregateSettings, Aggregator};
use support::aggregate::*;
use support::LedgerRun;

#[test]
fn a_state_folder_moved_away_is_rebuilt_from_the_input_and_no_output_is_written_twice() {
    let lines = ledger_input(3_000);
    let run = LedgerRun::new(&text_of(&lines), &config("", TOTALS));
    assert_eq!(run.finish(), 0, "{}", run.log());
    assert_truth(&run, &lines, "the first run");
    // the state is gone, the feed's pointer is at the end: the aggregate's saved
    // positions (none) make the feed read its input again from the start
    std::fs::rename(run.path("state"), run.path("state.old")).expect("moved away");
    assert_eq!(run.finish(), 0, "{}", run.log());
    assert_truth(&run, &lines, "the state rebuilt from the input");
}

#[test]
fn an_aggregate_on_a_glob_feed_keeps_a_position_per_file_across_kills() {
    let first = ledger_input(12_000);
    let second: Vec<String> = ledger_input(9_000)
        .into_iter()
        .map(|line| line.replacen("acc", "other", 1))
        .collect();
    let text = config("", TOTALS).replace(
        "path = \"input.txt\"",
        "path = \"logs/*.log\"\nscan_interval_millis = 20",
    );
    let run = LedgerRun::new("", &text);
    std::fs::create_dir_all(run.path("logs")).expect("logs");
    std::fs::write(run.path("logs/a.log"), text_of(&first)).expect("a.log");
    std::fs::write(run.path("logs/b.log"), text_of(&second)).expect("b.log");
    let total = (first.len() + second.len()) as u64;
    let applied = || {
        let settings: AggregateSettings = toml::from_str(TOTALS).expect("settings");
        let aggregator = Aggregator::compile(settings, "settings").expect("compiles");
        mongoose::aggregate::store::load(&run.path("state"), aggregator).map_or(0, |aggregate| {
            let counters = &aggregate.state().counters;
            counters.applied + counters.rejected_total()
        })
    };
    let mut mid_way = 0;
    for round in 1..=4u64 {
        let mut child = run.spawn(false);
        let target = total * round / 6;
        run.wait_until(&mut child, &format!("applied {target} lines"), || {
            applied() >= target
        });
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
        if applied() < total {
            mid_way += 1;
        }
    }
    assert!(mid_way >= 2, "the kills landed mid-way ({mid_way} of 4)");
    assert_eq!(run.finish(), 0, "{}", run.log());
    let aggregate = state_of(&run, TOTALS);
    let lanes = &aggregate.state().lanes;
    assert_eq!(lanes.len(), 2, "one position per file: {lanes:?}");
    // the truth of both files: their accounts are apart, their lines in any order
    let mut all = first.clone();
    all.extend(second.iter().cloned());
    let truth = truth(&all);
    let state = aggregate.state();
    assert_eq!(
        state.counters.applied,
        (all.len() - truth.malformed.len()) as u64,
        "every good line of both files applied once"
    );
    assert_eq!(
        state.counters.rejected_total(),
        truth.malformed.len() as u64
    );
    for (account, (count, total)) in &truth.keys {
        let json = aggregate.key(&[account]).expect("the key").to_json();
        assert_eq!(json["values"]["n"], *count, "count of {account}");
        assert_eq!(json["values"]["total"], *total, "total of {account}");
    }
    let mut emitted = lines_of(&run, "out.txt");
    let mut expected = truth.emits.clone();
    emitted.sort();
    expected.sort();
    assert_eq!(emitted, expected, "each rule output once");
    assert_eq!(
        lines_of(&run, "dead.txt").len(),
        truth.malformed.len(),
        "each malformed line dead-lettered once"
    );
}

#[test]
fn a_state_of_another_config_or_a_damaged_snapshot_is_refused_and_left_as_it_is() {
    let lines = ledger_input(1_000);
    let run = LedgerRun::new(&text_of(&lines), &config("", TOTALS));
    assert_eq!(run.finish(), 0, "{}", run.log());
    let snapshot = run.path("state/state.snapshot");
    let before = std::fs::read(&snapshot).expect("a snapshot");
    // another group_by: the saved keys would mean something else
    let other = TOTALS
        .replace(
            "group_by = [\"account\"]",
            "group_by = [\"account\", \"amount\"]",
        )
        .replace("{account} negative", "{account} {amount} negative");
    std::fs::write(run.path("mongoose.toml"), config("", &other)).expect("config");
    let (code, log) = run.finish_with_log();
    assert_ne!(code, 0, "{log}");
    assert!(
        log.contains("written for another config") && log.contains("by account,amount"),
        "says which config the state was written for: {log}"
    );
    assert_eq!(
        std::fs::read(&snapshot).expect("kept"),
        before,
        "left as it is"
    );
    // a changed byte in the snapshot
    std::fs::write(run.path("mongoose.toml"), config("", TOTALS)).expect("config");
    let mut damaged = before.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 0x40;
    std::fs::write(&snapshot, &damaged).expect("damaged");
    let (code, log) = run.finish_with_log();
    assert_ne!(code, 0, "{log}");
    assert!(
        log.contains("state.snapshot")
            && log.contains("fails its checksum")
            && log.contains("To recover"),
        "names the file, what is wrong and what to do: {log}"
    );
    assert_eq!(
        std::fs::read(&snapshot).expect("kept"),
        damaged,
        "left as it is"
    );
}

#[test]
fn an_aggregate_killed_every_fraction_of_a_second_still_advances_and_replays_a_bounded_log() {
    let lines = ledger_input(120_000);
    let total_bytes = text_of(&lines).len() as u64;
    let settings = TOTALS.replace("snapshot_every = 300", "snapshot_every = 2000");
    let run = LedgerRun::new(&text_of(&lines), &config("", &settings));
    let mut kills = 0;
    let mut longest_replay = 0;
    while committed(&run) < total_bytes && kills < 200 {
        let mut child = run.spawn(false);
        // 50 to 250 ms of life, varied
        std::thread::sleep(Duration::from_millis(50 + (kills * 37) % 200));
        if child.try_wait().expect("status").is_some() {
            panic!("the server exited: {}", run.log());
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
        kills += 1;
        // what the next start replays: the outbox records after the snapshot
        let snapshot = mongoose::aggregate::store::read_snapshot(&run.path("state/state.snapshot"))
            .expect("a readable snapshot");
        let seq = snapshot.map_or(0, |snapshot| snapshot.seq);
        let recovery = mongoose_outbox::read(&run.path("state/outbox")).expect("a readable outbox");
        let replay = recovery
            .admissions
            .iter()
            .filter(|(record, _)| *record > seq)
            .count();
        longest_replay = longest_replay.max(replay);
    }
    eprintln!("{kills} kills; the longest replay: {longest_replay} records");
    assert!(kills >= 5, "killed mid-way: {kills} kills");
    assert!(
        longest_replay <= 2 * 2000 + 1000,
        "a restart replays a bounded log: {longest_replay} records after the snapshot"
    );
    assert_eq!(run.finish(), 0, "{}", run.log());
    assert_truth(
        &run,
        &lines,
        &format!("after {kills} SIGKILLs in a crash loop"),
    );
}
