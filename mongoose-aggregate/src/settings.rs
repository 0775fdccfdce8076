//! The aggregate's settings (the processor's `settings` table), as written in the
//! config. [`crate::Aggregator::compile`] checks them and parses their expressions.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The settings table of an aggregate processor.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AggregateSettings {
    /// The feed of lines (default `lines`).
    #[serde(default = "default_feed")]
    pub feed: String,
    /// How a line is read: `csv` or `json`.
    pub format: Format,
    /// With `csv`: the names of the line's columns, in order.
    #[serde(default)]
    pub columns: Vec<String>,
    /// With `csv`: the one-byte column delimiter (default `,`).
    #[serde(default)]
    pub delimiter: Option<String>,
    /// With `csv`: the one-byte quote (default `"`).
    #[serde(default)]
    pub quote: Option<String>,
    /// With `csv`: a line whose columns are exactly the column names is a header,
    /// skipped and counted (default false: such a line is read as data).
    #[serde(default)]
    pub header: bool,
    /// The typed fields, by name: `amount = "decimal"` or
    /// `ts = { type = "timestamp", format = "%d/%m/%Y %H:%M:%S", path = "event.time" }`.
    pub fields: BTreeMap<String, FieldSpec>,
    /// The fields whose values make the key (none: one key for every line).
    #[serde(default)]
    pub group_by: Vec<String>,
    /// The aggregates per key (or per window), by name: `total = "sum(amount)"`,
    /// `n = "count"`, `last_seen = "last(ts)"`, `cards = "count_distinct(card)"`,
    /// `lo = "min(amount)"`, `hi = "max(amount)"`.
    #[serde(default)]
    pub aggregates: BTreeMap<String, String>,
    /// The most distinct values a `count_distinct` keeps per key (default 10,000); a
    /// key that reaches it is flagged and counted, and its count is then a lower bound.
    #[serde(default = "default_bound")]
    pub count_distinct_bound: u64,
    /// Tumbling event-time windows (none: aggregates since the start).
    #[serde(default)]
    pub window: Option<WindowSettings>,
    /// Rules evaluated per key (or per window when it closes).
    #[serde(default)]
    pub rules: Vec<RuleSettings>,
    /// A configured sink that rejected and late lines are sent to, with their
    /// positions (carried through for the processor).
    #[serde(default)]
    pub dead_letter: Option<String>,
    /// A configured sink the rules' outputs and the windows' results go to, keyed by
    /// their lines' positions (carried through for the processor; needed when there
    /// are rules or windows).
    #[serde(default)]
    pub sink: Option<String>,
    /// The folder the processor keeps its state in: a snapshot and the outbox of the
    /// lines applied since (carried through for the processor, which needs it).
    #[serde(default)]
    pub state_dir: Option<std::path::PathBuf>,
    /// Records in the outbox after which the processor writes a snapshot of its state
    /// and lets the outbox forget them (default 10,000, [`AggregateSettings::snapshot_every`]):
    /// what a restart replays. Local state only: a changelog is compacted by the broker.
    #[serde(default, rename = "snapshot_every")]
    pub snapshot_every_setting: Option<u64>,
    /// Where the state lives: `local` (the default: `state_dir`, on a file feed) or
    /// `changelog` (on a Kafka feed shared by a consumer group: one state per input
    /// partition in a compacted changelog topic, restored by the member that takes the
    /// partition over; carried through for the processor).
    #[serde(default)]
    pub state: StateMode,
    /// With `state = "changelog"`: the changelog topic (default
    /// `<consumer group>-<processor>-changelog`).
    #[serde(default)]
    pub changelog_topic: Option<String>,
    /// With `state = "changelog"`: each partition's changes commit in one Kafka
    /// transaction every `commit_interval_ms` (default true), so that the broker fences
    /// a zombie member; false: each change is acknowledged on its own.
    #[serde(default = "yes")]
    pub transactions: bool,
    /// With `transactions`: how often the open transactions commit, in milliseconds
    /// (default 100): the latency a change adds to its line's commit.
    #[serde(default = "default_commit_interval_ms")]
    pub commit_interval_ms: u64,
}

/// Where an aggregate keeps its state ([`AggregateSettings::state`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateMode {
    /// A snapshot and an outbox in `state_dir`, with the feed's position.
    #[default]
    Local,
    /// Per input partition of a Kafka feed, in a changelog topic.
    Changelog,
}

/// How a line is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Delimited columns (RFC 4180 quoting), named by `columns`.
    Csv,
    /// One JSON object per line; fields by dotted path.
    Json,
}

/// A field: its type alone, or a table.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum FieldSpec {
    /// `amount = "decimal"`.
    Type(FieldType),
    /// `ts = { type = "timestamp", format = "...", path = "...", column = "..." }`.
    Table(FieldTable),
}

/// A field given as a table.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldTable {
    /// The field's type.
    #[serde(rename = "type")]
    pub kind: FieldType,
    /// For a timestamp: `rfc3339` (the default), `unix` (seconds), `unix_ms`, or a
    /// chrono format such as `%Y-%m-%d %H:%M:%S` (UTC unless it has `%z`).
    #[serde(default)]
    pub format: Option<String>,
    /// With `json`: the dotted path (default the field's name).
    #[serde(default)]
    pub path: Option<String>,
    /// With `csv`: the column (default the field's name).
    #[serde(default)]
    pub column: Option<String>,
}

/// The type of a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    /// A signed 64-bit integer.
    Integer,
    /// A fixed-point decimal (up to 18 digits after the point; never a float).
    Decimal,
    /// Text.
    String,
    /// A point in time (kept in milliseconds, UTC).
    Timestamp,
}

/// Tumbling windows on an event-time field.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowSettings {
    /// The timestamp field that places a line in its window.
    pub field: String,
    /// The window's length: `500ms`, `10s`, `1m`, `1h`, `1d`.
    pub size: String,
    /// How far behind the latest event time a line may be and still count (default
    /// `0s`): the watermark is the latest event time minus this.
    #[serde(default)]
    pub allowed_lateness: Option<String>,
}

/// A rule: when its condition holds, an output.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSettings {
    /// The rule's name (in its outputs).
    pub name: String,
    /// The condition: `sum(amount) < 0`, `count > 5 and not (max(amount) < 10)`.
    pub when: String,
    /// The output's text: `{card} overdrawn: {total}` (group fields, aggregate names,
    /// and in a window `{window_start}`, `{window_end}`).
    pub emit: String,
    /// When it fires: `enter` (the default: once each time the condition becomes true
    /// for a key) or `every` (after every line that leaves it true).
    #[serde(default)]
    pub fire: Fire,
}

/// When a rule fires ([`RuleSettings::fire`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fire {
    /// On the transition from false to true.
    #[default]
    Enter,
    /// After every line that leaves the condition true.
    Every,
}

fn default_feed() -> String {
    "lines".to_owned()
}

/// Records in the outbox after which a local state is snapshotted, when the setting is
/// not given.
const DEFAULT_SNAPSHOT_EVERY: u64 = 10_000;

impl AggregateSettings {
    /// Records in the outbox after which a local state is snapshotted (the setting, or
    /// 10,000).
    pub fn snapshot_every(&self) -> u64 {
        self.snapshot_every_setting
            .unwrap_or(DEFAULT_SNAPSHOT_EVERY)
    }
}

fn yes() -> bool {
    true
}

fn default_commit_interval_ms() -> u64 {
    100
}

fn default_bound() -> u64 {
    10_000
}
