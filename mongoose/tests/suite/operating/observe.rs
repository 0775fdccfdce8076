//! What an operator sees of a running server (issue 28, items 4 and 6), on the real
//! `mongoose` binary over real TCP: `/health` and `/ready`, `/metrics` by the
//! Prometheus conventions (parsed with a Prometheus text-format parser), one naming
//! convention across `/status`, the progress lines of a long run, and `mongoose top` in
//! a real terminal (tmux).
//!
//! `MONGOOSE_BIN` runs them against another build of the binary (e.g. an older
//! one, to see them fail). No timing assertions: every wait has a generous deadline.

use crate::support;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(120);

fn binary() -> String {
    std::env::var("MONGOOSE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mongoose").into())
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("address").port()
}

/// A folder with a forward of the file feed `lines` (`input.txt`) into the file sink
/// `out`, the admin API on a free port, and `extra` appended to the config.
struct Run {
    dir: tempfile::TempDir,
    address: String,
    child: Option<Child>,
}

impl Run {
    fn start(top: &str, extra: &str, lines: usize) -> Self {
        Self::start_in(tempfile::tempdir().expect("temp dir"), top, extra, lines)
    }

    /// [`Run::start`] in `dir`.
    fn start_in(dir: tempfile::TempDir, top: &str, extra: &str, lines: usize) -> Self {
        let address = format!("127.0.0.1:{}", free_port());
        let input: String = (0..lines)
            .map(|index| format!("line {index:08}\n"))
            .collect();
        std::fs::write(dir.path().join("input.txt"), input).expect("input");
        let config = format!(
            r#"{top}
[admin]
address = "{address}"

[[feeds]]
name = "lines"
source = "file"
path = "input.txt"
read_strategy = "COMMITED"

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
{extra}"#
        );
        std::fs::write(dir.path().join("mongoose.toml"), config).expect("config");
        let child = Command::new(binary())
            .arg("run")
            .arg("--config")
            .arg(dir.path().join("mongoose.toml"))
            .env("RUST_LOG", "warn,mongoose_server=info")
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.path().join("server.log")).expect("log"),
            ))
            .spawn()
            .expect("the mongoose binary starts");
        let mut run = Run {
            dir,
            address,
            child: Some(child),
        };
        run.wait_until("the admin API answers", |run| {
            run.get("/status").is_some_and(|(code, _)| code == 200)
        });
        run
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path("server.log")).unwrap_or_default()
    }

    fn append(&self, lines: std::ops::Range<usize>) {
        let text: String = lines.map(|index| format!("line {index:08}\n")).collect();
        std::fs::OpenOptions::new()
            .append(true)
            .open(self.path("input.txt"))
            .expect("input")
            .write_all(text.as_bytes())
            .expect("appended");
    }

    /// `GET path`: the status and the body, or `None` when nothing answered.
    fn get(&self, path: &str) -> Option<(u16, String)> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .into();
        let mut response = agent
            .get(&format!("http://{}{path}", self.address))
            .call()
            .ok()?;
        let code = response.status().as_u16();
        Some((
            code,
            response.body_mut().read_to_string().unwrap_or_default(),
        ))
    }

    /// `POST path`: the status and the body.
    fn post(&self, path: &str) -> (u16, String) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .into();
        let mut response = agent
            .post(&format!("http://{}{path}", self.address))
            .send_empty()
            .unwrap_or_else(|error| panic!("POST {path}: {error}: {}", self.log()));
        let code = response.status().as_u16();
        (
            code,
            response.body_mut().read_to_string().unwrap_or_default(),
        )
    }

    /// `mongoose ARGS` to its end: the exit code, stdout and stderr.
    fn mongoose(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let output = Command::new(binary())
            .args(args)
            .output()
            .expect("the mongoose binary runs");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    fn json(&self, path: &str) -> (u16, serde_json::Value) {
        let (code, text) = self
            .get(path)
            .unwrap_or_else(|| panic!("GET {path}: no answer: {}", self.log()));
        let value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("GET {path}: not JSON ({code}): {text}"));
        (code, value)
    }

    fn wait_until(&mut self, what: &str, mut done: impl FnMut(&Self) -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !done(self) {
            let exited = self
                .child
                .as_mut()
                .and_then(|child| child.try_wait().expect("child status"));
            assert!(
                exited.is_none(),
                "the server exited before {what}: {}",
                self.log()
            );
            assert!(Instant::now() < deadline, "never {what}: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then the exit code.
    fn terminate(mut self) -> i32 {
        let mut child = self.child.take().expect("running");
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        child.wait().expect("reaped").code().unwrap_or(-1)
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Every object key in `value` that is not camelCase (holds an `_`), with its path.
fn snake_keys(value: &serde_json::Value, path: &str, found: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(object) => {
            for (key, inner) in object {
                if key.contains('_') {
                    found.push(format!("{path}.{key}"));
                }
                snake_keys(inner, &format!("{path}.{key}"), found);
            }
        }
        serde_json::Value::Array(items) => {
            for (index, inner) in items.iter().enumerate() {
                snake_keys(inner, &format!("{path}[{index}]"), found);
            }
        }
        _ => {}
    }
}

/// The value of the sample `name` with `labels` (all of them) in a scrape.
fn sample<'a>(
    scrape: &'a prometheus_parse::Scrape,
    name: &str,
    labels: &[(&str, &str)],
) -> Option<&'a prometheus_parse::Value> {
    scrape
        .samples
        .iter()
        .find(|sample| {
            sample.metric == name
                && labels
                    .iter()
                    .all(|(key, value)| sample.labels.get(key) == Some(*value))
        })
        .map(|sample| &sample.value)
}

fn counter(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    match sample(scrape, name, labels) {
        Some(prometheus_parse::Value::Counter(value)) => *value,
        other => panic!("{name} {labels:?} is not a counter: {other:?}"),
    }
}

// issue 28, item 4: before, /metrics had 17 gauges and nothing else (no _total, no
// HELP, no TYPE counter, no histogram), there was no /health or /ready, and /status
// mixed camelCase (feeds) with snake_case (sinks: held_count, not_published, ...)
#[test]
fn health_ready_metrics_and_status_follow_one_convention_each() {
    let mut run = Run::start("", "", 2_000);
    run.wait_until("settled", |run| {
        run.get("/status")
            .and_then(|(_, text)| serde_json::from_str::<serde_json::Value>(&text).ok())
            .is_some_and(|status| {
                status["settled"] == true && status["sinks"][0]["published"] == 2_000
            })
    });
    // more lines while it runs, so the latency marks have something to measure
    run.append(2_000..4_000);
    run.wait_until("settled again", |run| {
        run.get("/status")
            .and_then(|(_, text)| serde_json::from_str::<serde_json::Value>(&text).ok())
            .is_some_and(|status| {
                status["settled"] == true && status["sinks"][0]["published"] == 4_000
            })
    });

    let (code, health) = run.json("/health");
    assert_eq!(
        (code, health),
        (200, serde_json::json!({ "status": "alive" }))
    );
    let (code, ready) = run.json("/ready");
    assert_eq!(code, 200, "{ready}");
    assert_eq!(ready["ready"], true, "{ready}");

    // one naming convention: camelCase everywhere in /status and /groups
    let (_, status) = run.json("/status");
    let (_, groups) = run.json("/groups");
    let mut snake = Vec::new();
    snake_keys(&status, "status", &mut snake);
    snake_keys(&groups, "groups", &mut snake);
    assert!(snake.is_empty(), "snake_case keys: {snake:?}");
    let sink = &status["sinks"][0];
    for key in [
        "heldCount",
        "heldOutputs",
        "notPublished",
        "published",
        "queued",
    ] {
        assert!(sink.get(key).is_some(), "the sink has no {key}: {sink}");
    }
    assert!(groups[0].get("mailboxDepth").is_some(), "{groups}");

    let (code, text) = run.get("/metrics").expect("/metrics answers");
    assert_eq!(code, 200);
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|line| Ok(line.to_owned())))
        .expect("the Prometheus text format");
    // every family has HELP and TYPE; counters end in _total
    let mut types = std::collections::BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            types.insert(name.to_owned(), kind.to_owned());
        }
    }
    for sample in &scrape.samples {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                sample
                    .metric
                    .strip_suffix(suffix)
                    .filter(|family| types.get(*family).is_some_and(|kind| kind == "histogram"))
            })
            .unwrap_or(&sample.metric);
        assert!(types.contains_key(family), "{family} has no TYPE:\n{text}");
        assert!(
            scrape.docs.contains_key(family),
            "{family} has no HELP:\n{text}"
        );
    }
    for (family, kind) in &types {
        assert!(scrape.docs.contains_key(family), "{family} has no HELP");
        assert_eq!(
            kind == "counter",
            family.ends_with("_total"),
            "{family} is a {kind}: counters, and only they, end in _total"
        );
    }
    for family in [
        "mongoose_feed_events_published_total",
        "mongoose_queue_events_dispatched_total",
        "mongoose_sink_outputs_total",
    ] {
        assert_eq!(
            types.get(family).map(String::as_str),
            Some("counter"),
            "{family}"
        );
    }
    // the latency histograms, with buckets, per feed and per sink
    for (family, label, name) in [
        ("mongoose_feed_latency_seconds", "feed", "lines"),
        ("mongoose_sink_latency_seconds", "sink", "out"),
    ] {
        assert_eq!(
            types.get(family).map(String::as_str),
            Some("histogram"),
            "{family}"
        );
        match sample(&scrape, family, &[(label, name)]) {
            Some(prometheus_parse::Value::Histogram(buckets)) => {
                assert!(buckets.len() > 5, "{family}: {buckets:?}");
                let all = buckets.last().expect("a bucket").count;
                assert!(all > 0.0, "{family} measured nothing: {buckets:?}");
            }
            other => panic!("{family} is not a histogram with buckets: {other:?}\n{text}"),
        }
    }
    // consistent with /status (settled: nothing moves between the two reads)
    let (_, status) = run.json("/status");
    let feed = &status["feeds"][0];
    let sink = &status["sinks"][0];
    assert_eq!(
        counter(
            &scrape,
            "mongoose_feed_events_published_total",
            &[("feed", "lines")]
        ),
        feed["sequence"].as_f64().expect("sequence"),
    );
    assert_eq!(
        counter(
            &scrape,
            "mongoose_feed_events_dropped_total",
            &[("feed", "lines")]
        ),
        feed["dropped"].as_f64().expect("dropped"),
    );
    assert_eq!(
        counter(
            &scrape,
            "mongoose_sink_outputs_total",
            &[("sink", "out"), ("outcome", "published")]
        ),
        sink["published"].as_f64().expect("published"),
    );
    assert_eq!(
        counter(
            &scrape,
            "mongoose_queue_events_dispatched_total",
            &[("queue", "forward/lines")]
        ),
        feed["subscribers"][0]["dispatched"]
            .as_f64()
            .expect("dispatched"),
    );
    eprintln!("{text}");
    assert_eq!(run.terminate(), 0);
}

