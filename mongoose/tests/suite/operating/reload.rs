//! SIGHUP reloads the config (issue 28, item 3), through the real binary: an added
//! feed and processor process their lines; a removed feed commits what was processed,
//! so adding it back (by a reload or a restart) resumes exactly; an invalid file and a
//! change that cannot apply live are logged and the old config keeps running; many
//! SIGHUPs while lines flow never kill the server, and nothing is lost or doubled; a
//! SIGTERM is still the normal clean stop (exit 0).
//!
//! Every output goes to the stdout sink (no de-duplication), one line `FEED LINE` per
//! input line, into a file per run: a line processed twice shows twice.

use crate::support;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `mongoose` binary: this build's, or `MONGOOSE_BIN` (another build, e.g. an
/// older one, to see a test fail).
fn binary() -> String {
    std::env::var("MONGOOSE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mongoose").into())
}

/// How long anything may take before the test calls it a hang.
const HANG: Duration = Duration::from_secs(90);

struct Dir {
    dir: tempfile::TempDir,
    runs: usize,
}

impl Dir {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        for feed in ["app", "audit"] {
            std::fs::write(dir.path().join(format!("{feed}.log")), "").expect("input");
        }
        Dir { dir, runs: 0 }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Appends `count` lines `NAME-<n>` from `first` to `NAME.log`.
    fn append(&self, feed: &str, first: usize, count: usize) {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(self.path(&format!("{feed}.log")))
            .expect("input");
        let text: String = (first..first + count)
            .map(|n| format!("{feed}-{n}\n"))
            .collect();
        file.write_all(text.as_bytes()).expect("append");
    }

    fn write_config(&self, text: &str) {
        // written aside and renamed: a reload never reads half a file
        let aside = self.path("mongoose.toml.new");
        std::fs::write(&aside, text).expect("config");
        std::fs::rename(&aside, self.path("mongoose.toml")).expect("config");
    }

