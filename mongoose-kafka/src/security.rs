//! How the connector authenticates to a secured cluster: [`KafkaSecurity`], the
//! settings the Kafka source, sink and changelog share (`security_protocol`,
//! `sasl_mechanism`, `sasl_username`, the password from `sasl_password_file` or
//! `sasl_password_env`, `ssl_ca_location`), checked and turned into librdkafka
//! properties in one place.
//!
//! The password is never in the config file itself: a file (its content, a trailing
//! newline dropped) or an environment variable holds it, read when the client is made.
//!
//! # Example
//!
//! A feed's settings on a SASL_SSL cluster whose certificate a private CA signed:
//!
//! ```toml
//! [[feeds]]
//! name = "payments"
//! source = "kafka"
//! settings = { brokers = "kafka-1:9093", group = "ledgers", topic = "payments", security_protocol = "SASL_SSL", sasl_mechanism = "SCRAM-SHA-256", sasl_username = "ledger", sasl_password_file = "secrets/kafka-password", ssl_ca_location = "secrets/ca.pem" }
//! ```
//!
//! ```
//! use mongoose_kafka::KafkaSecurity;
//!
//! let secrets = tempfile::tempdir().unwrap();
//! std::fs::write(secrets.path().join("kafka-password"), "s3cret\n").unwrap();
//! let mut security: KafkaSecurity = toml::from_str(
//!     r#"security_protocol = "SASL_SSL"
//!        sasl_mechanism = "SCRAM-SHA-256"
//!        sasl_username = "ledger"
//!        sasl_password_file = "kafka-password""#,
//! ).unwrap();
//! security.resolve_paths(|path| secrets.path().join(path));
//! let properties = security.properties("payments").unwrap();
//! assert!(properties.contains(&("sasl.password".to_owned(), "s3cret".to_owned())));
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use parking_lot::Mutex;
use rdkafka::client::ClientContext;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;
use serde::Deserialize;

use crate::error::KafkaConnectorError;

/// The security settings of a Kafka client (all optional: none is a PLAINTEXT
/// connection). Read from the same settings table as the source's, sink's or
/// changelog's other keys (serde ignores the others); [`KafkaSecurity::KEYS`] names
/// them for a check of unknown keys.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct KafkaSecurity {
    /// `security.protocol`: `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`.
    pub security_protocol: Option<String>,
    /// `sasl.mechanism`: `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub sasl_mechanism: Option<String>,
    /// `sasl.username`.
    pub sasl_username: Option<String>,
    /// A file holding the SASL password (a trailing newline is dropped).
    pub sasl_password_file: Option<PathBuf>,
    /// An environment variable holding the SASL password.
    pub sasl_password_env: Option<String>,
    /// `ssl.ca.location`: the PEM file of the CA that signed the brokers' certificates
    /// (without it, the system's CAs).
    pub ssl_ca_location: Option<PathBuf>,
}

/// The protocols librdkafka knows (`security.protocol`).
const PROTOCOLS: &[&str] = &["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"];

