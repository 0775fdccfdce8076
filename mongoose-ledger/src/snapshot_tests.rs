//! Issue 38.1: snapshots scheduled by what a restart would replay, counted from the
//! files on disk, and the snapshot's failures (a full disk, a kill during its write, a
//! damaged or cut snapshot).

use std::path::Path;

use mongoose_source_file::Line;

use super::journal::decode_snapshot;
use super::tests::test_settings;
use super::*;

/// The snapshot alone (`state.json`, without the outbox records after it).
fn snapshot_in(state_dir: &Path) -> LedgerState {
    let bytes = std::fs::read(LedgerState::path(state_dir)).expect("a snapshot");
    decode_snapshot(&bytes).expect("a whole snapshot")
}

/// Opens the ledger on `settings` with its alerts in `dir`.
fn open(dir: &Path, settings: &LedgerSettings) -> Ledger {
    let alerts = Ledger::open_alerts_file(&dir.join("alerts.txt")).expect("alerts");
    Ledger::open(settings.clone(), Box::new(alerts), None).expect("opened")
}

/// Handles `count` lines `acc{n},1` (each a new account), numbered from `first`.
fn handle(ledger: &mut Ledger, first: u64, count: u64) {
    for number in first..first + count {
        ledger.state.position = number * 10;
        ledger
            .on_line(&Line::from(format!("acc{number},1").as_str()))
            .expect("handled");
    }
}

#[test]
fn the_log_since_the_snapshot_is_counted_across_runs_that_each_stay_under_the_bound() {
    let dir = tempfile::tempdir().expect("dir");
    // 30 records between snapshots; each run writes 10 and is dropped without a stop
    let settings = test_settings(dir.path(), 30);
    for run in 0..5 {
        let mut ledger = open(dir.path(), &settings);
        handle(&mut ledger, run * 10 + 1, 10);
        drop(ledger);
    }
    let snapshot = snapshot_in(&settings.state_dir);
    assert!(
        snapshot.outbox_seq >= 30,
        "a snapshot once 30 records were on disk, though no run wrote 30: it holds {}",
        snapshot.outbox_seq
    );
    let loaded = LedgerState::load(&settings.state_dir).expect("loaded");
    assert_eq!(loaded.applied, 50);
    assert!(
        loaded.outbox_seq - snapshot.outbox_seq < 30 + 10,
        "the records after the snapshot stay within the bound and one run"
    );
}

#[test]
fn a_restart_that_replays_a_log_past_the_bound_snapshots_before_processing() {
    let dir = tempfile::tempdir().expect("dir");
    let mut settings = test_settings(dir.path(), 1_000_000);
    let mut ledger = open(dir.path(), &settings);
    handle(&mut ledger, 1, 200);
    drop(ledger);
    assert_eq!(
        snapshot_in(&settings.state_dir).outbox_seq,
        0,
        "no snapshot yet"
    );
    // the bound now: 100 records, and the log holds 200
    settings.compact_every = 100;
    let ledger = open(dir.path(), &settings);
    let snapshot = snapshot_in(&settings.state_dir);
    assert_eq!(
        snapshot.outbox_seq,
        ledger.outbox.last_seq(),
        "the replayed records are in a snapshot before any line"
    );
    assert_eq!(snapshot.applied, 200);
    assert_eq!((ledger.log.records, ledger.log.bytes), (0, 0));
    drop(ledger);
    // by size alone too: the next restart replays nothing more than what came after
    settings.compact_every = 1_000_000;
    let mut ledger = open(dir.path(), &settings);
    handle(&mut ledger, 201, 50);
    let bytes = ledger.log.bytes;
    assert!(bytes > 0, "the bytes of the records written are counted");
    drop(ledger);
    settings.snapshot_bytes = bytes;
    let ledger = open(dir.path(), &settings);
    assert_eq!(snapshot_in(&settings.state_dir).applied, 250);
    assert_eq!(ledger.state.applied, 250);
}

