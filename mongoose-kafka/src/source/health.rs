//! A client that cannot connect or authenticate: the condition librdkafka reports in
//! its error callback (credentials refused, an authorization refused, a broker that
//! cannot be reached), kept until the consumer reads again (a record or the end of a
//! partition: a fetch answered) or a broker answers it again (a metadata request, tried
//! every [`PROBE_EVERY`] while the condition holds: a member at the end of its
//! partitions reads nothing new), so that the feed says stalled with the reason instead
//! of caught up.
//!
//! A refusal holds at once. A broker that cannot be reached holds only once the brokers
//! do not answer that request either: one broker of several down (the others serve the
//! group; librdkafka reconnects), or an idle connection a broker closed, is none.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tracing::{debug, info, warn};

use super::SourceContext;
use crate::error::KafkaConnectorError;

/// How often a held condition is checked with a request of the client's own.
const PROBE_EVERY: Duration = Duration::from_secs(2);
/// How long that request may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The outstanding client condition, if any.
#[derive(Debug, Default)]
pub(super) struct ClientHealth {
    /// True while a condition is outstanding: the per-record check reads only this.
    failing: AtomicBool,
    condition: Mutex<Option<Condition>>,
    /// When the condition was last checked with a request.
    probed: Mutex<Option<Instant>>,
}

#[derive(Clone, Debug)]
struct Condition {
    refused: bool,
    /// A refusal, or no broker answered the metadata request since: the feed cannot
    /// read (a connection failure alone is not, until then).
    confirmed: bool,
    error: KafkaError,
    reason: String,
}

impl ClientHealth {
    /// Records `error` (from the client's error callback) when it may keep the consumer
    /// from reading: refused credentials or authorization (held at once), or a broker
    /// that cannot be reached (a connection refused or dropped, a name not resolved,
    /// every broker down: held once the brokers do not answer [`Self::probe`]).
    pub(super) fn record(&self, name: &str, error: &KafkaError, reason: &str) {
        let Some(code) = error.rdkafka_error_code() else {
            return;
        };
        let refused = match code {
            RDKafkaErrorCode::Authentication
            | RDKafkaErrorCode::SaslAuthenticationFailed
            | RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::GroupAuthorizationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed => true,
            RDKafkaErrorCode::AllBrokersDown
            | RDKafkaErrorCode::BrokerTransportFailure
            | RDKafkaErrorCode::Resolve => false,
            _ => return,
        };
        let mut condition = self.condition.lock();
        let first = condition.is_none();
        // a refusal says more than "all brokers down", which often follows it
        if condition
            .as_ref()
            .is_some_and(|held| held.refused && !refused)
        {
            return;
        }
        let confirmed = refused || condition.as_ref().is_some_and(|held| held.confirmed);
        *condition = Some(Condition {
            refused,
            confirmed,
            error: error.clone(),
            reason: reason.to_owned(),
        });
        self.failing.store(true, Ordering::Release);
        if first && refused {
            warn!(feed = %name, %error, reason,
                "the kafka client cannot read: the feed is stalled (not caught up) until it reads again");
        }
    }

    /// The consumer read again (a record, or a partition's end: a fetch was answered):
    /// the condition is over. One atomic load when there is none.
    pub(super) fn clear(&self, name: &str) {
        if !self.failing.load(Ordering::Acquire) {
            return;
        }
        self.failing.store(false, Ordering::Release);
        if let Some(condition) = self.condition.lock().take() {
            if condition.confirmed {
                info!(feed = %name, error = %condition.error, "the kafka client reads again: the feed is no longer stalled");
            }
        }
    }

    /// With a condition held, at most every [`PROBE_EVERY`]: asks the brokers for the
    /// topic's metadata, and clears the condition when they answer (the client is
    /// accepted and reaches a broker again).
    pub(super) fn probe(&self, consumer: &BaseConsumer<SourceContext>, name: &str, topic: &str) {
        if !self.failing.load(Ordering::Acquire) {
            return;
        }
        {
            let mut probed = self.probed.lock();
            if probed.is_some_and(|at| at.elapsed() < PROBE_EVERY) {
                return;
            }
            *probed = Some(Instant::now());
        }
        match consumer.fetch_metadata(Some(topic), PROBE_TIMEOUT) {
            Ok(metadata)
                if metadata
                    .topics()
                    .iter()
                    .all(|topic| topic.error().is_none()) =>
            {
                self.clear(name);
            }
            Ok(_) => {}
            Err(error) => {
                let mut condition = self.condition.lock();
                if let Some(held) = condition.as_mut().filter(|held| !held.confirmed) {
                    held.confirmed = true;
                    warn!(feed = %name, error = %held.error, reason = %held.reason, probe = %error,
                        "the kafka client cannot read (no broker answers): the feed is stalled (not caught up) until it reads again");
                } else {
                    debug!(feed = %name, %error, "the brokers still do not answer this client");
                }
            }
        }
    }

    /// The outstanding condition as the error a duty cycle returns (the driver reports
    /// the feed stalled with it), or `None`.
    pub(super) fn outstanding(&self, name: &str, brokers: &str) -> Option<KafkaConnectorError> {
        if !self.failing.load(Ordering::Acquire) {
            return None;
        }
        let condition = self.condition.lock().clone()?;
        if !condition.confirmed {
            return None; // a broker may answer yet: the next probe says
        }
        Some(if condition.refused {
            KafkaConnectorError::Security {
                name: name.to_owned(),
                message: format!(
                    "the brokers at {brokers} refuse this client ({}: {}). Check sasl_username and the password (or the ACLs); the feed reads again as soon as they are accepted",
                    condition.error, condition.reason
                ),
            }
        } else {
            KafkaConnectorError::broker(
                name,
                &format!("reaching the brokers ({})", condition.reason),
                brokers,
                condition.error,
            )
        })
    }
}
