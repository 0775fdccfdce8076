//! The ledger's state store under damage (issue 9, item 4): its records in a crc32-framed
//! outbox segment (`state/outbox/outbox-<first seq>.log`, issue 13) after a checksummed
//! snapshot (`state.json`). A crash only ever cuts the last record short, and that
//! record's line was never committed (the feed's pointer moves only after the record is
//! durable), so the restart cuts it off and the line is read again. Anything else that
//! fails its checksum is damage: the ledger refuses to start, leaves its files as they
//! are and says which file, which byte and what to do.
//!
//! Each test runs the `mongoose` binary with the ledger on a COMMITED file feed as a
//! child process, damages the state folder between runs with real bytes, and starts the
//! binary again.

use crate::support;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use mongoose_ledger::LedgerState;
use support::{balances_of, ledger_config, LedgerRun};

/// Lines of the first run.
const FIRST: usize = 200;

fn line(index: usize) -> String {
    let amount = (index % 7) as i64 - 3 + if index % 31 == 0 { -40 } else { 0 };
    format!("acc{},{amount}\n", index % 20)
}

fn lines(range: std::ops::Range<usize>) -> String {
    range.map(line).collect()
}

fn expected_balances(total: usize) -> BTreeMap<String, i64> {
    balances_of(lines(0..total).lines())
}

/// The segment header's length: the durable layer's header in format version 3 (its
/// length in its bytes 4..6), 40 bytes in version 2 (it names the owner), 24 in
/// version 1.
fn header_len(segment: &[u8]) -> usize {
    if segment.starts_with(b"MGDH") {
        return usize::from(u16::from_le_bytes([segment[4], segment[5]]));
    }
    match segment
        .get(8..12)
        .map(|version| u32::from_le_bytes(version.try_into().expect("4 bytes")))
    {
        Some(1) => 24,
        _ => 40,
    }
}

/// The segment's records of every kind (admissions, and the outcomes of alerts the
/// ledger records as the sink publishes them) as `(byte offset, whole frame)`: a u32
/// length, a u32 crc32, then the payload (a kind byte, the sequence, the postcard body).
fn frames(segment: &[u8]) -> Vec<(usize, Vec<u8>)> {
    let mut records = Vec::new();
    let mut offset = header_len(segment);
    while offset + 8 <= segment.len() {
        let length =
            u32::from_le_bytes(segment[offset..offset + 4].try_into().expect("4 bytes")) as usize;
        let end = offset + 8 + length;
        if end > segment.len() {
            break;
        }
        records.push((offset, segment[offset..end].to_vec()));
        offset = end;
    }
    records
}

/// The segment's admissions (one per line) as `(byte offset, whole frame)`.
fn records(segment: &[u8]) -> Vec<(usize, Vec<u8>)> {
    frames(segment)
        .into_iter()
        .filter(|(_, frame)| frame.get(8) == Some(&1))
        .collect()
}

/// Flips one bit in the body of the record at `offset` (past its kind byte and
/// sequence): the record keeps its shape, only its checksum fails.
fn flip_a_byte_inside(segment: &mut [u8], offset: usize) -> usize {
    let at = offset + 8 + 1 + 8 + 2;
    segment[at] ^= 0x01;
    at
}

struct Run {
    run: LedgerRun,
}

impl Run {
    /// A ledger over `FIRST` lines, compacting every `compact_every` records.
    fn new(compact_every: u64) -> Self {
        let mut run = LedgerRun::new(
            &lines(0..FIRST),
            &ledger_config(
                "",
                "",
                &format!(
                    "state_dir = \"state\", alerts = \"alerts.txt\", compact_every = {compact_every}"
                ),
            ),
        );
        run.log_filter = "warn";
        Run { run }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.run.path(name)
    }

    /// The outbox's first (here: only) segment.
    fn journal_path(&self) -> PathBuf {
        LedgerState::outbox_path(&self.path("state")).join("outbox-00000000000000000001.log")
    }

    fn journal(&self) -> Vec<u8> {
        std::fs::read(self.journal_path()).expect("the outbox segment")
    }

    fn state(&self) -> LedgerState {
        self.run.state_in("state")
    }

    fn pointer(&self) -> u64 {
        self.run.pointer()
    }

