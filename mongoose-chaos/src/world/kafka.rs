//! The Kafka side of a `kafka` scenario: the harness's own broker (a one-node cluster
//! from the same jars as the tests, [`broker`]), the scenario's topics and group (names
//! of its own, unique per run), the input produced one partition per stream, the
//! broker's faults (killed, paused, restarted), the topics' (records deleted, a
//! retention that catches up with the group, the input deleted and made again,
//! partitions added), and what the run left: the output topic as a `read_committed`
//! reader sees it, a changelog ledger's state.
//!
//! The truth of the input: each partition's lines are in the order produced (the
//! producer is idempotent), so offset `k` of partition `s` is line `k` of stream `s`'s
//! live input, and what a deletion took away is known line by line: the lines at
//! offsets from the group's committed offset up to the new log start.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mongoose_ledger::LedgerState;

use crate::scenario::{PeerAction, Scenario, SinkKind, SourceKind, Workload};

use super::{StreamFiles, World};

pub mod broker;
mod checks;
mod client;
#[cfg(test)]
mod tests;
mod topics;

pub use broker::{BrokerGuard, REQUIRE_BROKER_ENV};

/// Scenarios of this process that made topics (names them apart).
static SCENARIOS: AtomicU64 = AtomicU64::new(0);

/// The member's session timeout (`session_timeout_ms`): a server stopped longer than
/// this is out of the group.
pub const SESSION_TIMEOUT_MS: u64 = 6_000;

/// The smallest `segment.bytes` Apache Kafka 4 takes.
pub const MIN_SEGMENT_BYTES: u32 = 1024 * 1024;

/// A scenario's topics, group and producer.
#[derive(Debug)]
pub struct KafkaWorld {
    /// The broker's bootstrap address.
    pub brokers: String,
    /// The input topic (a Kafka source).
    pub input: String,
    /// The workload's output topic (a Kafka sink); consumer `i + 1`'s is
    /// `<output>-also<i>`.
    pub output: String,
    /// The consumer group of the Kafka feed.
    pub group: String,
    /// The input topic's partitions now.
    pub partitions: u32,
    /// The input topic's settings (its segments' size).
    pub topic_config: Vec<(String, String)>,
    producer: Option<client::InputProducer>,
    /// Lines appended while the broker was down, produced when it is back:
    /// `(stream, text)`.
    pending: Vec<(u32, String)>,
    /// When the broker last came back from a kill or a pause (the server must settle
    /// after it without a restart).
    pub broker_back_at: Option<Instant>,
}

impl KafkaWorld {
    /// The output topic of consumer `consumer` (0: the workload's).
    pub fn output_of(&self, consumer: usize) -> String {
        match consumer.checked_sub(1) {
            None => self.output.clone(),
            Some(index) => format!("{}-also{index}", self.output),
        }
    }

    /// The changelog topic of the workload's ledger (`<group>-ledger-changelog`).
    pub fn changelog(&self) -> String {
        format!("{}-ledger-changelog", self.group)
    }
}

/// Whether `scenario` needs the broker.
pub fn needs_broker(scenario: &Scenario) -> bool {
    scenario.source == SourceKind::Kafka
        || scenario.sink == SinkKind::Kafka
        || scenario
            .options
            .also
            .contains(&crate::scenario::Also::Forward {
                sink: SinkKind::Kafka,
            })
}

/// Why `scenario` cannot run here and is skipped (a Kafka scenario without Apache
/// Kafka's jars while [`REQUIRE_BROKER_ENV`] is unset), if it is.
pub fn skip_reason(scenario: &Scenario) -> Option<String> {
    if !needs_broker(scenario) {
        return None;
    }
    match broker::broker_available() {
        Ok(true) | Err(_) => None,
        Ok(false) => Some(format!(
            "{} (set {REQUIRE_BROKER_ENV} to make this a failure)",
            broker::NO_JARS
        )),
    }
}

