//! A scenario in words and as TOML: each step as a sentence, the run's label, the fault
//! families its steps use, and the printed schedule that reads back.

use std::fmt;

use super::{Also, HttpMode, KafkaOp, ReloadChange, RotateMode, Scenario, Step};

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Append {
                lines,
                stream,
                bytes,
            } => match bytes {
                Some(bytes) => write!(
                    f,
                    "append {lines} lines of {bytes} bytes to stream {stream}"
                ),
                None => write!(f, "append {lines} lines to stream {stream}"),
            },
            Step::Start => write!(f, "start the server"),
            Step::Wait { ms } => write!(f, "wait {ms} ms"),
            Step::Settle => write!(f, "wait until settled"),
            Step::Kill => write!(f, "SIGKILL the server"),
            Step::Pause { ms } => write!(f, "SIGSTOP the server for {ms} ms"),
            Step::Term => write!(f, "SIGTERM the server"),
            Step::CrashLoop {
                kills,
                min_ms,
                max_ms,
                burst_min,
                burst_max,
                progress_every,
            } => {
                write!(
                    f,
                    "crash loop: {kills} kills {min_ms}-{max_ms} ms after each start, {burst_min}-{burst_max} lines before each"
                )?;
                match progress_every {
                    Some(every) => write!(f, ", progress checked every {every} kills"),
                    None => Ok(()),
                }
            }
            Step::Rotate { mode, stream } => write!(f, "logrotate {mode:?} of stream {stream}"),
            Step::RenameInGlob { stream } => {
                write!(
                    f,
                    "rename stream {stream}'s file to another name the glob matches"
                )
            }
            Step::DeleteInput { stream } => write!(f, "delete stream {stream}'s file"),
            Step::RecreateSource => write!(f, "delete the source and make it again at its path"),
            Step::Delete { what } => write!(f, "delete {what:?}"),
            Step::Damage { what, how } => write!(f, "damage {what:?}: {how:?}"),
            Step::KeepCopy { what } => write!(f, "keep a copy of {what:?}"),
            Step::FillDisk { under, leave } => {
                write!(f, "fill the {under:?} tmpfs, leaving {leave} bytes")
            }
            Step::FreeDisk { under } => write!(f, "free the {under:?} tmpfs"),
            Step::Peer { peer, action } => write!(f, "{action:?} the {peer:?}"),
            Step::Http { mode } => write!(f, "the HTTP target answers {mode:?}"),
            Step::Reload { change } => write!(f, "reload (SIGHUP): {change:?}"),
            Step::Respell { how } => write!(f, "from now on start with the config spelled {how:?}"),
            Step::Kafka { op } => write!(f, "kafka: {op:?}"),
        }
    }
}

impl Scenario {
    /// The scenario as TOML (what `--schedule FILE` reads back).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|error| format!("# cannot print: {error}\n"))
    }

    /// A scenario read back from TOML.
    ///
    /// # Errors
    /// The text is not a scenario (the message names the key).
    pub fn from_toml(text: &str) -> Result<Scenario, String> {
        toml::from_str(text).map_err(|error| error.to_string())
    }

    /// One line saying what runs: `ledger glob->file x2`, `forward file->file+http`.
    pub fn label(&self) -> String {
        let also: String = self
            .options
            .also
            .iter()
            .map(|also| match also {
                Also::Forward { sink } => format!("+{sink:?}"),
                Also::LedgerUnguarded => "+unguarded".to_owned(),
            })
            .collect();
        format!(
            "{:?} {:?}->{:?}{also}{}",
            self.workload,
            self.source,
            self.sink,
            if self.writers > 1 {
                format!(" x{}", self.writers)
            } else {
                String::new()
            }
        )
        .to_lowercase()
    }

    /// The fault families the schedule uses, for the table.
    pub fn fault_families(&self) -> Vec<&'static str> {
        let mut families: Vec<&'static str> = self
            .steps
            .iter()
            .filter_map(|step| match step {
                Step::Kill => Some("kill"),
                Step::Pause { .. } => Some("pause"),
                Step::CrashLoop { .. } => Some("crash-loop"),
                Step::Rotate { mode, .. } => Some(match mode {
                    RotateMode::Rename => "rotate-rename",
                    RotateMode::Create => "rotate-create",
                    RotateMode::Copytruncate => "rotate-copytruncate",
                    RotateMode::Compress => "rotate-compress",
                }),
                Step::RenameInGlob { .. } => Some("glob-rename"),
                Step::DeleteInput { .. } => Some("delete-input"),
                Step::RecreateSource => Some("recreate-source"),
                Step::Delete { .. } => Some("delete-state"),
                Step::Damage { .. } => Some("damage-state"),
                Step::FillDisk { .. } => Some("full-disk"),
                Step::Peer { .. } => Some("peer"),
                Step::Http { mode } => Some(match mode {
                    HttpMode::Ok => "http-ok",
                    HttpMode::Fail { .. } => "http-5xx",
                    HttpMode::Timeout { .. } => "http-timeout",
                    HttpMode::Close { .. } => "http-close",
                    HttpMode::CloseMidBody { .. } => "http-close-mid-body",
                    HttpMode::Late { .. } => "http-late",
                }),
                Step::Reload { change } => Some(match change {
                    ReloadChange::ReplaceSink { .. } => "reload-replace-sink",
                    ReloadChange::Remove { .. } | ReloadChange::AddBack { .. } => "reload-remove",
                    ReloadChange::DataDir => "reload-data-dir",
                    ReloadChange::HalfWritten | ReloadChange::Empty => "reload-bad-file",
                    ReloadChange::Restore => "reload",
                }),
                Step::Respell { .. } => Some("path-spelling"),
                Step::Kafka { op } => Some(match op {
                    KafkaOp::DeleteRecords { .. } => "kafka-delete-records",
                    KafkaOp::Retention => "kafka-retention",
                    KafkaOp::RecreateTopic => "kafka-recreate-topic",
                    KafkaOp::AddPartitions { .. } => "kafka-add-partitions",
                }),
                _ => None,
            })
            .collect();
        if self.writers > 1 {
            families.push("two-writers");
        }
        if self.options.two_sinks_one_path {
            families.push("two-sinks-one-path");
        }
        if self.options.max_open_files.is_some() {
            families.push("max-open-files");
        }
        if self.options.udp_drop_every.is_some() {
            families.push("udp-loss");
        }
        if !self.options.also.is_empty() {
            families.push("mixed-consumers");
        }
        if self.options.http_batch.is_some() {
            families.push("http-batch");
        }
        if self.options.https {
            families.push("https");
        }
        families.sort_unstable();
        families.dedup();
        families
    }

    /// The schedule, one numbered step a line.
    pub fn describe(&self) -> String {
        let family = if self.family.is_empty() {
            String::new()
        } else {
            format!(" | {}", self.family)
        };
        let mut text = format!("seed {}{family} | {}\n", self.seed, self.label());
        for (index, step) in self.steps.iter().enumerate() {
            text.push_str(&format!("  {index:>2}. {step}\n"));
        }
        text
    }
}
