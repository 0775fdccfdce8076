//! The Kafka connector as a plugin: [`mongoose_kafka::KafkaSource`] and
//! [`mongoose_kafka::KafkaSink`] behind the plugin boundary (`mongoose-plugin`).
//!
//! * **Source kind `kafka`.** A member of a consumer group reading one topic; an item
//!   is a record's value (its key stays in the plugin: only bytes cross the boundary),
//!   at position `(lane = partition, offset = record offset + 1)`. Offsets are committed
//!   after processing, from the source's thread; PAUSE pauses the assignment and keeps
//!   polling; a revoked partition commits what was processed before it goes. Settings:
//!   `brokers`, `group`, `topic` (required), `epoch_file` (the owner's epoch file, kept
//!   with the state of the processors that consume the feed: with it a member restarted
//!   after `kill -9` recognises its own saved positions), `batch` (records per cycle,
//!   default 500), `session_timeout_ms` (default 10000), `max_poll_interval_ms` (default
//!   300000), `start_from` (`earliest`, the default, or `latest`: for the group's first
//!   start only; a partition added to the topic later is read from its start),
//!   `metadata_refresh_ms` (how soon added partitions and a re-created topic are seen,
//!   default 5000).
//! * **Sink kind `kafka`.** An idempotent producer (`acks=all`); each output is one
//!   record keyed by its output key. Settings: `brokers`, `topic` (required),
//!   `delivery_timeout_ms` (default 30000), `transactional_id` (each batch one
//!   transaction; keep it the same across restarts), `positions_topic` (with a
//!   transactional id: what each transaction committed per input lane, written in it and
//!   read back at start, so a restarted server's repeated outputs are not written twice:
//!   exactly once from a file feed), `metadata_refresh_ms` (how often the producer asks
//!   for metadata unprompted; librdkafka's 5 minutes by default).
//! * **Security (both kinds).** `security_protocol` (`PLAINTEXT`, `SSL`,
//!   `SASL_PLAINTEXT`, `SASL_SSL`), `sasl_mechanism` (`PLAIN`, `SCRAM-SHA-256`,
//!   `SCRAM-SHA-512`), `sasl_username`, the password from `sasl_password_file` (relative
//!   to the config file's folder) or `sasl_password_env`, and `ssl_ca_location` (the
//!   CA's PEM file): [`mongoose_kafka::KafkaSecurity`]. A ledger keeping its state in
//!   the changelog connects with its Kafka feed's security settings.
//!
//! ```toml
//! plugin_dir = "target/plugins"
//!
//! [[feeds]]
//! name = "payments"
//! source = "kafka"
//! settings = { brokers = "127.0.0.1:19092", group = "ledgers", topic = "payments", epoch_file = "/var/lib/mongoose/payments.epochs" }
//! ```

use std::sync::Arc;
use std::time::Duration;

use mongoose_core::{PositionValue, SourceOutput};
use mongoose_kafka::{
    KafkaRecord, KafkaSecurity, KafkaSink, KafkaSinkConfig, KafkaSource, KafkaSourceConfig,
};
use mongoose_plugin::settings::CreateContext;
use mongoose_plugin::PluginOutput;

/// How long the connection check of a secured client waits for the brokers' answer.
const CONNECTION_CHECK: Duration = Duration::from_secs(10);

/// The librdkafka properties of the security settings in `create`'s table (the same
/// table as the kind's other keys), for the client of `name` at `brokers`; with a
/// secured connection, checked against the brokers (a refused password fails here,
/// [`mongoose_kafka::check_connection`]).
fn security(
    create: &CreateContext<'_>,
    name: &str,
    brokers: &str,
) -> Result<Vec<(String, String)>, String> {
    let mut security: KafkaSecurity = create.settings()?;
    security.resolve_paths(|path| create.path(path));
    let properties = security
        .properties(name)
        .map_err(|error| error.to_string())?;
    mongoose_kafka::check_connection(name, brokers, &properties, CONNECTION_CHECK)
        .map_err(|error| error.to_string())?;
    Ok(properties)
}

/// Builds the source of a `kafka` feed from its settings.
pub fn source(create: &CreateContext<'_>, output: PluginOutput) -> Result<KafkaSource, String> {
    let settings = create.flat()?;
    let keys = [
        "brokers",
        "group",
        "topic",
        "epoch_file",
        "batch",
        "session_timeout_ms",
        "max_poll_interval_ms",
        "start_from",
        "metadata_refresh_ms",
    ];
    settings.only(&[&keys[..], KafkaSecurity::KEYS].concat())?;
    let mut config = KafkaSourceConfig::new(
        output.feed(),
        settings.required("brokers")?,
        settings.required("group")?,
        settings.required("topic")?,
    );
    config.epoch_file = settings.optional_path("epoch_file");
    if let Some(batch) = settings.u64("batch")? {
        config.batch = usize::try_from(batch.max(1)).unwrap_or(usize::MAX);
    }
    if let Some(millis) = settings.u64("session_timeout_ms")? {
        config.session_timeout = Duration::from_millis(millis);
    }
    if let Some(millis) = settings.u64("max_poll_interval_ms")? {
        config.max_poll_interval = Duration::from_millis(millis);
    }
    if let Some(millis) = settings.u64("metadata_refresh_ms")? {
        config.metadata_refresh = Duration::from_millis(millis.max(100));
    }
    if let Some(start) = settings.text("start_from") {
        if start != "earliest" && start != "latest" {
            return Err(format!(
                "settings: 'start_from' is earliest or latest, found '{start}'"
            ));
        }
        config.start_from = start.to_owned();
    }
    config.properties = security(create, output.feed(), &config.brokers)?;
    let output: Arc<dyn SourceOutput<KafkaRecord, PositionValue>> = Arc::new(output);
    KafkaSource::new(config, output).map_err(|error| error.to_string())
}

/// Builds a `kafka` sink from its settings.
pub fn sink(create: &CreateContext<'_>) -> Result<KafkaSink, String> {
    let settings = create.flat()?;
    let keys = [
        "brokers",
        "topic",
        "delivery_timeout_ms",
        "transactional_id",
        "positions_topic",
        "metadata_refresh_ms",
        "name",
    ];
    settings.only(&[&keys[..], KafkaSecurity::KEYS].concat())?;
    let name = settings.text("name").unwrap_or("kafka-sink");
    let mut config = KafkaSinkConfig::new(
        name,
        settings.required("brokers")?,
        settings.required("topic")?,
    );
    if let Some(millis) = settings.u64("delivery_timeout_ms")? {
        config.delivery_timeout = Duration::from_millis(millis);
    }
    config.transactional_id = settings.text("transactional_id").map(str::to_owned);
    config.positions_topic = settings.text("positions_topic").map(str::to_owned);
    if let Some(millis) = settings.u64("metadata_refresh_ms")? {
        config.metadata_refresh = Some(Duration::from_millis(millis.max(100)));
    }
    config.properties = security(create, name, &config.brokers)?;
    KafkaSink::new(config).map_err(|error| error.to_string())
}

mongoose_plugin::export_plugin! {
    name: "kafka",
    version: env!("CARGO_PKG_VERSION"),
    sources: {
        "kafka" => source,
    },
    sinks: {
        "kafka" => sink,
    },
}