// issue 28, item 4: /ready is 503 with the reasons while a feed is stalled (here: a
// feed no processor consumes holds its position)
#[test]
fn ready_is_503_with_the_reasons_while_a_feed_is_stalled() {
    // a feed nothing consumes is refused at load (issue 39, item 3): its one consumer
    // is stopped through the admin API instead, which leaves it with none
    let extra = r#"
[[feeds]]
name = "orphan"
source = "file"
path = "orphan.txt"
read_strategy = "COMMITTED"

[[sinks]]
name = "orphan-out"
kind = "file"
path = "orphan-out.txt"

[[groups]]
name = "leaving"
[[groups.processors]]
name = "gone"
kind = "forward"
settings = { feed = "orphan", sink = "orphan-out" }
"#;
    let dir_lines = 10;
    let mut run = Run::start("", extra, dir_lines);
    let (code, stopped) = run.post("/processors/leaving/gone/stop");
    assert_eq!(code, 200, "{stopped}");
    std::fs::write(run.path("orphan.txt"), "nobody reads this\n").expect("orphan input");
    run.wait_until("/ready answers 503 naming the stalled feed", |run| {
        run.get("/ready").is_some_and(|(code, text)| {
            code == 503 && text.contains("orphan") && text.contains("\"ready\":false")
        })
    });
    let (code, ready) = run.json("/ready");
    assert_eq!(code, 503);
    let reasons = ready["reasons"].as_array().expect("reasons");
    assert!(
        reasons.iter().any(|reason| reason
            .as_str()
            .is_some_and(|reason| reason.starts_with("feed 'orphan'"))),
        "{ready}"
    );
    let (code, health) = run.json("/health");
    assert_eq!((code, health["status"].as_str()), (200, Some("alive")));
    run.terminate();
}