#[test]
fn a_temp_file_a_kill_left_during_a_snapshot_is_never_read_and_is_removed() {
    let dir = tempfile::tempdir().expect("dir");
    let settings = test_settings(dir.path(), 1_000_000);
    let mut ledger = open(dir.path(), &settings);
    handle(&mut ledger, 1, 20);
    let expected = ledger.state.clone();
    drop(ledger);
    // a kill while the next snapshot was written: its temp file is cut short (it was
    // never renamed over state.json)
    let temporary = LedgerState::temporary_path(&settings.state_dir);
    std::fs::write(&temporary, br#"{"format":2,"crc32":1,"state":{"bala"#).expect("torn");
    let ledger = open(dir.path(), &settings);
    assert_eq!(ledger.state, expected, "the last snapshot and the outbox");
    assert!(!temporary.exists(), "the torn temp file is removed at open");
}

#[test]
fn a_snapshot_cut_short_or_emptied_is_refused_never_skipped() {
    let dir = tempfile::tempdir().expect("dir");
    let settings = test_settings(dir.path(), 10);
    let mut ledger = open(dir.path(), &settings);
    handle(&mut ledger, 1, 25);
    drop(ledger);
    let path = LedgerState::path(&settings.state_dir);
    let whole = std::fs::read(&path).expect("a snapshot");
    for (what, bytes) in [
        ("cut short", &whole[..whole.len() / 2]),
        ("without its newline", &whole[..whole.len() - 1]),
        ("empty", &whole[..0]),
    ] {
        std::fs::write(&path, bytes).expect("damage");
        let alerts = Ledger::open_alerts_file(&dir.path().join("alerts.txt")).expect("alerts");
        let error = Ledger::open(settings.clone(), Box::new(alerts), None)
            .expect_err(&format!("a snapshot {what} is refused"))
            .to_string();
        assert!(
            error.contains(&path.display().to_string()) && error.contains("To recover"),
            "the refusal names the file and what to do ({what}): {error}"
        );
        assert_eq!(std::fs::read(&path).expect("kept"), bytes, "left as it is");
    }
}

#[test]
fn a_snapshot_that_fails_for_a_full_disk_keeps_the_last_one_and_the_lines_go_on() {
    let tmpfs = mongoose_testkit::Tmpfs::mount("8m");
    let mut settings = test_settings(tmpfs.path(), 1_000_000);
    let mut ledger = open(tmpfs.path(), &settings);
    // 20,000 accounts: a snapshot of about 300 KB
    handle(&mut ledger, 1, 20_000);
    let before = snapshot_in(&settings.state_dir);
    // the disk full but for about 64 KB: room for records, not for a snapshot
    let filler = tmpfs.path().join("filler");
    {
        use std::io::Write;
        let mut file = std::fs::File::create(&filler).expect("filler");
        let block = vec![0u8; 4096];
        while file.write_all(&block).is_ok() {}
        let _ = file.sync_all();
    }
    let full = std::fs::metadata(&filler).expect("filler").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&filler)
        .and_then(|file| file.set_len(full.saturating_sub(64 << 10)))
        .expect("room for records");
    settings.compact_every = 1;
    ledger.settings.compact_every = 1;
    handle(&mut ledger, 20_001, 5);
    assert_eq!(
        snapshot_in(&settings.state_dir),
        before,
        "the last snapshot is intact"
    );
    assert!(
        !LedgerState::temporary_path(&settings.state_dir).exists(),
        "no half-written snapshot is left taking space"
    );
    assert!(ledger.log.retry_at.is_some(), "tried again later");
    // the operator frees space: the next snapshot (after its pause) succeeds
    std::fs::remove_file(&filler).expect("space freed");
    ledger.log.retry_at = None;
    handle(&mut ledger, 20_006, 1);
    let after = snapshot_in(&settings.state_dir);
    assert_eq!(after.applied, 20_006, "the snapshot holds every line");
    let expected = ledger.state.clone();
    drop(ledger);
    let ledger = open(tmpfs.path(), &settings);
    assert_eq!(ledger.state, expected, "nothing lost, nothing invented");
}

#[test]
fn the_replay_at_open_applies_a_record_as_decoding_it_does() {
    use super::journal::{replay_into, JournalRecord};
    let records = [
        JournalRecord {
            account: Some(("acc-1".into(), -5)),
            unsaved: vec![("acc_2".into(), 7)],
            applied: 3,
            rejected: 1,
            lane: 2,
            epoch: 9,
            position: 40,
            unsaved_lanes: vec![(1, 9, 30)],
        },
        // a name JSON escapes (this ledger never writes one): still applied
        JournalRecord {
            account: Some(("quo\"te".into(), 1)),
            unsaved: Vec::new(),
            applied: 4,
            rejected: 1,
            lane: 0,
            epoch: 9,
            position: 50,
            unsaved_lanes: Vec::new(),
        },
        JournalRecord {
            account: None,
            unsaved: Vec::new(),
            applied: 4,
            rejected: 2,
            lane: 0,
            epoch: 9,
            position: 60,
            unsaved_lanes: Vec::new(),
        },
    ];
    let mut more: Vec<JournalRecord> = (0..200i64)
        .map(|index| JournalRecord {
            account: (index % 7 != 0)
                .then(|| (format!("a-{index}_Z"), index * 1_000_003 - 99_999_999)),
            unsaved: (0..index % 3)
                .map(|other| (format!("u{other}"), -other))
                .collect(),
            applied: index as u64 * 31,
            rejected: index as u64 % 5,
            lane: (index % 4) as u32,
            epoch: u64::MAX - index as u64,
            position: index as u64 * 977,
            unsaved_lanes: (0..index % 2)
                .map(|lane| (lane as u32 + 5, 3, 10))
                .collect(),
        })
        .collect();
    more[0].account = Some(("min".into(), i64::MIN));
    more[1].account = Some(("max".into(), i64::MAX));
    let (mut decoded, mut replayed) = (LedgerState::default(), LedgerState::default());
    for record in records.iter().chain(&more) {
        let line = record.encode();
        JournalRecord::decode(&line)
            .expect("whole")
            .apply(&mut decoded);
        assert!(replay_into(&line, &mut replayed), "{record:?}");
        assert_eq!(replayed, decoded, "{record:?}");
        assert!(
            !replay_into(&line[..line.len() - 1], &mut replayed),
            "cut short"
        );
        assert!(!replay_into(b"0000000 {}\n", &mut replayed), "not a record");
    }
    // serde's layout of the same record (an earlier build's spacing) reads the same
    let spaced =
        br#"{ "account": ["s", -3], "applied": 9, "rejected": 0, "epoch": 2, "position": 5 }"#;
    let mut line = format!("{:08x} ", crc32fast::hash(spaced)).into_bytes();
    line.extend_from_slice(spaced);
    line.push(b'\n');
    assert!(replay_into(&line, &mut replayed));
    assert_eq!(replayed.balances.get("s"), Some(&-3));
    assert_eq!((replayed.applied, replayed.position), (9, 5));
}
