//! The `kafka` family: a broker of the harness's own, a Kafka source or sink, and the
//! broker's edges (member kills and pauses past the session, the broker killed, records
//! deleted by retention or `DeleteRecords`, a re-created topic, added partitions, file
//! -> Kafka exactly once after a lost pointer).
//!
//! Two shapes: a Kafka input topic (1-3 partitions, one stream each) read by the ledger
//! (its state in `state/`, or in a changelog topic) or by `forward` into a file sink;
//! and a file forwarded (or the ledger's alerts written) into a Kafka topic, plainly
//! (at least once) or in transactions with a positions topic (exactly once). Each
//! schedule does one or two of its shape's faults, with random sizes and moments.

use crate::scenario::{
    KafkaOp, KafkaOptions, Options, PeerAction, PeerKind, Scenario, SinkKind, SourceKind,
    StateFile, Step, Workload,
};
use crate::world::kafka::SESSION_TIMEOUT_MS;

use super::Builder;

impl Builder {
    /// The source and sink of a `kafka` scenario.
    pub(crate) fn kafka_shape(
        &mut self,
        workload: Workload,
        options: &mut Options,
    ) -> (SourceKind, SinkKind) {
        let mut kafka = KafkaOptions::default();
        if self.chance(65) {
            kafka.partitions = self.between(1, 3);
            kafka.changelog = workload == Workload::Ledger && self.chance(50);
            options.streams = kafka.partitions;
            options.kafka = Some(kafka);
            (SourceKind::Kafka, SinkKind::File)
        } else {
            kafka.exactly_once = self.chance(70);
            options.kafka = Some(kafka);
            (SourceKind::File, SinkKind::Kafka)
        }
    }

    /// The steps of a `kafka` scenario.
    pub(crate) fn kafka_steps(&mut self, scenario: &mut Scenario) {
        if scenario.source == SourceKind::Kafka {
            self.kafka_source_steps(scenario);
        } else {
            self.kafka_sink_steps(scenario);
        }
    }

    fn wait(&mut self, low: u32, high: u32) {
        let ms = u64::from(self.between(low, high));
        self.steps.push(Step::Wait { ms });
    }

    fn broker(&mut self, action: PeerAction) {
        self.steps.push(Step::Peer {
            peer: PeerKind::Broker,
            action,
        });
    }

    /// SIGKILL or SIGTERM of the server.
    fn stop(&mut self) {
        self.steps.push(if self.chance(50) {
            Step::Kill
        } else {
            Step::Term
        });
    }

    /// A server stopped longer than its session: out of the group.
    fn past_the_session(&self) -> u64 {
        SESSION_TIMEOUT_MS + u64::from(self.between(1_500, 4_000))
    }

