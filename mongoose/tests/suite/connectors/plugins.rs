//! Connector plugins in the server (issue 14): the `mongoose` binary loads
//! `mongoose-plugin/fixture` (the template's kinds with the test variants) (built by cargo in the test) from its `plugin_dir`, runs the
//! plugin's source as a feed and its sink as a `[[sinks]]` entry, contains a plugin
//! source that panics, refuses a kind no plugin declares, and lists a plugin folder.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mongoose_testkit::{build_plugin, plugin_dir};

const PATIENCE: Duration = Duration::from_secs(180);

fn template(features: &[&str]) -> PathBuf {
    build_plugin("fixture-plugin", features)
}

fn mongoose(dir: &Path, arguments: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mongoose"));
    command
        .current_dir(dir)
        .args(arguments)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn spawn(dir: &Path, arguments: &[&str]) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("server.log"))
        .expect("log");
    Command::new(env!("CARGO_BIN_EXE_mongoose"))
        .current_dir(dir)
        .args(arguments)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("the mongoose binary starts")
}

fn log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
}

fn wait_until(child: &mut Child, dir: &Path, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(
            child.try_wait().expect("child status").is_none(),
            "the server exited before it {what}: {}",
            log(dir)
        );
        assert!(Instant::now() < deadline, "never {what}: {}", log(dir));
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_exit(child: &mut Child, dir: &Path) -> i32 {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = child.try_wait().expect("child status") {
            return status.code().unwrap_or(-1);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the server never ended: {}", log(dir));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("address").port()
}

fn status(address: &str) -> serde_json::Value {
    let text = ureq::get(&format!("http://{address}/status"))
        .call()
        .expect("answered")
        .body_mut()
        .read_to_string()
        .expect("body");
    serde_json::from_str(&text).expect("JSON")
}

/// A forward processor copying `feed` to `sink` in group `group`.
fn forward(group: &str, feed: &str, sink: &str) -> String {
    format!(
        r#"
[[groups]]
name = "{group}"
idle_strategy = "sleeping-millis:1"

[[groups.processors]]
name = "copy"
kind = "forward"
settings = {{ feed = "{feed}", sink = "{sink}" }}
"#
    )
}

/// The template's counter feed (`feed_lines` added to its table) copied by a forward
/// processor to the template's append sink at `out`.
fn counter_to_append(feed_lines: &str, limit: u64, pointer: &str, out: &str) -> String {
    format!(
        r#"
plugin_dir = "plugins"

[[feeds]]
name = "counted"
source = "counter"
{feed_lines}
[feeds.settings]
limit = {limit}
pointer = "{pointer}"

[[sinks]]
name = "appended"
kind = "append"
settings = {{ path = "{out}" }}
{forward}
"#,
        forward = forward("copy", "counted", "appended"),
    )
}

// A plugin's relative paths resolve against the config file's folder, as the server's
// own do: a server started from another working directory finds the same pointer
// (committed position) again. Failing before its fix: they resolved against the
// working directory, so a restart from elsewhere read the source from the start again.
#[test]
fn a_plugins_relative_paths_resolve_against_the_config_files_folder() {
    let dir = tempfile::tempdir().expect("scratch");
    let root = dir.path();
    let conf = root.join("conf");
    std::fs::create_dir(&conf).expect("conf");
    plugin_dir(&conf, &[&template(&[])]);
    let config = counter_to_append("", 100, "counter.pointer", "out.txt");
    std::fs::write(conf.join("mongoose.toml"), config).expect("config");
    // started from `root`, not from the config's folder
    let mut child = spawn(
        root,
        &[
            "run",
            "--config",
            "conf/mongoose.toml",
            "--exit-when-settled",
        ],
    );
    let code = wait_exit(&mut child, root);
    assert_eq!(code, 0, "{}", log(root));
    let expected: Vec<String> = (0..100).map(|n| n.to_string()).collect();
    assert_eq!(lines_of(&conf.join("out.txt")), expected, "{}", log(root));
    assert_eq!(
        std::fs::read_to_string(conf.join("counter.pointer")).expect("the pointer"),
        "100"
    );
    assert!(!root.join("out.txt").exists() && !root.join("counter.pointer").exists());
}

#[test]
fn a_plugin_source_and_sink_run_in_the_server_until_settled() {
    let dir = tempfile::tempdir().expect("scratch");
    let root = dir.path();
    plugin_dir(root, &[&template(&[])]);
    let config = counter_to_append(
        "queue_capacity = 16",
        2000,
        &root.join("counter.pointer").display().to_string(),
        &root.join("out.txt").display().to_string(),
    );
    std::fs::write(root.join("mongoose.toml"), config).expect("config");
    let validated = mongoose(root, &["validate", "--config", "mongoose.toml"])
        .output()
        .expect("validate ran");
    assert!(
        validated.status.success(),
        "{}",
        String::from_utf8_lossy(&validated.stderr)
    );
    let mut child = spawn(
        root,
        &["run", "--config", "mongoose.toml", "--exit-when-settled"],
    );
    let code = wait_exit(&mut child, root);
    assert_eq!(code, 0, "{}", log(root));
    let expected: Vec<String> = (0..2000).map(|n| n.to_string()).collect();
    assert_eq!(
        lines_of(&root.join("out.txt")),
        expected,
        "every item once, in order"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("counter.pointer")).expect("pointer"),
        "2000",
        "committed after processing, to the end"
    );
    // the plugin's own `tracing` event, forwarded by the SDK with the feed's name
    let log = log(root);
    let forwarded = log
        .lines()
        .find(|line| line.contains("counter source starting from=0"))
        .unwrap_or_else(|| panic!("the plugin's info event is in the server's log: {log}"));
    assert!(forwarded.contains("counted"), "{forwarded}");
    assert!(!log.contains("not forwarded"), "{log}");
    // and one raised on a thread of the plugin's own, outside any call of the server's
    let from_thread = log
        .lines()
        .find(|line| line.contains("counter source: an event from a plugin thread"))
        .unwrap_or_else(|| panic!("the plugin thread's event is in the server's log: {log}"));
    assert!(from_thread.contains("WARN"), "{from_thread}");
    assert!(from_thread.contains("fixture"), "{from_thread}");
}

#[test]
fn a_panicking_plugin_source_fails_its_feed_and_the_server_keeps_running() {
    let dir = tempfile::tempdir().expect("scratch");
    let root = dir.path();
    plugin_dir(root, &[&template(&["panic-source"])]);
    let input: String = (0..500).map(|n| format!("line {n}\n")).collect();
    std::fs::write(root.join("input.txt"), &input).expect("input");
    let address = format!("127.0.0.1:{}", free_port());
    let config = format!(
        r#"
plugin_dir = "plugins"

[admin]
address = "{address}"

[[feeds]]
name = "lines"
source = "file"
path = "input.txt"

[[feeds]]
name = "counted"
source = "counter"
[feeds.settings]
pointer = "{pointer}"

[[sinks]]
name = "out"
kind = "file"
path = "out.txt"

[[sinks]]
name = "counted-out"
kind = "file"
path = "counted-out.txt"
{forward}
{counted}
"#,
        pointer = root.join("counter.pointer").display(),
        forward = forward("copy", "lines", "out"),
        // a feed nothing consumes is refused at load (issue 39, item 3)
        counted = forward("count", "counted", "counted-out"),
    );
    std::fs::write(root.join("mongoose.toml"), config).expect("config");
    let mut child = spawn(root, &["run", "--config", "mongoose.toml"]);
    // the healthy feed processes its file
    wait_until(&mut child, root, "copied the file feed", || {
        lines_of(&root.join("out.txt")).len() == 500
    });
    // the plugin feed failed, with the panic's message in its status
    wait_until(&mut child, root, "reported the plugin feed failed", || {
        status(&address)["feeds"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|feed| {
                feed["feed"] == "counted"
                    && feed["detail"].as_str().is_some_and(|detail| {
                        detail.contains("FAILED") && detail.contains("panics on purpose")
                    })
            })
    });
    // and the server keeps running: lines appended now are copied too
    let more: String = (500..600).map(|n| format!("line {n}\n")).collect();
    std::fs::OpenOptions::new()
        .append(true)
        .open(root.join("input.txt"))
        .and_then(|mut file| std::io::Write::write_all(&mut file, more.as_bytes()))
        .expect("appended");
    wait_until(&mut child, root, "copied the appended lines", || {
        lines_of(&root.join("out.txt")).len() == 600
    });
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    let code = wait_exit(&mut child, root);
    let log = log(root);
    assert_eq!(code, 1, "a run with a failed feed is not clean: {log}");
    assert!(
        log.contains("feed 'counted'") && log.contains("panics on purpose"),
        "the reason is on stderr: {log}"
    );
    assert!(
        !log.contains("SIGABRT") && !log.contains("aborting"),
        "{log}"
    );
}

#[test]
fn a_panicking_plugin_source_ends_a_run_that_waits_to_settle_with_exit_1() {
    // the failed feed has a consumer, so it is not stalled for want of one: only its
    // failure can end the wait
    let dir = tempfile::tempdir().expect("scratch");
    let root = dir.path();
    plugin_dir(root, &[&template(&["panic-source"])]);
    std::fs::write(root.join("input.txt"), "a\nb\n").expect("input");
    let config = format!(
        r#"
plugin_dir = "plugins"

[[feeds]]
name = "lines"
source = "file"
path = "input.txt"

[[feeds]]
name = "counted"
source = "counter"
[feeds.settings]
pointer = "{pointer}"

[[sinks]]
name = "out"
kind = "file"
path = "out.txt"

[[sinks]]
name = "counted-out"
kind = "file"
path = "counted.txt"
{forward}

[[groups.processors]]
name = "copy-counted"
kind = "forward"
settings = {{ feed = "counted", sink = "counted-out" }}
"#,
        pointer = root.join("counter.pointer").display(),
        forward = forward("copy", "lines", "out"),
    );
    std::fs::write(root.join("mongoose.toml"), config).expect("config");
    let mut child = spawn(
        root,
        &["run", "--config", "mongoose.toml", "--exit-when-settled"],
    );
    let code = wait_exit(&mut child, root);
    let log = log(root);
    assert_eq!(code, 1, "{log}");
    assert!(
        log.contains("mongoose: feed 'counted': FAILED") && log.contains("panics on purpose"),
        "{log}"
    );
    assert_eq!(
        lines_of(&root.join("out.txt")),
        vec!["a", "b"],
        "the file feed was copied"
    );
}

#[test]
fn a_source_kind_no_plugin_declares_is_refused_naming_the_known_kinds_and_the_plugin_dir() {
    let dir = tempfile::tempdir().expect("scratch");
    let root = dir.path();
    plugin_dir(root, &[&template(&[])]);
    let config = "plugin_dir = \"plugins\"\n\n[[feeds]]\nname = \"j\"\nsource = \"journal\"\n";
    std::fs::write(root.join("mongoose.toml"), config).expect("config");
    let validated = mongoose(root, &["validate", "--config", "mongoose.toml"])
        .output()
        .expect("validate ran");
    let stderr = String::from_utf8_lossy(&validated.stderr);
    assert_eq!(validated.status.code(), Some(2), "{stderr}");
    for part in ["feeds[0].source", "'journal'", "[file, counter]", "plugins"] {
        assert!(stderr.contains(part), "'{part}' is not in: {stderr}");
    }
    // without a plugin_dir: the message says to set one
    std::fs::write(
        root.join("mongoose.toml"),
        "[[feeds]]\nname = \"j\"\nsource = \"journal\"\n",
    )
    .expect("config");
    let validated = mongoose(root, &["validate", "--config", "mongoose.toml"])
        .output()
        .expect("validate ran");
    let stderr = String::from_utf8_lossy(&validated.stderr);
    assert_eq!(validated.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no plugin_dir is set"), "{stderr}");
    // a plugin the handshake refuses in the folder: the start is refused with its reason
    std::fs::copy(
        template(&["wrong-abi"]),
        root.join("plugins").join("libold.so"),
    )
    .expect("copied");
    std::fs::write(root.join("mongoose.toml"), config).expect("config");
    let validated = mongoose(root, &["validate", "--config", "mongoose.toml"])
        .output()
        .expect("validate ran");
    let stderr = String::from_utf8_lossy(&validated.stderr);
    assert_eq!(validated.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("plugin_dir") && stderr.contains("libold.so was built for ABI 999"),
        "{stderr}"
    );
}

#[test]
fn plugins_list_prints_each_plugin_and_each_refusal_with_its_reason() {
    let dir = tempfile::tempdir().expect("scratch");
    let root = dir.path();
    let folder = plugin_dir(root, &[&template(&[])]);
    let listed = mongoose(root, &["plugins", "list", "--plugin-dir", "plugins"])
        .output()
        .expect("list ran");
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    for part in [
        "libfixture_plugin.so",
        "fixture",
        "0.1.0",
        "counter (source)",
        "append (sink)",
    ] {
        assert!(stdout.contains(part), "'{part}' is not in: {stdout}");
    }
    // a refused plugin beside it: listed with its reason, exit 1
    std::fs::copy(template(&["wrong-abi"]), folder.join("libold.so")).expect("copied");
    let listed = mongoose(root, &["plugins", "list", "--plugin-dir", "plugins"])
        .output()
        .expect("list ran");
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(listed.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("libfixture_plugin.so"), "{stdout}");
    assert!(
        stdout.contains("refused") && stdout.contains("libold.so") && stdout.contains("ABI 999"),
        "{stdout}"
    );
}

/// Issue 25, item 9 (the plugin part): a journal tailer name `../../evil` passed
/// `validate` (exit 0) and failed `run` when the source started (exit 1). A plugin's
/// settings are checked when the configuration is loaded: `validate` and `run` exit 2
/// with the key path, and nothing is created.
#[test]
fn a_bad_plugin_setting_is_refused_at_load_with_its_key() {
    let library = build_plugin("journal-plugin", &[]);
    let dir = tempfile::tempdir().expect("dir");
    let root = dir.path();
    plugin_dir(root, &[&library]);
    std::fs::write(
        root.join("mongoose.toml"),
        r#"
plugin_dir = "plugins"

[[feeds]]
name = "lines"
source = "journal"
codec = "line"
settings = { path = "journal", tailer = "../../evil" }

[[sinks]]
name = "out"
kind = "journal"
settings = { path = "out.journal" }

[[groups]]
name = "forward"
[[groups.processors]]
name = "copy"
kind = "forward"
settings = { feed = "lines", sink = "out" }
"#,
    )
    .expect("config");
    for arguments in [
        &["validate", "--config", "mongoose.toml"][..],
        &["run", "--config", "mongoose.toml", "--exit-when-settled"][..],
    ] {
        let mut child = mongoose(root, arguments).spawn().expect("mongoose starts");
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(status) = child.try_wait().expect("status") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("`mongoose {}` never ended", arguments[0]);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let output = child.wait_with_output().expect("output");
        let said = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            status.code(),
            Some(2),
            "`mongoose {}` refuses the config: {said}",
            arguments[0]
        );
        assert!(
            said.contains("feeds[0].settings.tailer") && said.contains("../../evil"),
            "`mongoose {}` names the key and the value: {said}",
            arguments[0]
        );
    }
    assert!(!root.join("journal").exists(), "nothing was created");
    assert!(!root.join("out.journal").exists(), "nothing was created");
}
