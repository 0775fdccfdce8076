//! What `mongoose replay` prints: [`replay_report`] runs a replay of a recording
//! directory and compares each processor's captured outputs and admin replies with the
//! recorded run's.
//!
//! A report says "recording: complete" only when the store ends with its closing frame
//! and matches it, its journal does too, and every file the closing frame seals
//! (`outputs.jsonl`, `admin.jsonl`) is whole and as sealed. Anything else is an
//! incomplete recording ([`ReplayOutcome::RecordingIncomplete`]): what could be read is
//! replayed and reported as partial, never as complete or reproduced.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::record::{RecordedAdminReply, RecordedOutput, ADMIN_REPLIES_FILE, OUTPUTS_FILE};
use crate::replay::{AdminReply, Replay, Replayer};
use crate::store::{Recording, SealedFile};

/// What a replay report concludes (`mongoose replay` exits 0, 1 and 4 on them).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ReplayOutcome {
    /// The recording is complete and every processor reproduced its run: replayed to
    /// its end, nothing lost, the same outputs and admin replies.
    Reproduced,
    /// The recording is complete, but a processor's replay stopped, the recorded run
    /// lost items, or the outputs or admin replies differ.
    NotReproduced,
    /// The recording is incomplete or could not be read (no closing frame, a torn,
    /// damaged or missing frame, a damaged journal, or a sidecar that is missing,
    /// unreadable, garbage or not as sealed): what could be read was replayed and is
    /// reported as partial.
    RecordingIncomplete,
}

/// A file beside the store that is missing, unreadable, garbage, or not what the
/// closing frame sealed.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SidecarProblem {
    /// The file's name (`outputs.jsonl`, `admin.jsonl`).
    pub file: String,
    /// What is wrong, naming the file (and the line) and what to do.
    pub reason: String,
}

impl fmt::Display for SidecarProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// A replay with the recorded outputs beside the captured ones.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ReplayReport {
    /// The recording directory.
    pub dir: PathBuf,
    /// The replay.
    pub replay: Replay,
    /// The recorded run's outputs per stream key, when they were recorded.
    pub recorded_outputs: Option<HashMap<String, Vec<String>>>,
    /// What the recorded run's admin commands answered per stream key, when it was
    /// recorded (`admin.jsonl`).
    pub recorded_admin_replies: Option<HashMap<String, Vec<AdminReply>>>,
    /// What is wrong with the files beside the store (empty when they are whole).
    pub sidecar_problems: Vec<SidecarProblem>,
}

impl ReplayReport {
    /// True when the recording is complete ([`Replay::recording_complete`]) and no file
    /// beside it is missing, damaged or changed since its close.
    pub fn recording_complete(&self) -> bool {
        self.replay.recording_complete() && self.sidecar_problems.is_empty()
    }

    /// Why the recording is not complete: the store could not be read, the store's and
    /// journal's reasons, then the sidecars' problems. Empty when it is complete.
    pub fn recording_problems(&self) -> Vec<String> {
        self.replay
            .recording_unreadable()
            .map(|error| format!("the replay store could not be read: {error}"))
            .into_iter()
            .chain(self.replay.recording_incomplete().iter().cloned())
            .chain(self.sidecar_problems.iter().map(ToString::to_string))
            .collect()
    }

    /// What the report concludes.
    pub fn outcome(&self) -> ReplayOutcome {
        if !self.recording_complete() {
            return ReplayOutcome::RecordingIncomplete;
        }
        let same = self
            .replay
            .processors()
            .iter()
            .all(|p| self.diff(&p.key).is_empty() && self.admin_diff(&p.key).is_empty());
        if self.replay.all_replayed() && self.replay.lossless() && same {
            ReplayOutcome::Reproduced
        } else {
            ReplayOutcome::NotReproduced
        }
    }

    /// True when the recording is complete, every stream replayed to its end, nothing
    /// was lost, and every processor's captured outputs and admin replies equal the
    /// recorded ones (when they were recorded).
    pub fn reproduced(&self) -> bool {
        self.outcome() == ReplayOutcome::Reproduced
    }

    fn sidecar_damaged(&self, file: &str) -> bool {
        self.sidecar_problems
            .iter()
            .any(|problem| problem.file == file)
    }

