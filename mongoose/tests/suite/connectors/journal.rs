//! The journal connector in the server (issue 14): the `mongoose` binary loads the
//! `journal` plugin (built by cargo in the test from `plugins/journal`) from its
//! `plugin_dir` and runs the ledger on a journal feed while another process
//! (`mongoose journal append`) appends to the journal. The server is killed with
//! SIGKILL several times and restarted: the tailer's committed index is never ahead of
//! the ledger's saved position, and in the end every excerpt is applied exactly once
//! (the consumer-side guard skips what the commit lag gives again).

use crate::support;

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mongoose_journal::TailerStore;
use mongoose_testkit::{build_plugin, plugin_dir};
use support::{assert_applied_once, copy_dir, plugin_ledger_config, wait_exit, LedgerRun};

const TOTAL: usize = 40_000;

fn line(index: usize) -> String {
    let amount = (index % 7) as i64 - 3;
    format!("acc{},{amount}", index % 50)
}

fn config(dir: &Path, guard: bool) -> String {
    plugin_ledger_config(
        &dir.join("plugins").display().to_string(),
        "journal",
        &format!(
            r#"path = "{}", tailer = "ledger""#,
            dir.join("journal").display()
        ),
        &format!(r#"state_dir = "state", alerts = "alerts.txt", guard = {guard}"#),
    )
}

/// The next index the ledger's tailer committed (0 before any commit).
fn committed(dir: &Path) -> u64 {
    let store = TailerStore::open(dir.join("journal").join("tailers"), "ledger")
        .expect("the tailer store opens once the server is dead");
    store.load().unwrap_or(0)
}

/// `mongoose journal append` fed `TOTAL` lines in small paced chunks by a thread.
fn writer(dir: &Path) -> (Child, std::thread::JoinHandle<()>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mongoose"))
        .args(["journal", "append"])
        .arg(dir.join("journal"))
        .args(["--sync-every", "1000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the journal writer starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let feeder = std::thread::spawn(move || {
        for chunk in (0..TOTAL).collect::<Vec<_>>().chunks(400) {
            let text: String = chunk.iter().map(|index| line(*index) + "\n").collect();
            stdin.write_all(text.as_bytes()).expect("the writer reads");
            std::thread::sleep(Duration::from_millis(3));
        }
    });
    (child, feeder)
}

#[test]
fn the_journal_source_under_sigkill_applies_every_excerpt_exactly_once_with_the_guard() {
    let library = build_plugin("journal-plugin", &[]);
    let run = LedgerRun::new("", "");
    plugin_dir(run.dir.path(), &[&library]);
    std::fs::write(run.path("mongoose.toml"), config(run.dir.path(), true)).expect("config");

    let (mut appender, feeder) = writer(run.dir.path());
    let kills = run.kill_rounds(5, (3_000, 2_000, TOTAL as u64), || {
        committed(run.dir.path())
    });
    assert!(kills >= 3, "killed while it worked ({kills} kills)");
    feeder.join().expect("the feeder thread");
    let status = wait_exit(&mut appender, "the journal writer");
    assert!(status.success(), "the journal writer failed: {status}");

    assert_eq!(
        run.finish(),
        0,
        "the last run settled lossless: {}",
        run.log()
    );
    let state = run.state_in("state");
    let expected: Vec<String> = (0..TOTAL).map(line).collect();
    assert_applied_once(&state, &expected, &format!("the excerpts: {}", run.log()));
    assert_eq!(state.position, TOTAL as u64, "the last excerpt's position");
    assert_eq!(
        committed(run.dir.path()),
        TOTAL as u64,
        "the final commit covers everything"
    );
}

/// The journal plugin's sink: a `forward` run from a file feed into a journal appends
/// every line once, in order, each answered published with its index (the run settles
/// lossless only once every output is published).
#[test]
fn a_forward_run_into_a_journal_sink_appends_every_line_once() {
    let library = build_plugin("journal-plugin", &[]);
    let lines: Vec<String> = (0..5_000).map(line).collect();
    let input: String = lines.iter().map(|line| format!("{line}\n")).collect();
    let run = LedgerRun::new(&input, "");
    plugin_dir(run.dir.path(), &[&library]);
    let journal = run.path("out.journal");
    let config = format!(
        r#"
plugin_dir = "plugins"

[[feeds]]
name = "lines"
source = "file"
path = "input.txt"
read_strategy = "COMMITED"

[[sinks]]
name = "out"
kind = "journal"
settings = {{ path = "{journal}" }}

[[groups]]
name = "forward"
[[groups.processors]]
name = "copy"
kind = "forward"
settings = {{ feed = "lines", sink = "out" }}
"#,
        journal = journal.display()
    );
    std::fs::write(run.path("mongoose.toml"), config).expect("config");
    assert_eq!(run.finish(), 0, "settled lossless: {}", run.log());
    let journal =
        mongoose_journal::Journal::open(&journal, mongoose_journal::JournalConfig::default())
            .expect("the sink's journal");
    let mut tailer = journal.tailer();
    let mut appended = Vec::new();
    while let Some(excerpt) = tailer.next().expect("readable") {
        appended.push(String::from_utf8(excerpt.bytes().to_vec()).expect("text"));
    }
    assert_eq!(appended, lines, "every line once, in order");
}

/// Appends `lines` to the journal in `journal` with `mongoose journal append`.
fn append_lines(journal: &Path, lines: &[String]) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mongoose"))
        .args(["journal", "append"])
        .arg(journal)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the journal writer starts");
    let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("the writer reads");
    let status = wait_exit(&mut child, "the journal writer");
    assert!(status.success(), "the journal writer failed: {status}");
}