// issue 28, item 6: a 258 MB file logged nothing between start and stop; now every
// progress_interval_seconds a line per feed and per sink
#[test]
fn a_long_run_logs_progress_per_feed_and_per_sink() {
    let mut run = Run::start("progress_interval_seconds = 1", "", 1_000);
    // a slow input: more lines over a few seconds
    for round in 0..8 {
        run.append(1_000 + round * 500..1_000 + (round + 1) * 500);
        std::thread::sleep(Duration::from_millis(300));
    }
    run.wait_until("two progress lines of the feed and of the sink", |run| {
        let log = run.log();
        log.matches("progress: feed").count() >= 2 && log.matches("progress: sink").count() >= 2
    });
    let log = run.log();
    let feed_line = log
        .lines()
        .find(|line| line.contains("progress: feed"))
        .expect("a feed line");
    for field in [
        "feed=lines",
        "state=",
        "events_per_sec=",
        "bytes_per_sec=",
        "lag_events=",
        "lag_bytes=",
    ] {
        assert!(feed_line.contains(field), "no {field} in: {feed_line}");
    }
    let sink_line = log
        .lines()
        .find(|line| line.contains("progress: sink"))
        .expect("a sink line");
    for field in [
        "sink=out",
        "outputs_per_sec=",
        "queued=",
        "held=",
        "retrying=",
    ] {
        assert!(sink_line.contains(field), "no {field} in: {sink_line}");
    }
    assert!(feed_line.contains("INFO"), "{feed_line}");
    assert_eq!(run.terminate(), 0);
}