impl World {
    /// Starts the broker (when it is not running) and, the first time, makes the
    /// scenario's topics and producer and writes the config again with their names.
    ///
    /// # Errors
    /// It cannot be started (the jars are missing: the message says what to do), or a
    /// topic cannot be made.
    pub fn start_broker(&mut self) -> Result<(), String> {
        let brokers = broker::ensure_broker()?;
        if self.kafka.is_some() {
            return self.broker_back();
        }
        let number = SCENARIOS.fetch_add(1, Ordering::SeqCst);
        let base = format!(
            "chaos-{}-{}-{number}",
            self.scenario.seed,
            std::process::id()
        );
        let options = self.scenario.options.kafka.unwrap_or_default();
        if self.scenario.source == SourceKind::Kafka {
            // one stream per partition (a hand-written schedule may give only the
            // partitions)
            for stream in self.streams.len() as u32..options.partitions {
                let live = self.path(&format!("in/kafka-{stream}"));
                self.streams.push(StreamFiles {
                    live,
                    ..StreamFiles::default()
                });
            }
        }
        let mut topic_config = Vec::new();
        if let Some(bytes) = options.segment_bytes {
            if bytes < MIN_SEGMENT_BYTES {
                return Err(format!(
                    "options.kafka.segment_bytes = {bytes}: Apache Kafka 4 refuses segments under {MIN_SEGMENT_BYTES} bytes (KIP-1030); give at least that, or leave it out (a retention step deletes the active segment too)"
                ));
            }
            topic_config.push(("segment.bytes".to_owned(), bytes.to_string()));
        }
        let mut kafka = KafkaWorld {
            brokers: brokers.clone(),
            input: format!("{base}-in"),
            output: format!("{base}-out"),
            group: format!("{base}-group"),
            partitions: self.streams.len() as u32,
            topic_config,
            producer: None,
            pending: Vec::new(),
            broker_back_at: None,
        };
        if self.scenario.source == SourceKind::Kafka {
            client::create_topic(
                &brokers,
                &kafka.input,
                kafka.partitions,
                &topics::pairs(&kafka.topic_config),
            )?;
            kafka.producer = Some(client::InputProducer::new(&brokers)?);
        }
        let consumers = 1 + self.scenario.options.also.len();
        for consumer in 0..consumers {
            let kind = match consumer.checked_sub(1) {
                None => Some(self.scenario.sink),
                Some(index) => match self.scenario.options.also[index] {
                    crate::scenario::Also::Forward { sink } => Some(sink),
                    crate::scenario::Also::LedgerUnguarded => None,
                },
            };
            if kind == Some(SinkKind::Kafka) {
                client::create_topic(&brokers, &kafka.output_of(consumer), 1, &[])?;
            }
        }
        self.event(format!(
            "Kafka at {brokers}: input {} ({} partitions), output {}, group {}",
            kafka.input, kafka.partitions, kafka.output, kafka.group
        ));
        self.kafka = Some(kafka);
        std::fs::write(self.path("mongoose.toml"), self.config())
            .map_err(|error| format!("cannot write the config: {error}"))
    }

    /// The broker is back (restarted or continued): the lines held while it was down
    /// are produced.
    fn broker_back(&mut self) -> Result<(), String> {
        let Some(kafka) = self.kafka.as_ref() else {
            return Ok(());
        };
        if !self.removed_below.is_empty() {
            let (brokers, input) = (kafka.brokers.clone(), kafka.input.clone());
            let starts: Vec<(u32, i64)> = self
                .removed_below
                .keys()
                .filter_map(|partition| {
                    client::watermarks(&brokers, &input, *partition)
                        .ok()
                        .map(|(low, _)| (*partition, low))
                })
                .collect();
            self.log_starts_after_restart(&starts);
        }
        let Some(kafka) = self.kafka.as_mut() else {
            return Ok(());
        };
        let pending = std::mem::take(&mut kafka.pending);
        for (stream, text) in pending {
            self.send(stream, &text)?;
        }
        Ok(())
    }

    /// Does `action` to the broker: SIGKILL, SIGSTOP for `ms` then SIGCONT, or a
    /// restart of a killed one.
    ///
    /// # Errors
    /// A restarted broker does not answer.
    pub fn broker_action(&mut self, action: PeerAction) -> Result<(), String> {
        match action {
            PeerAction::Kill => {
                broker::kill_broker();
                self.event("Broker killed");
            }
            PeerAction::Pause { ms } => {
                broker::stop_broker_process();
                self.event(format!("Broker stopped (SIGSTOP) for {ms} ms"));
                std::thread::sleep(Duration::from_millis(ms));
                broker::continue_broker();
                self.event("Broker continued");
                if let Some(kafka) = self.kafka.as_mut() {
                    kafka.broker_back_at = Some(Instant::now());
                    // the harness's own producer holds nothing (each send waits for its
                    // acknowledgements) and may have heard the fenced broker's answer
                    // with no broker, after which librdkafka never bootstraps again
                    // (chaos kafka seed 1796679619028: its lines unacknowledged for
                    // 3 minutes): the next send takes a new one, once the broker lists
                    // itself again
                    kafka.producer = None;
                }
            }
            PeerAction::Restart => {
                if broker::broker_down() {
                    broker::restart_broker()?;
                    self.event("Broker restarted");
                    if let Some(kafka) = self.kafka.as_mut() {
                        kafka.broker_back_at = Some(Instant::now());
                    }
                }
                self.broker_back()?;
            }
        }
        Ok(())
    }