    /// The differences between the recorded and the replayed admin replies of stream
    /// `key`, as text (`command args -> output`): `(index, recorded, replayed)`, `None`
    /// where one run has no reply at that index. Empty when they are equal or the
    /// replies were not recorded.
    pub fn admin_diff(&self, key: &str) -> Vec<(usize, Option<String>, Option<String>)> {
        let Some(recorded) = &self.recorded_admin_replies else {
            return Vec::new();
        };
        let recorded = recorded.get(key).map_or(&[][..], Vec::as_slice);
        let replayed = self.replay.admin_replies(key);
        (0..recorded.len().max(replayed.len()))
            .filter_map(|index| {
                let a = recorded.get(index);
                let b = replayed.get(index);
                (a != b).then(|| {
                    (
                        index,
                        a.map(ToString::to_string),
                        b.map(ToString::to_string),
                    )
                })
            })
            .collect()
    }

    /// The differences between the recorded and the replayed outputs of stream `key`:
    /// `(index, recorded, replayed)`, `None` where one run has no output at that index.
    /// Empty when they are equal or the outputs were not recorded.
    pub fn diff(&self, key: &str) -> Vec<(usize, Option<&str>, Option<&str>)> {
        let Some(recorded) = &self.recorded_outputs else {
            return Vec::new();
        };
        let recorded = recorded.get(key).map_or(&[][..], Vec::as_slice);
        let replayed = self.replay.outputs(key);
        (0..recorded.len().max(replayed.len()))
            .filter_map(|index| {
                let a = recorded.get(index).map(String::as_str);
                let b = replayed.get(index).map(String::as_str);
                (a != b).then_some((index, a, b))
            })
            .collect()
    }
}

/// Replays the recording in `dir` with `replayer` (opened on `dir`, with the feeds and
/// processor builds of the recorded configuration) and reads the recorded outputs and
/// admin replies, checking them against what the store's closing frame sealed.
///
/// ```no_run
/// use mongoose_replay::{cli, FeedCodecs, Replayer};
/// # struct Counter;
/// # impl mongoose_core::Processor for Counter {}
/// let dir = std::path::Path::new("recordings/pricing");
/// let replayer = Replayer::open(dir, FeedCodecs::new().feed::<String>("lines"))
///     .processor("counter", || Counter);
/// let report = cli::replay_report(dir, replayer);
/// println!("{report}");
/// std::process::exit(match report.outcome() {
///     cli::ReplayOutcome::Reproduced => 0,
///     cli::ReplayOutcome::NotReproduced => 1,
///     cli::ReplayOutcome::RecordingIncomplete => 4,
/// });
/// ```
pub fn replay_report(dir: impl AsRef<Path>, replayer: Replayer) -> ReplayReport {
    let dir = dir.as_ref().to_path_buf();
    let sealed: Vec<SealedFile> = replayer
        .recording()
        .ok()
        .and_then(Recording::closing)
        .map(|closing| closing.sealed_files().to_vec())
        .unwrap_or_default();
    let replay = replayer.run();
    let mut sidecar_problems = Vec::new();
    let recorded_outputs = read_sidecar::<RecordedOutput>(
        &dir,
        OUTPUTS_FILE,
        "a recorded output",
        &sealed,
        &mut sidecar_problems,
    )
    .map(|lines| {
        let mut outputs: HashMap<String, Vec<String>> = HashMap::new();
        for line in lines {
            outputs.entry(line.stream).or_default().push(line.output);
        }
        outputs
    });
    let recorded_admin_replies = read_sidecar::<RecordedAdminReply>(
        &dir,
        ADMIN_REPLIES_FILE,
        "a recorded admin reply",
        &sealed,
        &mut sidecar_problems,
    )
    .map(|lines| {
        let mut replies: HashMap<String, Vec<AdminReply>> = HashMap::new();
        for line in lines {
            replies.entry(line.stream).or_default().push(line.reply);
        }
        replies
    });
    for file in &sealed {
        if let Err(reason) = file.verify_in(&dir) {
            sidecar_problems.push(SidecarProblem {
                file: file.name().to_owned(),
                reason,
            });
        }
    }
    ReplayReport {
        dir,
        replay,
        recorded_outputs,
        recorded_admin_replies,
        sidecar_problems,
    }
}

