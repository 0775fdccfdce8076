//! The `aggregate` family (issue 40): the `aggregate` processor kind over a file or a
//! glob feed, CSV or JSON lines with some that do not parse, a rule emitting alerts
//! into a file sink and a dead-letter file sink, under SIGKILLs at random moments, a
//! crash loop (a kill every 0.2-0.5 s) or a changed byte in its `state.snapshot` or an
//! outbox segment (refused naming the file, repaired as the book says, then settled
//! and checked).

use super::Builder;
use crate::scenario::{Damage, Options, Scenario, SinkKind, SourceKind, StateFile, Step};

impl Builder {
    /// The family's source and sink, and its lines' settings.
    pub(super) fn aggregate_shape(&mut self, options: &mut Options) -> (SourceKind, SinkKind) {
        let source = self.pick(&[SourceKind::File, SourceKind::File, SourceKind::Glob]);
        options.bad_percent = self.between(1, 10);
        options.json = self.chance(40);
        options.negative_percent = self.between(30, 60);
        options.hot_percent = 100;
        if self.chance(50) {
            options.compact_every = Some(u64::from(self.between(3, 200)));
        }
        (source, SinkKind::File)
    }

    /// The family's faults: kills, a crash loop, or a damaged state file.
    pub(super) fn aggregate_steps(&mut self, scenario: &mut Scenario) {
        let streams = scenario.options.streams;
        match self.between(0, 2) {
            0 => {
                for _ in 0..self.between(2, 6) {
                    self.steps.push(Step::Start);
                    self.append(streams, 100, 5_000);
                    self.steps.push(Step::Wait {
                        ms: u64::from(self.between(20, 800)),
                    });
                    if self.chance(70) {
                        self.steps.push(Step::Kill);
                    } else {
                        self.steps.push(Step::Pause {
                            ms: u64::from(self.between(100, 2_000)),
                        });
                    }
                }
            }
            1 => {
                self.steps.push(Step::CrashLoop {
                    kills: self.between(10, 40),
                    min_ms: 200,
                    max_ms: 500,
                    burst_min: 50,
                    burst_max: 2_000,
                    progress_every: None,
                });
            }
            _ => {
                // snapshots often enough that there is one to damage
                scenario.options.compact_every = Some(u64::from(self.between(3, 50)));
                let what = self.pick(&[StateFile::LedgerSnapshot, StateFile::LedgerOutbox]);
                self.steps.push(Step::Start);
                self.steps.push(Step::Settle);
                self.append(streams, 2_000, 20_000);
                self.steps.push(Step::Wait {
                    ms: u64::from(self.between(0, 1_500)),
                });
                self.steps.push(if self.chance(50) {
                    Step::Kill
                } else {
                    Step::Term
                });
                self.steps.push(Step::Damage {
                    what,
                    how: Damage::FlipByte {
                        at: self.between(0, 1000),
                    },
                });
                self.steps.push(Step::Start);
                self.append(streams, 100, 2_000);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::generate_in;
    use crate::scenario::{Scenario, SourceKind, StateFile, Step, Workload};

    #[test]
    fn the_aggregate_family_reaches_each_of_its_faults_and_shapes() {
        let scenarios: Vec<Scenario> = (0..60)
            .map(|seed| generate_in("aggregate", seed).expect("the family"))
            .collect();
        let any = |test: &dyn Fn(&Scenario) -> bool| scenarios.iter().any(test);
        assert!(scenarios
            .iter()
            .all(|scenario| scenario.workload == Workload::Aggregate
                && scenario.options.bad_percent > 0));
        assert!(any(&|scenario| scenario.source == SourceKind::Glob));
        assert!(any(&|scenario| scenario.source == SourceKind::File));
        assert!(any(&|scenario| scenario.options.json));
        assert!(any(&|scenario| !scenario.options.json));
        let has = |step: &dyn Fn(&Step) -> bool| any(&|scenario| scenario.steps.iter().any(step));
        assert!(has(&|step| matches!(
            step,
            Step::CrashLoop {
                min_ms: 200,
                max_ms: 500,
                ..
            }
        )));
        assert!(has(&|step| matches!(step, Step::Kill)));
        for what in [StateFile::LedgerSnapshot, StateFile::LedgerOutbox] {
            assert!(
                has(&|step| matches!(step, Step::Damage { what: damaged, .. } if *damaged == what)),
                "{what:?}"
            );
        }
        for scenario in &scenarios {
            assert_eq!(
                Scenario::from_toml(&scenario.to_toml()).as_ref(),
                Ok(scenario),
                "{}",
                scenario.to_toml()
            );
        }
    }
}
