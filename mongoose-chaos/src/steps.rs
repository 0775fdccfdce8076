//! Doing a schedule's steps to a [`World`]: the server's runs and signals, rotations,
//! deletions and damage, full disks, peers and the HTTP target's answers.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rand::Rng;

use crate::peer::write_mode;
use crate::process::{code_of, Proc};
use crate::scenario::{
    Damage, Disk, HttpMode, PeerAction, PeerKind, RotateMode, SinkKind, SourceKind, StateFile, Step,
};
use crate::truth::FailureKind;
use crate::world::{HttpSample, World};

/// The log filter of the server runs.
const SERVER_LOG: &str = "info";

/// How long a started server may take to answer its admin API.
const START_PATIENCE: Duration = Duration::from_secs(30);

/// How long `settle` waits.
const SETTLE_PATIENCE: Duration = Duration::from_secs(60);

/// Whether the schedule goes on after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Go on.
    Continue,
    /// The server refused to start on damaged state: the schedule ends here.
    Refused,
}

impl World {
    /// Does one step.
    ///
    /// # Errors
    /// The harness itself cannot go on (an input it cannot write, a peer it cannot start).
    pub fn step(&mut self, step: &Step) -> Result<Flow, String> {
        self.event(format!("step: {step}"));
        if self.check_server() == Flow::Refused {
            return Ok(Flow::Refused);
        }
        match step {
            Step::Append {
                lines,
                stream,
                bytes,
            } => self.append(*stream, *lines, *bytes)?,
            Step::Start => {
                self.start_server(false)?;
                if self.wait_up() == Flow::Refused {
                    return Ok(Flow::Refused);
                }
            }
            Step::Wait { ms } => std::thread::sleep(Duration::from_millis(*ms)),
            Step::Settle => self.settle(),
            Step::Kill => self.kill_server(),
            Step::Pause { ms } => {
                if let Some(server) = &mut self.server {
                    // a request in flight while the server is stopped may outlive its
                    // response timeout on the server's clock though the target answered:
                    // an uncertain attempt the target did not fail
                    self.http_down_in_run = true;
                    server.pause();
                    std::thread::sleep(Duration::from_millis(*ms));
                    server.resume();
                }
            }
            Step::Term => self.stop_server(),
            Step::CrashLoop {
                kills,
                min_ms,
                max_ms,
                burst_min,
                burst_max,
            } => {
                for round in 0..*kills {
                    let burst = self
                        .random
                        .random_range(*burst_min..=(*burst_max).max(*burst_min));
                    if burst > 0 {
                        let stream = self.random.random_range(0..self.streams.len() as u32);
                        self.append(stream, burst, None)?;
                    }
                    self.start_server(false)?;
                    let life = self.random.random_range(*min_ms..=(*max_ms).max(*min_ms));
                    std::thread::sleep(Duration::from_millis(life));
                    if self.check_server() == Flow::Refused {
                        return Ok(Flow::Refused);
                    }
                    self.kill_server();
                    if round % 25 == 24 {
                        self.event(format!("crash loop: {} kills", round + 1));
                    }
                }
            }
            Step::Rotate { mode, stream } => self.rotate(*mode, *stream)?,
            Step::RenameInGlob { stream } => self.rename_in_glob(*stream)?,
            Step::DeleteInput { stream } => self.delete_input(*stream)?,
            Step::RecreateSource => self.recreate_source()?,
            Step::Delete { what } => {
                self.stop_for_state();
                let path = self.state_path(*what);
                remove(&path);
                self.state_touched = true;
                self.touched_unsettled = true;
                self.event(format!("deleted {}", path.display()));
            }
            Step::Damage { what, how } => {
                self.stop_for_state();
                self.damage(*what, *how)?;
                self.state_touched = true;
                self.touched_unsettled = true;
            }
            Step::KeepCopy { what } => {
                let path = self.state_path(*what);
                let copy = self.path(&format!("copies/{what:?}"));
                remove(&copy);
                if copy_path(&path, &copy).is_ok() {
                    self.copies.insert(*what, copy);
                    self.event(format!("kept a copy of {}", path.display()));
                } else {
                    self.event(format!("nothing to copy at {}", path.display()));
                }
            }
            Step::FillDisk { under, leave } => self.fill_disk(*under, *leave),
            Step::FreeDisk { under } => self.free_disk(*under),
            Step::Peer { peer, action } => self.peer_action(*peer, *action)?,
            Step::Http { mode } => {
                write_mode(&self.path("peers/http.mode"), *mode)
                    .map_err(|error| format!("cannot write the HTTP mode: {error}"))?;
            }
        }
        self.sample_http();
        Ok(self.check_server())
    }