/// Reads the JSON lines of the sidecar `name` in `dir`, up to the first line that is not
/// `what` (a problem naming the file and the line). `None` when the file does not exist
/// (a problem too when the closing frame seals it: [`SealedFile::verify_in`] says so).
fn read_sidecar<T: DeserializeOwned>(
    dir: &Path,
    name: &str,
    what: &str,
    sealed: &[SealedFile],
    problems: &mut Vec<SidecarProblem>,
) -> Option<Vec<T>> {
    let mut problem = |reason: String| {
        problems.push(SidecarProblem {
            file: name.to_owned(),
            reason,
        })
    };
    let bytes = match std::fs::read(dir.join(name)) {
        Ok(bytes) => bytes,
        // missing: not recorded, unless sealed (then verify_in reports it)
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return None,
        Err(error) => {
            // a sealed file that cannot be read is reported by verify_in
            if !sealed.iter().any(|file| file.name() == name) {
                problem(format!(
                    "{name}: could not be read ({error}): check its permissions"
                ));
            }
            return None;
        }
    };
    let mut items = Vec::new();
    let mut rest = &bytes[..];
    let mut number = 0usize;
    while !rest.is_empty() {
        number += 1;
        let (line, torn) = match rest.iter().position(|&byte| byte == b'\n') {
            Some(end) => {
                let line = &rest[..end];
                rest = &rest[end + 1..];
                (line, false)
            }
            None => (std::mem::take(&mut rest), true),
        };
        if torn {
            problem(format!(
                "{name} line {number}: torn (it does not end with a newline): the recorder \
                 was killed or a write failed while writing it, or the file was cut"
            ));
            break;
        }
        match serde_json::from_slice::<T>(line) {
            Ok(item) => items.push(item),
            Err(error) => {
                problem(format!(
                    "{name} line {number}: not {what} ({error}): the file is damaged; restore \
                     it from where the recording was copied, or record again"
                ));
                break;
            }
        }
    }
    Some(items)
}

const DIFF_LINES: usize = 20;

/// What a comparison was made with: the recorded run, what could be read of a damaged
/// sidecar, or what an incomplete recording holds.
fn compared_with(damaged: bool, file: &str, recording_complete: bool) -> String {
    if damaged {
        format!("what could be read of the damaged {file}")
    } else if recording_complete {
        "the recorded run".to_owned()
    } else {
        "what the incomplete recording holds".to_owned()
    }
}

fn damaged_note(damaged: bool, file: &str) -> String {
    if damaged {
        format!(" (compared with what could be read of the damaged {file})")
    } else {
        String::new()
    }
}

