//! The Kafka broker of a `kafka` scenario: a one-node cluster of the harness's own,
//! from the same jars as the tests (`mongoose_testkit::kafka`).

use super::World;

impl World {
    /// Starts the broker (when it is not running).
    ///
    /// # Errors
    /// It cannot be started.
    pub fn start_broker(&mut self) -> Result<(), String> {
        Err("the kafka family is not built yet".to_owned())
    }

    /// Produces the lines `text` to partition `stream` of the input topic.
    ///
    /// # Errors
    /// The broker did not take them.
    pub fn produce(&mut self, _stream: u32, _text: &str) -> Result<(), String> {
        Err("the kafka family is not built yet".to_owned())
    }

    /// Deletes the input topic and makes it again under its name.
    ///
    /// # Errors
    /// The broker did not do it.
    pub fn recreate_topic(&mut self) -> Result<(), String> {
        Err("the kafka family is not built yet".to_owned())
    }

    /// Does `op` to the topics.
    ///
    /// # Errors
    /// The broker did not do it.
    pub fn kafka_op(&mut self, _op: crate::scenario::KafkaOp) -> Result<(), String> {
        Err("the kafka family is not built yet".to_owned())
    }

    /// The records of the Kafka sink of consumer `consumer` (0: the workload's), as a
    /// `read_committed` reader sees them.
    ///
    /// # Errors
    /// The topic cannot be read.
    pub fn kafka_outputs(&self, _consumer: usize) -> Result<Vec<String>, String> {
        Err("the kafka family is not built yet".to_owned())
    }
}
