//! [`KafkaSink`]: outputs as Kafka records, each answered by its delivery report.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::sink::{Output, Sink, SinkOutcome};
use parking_lot::Mutex;
use rdkafka::bindings::{rd_kafka_message_status, rd_kafka_msg_status_t};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext, TopicPartitionList};
use tracing::{debug, error, info, warn};

use crate::error::KafkaConnectorError;
use crate::forgotten::ForgottenBrokers;

mod positions;
mod transaction;

use positions::Positions;
use transaction::{Phase, TxnState, Unresolved};

/// The header that carries an output's key (the record key carries it too).
pub const OUTPUT_KEY_HEADER: &str = "mongoose-output-key";

/// How a [`KafkaSink`] connects and publishes.
#[derive(Clone, Debug)]
pub struct KafkaSinkConfig {
    /// The sink's name (also the client id).
    pub name: String,
    /// `bootstrap.servers`.
    pub brokers: String,
    /// The topic written.
    pub topic: String,
    /// `message.timeout.ms`: how long librdkafka tries to deliver a record. A record
    /// without a delivery report this long (plus a margin) after it was handed over is
    /// `Uncertain`.
    pub delivery_timeout: Duration,
    /// With a transactional id, each `publish` batch is one transaction (and
    /// [`KafkaSink::publish_with_offsets`] adds a consumer's offsets to it). Keep it
    /// the same across restarts: the next start aborts what a killed one left open.
    pub transactional_id: Option<String>,
    /// With a transactional id: a compacted topic (created if missing) where each
    /// transaction also writes what it committed per input lane, read back at start, so
    /// outputs a restarted server sends again are answered published without being
    /// written twice (exactly once from a file feed, say, whose pointer lagged).
    pub positions_topic: Option<String>,
    /// `topic.metadata.refresh.interval.ms`: how often the producer asks the brokers
    /// for metadata when nothing else makes it ask (librdkafka's default, 5 minutes,
    /// when `None`). A shorter one hears sooner a broker that answers with no broker at
    /// all (one paused past its session), after which the sink replaces its producer.
    pub metadata_refresh: Option<Duration>,
    /// More librdkafka properties, set last (they win).
    pub properties: Vec<(String, String)>,
}

impl KafkaSinkConfig {
    /// An idempotent sink with a 30 s delivery timeout.
    pub fn new(name: &str, brokers: &str, topic: &str) -> Self {
        KafkaSinkConfig {
            name: name.to_owned(),
            brokers: brokers.to_owned(),
            topic: topic.to_owned(),
            delivery_timeout: Duration::from_secs(30),
            transactional_id: None,
            positions_topic: None,
            metadata_refresh: None,
            properties: Vec::new(),
        }
    }
}

/// A delivery report as the callback saw it.
#[derive(Debug)]
enum Report {
    Delivered {
        partition: i32,
        offset: i64,
    },
    Failed {
        error: KafkaError,
        status: rd_kafka_msg_status_t,
    },
}

/// The producer's context: collects delivery reports by `(batch, index)`.
pub(crate) struct SinkContext {
    name: String,
    reports: Mutex<HashMap<(u64, usize), Report>>,
    /// librdkafka knows no broker ([`crate::forgotten`]).
    forgotten: ForgottenBrokers,
    /// The operator asked for librdkafka's debug lines (`MONGOOSE_KAFKA_DEBUG`).
    operator_debug: bool,
}

impl ClientContext for SinkContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        self.forgotten.hear(facility, message);
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                error!(sink = %self.name, facility, "librdkafka: {message}")
            }
            RDKafkaLogLevel::Warning => warn!(sink = %self.name, facility, "librdkafka: {message}"),
            _ if self.operator_debug => info!(sink = %self.name, facility, "librdkafka: {message}"),
            _ => debug!(sink = %self.name, facility, "librdkafka: {message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        warn!(sink = %self.name, %error, reason, "kafka producer error (librdkafka retries)");
    }
}