    /// Starts the server (when it is not running).
    ///
    /// # Errors
    /// The binary cannot be started.
    pub fn start_server(&mut self, exit_when_settled: bool) -> Result<(), String> {
        if self.server_running() {
            return Ok(());
        }
        self.runs += 1;
        let mut log = self.log_file("server.log")?;
        let _ = writeln!(
            log,
            "=== chaos: server run {}{} ===",
            self.runs,
            if exit_when_settled {
                " (final, --exit-when-settled)"
            } else {
                ""
            }
        );
        // a run right after a state fault may refuse to start: it must leave the
        // output as it was
        self.run_after_touch = self.state_touched;
        self.state_touched = false;
        self.output_at_start = if self.run_after_touch {
            Some(self.output_bytes())
        } else {
            None
        };
        self.http_log_at_start =
            std::fs::metadata(self.path("peers/http.log")).map_or(0, |meta| meta.len());
        self.http_down_in_run =
            self.scenario.sink == SinkKind::Http && !self.peer_up(PeerKind::HttpTarget);
        let mut command = self.mongoose(&["run", "--config", "mongoose.toml"]);
        if exit_when_settled {
            command.arg("--exit-when-settled");
        }
        command
            .env("RUST_LOG", SERVER_LOG)
            .stdout(Stdio::null())
            .stderr(log);
        let process = Proc::spawn("server", &mut command, false)
            .map_err(|error| format!("cannot start {}: {error}", self.bins.mongoose.display()))?;
        self.event(format!(
            "server run {} started (pid {})",
            self.runs,
            process.pid()
        ));
        self.server = Some(process);
        self.started = Some(Instant::now());
        Ok(())
    }

    /// Whether the server runs.
    pub fn server_running(&mut self) -> bool {
        self.server
            .as_mut()
            .is_some_and(|server| server.exited().is_none())
    }