    /// Before the final run: the broker running and answering, the lines held while it
    /// was down produced.
    ///
    /// # Errors
    /// It cannot be brought back.
    pub fn heal_broker(&mut self) -> Result<(), String> {
        if self.kafka.is_none() {
            return Ok(());
        }
        if broker::broker_down() {
            self.event("Broker restarted (heal)");
        }
        broker::ensure_broker()?;
        self.broker_back()
    }

    /// Produces the lines `text` to partition `stream` of the input topic (held until
    /// the broker is back while it is down).
    ///
    /// # Errors
    /// The broker did not take them.
    pub fn produce(&mut self, stream: u32, text: &str) -> Result<(), String> {
        if broker::broker_down() {
            if let Some(kafka) = self.kafka.as_mut() {
                kafka.pending.push((stream, text.to_owned()));
            }
            self.event(format!(
                "the broker is down: the lines for partition {stream} wait for it"
            ));
            return Ok(());
        }
        self.send(stream, text)
    }

    fn send(&mut self, stream: u32, text: &str) -> Result<(), String> {
        let kafka = self
            .kafka
            .as_mut()
            .ok_or("the broker of the scenario was never started")?;
        if kafka.producer.is_none() {
            // a broker continued after a pause past its session is fenced by its
            // controller a moment later, not at once: the metadata it answers in the first
            // second can still list it (seed 1796679619028 again, 39 ms after SIGCONT)
            if let Some(back) = kafka.broker_back_at {
                let settled = back + Duration::from_secs(5);
                std::thread::sleep(settled.saturating_duration_since(Instant::now()));
            }
            let deadline = Instant::now() + Duration::from_secs(120);
            while !kafka.brokers.split(',').any(|address| {
                mongoose_testkit::kafka::metadata_brokers(address)
                    .is_some_and(|brokers| brokers > 0)
            }) {
                if Instant::now() > deadline {
                    return Err(format!(
                        "the broker at {} listed no broker in its metadata for 2 minutes",
                        kafka.brokers
                    ));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            kafka.producer = Some(client::InputProducer::new(&kafka.brokers)?);
        }
        let lines: Vec<&str> = text.lines().collect();
        let producer = kafka.producer.as_ref().ok_or("no producer")?;
        producer.send(&kafka.input, stream as i32, &lines)
    }

    fn kafka_names(&self) -> Result<(String, String, String, u32), String> {
        let kafka = self
            .kafka
            .as_ref()
            .ok_or("the broker of the scenario was never started")?;
        Ok((
            kafka.brokers.clone(),
            kafka.input.clone(),
            kafka.group.clone(),
            kafka.partitions,
        ))
    }

    /// The records of the Kafka sink of consumer `consumer` (0: the workload's), as a
    /// `read_committed` reader sees them.
    ///
    /// # Errors
    /// The topic cannot be read.
    pub fn kafka_outputs(&self, consumer: usize) -> Result<Vec<String>, String> {
        let kafka = self
            .kafka
            .as_ref()
            .ok_or("the broker of the scenario was never started")?;
        client::read_committed(&kafka.brokers, &kafka.output_of(consumer))
    }

    /// Whether the workload is a ledger keeping its state in a changelog topic.
    pub fn changelog_ledger(&self) -> bool {
        self.scenario.workload == Workload::Ledger
            && self.scenario.source == SourceKind::Kafka
            && self
                .scenario
                .options
                .kafka
                .is_some_and(|kafka| kafka.changelog)
    }

    /// The ledger's state after the final run: `state/`, or summed over the partitions
    /// of its changelog topic.
    ///
    /// # Errors
    /// It cannot be read.
    pub fn final_ledger_state(&self) -> Result<LedgerState, String> {
        match self.kafka.as_ref().filter(|_| self.changelog_ledger()) {
            Some(kafka) => client::changelog_state(&kafka.brokers, &kafka.changelog()),
            None => LedgerState::load(&self.path("state")).map_err(|error| error.to_string()),
        }
    }
}
