//! What `mongoose replay` prints: [`replay_report`] runs a replay of a recording
//! directory and compares each processor's captured outputs and admin replies with the
//! recorded run's.

use std::collections::HashMap;
use std::fmt;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use crate::record::{RecordedAdminReply, RecordedOutput, ADMIN_REPLIES_FILE, OUTPUTS_FILE};
use crate::replay::{AdminReply, Replay, Replayer};

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
}

impl ReplayReport {
    /// True when every stream replayed to its end, nothing was lost, and every
    /// processor's captured outputs equal the recorded ones (when they were recorded).
    pub fn reproduced(&self) -> bool {
        self.replay.all_replayed()
            && self.replay.lossless()
            && self.replay.recording_incomplete().is_empty()
            && self
                .replay
                .processors()
                .iter()
                .all(|p| self.diff(&p.key).is_empty() && self.admin_diff(&p.key).is_empty())
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
/// processor builds of the recorded configuration) and reads the recorded outputs.
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
/// std::process::exit(if report.reproduced() { 0 } else { 1 });
/// ```
pub fn replay_report(dir: impl AsRef<Path>, replayer: Replayer) -> ReplayReport {
    let dir = dir.as_ref().to_path_buf();
    let replay = replayer.run();
    let recorded_outputs = read_outputs(&dir.join(OUTPUTS_FILE));
    let recorded_admin_replies = read_admin_replies(&dir.join(ADMIN_REPLIES_FILE));
    ReplayReport {
        dir,
        replay,
        recorded_outputs,
        recorded_admin_replies,
    }
}

fn read_admin_replies(path: &Path) -> Option<HashMap<String, Vec<AdminReply>>> {
    let file = std::fs::File::open(path).ok()?;
    let mut replies: HashMap<String, Vec<AdminReply>> = HashMap::new();
    for line in std::io::BufReader::new(file).lines() {
        let Ok(line) = line else { break };
        // a torn last line (a killed recorder) ends the replies
        let Ok(recorded) = serde_json::from_str::<RecordedAdminReply>(&line) else {
            break;
        };
        replies
            .entry(recorded.stream)
            .or_default()
            .push(recorded.reply);
    }
    Some(replies)
}

fn read_outputs(path: &Path) -> Option<HashMap<String, Vec<String>>> {
    let file = std::fs::File::open(path).ok()?;
    let mut outputs: HashMap<String, Vec<String>> = HashMap::new();
    for line in std::io::BufReader::new(file).lines() {
        let Ok(line) = line else { break };
        // a torn last line (a killed recorder) ends the outputs
        let Ok(output) = serde_json::from_str::<RecordedOutput>(&line) else {
            break;
        };
        outputs
            .entry(output.stream)
            .or_default()
            .push(output.output);
    }
    Some(outputs)
}

const DIFF_LINES: usize = 20;

impl fmt::Display for ReplayReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "replay of {}", self.dir.display())?;
        let incomplete = self.replay.recording_incomplete();
        if incomplete.is_empty() {
            writeln!(f, "recording: complete")?;
        } else {
            writeln!(
                f,
                "recording: INCOMPLETE ({}): replayed up to where it could be read",
                incomplete.join("; ")
            )?;
        }
        for processor in self.replay.processors() {
            let kind = if processor.recorded_type.is_empty() {
                String::new()
            } else {
                format!(" [{}]", processor.recorded_type)
            };
            match &processor.stopped {
                None => writeln!(
                    f,
                    "processor {}{kind}: complete, {}/{} entries replayed",
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
            match &self.recorded_outputs {
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
                            "  outputs: {} captured, identical to the recorded run",
                            processor.outputs.len()
                        )?;
                    } else {
                        writeln!(
                            f,
                            "  outputs: {} captured, {count} recorded, {} differ:",
                            processor.outputs.len(),
                            diff.len()
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
            if self.reproduced() {
                "reproduced"
            } else {
                "NOT reproduced"
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
        let Some(recorded) = &self.recorded_admin_replies else {
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
                "  admin replies: {replayed} replayed, identical to the recorded run"
            );
        }
        writeln!(
            f,
            "  admin replies: {replayed} replayed, {count} recorded, {} differ:",
            diff.len()
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