impl ProducerContext for SinkContext {
    type DeliveryOpaque = Box<(u64, usize)>;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: Self::DeliveryOpaque) {
        let report = match result {
            Ok(message) => Report::Delivered {
                partition: message.partition(),
                offset: message.offset(),
            },
            Err((error, message)) => {
                // SAFETY: `message.ptr()` is the live message of this delivery report,
                // valid for the duration of the callback; the call only reads it.
                let status = unsafe { rd_kafka_message_status(message.ptr()) };
                Report::Failed {
                    error: error.clone(),
                    status,
                }
            }
        };
        self.reports.lock().insert(*opaque, report);
    }
}

/// True when no later attempt can deliver the record (the target refuses it for good).
fn permanent(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::MessageSizeTooLarge
                | RDKafkaErrorCode::InvalidMessage
                | RDKafkaErrorCode::InvalidMessageSize
                | RDKafkaErrorCode::InvalidRecord
                | RDKafkaErrorCode::TopicAuthorizationFailed
                | RDKafkaErrorCode::ClusterAuthorizationFailed
                | RDKafkaErrorCode::TransactionalIdAuthorizationFailed
                | RDKafkaErrorCode::InvalidTopic
                | RDKafkaErrorCode::InvalidRequiredAcks
                | RDKafkaErrorCode::UnsupportedVersion
                | RDKafkaErrorCode::UnsupportedForMessageFormat
                | RDKafkaErrorCode::PolicyViolation
                | RDKafkaErrorCode::InvalidArgument
        )
    )
}

/// The outcome of one failed delivery, from librdkafka's persistence status: never
/// sent is `NotPublished`, possibly sent (a timeout or a broken connection after the
/// request left) is `Uncertain`.
fn failed_outcome(topic: &str, error: &KafkaError, status: rd_kafka_msg_status_t) -> SinkOutcome {
    match status {
        rd_kafka_msg_status_t::RD_KAFKA_MSG_STATUS_NOT_PERSISTED => SinkOutcome::NotPublished {
            evidence: format!("{topic}: not sent: {error}"),
            retryable: !permanent(error),
        },
        rd_kafka_msg_status_t::RD_KAFKA_MSG_STATUS_POSSIBLY_PERSISTED => SinkOutcome::Uncertain {
            evidence: format!("{topic}: possibly written: {error}"),
        },
        rd_kafka_msg_status_t::RD_KAFKA_MSG_STATUS_PERSISTED => SinkOutcome::Uncertain {
            evidence: format!("{topic}: written, then failed: {error}"),
        },
    }
}

/// The sink's producer (it connects lazily): a new one with the same transactional id
/// takes the place of one that cannot go on.
fn create_producer(
    config: &KafkaSinkConfig,
) -> Result<BaseProducer<SinkContext>, KafkaConnectorError> {
    let mut client = ClientConfig::new();
    client
        .set("bootstrap.servers", &config.brokers)
        .set("client.id", &config.name)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set(
            "message.timeout.ms",
            config.delivery_timeout.as_millis().to_string(),
        )
        .set_log_level(RDKafkaLogLevel::Warning);
    if let Some(id) = &config.transactional_id {
        client.set("transactional.id", id);
    }
    if let Some(refresh) = config.metadata_refresh {
        client.set(
            "topic.metadata.refresh.interval.ms",
            refresh.as_millis().max(1).to_string(),
        );
    }
    for (key, value) in &config.properties {
        client.set(key, value);
    }
    let operator_debug = crate::source::config::operator_debug();
    let context = SinkContext {
        name: config.name.clone(),
        reports: Mutex::new(HashMap::new()),
        forgotten: ForgottenBrokers::default(),
        operator_debug: operator_debug.is_some(),
    };
    crate::forgotten::hear_metadata(&mut client, operator_debug);
    client
        .create_with_context(context)
        .map_err(|error| KafkaConnectorError::Config {
            name: config.name.clone(),
            error: Box::new(error),
        })
}

