//! The ledger's settings (`[groups.processors.settings]`), their defaults and their
//! checks.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The ledger's settings (`[groups.processors.settings]` in the config).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerSettings {
    /// The feed of `account,amount` lines (default `lines`).
    #[serde(default = "default_feed")]
    pub feed: String,
    /// Where the state and `rejected.log` live.
    pub state_dir: PathBuf,
    /// The alerts file (or give `alerts_sink`).
    #[serde(default)]
    pub alerts: Option<PathBuf>,
    /// A configured `[[sinks]]` entry to write alerts to, instead of `alerts`.
    #[serde(default)]
    pub alerts_sink: Option<String>,
    /// With `state = "changelog"` and `transactions`: a Kafka topic the alerts are
    /// written to in the changelog's transactions, instead of `alerts` or
    /// `alerts_sink`: exactly once across takeovers as a `read_committed` reader sees
    /// them.
    #[serde(default)]
    pub alerts_topic: Option<String>,
    /// With `state = "changelog"`: each partition's changes, its alerts (with
    /// `alerts_topic`) and its input offsets commit in one Kafka transaction every
    /// `commit_interval_ms` (default true). False: each change is acknowledged on its own
    /// (alerts at least once across takeovers).
    #[serde(default = "yes")]
    pub transactions: bool,
    /// With `transactions`: how often the open transactions commit, in milliseconds
    /// (default 100): the latency a change adds to its line's commit.
    #[serde(default = "default_commit_interval_ms")]
    pub commit_interval_ms: u64,
    /// Skip re-delivered lines by the saved position (default true; false shows what a
    /// crash does without the consumer-side offset).
    #[serde(default = "yes")]
    pub guard: bool,
    /// fsync each journal record and snapshot (default true; without it a process
    /// crash still loses nothing, only a power loss can).
    #[serde(default = "yes")]
    pub sync: bool,
    /// A snapshot is taken once this many outbox records follow the last one (default
    /// 100,000): a record per delivery, and one per batch of alert outcomes. They are
    /// counted from the outbox on disk at open, then as they are written, so a ledger
    /// killed long before one run writes that many still snapshots, and a start that
    /// finds more already snapshots before processing (so does one that finds a quarter
    /// of the bound, when those records are at least as large as the snapshot): a
    /// restart replays at most about this many records.
    #[serde(default = "default_compact_every")]
    pub compact_every: u64,
    /// A snapshot is also taken once the records after the last one hold this many
    /// bytes in the outbox (default 64 MiB), counted the same way: the other bound on
    /// what a restart reads ...
    #[serde(default = "default_snapshot_bytes")]
    pub snapshot_bytes: u64,
    /// ... or once a record follows a snapshot this many seconds old (default 30),
    /// counted from the last snapshot or from the open, whichever is later: a bound on
    /// how stale the snapshot of a long-running ledger gets, not on a restart.
    #[serde(default = "default_snapshot_every_secs")]
    pub snapshot_every_secs: u64,
    /// With `sync` and a commit gate (a server gives one): fsync the records in
    /// groups (default true): every `group_records` records or `group_micros`
    /// microseconds, whichever comes first, and the feed commits a line only once its
    /// record is durable. False, or without a gate: one fsync per line, before the
    /// line counts as processed.
    #[serde(default = "yes")]
    pub group_commit: bool,
    /// Records per fsync group (default 1,024).
    #[serde(default = "default_group_records")]
    pub group_records: usize,
    /// The longest a record waits for its group's fsync, in microseconds (default
    /// 2,000).
    #[serde(default = "default_group_micros")]
    pub group_micros: u64,
    /// Where the state lives: `local` (in `state_dir`), `changelog` (per partition in
    /// a Kafka changelog topic: [`PartitionedLedger`]), or `auto` (the default: the
    /// server picks `changelog` when the feed is a Kafka feed, else `local`).
    ///
    /// [`PartitionedLedger`]: crate::PartitionedLedger
    #[serde(default)]
    pub state: StateMode,
    /// The changelog topic with `state = "changelog"` (default
    /// `<consumer group>-<processor>-changelog`).
    #[serde(default)]
    pub changelog_topic: Option<String>,
}

/// Where a ledger keeps its state ([`LedgerSettings::state`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateMode {
    /// `changelog` on a Kafka feed, else `local`.
    #[default]
    Auto,
    /// A snapshot and an outbox in `state_dir`.
    Local,
    /// Per partition in a changelog topic, following the partition across the members
    /// of a consumer group.
    Changelog,
}