impl fmt::Display for ReplayReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "replay of {}", self.dir.display())?;
        let problems = self.recording_problems();
        let complete = problems.is_empty();
        if complete {
            writeln!(f, "recording: complete")?;
        } else if self.replay.recording_unreadable().is_some() {
            writeln!(
                f,
                "recording: UNREADABLE ({}): nothing could be replayed",
                problems.join("; ")
            )?;
        } else {
            writeln!(
                f,
                "recording: INCOMPLETE ({}): replayed up to where it could be read, a partial replay",
                problems.join("; ")
            )?;
        }
        for processor in self.replay.processors() {
            let kind = if processor.recorded_type.is_empty() {
                String::new()
            } else {
                format!(" [{}]", processor.recorded_type)
            };
            match &processor.stopped {
                None if complete => writeln!(
                    f,
                    "processor {}{kind}: complete, {}/{} entries replayed",
                    processor.key, processor.replayed, processor.entries
                )?,
                None => writeln!(
                    f,
                    "processor {}{kind}: partial, {}/{} entries replayed (all that could be \
                     read: the recording is incomplete)",
                    processor.key, processor.replayed, processor.entries
                )?,
                Some(reason) => writeln!(
                    f,
                    "processor {}{kind}: STOPPED after {}/{} entries: {reason}",
                    processor.key, processor.replayed, processor.entries
                )?,
            }
            if !processor.losses.is_empty() {
                let lost: Vec<String> = processor
                    .losses
                    .iter()
                    .map(|loss| format!("{}#{}", loss.feed, loss.sequence))
                    .collect();
                writeln!(f, "  losses: {} ({})", lost.len(), lost.join(", "))?;
            }
            let damaged = self.sidecar_damaged(OUTPUTS_FILE);
            match &self.recorded_outputs {
                None if damaged => writeln!(
                    f,
                    "  outputs: {} captured, not compared ({OUTPUTS_FILE} could not be read)",
                    processor.outputs.len()
                )?,
                None => writeln!(
                    f,
                    "  outputs: {} captured (the recorded run's outputs were not recorded)",
                    processor.outputs.len()
                )?,
                Some(recorded) => {
                    let count = recorded.get(&processor.key).map_or(0, Vec::len);
                    let diff = self.diff(&processor.key);
                    if diff.is_empty() {
                        writeln!(
                            f,
                            "  outputs: {} captured, identical to {}",
                            processor.outputs.len(),
                            compared_with(damaged, OUTPUTS_FILE, complete)
                        )?;
                    } else {
                        writeln!(
                            f,
                            "  outputs: {} captured, {count} recorded, {} differ{}:",
                            processor.outputs.len(),
                            diff.len(),
                            damaged_note(damaged, OUTPUTS_FILE)
                        )?;
                        for (index, recorded, replayed) in diff.iter().take(DIFF_LINES) {
                            writeln!(f, "    @{index} - {}", recorded.unwrap_or("(none)"))?;
                            writeln!(f, "    @{index} + {}", replayed.unwrap_or("(none)"))?;
                        }
                        if diff.len() > DIFF_LINES {
                            writeln!(f, "    ... {} more", diff.len() - DIFF_LINES)?;
                        }
                    }
                }
            }
            self.write_admin_replies(f, &processor.key, processor.admin_replies.len())?;
        }
        for key in self.replay.unclaimed_streams() {
            writeln!(
                f,
                "stream {key}: recorded, but no replayed processor builds it"
            )?;
        }
        let losses = self.replay.losses().len();
        writeln!(
            f,
            "summary: {} processors, {} stopped, losses {losses} ({}), {}",
            self.replay.processors().len(),
            self.replay
                .processors()
                .iter()
                .filter(|p| p.stopped.is_some())
                .count(),
            if self.replay.lossless() {
                "lossless"
            } else {
                "NOT lossless"
            },
            match self.outcome() {
                ReplayOutcome::Reproduced => "reproduced",
                ReplayOutcome::NotReproduced => "NOT reproduced",
                ReplayOutcome::RecordingIncomplete
                    if self.replay.recording_unreadable().is_some() =>
                    "NOT reproduced (the recording could not be read)",
                ReplayOutcome::RecordingIncomplete =>
                    "NOT reproduced (the recording is incomplete: the replay is partial)",
            }
        )
    }
}

impl ReplayReport {
    /// The admin-replies line of a processor (nothing when neither run has one).
    fn write_admin_replies(
        &self,
        f: &mut fmt::Formatter<'_>,
        key: &str,
        replayed: usize,
    ) -> fmt::Result {
        let damaged = self.sidecar_damaged(ADMIN_REPLIES_FILE);
        let Some(recorded) = &self.recorded_admin_replies else {
            if damaged {
                return writeln!(
                    f,
                    "  admin replies: {replayed} replayed, not compared ({ADMIN_REPLIES_FILE} could not be read)"
                );
            }
            if replayed > 0 {
                writeln!(
                    f,
                    "  admin replies: {replayed} replayed (the recorded run's replies were not recorded)"
                )?;
            }
            return Ok(());
        };
        let count = recorded.get(key).map_or(0, Vec::len);
        if replayed == 0 && count == 0 {
            return Ok(());
        }
        let diff = self.admin_diff(key);
        if diff.is_empty() {
            return writeln!(
                f,
                "  admin replies: {replayed} replayed, identical to {}",
                compared_with(damaged, ADMIN_REPLIES_FILE, self.recording_complete())
            );
        }
        writeln!(
            f,
            "  admin replies: {replayed} replayed, {count} recorded, {} differ{}:",
            diff.len(),
            damaged_note(damaged, ADMIN_REPLIES_FILE)
        )?;
        for (index, recorded, replayed) in diff.iter().take(DIFF_LINES) {
            writeln!(
                f,
                "    @{index} - {}",
                recorded.as_deref().unwrap_or("(none)")
            )?;
            writeln!(
                f,
                "    @{index} + {}",
                replayed.as_deref().unwrap_or("(none)")
            )?;
        }
        if diff.len() > DIFF_LINES {
            writeln!(f, "    ... {} more", diff.len() - DIFF_LINES)?;
        }
        Ok(())
    }
}
