//! Logs for pipes and the ledger example's config built as a value (issue 10, item 9
//! and "Logs").
//!
//! - The logs of the real `mongoose` binary written to a file carry no colour escape
//!   codes; with `--log-format json` every line on stderr is one JSON object with a
//!   level and a message, the final error included.
//! - The ledger example's configuration is built as a value: paths whose names hold
//!   U+200B (ZERO WIDTH SPACE) and, on Unix, a byte that is not UTF-8 work end to end.
//!   Before, the example formatted its paths into TOML text with `{:?}` and stopped
//!   with `config error at .: invalid unicode 4-digit hex code` (U+200B) or `invalid
//!   escape sequence` (the non-UTF-8 byte), exit 2.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

#[path = "../../../examples/ledger/example.rs"]
mod example;

use example::LedgerExample;
use mongoose_ledger::LedgerState;
use mongoose_server::cli;

/// Lines of `account,amount`; every 10th drives its account negative (an alert).
fn input_lines(count: usize) -> String {
    (0..count)
        .map(|index| {
            let amount = if index % 10 == 9 { -100 } else { 3 };
            format!("acct-{},{amount}\n", index % 5)
        })
        .collect()
}

/// `prefix`, U+200B, and (on Unix) the byte 0xFF, which no UTF-8 text holds.
fn awkward_name(prefix: &str, suffix: &str) -> OsString {
    let mut name = OsString::from(format!("{prefix}\u{200b}"));
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        name.push(std::ffi::OsStr::from_bytes(b"\xff"));
    }
    name.push(suffix);
    name
}

/// The pointer file of `input`, the first feed of `config`: in its data folder.
fn pointer_of(config: &mongoose_server::config::ServerConfig, input: &Path) -> PathBuf {
    mongoose_source_file::pointer::pointer_path_in(Some(&config.feed_state_dir(0)), input)
}

/// Runs `command` with stderr to a file (not a terminal) until it ends, with a
/// generous deadline; returns its exit status and what it wrote to stderr.
fn run_with_stderr_to_file(mut command: Command, dir: &Path) -> (ExitStatus, String) {
    let stderr_path = dir.join("stderr.log");
    let stderr = File::create(&stderr_path).expect("stderr file");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("the mongoose binary starts");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("mongoose did not end within 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = std::fs::read_to_string(&stderr_path).expect("stderr is UTF-8 text");
    (status, text)
}

/// A ledger config file in `dir` on `input.txt`, written from a TOML value.
fn write_simple_config(dir: &Path) -> PathBuf {
    std::fs::write(dir.join("input.txt"), input_lines(50)).expect("input");
    let config = dir.join("mongoose.toml");
    std::fs::write(
        &config,
        ledger_config_text("input.txt", "state", "alerts.txt"),
    )
    .expect("config");
    config
}

/// The text of a ledger config, serialized from a TOML value by the `toml` crate (so
/// every path is escaped as TOML wants, whatever characters it holds).
fn ledger_config_text(input: &str, state_dir: &str, alerts: &str) -> String {
    let mut feed = toml::Table::new();
    feed.insert("name".into(), "lines".into());
    feed.insert("source".into(), "file".into());
    feed.insert("path".into(), input.into());
    feed.insert("read_strategy".into(), "COMMITED".into());
    let mut settings = toml::Table::new();
    settings.insert("state_dir".into(), state_dir.into());
    settings.insert("alerts".into(), alerts.into());
    let mut processor = toml::Table::new();
    processor.insert("name".into(), "ledger".into());
    processor.insert("kind".into(), "ledger".into());
    processor.insert("settings".into(), settings.into());
    let mut group = toml::Table::new();
    group.insert("name".into(), "ledger".into());
    group.insert(
        "processors".into(),
        vec![toml::Value::from(processor)].into(),
    );
    let mut config = toml::Table::new();
    config.insert("feeds".into(), vec![toml::Value::from(feed)].into());
    config.insert("groups".into(), vec![toml::Value::from(group)].into());
    toml::to_string(&config).expect("a TOML text")
}

#[test]
fn logs_written_to_a_file_carry_no_colour_escape_codes() {
    // issue 10 "Logs": colour escape codes were written to a piped stderr
    let dir = tempfile::tempdir().expect("dir");
    let config = write_simple_config(dir.path());
    let mut command = Command::new(env!("CARGO_BIN_EXE_mongoose"));
    command
        .env_remove("NO_COLOR")
        .env("RUST_LOG", "info")
        .arg("run")
        .arg("--config")
        .arg(&config)
        .arg("--exit-when-settled");
    let (status, stderr) = run_with_stderr_to_file(command, dir.path());
    assert_eq!(status.code(), Some(0), "settled and lossless: {stderr}");
    assert!(
        stderr.contains("server started"),
        "the logs are written: {stderr}"
    );
    assert!(
        !stderr.contains("\x1b["),
        "no colour escape codes in a file: {stderr:?}"
    );
}

/// Every line of `stderr` parsed as a JSON object with a string `level` and `message`.
fn json_lines(stderr: &str) -> Vec<serde_json::Value> {
    assert!(!stderr.trim().is_empty(), "something is logged");
    stderr
        .lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("not a JSON line ({error}): {line:?}"));
            assert!(value["level"].is_string(), "a level: {line}");
            assert!(value["message"].is_string(), "a message: {line}");
            value
        })
        .collect()
}

