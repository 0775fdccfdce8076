//! The `http-batch` family: HTTP sinks that send ndjson batches (`batch_max_lines`,
//! `batch_max_bytes`, gzip), over http or https, to a target that answers 413, 429 or
//! 5xx, closes mid-body or answers late, is killed past the retry budget or paused,
//! while the server is killed or paused.

use crate::scenario::{
    HttpBatch, HttpMode, Options, PeerAction, PeerKind, Scenario, SinkKind, SourceKind, Step,
};

use super::Builder;

/// The target's answers an `http-batch` schedule picks from (each for a part of the
/// requests, at a random moment).
const MODES: &[HttpMode] = &[
    // retried: the target says it did not take it
    HttpMode::Fail {
        percent: 25,
        status: 503,
    },
    HttpMode::Fail {
        percent: 20,
        status: 429,
    },
    // refused for good, every line of the batch (hold: kept until a restart;
    // count_loss: lost at once)
    HttpMode::Fail {
        percent: 10,
        status: 413,
    },
    // uncertain: the target may have acted
    HttpMode::Fail {
        percent: 25,
        status: 500,
    },
    HttpMode::Timeout { percent: 10 },
    HttpMode::Close { percent: 20 },
    HttpMode::CloseMidBody { percent: 20 },
    // taken, answered within the sink's response timeout (500 ms here) or past it
    HttpMode::Late {
        percent: 20,
        ms: 100,
    },
    HttpMode::Late {
        percent: 15,
        ms: 1_500,
    },
];

impl Builder {
    /// The source and sink of an `http-batch` scenario: batches of a few to 500 lines,
    /// sometimes so few bytes that each output goes alone, gzip and https half the
    /// time, the retry budget of the `http-faults` family.
    pub(crate) fn http_batch_shape(&mut self, options: &mut Options) -> (SourceKind, SinkKind) {
        let max_lines = match self.between(0, 3) {
            0 => 2,
            1 => self.between(3, 20),
            2 => self.between(20, 200),
            _ => 500,
        };
        let max_bytes = match self.between(0, 3) {
            // smaller than any output: each one goes alone, as ndjson of one line
            0 => Some(self.between(1, 16)),
            1 => Some(self.between(100, 4_000)),
            _ => None,
        };
        options.http_batch = Some(HttpBatch {
            max_lines,
            max_bytes,
            gzip: self.chance(50),
        });
        options.https = self.chance(50);
        options.response_timeout_millis = Some(500);
        options.initial_backoff_millis = Some(u64::from(self.between(1, 50)));
        options.max_backoff_millis = Some(u64::from(self.between(50, 400)));
        options.max_retries = Some(self.between(2, 10));
        if self.chance(40) {
            options.on_exhausted = Some("count_loss".to_owned());
        }
        if self.chance(30) {
            options.line_bytes = self.pick(&[200, 1_000]);
        }
        (
            self.pick(&[SourceKind::File, SourceKind::Glob]),
            SinkKind::Http,
        )
    }

    /// The steps of an `http-batch` scenario: rounds of a target's mode set before or
    /// amid the lines, then a fault of the target or the server, then the target
    /// healed and the server settled. A permanent refusal under `hold` is tried again
    /// only after a restart (the sink's table): such a round restarts the server
    /// before it settles.
    pub(crate) fn http_batch_steps(&mut self, scenario: &mut Scenario) {
        let streams = scenario.options.streams;
        let hold = scenario.options.on_exhausted.as_deref() != Some("count_loss");
        self.steps.push(Step::Start);
        for _ in 0..self.between(1, 3) {
            let mode = self.pick(MODES);
            if self.chance(50) {
                self.steps.push(Step::Http { mode });
                self.append(streams, 300, 3_000);
            } else {
                // amid the lines: some batches before it, some after
                self.append(streams, 300, 3_000);
                self.steps.push(Step::Wait {
                    ms: u64::from(self.between(0, 300)),
                });
                self.steps.push(Step::Http { mode });
            }
            self.steps.push(Step::Wait {
                ms: u64::from(self.between(500, 3_000)),
            });
            match self.between(0, 4) {
                0 => {
                    // an outage longer than the retry budget
                    self.steps.push(Step::Peer {
                        peer: PeerKind::HttpTarget,
                        action: PeerAction::Kill,
                    });
                    self.append(streams, 10, 500);
                    self.steps.push(Step::Wait {
                        ms: u64::from(self.between(2_000, 6_000)),
                    });
                    self.steps.push(Step::Peer {
                        peer: PeerKind::HttpTarget,
                        action: PeerAction::Restart,
                    });
                }
                1 => self.steps.push(Step::Peer {
                    peer: PeerKind::HttpTarget,
                    action: PeerAction::Pause {
                        ms: u64::from(self.between(200, 3_000)),
                    },
                }),
                2 => {
                    self.steps.push(Step::Kill);
                    if self.chance(50) {
                        self.steps.push(Step::Start);
                    }
                }
                3 => self.steps.push(Step::Pause {
                    ms: u64::from(self.between(100, 1_500)),
                }),
                _ => {}
            }
            self.steps.push(Step::Http { mode: HttpMode::Ok });
            if hold && matches!(mode, HttpMode::Fail { status: 413, .. }) {
                self.steps.push(Step::Term);
                self.steps.push(Step::Start);
            }
            self.steps.push(Step::Settle);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::generate::generate_in;
    use crate::scenario::{HttpMode, SinkKind, Step};

    #[test]
    fn the_family_covers_its_shapes_and_answers() {
        let scenarios: Vec<_> = (0..200)
            .map(|seed| generate_in("http-batch", seed).expect("the family"))
            .collect();
        let batch = |scenario: &crate::Scenario| scenario.options.http_batch.expect("batches");
        assert!(scenarios.iter().all(|s| s.sink == SinkKind::Http));
        assert!(
            scenarios.iter().any(|s| batch(s).gzip) && scenarios.iter().any(|s| !batch(s).gzip)
        );
        assert!(scenarios.iter().any(|s| s.options.https));
        assert!(scenarios.iter().any(|s| !s.options.https));
        assert!(
            scenarios
                .iter()
                .any(|s| batch(s).max_bytes.is_some_and(|bytes| bytes < 16)),
            "bytes so few that each output goes alone"
        );
        assert!(scenarios
            .iter()
            .any(|s| s.options.on_exhausted.as_deref() == Some("count_loss")));
        let modes: Vec<HttpMode> = scenarios
            .iter()
            .flat_map(|s| s.steps.iter())
            .filter_map(|step| match step {
                Step::Http { mode } => Some(*mode),
                _ => None,
            })
            .collect();
        for wanted in super::MODES {
            assert!(modes.contains(wanted), "{wanted:?}");
        }
    }

    #[test]
    fn a_permanent_refusal_under_hold_is_followed_by_a_restart() {
        for seed in 0..300 {
            let scenario = generate_in("http-batch", seed).expect("the family");
            if scenario.options.on_exhausted.is_some() {
                continue;
            }
            let steps = &scenario.steps;
            for (index, step) in steps.iter().enumerate() {
                if matches!(
                    step,
                    Step::Http {
                        mode: HttpMode::Fail { status: 413, .. }
                    }
                ) {
                    let settle = steps[index..]
                        .iter()
                        .position(|step| *step == Step::Settle)
                        .expect("a settle after it");
                    assert!(
                        steps[index..index + settle].contains(&Step::Start),
                        "seed {seed}: {}",
                        scenario.describe()
                    );
                }
            }
        }
    }
}
