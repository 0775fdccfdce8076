//! Config unit tests (`mongoose test`, as `vector test`): a TOML file beside the config
//! (by default `<config stem>.tests.toml`) lists cases, each giving one feed some
//! input lines and saying which lines each sink must be given, exactly and in order.
//!
//! ```toml
//! [[tests]]
//! name = "errors and warnings go to the alerts sink"
//! feed = "lines"
//! input = ["ERROR disk full", "INFO all good", "WARN slow"]
//!
//! [tests.outputs]
//! alerts = ["ERROR disk full", "WARN slow"]
//! ```
//!
//! Each case runs a fresh server built from the config by the server's own builder,
//! with the config's processors (their kinds and settings, the `forward` path, the
//! ledger...), but: every configured feed is an in-memory source of the case's lines
//! (the feed it names) or of none (the others), positioned as a file feed is (the byte
//! offset after each line); every sink keeps what it is given in memory
//! ([`ServerBuilder::capture_sinks`]) instead of writing or sending it; the data folder
//! and the base folder (where a processor's relative `state_dir` goes) are a scratch
//! folder removed after the case; no admin API, no recording. A sink the case does not
//! list must be given nothing. A processor setting with an absolute path (a ledger's
//! `state_dir = "/var/lib/..."`) is used as it is: keep such paths relative. The case passes when every feed settled and every sink
//! was given exactly its expected lines; otherwise its report holds a diff.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mongoose_core::sink::{Output, Sink, SinkOutcome};
use mongoose_core::{CoreError, Epoch, EventSource, SourceOutput, SourceStart, SourceState};
use mongoose_core::{TryPublish, WorkDone};
use mongoose_delivery::{Feed, Publisher};
use mongoose_source_file::Line;
use parking_lot::Mutex;
use serde::Deserialize;

use crate::config::ServerConfig;
use crate::server::{Server, ServerBuilder};
use crate::ServerError;

/// How long a case may take to settle.
pub const CASE_DEADLINE: Duration = Duration::from_secs(30);

/// The outputs every sink was given, by sink name, as text (lossy UTF-8), in order.
#[derive(Clone, Debug, Default)]
pub struct SinkCapture {
    outputs: Arc<Mutex<BTreeMap<String, Vec<String>>>>,
}

impl SinkCapture {
    /// A sink that keeps what it is given under `name`.
    pub(crate) fn sink(&self, name: &str) -> Box<dyn Sink> {
        self.outputs.lock().entry(name.to_owned()).or_default();
        Box::new(CapturedSink {
            name: name.to_owned(),
            outputs: Arc::clone(&self.outputs),
        })
    }

    /// What each sink was given so far.
    pub fn outputs(&self) -> BTreeMap<String, Vec<String>> {
        self.outputs.lock().clone()
    }
}

struct CapturedSink {
    name: String,
    outputs: Arc<Mutex<BTreeMap<String, Vec<String>>>>,
}

impl Sink for CapturedSink {
    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
        let mut kept = self.outputs.lock();
        let list = kept.entry(self.name.clone()).or_default();
        for output in outputs {
            list.push(String::from_utf8_lossy(&output.payload).into_owned());
            outcomes.push(SinkOutcome::Published {
                evidence: "kept by the unit test".to_owned(),
            });
        }
    }
}

/// A file of config unit tests.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestFile {
    /// The cases, run in order.
    pub tests: Vec<TestCase>,
}

/// One case.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestCase {
    /// What it checks (printed).
    pub name: String,
    /// The configured feed given the input.
    pub feed: String,
    /// The feed's input lines, in order.
    pub input: Vec<String>,
    /// Per sink, exactly the lines it must be given, in order; a sink not listed must
    /// be given nothing.
    #[serde(default)]
    pub outputs: BTreeMap<String, Vec<String>>,
}

impl TestFile {
    /// Reads and parses a tests file.
    ///
    /// # Errors
    /// The file cannot be read, or is not a tests file (the message names the key).
    pub fn load(path: &Path) -> Result<TestFile, ServerError> {
        let text = std::fs::read_to_string(path).map_err(|error| ServerError::Io {
            context: format!(
                "cannot read the tests file {} (give --tests FILE, or put <config stem>.tests.toml beside the config)",
                path.display()
            ),
            error,
        })?;
        toml::from_str(&text).map_err(|error| {
            ServerError::invalid(
                path.display().to_string(),
                format!("not a tests file: {}", error.message().trim()),
            )
        })
    }
}

/// The default tests file of `config`: `<config stem>.tests.toml` beside it.
pub fn default_tests_file(config: &Path) -> PathBuf {
    let stem = config
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_else(|| "mongoose".to_owned());
    config.with_file_name(format!("{stem}.tests.toml"))
}

