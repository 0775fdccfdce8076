//! Environment variables in the config (issue 28, item 2), through the real binary:
//! an unset variable is a config error naming its key path (exit 2) from `validate`
//! and from `run`; with the variables set, the same file validates and runs, a whole
//! `"${VAR}"` value in a numeric field is read as a number, and an HTTP sink's secret
//! header can come from a file (`header_files`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a run may take before the test calls it a hang.
const HANG: Duration = Duration::from_secs(60);

const CONFIG: &str = r#"
# a ${COMMENTED} reference in a comment does nothing
[[feeds]]
name = "lines"
source = "file"
path = "${INPUT_DIR:-.}/input.txt"
queue_capacity = "${CAPACITY}"

[[sinks]]
name = "out"
kind = "file"
path = "${OUT_FILE}"

[[groups]]
name = "copy"

[[groups.processors]]
name = "copy"
kind = "forward"
settings = { feed = "lines", sink = "out", template = "$HOME {line}" }
"#;

/// Runs `mongoose <args> --config <config>` in `dir` with `variables` (and nothing of
/// the test's own environment that the config names): exit code and stderr.
fn mongoose(dir: &Path, args: &[&str], variables: &[(&str, &str)]) -> (i32, String) {
    let log = dir.join(format!("{}.log", args.join("-")));
    let mut command = Command::new(env!("CARGO_BIN_EXE_mongoose"));
    command
        .args(args)
        .arg("--config")
        .arg(dir.join("mongoose.toml"))
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).expect("log")));
    for name in ["INPUT_DIR", "CAPACITY", "OUT_FILE", "COMMENTED"] {
        command.env_remove(name);
    }
    for (name, value) in variables {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("the mongoose binary starts");
    let deadline = Instant::now() + HANG;
    let status = loop {
        if let Some(status) = child.try_wait().expect("child status") {
            break status;
        }
        assert!(Instant::now() < deadline, "mongoose {args:?} hangs");
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    (status.code().expect("an exit code, not a signal"), stderr)
}

fn setup(config: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("input.txt"), "a\nb\nc\n").expect("input");
    std::fs::write(dir.path().join("mongoose.toml"), config).expect("config");
    let path = dir.path().to_path_buf();
    (dir, path)
}

#[test]
fn an_unset_variable_is_a_config_error_at_its_key_path_from_validate_and_from_run() {
    let (_dir, path) = setup(CONFIG);
    let expected = "sinks.out.path: environment variable OUT_FILE is not set";
    for args in [&["validate"][..], &["run", "--exit-when-settled"][..]] {
        let (code, stderr) = mongoose(&path, args, &[("CAPACITY", "64")]);
        assert_eq!(code, 2, "mongoose {args:?} exits 2; stderr:\n{stderr}");
        assert!(
            stderr.contains(expected),
            "mongoose {args:?} names the key path and the variable; stderr:\n{stderr}"
        );
    }
    assert!(
        !path.join("${OUT_FILE}").exists(),
        "no file named after the unexpanded reference"
    );
}

#[test]
fn with_the_variables_set_the_config_validates_and_runs_to_settled() {
    let (_dir, path) = setup(CONFIG);
    let variables = [("CAPACITY", "64"), ("OUT_FILE", "copied.txt")];
    let (code, stderr) = mongoose(&path, &["validate"], &variables);
    assert_eq!(code, 0, "valid with the variables set; stderr:\n{stderr}");
    let (code, stderr) = mongoose(&path, &["run", "--exit-when-settled"], &variables);
    assert_eq!(code, 0, "runs to settled; stderr:\n{stderr}");
    let copied = std::fs::read_to_string(path.join("copied.txt")).expect("the sink's file");
    assert_eq!(
        copied, "$HOME a\n$HOME b\n$HOME c\n",
        "the sink path came from OUT_FILE, and a $ not before a brace stayed itself"
    );
    // a capacity that is not a number is refused at its key path
    let (code, stderr) = mongoose(
        &path,
        &["validate"],
        &[("CAPACITY", "many"), ("OUT_FILE", "x.txt")],
    );
    assert_eq!(code, 2, "stderr:\n{stderr}");
    assert!(
        stderr.contains("feeds[0].queue_capacity"),
        "stderr:\n{stderr}"
    );
}

#[test]
fn an_http_sinks_secret_header_comes_from_a_file_and_a_missing_one_is_a_config_error() {
    let config = r#"
[[feeds]]
name = "lines"
source = "file"
path = "input.txt"

[[sinks]]
name = "alerts"
kind = "http"
url = "http://127.0.0.1:9/alerts"
header_files = { Authorization = "auth-header" }

[[groups]]
name = "copy"

[[groups.processors]]
name = "copy"
kind = "forward"
settings = { feed = "lines", sink = "alerts" }
"#;
    let (_dir, path) = setup(config);
    let (code, stderr) = mongoose(&path, &["validate"], &[]);
    assert_eq!(code, 2, "stderr:\n{stderr}");
    assert!(
        stderr.contains("sinks.alerts.header_files.Authorization")
            && stderr.contains("cannot read the header file"),
        "stderr:\n{stderr}"
    );
    std::fs::write(path.join("auth-header"), "Bearer s3cret\n").expect("header file");
    let (code, stderr) = mongoose(&path, &["validate"], &[]);
    assert_eq!(code, 0, "stderr:\n{stderr}");
}