/// Publishes outputs as records of one topic. See the crate documentation.
pub struct KafkaSink {
    config: KafkaSinkConfig,
    producer: BaseProducer<SinkContext>,
    context: Arc<SinkContext>,
    batch: u64,
    /// With a transactional id: where the producer stands in the transaction protocol.
    txn: TxnState,
    /// With `positions_topic`: read at the first transaction.
    positions: Option<Positions>,
}

impl fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSink")
            .field("sink", &self.config.name)
            .field("topic", &self.config.topic)
            .field("transactional", &self.config.transactional_id.is_some())
            .finish_non_exhaustive()
    }
}

impl KafkaSink {
    /// Creates the producer (it connects lazily). A transactional sink initialises its
    /// transactions on its first publish (and reads its positions topic then).
    ///
    /// # Errors
    /// The configuration is refused (by librdkafka, or a positions topic without a
    /// transactional id).
    pub fn new(config: KafkaSinkConfig) -> Result<Self, KafkaConnectorError> {
        if config.positions_topic.is_some() && config.transactional_id.is_none() {
            return Err(KafkaConnectorError::Changelog {
                name: config.name.clone(),
                message: "positions_topic is written in the sink's transactions: give the sink a transactional_id too (the same across restarts)".to_owned(),
            });
        }
        let producer = create_producer(&config)?;
        let context = Arc::clone(producer.context());
        Ok(KafkaSink {
            config,
            producer,
            context,
            batch: 0,
            txn: TxnState::new(),
            positions: None,
        })
    }

    fn broker_error(&self, action: &str, error: KafkaError) -> KafkaConnectorError {
        KafkaConnectorError::broker(&self.config.name, action, &self.config.brokers, error)
    }

    /// Publishes `outputs` and, in the same transaction, commits `offsets` for the
    /// consumer group of `group` (Kafka's exactly-once read-process-write). Needs a
    /// `transactional_id`; the outcomes are those of [`Sink::publish`]. The call waits
    /// on the group's coordinator: librdkafka's `send_offsets_to_transaction` can wait
    /// forever, past its timeout, once that broker dies (librdkafka issues 5456 and
    /// 5511); the server never calls it.
    pub fn publish_with_offsets(
        &mut self,
        outputs: &[Output],
        offsets: &TopicPartitionList,
        group: &ConsumerGroupMetadata,
        outcomes: &mut Vec<SinkOutcome>,
    ) {
        self.publish_batch(outputs, Some((offsets, group)), outcomes);
    }

    fn all(outputs: &[Output], outcomes: &mut Vec<SinkOutcome>, outcome: SinkOutcome) {
        outcomes.extend(outputs.iter().map(|_| outcome.clone()));
    }