    /// Starts `mongoose run` (stdout and stderr into files of this run).
    fn spawn(&mut self, exit_when_settled: bool) -> Run {
        self.runs += 1;
        let out = self.path(&format!("out-{}.txt", self.runs));
        let log = self.path(&format!("log-{}.txt", self.runs));
        let mut command = Command::new(binary());
        command
            .arg("run")
            .arg("--config")
            .arg(self.path("mongoose.toml"))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::from(std::fs::File::create(&out).expect("out")))
            .stderr(Stdio::from(std::fs::File::create(&log).expect("log")));
        if exit_when_settled {
            command.arg("--exit-when-settled");
        }
        let child = command.spawn().expect("the mongoose binary starts");
        let run = Run { child, log };
        run.wait_for_log("server started");
        run
    }

    /// Every output line of every run so far, counted.
    fn outputs(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for run in 1..=self.runs {
            let text =
                std::fs::read_to_string(self.path(&format!("out-{run}.txt"))).unwrap_or_default();
            for line in text.lines() {
                *counts.entry(line.to_owned()).or_insert(0) += 1;
            }
        }
        counts
    }

    /// Waits until the outputs hold `NAME-<n>` for every n below `count` of `feed`.
    fn wait_for_outputs(&self, run: &mut Run, feed: &str, count: usize) {
        let deadline = Instant::now() + HANG;
        loop {
            let outputs = self.outputs();
            let seen = (0..count)
                .filter(|n| outputs.contains_key(&format!("{feed} {feed}-{n}")))
                .count();
            if seen == count {
                return;
            }
            run.assert_running(&format!(
                "waiting for {count} lines of {feed} ({seen} seen)"
            ));
            assert!(
                Instant::now() < deadline,
                "only {seen} of {count} lines of {feed} processed; log:\n{}",
                run.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Asserts every line of `feed` below `count` was output exactly once, over all runs.
    fn assert_exactly_once(&self, feed: &str, count: usize) {
        let outputs = self.outputs();
        for n in 0..count {
            let line = format!("{feed} {feed}-{n}");
            assert_eq!(
                outputs.get(&line).copied().unwrap_or(0),
                1,
                "{line} is output exactly once"
            );
        }
        let extra = outputs
            .keys()
            .filter(|line| line.starts_with(&format!("{feed} ")))
            .count();
        assert_eq!(extra, count, "no other line of {feed} is output");
    }
}

struct Run {
    child: Child,
    log: PathBuf,
}

impl Run {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn assert_running(&mut self, what: &str) {
        if let Some(status) = self.child.try_wait().expect("status") {
            panic!(
                "the server ended ({status}) while {what}; log:\n{}",
                self.log()
            );
        }
    }

    fn wait_for_log(&self, text: &str) {
        self.wait_for_log_count(text, 1);
    }

    /// Waits until the log holds `text` at least `count` times.
    fn wait_for_log_count(&self, text: &str, count: usize) {
        let deadline = Instant::now() + HANG;
        while self.log().matches(text).count() < count {
            assert!(
                Instant::now() < deadline,
                "no {count} x '{text}' in the log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal}");
    }

    /// Sends SIGHUP and waits for the reload's outcome (the `count`-th reload line).
    fn reload(&mut self, count: usize) {
        self.signal("HUP");
        let deadline = Instant::now() + HANG;
        while outcomes(&self.log()) < count {
            self.assert_running("waiting for a reload's outcome");
            assert!(
                Instant::now() < deadline,
                "no reload outcome:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, and the exit code of the clean stop.
    fn terminate(mut self) -> i32 {
        self.signal("TERM");
        let deadline = Instant::now() + HANG;
        loop {
            if let Some(status) = self.child.try_wait().expect("status") {
                return status.code().unwrap_or_else(|| {
                    panic!("ended by a signal: {status}; log:\n{}", self.log())
                });
            }
            assert!(Instant::now() < deadline, "no stop:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// How many reloads ended (their outcome logged) in `log`.
fn outcomes(log: &str) -> usize {
    log.matches("configuration reloaded").count()
        + log.matches("configuration reload invalid").count()
        + log.matches("configuration reload refused").count()
        + log.matches("configuration reload failed").count()
}

/// A feed, its group and its forward processor, all named `name`, into sink `out`.
fn part(name: &str) -> String {
    format!(
        "[[feeds]]\nname = \"{name}\"\nsource = \"file\"\npath = \"{name}.log\"\n\
         [[groups]]\nname = \"{name}\"\nidle_strategy = \"sleeping-millis:1\"\n\
         [[groups.processors]]\nname = \"{name}\"\nkind = \"forward\"\n\
         settings = {{ feed = \"{name}\", sink = \"out\", template = \"{{feed}} {{line}}\" }}\n"
    )
}

fn config(parts: &[&str]) -> String {
    let mut text = "shutdown_drain_timeout_millis = 10000\n\
                    [[sinks]]\nname = \"out\"\nkind = \"stdout\"\n"
        .to_owned();
    for name in parts {
        text.push_str(&part(name));
    }
    text
}

#[test]
fn a_sighup_adds_a_feed_and_its_processor_and_their_lines_get_processed() {
    let mut dir = Dir::new();
    dir.append("app", 0, 100);
    dir.append("audit", 0, 50);
    dir.write_config(&config(&["app"]));
    let mut run = dir.spawn(false);
    dir.wait_for_outputs(&mut run, "app", 100);
    dir.write_config(&config(&["app", "audit"]));
    run.reload(1);
    assert!(
        run.log().contains("configuration reloaded"),
        "applied:\n{}",
        run.log()
    );
    dir.wait_for_outputs(&mut run, "audit", 50);
    dir.append("app", 100, 100);
    dir.append("audit", 50, 50);
    dir.wait_for_outputs(&mut run, "app", 200);
    dir.wait_for_outputs(&mut run, "audit", 100);
    assert_eq!(run.terminate(), 0, "SIGTERM is still the clean stop");
    dir.assert_exactly_once("app", 200);
    dir.assert_exactly_once("audit", 100);
}

#[test]
fn a_removed_feed_commits_what_was_processed_and_adding_it_back_resumes_exactly() {
    let mut dir = Dir::new();
    dir.append("app", 0, 50);
    dir.append("audit", 0, 100);
    dir.write_config(&config(&["app", "audit"]));
    let mut run = dir.spawn(false);
    dir.wait_for_outputs(&mut run, "audit", 100);
    // removed: its source stops, its processed position is committed
    dir.write_config(&config(&["app"]));
    run.reload(1);
    assert!(run.log().contains("removed feed"), "{}", run.log());
    dir.append("audit", 100, 100);
    dir.append("app", 50, 50);
    dir.wait_for_outputs(&mut run, "app", 100);
    // added back by a reload: it resumes after what was committed
    dir.write_config(&config(&["app", "audit"]));
    run.reload(2);
    dir.wait_for_outputs(&mut run, "audit", 200);
    // removed again, more lines while it is out, then a restart with it
    dir.write_config(&config(&["app"]));
    run.reload(3);
    dir.append("audit", 200, 100);
    assert_eq!(
        run.terminate(),
        0,
        "clean stop; the earlier run's log is in log-1"
    );
    dir.write_config(&config(&["app", "audit"]));
    let mut restarted = dir.spawn(false);
    dir.wait_for_outputs(&mut restarted, "audit", 300);
    assert_eq!(restarted.terminate(), 0);
    dir.assert_exactly_once("audit", 300);
    dir.assert_exactly_once("app", 100);
}

#[test]
fn an_invalid_config_is_logged_and_the_old_one_keeps_running_and_processing() {
    let mut dir = Dir::new();
    dir.append("app", 0, 10);
    dir.write_config(&config(&["app"]));
    let mut run = dir.spawn(false);
    dir.wait_for_outputs(&mut run, "app", 10);
    // not TOML, then an unset variable, then a processor naming no feed, then an added
    // feed whose folder does not exist (the checks of a start: run would refuse it)
    let broken = [
        "[[feeds]\nname = ".to_owned(),
        config(&["app"]).replace("app.log", "${RELOAD_TEST_SURELY_UNSET}/app.log"),
        config(&["app", "audit"]).replace("feed = \"audit\"", "feed = \"nothing\""),
        config(&["app", "audit"]).replace("path = \"audit.log\"", "path = \"missing/audit.log\""),
    ];
    for (index, text) in broken.iter().enumerate() {
        dir.write_config(text);
        run.reload(index + 1);
        dir.append("app", 10 * (index + 1), 10);
        dir.wait_for_outputs(&mut run, "app", 10 * (index + 2));
    }
    let log = run.log();
    assert_eq!(
        log.matches(
            "configuration reload invalid: nothing changed, the old configuration keeps running"
        )
        .count(),
        4,
        "{log}"
    );
    assert!(
        log.contains("environment variable RELOAD_TEST_SURELY_UNSET is not set"),
        "the reason is logged:\n{log}"
    );
    assert!(
        log.contains("feeds[1].path"),
        "the missing folder is named by its key:\n{log}"
    );
    assert_eq!(run.terminate(), 0);
    dir.assert_exactly_once("app", 50);
    assert!(
        !dir.outputs().keys().any(|line| line.starts_with("audit")),
        "nothing of the invalid file was applied"
    );
}

#[test]
fn a_change_that_cannot_apply_live_is_refused_and_the_old_config_keeps_running() {
    let mut dir = Dir::new();
    dir.append("app", 0, 10);
    dir.append("audit", 0, 10);
    std::fs::write(dir.path("other.log"), "other-0\n").expect("other");
    dir.write_config(&config(&["app"]));
    let mut run = dir.spawn(false);
    dir.wait_for_outputs(&mut run, "app", 10);
    // the app feed's path changes, and a feed is added: the whole reload is refused
    let changed =
        config(&["app", "audit"]).replacen("path = \"app.log\"", "path = \"other.log\"", 1);
    dir.write_config(&changed);
    run.reload(1);
    let log = run.log();
    assert!(
        log.contains("feeds[app].path: \"app.log\" -> \"other.log\"")
            && log.contains("restart to apply it"),
        "the change is named by its path, with both values:\n{log}"
    );
    assert!(
        log.contains(
            "configuration reload refused: nothing changed, the old configuration keeps running"
        ),
        "{log}"
    );
    dir.append("app", 10, 10);
    dir.wait_for_outputs(&mut run, "app", 20);
    assert_eq!(run.terminate(), 0);
    let outputs = dir.outputs();
    assert!(
        !outputs
            .keys()
            .any(|line| line.starts_with("audit") || line.contains("other")),
        "nothing of the refused file was applied: {outputs:?}"
    );
    dir.assert_exactly_once("app", 20);
}

#[test]
fn many_sighups_while_lines_flow_never_kill_the_server_and_nothing_is_lost_or_doubled() {
    let mut dir = Dir::new();
    dir.write_config(&config(&["app", "audit"]));
    let mut run = dir.spawn(false);
    let mut next = 0;
    for round in 0..30 {
        // lines flow into both feeds while audit is removed and added back
        dir.append("app", next, 300);
        dir.append("audit", next, 300);
        next += 300;
        let parts: &[&str] = if round % 2 == 0 {
            &["app"]
        } else {
            &["app", "audit"]
        };
        dir.write_config(&config(parts));
        run.signal("HUP");
        if round % 5 == 4 {
            // some in a burst, some waited for
            run.reload(outcomes(&run.log()) + 1);
        }
        run.assert_running("sending SIGHUPs");
    }
    dir.write_config(&config(&["app", "audit"]));
    run.reload(outcomes(&run.log()) + 1);
    dir.wait_for_outputs(&mut run, "app", next);
    dir.wait_for_outputs(&mut run, "audit", next);
    let log = run.log();
    assert!(!log.contains("panicked"), "{log}");
    assert!(
        log.contains("removed feed 'audit'") && log.contains("added feed 'audit'"),
        "audit was removed and added back live:\n{log}"
    );
    assert_eq!(run.terminate(), 0);
    dir.assert_exactly_once("app", next);
    dir.assert_exactly_once("audit", next);
}

#[test]
fn a_sink_and_a_processor_added_then_removed_by_reloads_publish_what_they_were_given() {
    let mut dir = Dir::new();
    dir.append("app", 0, 10);
    dir.write_config(&config(&["app"]));
    let mut run = dir.spawn(false);
    dir.wait_for_outputs(&mut run, "app", 10);
    // a file sink and a second consumer of the running feed `app`, writing to it
    let copier = "[[sinks]]\nname = \"copy\"\nkind = \"file\"\npath = \"copy.txt\"\n\
                  [[groups]]\nname = \"copier\"\n[[groups.processors]]\nname = \"copier\"\n\
                  kind = \"forward\"\nsettings = { feed = \"app\", sink = \"copy\" }\n";
    dir.write_config(&format!("{}{copier}", config(&["app"])));
    run.reload(1);
    let log = run.log();
    assert!(
        log.contains("added sink 'copy'") && log.contains("added processor 'copier/copier'"),
        "{log}"
    );
    // a consumer added to a running feed is given what the feed publishes from then on
    dir.append("app", 10, 20);
    dir.wait_for_outputs(&mut run, "app", 30);
    let copied = |dir: &Dir| std::fs::read_to_string(dir.path("copy.txt")).unwrap_or_default();
    let deadline = Instant::now() + HANG;
    while copied(&dir).lines().count() < 20 {
        run.assert_running("waiting for the copy");
        assert!(Instant::now() < deadline, "copy.txt: {}", copied(&dir));
        std::thread::sleep(Duration::from_millis(20));
    }
    let expected: String = (10..30).map(|n| format!("app-{n}\n")).collect();
    assert_eq!(copied(&dir), expected, "each line once, in order");
    // both removed: the processor stops through the control plane, the sink stops
    dir.write_config(&config(&["app"]));
    run.reload(2);
    let log = run.log();
    assert!(
        log.contains("removed sink 'copy'") && log.contains("removed group 'copier'"),
        "{log}"
    );
    dir.append("app", 30, 10);
    dir.wait_for_outputs(&mut run, "app", 40);
    let log = run.log.clone();
    let code = run.terminate();
    assert_eq!(
        code,
        0,
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(
        copied(&dir),
        expected,
        "nothing more reached the removed sink"
    );
    dir.assert_exactly_once("app", 40);
}

/// Issue 36.3: a forward into the file sink `out` (`copy`) and one into the HTTP sink
/// `http` at `url` (the test CA's `ca.pem`, as processor `http`), in one group, so that
/// removing the HTTP pair leaves the group's queue to the other. `http` `None`: without
/// the HTTP pair; `Some(suffix)`: its sink and processor named `http{suffix}`.
fn one_group_with_http(url: &str, http: Option<&str>) -> String {
    let mut text = String::from(
        r#"
shutdown_timeout_millis = 2000

[[feeds]]
name = "lines"
source = "file"
path = "input.txt"
read_strategy = "COMMITED"

[[sinks]]
name = "out"
kind = "file"
path = "out.txt"
"#,
    );
    if let Some(suffix) = http {
        text.push_str(&format!(
            r#"
[[sinks]]
name = "http{suffix}"
kind = "http"
url = "{url}"
ca_file = "ca.pem"
initial_backoff_millis = 5
max_backoff_millis = 50
"#
        ));
    }
    text.push_str(
        r#"
[[groups]]
name = "forward"
[[groups.processors]]
name = "copy"
kind = "forward"
settings = { feed = "lines", sink = "out" }
"#,
    );
    if let Some(suffix) = http {
        text.push_str(&format!(
            r#"[[groups.processors]]
name = "http{suffix}"
kind = "forward"
settings = {{ feed = "lines", sink = "http{suffix}" }}
"#
        ));
    }
    text
}

/// A run whose HTTP target refuses everything until every line is in the file sink:
/// the HTTP sink holds all of them. Returns the run, its child, the target and the
/// input.
fn held_by_the_http_sink() -> (
    support::LedgerRun,
    Child,
    mongoose_testkit::https::HttpsTarget,
    String,
) {
    let text: String = (0..300).map(|n| format!("held-{n:05}\n")).collect();
    let mut run = support::LedgerRun::new(&text, "");
    // the reload's outcome is logged at INFO
    run.log_filter = "warn,mongoose_server=info";
    let ca = mongoose_testkit::https::TestCa::new("target CA");
    let target = mongoose_testkit::https::HttpsTarget::start(&ca.issue(&["127.0.0.1"]), None);
    std::fs::write(run.path("ca.pem"), ca.cert_pem()).expect("the CA");
    std::fs::write(
        run.path("mongoose.toml"),
        one_group_with_http(&target.url(), Some("")),
    )
    .expect("config");
    target.answer(Some(503));
    let mut child = run.spawn(false);
    run.wait_until(&mut child, "wrote every line to the file sink", || {
        std::fs::read_to_string(run.path("out.txt")).is_ok_and(|out| out == text)
    });
    (run, child, target, text)
}

/// Sends SIGHUP and waits until the reload's outcome is logged.
fn reload(run: &support::LedgerRun, child: &mut Child) {
    let before = run.log().matches("configuration reloaded").count();
    let sent = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    run.wait_until(child, "reloaded", || {
        run.log().matches("configuration reloaded").count() > before
    });
}

#[test]
fn a_reload_that_replaces_a_sink_holding_outputs_delivers_them() {
    // before: the removed sink's gates were forgotten, the pointer jumped to the end
    // and the 300 held lines never reached the new sink's target, nor after a restart
    let (run, mut child, target, text) = held_by_the_http_sink();
    std::fs::write(
        run.path("mongoose.toml"),
        one_group_with_http(&target.url(), Some("-new")),
    )
    .expect("the HTTP pair replaced");
    reload(&run, &mut child);
    target.answer(None);
    // the feed is stalled behind the removed sink's held outputs: a stop says so (1)
    let code = run.terminate(child);
    assert_eq!(code, 1, "stopped with the feed stalled: {}", run.log());
    let (code, log) = run.finish_with_log();
    assert_eq!(code, 0, "{log}");
    let taken: std::collections::BTreeSet<String> =
        target.taken().into_iter().map(|(_, body)| body).collect();
    let missing = text.lines().filter(|line| !taken.contains(*line)).count();
    assert_eq!(
        missing, 0,
        "the held lines reach the replacement's target: {log}"
    );
}

#[test]
fn a_reload_that_removes_a_sink_holding_outputs_keeps_their_inputs_uncommitted() {
    let (run, mut child, target, text) = held_by_the_http_sink();
    std::fs::write(
        run.path("mongoose.toml"),
        one_group_with_http(&target.url(), None),
    )
    .expect("the HTTP pair removed");
    reload(&run, &mut child);
    // a line after the reload, written by the file sink: commit passes ran since
    let after = "after-the-reload\n";
    append_to(&run.path("input.txt"), after);
    let both = text.clone() + after;
    run.wait_until(&mut child, "forwarded the line after the reload", || {
        std::fs::read_to_string(run.path("out.txt")).is_ok_and(|out| out == both)
    });
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    assert_eq!(
        run.pointer(),
        0,
        "the inputs of the outputs the removed sink held stay uncommitted: {}",
        run.log()
    );
    assert!(
        run.log().contains("removed by a reload left"),
        "the feed says why it holds: {}",
        run.log()
    );
}

fn append_to(path: &std::path::Path, text: &str) {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("input")
        .write_all(text.as_bytes())
        .expect("append");
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("address").port()
}

/// `GET /status` of the admin API at `address`.
fn status(address: &str) -> serde_json::Value {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let text = agent
        .get(&format!("http://{address}/status"))
        .call()
        .expect("the admin API answers")
        .body_mut()
        .read_to_string()
        .expect("a body");
    serde_json::from_str(&text).expect("JSON")
}

#[test]
fn a_reload_that_changes_data_dir_is_refused() {
    // issue 36, item 2: a reload that changed `data_dir` was reported applied while
    // the state stayed where it was and the new folder had no lock: a second server on
    // it ran, took the first one's pointer and sent none of its 3,000 lines, and the
    // first one's next start exited 1
    let mut dir = Dir::new();
    let address = format!("127.0.0.1:{}", free_port());
    let with = |data_dir: &str| {
        format!(
            "data_dir = \"{data_dir}\"\n{}\n[admin]\naddress = \"{address}\"\n",
            config(&["app"])
        )
    };
    dir.append("app", 0, 100);
    dir.write_config(&with("state-a"));
    let mut run = dir.spawn(false);
    dir.wait_for_outputs(&mut run, "app", 100);
    dir.write_config(&with("state-b"));
    run.reload(1);
    let report = status(&address);
    let last = &report["lastReload"];
    assert_eq!(last["outcome"], "refused", "{report}");
    let reasons = last["reasons"].to_string();
    assert!(
        reasons.contains("`data_dir` changed") && reasons.contains("restart to move it"),
        "the reason names the key and says to restart: {reasons}"
    );
    assert_eq!(report["configGeneration"], 1, "{report}");
    // a storm of reloads while lines flow, the folder named by other spellings too
    // (`./state-a` is the same folder: nothing to refuse there)
    let spellings = ["state-b", "./state-a", "state-a/../state-b", "state-a"];
    let mut next = 100;
    for round in 0..24 {
        dir.append("app", next, 50);
        next += 50;
        dir.write_config(&with(spellings[round % spellings.len()]));
        run.signal("HUP");
        if round % 4 == 3 {
            run.reload(outcomes(&run.log()) + 1);
        }
        run.assert_running("sending SIGHUPs");
    }
    dir.write_config(&with("state-a"));
    run.reload(outcomes(&run.log()) + 1);
    dir.wait_for_outputs(&mut run, "app", next);
    let report = status(&address);
    assert_eq!(
        report["configGeneration"], 1,
        "no reload was applied: {report}"
    );
    let log = run.log();
    assert!(!log.contains("panicked"), "{log}");
    assert!(
        !dir.path("state-b").exists(),
        "nothing was made in the folder the refused reloads named"
    );
    assert_eq!(run.terminate(), 0);
    // the state stayed in `state-a`: a restart resumes after every line
    dir.append("app", next, 50);
    next += 50;
    let mut restarted = dir.spawn(false);
    dir.wait_for_outputs(&mut restarted, "app", next);
    assert_eq!(restarted.terminate(), 0);
    dir.assert_exactly_once("app", next);
}

#[test]
fn a_server_that_gains_state_by_reload_holds_the_lock() {
    // issue 36, item 2: a server started with nothing to keep in its data folder never
    // took the folder's lock, even once a reload gave it a feed with a pointer: a
    // second server on the folder ran and wrote the same pointers
    let mut dir = Dir::new();
    dir.append("app", 0, 100);
    dir.append("audit", 0, 10);
    dir.write_config(&config(&[]));
    let mut run = dir.spawn(false);
    dir.write_config(&config(&["app"]));
    run.reload(1);
    assert!(
        run.log().contains("configuration reloaded"),
        "applied: {}",
        run.log()
    );
    dir.wait_for_outputs(&mut run, "app", 100);
    let pid = run.child.id();
    assert_eq!(
        std::fs::read_to_string(dir.path("data/lock"))
            .unwrap_or_default()
            .trim(),
        pid.to_string(),
        "the lock file names the server: {}",
        run.log()
    );
    // a second server beside the first (its data folder is `data` too)
    std::fs::write(dir.path("second.toml"), config(&["audit"])).expect("second config");
    let second = Command::new(binary())
        .args(["run", "--exit-when-settled", "--config"])
        .arg(dir.path("second.toml"))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("the second server runs");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(
        second.status.code(),
        Some(1),
        "the second server is refused: {stderr}"
    );
    assert!(
        stderr.contains("is in use by") && stderr.contains(&format!("the process {pid}")),
        "the refusal names the first server: {stderr}"
    );
    assert!(
        String::from_utf8_lossy(&second.stdout).is_empty(),
        "the second server processed nothing"
    );
    // the first runs on
    dir.append("app", 100, 100);
    dir.wait_for_outputs(&mut run, "app", 200);
    assert_eq!(run.terminate(), 0);
    dir.assert_exactly_once("app", 200);
}

#[test]
fn a_data_dir_symlink_moved_under_the_server_is_refused_at_the_next_reload() {
    // found attacking issue 36, item 2: `data_dir` a symlink, moved to another folder
    // while the server runs: the config's text is the same, the folder it names is not;
    // the state stays (and is written) where the server locked it
    let mut dir = Dir::new();
    for folder in ["state-a", "state-b"] {
        std::fs::create_dir(dir.path(folder)).expect("a folder");
    }
    std::os::unix::fs::symlink("state-a", dir.path("state")).expect("a symlink");
    let text = format!("data_dir = \"state\"\n{}", config(&["app"]));
    dir.append("app", 0, 100);
    dir.write_config(&text);
    let mut run = dir.spawn(false);
    dir.wait_for_outputs(&mut run, "app", 100);
    std::fs::remove_file(dir.path("state")).expect("unlinked");
    std::os::unix::fs::symlink("state-b", dir.path("state")).expect("moved");
    run.reload(1);
    let log = run.log();
    assert!(
        log.contains("reload refused: `data_dir` changed")
            && log.contains(&dir.path("state-a").display().to_string()),
        "refused, naming the folder the state is in: {log}"
    );
    dir.append("app", 100, 100);
    dir.wait_for_outputs(&mut run, "app", 200);
    assert_eq!(run.terminate(), 0);
    assert_eq!(
        std::fs::read_dir(dir.path("state-b"))
            .expect("listed")
            .count(),
        0,
        "nothing written in the folder the link names now"
    );
    dir.assert_exactly_once("app", 200);
}

/// Issue 39, item 5: an empty config file (an editor's truncating save) was applied
/// like any other and removed every feed, sink and group, logged at INFO (a config
/// without `[admin]`; with one, it was refused for the changed admin address instead,
/// naming no file). Now an empty, blank or comment-only file is refused, naming it,
/// and so is a file of top-level keys with no table (it was applied too, and removed
/// everything).
#[test]
fn an_empty_config_file_is_refused_by_reload() {
    let mut dir = Dir::new();
    dir.append("app", 0, 10);
    dir.write_config(&config(&["app"]));
    let mut run = dir.spawn(false);
    dir.wait_for_outputs(&mut run, "app", 10);
    let files = [
        "",
        "\n  \n",
        "# only a comment\n",
        "shutdown_drain_timeout_millis = 10000\n",
    ];
    for (index, text) in files.iter().enumerate() {
        dir.write_config(text);
        run.reload(index + 1);
        // the feed still runs: its lines still come
        dir.append("app", 10 * (index + 1), 10);
        dir.wait_for_outputs(&mut run, "app", 10 * (index + 2));
    }
    let log = run.log();
    assert_eq!(
        log.matches("an editor's truncating save?").count(),
        4,
        "each empty file is refused, naming it:\n{log}"
    );
    assert!(
        log.contains(&dir.path("mongoose.toml").display().to_string()),
        "the file is named:\n{log}"
    );
    assert_eq!(run.terminate(), 0);
    dir.assert_exactly_once("app", 50);
}

/// A feed read by a group of two forwards into file sinks: `copy` into `out.txt` and
/// `also{suffix}` into `also{suffix}.txt`.
fn a_group_of_two_forwards(suffix: usize) -> String {
    format!(
        r#"
shutdown_timeout_millis = 2000

[[feeds]]
name = "lines"
source = "file"
path = "input.txt"
read_strategy = "COMMITED"

[[sinks]]
name = "out"
kind = "file"
path = "out.txt"

[[sinks]]
name = "also{suffix}"
kind = "file"
path = "also{suffix}.txt"

[[groups]]
name = "forward"
[[groups.processors]]
name = "copy"
kind = "forward"
settings = {{ feed = "lines", sink = "out" }}
[[groups.processors]]
name = "also{suffix}"
kind = "forward"
settings = {{ feed = "lines", sink = "also{suffix}" }}
"#
    )
}

#[test]
fn a_reload_that_replaces_a_forward_while_lines_flow_gives_the_replacement_every_line_after_the_old_ones(
) {
    // chaos reload seed 1796642187050 (a soak): a processor and its sink replaced by a
    // reload while the group's other processor went on: the lines the group took
    // between the old one's stop and the new one's start went to the other processor
    // only, were committed, and the replacement never got them (518 to 1,877 lines of
    // 9,055 never reached the HTTP target, exit 0)
    let mut run = support::LedgerRun::new("", "");
    run.log_filter = "warn,mongoose_server=info";
    std::fs::write(run.path("mongoose.toml"), a_group_of_two_forwards(0)).expect("config");
    let mut child = run.spawn(false);
    // lines appended all along the reloads: some reach the group in each window
    let input = run.path("input.txt");
    let writing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let writer = {
        let writing = std::sync::Arc::clone(&writing);
        std::thread::spawn(move || {
            let mut next = 0usize;
            while writing.load(std::sync::atomic::Ordering::Acquire) {
                let text: String = (next..next + 50)
                    .map(|n| format!("flow-{n:07}\n"))
                    .collect();
                append_to(&input, &text);
                next += 50;
                std::thread::sleep(Duration::from_millis(1));
            }
            next
        })
    };
    // the server is up (its SIGHUP handler too) once lines come out
    run.wait_until(&mut child, "forwarded lines", || {
        std::fs::metadata(run.path("also0.txt")).is_ok_and(|meta| meta.len() > 0)
    });
    for suffix in 1..=5 {
        std::fs::write(
            run.path("mongoose.toml.new"),
            a_group_of_two_forwards(suffix),
        )
        .expect("the replacement's config");
        std::fs::rename(run.path("mongoose.toml.new"), run.path("mongoose.toml"))
            .expect("config in place");
        reload(&run, &mut child);
    }
    writing.store(false, std::sync::atomic::Ordering::Release);
    let written = writer.join().expect("the writer");
    let text: String = (0..written).map(|n| format!("flow-{n:07}\n")).collect();
    run.wait_until(&mut child, "wrote every line to the file sink", || {
        std::fs::read_to_string(run.path("out.txt")).is_ok_and(|out| out == text)
    });
    let last = format!("flow-{:07}\n", written - 1);
    run.wait_until(&mut child, "the last replacement caught up", || {
        std::fs::read_to_string(run.path("also5.txt")).is_ok_and(|out| out.ends_with(&last))
    });
    let code = run.terminate(child);
    let mut got = std::collections::BTreeSet::new();
    for suffix in 0..=5 {
        let out =
            std::fs::read_to_string(run.path(&format!("also{suffix}.txt"))).unwrap_or_default();
        got.extend(out.lines().map(str::to_owned));
    }
    let missing: Vec<&str> = text.lines().filter(|line| !got.contains(*line)).collect();
    assert!(
        missing.is_empty(),
        "{} of {written} lines never reached any of the replaced forwards (first: {:?}), exit {code}: {}",
        missing.len(),
        missing.first(),
        run.log()
    );
    assert_eq!(code, 0, "{}", run.log());
}

/// A file feed `lines` on `input.txt` forwarded into the HTTP sink `http` at `url`
/// (the test CA's `ca.pem`), in ndjson batches of `batch_max_lines`, with a `[admin]` on
/// `admin`; `extra` is added to the sink's table.
fn forward_in_batches(url: &str, admin: &str, batch_max_lines: usize, extra: &str) -> String {
    format!(
        r#"
shutdown_timeout_millis = 5000

[admin]
address = "{admin}"

[[feeds]]
name = "lines"
source = "file"
path = "input.txt"

[[sinks]]
name = "http"
kind = "http"
url = "{url}"
ca_file = "ca.pem"
batch_max_lines = {batch_max_lines}
batch_timeout_millis = 500
initial_backoff_millis = 5
max_backoff_millis = 50
{extra}

[[groups]]
name = "forward"
[[groups.processors]]
name = "http"
kind = "forward"
settings = {{ feed = "lines", sink = "http" }}
"#
    )
}

/// Issue 39, item 5: a reload that changed an HTTP sink's `batch_max_lines` (a
/// setting the sink can take between two batches) was refused as a whole, naming no
/// key ("sink 'http': `batch_max_lines` changed: restart to apply it"): the batches
/// stayed at 5 lines. Now it applies live, between batches: the lines after it arrive
/// in batches of up to 50, every line once.
#[test]
fn a_reload_changing_a_batch_size_applies_live() {
    let mut run = support::LedgerRun::new("", "");
    run.log_filter = "warn,mongoose_server=info";
    let ca = mongoose_testkit::https::TestCa::new("target CA");
    let target = mongoose_testkit::https::HttpsTarget::start(&ca.issue(&["127.0.0.1"]), None);
    std::fs::write(run.path("ca.pem"), ca.cert_pem()).expect("the CA");
    let admin = format!("127.0.0.1:{}", free_port());
    std::fs::write(
        run.path("mongoose.toml"),
        forward_in_batches(&target.url(), &admin, 5, ""),
    )
    .expect("config");
    let mut child = run.spawn(false);
    let taken_lines = |target: &mongoose_testkit::https::HttpsTarget| {
        target
            .taken()
            .into_iter()
            .map(|(_, line)| line)
            .collect::<Vec<_>>()
    };
    let before: String = (0..200).map(|n| format!("before-{n:04}\n")).collect();
    append_to(&run.path("input.txt"), &before);
    run.wait_until(&mut child, "posted the lines before the reload", || {
        taken_lines(&target).len() >= 200
    });
    let requests_before = target.requests().len();
    let largest_before = target
        .requests()
        .iter()
        .map(|request| request.lines().len())
        .max();
    assert!(
        largest_before <= Some(5),
        "batches of 5: {largest_before:?}"
    );
    std::fs::write(
        run.path("mongoose.toml.new"),
        forward_in_batches(&target.url(), &admin, 50, ""),
    )
    .expect("the new config");
    std::fs::rename(run.path("mongoose.toml.new"), run.path("mongoose.toml")).expect("in place");
    reload_to_any_outcome(&run, &mut child);
    let report = status(&admin);
    assert_eq!(report["lastReload"]["outcome"], "applied", "{report}");
    let changes = report["lastReload"]["changes"].to_string();
    assert!(
        changes.contains("sinks[http].batch_max_lines") && changes.contains("5 -> 50"),
        "the change is named with both values: {changes}"
    );
    let after: String = (0..1000).map(|n| format!("after-{n:04}\n")).collect();
    append_to(&run.path("input.txt"), &after);
    run.wait_until(&mut child, "posted the lines after the reload", || {
        taken_lines(&target).len() >= 1200
    });
    let requests = target.requests();
    let sizes_after: Vec<usize> = requests[requests_before..]
        .iter()
        .map(|request| request.lines().len())
        .collect();
    let largest_after = sizes_after.iter().copied().max().unwrap_or(0);
    assert!(
        largest_after > 5 && largest_after <= 50,
        "the batches after the reload are up to 50 lines: {sizes_after:?}: {}",
        run.log()
    );
    assert_eq!(run.terminate(child), 0, "{}", run.log());
    let taken = taken_lines(&target);
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for line in &taken {
        *counts.entry(line.as_str()).or_default() += 1;
    }
    for line in before.lines().chain(after.lines()) {
        assert_eq!(counts.get(line), Some(&1), "{line} posted once");
    }
    assert_eq!(taken.len(), 1200, "nothing else was posted");
}

/// Issue 39, item 5: a reload that changed two settings that cannot apply live was
/// refused naming them as "`path` changed" per part, without their values, and a
/// setting that can apply live in the same file was refused without a word. Now each
/// key is named by its path with its old and new values, in the log and in `/status`,
/// the live one as not applied (a file applies whole or not at all).
#[test]
fn a_refused_reload_names_each_changed_key() {
    let mut run = support::LedgerRun::new("", "");
    run.log_filter = "warn,mongoose_server=info";
    let ca = mongoose_testkit::https::TestCa::new("target CA");
    let target = mongoose_testkit::https::HttpsTarget::start(&ca.issue(&["127.0.0.1"]), None);
    std::fs::write(run.path("ca.pem"), ca.cert_pem()).expect("the CA");
    std::fs::write(run.path("other.txt"), "other-0\n").expect("another input");
    let admin = format!("127.0.0.1:{}", free_port());
    std::fs::write(
        run.path("mongoose.toml"),
        forward_in_batches(&target.url(), &admin, 5, ""),
    )
    .expect("config");
    let mut child = run.spawn(false);
    append_to(&run.path("input.txt"), "first\n");
    run.wait_until(&mut child, "posted the first line", || {
        target.taken().len() == 1
    });
    // two keys that cannot apply live (the feed's input, the sink's compression) and
    // one that can (the sink's retries)
    let changed = forward_in_batches(
        &target.url(),
        &admin,
        5,
        "compression = \"gzip\"\nmax_retries = 3",
    )
    .replace("path = \"input.txt\"", "path = \"other.txt\"");
    std::fs::write(run.path("mongoose.toml.new"), changed).expect("the new config");
    std::fs::rename(run.path("mongoose.toml.new"), run.path("mongoose.toml")).expect("in place");
    reload_to_any_outcome(&run, &mut child);
    let log = run.log();
    let report = status(&admin);
    let last = &report["lastReload"];
    assert_eq!(last["outcome"], "refused", "{report}");
    let reasons = last["reasons"].to_string();
    for named in [
        "feeds[lines].path",
        "\\\"input.txt\\\" -> \\\"other.txt\\\"",
        "sinks[http].compression",
        "(unset) -> \\\"gzip\\\"",
    ] {
        assert!(reasons.contains(named), "{named} in /status: {reasons}");
        let in_log = named.replace("\\\"", "\"");
        assert!(log.contains(&in_log), "{in_log} in the log: {log}");
    }
    assert!(
        reasons.contains("sinks[http].max_retries: (unset) -> 3: could apply live, not applied"),
        "the live key named, not applied: {reasons}"
    );
    assert_eq!(
        last["changes"].as_array().map(Vec::len),
        Some(0),
        "{report}"
    );
    // the feed still reads its input, into the same sink
    append_to(&run.path("input.txt"), "second\n");
    run.wait_until(&mut child, "posted the second line", || {
        target.taken().len() == 2
    });
    assert_eq!(run.terminate(child), 0, "{}", run.log());
    let lines: Vec<String> = target.taken().into_iter().map(|(_, line)| line).collect();
    assert_eq!(lines, ["first", "second"], "nothing of other.txt was read");
}

/// Sends SIGHUP and waits until the reload's outcome, whichever, is logged.
fn reload_to_any_outcome(run: &support::LedgerRun, child: &mut Child) {
    let before = outcomes(&run.log());
    let sent = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    run.wait_until(child, "ended the reload", || outcomes(&run.log()) > before);
}

/// The file feed `lines` forwarded into the file sink `out.txt`, logging with
/// `log_level`.
fn forward_logging_at(log_level: &str) -> String {
    format!(
        r#"
log_level = "{log_level}"

[[feeds]]
name = "lines"
source = "file"
path = "input.txt"

[[sinks]]
name = "out"
kind = "file"
path = "out.txt"

[[groups]]
name = "forward"
[[groups.processors]]
name = "copy"
kind = "forward"
settings = {{ feed = "lines", sink = "out" }}
"#
    )
}

/// Issue 39, item 5: the log level changes with a reload (a `log_level` key, read
/// instead of `RUST_LOG`), live.
#[test]
fn a_reload_changing_the_log_level_applies_live() {
    let mut run = support::LedgerRun::new("", &forward_logging_at("error"));
    run.log_filter = "info";
    let mut child = run.spawn(false);
    append_to(&run.path("input.txt"), "first\n");
    run.wait_until(&mut child, "forwarded the first line", || {
        std::fs::read_to_string(run.path("out.txt")).is_ok_and(|out| out == "first\n")
    });
    assert!(
        !run.log().contains("server started"),
        "log_level = \"error\" wins over RUST_LOG=info: {}",
        run.log()
    );
    std::fs::write(run.path("mongoose.toml.new"), forward_logging_at("info")).expect("config");
    std::fs::rename(run.path("mongoose.toml.new"), run.path("mongoose.toml")).expect("in place");
    reload_to_any_outcome(&run, &mut child);
    let log = run.log();
    assert!(
        log.contains("log_level: \"error\" -> \"info\" (applied live)"),
        "the reload is logged at INFO, naming the change: {log}"
    );
    assert_eq!(run.terminate(child), 0, "{}", run.log());
    assert!(
        run.log().contains("signal received"),
        "INFO from then on: {}",
        run.log()
    );
}

/// Issue 39, item 5: a feed's overload bound changes live (the feed's queues take it);
/// its policy does not (it decides whether the feed may drop), and the refusal says so.
#[test]
fn a_reload_changing_an_overload_bound_applies_live_and_a_policy_change_is_refused() {
    let with = |overload: &str| {
        config(&["app"]).replacen(
            "path = \"app.log\"\n",
            &format!("path = \"app.log\"\noverload = {{ {overload} }}\n"),
            1,
        )
    };
    let mut dir = Dir::new();
    dir.append("app", 0, 10);
    dir.write_config(&with("policy = \"PAUSE\", spin_bound_millis = 5"));
    let mut run = dir.spawn(false);
    dir.wait_for_outputs(&mut run, "app", 10);
    dir.write_config(&with("policy = \"PAUSE\", spin_bound_millis = 7"));
    run.reload(1);
    let log = run.log();
    assert!(
        log.contains("reload: feeds[app].overload.spin_bound_millis: 5 -> 7 (applied live)")
            && log.contains("overload settings changed (a reload)"),
        "{log}"
    );
    dir.append("app", 10, 10);
    dir.wait_for_outputs(&mut run, "app", 20);
    dir.write_config(&with("policy = \"DROP_AFTER_SPIN\", spin_bound_millis = 7"));
    run.reload(2);
    let log = run.log();
    assert!(
        log.contains("reload refused: feeds[app].overload.policy: \"PAUSE\" -> \"DROP_AFTER_SPIN\": the policy decides whether the feed may drop or must wait"),
        "{log}"
    );
    dir.append("app", 20, 10);
    dir.wait_for_outputs(&mut run, "app", 30);
    assert_eq!(run.terminate(), 0);
    dir.assert_exactly_once("app", 30);
}