    /// Faults of a Kafka input topic read by the ledger or `forward`.
    fn kafka_source_steps(&mut self, scenario: &mut Scenario) {
        let mut streams = scenario.options.streams;
        self.steps.push(Step::Start);
        if self.chance(60) {
            self.steps.push(Step::Settle);
        }
        self.kafka_background(streams);
        for _ in 0..self.between(1, 2) {
            match self.between(0, 9) {
                // the member SIGKILLed while it reads
                0 => {
                    self.append(streams, 500, 8_000);
                    self.wait(20, 1_500);
                    self.steps.push(Step::Kill);
                    self.append(streams, 10, 2_000);
                    self.steps.push(Step::Start);
                }
                // the member SIGSTOPped past its session: the group goes on without it
                1 => {
                    self.append(streams, 500, 8_000);
                    self.wait(0, 500);
                    let ms = self.past_the_session();
                    self.steps.push(Step::Pause { ms });
                    self.append(streams, 10, 2_000);
                }
                // the broker SIGKILLed, lines written while it is down, then restarted
                2 => {
                    self.append(streams, 200, 5_000);
                    self.wait(0, 1_000);
                    self.broker(PeerAction::Kill);
                    self.append(streams, 10, 2_000);
                    self.wait(500, 4_000);
                    self.broker(PeerAction::Restart);
                }
                // the broker paused (a long GC, a frozen VM)
                3 => {
                    self.append(streams, 200, 8_000);
                    self.wait(0, 800);
                    let ms = u64::from(self.between(2_000, 13_000));
                    self.broker(PeerAction::Pause { ms });
                }
                // records deleted past the committed offset while the member is stopped:
                // by DeleteRecords, or by retention
                4 | 5 => {
                    self.steps.push(Step::Settle);
                    self.stop();
                    self.append(streams, 1_000, 6_000);
                    let op = if self.chance(50) {
                        KafkaOp::DeleteRecords {
                            stream: self.stream(streams),
                        }
                    } else {
                        KafkaOp::Retention
                    };
                    self.steps.push(Step::Kafka { op });
                    self.append(streams, 10, 1_000);
                    self.steps.push(Step::Start);
                }
                // the input topic deleted and made again while the member is stopped
                6 => {
                    if self.chance(70) {
                        self.steps.push(Step::Settle);
                    }
                    self.stop();
                    self.steps.push(Step::Kafka {
                        op: KafkaOp::RecreateTopic,
                    });
                    self.append(streams, 100, 4_000);
                    self.steps.push(Step::Start);
                }
                // ... or while it reads
                7 => {
                    if self.chance(70) {
                        self.steps.push(Step::Settle);
                    }
                    self.steps.push(Step::Kafka {
                        op: KafkaOp::RecreateTopic,
                    });
                    self.append(streams, 100, 4_000);
                }
                // partitions added mid-run, lines written to them
                _ => {
                    let to = streams + self.between(1, 2);
                    self.steps.push(Step::Kafka {
                        op: KafkaOp::AddPartitions { to },
                    });
                    for stream in streams..to {
                        self.steps.push(Step::Append {
                            lines: self.between(100, 3_000),
                            stream,
                            bytes: None,
                        });
                    }
                    streams = to;
                }
            }
        }
        self.kafka_ending(streams);
    }

    /// The end of a schedule: settled on what was written, or stopped with lines
    /// waiting for the final run (which must read them before it says settled).
    fn kafka_ending(&mut self, streams: u32) {
        self.append(streams, 10, 1_000);
        self.steps.push(Step::Settle);
        if self.chance(30) {
            self.stop();
            self.append(streams, 10, 2_000);
        }
    }

    /// Now and then a kill or a pause of the server while it reads.
    fn kafka_background(&mut self, streams: u32) {
        match self.between(0, 5) {
            0 => {
                self.append(streams, 100, 3_000);
                self.wait(50, 800);
                self.steps.push(Step::Kill);
                self.steps.push(Step::Start);
            }
            1 => {
                self.append(streams, 100, 3_000);
                self.steps.push(Step::Pause {
                    ms: u64::from(self.between(50, 1_500)),
                });
            }
            _ => {}
        }
    }

