//! `mongoose tap` (issue 39, item 7) against the real binary: a live sample of a feed's
//! items and a sink's outputs over the admin API, that never slows the pipeline (a tap
//! that does not keep up loses records from the tap, counted, never from the feed), and
//! that a token-protected admin API refuses without its token.
//!
//! No timing assertions: every wait is for a condition, with a generous deadline.

use crate::support;

use std::io::{BufRead, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::binary;

const PATIENCE: Duration = Duration::from_secs(240);
const TOKEN: &str = "tap-admin-token-0123456789abcdef";

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("address").port()
}

/// A folder with an empty `input.txt` and a config forwarding feed `lines` into the
/// file sink `out` (`out.txt`), with `admin` as the body of its `[admin]` table.
struct Setup {
    dir: tempfile::TempDir,
    address: String,
}

impl Setup {
    fn new(admin: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let address = format!("127.0.0.1:{}", free_port());
        std::fs::write(dir.path().join("input.txt"), "").expect("input");
        let config = format!(
            r#"
[admin]
address = "{address}"
{admin}

[[feeds]]
name = "lines"
source = "file"
path = "input.txt"
read_strategy = "COMMITTED"

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
        );
        std::fs::write(dir.path().join("mongoose.toml"), config).expect("config");
        Setup { dir, address }
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path("server.log")).unwrap_or_default()
    }

    fn spawn_server(&self) -> Child {
        Command::new(binary())
            .arg("run")
            .arg("--config")
            .arg(self.path("mongoose.toml"))
            .env("RUST_LOG", "warn,mongoose_server::admin=info")
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(self.path("server.log")).expect("log"),
            ))
            .spawn()
            .expect("the mongoose binary starts")
    }

    /// `mongoose tap ARGS --config mongoose.toml`, its stdout and stderr piped.
    fn spawn_tap(&self, args: &[&str]) -> Child {
        Command::new(binary())
            .arg("tap")
            .args(args)
            .arg("--config")
            .arg(self.path("mongoose.toml"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mongoose tap starts")
    }

    fn wait_until(&self, server: &mut Child, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !done() {
            assert!(
                server.try_wait().expect("status").is_none(),
                "the server exited before it {what}: {}",
                self.log()
            );
            assert!(Instant::now() < deadline, "never {what}: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn status(&self) -> serde_json::Value {
        let text = mongoose_server::admin::get_text(&self.address, "/status").unwrap_or_default();
        serde_json::from_str(&text).unwrap_or_default()
    }
}

/// Waits for a child's exit; its code, stdout and stderr.
fn finish(mut child: Child, what: &str) -> (i32, String, String) {
    let deadline = Instant::now() + PATIENCE;
    let stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut stdout) = stdout {
            let _ = stdout.read_to_string(&mut text);
        }
        text
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("status") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what} never ended");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    let _ = child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr);
    let stdout = reader.join().expect("stdout read");
    (status.code().unwrap_or(-1), stdout, stderr)
}

fn signal(child: &Child, name: &str) {
    let sent = Command::new("kill")
        .args([name, &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
}

#[test]
fn tap_shows_live_items_and_never_slows_the_feed() {
    const LINES: usize = 200_000;
    let setup = Setup::new("");
    let mut server = setup.spawn_server();
    setup.wait_until(&mut server, "served /status", || {
        setup.status()["feeds"][0]["feed"] == "lines"
    });

    // a slow tap: nobody reads its stdout until the feed settled, so once its pipe is
    // full it stops reading its stream, the server's tap fills and drops
    let slow = setup.spawn_tap(&["--feed", "lines"]);
    // live samples of the first items and outputs
    let first_items = setup.spawn_tap(&["--feed", "lines", "--limit", "5"]);
    let first_outputs = setup.spawn_tap(&["--sink", "out", "--limit", "3"]);
    setup.wait_until(&mut server, "attached three taps", || {
        setup.log().matches("a tap attached").count() >= 3
    });

    let input: Vec<String> = (0..LINES).map(|line| format!("line-{line:06}")).collect();
    let mut text = input.join("\n");
    text.push('\n');
    std::fs::write(setup.path("input.txt"), &text).expect("the lines");

    // the feed settles with every line in the sink exactly once, in order
    setup.wait_until(&mut server, "settled", || {
        let status = setup.status();
        status["feeds"][0]["sequence"] == LINES as u64
            && status["feeds"][0]["settled"] == true
            && status["sinks"][0]["published"] == LINES as u64
    });
    let status = setup.status();
    assert_eq!(status["feeds"][0]["lossless"], true, "{status}");
    assert_eq!(status["feeds"][0]["dropped"], 0, "{status}");
    let written = std::fs::read_to_string(setup.path("out.txt")).expect("out.txt");
    let written: Vec<&str> = written.lines().collect();
    assert_eq!(written.len(), LINES, "every line once");
    assert!(
        written.iter().zip(&input).all(|(out, line)| out == line),
        "the sink holds the lines in order, each once"
    );

    let (code, items, stderr) = finish(first_items, "the tap of 5 items");
    assert_eq!(code, 0, "{stderr}");
    let items: Vec<&str> = items.lines().collect();
    assert_eq!(items.len(), 5, "{items:?}");
    for (index, item) in items.iter().enumerate() {
        assert!(
            item.starts_with(&format!("feed lines #{} epoch ", index + 1))
                && item.ends_with(&format!(" | {}", input[index])),
            "{item}"
        );
    }
    assert!(
        items[0].contains(&format!(" at 0:{} ", input[0].len() + 1)),
        "the position is the byte offset after the line: {}",
        items[0]
    );
    assert!(stderr.contains("tap of feed lines: 5 shown"), "{stderr}");

    let (code, outputs, stderr) = finish(first_outputs, "the tap of 3 outputs");
    assert_eq!(code, 0, "{stderr}");
    let outputs: Vec<&str> = outputs.lines().collect();
    assert_eq!(outputs.len(), 3, "{outputs:?}");
    assert!(
        outputs[0].starts_with("sink out <- lines epoch ")
            && outputs[0].ends_with(&format!(" | {}", input[0])),
        "{}",
        outputs[0]
    );

    // the slow tap: read what it printed, then Ctrl-C; it reports its drops
    let mut slow = slow;
    let stdout = slow.stdout.take().expect("stdout");
    let counted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let shown_lines = std::thread::spawn({
        let counted = std::sync::Arc::clone(&counted);
        move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if line.starts_with("feed lines #") {
                    counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
            counted.load(std::sync::atomic::Ordering::Relaxed)
        }
    });
    // once it printed everything it held (no new line for 3 s: the server sends its
    // drop count every second meanwhile), the interrupt
    let mut last = (usize::MAX, Instant::now());
    setup.wait_until(&mut server, "let the slow tap print what it held", || {
        let now = counted.load(std::sync::atomic::Ordering::Relaxed);
        if now != last.0 {
            last = (now, Instant::now());
        }
        last.1.elapsed() >= Duration::from_secs(3)
    });
    signal(&slow, "-INT");
    let (code, _, stderr) = finish(slow, "the slow tap");
    let shown = shown_lines.join().expect("read");
    assert_eq!(code, 0, "{stderr}");
    let summary = stderr
        .lines()
        .find(|line| line.starts_with("tap of feed lines: "))
        .unwrap_or_else(|| panic!("no summary: {stderr}"));
    let numbers: Vec<u64> = summary
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|word| word.parse().ok())
        .collect();
    let (reported_shown, dropped) = (numbers[0], numbers[1]);
    assert_eq!(reported_shown, shown as u64, "{summary}");
    assert!(
        dropped > 0,
        "a tap that read nothing for a while dropped: {summary}"
    );
    assert!(
        reported_shown + dropped <= LINES as u64,
        "at most one record per item: {summary}"
    );
    eprintln!("slow tap: {summary}");

    signal(&server, "-TERM");
    let exit = server.wait().expect("reaped").code();
    assert_eq!(exit, Some(0), "{}", setup.log());
}

#[test]
fn a_token_protected_admin_refuses_a_tap_without_the_token() {
    let setup = Setup::new("token_file = \"admin.token\"");
    {
        use std::os::unix::fs::PermissionsExt;
        let path = setup.path("admin.token");
        std::fs::write(&path, TOKEN).expect("token");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("mode");
    }
    let mut server = setup.spawn_server();
    setup.wait_until(&mut server, "served /status", || {
        setup.status()["feeds"][0]["feed"] == "lines"
    });

    // without the token: the route answers 401, the CLI exits 1 saying what to do
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let answer = agent
        .get(&format!("http://{}/feeds/lines/tap?limit=1", setup.address))
        .call()
        .expect("answered");
    assert_eq!(answer.status().as_u16(), 401);
    let refused = Command::new(binary())
        .args([
            "tap",
            "--feed",
            "lines",
            "--limit",
            "1",
            "--admin",
            &setup.address,
        ])
        .output()
        .expect("mongoose tap runs");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("needs its token"), "{stderr}");
    assert!(
        !setup.log().contains("a tap attached"),
        "no tap attached without the token: {}",
        setup.log()
    );

    // with --config, the token of its [admin] token_file: the tap shows the line
    let tap = setup.spawn_tap(&["--feed", "lines", "--limit", "1"]);
    setup.wait_until(&mut server, "attached the tap", || {
        setup.log().contains("a tap attached")
    });
    std::fs::write(setup.path("input.txt"), "hello\n").expect("a line");
    let (code, stdout, stderr) = finish(tap, "the tap with the token");
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.ends_with("| hello\n"), "{stdout}");

    signal(&server, "-TERM");
    let _ = server.wait();
}

