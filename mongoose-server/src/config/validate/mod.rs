//! What a configuration must pass beyond its TOML types: names, ranges, paths the
//! disk can hold, feeds that do not share a file, and a record folder that can hold
//! recordings.

use std::collections::BTreeSet;

use crate::error::ServerError;

use super::{IdleStrategyConfig, ServerConfig};

mod cores;
mod feeds;
mod shared_files;
mod sinks;

pub(super) use self::cores::available_cores;
#[cfg(test)]
pub(super) use self::cores::cpus_allowed_list;
#[cfg(test)]
pub(super) use self::shared_files::globs_disjoint;

/// The longest name of a feed, group, processor or sink. Names are 1 to this many
/// characters of `[A-Za-z0-9._-]`, and not `.` or `..`: a group's name becomes a folder
/// of `record.dir`, so a name must never be able to climb out of it (issue 10, item 5).
pub const MAX_NAME_LEN: usize = 64;

/// The largest `queue_capacity` (1,048,576 items): a subscriber queue allocates all its
/// slots when it is created, one per item, for every group subscribed to the feed.
pub const MAX_QUEUE_CAPACITY: usize = 1 << 20;

/// The longest sleep of `idle_strategy = "sleeping-millis:N"` (one minute); N is at
/// least 1 (`busy-spin` or `yield` never sleep). A group's thread answers control
/// requests and its queues only between sleeps.
pub const MAX_IDLE_SLEEP_MILLIS: u64 = 60_000;

/// The longest spin of `spin_bound_millis` (one minute; 0 drops at once): a publisher
/// spins on the source's thread for this long before dropping.
pub const MAX_SPIN_BOUND_MILLIS: u64 = 60_000;

/// The longest timeout or wait of the file (one hour): `control_wait_millis`,
/// `shutdown_timeout_millis`, `shutdown_drain_timeout_millis`, `block_deadline_millis`
/// and `quiet_period_millis`. Each is at least 1 ms (the drain may be 0: no drain),
/// and the quiet period at least 1,000 ms.
pub const MAX_TIMEOUT_MILLIS: u64 = 3_600_000;

/// The largest sink `batch` (65,536 outputs): the runner and the sink allocate a batch's
/// room up front (a huge one panicked the sink's thread with "capacity overflow").
pub const MAX_SINK_BATCH: usize = 1 << 16;

/// The longest `expire_after_millis` of a sink (seven days).
pub const MAX_EXPIRE_MILLIS: u64 = 7 * 24 * 3_600_000;

/// What is wrong with `name` as the name of a feed, group, processor or sink, if
/// anything: see [`MAX_NAME_LEN`].
pub fn name_problem(name: &str) -> Option<String> {
    const RULE: &str = "a name is 1 to 64 characters of [A-Za-z0-9._-] (A-Z a-z 0-9 . _ -), other than '.' and '..' (names become parts of file paths, such as a group's folder in record.dir)";
    if name.is_empty() {
        return Some(format!("must not be empty: {RULE}"));
    }
    if name == "." || name == ".." {
        return Some(format!("'{name}' is not a name: {RULE}"));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Some(format!(
            "'{name}' holds {bad:?}, which a name cannot: {RULE}"
        ));
    }
    let length = name.chars().count();
    if length > MAX_NAME_LEN {
        return Some(format!("'{name}' is {length} characters long: {RULE}"));
    }
    None
}

/// Refuses `name` at `key` unless it follows the names rule ([`name_problem`]).
pub(crate) fn check_name(key: impl Into<String>, name: &str) -> Result<(), ServerError> {
    match name_problem(name) {
        None => Ok(()),
        Some(problem) => Err(ServerError::invalid(key, problem)),
    }
}

/// Refuses `value` at `key` outside `range`, saying which values are accepted.
pub(super) fn check_range(
    key: impl Into<String>,
    value: u64,
    range: std::ops::RangeInclusive<u64>,
    unit: &str,
) -> Result<(), ServerError> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(ServerError::invalid(
        key,
        format!(
            "{value} is out of range: give {} to {}{unit}",
            range.start(),
            range.end()
        ),
    ))
}