    /// Faults of a file forwarded (or the ledger's alerts written) into a Kafka topic.
    fn kafka_sink_steps(&mut self, scenario: &mut Scenario) {
        let streams = scenario.options.streams;
        let exactly_once = scenario
            .options
            .kafka
            .is_some_and(|kafka| kafka.exactly_once);
        self.steps.push(Step::Start);
        self.kafka_background(streams);
        for _ in 0..self.between(1, 2) {
            let fault = if exactly_once && self.chance(30) {
                4
            } else {
                self.between(0, 4)
            };
            match fault {
                // the server SIGKILLed mid-transaction
                0 => {
                    self.append(streams, 1_000, 20_000);
                    self.wait(20, 1_500);
                    self.steps.push(Step::Kill);
                    self.steps.push(Step::Start);
                }
                // the server SIGSTOPped
                1 => {
                    self.append(streams, 1_000, 20_000);
                    self.wait(0, 500);
                    let ms = self.past_the_session();
                    self.steps.push(Step::Pause { ms });
                }
                // the broker SIGKILLed and restarted while outputs flow
                2 => {
                    self.append(streams, 1_000, 20_000);
                    self.wait(50, 1_000);
                    self.broker(PeerAction::Kill);
                    self.wait(500, 5_000);
                    self.broker(PeerAction::Restart);
                }
                // the broker paused while transactions run
                3 => {
                    self.steps.push(Step::Settle);
                    self.append(streams, 20_000, 60_000);
                    self.wait(50, 400);
                    let ms = u64::from(self.between(10_000, 13_000));
                    self.broker(PeerAction::Pause { ms });
                    self.append(streams, 10, 2_000);
                    self.steps.push(Step::Settle);
                }
                // the file feed's pointer lost: the sink holds what was written
                _ => {
                    if self.chance(70) {
                        self.steps.push(Step::Settle);
                    }
                    self.append(streams, 100, 5_000);
                    self.wait(0, 800);
                    self.stop();
                    self.steps.push(Step::Delete {
                        what: StateFile::Pointer,
                    });
                    self.steps.push(Step::Start);
                }
            }
        }
        self.kafka_ending(streams);
    }
}

#[cfg(test)]
mod tests {
    use crate::generate_in;
    use crate::scenario::{KafkaOp, PeerAction, PeerKind, SinkKind, SourceKind, StateFile, Step};

    /// Every edge the family is for comes up within a few hundred seeds, in the shape
    /// it belongs to.
    #[test]
    fn the_kafka_family_reaches_each_of_its_faults() {
        let scenarios: Vec<_> = (0..300)
            .map(|seed| generate_in("kafka", seed).expect("the kafka family"))
            .collect();
        let any = |wanted: &dyn Fn(&crate::Scenario, &Step) -> bool| {
            scenarios
                .iter()
                .any(|scenario| scenario.steps.iter().any(|step| wanted(scenario, step)))
        };
        let source = |scenario: &crate::Scenario| scenario.source == SourceKind::Kafka;
        let exactly_once = |scenario: &crate::Scenario| {
            scenario.sink == SinkKind::Kafka
                && scenario
                    .options
                    .kafka
                    .is_some_and(|kafka| kafka.exactly_once)
        };
        let op = |wanted: fn(&KafkaOp) -> bool| {
            move |scenario: &crate::Scenario, step: &Step| {
                source(scenario) && matches!(step, Step::Kafka { op } if wanted(op))
            }
        };
        assert!(any(&op(|op| matches!(op, KafkaOp::DeleteRecords { .. }))));
        assert!(any(&op(|op| matches!(op, KafkaOp::Retention))));
        assert!(any(&op(|op| matches!(op, KafkaOp::RecreateTopic))));
        assert!(any(&op(|op| matches!(op, KafkaOp::AddPartitions { .. }))));
        assert!(any(&|scenario, step| {
            exactly_once(scenario)
                && matches!(step, Step::Peer { peer: PeerKind::Broker, action: PeerAction::Pause { ms } } if *ms >= 10_000)
        }));
        assert!(any(&|_, step| matches!(
            step,
            Step::Peer {
                peer: PeerKind::Broker,
                action: PeerAction::Kill
            }
        )));
        assert!(any(&|scenario, step| {
            exactly_once(scenario)
                && matches!(
                    step,
                    Step::Delete {
                        what: StateFile::Pointer
                    }
                )
        }));
        assert!(any(&|scenario, step| {
            source(scenario)
                && matches!(step, Step::Pause { ms } if *ms > crate::world::kafka::SESSION_TIMEOUT_MS)
        }));
        assert!(scenarios.iter().any(|scenario| source(scenario)
            && scenario.options.kafka.is_some_and(|kafka| kafka.changelog)));
        assert!(scenarios
            .iter()
            .any(|scenario| scenario.sink == SinkKind::Kafka && !exactly_once(scenario)));
    }
}