/// `tmux -L SOCKET args...` (a tmux server of the test's own), its stdout.
fn tmux(socket: &str, args: &[&str]) -> String {
    let output = Command::new("tmux")
        .arg("-L")
        .arg(socket)
        .args(args)
        .output()
        .expect("tmux runs");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Ends the test's tmux server when dropped.
struct TmuxServer(String);

impl Drop for TmuxServer {
    fn drop(&mut self) {
        tmux(&self.0, &["kill-server"]);
    }
}

// issue 39: `mongoose tap` in a real terminal on a real server, until Ctrl-C
#[test]
fn mongoose_tap_in_a_terminal_shows_live_lines_until_ctrl_c() {
    let setup = Setup::new("");
    let mut server = setup.spawn_server();
    setup.wait_until(&mut server, "served /status", || {
        setup.status()["feeds"][0]["feed"] == "lines"
    });
    let socket = format!("mongoose-tap-{}", std::process::id());
    let _tmux = TmuxServer(socket.clone());
    let exit_file = setup.path("tap.exit");
    let command = format!(
        "{} tap --feed lines --config {}; echo $? > {}; sleep 60",
        binary().display(),
        setup.path("mongoose.toml").display(),
        exit_file.display()
    );
    tmux(
        &socket,
        &[
            "new-session",
            "-d",
            "-s",
            "tap",
            "-x",
            "160",
            "-y",
            "40",
            &command,
        ],
    );
    setup.wait_until(&mut server, "attached the tap", || {
        setup.log().contains("a tap attached")
    });
    std::fs::write(setup.path("input.txt"), "first line\nsecond line\n").expect("lines");
    let mut screen = String::new();
    setup.wait_until(&mut server, "showed both lines", || {
        screen = tmux(&socket, &["capture-pane", "-p", "-t", "tap"]);
        screen.contains("| first line") && screen.contains("| second line")
    });
    assert!(screen.contains("feed lines #1 epoch "), "{screen}");
    assert!(screen.contains(" at 0:11 | first line"), "{screen}");
    tmux(&socket, &["send-keys", "-t", "tap", "C-c"]);
    setup.wait_until(&mut server, "ended the tap on Ctrl-C", || {
        std::fs::read_to_string(&exit_file).is_ok_and(|code| code.ends_with('\n'))
    });
    screen = tmux(&socket, &["capture-pane", "-p", "-t", "tap"]);
    eprintln!("{screen}");
    assert!(
        screen.contains("tap of feed lines: 2 shown, 0 dropped from the tap"),
        "{screen}"
    );
    let code = std::fs::read_to_string(&exit_file).expect("exit code");
    assert_eq!(code.trim(), "0", "the tap's exit code");
    signal(&server, "-TERM");
    let _ = server.wait();
}