fn default_commit_interval_ms() -> u64 {
    100
}

fn default_group_records() -> usize {
    1024
}

fn default_group_micros() -> u64 {
    2000
}

fn default_snapshot_bytes() -> u64 {
    64 << 20
}

fn default_snapshot_every_secs() -> u64 {
    30
}

fn default_compact_every() -> u64 {
    100_000
}

fn default_feed() -> String {
    "lines".to_owned()
}

fn yes() -> bool {
    true
}

impl LedgerSettings {
    /// The ledger's own checks of its settings (the part of its kind's
    /// `validate(settings)` hook that needs no server: the server's part checks that
    /// the feed, and an `alerts_sink`, exist): exactly one of `alerts` (a file, not a
    /// directory), `alerts_sink` or `alerts_topic` is given, and `state_dir` is a
    /// directory or does not exist yet. `resolve` resolves a relative path as the
    /// config's folder does. Opens nothing.
    pub fn check(&self, resolve: impl Fn(&Path) -> PathBuf) -> Result<(), SettingsRefusal> {
        if self.alerts_topic.is_some() && (self.alerts.is_some() || self.alerts_sink.is_some()) {
            return Err(SettingsRefusal::at(
                "alerts_topic",
                "alerts_topic and alerts or alerts_sink are given: give the ledger exactly one of alerts (a file), alerts_sink (a configured sink) or alerts_topic (a Kafka topic, in the changelog's transactions)",
            ));
        }
        if self.commit_interval_ms == 0 {
            return Err(SettingsRefusal::at(
                "commit_interval_ms",
                "commit_interval_ms = 0 would commit without pause: give at least 1 (the default is 100)",
            ));
        }
        match (&self.alerts, &self.alerts_sink) {
            (None, None) if self.alerts_topic.is_some() => {}
            (Some(path), None) => {
                let resolved = resolve(path);
                if resolved.is_dir() {
                    return Err(SettingsRefusal::at(
                        "alerts",
                        format!(
                            "{} is a directory: give the path of the alerts file (it need not exist yet)",
                            resolved.display()
                        ),
                    ));
                }
            }
            (None, Some(_)) => {}
            (None, None) => {
                return Err(SettingsRefusal::new(
                    "no alerts output: give the ledger exactly one of alerts (a file), alerts_sink (a configured sink) or alerts_topic (a Kafka topic, with state = \"changelog\")",
                ))
            }
            (Some(_), Some(_)) => {
                return Err(SettingsRefusal::new(
                    "both alerts and alerts_sink are given: give the ledger exactly one of alerts (a file) or alerts_sink (a configured sink)",
                ))
            }
        }
        let state_dir = resolve(&self.state_dir);
        if state_dir.exists() && !state_dir.is_dir() {
            return Err(SettingsRefusal::at(
                "state_dir",
                format!(
                    "{} exists and is not a directory: give the ledger's state folder (it is created if missing)",
                    state_dir.display()
                ),
            ));
        }
        Ok(())
    }

    /// The defaults of a config file's settings table, with these paths: the feed
    /// `lines`, the guard on, fsync on, a snapshot once 100,000 records or 64 MiB
    /// follow the last one (or it is 30 s old).
    pub fn new(state_dir: PathBuf, alerts: PathBuf) -> Self {
        LedgerSettings {
            feed: default_feed(),
            state_dir,
            alerts: Some(alerts),
            alerts_sink: None,
            alerts_topic: None,
            transactions: true,
            commit_interval_ms: default_commit_interval_ms(),
            guard: true,
            sync: true,
            compact_every: default_compact_every(),
            snapshot_bytes: default_snapshot_bytes(),
            snapshot_every_secs: default_snapshot_every_secs(),
            group_commit: true,
            group_records: default_group_records(),
            group_micros: default_group_micros(),
            state: StateMode::Auto,
            changelog_topic: None,
        }
    }
}

/// What [`LedgerSettings::check`] refuses: the settings key it is about (if one) and
/// what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsRefusal {
    /// The key within the settings table (`alerts`, `state_dir`).
    pub key: Option<&'static str>,
    /// What is wrong and what to do.
    pub message: String,
}

impl SettingsRefusal {
    fn new(message: &str) -> Self {
        SettingsRefusal {
            key: None,
            message: message.to_owned(),
        }
    }

    fn at(key: &'static str, message: impl Into<String>) -> Self {
        SettingsRefusal {
            key: Some(key),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for SettingsRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.key {
            Some(key) => write!(f, "{key}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for SettingsRefusal {}