/// The SASL mechanisms that need only a username and a password.
const MECHANISMS: &[&str] = &["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

impl KafkaSecurity {
    /// The settings' keys.
    pub const KEYS: &'static [&'static str] = &[
        "security_protocol",
        "sasl_mechanism",
        "sasl_username",
        "sasl_password_file",
        "sasl_password_env",
        "ssl_ca_location",
    ];

    /// Resolves the relative paths (`sasl_password_file`, `ssl_ca_location`) with
    /// `resolve` (the config file's folder, as every path of the config).
    pub fn resolve_paths(&mut self, resolve: impl Fn(&Path) -> PathBuf) {
        for path in [&mut self.sasl_password_file, &mut self.ssl_ca_location]
            .into_iter()
            .flatten()
        {
            *path = resolve(path);
        }
    }

    /// True when no setting is given (a PLAINTEXT connection).
    pub fn is_empty(&self) -> bool {
        *self == KafkaSecurity::default()
    }

    /// The librdkafka properties of these settings for the client of `name` (a feed,
    /// sink or changelog), the password read from its file or variable now.
    ///
    /// # Errors
    /// [`KafkaConnectorError::Security`], saying what to do: an unknown protocol or
    /// mechanism, SASL settings without a SASL protocol, a username without a password
    /// (or the reverse, or both a file and a variable), a password file that cannot be
    /// read (named) or is empty, a variable that is not set, a CA file that is missing.
    pub fn properties(&self, name: &str) -> Result<Vec<(String, String)>, KafkaConnectorError> {
        let refuse = |message: String| KafkaConnectorError::Security {
            name: name.to_owned(),
            message,
        };
        let mut properties = Vec::new();
        let protocol = match &self.security_protocol {
            Some(protocol) => {
                let upper = protocol.to_ascii_uppercase();
                if !PROTOCOLS.contains(&upper.as_str()) {
                    return Err(refuse(format!(
                        "security_protocol '{protocol}' is not one of {}",
                        PROTOCOLS.join(", ")
                    )));
                }
                properties.push(("security.protocol".to_owned(), upper.clone()));
                upper
            }
            None => "PLAINTEXT".to_owned(),
        };
        let sasl = protocol.starts_with("SASL_");
        let given_sasl = self.sasl_mechanism.is_some()
            || self.sasl_username.is_some()
            || self.sasl_password_file.is_some()
            || self.sasl_password_env.is_some();
        if given_sasl && !sasl {
            return Err(refuse(format!(
                "SASL settings (sasl_mechanism, sasl_username, a password) are given with security_protocol {protocol}, which does not authenticate with SASL: set security_protocol = \"SASL_SSL\" (or \"SASL_PLAINTEXT\")"
            )));
        }
        if sasl {
            let mechanism = self.sasl_mechanism.as_deref().unwrap_or("PLAIN");
            let upper = mechanism.to_ascii_uppercase();
            if !MECHANISMS.contains(&upper.as_str()) {
                return Err(refuse(format!(
                    "sasl_mechanism '{mechanism}' is not one of {}",
                    MECHANISMS.join(", ")
                )));
            }
            let Some(username) = &self.sasl_username else {
                return Err(refuse(format!(
                    "security_protocol {protocol} needs sasl_username and a password (sasl_password_file or sasl_password_env)"
                )));
            };
            let password = self.password(&refuse)?;
            properties.push(("sasl.mechanism".to_owned(), upper));
            properties.push(("sasl.username".to_owned(), username.clone()));
            properties.push(("sasl.password".to_owned(), password));
        }
        if let Some(ca) = &self.ssl_ca_location {
            if !protocol.ends_with("SSL") {
                return Err(refuse(format!(
                    "ssl_ca_location is given with security_protocol {protocol}, which does not use TLS: set security_protocol = \"SSL\" or \"SASL_SSL\""
                )));
            }
            if !ca.is_file() {
                return Err(refuse(format!(
                    "the CA file {} (ssl_ca_location) does not exist or is not a file: give the PEM file of the CA that signed the brokers' certificates",
                    ca.display()
                )));
            }
            properties.push((
                "ssl.ca.location".to_owned(),
                ca.to_string_lossy().into_owned(),
            ));
        }
        Ok(properties)
    }

    fn password(
        &self,
        refuse: &dyn Fn(String) -> KafkaConnectorError,
    ) -> Result<String, KafkaConnectorError> {
        let password = match (&self.sasl_password_file, &self.sasl_password_env) {
            (Some(_), Some(_)) => {
                return Err(refuse(
                    "give the SASL password one way: sasl_password_file or sasl_password_env, not both"
                        .to_owned(),
                ))
            }
            (None, None) => {
                return Err(refuse(
                    "sasl_username is given without a password: set sasl_password_file (a file holding it) or sasl_password_env (a variable holding it)"
                        .to_owned(),
                ))
            }
            (Some(file), None) => {
                let text = std::fs::read_to_string(file).map_err(|error| {
                    refuse(format!(
                        "the SASL password file {} (sasl_password_file) cannot be read: {error}; create it holding the password, or use sasl_password_env",
                        file.display()
                    ))
                })?;
                let text = text.strip_suffix('\n').unwrap_or(&text);
                let text = text.strip_suffix('\r').unwrap_or(text).to_owned();
                if text.is_empty() {
                    return Err(refuse(format!(
                        "the SASL password file {} (sasl_password_file) is empty: write the password into it",
                        file.display()
                    )));
                }
                text
            }
            (None, Some(variable)) => match std::env::var(variable) {
                Ok(value) if !value.is_empty() => value,
                _ => {
                    return Err(refuse(format!(
                        "the environment variable {variable} (sasl_password_env) is not set or empty: set it to the SASL password in the server's environment"
                    )))
                }
            },
        };
        Ok(password)
    }
}