    /// Waits until the started server answers its admin API (or exits).
    fn wait_up(&mut self) -> Flow {
        let deadline = Instant::now() + START_PATIENCE;
        while Instant::now() < deadline {
            if !self.server_running() {
                return self.check_server();
            }
            if self.status().is_some() {
                return Flow::Continue;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.event("the server did not answer its admin API in 30 s");
        Flow::Continue
    }

    /// Looks at a server that exited by itself: a refusal after a state fault ends the
    /// schedule; any other exit is a finding.
    pub fn check_server(&mut self) -> Flow {
        let Some(server) = &mut self.server else {
            return Flow::Continue;
        };
        let Some(status) = server.exited() else {
            return Flow::Continue;
        };
        self.server = None;
        let code = code_of(status);
        let said = last_error(&self.server_log_of_run());
        // two file sinks on one path are refused at load (exit 2): the promised answer
        let two_sinks_refused = self.scenario.options.two_sinks_one_path
            && code == 2
            && said.contains("write the same file");
        if two_sinks_refused
            || ((self.run_after_touch || self.touched_unsettled) && (code == 1 || code == 2))
        {
            self.event(format!("the server refused to start (exit {code}): {said}"));
            self.check_refusal(&said);
            return Flow::Refused;
        }
        let detail = format!("a server run exited by itself with {code}: {said}");
        let repeated = self
            .failures
            .iter()
            .any(|failure| failure.detail.ends_with(&detail));
        if repeated {
            self.event(format!(
                "server run {} exited by itself with {code} again",
                self.runs
            ));
        } else {
            self.fail(
                FailureKind::BadExit,
                format!("(first: run {}) {detail}", self.runs),
            );
        }
        Flow::Continue
    }

    /// A refusal must leave the output as it was.
    fn check_refusal(&mut self, said: &str) {
        self.refused = Some(said.to_owned());
        if let Some(before) = self.output_at_start.take() {
            let after = self.output_bytes();
            if after.len() < before.len() || !after.starts_with(&before) {
                self.fail(
                    FailureKind::CutOutput,
                    format!(
                        "the refused start changed the output from {} to {} bytes",
                        before.len(),
                        after.len()
                    ),
                );
            }
        }
    }

    /// What the file sink's output holds (empty for other sinks).
    pub fn output_bytes(&self) -> Vec<u8> {
        if self.scenario.sink == SinkKind::File {
            std::fs::read(self.path("out/out.txt")).unwrap_or_default()
        } else {
            Vec::new()
        }
    }

    /// The server's log since its current (or last) run's marker.
    pub fn server_log_of_run(&self) -> String {
        let log = std::fs::read_to_string(self.path("server.log")).unwrap_or_default();
        match log.rfind("=== chaos: server run") {
            Some(at) => log[at..].to_owned(),
            None => log,
        }
    }

    /// SIGKILL of the server.
    pub fn kill_server(&mut self) {
        if let Some(mut server) = self.server.take() {
            let status = server.kill();
            self.event(format!(
                "server killed ({})",
                status.map_or("-".to_owned(), |status| status.to_string())
            ));
        }
    }

    /// SIGTERM of the server, waiting for its exit.
    pub fn stop_server(&mut self) {
        if let Some(mut server) = self.server.take() {
            let status = server.terminate(Duration::from_secs(60));
            let code = status.map(code_of);
            self.event(format!("server stopped with SIGTERM: exit {code:?}"));
            if code.is_none() {
                self.fail(
                    FailureKind::NeverEnded,
                    "the server did not end within 60 s of a SIGTERM",
                );
            }
        }
    }

    /// State is touched between runs: a running server is stopped first.
    fn stop_for_state(&mut self) {
        if self.server_running() {
            self.stop_server();
        }
    }

    /// The admin API's status, when the server answers.
    pub fn status(&self) -> Option<serde_json::Value> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(2)))
            .build()
            .into();
        let mut response = agent
            .get(format!("http://127.0.0.1:{}/status", self.ports.admin))
            .call()
            .ok()?;
        let text = response.body_mut().read_to_string().ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Waits (bounded) until the status says settled.
    fn settle(&mut self) {
        let deadline = Instant::now() + SETTLE_PATIENCE;
        let mut calm_since: Option<(Instant, String)> = None;
        while Instant::now() < deadline && self.server_running() {
            if let Some(status) = self.status() {
                // settled, every feed caught up, and nothing moved for 300 ms (a status
                // taken before the source saw the new lines says settled too)
                let caught_up = status["feeds"].as_array().is_some_and(|feeds| {
                    feeds
                        .iter()
                        .all(|feed| feed["state"].as_str() == Some("CAUGHT_UP"))
                });
                let progress = status["feeds"].to_string();
                if status["settled"].as_bool() == Some(true) && caught_up {
                    match &calm_since {
                        Some((since, seen)) if *seen == progress => {
                            if since.elapsed() >= Duration::from_millis(300) {
                                self.event("settled");
                                // a state fault the server settled on was taken
                                self.touched_unsettled = false;
                                for files in &mut self.streams {
                                    files.unsettled_rotation = None;
                                }
                                return;
                            }
                        }
                        _ => calm_since = Some((Instant::now(), progress)),
                    }
                } else {
                    calm_since = None;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let stalled = self
            .status()
            .map(|status| stalled_reasons(&status))
            .unwrap_or_default();
        self.event(format!("not settled after 60 s: {stalled}"));
    }

    /// Takes a status sample of an HTTP sink and what the target had seen by then.
    pub fn sample_http(&mut self) {
        if self.scenario.sink != SinkKind::Http || !self.server_running() {
            return;
        }
        let Some(status) = self.status() else { return };
        let Some(sink) = status["sinks"].as_array().and_then(|sinks| sinks.first()) else {
            return;
        };
        let count = |field: &str| sink[field].as_u64().unwrap_or(0);
        let failed_attempts = count("not_published") + count("uncertain");
        let lost = count("lost");
        // read after the status: the target logs a request before it answers
        let target_failures =
            http_failures_since(&self.path("peers/http.log"), self.http_log_at_start);
        self.http_samples.push(HttpSample {
            run: self.runs,
            failed_attempts,
            lost,
            target_failures,
            target_was_down: self.http_down_in_run,
        });
    }

    fn rotate(&mut self, mode: RotateMode, stream: u32) -> Result<(), String> {
        if !matches!(self.scenario.source, SourceKind::File | SourceKind::Glob) {
            self.event("rotation skipped: the source is not a file");
            return Ok(());
        }
        let stream = stream.min(self.streams.len() as u32 - 1) as usize;
        let live = self.streams[stream].live.clone();
        if !live.exists() {
            self.event(format!(
                "rotation skipped: {} does not exist",
                live.display()
            ));
            return Ok(());
        }
        self.streams[stream].rotations += 1;
        let count = self.streams[stream].rotations;
        if let Some(earlier) = self.streams[stream].unsettled_rotation.take() {
            // two rotations before the server caught up: the earlier one may become a
            // middle file, neither the pointer's nor the live one (documented: reported
            // as a possible loss, not read)
            let lines: Vec<usize> = self.streams[stream]
                .files
                .iter()
                .filter(|file| file.path == earlier)
                .flat_map(|file| file.lines.clone())
                .collect();
            self.truth.mark_maybe(lines, true);
            self.lossy
                .push("two rotations before the server caught up".to_owned());
        }
        let numbered = |number: u32| {
            let mut name = live.as_os_str().to_owned();
            name.push(format!(".{number}"));
            PathBuf::from(name)
        };
        match mode {
            RotateMode::Rename => {
                let target = numbered(count);
                rename(&live, &target)?;
                self.moved(stream, &live, &target);
            }
            RotateMode::Create => {
                let target = if self.scenario.source == SourceKind::Glob {
                    live.with_file_name(format!("s{stream}-{count}.log"))
                } else {
                    numbered(count)
                };
                rename(&live, &target)?;
                self.moved(stream, &live, &target);
                create_empty(&live)?;
            }
            RotateMode::Copytruncate => {
                let target = numbered(count);
                std::fs::copy(&live, &target)
                    .map_err(|error| format!("cannot copy {}: {error}", live.display()))?;
                let file = OpenOptions::new()
                    .write(true)
                    .open(&live)
                    .map_err(|error| format!("cannot open {}: {error}", live.display()))?;
                file.set_len(0)
                    .map_err(|error| format!("cannot truncate {}: {error}", live.display()))?;
                // what was not read before the cut is only in the copy, which is a
                // rotation: read from it, or a loss the run reports
                let lines = self.moved(stream, &live, &target);
                self.truth.mark_maybe(lines, true);
                self.lossy.push("copytruncate".to_owned());
            }
            RotateMode::Compress => {
                let first = numbered(1);
                if first.exists() {
                    // delaycompress: the last rotation is compressed now
                    let status = std::process::Command::new("gzip")
                        .arg("-f")
                        .arg(&first)
                        .status()
                        .map_err(|error| format!("cannot run gzip: {error}"))?;
                    if !status.success() {
                        return Err(format!("gzip {} failed", first.display()));
                    }
                    let mut gz = first.as_os_str().to_owned();
                    gz.push(".gz");
                    let target = live.with_file_name(format!(
                        "{}.{}.gz",
                        live.file_name()
                            .map_or(String::new(), |name| name.to_string_lossy().into_owned()),
                        count + 1
                    ));
                    rename(Path::new(&gz), &target)?;
                    let lines = self.moved(stream, &first, &target);
                    self.truth.mark_maybe(lines, true);
                    self.lossy.push("compress".to_owned());
                }
                rename(&live, &first)?;
                self.moved(stream, &live, &first);
                create_empty(&live)?;
            }
        }
        self.streams[stream].unsettled_rotation = self.streams[stream]
            .files
            .iter()
            .rev()
            .find(|file| file.path != live)
            .map(|file| file.path.clone());
        self.event(format!("rotated stream {stream} ({mode:?})"));
        Ok(())
    }

    /// Notes that `from` of `stream` is now at `to`; the lines it holds.
    fn moved(&mut self, stream: usize, from: &Path, to: &Path) -> Vec<usize> {
        let files = &mut self.streams[stream];
        match files.files.iter_mut().find(|file| file.path == from) {
            Some(file) => {
                file.path = to.to_path_buf();
                file.lines.clone()
            }
            None => Vec::new(),
        }
    }

    fn rename_in_glob(&mut self, stream: u32) -> Result<(), String> {
        if self.scenario.source != SourceKind::Glob {
            self.event("rename skipped: the source is not a glob");
            return Ok(());
        }
        let stream = stream.min(self.streams.len() as u32 - 1) as usize;
        let live = self.streams[stream].live.clone();
        if !live.exists() {
            return Ok(());
        }
        self.streams[stream].rotations += 1;
        let target =
            live.with_file_name(format!("s{stream}r{}.log", self.streams[stream].rotations));
        rename(&live, &target)?;
        self.moved(stream, &live, &target);
        // the writer keeps writing the same file under its new name
        self.streams[stream].live = target;
        Ok(())
    }

    fn delete_input(&mut self, stream: u32) -> Result<(), String> {
        if self.scenario.source != SourceKind::Glob {
            self.event("delete skipped: the source is not a glob");
            return Ok(());
        }
        let stream = stream.min(self.streams.len() as u32 - 1) as usize;
        let live = self.streams[stream].live.clone();
        if !live.exists() {
            return Ok(());
        }
        remove(&live);
        let lines = self.moved(stream, &live, Path::new("/deleted"));
        self.truth.mark_maybe(lines, true);
        self.lossy.push("delete-input".to_owned());
        // the stream's next lines go to a new file of the original name
        self.streams[stream].live = self.path(&format!("in/logs/s{stream}.log"));
        Ok(())
    }

    fn recreate_source(&mut self) -> Result<(), String> {
        let old: Vec<usize> = self
            .streams
            .iter()
            .flat_map(|files| files.files.iter().flat_map(|file| file.lines.clone()))
            .collect();
        match self.scenario.source {
            SourceKind::File | SourceKind::Glob => {
                for files in &mut self.streams {
                    for file in &mut files.files {
                        remove(&file.path);
                        file.path = PathBuf::from("/deleted");
                    }
                }
                // the pointer's file is gone: the server cannot tell whether lines were
                // appended to it after it last read it, so it may report a possible
                // loss (exit 3, in the run that finds it and the one after)
                self.lossy.push("recreate-source".to_owned());
            }
            SourceKind::Journal => {
                if let Some(mut appender) = self.peers.remove(&PeerKind::Appender) {
                    appender.close_stdin();
                    appender.wait_for(Duration::from_secs(30));
                }
                remove(&self.path("in/journal"));
                self.generation += 1;
            }
            SourceKind::ArchiveIpc | SourceKind::ArchiveUdp => {
                if let Some(mut publisher) = self.peers.remove(&PeerKind::Publisher) {
                    publisher.kill();
                }
                if let Some(mut archiver) = self.peers.remove(&PeerKind::Archiver) {
                    archiver.terminate(Duration::from_secs(30));
                }
                remove(&self.path("in/archive"));
                remove(&self.path("in/ipc"));
                std::fs::create_dir_all(self.path("in/ipc"))
                    .map_err(|error| format!("cannot make in/ipc: {error}"))?;
                self.session += 1;
                self.start_peer(PeerKind::Archiver)?;
            }
        }
        for files in &mut self.streams {
            files
                .files
                .retain(|file| file.path != Path::new("/deleted"));
        }
        // what the server had not read of the old source went with it
        self.truth.mark_maybe(old, false);
        self.event("re-created the source");
        Ok(())
    }

    fn damage(&mut self, what: StateFile, how: Damage) -> Result<(), String> {
        if what == StateFile::JournalExcerpt {
            return self.damage_journal_excerpt(how);
        }
        let mut path = self.state_path(what);
        if path.is_dir() && matches!(how, Damage::FlipByte { .. } | Damage::CutTail { .. }) {
            // a folder's damage is one of its files'
            let mut files = files_below(&path);
            files.sort();
            if files.is_empty() {
                self.event(format!("nothing to damage in {}", path.display()));
                return Ok(());
            }
            let pick = self.random.random_range(0..files.len());
            path = files.swap_remove(pick);
        }
        match how {
            Damage::FlipByte { at } => {
                let mut bytes = match std::fs::read(&path) {
                    Ok(bytes) if !bytes.is_empty() => bytes,
                    _ => {
                        self.event(format!("nothing to damage at {}", path.display()));
                        return Ok(());
                    }
                };
                let (start, len) = if what == StateFile::SinkState {
                    newest_sink_slot(&bytes)
                } else {
                    (0, bytes.len())
                };
                let offset = start + (len.saturating_sub(1) * at.min(1000) as usize) / 1000;
                bytes[offset] ^= 0x5a;
                std::fs::write(&path, &bytes)
                    .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
                self.event(format!("flipped byte {offset} of {}", path.display()));
            }
            Damage::CutTail { keep } => {
                let Ok(meta) = std::fs::metadata(&path) else {
                    return Ok(());
                };
                let length = meta.len() * u64::from(keep.min(999)) / 1000;
                OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .and_then(|file| file.set_len(length))
                    .map_err(|error| format!("cannot cut {}: {error}", path.display()))?;
                self.event(format!("cut {} to {length} bytes", path.display()));
            }
            Damage::OlderCopy => {
                let Some(copy) = self.copies.get(&what).cloned() else {
                    self.event(format!("no copy of {what:?} kept: nothing put back"));
                    return Ok(());
                };
                remove(&path);
                copy_path(&copy, &path)
                    .map_err(|error| format!("cannot put back {}: {error}", path.display()))?;
                self.event(format!("put an older copy of {} back", path.display()));
            }
            Damage::Foreign => {
                let foreign = crate::foreign::foreign_state(self, what)?;
                remove(&path);
                copy_path(&foreign, &path)
                    .map_err(|error| format!("cannot put {} in place: {error}", path.display()))?;
                self.event(format!("put another run's {what:?} at {}", path.display()));
            }
        }
        Ok(())
    }

    /// Flips the first payload byte of one excerpt of the input journal (at `at`
    /// per-mille of its excerpts): the excerpts from it on may stay unread.
    fn damage_journal_excerpt(&mut self, how: Damage) -> Result<(), String> {
        let Damage::FlipByte { at } = how else {
            self.event("only a flipped byte damages a journal excerpt: nothing done");
            return Ok(());
        };
        // the next lines go through a new appender, which opens the damaged journal
        if let Some(mut appender) = self.peers.remove(&PeerKind::Appender) {
            appender.close_stdin();
            appender.wait_for(Duration::from_secs(30));
        }
        let output = self
            .mongoose(&["journal", "dump", "in/journal"])
            .output()
            .map_err(|error| format!("cannot run journal dump: {error}"))?;
        let text = String::from_utf8_lossy(&output.stdout);
        let rows: Vec<(usize, u64, u64)> = text
            .lines()
            .skip(1)
            .filter_map(|line| {
                let fields: Vec<&str> = line.split('\t').collect();
                Some((
                    fields.first()?.parse().ok()?,
                    fields.get(1)?.parse().ok()?,
                    fields.get(2)?.parse().ok()?,
                ))
            })
            .collect();
        if rows.len() < 3 {
            self.event("too few excerpts to damage one in the middle");
            return Ok(());
        }
        let pick = 1 + (rows.len() - 2) * at.min(1000) as usize / 1000;
        let (index, segment, offset) = rows[pick.min(rows.len() - 2)];
        let file = self.path(&format!("in/journal/{segment:020}.segment"));
        let mut bytes = std::fs::read(&file)
            .map_err(|error| format!("cannot read {}: {error}", file.display()))?;
        let at = offset as usize + 8;
        if at >= bytes.len() {
            return Err(format!(
                "excerpt {index} is past the end of {}",
                file.display()
            ));
        }
        bytes[at] ^= 0x5a;
        std::fs::write(&file, &bytes)
            .map_err(|error| format!("cannot write {}: {error}", file.display()))?;
        let live = self.path("in/journal");
        let after: Vec<usize> = self.streams[0]
            .files
            .iter()
            .filter(|file| file.path == live)
            .flat_map(|file| file.lines.iter().skip(index).copied().collect::<Vec<_>>())
            .collect();
        self.truth.mark_maybe(after, true);
        self.lossy.push(format!("journal excerpt {index} damaged"));
        self.input_damaged = true;
        self.journal_damaged_at
            .get_or_insert(self.truth.lines.len());
        self.event(format!(
            "flipped the first payload byte of excerpt {index} ({}, offset {offset})",
            file.display()
        ));
        Ok(())
    }

    fn fill_disk(&mut self, under: Disk, leave: u32) {
        let Some(tmpfs) = self.tmpfs.get(&under) else {
            self.event(format!("no tmpfs under {under:?}: nothing filled"));
            return;
        };
        let filler = tmpfs.path().join("filler");
        let Ok(mut file) = OpenOptions::new().create(true).append(true).open(&filler) else {
            return;
        };
        let block = vec![0u8; 4096];
        while file.write_all(&block).is_ok() {}
        while file.write_all(&block[..1]).is_ok() {}
        if leave > 0 {
            if let Ok(meta) = file.metadata() {
                let _ = file.set_len(meta.len().saturating_sub(u64::from(leave)));
            }
        }
        let _ = file.sync_all();
        self.event(format!(
            "filled the {under:?} tmpfs (leaving {leave} bytes)"
        ));
    }

    fn free_disk(&mut self, under: Disk) {
        if let Some(tmpfs) = self.tmpfs.get(&under) {
            remove(&tmpfs.path().join("filler"));
            self.event(format!("freed the {under:?} tmpfs"));
        }
    }

    fn peer_action(&mut self, peer: PeerKind, action: PeerAction) -> Result<(), String> {
        match action {
            PeerAction::Kill => {
                if let Some(mut process) = self.peers.remove(&peer) {
                    process.kill();
                    if peer == PeerKind::HttpTarget {
                        self.http_down_in_run = true;
                    }
                    self.event(format!("{peer:?} killed"));
                    if peer == PeerKind::Appender {
                        self.reconcile_journal()?;
                    }
                }
            }
            PeerAction::Pause { ms } => {
                if let Some(process) = self.peers.get_mut(&peer) {
                    process.pause();
                    if peer == PeerKind::HttpTarget {
                        self.http_down_in_run = true;
                    }
                    std::thread::sleep(Duration::from_millis(ms));
                    if let Some(process) = self.peers.get_mut(&peer) {
                        process.resume();
                    }
                }
            }
            PeerAction::Restart => {
                // a writer peer comes back with its next input
                if !matches!(peer, PeerKind::Appender | PeerKind::Publisher) {
                    self.start_peer(peer)?;
                }
            }
        }
        Ok(())
    }

    /// After a killed appender: the lines it had not read from its input were never
    /// appended; they are no input of the run.
    pub(crate) fn reconcile_journal(&mut self) -> Result<(), String> {
        let output = self
            .mongoose(&["journal", "tail", "in/journal"])
            .output()
            .map_err(|error| format!("cannot run journal tail: {error}"))?;
        let text = String::from_utf8_lossy(&output.stdout);
        let appended: std::collections::HashSet<&str> = text
            .lines()
            .filter_map(|line| line.split_once('\t').map(|(_, body)| body))
            .collect();
        let live = self.path("in/journal");
        let mut never = Vec::new();
        if let Some(file) = self.streams[0]
            .files
            .iter_mut()
            .find(|file| file.path == live)
        {
            file.lines.retain(|index| {
                let kept = appended.contains(self.truth.lines[*index].text.as_str());
                if !kept {
                    never.push(*index);
                }
                kept
            });
        }
        self.event(format!(
            "the killed appender had appended {} lines; {} it never read are no input",
            appended.len(),
            never.len()
        ));
        self.truth.mark_maybe(never, false);
        Ok(())
    }

    /// Brings every fault back to health before the final run: the disks freed, the
    /// HTTP target answering, the peers running, the input writers done.
    ///
    /// # Errors
    /// A peer cannot be started.
    pub fn heal(&mut self) -> Result<(), String> {
        for disk in [Disk::State, Disk::Outputs] {
            self.free_disk(disk);
        }
        if self.scenario.sink == SinkKind::Http {
            write_mode(&self.path("peers/http.mode"), HttpMode::Ok)
                .map_err(|error| format!("cannot write the HTTP mode: {error}"))?;
        }
        for process in self.peers.values_mut() {
            process.resume();
        }
        for peer in [
            PeerKind::HttpTarget,
            PeerKind::TcpReceiver,
            PeerKind::Archiver,
        ] {
            let needed = match peer {
                PeerKind::HttpTarget => self.scenario.sink == SinkKind::Http,
                PeerKind::TcpReceiver => self.scenario.sink == SinkKind::Tcp,
                _ => matches!(
                    self.scenario.source,
                    SourceKind::ArchiveIpc | SourceKind::ArchiveUdp
                ),
            };
            if needed {
                self.start_peer(peer)?;
            }
        }
        self.close_writers();
        Ok(())
    }
}

/// The stalled reasons of a status, one text.
pub fn stalled_reasons(status: &serde_json::Value) -> String {
    let mut reasons = Vec::new();
    if let Some(feeds) = status["feeds"].as_array() {
        for feed in feeds {
            if let Some(stalled) = feed["stalled"].as_str() {
                reasons.push(format!("feed {}: {stalled}", feed["feed"]));
            } else if feed["settled"].as_bool() == Some(false) {
                reasons.push(format!(
                    "feed {} not settled: state {}, detail {}",
                    feed["feed"], feed["state"], feed["detail"]
                ));
            }
        }
    }
    if let Some(sinks) = status["sinks"].as_array() {
        for sink in sinks {
            let held = sink["held_count"].as_u64().unwrap_or(0);
            if held > 0 {
                reasons.push(format!("sink {} holds {held}", sink["name"]));
            }
        }
    }
    if reasons.is_empty() {
        "no reason given".to_owned()
    } else {
        reasons.join("; ")
    }
}

/// The last line of a log that says why a run ended: an ERROR, or the binary's own
/// `mongoose:` line.
pub fn last_error(log: &str) -> String {
    log.lines()
        .rev()
        .find(|line| line.contains("ERROR") || line.starts_with("mongoose:"))
        .map(|line| line.chars().take(400).collect())
        .unwrap_or_else(|| "(nothing logged)".to_owned())
}

/// Requests the HTTP target failed since byte `from` of its log.
fn http_failures_since(log: &Path, from: u64) -> u64 {
    let Ok(bytes) = std::fs::read(log) else {
        return 0;
    };
    let from = (from as usize).min(bytes.len());
    String::from_utf8_lossy(&bytes[from..])
        .lines()
        .filter(|line| !line.starts_with('2'))
        .count() as u64
}

/// The (start, length) of the newest valid-looking slot of a file sink's state.
fn newest_sink_slot(bytes: &[u8]) -> (usize, usize) {
    const SLOT: usize = 64 * 1024;
    let slot = |index: usize| -> Option<(u64, usize, usize)> {
        let start = index * SLOT;
        let head = bytes.get(start..start + 24)?;
        let counter = u64::from_le_bytes(head[8..16].try_into().ok()?);
        let len = u32::from_le_bytes(head[16..20].try_into().ok()?) as usize;
        Some((counter, start, 24 + len))
    };
    match (slot(0), slot(1)) {
        (Some(first), Some(second)) if second.0 > first.0 => (second.1, second.2),
        (Some(first), _) => (first.1, first.2),
        (None, Some(second)) => (second.1, second.2),
        (None, None) => (0, bytes.len()),
    }
}

fn rename(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::rename(from, to).map_err(|error| {
        format!(
            "cannot rename {} to {}: {error}",
            from.display(),
            to.display()
        )
    })
}

fn create_empty(path: &Path) -> Result<(), String> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map(drop)
        .map_err(|error| format!("cannot create {}: {error}", path.display()))
}

/// The regular files below `dir`, at any depth.
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return files;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(files_below(&path));
        } else if path.is_file() {
            files.push(path);
        }
    }
    files
}

/// Removes a file or a folder, if there.
pub fn remove(path: &Path) {
    if path.is_dir() {
        let _ = std::fs::remove_dir_all(path);
    } else {
        let _ = std::fs::remove_file(path);
    }
}

/// Copies a file or a folder.
pub fn copy_path(from: &Path, to: &Path) -> std::io::Result<()> {
    if from.is_dir() {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            copy_path(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        std::fs::copy(from, to).map(drop)
    }
}
