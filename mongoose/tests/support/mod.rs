//! One harness for the tests that run the `mongoose` binary with the ledger as a child
//! process: a folder with `input.txt` and `mongoose.toml`, the run's stderr appended to
//! `server.log`, the pointer and the ledger's saved state read back. The small tmpfs of
//! the tests that need a full disk is `mongoose_testkit::Tmpfs`.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mongoose_ledger::LedgerState;

pub mod aggregate;
pub mod own_process;

/// How long a run may take to settle, or to log what a test waits for.
const PATIENCE: Duration = Duration::from_secs(180);

/// The config of a `forward` of the COMMITED file feed `lines` on `input.txt` into the
/// file sink `out` (`out.txt`, `sink` added to its table).
pub fn forward_config(sink: &str) -> String {
    format!(
        r#"
[[feeds]]
name = "lines"
source = "file"
path = "input.txt"
read_strategy = "COMMITED"

[[sinks]]
name = "out"
kind = "file"
path = "out.txt"
{sink}

[[groups]]
name = "forward"
[[groups.processors]]
name = "copy"
kind = "forward"
settings = {{ feed = "lines", sink = "out" }}
"#
    )
}

/// The config of one COMMITED file feed `lines` on `input.txt` and one ledger processor
/// in group `ledger` with `settings` (the inside of its inline table); `top` goes
/// before the feed (top-level keys and tables), `feed` into the feed's table.
pub fn ledger_config(top: &str, feed: &str, settings: &str) -> String {
    config_with_feed(
        top,
        &format!(
            r#"[[feeds]]
name = "lines"
source = "file"
path = "input.txt"
read_strategy = "COMMITED"
{feed}"#
        ),
        settings,
    )
}

/// The config of the feed `lines` of a plugin's `source` kind (line items, the plugin
/// folder `plugin_dir`, `feed_settings` the inside of its settings table) and one ledger
/// processor in group `ledger` with `settings`.
pub fn plugin_ledger_config(
    plugin_dir: &str,
    source: &str,
    feed_settings: &str,
    settings: &str,
) -> String {
    config_with_feed(
        &format!(r#"plugin_dir = "{plugin_dir}""#),
        &format!(
            r#"[[feeds]]
name = "lines"
source = "{source}"
codec = "line"
settings = {{ {feed_settings} }}"#
        ),
        settings,
    )
}

/// `top`, then the feed table `feed`, then group `ledger` with one ledger processor
/// with `settings`.
fn config_with_feed(top: &str, feed: &str, settings: &str) -> String {
    format!(
        r#"
{top}
{feed}

[[groups]]
name = "ledger"
idle_strategy = "sleeping-millis:1"

[[groups.processors]]
name = "ledger"
kind = "ledger"
settings = {{ {settings} }}
"#
    )
}

/// The balances `account,amount` lines add up to.
/// Where a server whose config is in `dir` keeps `file` of feed `feed` reading `input`
/// (relative to `dir`): `<dir>/data/feeds/<feed>-<key of the input>/<file>`.
pub fn feed_state(dir: &std::path::Path, feed: &str, input: &str, file: &str) -> PathBuf {
    dir.join("data/feeds")
        .join(mongoose_server::config::data_dir::state_key(
            feed,
            &dir.join(input),
        ))
        .join(file)
}

/// The state file of file sink `sink` writing `output` (relative to `dir`).
pub fn sink_state(dir: &std::path::Path, sink: &str, output: &str) -> PathBuf {
    let name = std::path::Path::new(output)
        .file_name()
        .expect("a file name")
        .to_string_lossy()
        .into_owned();
    dir.join("data/sinks")
        .join(mongoose_server::config::data_dir::state_key(
            sink,
            &dir.join(output),
        ))
        .join(format!("{name}.sinkstate"))
}

pub fn balances_of<'a>(lines: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, i64> {
    let mut balances = BTreeMap::new();
    for line in lines {
        let (account, amount) = line.trim_end().split_once(',').expect("account,amount");
        *balances.entry(account.to_owned()).or_insert(0) += amount.parse::<i64>().expect("amount");
    }
    balances
}

/// Asserts that `state` holds each of `lines` applied exactly once: as many applied
/// as there are lines, and the balances they add up to. `context` says which run.
pub fn assert_applied_once(state: &LedgerState, lines: &[String], context: &str) {
    assert_eq!(
        state.applied,
        lines.len() as u64,
        "every line applied once: {context}"
    );
    assert_eq!(
        state.balances,
        balances_of(lines.iter().map(String::as_str)),
        "the balances of every line applied once: {context}"
    );
}

/// The `mongoose` binary the tests run: `MONGOOSE_BIN` when set, else this build's.
pub fn binary() -> PathBuf {
    std::env::var_os("MONGOOSE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_mongoose")))
}

/// A folder the `mongoose` binary runs in.
pub struct LedgerRun {
    pub dir: tempfile::TempDir,
    /// `RUST_LOG` of the child.
    pub log_filter: &'static str,
}