    fn publish_batch(
        &mut self,
        outputs: &[Output],
        offsets: Option<(&TopicPartitionList, &ConsumerGroupMetadata)>,
        outcomes: &mut Vec<SinkOutcome>,
    ) {
        let transactional = self.config.transactional_id.is_some();
        self.reconnect_if_forgotten();
        if !transactional && offsets.is_some() {
            let error = "offsets can be committed with outputs only by a transactional sink: set transactional_id";
            Self::all(
                outputs,
                outcomes,
                SinkOutcome::NotPublished {
                    evidence: error.to_owned(),
                    retryable: false,
                },
            );
            return;
        }
        if transactional {
            if let Err(error) = self.begin() {
                // nothing was handed over
                Self::all(
                    outputs,
                    outcomes,
                    SinkOutcome::NotPublished {
                        evidence: error,
                        retryable: true,
                    },
                );
                return;
            }
        }
        self.batch += 1;
        let batch = self.batch;
        let topic = self.config.topic.as_str();
        let mut sent: Vec<Option<SinkOutcome>> = Vec::with_capacity(outputs.len());
        let mut waiting = 0usize;
        for (index, output) in outputs.iter().enumerate() {
            // a comparison unless a transaction answered `Uncertain` turned out committed
            if !self.txn.confirmed.is_empty() && self.txn.confirmed.contains(&output.key) {
                sent.push(Some(SinkOutcome::Published {
                    evidence: format!(
                        "{topic}: committed by a transaction whose commit was resumed after a timeout"
                    ),
                }));
                continue;
            }
            if let Some(positions) = &self.positions {
                if positions.committed_before(&output.key) {
                    sent.push(Some(SinkOutcome::Published {
                        evidence: format!(
                            "{topic}: committed before this start (the positions in {})",
                            positions.topic()
                        ),
                    }));
                    continue;
                }
            }
            let key = output.key.to_string();
            let headers = OwnedHeaders::new().insert(Header {
                key: OUTPUT_KEY_HEADER,
                value: Some(key.as_bytes()),
            });
            let record = BaseRecord::with_opaque_to(topic, Box::new((batch, index)))
                .key(key.as_bytes())
                .payload(output.payload.as_slice())
                .headers(headers);
            match self.producer.send(record) {
                Ok(()) => {
                    sent.push(None);
                    waiting += 1;
                }
                Err((error, _record)) => {
                    // refused before the hand-off: a full local queue, a record too large
                    sent.push(Some(SinkOutcome::NotPublished {
                        evidence: format!("{topic}: refused by the producer: {error}"),
                        retryable: !permanent(&error),
                    }));
                }
            }
        }
        // the outputs this transaction holds (not those answered from earlier commits)
        let tried: Vec<bool> = sent
            .iter()
            .map(|slot| !slot.as_ref().is_some_and(SinkOutcome::is_published))
            .collect();
        // the lanes' positions, in the same transaction as the outputs
        let lanes = self.positions.as_ref().map(|positions| {
            positions.after(
                outputs
                    .iter()
                    .zip(&sent)
                    .filter(|(_, slot)| slot.is_none())
                    .map(|(output, _)| &output.key),
            )
        });
        if let (Some(lanes), Some(positions)) = (&lanes, &self.positions) {
            for (lane, state) in lanes {
                let index = sent.len();
                let key = lane.record_key();
                let value = state.encode();
                let record =
                    BaseRecord::with_opaque_to(positions.topic(), Box::new((batch, index)))
                        .key(key.as_bytes())
                        .payload(value.as_slice());
                match self.producer.send(record) {
                    Ok(()) => {
                        sent.push(None);
                        waiting += 1;
                    }
                    Err((error, _record)) => sent.push(Some(SinkOutcome::NotPublished {
                        evidence: format!(
                            "{}: refused by the producer: {error}",
                            positions.topic()
                        ),
                        retryable: true,
                    })),
                }
            }
        }
        // every record handed over gets a report within message.timeout.ms; the margin
        // covers a slow callback
        let deadline = Instant::now() + self.config.delivery_timeout + Duration::from_secs(5);
        while waiting > 0 && Instant::now() < deadline {
            self.producer.poll(Duration::from_millis(50));
            let mut reports = self.context.reports.lock();
            for (index, slot) in sent.iter_mut().enumerate() {
                if slot.is_some() {
                    continue;
                }
                if let Some(report) = reports.remove(&(batch, index)) {
                    waiting -= 1;
                    *slot = Some(match report {
                        Report::Delivered { partition, offset } => SinkOutcome::Published {
                            evidence: format!("{topic}/{partition}@{offset}"),
                        },
                        Report::Failed { error, status } => failed_outcome(topic, &error, status),
                    });
                }
            }
        }
        // a report that never came: handed over, fate unknown
        let mut handed: Vec<SinkOutcome> = sent
            .into_iter()
            .map(|slot| {
                slot.unwrap_or_else(|| SinkOutcome::Uncertain {
                    evidence: format!(
                        "{topic}: no delivery report within {:?} of the hand-off",
                        self.config.delivery_timeout
                    ),
                })
            })
            .collect();
        let known = !transactional || self.end(&mut handed, offsets);
        handed.truncate(outputs.len());
        let keys = outputs
            .iter()
            .zip(&tried)
            .filter(|(_, tried)| **tried)
            .map(|(output, _)| &output.key);
        if !known {
            // its commit is resumed before the next transaction, which decides
            self.txn.unresolved = Some(Unresolved {
                keys: keys.cloned().collect(),
                lanes,
            });
        } else if let (Some(positions), Some(lanes)) = (self.positions.as_mut(), lanes) {
            if handed.iter().all(SinkOutcome::is_published) {
                positions.committed(lanes);
            } else {
                positions.failed(keys);
            }
        }
        if !self.txn.confirmed.is_empty() {
            // answered for good: forgotten (an abort answers them again later)
            for (output, outcome) in outputs.iter().zip(&handed) {
                if outcome.is_published() {
                    self.txn.confirmed.remove(&output.key);
                }
            }
        }
        outcomes.extend(handed);
    }

