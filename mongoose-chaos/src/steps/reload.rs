//! Reloads: the config file rewritten (consumers replaced, removed, added back;
//! `data_dir` moved; a half-written or empty file) and SIGHUP sent, the outcome the
//! server reports checked against the promise; and the spellings of the config's path
//! a start uses.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::scenario::{ReloadChange, Spelling};
use crate::truth::FailureKind;
use crate::world::World;

/// How long a reload's outcome may take to show in the status.
const RELOAD_PATIENCE: Duration = Duration::from_secs(30);

/// What a reload must end as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Promised {
    /// Applied (or unchanged: the file asks for what runs).
    Taken,
    /// Refused or invalid, the reasons naming this text.
    Refused(&'static str),
    /// Refused or invalid, the reasons naming the file or a place in it (a key path,
    /// a line).
    RefusedFile,
}

impl World {
    /// Rewrites the config as `change` says and, while the server runs, sends SIGHUP and
    /// checks the outcome in the status.
    ///
    /// # Errors
    /// The config file cannot be written.
    pub(super) fn reload(&mut self, change: ReloadChange) -> Result<(), String> {
        let running = self.server_running();
        let written = self.truth.lines.len();
        let text = match change {
            ReloadChange::ReplaceSink { consumer } => {
                if let Some(life) = self.consumers.get_mut(consumer as usize) {
                    if life.present {
                        life.replaced += 1;
                    }
                }
                self.config()
            }
            ReloadChange::Remove { consumer } => {
                if let Some(life) = self.consumers.get_mut(consumer as usize) {
                    if life.present {
                        life.present = false;
                        life.removed_at = Some(written);
                    }
                }
                self.config()
            }
            ReloadChange::AddBack { consumer } => {
                if let Some(life) = self.consumers.get_mut(consumer as usize) {
                    if let Some(from) = life.removed_at.take() {
                        life.present = true;
                        life.absent.push(from..written);
                    }
                }
                self.config()
            }
            ReloadChange::Restore => self.config(),
            // only a running server reads these: at a start they would be a start's
            // error, not a reload's
            ReloadChange::DataDir if running => self.config_with(Some("data-moved")),
            ReloadChange::HalfWritten if running => half_written(&self.config()),
            ReloadChange::Empty if running => String::new(),
            ReloadChange::DataDir | ReloadChange::HalfWritten | ReloadChange::Empty => {
                self.event("the server is not running: no reload");
                return Ok(());
            }
        };
        // an editor's save: the file truncated, then written (not renamed into place)
        std::fs::write(self.path("mongoose.toml"), &text)
            .map_err(|error| format!("cannot write the config: {error}"))?;
        if !running {
            self.event("the config was rewritten; the next start reads it");
            return Ok(());
        }
        let before = self.last_reload_at();
        if let Some(server) = &self.server {
            server.hangup();
        }
        let deadline = Instant::now() + RELOAD_PATIENCE;
        let outcome = loop {
            if let Some(outcome) = self.status().and_then(|status| reload_of(&status, before)) {
                break Some(outcome);
            }
            if Instant::now() >= deadline || !self.server_running() {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let Some((outcome, reasons)) = outcome else {
            if self.server_running() {
                self.fail(
                    FailureKind::BadReload,
                    format!(
                        "a reload ({change:?}) showed no outcome in the status within {} s",
                        RELOAD_PATIENCE.as_secs()
                    ),
                );
            }
            return Ok(());
        };
        self.event(format!(
            "reload ({change:?}): {outcome}{}",
            if reasons.is_empty() {
                String::new()
            } else {
                format!(": {reasons}")
            }
        ));
        if let Some(detail) = reload_verdict(change, self.server_running(), &outcome, &reasons) {
            self.fail(FailureKind::BadReload, detail);
        }
        Ok(())
    }

    /// When the last reload ended (`lastReload.atMillis`), 0 before any.
    fn last_reload_at(&self) -> u64 {
        self.status()
            .and_then(|status| status["lastReload"]["atMillis"].as_u64())
            .unwrap_or(0)
    }

    /// The command that starts the server with its config spelled as `self.spelling`
    /// says (the same file whatever the spelling).
    pub(super) fn run_command(&self) -> Result<Command, String> {
        let folder = self
            .dir
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (cwd, config): (PathBuf, String) = match self.spelling {
            Spelling::Plain => (self.dir.clone(), "mongoose.toml".to_owned()),
            Spelling::DotDot => (self.dir.clone(), format!("../{folder}/mongoose.toml")),
            Spelling::Symlink => {
                let parent = self.dir.parent().map(PathBuf::from).unwrap_or_default();
                let link = parent.join(format!("{folder}.link"));
                if std::fs::symlink_metadata(&link).is_err() {
                    std::os::unix::fs::symlink(&self.dir, &link).map_err(|error| {
                        format!("cannot link {} to the folder: {error}", link.display())
                    })?;
                }
                (parent, format!("{folder}.link/mongoose.toml"))
            }
            Spelling::Elsewhere => (self.path("in"), "../mongoose.toml".to_owned()),
        };
        let mut command = Command::new(&self.bins.mongoose);
        command.args(["run", "--config", &config]).current_dir(cwd);
        Ok(command)
    }
}

/// What a reload of `change` must end as (`running`: the server read it); `None` when
/// the change is not read as a reload (a stopped server reads it at its next start).
fn promise_of(change: ReloadChange, running: bool) -> Option<Promised> {
    match change {
        ReloadChange::ReplaceSink { .. }
        | ReloadChange::Remove { .. }
        | ReloadChange::AddBack { .. }
        | ReloadChange::Restore => Some(Promised::Taken),
        ReloadChange::DataDir if running => Some(Promised::Refused("data_dir")),
        ReloadChange::HalfWritten | ReloadChange::Empty if running => Some(Promised::RefusedFile),
        _ => None,
    }
}

/// The finding of a reload of `change` that ended as `outcome` with `reasons`, when it
/// is not what the promise says; `None` when it is.
pub fn reload_verdict(
    change: ReloadChange,
    running: bool,
    outcome: &str,
    reasons: &str,
) -> Option<String> {
    let refused = outcome == "refused" || outcome == "invalid";
    let said = if reasons.is_empty() {
        "(no reason)"
    } else {
        reasons
    };
    match promise_of(change, running)? {
        Promised::Taken if outcome != "applied" && outcome != "unchanged" => {
            Some(format!("a reload ({change:?}) was {outcome}: {said}"))
        }
        Promised::Refused(named) if !refused || !reasons.contains(named) => Some(format!(
            "a reload ({change:?}) must be refused naming `{named}`; it was {outcome}: {said}"
        )),
        Promised::RefusedFile if !refused || !names_the_file(reasons) => Some(format!(
            "a reload ({change:?}) must be refused naming the file or the place in it; it was {outcome}: {said}"
        )),
        _ => None,
    }
}

/// The outcome and reasons of a reload that ended after `before` (ms), if the status
/// shows one.
fn reload_of(status: &serde_json::Value, before: u64) -> Option<(String, String)> {
    let last = &status["lastReload"];
    let at = last["atMillis"].as_u64()?;
    if at <= before {
        return None;
    }
    let outcome = last["outcome"].as_str()?.to_owned();
    let reasons = last["reasons"]
        .as_array()
        .map(|reasons| {
            reasons
                .iter()
                .filter_map(|reason| reason.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default();
    Some((outcome, reasons))
}

/// Whether a reload's reasons name the config file, or the place in it (a line and
/// column, a key path): what a refusal of a bad file must say.
fn names_the_file(reasons: &str) -> bool {
    reasons.contains("mongoose.toml") || reasons.contains("line ") || reasons.contains("empty")
}

/// `config` cut inside a quoted value of its middle line: no parser takes it.
fn half_written(config: &str) -> String {
    let middle = config.len() / 2;
    let cut = config[middle..]
        .find('"')
        .map_or(middle, |at| middle + at + 1);
    config[..cut].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_half_written_config_does_not_parse() {
        let config = "a = \"1\"\n\n[b]\nc = \"two\"\nd = \"three\"\n";
        let cut = half_written(config);
        assert!(cut.len() < config.len());
        assert!(toml::from_str::<toml::Table>(&cut).is_err(), "{cut}");
    }

    #[test]
    fn the_outcome_is_of_a_reload_after_the_one_seen_before() {
        let status = serde_json::json!({
            "lastReload": { "outcome": "refused", "atMillis": 20, "reasons": ["`data_dir` changed"] }
        });
        assert_eq!(reload_of(&status, 20), None);
        assert_eq!(
            reload_of(&status, 10),
            Some(("refused".to_owned(), "`data_dir` changed".to_owned()))
        );
    }
}
