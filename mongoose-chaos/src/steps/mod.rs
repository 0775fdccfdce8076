//! Doing a schedule's steps to a [`World`]: the server's runs and signals, rotations,
//! deletions and damage, full disks, peers and the HTTP target's answers.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rand::Rng;

use crate::peer::write_mode;
use crate::scenario::{HttpMode, StateFile, Step};
use crate::world::World;

mod faults;
mod inputs;
mod progress;
mod reload;
mod repair;
mod server;

pub use progress::Progress;
pub use reload::reload_verdict;
pub use repair::{output_files, refusal_names, refusal_promised, Touched};

/// The log filter of the server runs.
pub(crate) const SERVER_LOG: &str = "info";

/// How long a started server may take to answer its admin API.
const START_PATIENCE: Duration = Duration::from_secs(30);

/// How long `settle` waits.
const SETTLE_PATIENCE: Duration = Duration::from_secs(60);

/// How long `settle` waits on a feed stalled the same way on something only a restart
/// ends (the outputs a consumer removed by a reload held).
const STALL_PATIENCE: Duration = Duration::from_secs(3);

/// Whether the schedule goes on after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Go on.
    Continue,
    /// The server refused to start after a state fault and the harness repaired what it
    /// names as an operator would: start it again and go on.
    Repaired,
    /// The server refused its config as promised (two file sinks on one path), or a
    /// refusal the harness cannot repair: the schedule ends here.
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
            Step::Start => loop {
                self.start_server(false)?;
                match self.wait_up() {
                    Flow::Continue => break,
                    Flow::Repaired => continue,
                    Flow::Refused => return Ok(Flow::Refused),
                }
            },
            Step::Wait { ms } => std::thread::sleep(Duration::from_millis(*ms)),
            Step::Settle => {
                self.settle();
                self.kafka_settled();
            }
            Step::Kill => self.kill_server(),
            Step::Pause { ms } => {
                if let Some(server) = &mut self.server {
                    // a request in flight while the server is stopped may outlive its
                    // response timeout on the server's clock though the target answered:
                    // an uncertain attempt the target did not fail
                    self.http_down_in_run = true;
                    self.http_down_runs.insert(self.runs);
                    self.http_fault_runs.insert(self.runs);
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
                progress_every,
            } => {
                let mut progress = progress_every.map(|every| self.start_progress(every));
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
                    if let Some(progress) = &mut progress {
                        if (round + 1) % progress.every == 0 {
                            self.check_progress(progress, round + 1);
                        }
                    }
                }
                if let Some(progress) = progress {
                    self.end_progress(progress, *kills);
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
                self.touched.push(Touched {
                    what: *what,
                    how: None,
                });
                self.event(format!("deleted {}", path.display()));
            }
            Step::Damage { what, how } => {
                self.stop_for_state();
                self.damage(*what, *how)?;
                self.state_touched = true;
                if *what != StateFile::JournalExcerpt {
                    self.touched.push(Touched {
                        what: *what,
                        how: Some(*how),
                    });
                }
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
            Step::Reload { change } => self.reload(*change)?,
            Step::Respell { how } => {
                self.spelling = *how;
            }
            Step::Kafka { op } => self.kafka_op(*op)?,
            Step::Http { mode } => {
                write_mode(&self.path("peers/http.mode"), *mode)
                    .map_err(|error| format!("cannot write the HTTP mode: {error}"))?;
                // a run that sees a failing mode may count outputs lost (count_loss)
                self.http_failing = *mode != HttpMode::Ok;
                if self.http_failing && self.server_running() {
                    self.http_fault_runs.insert(self.runs);
                }
            }
        }
        self.sample_http();
        Ok(self.check_server())
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
            let held = sink["heldCount"].as_u64().unwrap_or(0);
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