/// Issue 25, item 3: a journal removed (`rm -rf`) and made again at the same path is
/// another journal. Its first excerpts have the indexes the old one's had: neither the
/// tailer's committed index (a store kept outside the journal) nor the ledger's saved
/// position (the store went with the journal) may skip them. Before the fix: 100 of 250
/// and 0 of 50 new excerpts applied, epoch 1 again, exit 0.
#[test]
fn a_recreated_journal_is_a_new_epoch_and_nothing_is_skipped() {
    let library = build_plugin("journal-plugin", &[]);
    // (a store outside the journal, new excerpts); (the default store inside it, new)
    for (outside, new) in [(true, 150usize), (false, 50usize)] {
        let run = LedgerRun::new("", "");
        plugin_dir(run.dir.path(), &[&library]);
        let journal = run.path("journal");
        let tailers = if outside {
            format!(r#", tailers = "{}""#, run.path("tailers").display())
        } else {
            String::new()
        };
        let config = plugin_ledger_config(
            &run.path("plugins").display().to_string(),
            "journal",
            &format!(
                r#"path = "{}", tailer = "ledger"{tailers}"#,
                journal.display()
            ),
            r#"state_dir = "state", alerts = "alerts.txt", guard = true"#,
        );
        std::fs::write(run.path("mongoose.toml"), config).expect("config");

        let old: Vec<String> = (0..100)
            .map(|index| format!("old{},1", index % 10))
            .collect();
        append_lines(&journal, &old);
        let (code, log) = run.finish_with_log();
        assert_eq!(code, 0, "the first run settles lossless: {log}");
        assert_applied_once(&run.state_in("state"), &old, &format!("first run: {log}"));

        std::fs::remove_dir_all(&journal).expect("rm -rf the journal");
        let fresh: Vec<String> = (0..new)
            .map(|index| format!("new{},{}", index % 10, 1 + index % 3))
            .collect();
        append_lines(&journal, &fresh);
        let (code, log) = run.finish_with_log();
        let all: Vec<String> = old.iter().chain(&fresh).cloned().collect();
        let state = run.state_in("state");
        assert_applied_once(
            &state,
            &all,
            &format!("store outside: {outside}; the re-created journal's run: {log}"),
        );
        assert_eq!(code, 0, "settled lossless: {log}");
        if outside {
            assert!(
                log.contains("another journal"),
                "a tailer store of another journal is reported: {log}"
            );
        }
    }
}

/// Issue 25, item 4: one damaged excerpt in the middle of a journal is not a torn tail.
/// Before the fix a ledger reading the journal stopped there and exited 0 ("settled and
/// lossless") with 5,000 excerpts unread, and the next `mongoose journal append` took the
/// damage for a torn tail and cut the 4,999 whole excerpts after it. Now the reader stops
/// with an error naming the segment and offset (the run is stalled and ends with exit 1),
/// and the appender refuses and changes nothing.
#[test]
fn a_damaged_excerpt_in_the_middle_is_refused_by_appender_and_tailer() {
    const EXCERPTS: usize = 10_000;
    const DAMAGED: u64 = 5_000;
    let library = build_plugin("journal-plugin", &[]);
    let run = LedgerRun::new("", "");
    plugin_dir(run.dir.path(), &[&library]);
    let journal = run.path("journal");
    let config = format!(
        "stalled_exit_millis = 3000\n{}",
        config(run.dir.path(), true)
    );
    std::fs::write(run.path("mongoose.toml"), config).expect("config");
    let lines: Vec<String> = (0..EXCERPTS).map(line).collect();
    append_lines(&journal, &lines);

    // flip the first payload byte of excerpt 5,000
    let opened =
        mongoose_journal::Journal::open(&journal, mongoose_journal::JournalConfig::default())
            .expect("the journal");
    let entry = opened
        .dump()
        .expect("dump")
        .map(|entry| entry.expect("a dump entry"))
        .find(|entry| entry.index == DAMAGED)
        .expect("excerpt 5,000");
    let segment = opened.segment_path(entry.segment);
    let mut bytes = std::fs::read(&segment).expect("the segment");
    bytes[entry.offset as usize + 8] ^= 0x5a;
    std::fs::write(&segment, &bytes).expect("damage the excerpt");
    drop(opened);
    let segment_name = segment
        .file_name()
        .expect("a file name")
        .to_string_lossy()
        .into_owned();

    // the ledger stops before the damage, and says so: not settled and lossless
    let (code, log) = run.finish_with_log();
    let state = run.state_in("state");
    assert_eq!(
        state.applied, DAMAGED,
        "the excerpts before the damage are applied: {log}"
    );
    assert_eq!(
        code, 1,
        "a run stopped by a damaged excerpt ends with exit 1: {log}"
    );
    assert!(
        log.contains(&segment_name) && log.contains(&format!("offset {}", entry.offset)),
        "the run names the damaged segment ({segment_name}) and offset ({}): {log}",
        entry.offset
    );

    // the next appender refuses, names the place, and cuts nothing
    let before = std::fs::read(&segment).expect("the segment");
    let appended = Command::new(env!("CARGO_BIN_EXE_mongoose"))
        .args(["journal", "append"])
        .arg(&journal)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child.stdin.take().expect("stdin").write_all(b"late,1\n")?;
            child.wait_with_output()
        })
        .expect("the journal writer ran");
    let said = String::from_utf8_lossy(&appended.stderr);
    assert!(
        !appended.status.success(),
        "the appender refuses a journal damaged in the middle: {said}"
    );
    assert!(
        said.contains(&segment_name) && said.contains(&format!("offset {}", entry.offset)),
        "the refusal names the segment and offset: {said}"
    );
    assert!(
        std::fs::read(&segment).expect("the segment") == before,
        "the refused appender changed nothing"
    );
    let opened =
        mongoose_journal::Journal::open(&journal, mongoose_journal::JournalConfig::default())
            .expect("the journal");
    let whole = opened
        .dump()
        .expect("dump")
        .map(|entry| entry.expect("a dump entry"))
        .filter(|entry| entry.checksum_ok)
        .count();
    assert_eq!(whole, EXCERPTS - 1, "every whole excerpt is still there");
}