    fn append_input(&self, range: std::ops::Range<usize>) {
        std::fs::OpenOptions::new()
            .append(true)
            .open(self.path("input.txt"))
            .expect("input")
            .write_all(lines(range).as_bytes())
            .expect("appended");
    }

    /// Runs the server until it settles (or fails); returns its exit code and what it
    /// wrote on stderr during this run.
    fn run_until_settled(&self) -> (i32, String) {
        self.run.finish_with_log()
    }

    /// The first run: every line applied, the pointer past the last one.
    fn settle_first_run(&self) {
        let (code, stderr) = self.run_until_settled();
        assert_eq!(code, 0, "the first run settles lossless: {stderr}");
        let state = self.state();
        assert_eq!(state.applied, FIRST as u64);
        assert_eq!(state.balances, expected_balances(FIRST));
        assert_eq!(
            self.pointer(),
            state.position,
            "the commit covers the last line"
        );
    }

    /// A restart that must be refused: non-zero, the segment and the pointer untouched,
    /// and a message naming the segment, the byte and what to do.
    fn assert_refused(&self, journal: &[u8], offset: usize) -> String {
        let pointer = self.pointer();
        let (code, stderr) = self.run_until_settled();
        assert_ne!(
            code,
            0,
            "the ledger refused to start; it ran on with {} lines applied: {stderr}",
            LedgerState::load(&self.path("state"))
                .map(|state| state.applied.to_string())
                .unwrap_or_else(|error| error.to_string())
        );
        assert_eq!(
            self.journal(),
            journal,
            "the segment is left byte for byte as it was"
        );
        assert_eq!(self.pointer(), pointer, "nothing was read or committed");
        let journal_name = self.journal_path().display().to_string();
        for expected in [
            journal_name.as_str(),
            &format!("at byte {offset}"),
            ".readPointer",
            "backup",
        ] {
            assert!(
                stderr.contains(expected),
                "the message names {expected:?}: {stderr}"
            );
        }
        stderr
    }
}

#[test]
fn a_corrupt_record_in_the_middle_of_the_journal_refuses_to_start() {
    let run = Run::new(100_000);
    run.settle_first_run();
    let mut journal = run.journal();
    let all = records(&journal);
    assert_eq!(all.len(), FIRST, "one record per line");
    let (offset, _) = all[FIRST / 2];
    flip_a_byte_inside(&mut journal, offset);
    std::fs::write(run.journal_path(), &journal).expect("damaged");
    // lines a silent restart would apply on top of the wrong state and commit
    run.append_input(FIRST..FIRST + 50);
    let stderr = run.assert_refused(&journal, offset);
    assert!(stderr.contains("a whole record follows it"), "{stderr}");
    // still refused on a second attempt, and --dump-state's loader refuses too
    run.assert_refused(&journal, offset);
    let error = LedgerState::load(&run.path("state")).expect_err("the loader refuses");
    assert!(
        error.message().contains(&format!("at byte {offset}")),
        "{error}"
    );
}

#[test]
fn only_a_damaged_last_record_is_a_torn_write() {
    let run = Run::new(100_000);
    run.settle_first_run();
    // a crash while the record of line FIRST was written: the journal ends with a
    // part of a record, and the pointer is still before that line (it moves only after
    // the record is saved)
    let whole = run.journal();
    let (_, last) = records(&whole).pop().expect("a record");
    let mut torn = whole.clone();
    torn.extend_from_slice(&last[..last.len() / 2]);
    std::fs::write(run.journal_path(), &torn).expect("torn tail");
    run.append_input(FIRST..FIRST + 1);
    let (code, stderr) = run.run_until_settled();
    assert_eq!(
        code, 0,
        "a torn last record is a crash's, not damage: {stderr}"
    );
    assert!(stderr.contains("torn"), "the cut is logged: {stderr}");
    let after = run.journal();
    assert!(
        after.starts_with(&whole),
        "only the torn record was cut off: the whole records before it are kept"
    );
    assert_eq!(
        records(&after).len(),
        FIRST + 1,
        "the torn record was replaced by the line's own"
    );
    let state = run.state();
    assert_eq!(state.applied, (FIRST + 1) as u64, "every line exactly once");
    assert_eq!(state.balances, expected_balances(FIRST + 1));
    assert_eq!(state.position, run.pointer());

    // the same damage one record earlier, with a whole record after it, is not a
    // torn write: refused
    let mut journal = after;
    let (offset, _) = records(&journal)[FIRST - 1];
    flip_a_byte_inside(&mut journal, offset);
    std::fs::write(run.journal_path(), &journal).expect("damaged");
    run.append_input(FIRST + 1..FIRST + 2);
    run.assert_refused(&journal, offset);
}

