//! No line lost or applied twice through a failing processor or a full disk (issue 9,
//! items 1 and 2), with real processes and a real full file system: the `mongoose`
//! binary runs the ledger with its alerts file, or its state folder, on a small tmpfs
//! that fills up during the run. The first run must stop non-zero with the feed
//! stalled; a restart with space freed must apply every line exactly once.
//!
//! Needs root (to mount a tmpfs), as CI and the development machines have.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mongoose_server::ledger::LedgerState;

const LINES: usize = 3_000;

/// A line that makes many balances negative, so the alerts file grows fast.
fn line(index: usize) -> String {
    let amount = (index % 7) as i64 - 4;
    format!("acc{},{amount}\n", index % 40)
}

fn input() -> String {
    (0..LINES).map(line).collect()
}

fn expected_balances() -> BTreeMap<String, i64> {
    let mut balances = BTreeMap::new();
    for index in 0..LINES {
        let text = line(index);
        let (account, amount) = text.trim_end().split_once(',').expect("account,amount");
        *balances.entry(account.to_owned()).or_insert(0) += amount.parse::<i64>().expect("amount");
    }
    balances
}

/// A tmpfs of a few pages mounted for the test, unmounted when dropped.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Self {
        std::fs::create_dir_all(dir).expect("mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("mount runs");
        assert!(
            status.success(),
            "cannot mount a tmpfs at {} (these tests need root)",
            dir.display()
        );
        Tmpfs {
            dir: dir.to_path_buf(),
        }
    }

    /// Gives the file system room again (the operator freed space).
    fn grow(&self) {
        let status = Command::new("mount")
            .args(["-o", "remount,size=64m"])
            .arg(&self.dir)
            .status()
            .expect("mount runs");
        assert!(status.success(), "remount");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

struct Run {
    dir: tempfile::TempDir,
}

impl Run {
    /// The ledger with its state in `state_dir` and its alerts in `alerts`, both
    /// relative to the run's folder.
    fn new(state_dir: &str, alerts: &str) -> Self {
        Run::with(state_dir, alerts, "")
    }

    /// [`Run::new`] with `top` (top-level tables) added to the config.
    fn with(state_dir: &str, alerts: &str, top: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("input.txt"), input()).expect("input");
        let config = format!(
            r#"
{top}
[[feeds]]
name = "lines"
source = "file"
path = "input.txt"
read_strategy = "COMMITED"

[[groups]]
name = "ledger"
idle_strategy = "sleeping-millis:1"

[[groups.processors]]
name = "ledger"
kind = "ledger"
settings = {{ state_dir = "{state_dir}", alerts = "{alerts}" }}
"#
        );
        std::fs::write(dir.path().join("mongoose.toml"), config).expect("config");
        Run { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn spawn(&self, exit_when_settled: bool) -> Child {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mongoose"));
        command
            .arg("run")
            .arg("--config")
            .arg(self.path("mongoose.toml"));
        if exit_when_settled {
            command.arg("--exit-when-settled");
        }
        command
            .env("RUST_LOG", "warn,mongoose_server::cli=info")
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

    fn log(&self) -> String {
        std::fs::read_to_string(self.path("server.log")).unwrap_or_default()
    }

    fn wait_for_log(&self, child: &mut Child, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !self.log().contains(text) {
            assert!(
                child.try_wait().expect("child status").is_none(),
                "the server exited before logging '{text}': {}",
                self.log()
            );
            assert!(
                Instant::now() < deadline,
                "never logged '{text}': {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM, then the exit code.
    fn terminate(&self, mut child: Child) -> i32 {
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        child.wait().expect("reaped").code().unwrap_or(-1)
    }

    /// Runs until settled; the exit code.
    fn finish(&self) -> i32 {
        let mut child = self.spawn(true);
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if let Some(status) = child.try_wait().expect("child status") {
                return status.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("the restarted server never settled: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn pointer(&self) -> u64 {
        let bytes = std::fs::read(self.path("input.txt.readPointer")).expect("pointer file");
        u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes"))
    }

    fn state(&self, state_dir: &str) -> LedgerState {
        LedgerState::load(&self.path(state_dir)).expect("state readable")
    }
}

#[test]
fn a_quarantined_sole_processor_never_commits_the_rest_of_its_poll() {
    // issue 9, item 1: the alerts file on a tiny file system fills up; the failed alert
    // write quarantines the ledger. Before the fix the rest of that poll was counted
    // dispatched to nobody and committed: the restart lost those lines.
    let run = Run::new("state", "full/alerts.txt");
    let full = Tmpfs::mount(&run.path("full"), "4k");
    let mut child = run.spawn(false);
    run.wait_for_log(&mut child, "processor quarantined");
    run.wait_for_log(&mut child, "the feed holds its position before this item");
    let code = run.terminate(child);
    // the quarantined processor is retained, so the stop is incomplete (exit 4); its
    // feed was stalled behind it (exit 1 had the stop completed)
    assert_eq!(
        code,
        4,
        "a run stopped with a quarantined processor and a stalled feed is not a clean run: {}",
        run.log()
    );
    assert!(
        run.log().contains("stopped with feeds stalled") || run.log().contains("stalled"),
        "the stall is reported: {}",
        run.log()
    );
    let saved = run.state("state");
    let pointer = run.pointer();
    assert!(
        pointer <= saved.position,
        "the pointer ({pointer}) passed the saved state ({})",
        saved.position
    );
    assert!(
        saved.applied < LINES as u64,
        "the disk filled before the end"
    );
    eprintln!(
        "first run: exit {code}, {} of {LINES} lines saved, pointer {pointer}, saved position {}",
        saved.applied, saved.position
    );
    full.grow();
    assert_eq!(run.finish(), 0, "the restart settles: {}", run.log());
    let state = run.state("state");
    assert_eq!(state.applied, LINES as u64, "{}", run.log());
    assert_eq!(state.balances, expected_balances());
    eprintln!(
        "after the restart: {} of {LINES} lines applied",
        state.applied
    );
}

#[test]
fn an_exhausted_save_holds_the_position_and_a_restart_applies_the_line() {
    // issue 9, item 2: the state folder on a tiny file system fills up; every save
    // fails after its retries. Before the fix each such line was acknowledged without
    // its save and committed: the restart on free disk skipped them.
    let run = Run::new("full/state", "alerts.txt");
    let full = Tmpfs::mount(&run.path("full"), "8k");
    let mut child = run.spawn(false);
    run.wait_for_log(
        &mut child,
        "a delivery-complete callback failed after its retries",
    );
    run.wait_for_log(&mut child, "the feed holds its position before this item");
    let code = run.terminate(child);
    assert_eq!(
        code,
        3,
        "a save skipped after its retries makes the run not lossless: {}",
        run.log()
    );
    let saved = run.state("full/state");
    let pointer = run.pointer();
    assert!(
        pointer <= saved.position,
        "the pointer ({pointer}) passed the saved state ({})",
        saved.position
    );
    eprintln!(
        "first run: exit {code}, {} of {LINES} lines saved, pointer {pointer}, saved position {}",
        saved.applied, saved.position
    );
    full.grow();
    assert_eq!(run.finish(), 0, "the restart settles: {}", run.log());
    let state = run.state("full/state");
    assert_eq!(state.applied, LINES as u64, "{}", run.log());
    assert_eq!(state.balances, expected_balances());
    eprintln!(
        "after the restart: {} of {LINES} lines applied",
        state.applied
    );
}

/// A run of the ledger over `lines` lines of `a,1` that settled: (the run, its state).
fn settled_run_of_ones(lines: usize) -> Run {
    let run = Run::new("state", "alerts.txt");
    std::fs::write(run.path("input.txt"), "a,1\n".repeat(lines)).expect("input");
    assert_eq!(run.finish(), 0, "the first run settles: {}", run.log());
    assert_eq!(run.state("state").balances.get("a"), Some(&(lines as i64)));
    run
}

fn restart_and_balance(run: &Run) -> (i32, Option<i64>) {
    let code = run.finish();
    (code, run.state("state").balances.get("a").copied())
}

#[test]
fn a_deleted_pointer_resumes_from_the_saved_state() {
    // issue 9, item 3: before, the source started at 0 under a new epoch and the
    // ledger applied every line a second time (a: 10000 for 5,000 lines), exit 0
    let run = settled_run_of_ones(5_000);
    std::fs::remove_file(run.path("input.txt.readPointer")).expect("pointer deleted");
    let (code, balance) = restart_and_balance(&run);
    eprintln!("deleted pointer: exit {code}, a = {balance:?} for 5,000 lines");
    assert_eq!((code, balance), (0, Some(5_000)), "{}", run.log());
    assert!(
        run.log()
            .contains("resuming from the consumers' saved position"),
        "the repair is logged: {}",
        run.log()
    );
}

#[test]
fn a_garbage_pointer_never_double_applies() {
    for (what, bytes) in [
        (
            "random bytes",
            (0..1024u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect::<Vec<u8>>(),
        ),
        ("cut to 3 bytes", vec![0, 0, 1]),
    ] {
        let run = settled_run_of_ones(5_000);
        std::fs::write(run.path("input.txt.readPointer"), &bytes).expect("pointer damaged");
        // more lines arrive while the pointer is damaged: they must be applied once
        let mut input = std::fs::OpenOptions::new()
            .append(true)
            .open(run.path("input.txt"))
            .expect("input");
        std::io::Write::write_all(&mut input, "a,1\n".repeat(100).as_bytes()).expect("append");
        let (code, balance) = restart_and_balance(&run);
        eprintln!("{what}: exit {code}, a = {balance:?} for 5,100 lines");
        assert_eq!((code, balance), (0, Some(5_100)), "{what}: {}", run.log());
    }
}

#[test]
fn a_deleted_state_with_the_pointer_kept_reapplies_every_line() {
    // issue 9, items 3 and 4: before, the pointer at the end of the file skipped every
    // line for the new, empty state (a: None), exit 0
    let run = settled_run_of_ones(2_000);
    std::fs::remove_dir_all(run.path("state")).expect("state deleted");
    let (code, balance) = restart_and_balance(&run);
    eprintln!("deleted state: exit {code}, a = {balance:?} for 2,000 lines");
    assert_eq!((code, balance), (0, Some(2_000)), "{}", run.log());
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("address").port()
}

fn http(method: &str, address: &str, path: &str) -> (u16, serde_json::Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let url = format!("http://{address}{path}");
    let mut response = if method == "POST" {
        agent.post(&url).send_empty()
    } else {
        agent.get(&url).call()
    }
    .expect("answered");
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().expect("body");
    (
        status,
        serde_json::from_str(&body).unwrap_or(serde_json::Value::String(body)),
    )
}

#[test]
fn an_operator_release_is_a_loss_the_next_start_reports_once() {
    // issue 9, item 6: after a release accepted a loss, SIGTERM exited 0 and the next
    // run exited 0 as well
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let run = Run::with(
        "state",
        "full/alerts.txt",
        &format!("[admin]\naddress = \"{address}\"\n"),
    );
    let full = Tmpfs::mount(&run.path("full"), "4k");
    let mut child = run.spawn(false);
    run.wait_for_log(&mut child, "the feed holds its position before this item");
    let (code, refused) = http("POST", &address, "/feeds/lines/release?queue=nope");
    assert_eq!(code, 404, "an unknown queue: {refused}");
    let (code, released) = http("POST", &address, "/feeds/lines/release");
    assert_eq!(code, 200, "{released}");
    let items = released["released"].as_u64().expect("a count");
    assert!(items > 0, "the held backlog was released: {released}");
    let (_, status) = http("GET", &address, "/status");
    assert_eq!(status["lossless"], false, "{status}");
    let code = run.terminate(child);
    assert_ne!(
        code,
        0,
        "a run with a released loss is not clean: {}",
        run.log()
    );
    assert!(run.log().contains("loss recorded"), "{}", run.log());
    let pointer = run.pointer();
    let saved = run.state("state");
    assert!(
        pointer > saved.position,
        "the release let the feed commit past the held lines: pointer {pointer}, saved {}",
        saved.position
    );
    eprintln!("released {items} lines: first run exit {code}");
    full.grow();
    let second = run.finish();
    assert_eq!(
        second,
        3,
        "the next start reports the loss, once: {}",
        run.log()
    );
    assert!(
        run.log()
            .contains("an earlier run of this feed was not lossless"),
        "{}",
        run.log()
    );
    let third = run.finish();
    assert_eq!(third, 0, "reported once only: {}", run.log());
    eprintln!("next start exit {second}, the one after {third}");
}

#[test]
fn a_lost_pointer_and_state_of_another_file_refuse_to_start() {
    // issue 9, item 3: when the saved position cannot be this file's (the input was
    // replaced while the pointer was lost), the source refuses instead of guessing
    let run = settled_run_of_ones(5_000);
    std::fs::remove_file(run.path("input.txt.readPointer")).expect("pointer deleted");
    std::fs::write(run.path("input.txt"), "b,1\n".repeat(10)).expect("another input");
    let code = run.finish();
    assert_eq!(code, 1, "{}", run.log());
    assert!(
        run.log().contains("is not a line end of the input file"),
        "the refusal says why and what to do: {}",
        run.log()
    );
    assert_eq!(
        run.state("state").balances.get("b"),
        None,
        "nothing of the other file was applied"
    );
}
