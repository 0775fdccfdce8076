//! The data folder (issue 28, item 1): everything the server writes for a feed or a
//! sink lives below `data_dir` (default `data`, beside the config), so a log folder the
//! server may only read is tailed; an older run's pointer beside its input is adopted
//! once; two servers never share a data folder. Real processes, real SIGKILL.

use crate::support;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use support::LedgerRun;

/// A forward of feed `lines` on `input` into the file sink `out` on `output`.
fn forward_config(input: &str, output: &str) -> String {
    format!(
        r#"
[[feeds]]
name = "lines"
source = "file"
path = "{input}"
read_strategy = "COMMITED"

[[sinks]]
name = "out"
kind = "file"
path = "{output}"
batch = 512

[[groups]]
name = "forward"
[[groups.processors]]
name = "copy"
kind = "forward"
settings = {{ feed = "lines", sink = "out" }}
"#
    )
}

fn lines(from: usize, count: usize) -> String {
    (from..from + count)
        .map(|index| format!("{index:08} {}\n", "y".repeat(index % 53)))
        .collect()
}

/// The names in `folder`.
fn listing(folder: &Path) -> BTreeSet<String> {
    std::fs::read_dir(folder)
        .expect("list")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// The epoch a pointer file holds (bytes 8..16).
fn epoch_of(pointer: &Path) -> u64 {
    let bytes = std::fs::read(pointer).expect("the pointer");
    u64::from_be_bytes(bytes[8..16].try_into().expect("8 bytes"))
}

#[test]
fn a_read_only_input_folder_is_tailed_killed_and_resumed_exactly_once() {
    // before: the pointer was `logs/input.txt.readPointer`, beside the input: a folder
    // the server may only read could not be tailed ("cannot open pointer file ...:
    // Permission denied", exit 1), and as root the folder was written to
    let text = lines(0, 400_000);
    let mut run = LedgerRun::new("", &forward_config("logs/input.txt", "out.txt"));
    run.log_filter = "warn,mongoose_server::cli=info,mongoose_sink=info";
    let logs = run.path("logs");
    std::fs::create_dir(&logs).expect("logs");
    std::fs::write(logs.join("input.txt"), &text).expect("input");
    std::fs::set_permissions(logs.join("input.txt"), PermissionsExt::from_mode(0o444))
        .expect("chmod input");
    std::fs::set_permissions(&logs, PermissionsExt::from_mode(0o555)).expect("chmod folder");
    // as root a chmod stops no write: that nothing new appears in the folder is the
    // property itself
    let before = listing(&logs);
    let mut child = run.spawn(false);
    run.wait_until(&mut child, "wrote part of the output", || {
        std::fs::metadata(run.path("out.txt")).is_ok_and(|meta| meta.len() > 200_000)
    });
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let written = std::fs::metadata(run.path("out.txt")).map_or(0, |meta| meta.len());
    assert!(
        written < text.len() as u64,
        "killed mid-run ({written} of {} bytes)",
        text.len()
    );
    assert_eq!(listing(&logs), before, "nothing new in the input folder");
    assert!(
        run.pointer_path_of("logs/input.txt").exists(),
        "the pointer is in the data folder: {}",
        run.log()
    );
    assert_eq!(run.finish(), 0, "the restart settles: {}", run.log());
    assert_eq!(listing(&logs), before, "nothing new in the input folder");
    let out = std::fs::read_to_string(run.path("out.txt")).expect("output");
    assert!(
        out == text,
        "every line exactly once, in order ({} lines out of {}): {}",
        out.lines().count(),
        text.lines().count(),
        run.log()
    );
    std::fs::set_permissions(&logs, PermissionsExt::from_mode(0o755)).expect("chmod back");
}

#[test]
fn a_pointer_beside_the_input_from_an_older_run_is_adopted_and_resumed_from() {
    let first = lines(0, 20_000);
    let mut run = LedgerRun::new(&first, &forward_config("input.txt", "out.txt"));
    run.log_filter = "warn,mongoose_server::cli=info,mongoose_sink=info,mongoose_source_file=info";
    assert_eq!(run.finish(), 0, "{}", run.log());
    // the layout an older run left: the pointer beside the input, the sink's state
    // beside its file, no data folder
    let pointer = run.pointer_path();
    let sink_state = run.sink_state("out", "out.txt");
    let epoch = epoch_of(&pointer);
    let (old_pointer, old_state) = (
        run.path("input.txt.readPointer"),
        run.path("out.txt.sinkstate"),
    );
    std::fs::rename(&pointer, &old_pointer).expect("pointer beside the input");
    std::fs::rename(&sink_state, &old_state).expect("state beside the output");
    std::fs::remove_dir_all(run.path("data")).expect("no data folder");
    let second = lines(20_000, 5_000);
    let mut input = std::fs::OpenOptions::new()
        .append(true)
        .open(run.path("input.txt"))
        .expect("input");
    std::io::Write::write_all(&mut input, second.as_bytes()).expect("appended");
    assert_eq!(run.finish(), 0, "{}", run.log());
    let log = run.log();
    for (old, new) in [(&old_pointer, &pointer), (&old_state, &sink_state)] {
        assert!(!old.exists(), "{} moved away: {log}", old.display());
        assert!(new.exists(), "{} adopted: {log}", new.display());
        assert!(
            log.lines().any(|line| line.contains("adopted")
                && line.contains(&old.display().to_string())
                && line.contains(&new.display().to_string())),
            "the adoption is logged with both paths: {log}"
        );
    }
    assert_eq!(
        epoch_of(&pointer),
        epoch,
        "the same pointer (its epoch), not a new one: {log}"
    );
    assert_eq!(
        log.matches("no pointer file: a new one was created")
            .count(),
        1,
        "only the first run made a pointer: {log}"
    );
    let out = std::fs::read_to_string(run.path("out.txt")).expect("output");
    assert!(
        out == format!("{first}{second}"),
        "every line exactly once ({} lines): {log}",
        out.lines().count()
    );
    // a third run finds nothing to adopt and nothing to do
    assert_eq!(run.finish(), 0, "{}", run.log());
    assert_eq!(
        std::fs::read_to_string(run.path("out.txt")).expect("output"),
        out
    );
}

#[test]
fn a_second_server_on_the_same_data_folder_is_refused() {
    let run = LedgerRun::new(&lines(0, 1_000), &forward_config("input.txt", "out.txt"));
    // the second config shares nothing with the first but its folder, so its data
    // folder: another input, another output
    std::fs::write(run.path("other.txt"), lines(0, 10)).expect("other input");
    std::fs::write(
        run.path("second.toml"),
        forward_config("other.txt", "other-out.txt"),
    )
    .expect("second config");
    let mut first = run.spawn(false);
    let pid = first.id().to_string();
    run.wait_until(&mut first, "holds its data folder", || {
        run.path("data/lock").exists()
            && std::fs::read_to_string(run.path("data/lock")).is_ok_and(|held| held.trim() == pid)
    });
    let second = Command::new(env!("CARGO_BIN_EXE_mongoose"))
        .args(["run", "--exit-when-settled", "--config"])
        .arg(run.path("second.toml"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("the second server runs");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(
        second.status.code(),
        Some(1),
        "the second server exits 1: {stderr}"
    );
    let data = run.path("data");
    assert!(
        stderr.contains(&data.display().to_string())
            && stderr.contains(&format!("the process {}", first.id())),
        "the refusal names the folder and the holder's pid: {stderr}"
    );
    assert!(
        !run.path("other-out.txt").exists(),
        "the second server opened nothing"
    );
    assert_eq!(run.terminate(first), 0, "{}", run.log());
    // once the first is gone, the folder is free
    let again = Command::new(env!("CARGO_BIN_EXE_mongoose"))
        .args(["run", "--exit-when-settled", "--config"])
        .arg(run.path("second.toml"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("the second server runs");
    assert_eq!(
        again.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

#[test]
fn a_globs_pointers_and_lane_registry_beside_its_files_are_adopted_and_resumed_from() {
    let mut run = LedgerRun::new("", &forward_config("logs/*.log", "out.txt"));
    run.log_filter = "warn,mongoose_server::cli=info,mongoose_source_file=info";
    std::fs::create_dir(run.path("logs")).expect("logs");
    let names = ["a.log", "b.log", "c.log"];
    let mut expected = Vec::new();
    for (index, name) in names.iter().enumerate() {
        let text = lines(index * 100_000, 3_000);
        std::fs::write(run.path("logs").join(name), &text).expect("input");
        expected.extend(text.lines().map(str::to_owned));
    }
    assert_eq!(run.finish(), 0, "{}", run.log());
    // the layout an older run left: pointers and the lane registry in the glob's folder
    let state = support::feed_state(run.dir.path(), "lines", "logs/*.log", "");
    let moved: Vec<String> = listing(&state).into_iter().collect();
    assert!(
        moved.iter().any(|name| name == "lines.lanes")
            && names
                .iter()
                .all(|name| moved.contains(&format!("{name}.readPointer"))),
        "the state folder holds the registry and a pointer per file: {moved:?}"
    );
    for name in &moved {
        std::fs::rename(state.join(name), run.path("logs").join(name)).expect("moved back");
    }
    std::fs::rename(
        run.sink_state("out", "out.txt"),
        run.path("out.txt.sinkstate"),
    )
    .expect("the sink state beside its file");
    std::fs::remove_dir_all(run.path("data")).expect("no data folder");
    for (index, name) in names.iter().enumerate() {
        let text = lines(index * 100_000 + 3_000, 500);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(run.path("logs").join(name))
            .expect("input");
        std::io::Write::write_all(&mut file, text.as_bytes()).expect("appended");
        expected.extend(text.lines().map(str::to_owned));
    }
    assert_eq!(run.finish(), 0, "{}", run.log());
    let log = run.log();
    for name in &moved {
        assert!(
            !run.path("logs").join(name).exists() && state.join(name).exists(),
            "{name} adopted into the data folder: {log}"
        );
    }
    assert!(
        listing(&run.path("logs")) == names.iter().map(|name| (*name).to_owned()).collect(),
        "nothing but the inputs is left in the glob's folder: {log}"
    );
    let mut out: Vec<String> = std::fs::read_to_string(run.path("out.txt"))
        .expect("output")
        .lines()
        .map(str::to_owned)
        .collect();
    out.sort();
    expected.sort();
    assert!(
        out == expected,
        "every line of every file exactly once ({} of {}): {log}",
        out.len(),
        expected.len()
    );
}

/// A folder where one config is started by several spellings of its path:
/// `app/m.toml` (its inputs in `app/logs`, its outputs in `app/out`, its data folder
/// `app/data`), `sib/` (an empty folder, for `sib/../app/m.toml`) and `link` (a
/// symlink to `app`). The config forwards `logs/input.txt` into the file sink `out`
/// and into a real HTTP target, each by a group of its own.
struct Spellings {
    dir: tempfile::TempDir,
    target: mongoose_testkit::http_target::HttpTarget,
    lines: usize,
    runs: usize,
}

impl Spellings {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let target = mongoose_testkit::http_target::HttpTarget::start();
        for folder in ["app/logs", "app/out", "sib"] {
            std::fs::create_dir_all(dir.path().join(folder)).expect("a folder");
        }
        std::os::unix::fs::symlink(dir.path().join("app"), dir.path().join("link"))
            .expect("a symlink");
        std::fs::write(dir.path().join("app/logs/input.txt"), "").expect("input");
        let config = format!(
            r#"
[[feeds]]
name = "lines"
source = "file"
path = "logs/input.txt"
read_strategy = "COMMITED"

[[sinks]]
name = "out"
kind = "file"
path = "out/out.txt"

[[sinks]]
name = "web"
kind = "http"
url = "{}"

[[groups]]
name = "copy"
[[groups.processors]]
name = "copy"
kind = "forward"
settings = {{ feed = "lines", sink = "out" }}

[[groups]]
name = "post"
[[groups.processors]]
name = "post"
kind = "forward"
settings = {{ feed = "lines", sink = "web" }}
"#,
            target.url()
        );
        std::fs::write(dir.path().join("app/m.toml"), config).expect("config");
        Spellings {
            dir,
            target,
            lines: 0,
            runs: 0,
        }
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    /// The line `index` of the input (without its line break).
    fn line(index: usize) -> String {
        format!("{index:08} s{}", "s".repeat(index % 41))
    }

    fn append(&mut self, count: usize) {
        let text: String = (self.lines..self.lines + count)
            .map(|index| format!("{}\n", Self::line(index)))
            .collect();
        let mut input = std::fs::OpenOptions::new()
            .append(true)
            .open(self.path("app/logs/input.txt"))
            .expect("input");
        std::io::Write::write_all(&mut input, text.as_bytes()).expect("appended");
        self.lines += count;
    }

    /// `mongoose run --exit-when-settled --config <config>` from the folder `cwd`
    /// (relative to the test's folder) to its end: the exit code and its stderr.
    fn run(&mut self, cwd: &str, config: &str) -> (i32, String) {
        self.runs += 1;
        let log = self.path(&format!("run-{}.log", self.runs));
        let mut child = Command::new(support::binary())
            .current_dir(self.path(cwd))
            .args(["run", "--exit-when-settled", "--config", config])
            .env("RUST_LOG", "warn,mongoose_server=info")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("the mongoose binary starts");
        let status = support::wait_exit(&mut child, config);
        (
            status.code().unwrap_or(-1),
            std::fs::read_to_string(&log).unwrap_or_default(),
        )
    }

    /// Asserts that the file sink holds every line so far once, in order, and that
    /// the HTTP target took every line once.
    fn assert_every_line_once(&self, context: &str, log: &str) {
        let expected: Vec<String> = (0..self.lines).map(Self::line).collect();
        let written = std::fs::read_to_string(self.path("app/out/out.txt")).unwrap_or_default();
        let written: Vec<&str> = written.lines().collect();
        assert!(
            written == expected,
            "{context}: the file sink holds every line once, in order ({} lines of {}): {log}",
            written.len(),
            expected.len()
        );
        let mut posted: Vec<String> = self
            .target
            .taken()
            .into_iter()
            .map(|(_, body)| body.trim_end().to_owned())
            .collect();
        posted.sort();
        let first_difference = posted
            .iter()
            .zip(&expected)
            .find(|(posted, expected)| posted != expected);
        assert!(
            posted == expected,
            "{context}: the HTTP target took every line once ({} requests for {} lines; first difference {first_difference:?}): {log}",
            posted.len(),
            expected.len()
        );
    }

    /// The state folders of `kind` (`feeds`, `sinks`) in the data folder.
    fn state_folders(&self, kind: &str) -> BTreeSet<String> {
        listing(&self.path("app/data").join(kind))
    }
}

#[test]
fn the_same_config_by_another_path_spelling_keeps_its_state() {
    // issue 36, item 1: state folders were keyed on the path as spelled, so the same
    // config started as `sib/../app/m.toml` or through a symlinked folder found no
    // state: the HTTP forward sent all 2,000 lines again under new keys, and the file
    // sink refused to start (its file held outputs its new, empty state did not know)
    let mut world = Spellings::new();
    world.append(2_000);
    let spellings = [
        ("", "app/m.toml"),
        ("", "sib/../app/m.toml"),
        ("", "link/m.toml"),
        // relative, from another working folder, through the symlink
        ("sib", "../link/m.toml"),
    ];
    for (round, (cwd, config)) in spellings.into_iter().enumerate() {
        if round > 0 {
            world.append(500);
        }
        let config = if cwd.is_empty() {
            world.path(config).display().to_string()
        } else {
            config.to_owned()
        };
        let (code, log) = world.run(cwd, &config);
        assert_eq!(code, 0, "the run by {config} settles: {log}");
        world.assert_every_line_once(&format!("after the run by {config}"), &log);
        for kind in ["feeds", "sinks"] {
            let folders = world.state_folders(kind);
            assert_eq!(
                folders.len(),
                1,
                "one state folder in {kind} whatever the spelling: {folders:?}: {log}"
            );
        }
    }
}

/// Renames the one state folder of `kind` to the key an older release gave `name`
/// on `path` as spelled (relative to the test's folder): the layout it left after a
/// run by that spelling. Returns the new folder.
fn keep_as_spelled(world: &Spellings, kind: &str, name: &str, path: &str) -> std::path::PathBuf {
    let folders = world.state_folders(kind);
    assert_eq!(folders.len(), 1, "{folders:?}");
    let parent = world.path("app/data").join(kind);
    let current = parent.join(folders.first().expect("one"));
    let old = parent.join(mongoose_server::config::data_dir::state_key_as_spelled(
        name,
        &world.path(path),
    ));
    assert_ne!(current, old, "{path} is not spelled as the canonical path");
    std::fs::rename(&current, &old).expect("renamed");
    old
}

#[test]
fn state_an_older_release_kept_under_another_spelling_is_adopted_once() {
    // issue 36, item 1: a release before it keyed state on the path as spelled; its
    // state, kept after a run by `link/m.toml`, is found by a start by `app/m.toml`
    // (its pointer names the input's file, its sink state the output's) and renamed
    // to the canonical key, logged once with both paths
    let mut world = Spellings::new();
    world.append(1_000);
    let (code, log) = world.run("", &world.path("app/m.toml").display().to_string());
    assert_eq!(code, 0, "{log}");
    let (feed, sink) = (world.state_folders("feeds"), world.state_folders("sinks"));
    let old_feed = keep_as_spelled(&world, "feeds", "lines", "link/logs/input.txt");
    let old_sink = keep_as_spelled(&world, "sinks", "out", "link/out/out.txt");
    world.append(500);
    let (code, log) = world.run("", &world.path("app/m.toml").display().to_string());
    assert_eq!(code, 0, "{log}");
    world.assert_every_line_once("after the adoption", &log);
    assert_eq!(world.state_folders("feeds"), feed, "{log}");
    assert_eq!(world.state_folders("sinks"), sink, "{log}");
    for old in [&old_feed, &old_sink] {
        assert!(!old.exists(), "{} moved: {log}", old.display());
        assert_eq!(
            log.lines()
                .filter(|line| line.contains("adopted the state folder")
                    && line.contains(&old.display().to_string()))
                .count(),
            1,
            "the adoption of {} is logged once, with both paths: {log}",
            old.display()
        );
    }
    // the next start has nothing to adopt
    world.append(100);
    let (code, log) = world.run("", &world.path("link/m.toml").display().to_string());
    assert_eq!(code, 0, "{log}");
    assert!(!log.contains("adopted"), "{log}");
    world.assert_every_line_once("after the run after the adoption", &log);
}

#[test]
fn state_kept_under_two_older_spellings_is_refused_naming_both() {
    // issue 36, item 1: two folders of one input (older runs by two spellings): which
    // position to resume from is the operator's to decide
    let mut world = Spellings::new();
    world.append(1_000);
    let (code, log) = world.run("", &world.path("app/m.toml").display().to_string());
    assert_eq!(code, 0, "{log}");
    let by_link = keep_as_spelled(&world, "feeds", "lines", "link/logs/input.txt");
    let by_sib = by_link.with_file_name(mongoose_server::config::data_dir::state_key_as_spelled(
        "lines",
        &world.path("sib/../app/logs/input.txt"),
    ));
    support::copy_dir(&by_link, &by_sib);
    world.append(500);
    let (code, log) = world.run("", &world.path("app/m.toml").display().to_string());
    assert_eq!(code, 1, "refused: {log}");
    for folder in [&by_link, &by_sib] {
        assert!(
            log.contains(&folder.display().to_string()) && folder.exists(),
            "the refusal names {} and leaves it: {log}",
            folder.display()
        );
    }
    assert!(
        log.contains("keep the folder to resume from"),
        "it says what to do: {log}"
    );
    assert_eq!(
        world.state_folders("feeds").len(),
        2,
        "nothing moved: {log}"
    );
    assert_eq!(world.target.taken().len(), 1_000, "nothing sent: {log}");
    // the operator keeps one: it is adopted
    std::fs::remove_dir_all(&by_sib).expect("removed");
    let (code, log) = world.run("", &world.path("app/m.toml").display().to_string());
    assert_eq!(code, 0, "{log}");
    world.assert_every_line_once("after the operator kept one", &log);
}

#[test]
fn an_input_folder_symlink_moved_while_running_keeps_its_state_at_the_next_start() {
    // found attacking issue 36, item 1: with state keyed on the canonical path, a feed
    // on `current/logs/app.log` (`current -> rel1`, a deploy's layout) keeps its
    // pointer in the folder of `rel1`; the link moved to `rel2` while the server ran,
    // the source followed the new file, and the next start, keyed on `rel2`, found no
    // state and sent all of rel2's lines again. The pointer names rel2's file: its
    // folder is adopted.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = |name: &str| dir.path().join(name);
    let target = mongoose_testkit::http_target::HttpTarget::start();
    for release in ["rel1/logs", "rel2/logs"] {
        std::fs::create_dir_all(path(release)).expect("a folder");
    }
    std::os::unix::fs::symlink("rel1", path("current")).expect("a symlink");
    let write_lines = |file: &str, prefix: &str, range: std::ops::Range<usize>| {
        let text: String = range.map(|n| format!("{prefix} {n:05}\n")).collect();
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path(file))
            .expect("input");
        std::io::Write::write_all(&mut file, text.as_bytes()).expect("written");
    };
    write_lines("rel1/logs/app.log", "one", 0..1_000);
    std::fs::write(
        path("m.toml"),
        format!(
            r#"
[[feeds]]
name = "app"
source = "file"
path = "current/logs/app.log"

[[sinks]]
name = "web"
kind = "http"
url = "{}"

[[groups]]
name = "post"
[[groups.processors]]
name = "post"
kind = "forward"
settings = {{ feed = "app", sink = "web" }}
"#,
            target.url()
        ),
    )
    .expect("config");
    let spawn = |exit_when_settled: bool, log: &str| {
        let mut command = Command::new(support::binary());
        command.arg("run").arg("--config").arg(path("m.toml"));
        if exit_when_settled {
            command.arg("--exit-when-settled");
        }
        command
            .env("RUST_LOG", "warn,mongoose_server=info")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(path(log)).expect("log"))
            .spawn()
            .expect("the mongoose binary starts")
    };
    let wait_for = |count: usize, child: &mut std::process::Child| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while target.taken().len() < count {
            assert!(
                child.try_wait().expect("status").is_none(),
                "the server ended"
            );
            assert!(
                std::time::Instant::now() < deadline,
                "{} of {count} lines sent",
                target.taken().len()
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    };
    let mut child = spawn(false, "run-1.log");
    wait_for(1_000, &mut child);
    // the deploy: a new release, its log, the link moved
    write_lines("rel2/logs/app.log", "two", 0..700);
    std::fs::remove_file(path("current")).expect("unlinked");
    std::os::unix::fs::symlink("rel2", path("current")).expect("moved");
    wait_for(1_700, &mut child);
    let stopped = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(stopped.success());
    let first = support::wait_exit(&mut child, "the first run");
    let log = std::fs::read_to_string(path("run-1.log")).unwrap_or_default();
    assert_eq!(first.code(), Some(0), "{log}");
    write_lines("rel2/logs/app.log", "two", 700..900);
    let mut child = spawn(true, "run-2.log");
    let second = support::wait_exit(&mut child, "the second run");
    let log = std::fs::read_to_string(path("run-2.log")).unwrap_or_default();
    assert_eq!(second.code(), Some(0), "{log}");
    let mut posted: Vec<String> = target
        .taken()
        .into_iter()
        .map(|(_, body)| body.trim_end().to_owned())
        .collect();
    posted.sort();
    let mut expected: Vec<String> = (0..1_000)
        .map(|n| format!("one {n:05}"))
        .chain((0..900).map(|n| format!("two {n:05}")))
        .collect();
    expected.sort();
    assert!(
        posted == expected,
        "every line sent once ({} requests for {} lines): {log}",
        posted.len(),
        expected.len()
    );
    assert_eq!(
        listing(&path("data/feeds")).len(),
        1,
        "one state folder: {log}"
    );
}