#[test]
fn a_whole_last_record_that_fails_its_checksum_is_damage_not_a_torn_write() {
    // a crash cuts a record short; a whole record (with its newline) that fails its
    // checksum was changed after it was written, and its line may be committed: here
    // the pointer is past it, so cutting it off would lose that line for good
    let run = Run::new(100_000);
    run.settle_first_run();
    let mut journal = run.journal();
    // the last record of the segment (the outcomes of the last alerts, recorded at the
    // stop, follow the last line's admission)
    let (offset, _) = frames(&journal).pop().expect("a record");
    let flipped = flip_a_byte_inside(&mut journal, offset);
    std::fs::write(run.journal_path(), &journal).expect("damaged");
    let stderr = run.assert_refused(&journal, offset);
    assert!(stderr.contains("not a torn write"), "{stderr}");

    // the same with its checksum field damaged instead
    let mut journal = run.journal();
    journal[flipped] ^= 0x01; // undo the flip
    journal[offset + 4] ^= 0x01;
    std::fs::write(run.journal_path(), &journal).expect("damaged checksum");
    run.assert_refused(&journal, offset);
}

#[test]
fn the_recovery_the_message_gives_applies_every_line_exactly_once() {
    let run = Run::new(100_000);
    run.settle_first_run();
    let mut journal = run.journal();
    let (offset, _) = records(&journal)[FIRST / 3];
    flip_a_byte_inside(&mut journal, offset);
    std::fs::write(run.journal_path(), &journal).expect("damaged");
    run.append_input(FIRST..FIRST + 30);
    run.assert_refused(&journal, offset);
    // what the message says: move the state folder away, remove the pointer file
    std::fs::rename(run.path("state"), run.path("state.damaged")).expect("moved away");
    std::fs::remove_file(run.run.pointer_path()).expect("pointer removed");
    let (code, stderr) = run.run_until_settled();
    assert_eq!(code, 0, "the rebuild settles lossless: {stderr}");
    let state = run.state();
    assert_eq!(
        state.applied,
        (FIRST + 30) as u64,
        "every line exactly once"
    );
    assert_eq!(state.balances, expected_balances(FIRST + 30));
}

#[test]
fn a_snapshot_that_fails_its_checksum_refuses_to_start() {
    // 110 lines with a snapshot every 100 records: state.json holds lines 1-100, the
    // outbox lines 101-110 (accounts acc0 to acc9)
    let run = Run::new(100);
    std::fs::write(run.path("input.txt"), lines(0..110)).expect("input");
    let (code, stderr) = run.run_until_settled();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(run.state().balances, expected_balances(110));
    let snapshot_path = LedgerState::path(&run.path("state"));
    let mut snapshot = std::fs::read(&snapshot_path).expect("a snapshot was written");
    // one digit of the balance of acc15 (no journal record after the snapshot has it),
    // the file still valid JSON
    let key = b"\"acc15\":";
    let at = snapshot
        .windows(key.len())
        .position(|window| window == key)
        .expect("acc15 in the snapshot")
        + key.len();
    let digit = (at..snapshot.len())
        .find(|at| snapshot[*at].is_ascii_digit())
        .expect("a digit");
    snapshot[digit] ^= 0x01;
    std::fs::write(&snapshot_path, &snapshot).expect("damaged");
    let journal = run.journal();
    let pointer = run.pointer();
    let (code, stderr) = run.run_until_settled();
    assert_ne!(
        code,
        0,
        "a damaged snapshot is refused, not taken (acc15 {:?}, expected {:?}): {stderr}",
        LedgerState::load(&run.path("state")).map(|state| state.balances.get("acc15").copied()),
        expected_balances(110).get("acc15")
    );
    assert!(
        stderr.contains(&snapshot_path.display().to_string())
            && stderr.contains("checksum")
            && stderr.contains(".readPointer"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&snapshot_path).expect("snapshot"), snapshot);
    assert_eq!(run.journal(), journal);
    assert_eq!(run.pointer(), pointer);
}
