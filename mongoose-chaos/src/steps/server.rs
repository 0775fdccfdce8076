//! The server's runs: starting, checking, stopping and killing it, its status, its
//! settling and the HTTP target's samples.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::process::{code_of, Proc};
use crate::run::RunEnd;
use crate::scenario::{PeerKind, SinkKind};
use crate::truth::FailureKind;
use crate::world::{HttpSample, World};

use super::{
    last_error, stalled_reasons, Flow, SERVER_LOG, SETTLE_PATIENCE, STALL_PATIENCE, START_PATIENCE,
};

impl World {
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
        self.http_down_in_run = false;
        if self.scenario.sink == SinkKind::Http && !self.peer_up(PeerKind::HttpTarget) {
            self.http_went_down();
        }
        if self.http_failing {
            self.http_fault_runs.insert(self.runs);
        }
        let mut command = self.run_command()?;
        if exit_when_settled {
            command.arg("--exit-when-settled");
        }
        // the stdout sink's lines (kept across runs), whatever else the server prints
        let stdout = self.log_file("peers/stdout.txt")?;
        command
            .env("RUST_LOG", SERVER_LOG)
            .stdout(stdout)
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
    pub(super) fn wait_up(&mut self) -> Flow {
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

    /// Gives the server a new admin port (another process took the one picked) and
    /// writes its config again.
    ///
    /// # Errors
    /// The config could not be written.
    pub fn move_admin_port(&mut self) -> Result<(), String> {
        self.ports.admin = crate::process::free_tcp_port();
        std::fs::write(self.path("mongoose.toml"), self.config())
            .map_err(|error| format!("cannot write the config: {error}"))
    }

    /// Looks at a server that exited by itself: a refusal after a state fault is judged
    /// and repaired ([`Flow::Repaired`]); a refused config ends the schedule; any other
    /// exit is a finding.
    pub fn check_server(&mut self) -> Flow {
        let Some(server) = &mut self.server else {
            return Flow::Continue;
        };
        let Some(status) = server.exited() else {
            return Flow::Continue;
        };
        self.server = None;
        let code = code_of(status);
        self.note_end(code);
        let said = last_error(&self.server_log_of_run());
        // two file sinks on one path are refused at load (exit 2): the promised answer
        let two_sinks_refused = self.scenario.options.two_sinks_one_path
            && code == 2
            && said.contains("write the same file");
        if code == 2 && said.contains("for the admin API (Address already in use") {
            // another process of the machine took the admin port between the harness's
            // pick and the start: not the server's doing; a new port, and start again
            if let Err(error) = self.move_admin_port() {
                self.fail(FailureKind::Harness, error);
                return Flow::Refused;
            }
            self.event(format!(
                "the admin port was taken by another process: moving to {} and starting again",
                self.ports.admin
            ));
            return Flow::Repaired;
        }
        if two_sinks_refused {
            self.event(format!(
                "the server refused its config (exit {code}): {said}"
            ));
            self.check_refusal();
            self.refused_config = Some(said);
            return Flow::Refused;
        }
        if code == 1 && self.input_damaged && said.contains("journal") {
            // a damaged input journal stops the run, naming it (the documented answer
            // to a damaged excerpt: never read past it)
            self.event(format!("the run stopped at the damaged input: {said}"));
            return Flow::Continue;
        }
        if !self.touched.is_empty() && (code == 1 || code == 2) {
            self.check_refusal();
            return if self.refused_after_fault(code, &said) {
                Flow::Repaired
            } else {
                Flow::Refused
            };
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
    fn check_refusal(&mut self) {
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
            // an input that vanished since the server last settled may have gone
            // unseen: its restart cannot tell whether it had grown
            for fault in std::mem::take(&mut self.unsettled_vanished) {
                self.uncertain_losses
                    .push(format!("{fault} (then a kill before the server settled)"));
            }
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
            if let Some(code) = code {
                self.note_end(code);
            }
            if code.is_none() {
                self.fail(
                    FailureKind::NeverEnded,
                    "the server did not end within 60 s of a SIGTERM",
                );
            }
        }
    }

    /// State is touched between runs: a running server is stopped first.
    pub(super) fn stop_for_state(&mut self) {
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
    pub(super) fn settle(&mut self) {
        let deadline = Instant::now() + SETTLE_PATIENCE;
        let mut calm_since: Option<(Instant, String)> = None;
        // a feed stalled on something only a restart ends (a removed consumer's held
        // outputs): the same stall for a few seconds ends the wait
        let mut stalled_since: Option<(Instant, String)> = None;
        while Instant::now() < deadline && self.server_running() {
            if let Some(status) = self.status() {
                let stalled = stalled_reasons(&status);
                let for_good = stalled.contains("removed by a reload");
                match &stalled_since {
                    Some((since, seen)) if *seen == stalled && for_good => {
                        if since.elapsed() >= STALL_PATIENCE {
                            self.event(format!("not settled, stalled until a restart: {stalled}"));
                            return;
                        }
                    }
                    _ => stalled_since = Some((Instant::now(), stalled)),
                }
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
                                self.touched.clear();
                                self.unsettled_vanished.clear();
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
        if !self.server_running() {
            self.event("not settled: no server runs");
            return;
        }
        let stalled = self
            .status()
            .map(|status| stalled_reasons(&status))
            .unwrap_or_default();
        self.event(format!("not settled after 60 s: {stalled}"));
    }

    /// Notes a fault that may lose lines whose loss a run must report.
    pub fn note_lossy(&mut self, fault: impl Into<String>) {
        self.lossy.push(fault.into());
        self.last_lossy_at = Some(Instant::now());
    }

    /// Notes a fault that may lose lines, made while the server was not running to see
    /// it: the server cannot tell whether it lost anything, so a possible loss it
    /// reports is honest whatever is missing.
    pub fn note_lossy_unseen(&mut self, fault: impl Into<String>) {
        let fault = fault.into();
        if self.server_running() {
            self.unsettled_vanished.push(fault.clone());
            self.note_lossy(fault);
        } else {
            self.uncertain_losses.push(fault.clone());
            self.note_lossy(format!("{fault} (while stopped)"));
        }
    }

    /// Notes that server run `self.runs` ended with `code`.
    pub fn note_end(&mut self, code: i32) {
        self.ends.push(RunEnd {
            run: self.runs,
            code,
            at: Instant::now(),
        });
    }

    /// Notes that the HTTP target went down (killed or paused), or the server was
    /// paused, during the current run: its sink may spend outputs' retries.
    pub fn http_went_down(&mut self) {
        self.http_down_in_run = true;
        self.http_down_runs.insert(self.runs);
        self.http_fault_runs.insert(self.runs);
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
        let failed_attempts = count("notPublished") + count("uncertain");
        let lost = count("lost");
        self.http_samples.push(HttpSample {
            run: self.runs,
            failed_attempts,
            lost,
            log_from: self.http_log_at_start,
            target_was_down: self.http_down_in_run,
        });
    }
}