/// What one case gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseReport {
    /// The case's name.
    pub name: String,
    /// Empty when it passed; else what differs, one line each (`- expected`,
    /// `+ given`) under a line per sink or failure.
    pub diff: String,
}

impl CaseReport {
    /// Whether the case passed.
    pub fn passed(&self) -> bool {
        self.diff.is_empty()
    }
}

/// Runs every case of `tests` against `config`; `builder` makes the server's builder
/// of a config (the binary's, with every processor kind it knows).
///
/// # Errors
/// A case names a feed the config does not have, or a server cannot be built (the
/// config is invalid): not a failing case but a broken test file or config.
pub fn run_tests(
    config: &ServerConfig,
    tests: &TestFile,
    builder: &dyn Fn(ServerConfig) -> ServerBuilder,
) -> Result<Vec<CaseReport>, ServerError> {
    let mut reports = Vec::new();
    for (index, case) in tests.tests.iter().enumerate() {
        if !config.feeds.iter().any(|feed| feed.name == case.feed) {
            let names: Vec<&str> = config.feeds.iter().map(|feed| feed.name.as_str()).collect();
            return Err(ServerError::invalid(
                format!("tests[{index}].feed"),
                format!(
                    "case '{}' names the feed '{}', which the config does not have: its feeds are {}",
                    case.name,
                    case.feed,
                    names.join(", ")
                ),
            ));
        }
        if let Some(feed) = config
            .feeds
            .iter()
            .find(|feed| feed.codec == Some(crate::config::FeedCodec::Bytes))
        {
            return Err(ServerError::invalid(
                format!("feeds.{}.codec", feed.name),
                "a feed of raw bytes (codec = \"bytes\") cannot be given test input yet: the unit tests give every feed lines",
            ));
        }
        for sink in case.outputs.keys() {
            if !config.sinks.iter().any(|known| &known.name == sink) {
                return Err(ServerError::invalid(
                    format!("tests[{index}].outputs.{sink}"),
                    format!("case '{}' expects outputs of sink '{sink}', which the config does not have", case.name),
                ));
            }
        }
        let scratch = scratch_folder(index)?;
        let report = run_case(config, case, builder, &scratch);
        let _ = std::fs::remove_dir_all(&scratch);
        reports.push(report?);
    }
    Ok(reports)
}

fn scratch_folder(index: usize) -> Result<PathBuf, ServerError> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.subsec_nanos())
        .unwrap_or_default();
    let folder = std::env::temp_dir().join(format!(
        "mongoose-test-{}-{index}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&folder).map_err(|error| ServerError::Io {
        context: format!("cannot make the scratch folder {}", folder.display()),
        error,
    })?;
    Ok(folder)
}

fn run_case(
    config: &ServerConfig,
    case: &TestCase,
    builder: &dyn Fn(ServerConfig) -> ServerBuilder,
    scratch: &Path,
) -> Result<CaseReport, ServerError> {
    let mut scratch_config = config.clone();
    scratch_config.admin = None;
    scratch_config.record = None;
    scratch_config.plugin_dir = config.plugin_dir.as_ref().map(|dir| config.resolve(dir));
    scratch_config.data_dir = scratch.join("data");
    scratch_config.base_dir = scratch.to_path_buf();
    let feeds = std::mem::take(&mut scratch_config.feeds);
    let capture = SinkCapture::default();
    let mut server_builder = builder(scratch_config).capture_sinks(capture.clone());
    for feed in &feeds {
        let lines: &[String] = if feed.name == case.feed {
            &case.input
        } else {
            &[]
        };
        let publisher: Arc<Publisher<Line, u64>> = Feed::builder(&feed.name).build();
        // a full queue pauses the input, as it does a file feed: nothing is dropped
        publisher.set_pause_by_default(true);
        let source = MemoryLines {
            name: feed.name.clone(),
            output: Arc::clone(&publisher),
            origin: feed.path.clone(),
            lines: lines.iter().map(|line| Bytes::from(line.clone())).collect(),
            next: 0,
            offset: 0,
            ended: false,
        };
        server_builder = server_builder.source(publisher, source);
    }
    let server = server_builder.build()?;
    server.start()?;
    let settled = wait_settled(&server, &capture);
    let stopped = server.shutdown();
    let mut diff = String::new();
    if let Err(why) = settled {
        diff.push_str(&format!("the run did not settle: {why}\n"));
    }
    if !stopped.complete {
        diff.push_str(&format!("the shutdown was incomplete: {stopped:?}\n"));
    }
    let given = capture.outputs();
    for (sink, lines) in &given {
        let expected = case.outputs.get(sink).map(Vec::as_slice).unwrap_or(&[]);
        diff.push_str(&sink_diff(sink, expected, lines));
    }
    Ok(CaseReport {
        name: case.name.clone(),
        diff,
    })
}

