//! How a Kafka source connects and reads, and the counters and figures it reports.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use mongoose_core::Epoch;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::ClientConfig;

/// The default of [`KafkaSourceConfig::metadata_refresh`].
pub(super) const DEFAULT_METADATA_REFRESH: Duration = Duration::from_secs(5);

/// How a [`KafkaSource`](crate::KafkaSource) connects and reads.
#[derive(Clone, Debug)]
pub struct KafkaSourceConfig {
    /// The feed's name (also the client id).
    pub name: String,
    /// `bootstrap.servers`.
    pub brokers: String,
    /// The consumer group (`group.id`).
    pub group: String,
    /// The topic read (one topic per source: a lane is a partition).
    pub topic: String,
    /// The owner's epoch file, kept with the state that processes this member's
    /// partitions (for a server, in its state directory): a partition that comes back
    /// to this owner with nobody else having committed it since keeps its epoch
    /// ([`crate::epoch`]). `None`: every assignment gets a new epoch.
    pub epoch_file: Option<PathBuf>,
    /// `session.timeout.ms`.
    pub session_timeout: Duration,
    /// `max.poll.interval.ms`: the source calls `poll` every cycle, also while paused.
    pub max_poll_interval: Duration,
    /// At most this many records are polled per duty cycle.
    pub batch: usize,
    /// How long the first `poll` of a cycle may wait for a record.
    pub poll_timeout: Duration,
    /// How long a synchronous commit or committed-offset fetch may take.
    pub request_timeout: Duration,
    /// Where a group without a committed offset starts: `earliest` (the default) or
    /// `latest` (`auto.offset.reset`). `latest` applies to the group's first start only:
    /// a partition without a committed offset while the group has committed another
    /// partition of the topic (a partition added to the topic) is read from its start.
    pub start_from: String,
    /// How often the consumer asks the broker for the topic's metadata
    /// (`topic.metadata.refresh.interval.ms`): a partition added to the topic is read
    /// (after a rebalance) within this, and a deleted and re-created topic is noticed
    /// within it. Default 5 s (librdkafka's own default is 5 minutes: partitions added
    /// went unread that long).
    pub metadata_refresh: Duration,
    /// More librdkafka properties, set last (they win).
    pub properties: Vec<(String, String)>,
}

impl KafkaSourceConfig {
    /// A configuration with the defaults: 10 s session timeout, 5 min max poll interval,
    /// 500 records a cycle, reading from the earliest offset without a committed one,
    /// the topic's metadata asked for every 5 s.
    pub fn new(name: &str, brokers: &str, group: &str, topic: &str) -> Self {
        KafkaSourceConfig {
            name: name.to_owned(),
            brokers: brokers.to_owned(),
            group: group.to_owned(),
            topic: topic.to_owned(),
            epoch_file: None,
            session_timeout: Duration::from_secs(10),
            max_poll_interval: Duration::from_secs(300),
            batch: 500,
            poll_timeout: Duration::from_millis(10),
            request_timeout: Duration::from_secs(10),
            start_from: "earliest".to_owned(),
            metadata_refresh: DEFAULT_METADATA_REFRESH,
            properties: Vec::new(),
        }
    }

    pub(super) fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set(
                "metadata.recovery.rebootstrap.trigger.ms",
                crate::REBOOTSTRAP_AFTER_MS,
            )
            .set("group.id", &self.group)
            .set("client.id", &self.name)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", &self.start_from)
            .set(
                "session.timeout.ms",
                self.session_timeout.as_millis().to_string(),
            )
            .set(
                "max.poll.interval.ms",
                self.max_poll_interval.as_millis().to_string(),
            )
            .set(
                "topic.metadata.refresh.interval.ms",
                self.metadata_refresh.as_millis().max(1).to_string(),
            )
            .set_log_level(RDKafkaLogLevel::Warning);
        for (key, value) in &self.properties {
            config.set(key, value);
        }
        // set after the extra properties (never overridden): the end of a partition is
        // an event, and a feed is caught up only when each partition it has was read to
        // its end
        config.set("enable.partition.eof", "true");
        // librdkafka's metadata notices (in order with the records, through `poll`): the
        // one that says the topic's id changed comes before any record of the new topic
        // ([`super::incarnation`]); debug lines the operator did not ask for stay at
        // debug level in our log
        crate::forgotten::hear_metadata(&mut config, operator_debug());
        config
    }
}

/// The environment variable an operator sets to see librdkafka's own debug lines of
/// each Kafka source's consumer (its `debug` contexts: `cgrp,consumer,protocol`,
/// `all`), logged at INFO while it is set: for a consumer group that does not rejoin, a
/// broker that does not answer.
pub const DEBUG_ENV: &str = "MONGOOSE_KAFKA_DEBUG";

/// The librdkafka debug contexts the operator asked for ([`DEBUG_ENV`]), if any.
pub(crate) fn operator_debug() -> Option<String> {
    std::env::var(DEBUG_ENV)
        .ok()
        .map(|contexts| contexts.trim().to_owned())
        .filter(|contexts| {
            !contexts.is_empty()
                && contexts
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == ',' || c == '_')
        })
}

/// Counters a test or the feed status reads while the source runs
/// ([`KafkaSource::counters`](crate::KafkaSource::counters)).
#[derive(Debug, Default)]
pub struct SourceCounters {
    /// Partitions assigned to this member (each assignment of each partition counts).
    pub assigned: AtomicU64,
    /// Partitions revoked from it.
    pub revoked: AtomicU64,
    /// Successful commits.
    pub commits: AtomicU64,
    /// Failed commits (kept and retried).
    pub commit_failures: AtomicU64,
    /// Times the assignment was paused behind a full feed.
    pub pauses: AtomicU64,
    /// Times it was resumed.
    pub resumes: AtomicU64,
    /// Records published into the feed.
    pub published: AtomicU64,
    /// Records dropped because their partition was revoked before they were published.
    pub dropped_revoked: AtomicU64,
    /// Records removed (retention, `DeleteRecords`) before they were read: reported as
    /// losses of the feed.
    pub lost_records: AtomicU64,
}

/// A snapshot of what the source holds per partition ([`KafkaSource::stats`](crate::KafkaSource::stats)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KafkaSourceStats {
    /// Assigned partitions with their epoch (`None` until a record of it was read).
    pub epochs: BTreeMap<i32, Option<Epoch>>,
    /// The offsets committed by this member, per partition.
    pub committed: BTreeMap<i32, i64>,
    /// Acknowledged and not yet committed, per partition.
    pub pending: BTreeMap<i32, i64>,
    /// True while the assignment is paused behind a full feed.
    pub paused: bool,
}