    /// Replaces a producer that knows no broker past [`crate::forgotten::PATIENCE`]:
    /// a transactional one through the transaction protocol's replacement (the new one
    /// fences it), an idempotent one at once (what it still held was answered already:
    /// every record handed over gets an outcome before its publish returns).
    fn reconnect_if_forgotten(&mut self) {
        let Some(forgotten) = self.context.forgotten.past_patience() else {
            return;
        };
        warn!(sink = %self.config.name, brokers = %self.config.brokers, seconds = forgotten.as_secs(),
            "the kafka producer knows no broker (a broker answered metadata with none, as one paused past its session does when it continues) and did not bootstrap again: a new producer bootstraps from brokers");
        if self.config.transactional_id.is_some() {
            self.replace_producer("the producer knows no broker");
            return;
        }
        match create_producer(&self.config) {
            Ok(producer) => {
                self.purge();
                self.context = Arc::clone(producer.context());
                self.producer = producer;
            }
            Err(error) => warn!(sink = %self.config.name, %error,
                "a new producer could not be made: the one that knows no broker is kept"),
        }
    }

    /// Drops what the producer still queues (their publishes were answered).
    fn purge(&self) {
        self.producer
            .purge(rdkafka::producer::PurgeConfig::default().queue().inflight());
    }

    /// Opens a transaction, first finishing what an earlier one left (a commit or an
    /// abort that timed out, a producer to replace). `Err`: what the sink waits for
    /// (nothing was handed over).
    fn begin(&mut self) -> Result<(), String> {
        let recovered = self.recover().and_then(|()| {
            if self.positions.is_none() {
                if let Some(topic) = &self.config.positions_topic {
                    // after init_transactions: what a killed start left open is aborted
                    self.positions = Some(
                        Positions::load(
                            &self.config.name,
                            &self.config.brokers,
                            topic,
                            &self.config.properties,
                            self.config.delivery_timeout,
                        )
                        .map_err(|error| error.to_string())?,
                    );
                }
            }
            Ok(())
        });
        if let Err(what) = recovered {
            self.waiting(&what);
            return Err(format!(
                "kafka '{}': not sent: the sink waits for the broker at {}: {what}",
                self.config.name, self.config.brokers
            ));
        }
        self.not_waiting();
        if let Err(error) = self.producer.begin_transaction() {
            // a producer that can begin no transaction cannot go on
            self.txn.phase = Phase::Replace;
            return Err(self
                .broker_error("beginning a transaction", error)
                .to_string());
        }
        Ok(())
    }
}

impl Sink for KafkaSink {
    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
        self.publish_batch(outputs, None, outcomes);
    }
}

impl Drop for KafkaSink {
    fn drop(&mut self) {
        if let Err(error) = self.producer.flush(Duration::from_secs(5)) {
            warn!(sink = %self.config.name, %error, "records still queued when the sink closed");
        }
    }
}