#[test]
fn json_logs_are_one_object_per_line_with_a_level_and_a_message() {
    // issue 10 "Logs": `--log-format json` for log shippers
    let dir = tempfile::tempdir().expect("dir");
    let config = write_simple_config(dir.path());
    let mut command = Command::new(env!("CARGO_BIN_EXE_mongoose"));
    command
        .env_remove("NO_COLOR")
        .env("RUST_LOG", "info")
        .arg("run")
        .arg("--config")
        .arg(&config)
        .arg("--exit-when-settled")
        .args(["--log-format", "json"]);
    let (status, stderr) = run_with_stderr_to_file(command, dir.path());
    assert_eq!(status.code(), Some(0), "settled and lossless: {stderr}");
    let lines = json_lines(&stderr);
    assert!(
        lines
            .iter()
            .any(|line| line["message"] == "server started" && line["level"] == "INFO"),
        "{stderr}"
    );
    assert!(
        lines.iter().any(|line| line["processor"] == "ledger"),
        "the event's fields are beside the message: {stderr}"
    );
}

#[test]
fn with_json_logs_the_final_error_is_a_json_line_too() {
    // a config that does not exist: exit 2, and the reason is a JSON line, not text
    let dir = tempfile::tempdir().expect("dir");
    let mut command = Command::new(env!("CARGO_BIN_EXE_mongoose"));
    command
        .arg("--log-format")
        .arg("json")
        .arg("run")
        .arg("--config")
        .arg(dir.path().join("missing.toml"));
    let (status, stderr) = run_with_stderr_to_file(command, dir.path());
    assert_eq!(
        status.code(),
        Some(i32::from(cli::EXIT_BAD_CONFIG)),
        "{stderr}"
    );
    let lines = json_lines(&stderr);
    assert!(
        lines.iter().any(|line| line["level"] == "ERROR"
            && line["message"]
                .as_str()
                .is_some_and(|message| message.contains("missing.toml"))),
        "the error names the file: {stderr}"
    );
}

#[test]
fn the_ledger_example_runs_on_paths_with_u200b_and_a_non_utf8_byte() {
    // issue 10 item 9: the example's config is a value, not TOML text with `{:?}` paths
    let dir = tempfile::tempdir().expect("dir");
    let folder = dir.path().join(awkward_name("data", ""));
    std::fs::create_dir(&folder).expect("folder");
    let input = folder.join(awkward_name("in", "put.txt"));
    std::fs::write(&input, input_lines(200)).expect("input");
    let example = LedgerExample {
        input: input.clone(),
        state_dir: folder.join(awkward_name("st", "ate")),
        alerts: folder.join(awkward_name("alerts", ".txt")),
        admin: None,
    };
    let config = example.server_config().expect("a valid config");
    assert_eq!(config.feeds[0].path, input, "the path is kept as it is");
    let pointer = pointer_of(&config, &input);
    let server = example
        .server_builder(config)
        .expect("the ledger opens")
        .build()
        .expect("built");
    server.start().expect("started");
    let code = cli::run_until_done(&server, true).expect("ran");
    assert_eq!(code, cli::EXIT_OK, "settled and lossless");
    let state = LedgerState::load(&example.state_dir).expect("the state");
    assert_eq!((state.applied, state.rejected), (200, 0));
    let alerts = std::fs::read_to_string(&example.alerts).expect("alerts");
    assert!(alerts.lines().count() > 0, "negative balances alerted");
    assert!(
        pointer.exists() && pointer.starts_with(&example.state_dir),
        "the pointer is in the data folder, below the state dir: {}",
        pointer.display()
    );
}

#[test]
fn the_mongoose_binary_runs_a_config_whose_paths_have_u200b_and_a_non_utf8_byte() {
    // the same through `mongoose run`: a TOML file holds UTF-8 text only, so the
    // non-UTF-8 byte is in the config file's folder (its paths are relative to it) and
    // U+200B in the names the file gives, escaped by a TOML writer
    let dir = tempfile::tempdir().expect("dir");
    let folder = dir.path().join(awkward_name("conf", ""));
    std::fs::create_dir(&folder).expect("folder");
    std::fs::write(folder.join("in\u{200b}put.txt"), input_lines(200)).expect("input");
    let config = folder.join("mongoose\u{200b}.toml");
    std::fs::write(
        &config,
        ledger_config_text("in\u{200b}put.txt", "st\u{200b}ate", "alerts\u{200b}.txt"),
    )
    .expect("config");
    let mut command = Command::new(env!("CARGO_BIN_EXE_mongoose"));
    command
        .arg("run")
        .arg("--config")
        .arg(&config)
        .arg("--exit-when-settled");
    let (status, stderr) = run_with_stderr_to_file(command, dir.path());
    assert_eq!(status.code(), Some(0), "settled and lossless: {stderr}");
    let state = LedgerState::load(&folder.join("st\u{200b}ate")).expect("the state");
    assert_eq!((state.applied, state.rejected), (200, 0));
    let loaded = mongoose_server::config::ServerConfig::load(&config).expect("the config");
    assert!(pointer_of(&loaded, &folder.join("in\u{200b}put.txt")).exists());
}