/// The client context of [`check_connection`]: keeps the first authentication or TLS
/// error librdkafka reports (they come through the error callback, served by a
/// producer's `poll`; the call that met them fails with a transport error only).
#[derive(Default)]
struct ProbeContext {
    refused: Mutex<Option<(String, &'static str)>>,
}

impl ClientContext for ProbeContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if let Some(what) = refusal(&error) {
            self.refused
                .lock()
                .get_or_insert_with(|| (reason.to_owned(), what));
        }
    }
}

impl ProducerContext for ProbeContext {
    type DeliveryOpaque = ();

    fn delivery(&self, _: &DeliveryResult<'_>, _: Self::DeliveryOpaque) {}
}

/// What to do about `error` when it is a refusal of the client's credentials or
/// certificate checks, `None` for any other error.
fn refusal(error: &KafkaError) -> Option<&'static str> {
    match error.rdkafka_error_code()? {
        RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SaslAuthenticationFailed => Some(
            "check sasl_username, sasl_mechanism and the password (sasl_password_file or sasl_password_env)",
        ),
        RDKafkaErrorCode::SSL => Some(
            "check ssl_ca_location (the CA that signed the brokers' certificates) and that the brokers' certificates name the addresses in brokers",
        ),
        _ => None,
    }
}

/// Connects to `brokers` with the client `properties` (those of
/// [`KafkaSecurity::properties`]) and asks for the cluster's metadata, so that a
/// broker refusing the credentials (or a certificate that does not verify) is an error
/// of `name` when it is made, instead of a client that retries a refused login for
/// ever. Any other failure (a broker that does not answer within `timeout`) is not
/// this check's business: the client retries it as usual. Does nothing without
/// properties (a PLAINTEXT connection has nothing to refuse).
///
/// # Errors
/// [`KafkaConnectorError::Security`] with the broker's reason and what to check.
pub fn check_connection(
    name: &str,
    brokers: &str,
    properties: &[(String, String)],
    timeout: Duration,
) -> Result<(), KafkaConnectorError> {
    if properties.is_empty() {
        return Ok(());
    }
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("client.id", format!("{name}-connection-check"));
    for (key, value) in properties {
        config.set(key, value);
    }
    let producer: BaseProducer<ProbeContext> = config
        .create_with_context(ProbeContext::default())
        .map_err(|error| KafkaConnectorError::Config {
            name: name.to_owned(),
            error: Box::new(error),
        })?;
    let answer = producer.client().fetch_metadata(None, timeout);
    if answer.is_err() {
        // the error events wait in the main queue until it is served
        producer.poll(Duration::from_millis(100));
    }
    let reported = producer.context().refused.lock().take();
    let refused = match (&answer, reported) {
        (_, Some(reported)) => Some(reported),
        (Err(error), None) => refusal(error).map(|what| (error.to_string(), what)),
        (Ok(_), None) => None,
    };
    let Some((reason, what)) = refused else {
        return Ok(());
    };
    Err(KafkaConnectorError::Security {
        name: name.to_owned(),
        message: format!("the broker at {brokers} refused the connection: {reason}; {what}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn security(text: &str) -> KafkaSecurity {
        toml::from_str(text).expect("settings")
    }

    fn refusal(text: &str) -> String {
        security(text)
            .properties("payments")
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn no_setting_is_a_plaintext_connection_with_no_property() {
        let settings = security(r#"brokers = "b:9092""#);
        assert!(settings.is_empty());
        assert_eq!(settings.properties("payments").expect("fine"), vec![]);
    }

    #[test]
    fn sasl_ssl_with_a_password_file_and_a_ca_maps_to_librdkafkas_properties() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("password"), "s3cret\n").expect("password");
        std::fs::write(dir.path().join("ca.pem"), "-----BEGIN CERTIFICATE-----\n").expect("ca");
        let mut settings = security(
            r#"security_protocol = "sasl_ssl"
               sasl_mechanism = "scram-sha-256"
               sasl_username = "ledger"
               sasl_password_file = "password"
               ssl_ca_location = "ca.pem""#,
        );
        settings.resolve_paths(|path| dir.path().join(path));
        let ca = dir.path().join("ca.pem").display().to_string();
        let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter()
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
                .collect()
        };
        assert_eq!(
            settings.properties("payments").expect("fine"),
            pairs(&[
                ("security.protocol", "SASL_SSL"),
                ("sasl.mechanism", "SCRAM-SHA-256"),
                ("sasl.username", "ledger"),
                ("sasl.password", "s3cret"),
                ("ssl.ca.location", &ca),
            ])
        );
    }

    #[test]
    fn a_missing_password_file_is_named_with_what_to_do() {
        let message = refusal(
            r#"security_protocol = "SASL_SSL"
               sasl_username = "ledger"
               sasl_password_file = "/nowhere/kafka-password""#,
        );
        assert!(
            message.contains("'payments'")
                && message.contains("/nowhere/kafka-password")
                && message.contains("create it"),
            "{message}"
        );
    }

    #[test]
    fn settings_that_cannot_work_are_refused_with_what_to_do() {
        let cases = [
            (r#"security_protocol = "TLS""#, "is not one of"),
            (
                r#"sasl_username = "ledger"
                   sasl_password_env = "X""#,
                "security_protocol = \"SASL_SSL\"",
            ),
            (
                r#"security_protocol = "SASL_SSL"
                   sasl_mechanism = "GSSAPI"
                   sasl_username = "u"
                   sasl_password_env = "X""#,
                "sasl_mechanism 'GSSAPI'",
            ),
            (r#"security_protocol = "SASL_SSL""#, "needs sasl_username"),
            (
                r#"security_protocol = "SASL_SSL"
                   sasl_username = "u""#,
                "without a password",
            ),
            (
                r#"security_protocol = "SASL_SSL"
                   sasl_username = "u"
                   sasl_password_env = "A"
                   sasl_password_file = "b""#,
                "not both",
            ),
            (
                r#"security_protocol = "SASL_SSL"
                   sasl_username = "u"
                   sasl_password_env = "MONGOOSE_TEST_SURELY_UNSET_VARIABLE""#,
                "MONGOOSE_TEST_SURELY_UNSET_VARIABLE",
            ),
            (
                r#"security_protocol = "SASL_PLAINTEXT"
                   sasl_username = "u"
                   sasl_password_env = "PATH"
                   ssl_ca_location = "ca.pem""#,
                "does not use TLS",
            ),
            (
                r#"security_protocol = "SSL"
                   ssl_ca_location = "/nowhere/ca.pem""#,
                "/nowhere/ca.pem",
            ),
        ];
        for (settings, expected) in cases {
            let message = refusal(settings);
            assert!(
                message.contains(expected) && message.contains("'payments'"),
                "{settings}: {message}"
            );
        }
    }
}