/// Issue 25, item 7 (the journal's part): the plugin boundary carries the consumers'
/// saved positions. A ledger state restored from an older copy is behind the tailer's
/// committed index: before, the source resumed at its committed index and the excerpts
/// between were never applied (1,000 of 2,000). Now it resumes at the saved position.
/// And a deleted tailer store resumes at the saved position, not at 0.
#[test]
fn a_tailer_store_ahead_of_or_without_the_ledgers_state_resumes_at_the_saved_position() {
    let library = build_plugin("journal-plugin", &[]);
    let run = LedgerRun::new("", "");
    plugin_dir(run.dir.path(), &[&library]);
    std::fs::write(run.path("mongoose.toml"), config(run.dir.path(), true)).expect("config");
    let journal = run.path("journal");
    let lines: Vec<String> = (0..3_000).map(line).collect();

    append_lines(&journal, &lines[..1_000]);
    let (code, log) = run.finish_with_log();
    assert_eq!(code, 0, "{log}");
    copy_dir(&run.path("state"), &run.path("state-copy"));
    append_lines(&journal, &lines[1_000..2_000]);
    let (code, log) = run.finish_with_log();
    assert_eq!(code, 0, "{log}");
    assert_eq!(committed(run.dir.path()), 2_000);

    // the state restored from the older copy: 1,000 lines behind the committed index
    std::fs::remove_dir_all(run.path("state")).expect("the state");
    copy_dir(&run.path("state-copy"), &run.path("state"));
    let (code, log) = run.finish_with_log();
    assert_applied_once(
        &run.state_in("state"),
        &lines[..2_000],
        &format!("after the state was restored: {log}"),
    );
    assert_eq!(code, 0, "{log}");

    // the tailer store deleted: resumes at the saved position, not at 0
    std::fs::remove_dir_all(journal.join("tailers")).expect("the tailer store");
    append_lines(&journal, &lines[2_000..]);
    let (code, log) = run.finish_with_log();
    assert_applied_once(
        &run.state_in("state"),
        &lines,
        &format!("after the tailer store was deleted: {log}"),
    );
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains(
            "resuming at index 2000, the lowest a consumer needs (ledger/ledger's saved state"
        ),
        "the source resumes at the ledger's saved position: {log}"
    );

    // the tailer store damaged (both slots): resumes at the saved position too, where
    // it refused to start before (exit 1, "delete the file to re-read the journal")
    let store = journal.join("tailers").join("ledger.tailer");
    let len = std::fs::metadata(&store).expect("the store").len() as usize;
    std::fs::write(&store, vec![0xA5; len]).expect("damage the store");
    let (code, log) = run.finish_with_log();
    assert_eq!(
        code, 0,
        "a damaged store with saved positions is not a refusal: {log}"
    );
    assert!(log.contains("is damaged"), "the damage is reported: {log}");
    assert_applied_once(
        &run.state_in("state"),
        &lines,
        &format!("after the tailer store was damaged: {log}"),
    );
}
