//! Packaging: `mongoose --version` names the commit, and the systemd unit in
//! `packaging/mongoose.service` has the keys it needs, maps only exit codes the binary
//! defines, and passes `systemd-analyze verify` where that runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use mongoose_server::cli::{
    EXIT_BAD_CONFIG, EXIT_FAILED, EXIT_OK, EXIT_SETTLED_LOSSY, EXIT_STOP_INCOMPLETE,
};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace folder")
        .to_path_buf()
}

#[test]
fn version_names_the_version_and_the_commit() {
    let output = Command::new(env!("CARGO_BIN_EXE_mongoose"))
        .arg("--version")
        .output()
        .expect("mongoose --version runs");
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).expect("utf-8");
    let line = text.trim_end();
    // ^mongoose \d+\.\d+\.\d+ \(.+\)$
    let rest = line
        .strip_prefix("mongoose ")
        .unwrap_or_else(|| panic!("'{line}' does not start with 'mongoose '"));
    let (version, commit) = rest
        .split_once(' ')
        .unwrap_or_else(|| panic!("'{line}': no commit after the version"));
    let parts: Vec<&str> = version.split('.').collect();
    assert!(
        parts.len() == 3
            && parts
                .iter()
                .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit())),
        "'{version}' is not a version like 0.1.0"
    );
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
    assert!(
        commit.len() > 2 && commit.starts_with('(') && commit.ends_with(')'),
        "'{commit}' is not a (commit)"
    );
    // in a git checkout (CI's clean clone, a developer's worktree) the commit is the
    // checkout's: 12 hex digits, and -dirty with changes
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repository())
        .output();
    if let Some(head) = head.ok().filter(|head| head.status.success()) {
        let head = String::from_utf8(head.stdout).expect("utf-8");
        let inner = &commit[1..commit.len() - 1];
        assert!(
            inner.trim_end_matches("-dirty") == head.trim(),
            "--version names {inner}, HEAD is {}",
            head.trim()
        );
    }
}

/// One `[section]` of a unit file: each key with its values, in order (a key may be
/// given more than once).
type Section = BTreeMap<String, Vec<String>>;

/// A systemd unit file's sections (an ini dialect: `#` and `;` comments, `key=value`,
/// repeated keys kept, a trailing `\` continues a line).
fn parse_unit(text: &str) -> BTreeMap<String, Section> {
    let mut sections: BTreeMap<String, Section> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut pending = String::new();
    for raw in text.lines() {
        let line = raw.trim();
        if pending.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with(';'))
        {
            continue;
        }
        if let Some(continued) = line.strip_suffix('\\') {
            pending.push_str(continued);
            pending.push(' ');
            continue;
        }
        let line = format!("{pending}{line}");
        pending.clear();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            sections.entry(name.to_owned()).or_default();
            current = Some(name.to_owned());
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("'{line}' is not key=value"));
        let section = current
            .as_ref()
            .unwrap_or_else(|| panic!("'{line}' is outside any [section]"));
        sections
            .get_mut(section)
            .expect("the section")
            .entry(key.trim().to_owned())
            .or_default()
            .push(value.trim().to_owned());
    }
    assert!(pending.is_empty(), "the unit ends in a continued line");
    sections
}

fn one<'a>(section: &'a Section, key: &str) -> &'a str {
    let values = section
        .get(key)
        .unwrap_or_else(|| panic!("the unit's [Service] has no {key}"));
    assert_eq!(values.len(), 1, "{key} is given more than once");
    &values[0]
}

