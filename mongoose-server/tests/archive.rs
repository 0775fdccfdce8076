//! The archive connector in the server (issue 16): `mongoose archive serve` records an
//! IPC stream that `mongoose archive publish` (another process) writes while the
//! `mongoose` server runs the ledger on an `archive` feed (the plugin built by cargo in
//! the test from `plugins/archive`). The server is killed with SIGKILL several times
//! and restarted: the committed position never passes the ledger's saved one, and in
//! the end every message is applied exactly once (replay from the committed position,
//! then live, with the consumer-side guard).

mod support;

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mongoose_testkit::{build_plugin, plugin_dir};
use support::{assert_applied_once, plugin_ledger_config, wait_exit, LedgerRun};

const MESSAGES: usize = 20_000;
const STREAM: u32 = 7;

fn line(index: usize) -> String {
    let amount = (index % 7) as i64 - 3;
    format!("acc{},{amount}", index % 30)
}

fn mongoose(arguments: &[&str], dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mongoose"));
    command.args(arguments).current_dir(dir);
    command
}

/// `mongoose archive publish` fed `MESSAGES` lines in paced chunks by a thread.
fn publisher(dir: &Path) -> (Child, std::thread::JoinHandle<()>) {
    let ipc = dir.join("ipc");
    let mut child = mongoose(&["archive", "publish", "--stream", "7", "--ipc"], dir)
        .arg(&ipc)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the publisher starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let feeder = std::thread::spawn(move || {
        for chunk in (0..MESSAGES).collect::<Vec<_>>().chunks(500) {
            let text: String = chunk.iter().map(|index| line(*index) + "\n").collect();
            stdin
                .write_all(text.as_bytes())
                .expect("the publisher reads");
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    (child, feeder)
}

fn config(dir: &Path) -> String {
    plugin_ledger_config(
        "plugins",
        "archive",
        &format!(
            r#"archive = "{}", stream = {STREAM}, pointer = "{}""#,
            dir.join("archive").display(),
            dir.join("lines.pointer").display()
        ),
        r#"state_dir = "state", alerts = "alerts.txt", guard = true"#,
    )
}

/// The committed `(recording, position)` (`(0, 0)` before any commit).
fn committed(dir: &Path) -> (u64, u64) {
    let Ok(text) = std::fs::read_to_string(dir.join("lines.pointer")) else {
        return (0, 0);
    };
    let mut parts = text
        .split_whitespace()
        .map(|part| part.parse().expect("a number"));
    (
        parts.next().expect("a recording"),
        parts.next().expect("a position"),
    )
}

#[test]
fn a_publisher_and_an_archiver_while_the_server_is_killed_apply_every_message_exactly_once() {
    let library = build_plugin("archive-plugin", &[]);
    let run = LedgerRun::new("", "");
    let dir = run.dir.path().to_path_buf();
    plugin_dir(&dir, &[&library]);
    std::fs::create_dir_all(dir.join("ipc")).expect("ipc folder");
    std::fs::write(run.path("mongoose.toml"), config(&dir)).expect("config");

    let mut archiver = mongoose(&["archive", "serve", "archive", "--ipc", "ipc"], &dir)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the archiver starts");
    let (mut publishing, feeder) = publisher(&dir);

    let kills = run.kill_rounds(4, (2_000, 1_500, MESSAGES as u64), || committed(&dir).1);
    feeder.join().expect("feeder");
    let status = wait_exit(&mut publishing, "the publisher");
    assert!(status.success(), "the publisher failed: {status}");

    assert_eq!(
        run.finish(),
        0,
        "the last run settled lossless: {}",
        run.log()
    );
    let state = run.state_in("state");
    let expected: Vec<String> = (0..MESSAGES).map(line).collect();
    assert_applied_once(
        &state,
        &expected,
        &format!("the messages after {kills} kills: {}", run.log()),
    );
    assert_eq!(
        committed(&dir).1,
        state.position,
        "the final commit covers everything"
    );

    let stopped = Command::new("kill")
        .args(["-TERM", &archiver.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(stopped.success());
    let status = wait_exit(&mut archiver, "the archiver");
    assert!(status.success(), "the archiver stopped cleanly: {status}");
}
