//! RECORD through the server config and `mongoose replay` (issue 6 wired end to end):
//! the ledger runs on a recorded group; a replay of the recording into scratch state
//! reproduces the live state and alerts exactly.

use std::process::Command;

use mongoose_server::ledger::LedgerState;

fn config(state: &str, alerts: &str, record: bool) -> String {
    let record = if record {
        "[record]\ndir = \"recording\"\nprocessors = [\"ledger\"]\n"
    } else {
        ""
    };
    format!(
        r#"{record}
[[feeds]]
name = "lines"
source = "file"
path = "input.txt"
read_strategy = "ONCE_EARLIEST"

[[groups]]
name = "ledger"
[[groups.processors]]
name = "ledger"
kind = "ledger"
settings = {{ state_dir = "{state}", alerts = "{alerts}", sync = false }}
"#
    )
}

#[test]
fn a_replay_of_a_recorded_ledger_reproduces_its_state_and_alerts() {
    let dir = tempfile::tempdir().expect("dir");
    let input: String = (0..500)
        .map(|index| format!("acc{},{}\n", index % 7, (index % 11) as i64 - 6))
        .collect();
    std::fs::write(dir.path().join("input.txt"), format!("{input}not a line\n")).expect("input");
    std::fs::write(
        dir.path().join("live.toml"),
        config("live", "live-alerts.txt", true),
    )
    .expect("config");
    std::fs::write(
        dir.path().join("replay.toml"),
        config("scratch", "scratch-alerts.txt", false),
    )
    .expect("config");
    let mongoose = env!("CARGO_BIN_EXE_mongoose");
    let live = Command::new(mongoose)
        .args(["run", "--exit-when-settled", "--config"])
        .arg(dir.path().join("live.toml"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("runs");
    assert_eq!(
        live.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&live.stderr)
    );
    let again = Command::new(mongoose)
        .args(["run", "--exit-when-settled", "--config"])
        .arg(dir.path().join("live.toml"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("runs");
    assert_ne!(
        again.status.code(),
        Some(0),
        "RECORD refuses a folder that holds a recording"
    );
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("record.dir"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    let replay = Command::new(mongoose)
        .args(["replay", "--recording"])
        .arg(dir.path().join("recording"))
        .arg("--config")
        .arg(dir.path().join("replay.toml"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("runs");
    let report = String::from_utf8_lossy(&replay.stdout);
    assert_eq!(
        replay.status.code(),
        Some(0),
        "{report}\n{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    assert!(report.contains("ledger"), "{report}");

    let live_state = LedgerState::load(&dir.path().join("live")).expect("live state");
    let replayed = LedgerState::load(&dir.path().join("scratch")).expect("replayed state");
    assert_eq!(live_state.applied, 500);
    assert_eq!(live_state.rejected, 1);
    assert_eq!(
        replayed, live_state,
        "the replay applied the same lines at the same positions"
    );
    let live_alerts = std::fs::read_to_string(dir.path().join("live-alerts.txt")).expect("alerts");
    let replayed_alerts =
        std::fs::read_to_string(dir.path().join("scratch-alerts.txt")).expect("alerts");
    assert!(!live_alerts.is_empty());
    assert_eq!(replayed_alerts, live_alerts);
}
