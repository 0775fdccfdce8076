//! The connectors (book: connectors/kafka.md, connectors/scaling-out.md,
//! connectors/journal.md, connectors/archive.md and connectors/writing-a-connector.md):
//! the Kafka source, sink and changelog on the test broker and on clusters of the
//! tests' own, the journal and archive connectors, and plugins and their files.

mod archive;
mod journal;
#[cfg(feature = "kafka")]
mod kafka;
#[cfg(feature = "kafka")]
mod kafka_broker;
#[cfg(feature = "kafka")]
mod kafka_edges;
#[cfg(feature = "kafka")]
mod kafka_security;
#[cfg(feature = "kafka")]
mod kafka_topics;
mod plugin_files;
mod plugins;
