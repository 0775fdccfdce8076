//! The crate's one error type.

use mongoose_core::CoreError;

/// What can go wrong in the Kafka connector.
#[derive(Debug, thiserror::Error)]
pub enum KafkaConnectorError {
    /// librdkafka refused the configuration.
    #[error("kafka '{name}': the client configuration was refused: {error}. Check the connector's settings (brokers, group, extra properties)")]
    Config {
        /// The feed or sink.
        name: String,
        /// librdkafka's error.
        error: Box<rdkafka::error::KafkaError>,
    },
    /// A call to the broker failed.
    #[error("kafka '{name}': {action} failed: {error}. Check that the broker at {brokers} runs and answers; the call is retried")]
    Broker {
        /// The feed or sink.
        name: String,
        /// What was being done.
        action: String,
        /// The bootstrap servers.
        brokers: String,
        /// librdkafka's error.
        error: Box<rdkafka::error::KafkaError>,
    },
    /// Another owner took a changelog partition over while this one was taking it: the
    /// broker fenced this owner's producer of it.
    #[error("kafka changelog of '{name}': {failure}")]
    TakenOver {
        /// The processor.
        name: String,
        /// The fence ([`mongoose_core::state_store::WriteFailure::Fenced`]).
        failure: mongoose_core::state_store::WriteFailure,
    },
    /// The changelog state store cannot do what was asked.
    #[error("kafka changelog of '{name}': {message}")]
    Changelog {
        /// The processor.
        name: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// The security settings cannot work ([`crate::KafkaSecurity`]).
    #[error("kafka '{name}': {message}")]
    Security {
        /// The feed, sink or changelog.
        name: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// The consumer is closed (the source stopped).
    #[error("kafka '{name}': the consumer is closed: {what} was not committed and will be read again at the next start")]
    Closed {
        /// The feed.
        name: String,
        /// What could not be committed.
        what: String,
    },
}

impl KafkaConnectorError {
    /// A failed broker call: `action` of `name` against `brokers`.
    pub(crate) fn broker(
        name: &str,
        action: &str,
        brokers: &str,
        error: rdkafka::error::KafkaError,
    ) -> Self {
        KafkaConnectorError::Broker {
            name: name.to_owned(),
            action: action.to_owned(),
            brokers: brokers.to_owned(),
            error: Box::new(error),
        }
    }
}

impl From<KafkaConnectorError> for CoreError {
    fn from(error: KafkaConnectorError) -> Self {
        let source_name = match &error {
            KafkaConnectorError::Config { name, .. }
            | KafkaConnectorError::Broker { name, .. }
            | KafkaConnectorError::Closed { name, .. }
            | KafkaConnectorError::Security { name, .. }
            | KafkaConnectorError::Changelog { name, .. }
            | KafkaConnectorError::TakenOver { name, .. } => name.clone(),
        };
        CoreError::Source {
            source_name,
            message: error.to_string(),
        }
    }
}