/// `tmux -L SOCKET args...` (a server of its own), its stdout.
fn tmux(socket: &str, args: &[&str]) -> String {
    let output = Command::new("tmux")
        .arg("-L")
        .arg(socket)
        .args(args)
        .output()
        .expect("tmux runs");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Ends the test's tmux server (its own socket) when dropped.
struct TmuxServer(String);

impl Drop for TmuxServer {
    fn drop(&mut self) {
        tmux(&self.0, &["kill-server"]);
    }
}

// issue 28, item 6: a live view like `vector top`, in a real terminal
#[test]
fn mongoose_top_shows_a_feed_with_a_rate_and_q_quits() {
    let mut run = Run::start("", "", 100);
    let socket = format!("mongoose-top-{}", std::process::id());
    let _server = TmuxServer(socket.clone());
    let exit_file = run.path("top.exit");
    // the admin address from the config (issue 39, item 2): no --admin
    let command = format!(
        "{} top --config {} --interval-ms 300; echo $? > {}; sleep 60",
        binary(),
        run.path("mongoose.toml").display(),
        exit_file.display()
    );
    tmux(
        &socket,
        &[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            "160",
            "-y",
            "40",
            &command,
        ],
    );
    // lines keep coming while top watches
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = std::sync::Arc::clone(&stop);
        let input = run.path("input.txt");
        std::thread::spawn(move || {
            let mut next = 100;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                let text: String = (next..next + 50)
                    .map(|index| format!("line {index:08}\n"))
                    .collect();
                next += 50;
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(&input)
                    .and_then(|mut file| file.write_all(text.as_bytes()))
                    .expect("appended");
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let mut screen = String::new();
    run.wait_until("top shows the feed with a non-zero rate", |_| {
        screen = tmux(&socket, &["capture-pane", "-p", "-t", "top"]);
        screen.lines().any(|line| {
            let mut columns = line.split_whitespace();
            columns.next() == Some("lines")
                && columns
                    .nth(1)
                    .and_then(|rate| rate.parse::<f64>().ok())
                    .is_some_and(|rate| rate > 0.0)
        })
    });
    eprintln!("{screen}");
    assert!(
        screen.contains("SINK") && screen.contains("out"),
        "{screen}"
    );
    assert!(
        screen.contains("GROUP") && screen.contains("forward"),
        "{screen}"
    );
    tmux(&socket, &["send-keys", "-t", "top", "q"]);
    run.wait_until("top quits on q", |_| {
        std::fs::read_to_string(&exit_file).is_ok_and(|code| code.ends_with('\n'))
    });
    stop.store(true, std::sync::atomic::Ordering::Release);
    writer.join().expect("writer");
    let code = std::fs::read_to_string(&exit_file).expect("exit code");
    assert_eq!(code.trim(), "0", "top's exit code");
    assert_eq!(run.terminate(), 0);
}

/// The feed `lines`'s first file in `/status`, once it is reported.
fn first_file(run: &Run) -> Option<serde_json::Value> {
    let (_, text) = run.get("/status")?;
    let status: serde_json::Value = serde_json::from_str(&text).ok()?;
    let file = status["feeds"]
        .as_array()?
        .iter()
        .find(|feed| feed["feed"] == "lines")?["files"][0]
        .clone();
    (!file.is_null()).then_some(file)
}

/// `mongoose_feed_lag_bytes` of the feed `lines`.
fn lag_metric(run: &Run) -> f64 {
    let (_, text) = run.get("/metrics").expect("metrics");
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|line| Ok(line.to_owned())))
        .expect("parsed");
    match sample(&scrape, "mongoose_feed_lag_bytes", &[("feed", "lines")]) {
        Some(prometheus_parse::Value::Gauge(value)) => *value,
        other => panic!("mongoose_feed_lag_bytes is not a gauge: {other:?}"),
    }
}

// issue 36, item 3: `/status` gave `files[].committed` as the offset read (6,058)
// while the pointer was at 0, so `lag` and `mongoose_feed_lag_bytes` were short by
// everything read and not yet committed: what a restart would read again
#[test]
fn the_status_lag_is_measured_from_the_committed_pointer() {
    let target = mongoose_testkit::http_target::HttpTarget::start();
    // every output uncertain, retried: the HTTP forward holds the feed's pointer at 0
    target.answer(Some(mongoose_testkit::http_target::Answer::Status(503)));
    let extra = format!(
        r#"
[[sinks]]
name = "web"
kind = "http"
url = "{}"

[[groups]]
name = "post"
[[groups.processors]]
name = "post"
kind = "forward"
settings = {{ feed = "lines", sink = "web" }}
"#,
        target.url()
    );
    let mut run = Run::start("", &extra, 100);
    let size = std::fs::metadata(run.path("input.txt"))
        .expect("input")
        .len();
    let pointer = support::feed_state(
        run.dir.path(),
        "lines",
        "input.txt",
        "input.txt.readPointer",
    );
    let offset = |pointer: &std::path::Path| {
        let bytes = std::fs::read(pointer).unwrap_or_default();
        bytes.get(..8).map_or(0, |field| {
            u64::from_be_bytes(field.try_into().expect("8 bytes"))
        })
    };
    // every line read: the file forward wrote them all
    run.wait_until("the file sink wrote every line", |run| {
        std::fs::read_to_string(run.path("out.txt")).is_ok_and(|out| out.lines().count() == 100)
    });
    run.wait_until("the file is reported at its size", |run| {
        first_file(run).is_some_and(|file| file["size"] == size)
    });
    assert_eq!(offset(&pointer), 0, "the HTTP forward holds the pointer");
    let file = first_file(&run).expect("reported");
    assert_eq!(
        (file["committed"].as_u64(), file["lag"].as_u64()),
        (Some(0), Some(size)),
        "committed is the pointer's offset, and the lag all of the file: {file}"
    );
    assert_eq!(
        lag_metric(&run),
        size as f64,
        "the metric follows the pointer"
    );
    // the target takes them: the pointer moves, and the lag with it
    target.answer(None);
    run.wait_until("the file is reported committed to its end", |run| {
        first_file(run).is_some_and(|file| file["committed"] == size)
    });
    assert_eq!(offset(&pointer), size, "the pointer is at the end");
    let file = first_file(&run).expect("reported");
    assert_eq!(file["lag"], 0, "{file}");
    assert_eq!(lag_metric(&run), 0.0);
    assert_eq!(target.taken().len(), 100);
    let log = run.log();
    assert_eq!(run.terminate(), 0, "{log}");
}

// issue 39, item 2: `mongoose status | head` panicked (broken pipe, exit 101). Its
// stdout here is a socket whose other end is closed before it starts: its first write
// fails with EPIPE, whatever the timing.
#[test]
fn status_into_a_closed_pipe_exits_cleanly() {
    use std::os::fd::OwnedFd;
    let run = Run::start("", "", 10);
    let closed = |args: &[&str]| {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("a socket pair");
        drop(ours);
        let output = Command::new(binary())
            .args(args)
            .stdout(Stdio::from(OwnedFd::from(theirs)))
            .stderr(Stdio::piped())
            .output()
            .expect("the mongoose binary runs");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let config = run.path("mongoose.toml");
    let config = config.to_str().expect("utf-8");
    let plugins = tempfile::tempdir().expect("an empty plugin folder");
    for args in [
        &["status", "--admin", &run.address][..],
        &["status", "--admin", &run.address, "--json"],
        &["validate", "--config", config],
        &[
            "plugins",
            "list",
            "--plugin-dir",
            plugins.path().to_str().expect("utf-8"),
        ],
    ] {
        let (code, stderr) = closed(args);
        assert!(
            !stderr.contains("panicked"),
            "mongoose {args:?} panicked: {stderr}"
        );
        assert_eq!(code, Some(0), "mongoose {args:?}: {stderr}");
    }
    assert_eq!(run.terminate(), 0);
}

// issue 39, item 2: the text left out what `/status` has (a glob feed's files, why a
// feed waits, the last reload), and `status` took the admin address only from --admin
#[test]
fn status_shows_a_glob_feeds_files_and_why_a_feed_waits() {
    let extra = r#"
[[feeds]]
name = "many"
source = "file"
path = "logs/*.log"
read_strategy = "COMMITTED"

[[feeds]]
name = "later"
source = "file"
path = "later.txt"
read_strategy = "COMMITTED"

[[sinks]]
name = "many-out"
kind = "file"
path = "many-out.txt"

[[sinks]]
name = "later-out"
kind = "file"
path = "later-out.txt"

[[groups]]
name = "more"
[[groups.processors]]
name = "many"
kind = "forward"
settings = { feed = "many", sink = "many-out" }
[[groups.processors]]
name = "later"
kind = "forward"
settings = { feed = "later", sink = "later-out" }
"#;
    let dir = tempfile::tempdir().expect("temp dir");
    // the glob's folder exists before the start (validate checks it)
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).expect("logs");
    std::fs::write(logs.join("a.log"), "a1\na2\n").expect("a.log");
    std::fs::write(logs.join("b.log"), "b1\n").expect("b.log");
    let mut run = Run::start_in(dir, "", extra, 10);
    run.wait_until("the glob reports both files", |run| {
        run.get("/status").is_some_and(|(_, text)| {
            text.contains("a.log") && text.contains("b.log") && text.contains("later.txt to exist")
        })
    });
    // a reload of the same file: its outcome is in the status
    let pid = run.child.as_ref().expect("running").id().to_string();
    let sent = Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    run.wait_until("the reload is reported", |run| {
        run.get("/status")
            .is_some_and(|(_, text)| text.contains("\"lastReload\":{"))
    });
    let config = run.path("mongoose.toml");
    // the admin address from --config, no --admin
    let (code, text, stderr) =
        run.mongoose(&["status", "--config", config.to_str().expect("utf-8")]);
    assert_eq!(code, Some(0), "{stderr}");
    for needle in [
        "a.log",
        "b.log",
        "waiting for the input file",
        "later.txt to exist",
        "last reload: unchanged",
    ] {
        assert!(text.contains(needle), "the text says {needle:?}:\n{text}");
    }
    // each file with what it committed of its size
    let a_line = text
        .lines()
        .find(|line| line.contains("a.log"))
        .expect("a.log's line");
    assert!(a_line.contains("of 6 bytes"), "{a_line}");
    assert_eq!(run.terminate(), 0);
}