/// Waits until every feed settled and every sink has nothing queued, retrying or held.
fn wait_settled(server: &Server, capture: &SinkCapture) -> Result<(), String> {
    let deadline = Instant::now() + CASE_DEADLINE;
    loop {
        let status = server.status();
        let sinks_idle = server
            .sink_statuses()
            .iter()
            .all(|sink| sink.queued == 0 && sink.retrying == 0 && sink.held_count == 0);
        if status.settled && sinks_idle {
            return Ok(());
        }
        if let Some(failure) = server.fatal_failures().first() {
            return Err(failure.clone());
        }
        if Instant::now() >= deadline {
            let stalled: Vec<String> = status
                .feeds
                .iter()
                .filter(|feed| !feed.settled)
                .map(|feed| {
                    format!(
                        "feed '{}' {} (published {}, acknowledged {}){}",
                        feed.feed,
                        feed.state,
                        feed.sequence,
                        feed.acknowledged,
                        feed.stalled
                            .as_ref()
                            .map(|why| format!(": {why}"))
                            .unwrap_or_default()
                    )
                })
                .collect();
            let _ = capture;
            return Err(format!(
                "not settled within {} s: {}",
                CASE_DEADLINE.as_secs(),
                if stalled.is_empty() {
                    "a sink still holds outputs".to_owned()
                } else {
                    stalled.join("; ")
                }
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The differences between what a sink was expected to be given and what it was, line
/// by line: empty when equal.
pub fn sink_diff(sink: &str, expected: &[String], given: &[String]) -> String {
    if expected == given {
        return String::new();
    }
    let mut out = format!(
        "sink {sink}: expected {} lines, given {}\n",
        expected.len(),
        given.len()
    );
    for at in 0..expected.len().max(given.len()) {
        match (expected.get(at), given.get(at)) {
            (Some(wanted), Some(got)) if wanted == got => {
                out.push_str(&format!("    {wanted}\n"));
            }
            (wanted, got) => {
                if let Some(wanted) = wanted {
                    out.push_str(&format!("  - {wanted}\n"));
                }
                if let Some(got) = got {
                    out.push_str(&format!("  + {got}\n"));
                }
            }
        }
    }
    out
}

/// A feed's input of one case: its lines, published as a file feed's (positioned at
/// the byte offset after each line, epoch 1), then the end of the stream.
struct MemoryLines {
    name: String,
    output: Arc<Publisher<Line, u64>>,
    origin: PathBuf,
    lines: Vec<Bytes>,
    next: usize,
    offset: u64,
    ended: bool,
}

impl EventSource for MemoryLines {
    fn name(&self) -> &str {
        &self.name
    }

    fn start(&mut self) -> Result<SourceStart, CoreError> {
        self.output
            .report_state(SourceState::Behind, Some("unit test input"));
        Ok(SourceStart {
            epoch: Epoch(1),
            pause_by_default: true,
            committer: None,
        })
    }

    fn do_work(&mut self) -> Result<WorkDone, CoreError> {
        let Some(bytes) = self.lines.get(self.next) else {
            if !self.ended {
                self.ended = true;
                self.output
                    .report_state(SourceState::EndOfStream, Some("unit test input read"));
            }
            return Ok(WorkDone(0));
        };
        let position = self.offset + bytes.len() as u64 + 1;
        match self
            .output
            .try_publish(Line::new(&self.origin, bytes.clone()), position)
        {
            TryPublish::Published => {
                self.next += 1;
                self.offset = position;
                Ok(WorkDone(1))
            }
            TryPublish::Paused(_) | TryPublish::Retry(_) => Ok(WorkDone(0)),
        }
    }

    fn stop(&mut self) -> Result<(), CoreError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_shows_missing_and_unexpected_lines() {
        let expected = vec!["a".to_owned(), "b".to_owned()];
        let given = vec!["a".to_owned(), "c".to_owned(), "d".to_owned()];
        assert_eq!(sink_diff("out", &expected, &expected), "");
        assert_eq!(
            sink_diff("out", &expected, &given),
            "sink out: expected 2 lines, given 3\n    a\n  - b\n  + c\n  + d\n"
        );
        assert_eq!(
            default_tests_file(Path::new("/etc/mongoose/pipeline.toml")),
            PathBuf::from("/etc/mongoose/pipeline.tests.toml")
        );
    }
}
