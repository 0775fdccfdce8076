//! librdkafka forgetting every broker it knew: a broker paused past its KRaft session
//! answers a metadata request with no broker at all for a while after it continues, and
//! librdkafka then decommissions the brokers it knew. Its re-bootstrap
//! (`metadata.recovery.rebootstrap.trigger.ms`, [`crate::REBOOTSTRAP_AFTER_MS`]) is
//! armed only when it sends a metadata request, and it sends none while it knows no
//! usable broker: the member waited for its group's assignment until the end of the run
//! (chaos kafka seeds 1796668540003 and 1796668540076: "no usable brokers" for 70 s
//! after the broker was back).
//!
//! The source's consumer and the sink's producer hear librdkafka's metadata lines (a
//! `metadata` debug context they turn on): an answer listing no broker starts the
//! clock, one listing any stops it. Past [`PATIENCE`] the source replaces its consumer
//! and the sink its producer (a new client bootstraps from `brokers` again). A producer
//! that forgot its broker held its records for good: "new leader-1 not found in
//! cache", then nothing (chaos kafka seeds 1796668540057, 1796670829014 and 090).

use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::ClientConfig;

/// How long librdkafka may know no broker before its client is replaced
/// (its own re-bootstrap, after 5 s, gets its chance first).
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

/// Turns on librdkafka's `metadata` debug lines of `config` (after the contexts its
/// properties ask for, and the operator's `MONGOOSE_KAFKA_DEBUG` ones): the client's log
/// callback then hears each metadata answer's broker count. The lines the operator did
/// not ask for stay at debug level in our log.
pub(crate) fn hear_metadata(config: &mut ClientConfig, operator: Option<String>) {
    let mut debug = match config.get("debug") {
        Some(asked) if !asked.trim().is_empty() => format!("{asked},metadata"),
        _ => "metadata".to_owned(),
    };
    if let Some(asked) = operator {
        debug.push(',');
        debug.push_str(&asked);
    }
    config
        .set("debug", debug)
        .set_log_level(RDKafkaLogLevel::Debug);
}

/// When librdkafka last heard a metadata answer listing no broker, with none since.
#[derive(Debug, Default)]
pub(crate) struct ForgottenBrokers {
    since: Mutex<Option<Instant>>,
}

impl ForgottenBrokers {
    /// Hears a librdkafka log line: a metadata answer's broker count
    /// (`"<broker>: N brokers, M topics"`).
    pub(crate) fn hear(&self, facility: &str, message: &str) {
        if facility != "METADATA" {
            return;
        }
        let Some(count) = brokers_listed(message) else {
            return;
        };
        let mut since = self.since.lock();
        if count == 0 {
            since.get_or_insert_with(Instant::now);
        } else {
            *since = None;
        }
    }

    /// How long librdkafka has known no broker (`None`: it knows one).
    #[cfg(test)]
    pub(crate) fn forgotten_for(&self) -> Option<Duration> {
        self.since.lock().map(|since| since.elapsed())
    }

    /// How long librdkafka has known no broker, once that is [`PATIENCE`] or more (the
    /// clock is then cleared: the caller replaces its client, whose own answers count
    /// from now); `None` before.
    pub(crate) fn past_patience(&self) -> Option<Duration> {
        let mut since = self.since.lock();
        let forgotten = since.map(|since| since.elapsed())?;
        if forgotten < PATIENCE {
            return None;
        }
        *since = None;
        Some(forgotten)
    }

    /// A new consumer: its own answers count from now.
    pub(crate) fn clear(&self) {
        *self.since.lock() = None;
    }
}

/// The broker count of librdkafka's metadata line `"<broker>: N brokers, M topics"`.
fn brokers_listed(message: &str) -> Option<usize> {
    let at = message.find(" brokers, ")?;
    message[..at].rsplit(' ').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    // chaos kafka seed 1796668540076: "0 brokers, 1 topics" from a broker that came
    // back fenced, then nothing but "no usable brokers"
    #[test]
    fn an_answer_with_no_broker_starts_the_clock_and_one_with_a_broker_stops_it() {
        let forgotten = ForgottenBrokers::default();
        forgotten.hear(
            "METADATA",
            "[thrd:main]: 127.0.0.1:39493/1: 1 brokers, 1 topics",
        );
        assert_eq!(forgotten.forgotten_for(), None);
        forgotten.hear(
            "METADATA",
            "[thrd:main]: 127.0.0.1:39493/1: 0 brokers, 1 topics",
        );
        assert!(forgotten.forgotten_for().is_some());
        // other lines change nothing
        forgotten.hear(
            "METADATA",
            "[thrd:main]: Skipping metadata refresh of 1 topic(s): partition leader query: no usable brokers",
        );
        forgotten.hear(
            "BROKER",
            "[thrd:main]: 127.0.0.1:39493/1: 1 brokers, 1 topics",
        );
        assert!(forgotten.forgotten_for().is_some());
        forgotten.hear(
            "METADATA",
            "[thrd:main]: 127.0.0.1:39493/bootstrap: 1 brokers, 0 topics",
        );
        assert_eq!(forgotten.forgotten_for(), None);
        forgotten.hear("METADATA", "GroupCoordinator/1: 0 brokers, 0 topics");
        forgotten.clear();
        assert_eq!(forgotten.forgotten_for(), None);
    }
}