#[test]
fn the_systemd_unit_maps_the_exit_codes_and_verifies() {
    let path = repository().join("packaging/mongoose.service");
    let text = std::fs::read_to_string(&path).expect("packaging/mongoose.service");
    let unit = parse_unit(&text);
    for section in ["Unit", "Service", "Install"] {
        assert!(unit.contains_key(section), "no [{section}]");
    }
    let service = &unit["Service"];
    assert!(matches!(one(service, "Type"), "simple" | "notify"));
    assert_eq!(
        one(service, "ExecStart"),
        "/usr/bin/mongoose run --config /etc/mongoose/mongoose.toml"
    );
    assert_eq!(one(service, "ExecReload"), "/bin/kill -HUP $MAINPID");
    assert_eq!(one(service, "KillSignal"), "SIGTERM");
    assert_eq!(one(service, "Restart"), "on-failure");
    assert_eq!(one(service, "NoNewPrivileges"), "yes");
    assert_eq!(one(service, "ProtectSystem"), "strict");
    assert_eq!(one(service, "StateDirectory"), "mongoose");
    assert!(service["ReadWritePaths"]
        .iter()
        .any(|p| p == "/var/lib/mongoose"));

    // systemd's stop timeout outlasts the server's own shutdown deadline
    let config = mongoose_server::config::ServerConfig::parse("", &repository())
        .expect("an empty config parses");
    let stop = one(service, "TimeoutStopSec");
    let seconds: u64 = stop
        .strip_suffix('s')
        .unwrap_or(stop)
        .parse()
        .unwrap_or_else(|_| panic!("TimeoutStopSec '{stop}' is not a number of seconds"));
    assert!(
        seconds * 1000 > config.shutdown_timeout_millis,
        "TimeoutStopSec={stop} does not outlast shutdown_timeout_millis = {}",
        config.shutdown_timeout_millis
    );

    // every exit code the unit maps is one `mongoose run` defines, and the bad config
    // (which a restart cannot mend) is never restarted
    let defined = [
        EXIT_OK,
        EXIT_FAILED,
        EXIT_BAD_CONFIG,
        EXIT_SETTLED_LOSSY,
        EXIT_STOP_INCOMPLETE,
    ];
    let codes = |key: &str| -> Vec<u8> {
        service
            .get(key)
            .into_iter()
            .flatten()
            .flat_map(|value| value.split_whitespace())
            .map(|code| {
                code.parse()
                    .unwrap_or_else(|_| panic!("{key}: '{code}' is not an exit code"))
            })
            .collect()
    };
    let success = codes("SuccessExitStatus");
    let no_restart = codes("RestartPreventExitStatus");
    assert!(!success.is_empty() && !no_restart.is_empty());
    for code in success.iter().chain(&no_restart) {
        assert!(
            defined.contains(code),
            "exit code {code} is not one mongoose defines"
        );
    }
    assert!(no_restart.contains(&EXIT_BAD_CONFIG));
    for failure in [EXIT_FAILED, EXIT_BAD_CONFIG, EXIT_STOP_INCOMPLETE] {
        assert!(!success.contains(&failure), "exit {failure} is a failure");
    }

    verify_with_systemd(&path);
}

/// `systemd-analyze verify` on the unit, when the command is there and works on this
/// machine (a container without systemd as PID 1 may not run it): skipped with a
/// printed reason otherwise.
fn verify_with_systemd(path: &Path) {
    // it checks that ExecStart's binary exists: give it the one just built
    let folder = tempfile::tempdir().expect("a temporary folder");
    let text = std::fs::read_to_string(path)
        .expect("the unit")
        .replace("/usr/bin/mongoose", env!("CARGO_BIN_EXE_mongoose"));
    let unit = folder.path().join("mongoose.service");
    std::fs::write(&unit, text).expect("the unit's copy");
    let verify = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output();
    let output = match verify {
        Ok(output) => output,
        Err(error) => {
            println!("skipped systemd-analyze verify: cannot run it ({error})");
            return;
        }
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    // it works here when it can load its own units; a machine without systemd answers
    // about itself, not about the unit
    let environment = [
        "Failed to initialize manager",
        "Failed to setup",
        "System has not been booted",
        "Operation not permitted",
    ];
    if !output.status.success()
        && !stderr.contains("mongoose.service")
        && environment.iter().any(|sign| stderr.contains(sign))
    {
        println!("skipped systemd-analyze verify: it does not work on this machine: {stderr}");
        return;
    }
    let about_unit: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("mongoose.service"))
        .collect();
    assert!(
        output.status.success() && about_unit.is_empty(),
        "systemd-analyze verify refuses the unit ({}):\n{stderr}",
        output.status
    );
}