impl ServerConfig {
    /// Everything the file alone (and the disk it names) shows to be wrong: names,
    /// ranges, paths, duplicates. [`crate::ServerBuilder::check`] runs it again with
    /// what only the builder knows (processor kinds, processors added by code).
    pub(crate) fn validate(&self) -> Result<(), ServerError> {
        self.validate_paths()?;
        self.validate_ranges()?;
        let mut feeds = BTreeSet::new();
        for (index, feed) in self.feeds.iter().enumerate() {
            check_name(format!("feeds[{index}].name"), &feed.name)?;
            if !feeds.insert(feed.name.as_str()) {
                return Err(ServerError::invalid(
                    format!("feeds[{index}].name"),
                    format!(
                        "a feed named '{}' is already configured: feed names must be unique",
                        feed.name
                    ),
                ));
            }
            if let Some(capacity) = feed.queue_capacity {
                // a huge capacity panicked with "capacity overflow" at start (issue 10,
                // item 6)
                check_range(
                    format!("feeds[{index}].queue_capacity"),
                    capacity as u64,
                    1..=MAX_QUEUE_CAPACITY as u64,
                    " items",
                )?;
            }
            self.feed_overload(index)?;
            self.feed_overrides(index)?;
            self.validate_source(index)?;
            if feed.is_file() {
                self.validate_glob(index)?;
            }
        }
        let cores = available_cores();
        let mut groups = BTreeSet::new();
        for (index, group) in self.groups.iter().enumerate() {
            check_name(format!("groups[{index}].name"), &group.name)?;
            if !groups.insert(group.name.as_str()) {
                return Err(ServerError::invalid(
                    format!("groups[{index}].name"),
                    format!(
                        "a group named '{}' is already configured: group names must be unique",
                        group.name
                    ),
                ));
            }
            if let IdleStrategyConfig::SleepingMillis(millis) = group.idle_strategy {
                check_range(
                    format!("groups[{index}].idle_strategy"),
                    millis,
                    1..=MAX_IDLE_SLEEP_MILLIS,
                    " ms (sleeping-millis:N)",
                )?;
            }
            if let Some(core) = group.core {
                // pinning to a core that does not exist aborted the process (exit 134)
                if !cores.contains(&core) {
                    return Err(ServerError::invalid(
                        format!("groups[{index}].core"),
                        format!(
                            "core {core} does not exist or this process may not run on it: the cores it may use are {cores:?}; \
                             give one of them, or remove core"
                        ),
                    ));
                }
            }
            let mut names = BTreeSet::new();
            for (position, processor) in group.processors.iter().enumerate() {
                check_name(
                    format!("groups[{index}].processors[{position}].name"),
                    &processor.name,
                )?;
                if !names.insert(processor.name.as_str()) {
                    return Err(ServerError::invalid(
                        format!("groups[{index}].processors[{position}].name"),
                        format!(
                            "duplicate processor name '{}' in group '{}': a name is unique within its group",
                            processor.name, group.name
                        ),
                    ));
                }
            }
        }
        let mut sinks = BTreeSet::new();
        for (index, sink) in self.sinks.iter().enumerate() {
            check_name(format!("sinks[{index}].name"), &sink.name)?;
            sink.check_kind_settings(index, self.plugin_dir.is_some())?;
            sink.check_values(index)?;
            if !sinks.insert(sink.name.as_str()) {
                return Err(ServerError::invalid(
                    format!("sinks[{index}].name"),
                    format!(
                        "a sink named '{}' is already configured: sink names must be unique",
                        sink.name
                    ),
                ));
            }
        }
        self.refuse_feeds_sharing_a_file()?;
        self.refuse_feedback_loops()?;
        self.refuse_file_sinks_sharing_a_file()?;
        if let Some(admin) = &self.admin {
            admin.validate()?;
        }
        Ok(())
    }

    /// The top-level timeouts: at least 1 ms, at most [`MAX_TIMEOUT_MILLIS`] (a zero
    /// shutdown deadline was accepted and every stop was incomplete; a huge one
    /// overflowed the deadline arithmetic).
    fn validate_ranges(&self) -> Result<(), ServerError> {
        check_range(
            "control_wait_millis",
            self.control_wait_millis,
            1..=MAX_TIMEOUT_MILLIS,
            " ms",
        )?;
        check_range(
            "shutdown_timeout_millis",
            self.shutdown_timeout_millis,
            1..=MAX_TIMEOUT_MILLIS,
            " ms",
        )?;
        check_range(
            "stalled_exit_millis",
            self.stalled_exit_millis,
            1..=MAX_TIMEOUT_MILLIS,
            " ms",
        )?;
        check_range(
            "progress_interval_seconds",
            self.progress_interval_seconds,
            0..=86_400,
            " s",
        )?;
        if let Some(filter) = &self.log_level {
            if let Err(error) = tracing_subscriber::EnvFilter::try_new(filter) {
                return Err(ServerError::invalid(
                    "log_level",
                    format!(
                        "'{filter}' is not a log filter ({error}): give a level (`info`, `warn`) \
                         or RUST_LOG's directives (`warn,mongoose_server=debug`)"
                    ),
                ));
            }
        }
        check_range(
            "audit.open_timeout_millis",
            self.audit.open_timeout_millis,
            1..=MAX_TIMEOUT_MILLIS,
            " ms",
        )?;
        if self.shutdown_drain_timeout_millis > self.shutdown_timeout_millis {
            return Err(ServerError::invalid(
                "shutdown_drain_timeout_millis",
                "must not exceed shutdown_timeout_millis (the drain runs within the shutdown deadline)",
            ));
        }
        Ok(())
    }
}