impl LedgerRun {
    /// A folder with `input` as `input.txt` and `config` as `mongoose.toml`.
    pub fn new(input: &str, config: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("input.txt"), input).expect("input");
        std::fs::write(dir.path().join("mongoose.toml"), config).expect("config");
        LedgerRun {
            dir,
            // the lifecycle lines of the run loop ("signal received: ...") are info
            log_filter: "warn,mongoose_server::cli=info",
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The pointer of feed `lines` on `input.txt` (in the data folder).
    pub fn pointer_path(&self) -> PathBuf {
        feed_state(
            self.dir.path(),
            "lines",
            "input.txt",
            "input.txt.readPointer",
        )
    }

    /// The pointer of feed `lines` on `input` (relative to the folder).
    pub fn pointer_path_of(&self, input: &str) -> PathBuf {
        let name = std::path::Path::new(input)
            .file_name()
            .expect("a file name")
            .to_string_lossy()
            .into_owned();
        feed_state(
            self.dir.path(),
            "lines",
            input,
            &format!("{name}.readPointer"),
        )
    }

    /// The state of file sink `sink` writing `output` (in the data folder).
    pub fn sink_state(&self, sink: &str, output: &str) -> PathBuf {
        sink_state(self.dir.path(), sink, output)
    }

    /// Starts `mongoose run` on the folder's config (the binary of `MONGOOSE_BIN` when it
    /// is set: a regression test run against the binary of the code before its fix).
    pub fn spawn(&self, exit_when_settled: bool) -> Child {
        let mut command = Command::new(binary());
        command
            .arg("run")
            .arg("--config")
            .arg(self.path("mongoose.toml"));
        if exit_when_settled {
            command.arg("--exit-when-settled");
        }
        command
            .env("RUST_LOG", self.log_filter)
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.path("server.log"))
                    .expect("log"),
            ))
            .spawn()
            .expect("the mongoose binary starts")
    }

    /// Everything the runs wrote on stderr.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.path("server.log")).unwrap_or_default()
    }

    /// Waits until the log holds `text` (the child must not exit first).
    pub fn wait_for_log(&self, child: &mut Child, text: &str) {
        self.wait_until(child, &format!("logged '{text}'"), || {
            self.log().contains(text)
        });
    }

    /// Waits until `done` (the child must not exit first).
    pub fn wait_until(&self, child: &mut Child, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !done() {
            assert!(
                child.try_wait().expect("child status").is_none(),
                "the server exited before it {what}: {}",
                self.log()
            );
            if Instant::now() >= deadline {
                // a failed test leaves no server behind
                let _ = child.kill();
                let _ = child.wait();
                panic!("never {what}: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGTERM, then the exit code.
    pub fn terminate(&self, mut child: Child) -> i32 {
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        child.wait().expect("reaped").code().unwrap_or(-1)
    }

    /// Runs with `--exit-when-settled` to its end; the exit code.
    pub fn finish(&self) -> i32 {
        let mut child = self.spawn(true);
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = child.try_wait().expect("child status") {
                return status.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the server never settled: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// [`LedgerRun::finish`] with a fresh log: the exit code and what this run alone
    /// wrote on stderr.
    pub fn finish_with_log(&self) -> (i32, String) {
        let _ = std::fs::remove_file(self.path("server.log"));
        let code = self.finish();
        (code, self.log())
    }

    /// The offset the feed's pointer file holds.
    pub fn pointer(&self) -> u64 {
        let bytes = std::fs::read(self.pointer_path()).expect("pointer file");
        u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes"))
    }

    /// `rounds` runs, each killed with SIGKILL once the ledger (state in `state`) has
    /// applied `first + round * step` more lines (at most `total`); after each kill the
    /// source's committed position (`committed`, read while the server is dead) must not
    /// be ahead of the ledger's saved one. Returns the number of kills.
    pub fn kill_rounds(
        &self,
        rounds: u64,
        (first, step, total): (u64, u64, u64),
        committed: impl Fn() -> u64,
    ) -> u64 {
        let mut applied = 0;
        for round in 0..rounds {
            let mut child = self.spawn(false);
            let target = (applied + first + round * step).min(total);
            self.wait_until(&mut child, &format!("applied {target} lines"), || {
                self.applied() >= target
            });
            child.kill().expect("SIGKILL");
            child.wait().expect("reaped");
            let saved = self.state_in("state");
            let committed = committed();
            assert!(
                committed <= saved.position,
                "after kill {}: the committed position ({committed}) is ahead of the ledger's saved position ({})",
                round + 1,
                saved.position
            );
            applied = saved.applied;
        }
        rounds
    }

    /// The lines the ledger in `state` has applied (0 before its state exists).
    pub fn applied(&self) -> u64 {
        LedgerState::load(&self.path("state")).map_or(0, |state| state.applied)
    }

    /// The ledger's saved state in `state_dir` (relative to the folder).
    pub fn state_in(&self, state_dir: &str) -> LedgerState {
        LedgerState::load(&self.path(state_dir)).expect("state readable")
    }
}

/// Waits for `child` to exit (up to 120 s); its status.
pub fn wait_exit(child: &mut Child, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().expect("child status") {
            return status;
        }
        assert!(Instant::now() < deadline, "{what} never ended");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Copies the files of `from` into `to` (made first), folders and all: a state folder
/// kept aside, to be put back later as an older copy of itself.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("a folder");
    for entry in std::fs::read_dir(from).expect("a folder") {
        let entry = entry.expect("an entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("a type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("a copy");
        }
    }
}
