//! The sink runner: retries within the budget, expiry, the operator's policy, and the
//! commit gates it tells.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::sink::{
    CommitGate, ExhaustedPolicy, Output, OutputKey, RetryBudget, Sink, SinkOutcome,
};
use mongoose_core::Epoch;
use mongoose_sink::{RunnerConfig, SinkRunner, SinkStatus};
use parking_lot::Mutex;

mod support;
use support::gate::Gate;

/// Answers every attempt with the same outcome, counting attempts per key.
struct Always {
    outcome: SinkOutcome,
    attempts: Arc<Mutex<Vec<(String, u32)>>>,
}

impl Sink for Always {
    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
        for output in outputs {
            self.attempts
                .lock()
                .push((output.key.to_string(), output.attempt));
            outcomes.push(self.outcome.clone());
        }
    }
}

fn key(position: u64) -> OutputKey {
    OutputKey::new("lines", Epoch(1), 0, position, 0, 1)
}

fn wait_for(runner: &SinkRunner, done: impl Fn(&SinkStatus) -> bool) -> SinkStatus {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = runner.handle().status();
        if done(&status) || Instant::now() > deadline {
            return status;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn run(
    outcome: SinkOutcome,
    budget: RetryBudget,
    policy: ExhaustedPolicy,
) -> (SinkStatus, Arc<Gate>, Vec<(String, u32)>) {
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let mut config = RunnerConfig::new("test", "memory");
    config.budget = budget;
    config.policy = policy;
    let runner = SinkRunner::start(
        Box::new(Always {
            outcome,
            attempts: Arc::clone(&attempts),
        }),
        config,
    )
    .expect("started");
    let gate = Arc::new(Gate::default());
    let as_gate: Arc<dyn CommitGate> = gate.clone();
    let gate_id = runner.handle().register_gate(Arc::clone(&as_gate));
    as_gate.pending(1);
    runner
        .handle()
        .send(Output::new(key(10), b"one".to_vec()), Some((gate_id, 1)))
        .expect("taken");
    let status = wait_for(&runner, |status| {
        status.held_count + status.lost + status.published > 0
    });
    let attempts = attempts.lock().clone();
    drop(runner);
    (status, gate, attempts)
}

fn quick(max_retries: u32, expire_after: Duration) -> RetryBudget {
    RetryBudget {
        max_retries,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(2),
        expire_after,
    }
}

#[test]
fn retries_stop_at_the_budget_and_expiry_and_the_policy_decides() {
    let uncertain = SinkOutcome::Uncertain {
        evidence: "no response".into(),
    };

    // the budget: three retries after the first attempt, all with the same key; then
    // the hold policy keeps it, uncertain, and its gate is never told it is over (it
    // goes on trying it at the capped backoff: see
    // a_held_output_is_tried_at_the_capped_backoff_until_it_is_published)
    let (status, gate, attempts) = run(
        uncertain.clone(),
        quick(3, Duration::from_secs(3600)),
        ExhaustedPolicy::Hold,
    );
    assert_eq!(
        attempts[..4],
        (0..4)
            .map(|attempt| ("lines/1/0/10/0/1".to_owned(), attempt))
            .collect::<Vec<_>>()
    );
    assert!(status.uncertain >= 4, "{status:?}");
    assert_eq!((status.expired, status.held_count, status.lost), (1, 1, 0));
    assert_eq!(status.held_outputs[0].why, "spent its retries");
    assert!(
        gate.completed.lock().is_empty(),
        "a held output is never over"
    );
    let held = gate.held.lock().clone();
    assert_eq!(held.len(), 1);
    assert!(held[0].1.contains("spent its retries"), "{}", held[0].1);
    assert!(held[0].1.contains("uncertain"), "{}", held[0].1);

    // the count_loss policy gives it up: counted lost, its gate told
    let (status, gate, _) = run(
        uncertain.clone(),
        quick(1, Duration::from_secs(3600)),
        ExhaustedPolicy::CountLoss,
    );
    assert_eq!((status.expired, status.lost, status.held_count), (1, 1, 0));
    assert_eq!(*gate.completed.lock(), [1]);

    // expiry ends the retries before the budget does
    let (status, _, attempts) = run(
        uncertain,
        quick(1_000, Duration::ZERO),
        ExhaustedPolicy::CountLoss,
    );
    assert_eq!(attempts.len(), 1, "expired at its first failure");
    assert_eq!((status.expired, status.lost), (1, 1));

    // a permanent error ends them at once, without counting an expiry
    let (status, gate, attempts) = run(
        SinkOutcome::NotPublished {
            evidence: "HTTP 400".into(),
            retryable: false,
        },
        quick(5, Duration::from_secs(3600)),
        ExhaustedPolicy::Hold,
    );
    assert_eq!(
        attempts.len(),
        1,
        "a permanent refusal is not tried again by itself"
    );
    assert_eq!(
        (status.not_published, status.expired, status.held_count),
        (1, 0, 1)
    );
    assert!(gate.held.lock()[0].1.contains("failed permanently"));
    assert_eq!(status.held_outputs[0].next_try_in_millis, None);
}

/// Fails the first `failures` attempts of each output with a retryable refusal.
struct Flaky {
    failures: u32,
    seen: Arc<AtomicU32>,
}

impl Sink for Flaky {
    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
        for output in outputs {
            self.seen.fetch_add(1, Ordering::Relaxed);
            outcomes.push(if output.attempt < self.failures {
                SinkOutcome::NotPublished {
                    evidence: "503".into(),
                    retryable: true,
                }
            } else {
                SinkOutcome::Published {
                    evidence: "201".into(),
                }
            });
        }
    }
}

#[test]
fn a_retried_output_is_published_and_its_gate_told_once() {
    let seen = Arc::new(AtomicU32::new(0));
    let mut config = RunnerConfig::new("flaky", "memory");
    config.budget = quick(5, Duration::from_secs(3600));
    let runner = SinkRunner::start(
        Box::new(Flaky {
            failures: 2,
            seen: Arc::clone(&seen),
        }),
        config,
    )
    .expect("started");
    let gate = Arc::new(Gate::default());
    let as_gate: Arc<dyn CommitGate> = gate.clone();
    let gate_id = runner.handle().register_gate(Arc::clone(&as_gate));
    for tag in 1..=20u64 {
        // as a writer does: pending before the output leaves
        as_gate.pending(tag);
        runner
            .handle()
            .send(
                Output::new(key(tag), tag.to_string().into_bytes()),
                Some((gate_id, tag)),
            )
            .expect("taken");
    }
    let status = wait_for(&runner, |status| status.published == 20);
    assert_eq!(
        (status.published, status.not_published, status.retrying),
        (20, 40, 0)
    );
    // a retried output left the queue once (counting each attempt out wrapped the
    // count around and refused every later output as "full")
    assert_eq!(status.queued, 0, "{status:?}");
    // read before the next send: the runner may try that one at once
    assert_eq!(seen.load(Ordering::Relaxed), 60);
    runner
        .handle()
        .send(Output::new(key(99), b"after".to_vec()), None)
        .expect("taken after the retries");
    let mut completed = gate.completed.lock().clone();
    completed.sort_unstable();
    assert_eq!(completed, (1..=20).collect::<Vec<_>>());
}

#[test]
fn a_full_queue_refuses_without_blocking_and_a_stop_publishes_what_is_queued() {
    struct Slow;
    impl Sink for Slow {
        fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
            std::thread::sleep(Duration::from_millis(20));
            outcomes.extend(outputs.iter().map(|_| SinkOutcome::Published {
                evidence: "slow".into(),
            }));
        }
    }
    let mut config = RunnerConfig::new("slow", "memory");
    config.capacity = 4;
    config.batch = 1;
    let runner = SinkRunner::start(Box::new(Slow), config).expect("started");
    let handle = runner.handle();
    let mut refused = 0;
    let mut taken = 0;
    for position in 0..100 {
        match handle.send(Output::new(key(position), b"x".to_vec()), None) {
            Ok(()) => taken += 1,
            Err(error) => {
                assert!(error.to_string().contains("4 outputs queued"), "{error}");
                refused += 1;
            }
        }
    }
    assert!(
        refused > 0,
        "a queue of 4 refused some of 100 outputs sent at once"
    );
    let status = runner.stop(Instant::now() + Duration::from_secs(60));
    assert_eq!(
        status.published, taken,
        "the stop published what was queued"
    );
}

#[test]
fn an_output_retried_in_the_middle_of_a_batch_is_not_completed_by_the_outputs_after_it() {
    /// Holds its first publish until released, then refuses position 5 once.
    struct RefusesFive {
        release: Arc<std::sync::Barrier>,
        first: bool,
        refused: bool,
    }
    impl Sink for RefusesFive {
        fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
            if std::mem::take(&mut self.first) {
                self.release.wait();
            }
            for output in outputs {
                if output.key.position == 5 && !self.refused {
                    self.refused = true;
                    outcomes.push(SinkOutcome::NotPublished {
                        evidence: "503".into(),
                        retryable: true,
                    });
                } else {
                    outcomes.push(SinkOutcome::Published {
                        evidence: "201".into(),
                    });
                }
            }
        }
    }
    let release = Arc::new(std::sync::Barrier::new(2));
    let mut config = RunnerConfig::new("refuses-five", "memory");
    // the refused output waits for its retry far longer than the test runs
    config.budget = RetryBudget {
        max_retries: 3,
        initial_backoff: Duration::from_secs(3600),
        max_backoff: Duration::from_secs(3600),
        expire_after: Duration::from_secs(7200),
    };
    let runner = SinkRunner::start(
        Box::new(RefusesFive {
            release: Arc::clone(&release),
            first: true,
            refused: false,
        }),
        config,
    )
    .expect("started");
    // an opener the runner takes alone and holds in its first publish, so the ten
    // gated outputs sent meanwhile go out in one batch
    runner
        .handle()
        .send(Output::new(key(0), b"opener".to_vec()), None)
        .expect("taken");
    wait_for(&runner, |status| status.queued == 1);
    let gate = Arc::new(Gate::default());
    let as_gate: Arc<dyn CommitGate> = gate.clone();
    let gate_id = runner.handle().register_gate(Arc::clone(&as_gate));
    for tag in 1..=10u64 {
        as_gate.pending(tag);
        runner
            .handle()
            .send(
                Output::new(key(tag), tag.to_string().into_bytes()),
                Some((gate_id, tag)),
            )
            .expect("taken");
    }
    release.wait();
    let status = wait_for(&runner, |status| {
        status.published == 10 && status.retrying == 1
    });
    assert_eq!((status.published, status.retrying), (10, 1), "{status:?}");
    let mut completed = gate.completed.lock().clone();
    completed.sort_unstable();
    assert_eq!(
        completed,
        vec![1, 2, 3, 4, 6, 7, 8, 9, 10],
        "the output at 5 waits for its retry: its input must stay uncommitted"
    );
    runner.stop(Instant::now());
}

#[test]
fn retried_outputs_that_fall_due_out_of_order_are_each_completed() {
    // Output 1 fails twice (its second backoff is longer), output 2 once: 2 falls due
    // before 1. Output 3's publish is slow, so both are due when it returns and they
    // come back in the order they fell due: [2, 1]. Completing that run "through" its
    // last tag (1) left tag 2 pending for ever: its input was never committed.
    struct Scripted {
        attempts: Arc<Mutex<Vec<(u64, u32)>>>,
    }
    impl Sink for Scripted {
        fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
            for output in outputs {
                let (position, attempt) = (output.key.position, output.attempt);
                self.attempts.lock().push((position, attempt));
                if position == 3 {
                    std::thread::sleep(Duration::from_millis(300));
                }
                let fails = match position {
                    1 => attempt < 2,
                    2 => attempt < 1,
                    _ => false,
                };
                outcomes.push(if fails {
                    SinkOutcome::NotPublished {
                        evidence: "503".into(),
                        retryable: true,
                    }
                } else {
                    SinkOutcome::Published {
                        evidence: "201".into(),
                    }
                });
            }
        }
    }
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let mut config = RunnerConfig::new("scripted", "memory");
    config.budget = RetryBudget {
        max_retries: 10,
        initial_backoff: Duration::from_millis(40),
        max_backoff: Duration::from_millis(1000),
        expire_after: Duration::from_secs(3600),
    };
    let runner = SinkRunner::start(
        Box::new(Scripted {
            attempts: Arc::clone(&attempts),
        }),
        config,
    )
    .expect("started");
    let gate = Arc::new(Gate::default());
    let as_gate: Arc<dyn CommitGate> = gate.clone();
    let gate_id = runner.handle().register_gate(Arc::clone(&as_gate));
    let send = |tag: u64| {
        as_gate.pending(tag);
        runner
            .handle()
            .send(
                Output::new(key(tag), tag.to_string().into_bytes()),
                Some((gate_id, tag)),
            )
            .expect("taken");
    };
    let tried = |position: u64, attempt: u32| attempts.lock().contains(&(position, attempt));
    let wait = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(Instant::now() < deadline, "never {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    send(1);
    wait("retried output 1", &|| tried(1, 1));
    // 1 now waits 80 ms (its second backoff); 2 fails once and waits 40 ms
    send(2);
    wait("tried output 2", &|| tried(2, 0));
    // 3's slow publish outlasts both backoffs
    send(3);
    let status = wait_for(&runner, |status| status.published == 3);
    assert_eq!(status.published, 3, "{status:?}");
    wait("every output completed at its gate", &|| {
        gate.completed.lock().len() == 3
    });
    let mut completed = gate.completed.lock().clone();
    completed.sort_unstable();
    assert_eq!(completed, vec![1, 2, 3]);
    runner.stop(Instant::now());
}

/// Fails every attempt while `down`, answering only the first output of a batch (as
/// the HTTP sink does when its target does not answer: the rest was not sent), and
/// publishes everything once up. Each attempt is noted `(position, attempt)`.
struct Outage {
    down: Arc<std::sync::atomic::AtomicBool>,
    permanent: bool,
    attempts: Arc<Mutex<Vec<(u64, u32)>>>,
}

impl Sink for Outage {
    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
        for output in outputs {
            self.attempts
                .lock()
                .push((output.key.position, output.attempt));
            if self.down.load(Ordering::Acquire) {
                outcomes.push(SinkOutcome::NotPublished {
                    evidence: "could not connect".into(),
                    retryable: !self.permanent,
                });
                if !self.permanent {
                    return;
                }
                continue;
            }
            outcomes.push(SinkOutcome::Published {
                evidence: "201".into(),
            });
        }
    }
}

/// A runner over an [`Outage`] sink, the switch that brings its target up, the
/// attempts it saw and the outputs' gate.
type OutageRun = (
    SinkRunner,
    Arc<std::sync::atomic::AtomicBool>,
    Arc<Mutex<Vec<(u64, u32)>>>,
    Arc<Gate>,
);

/// A runner over an [`Outage`] sink (down at first) with `budget` and `policy`, and
/// `count` gated outputs sent (positions 0..count, tags 1..=count).
fn outage(count: u64, budget: RetryBudget, policy: ExhaustedPolicy, permanent: bool) -> OutageRun {
    let down = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let mut config = RunnerConfig::new("outage", "memory");
    config.budget = budget;
    config.policy = policy;
    let runner = SinkRunner::start(
        Box::new(Outage {
            down: Arc::clone(&down),
            permanent,
            attempts: Arc::clone(&attempts),
        }),
        config,
    )
    .expect("started");
    let gate = Arc::new(Gate::default());
    let as_gate: Arc<dyn CommitGate> = gate.clone();
    let gate_id = runner.handle().register_gate(Arc::clone(&as_gate));
    for position in 0..count {
        as_gate.pending(position + 1);
        runner
            .handle()
            .send(
                Output::new(key(position), position.to_string().into_bytes()),
                Some((gate_id, position + 1)),
            )
            .expect("taken");
    }
    (runner, down, attempts, gate)
}

#[test]
fn outputs_a_batch_did_not_send_are_not_charged_and_wait_behind_the_probe() {
    // issue 24, item 5: the outputs behind a failure are retried, not charged
    let (runner, down, attempts, gate) = outage(
        10,
        quick(3, Duration::from_secs(3600)),
        ExhaustedPolicy::Hold,
        false,
    );
    let held = wait_for(&runner, |status| status.held_count == 1);
    assert_eq!(held.held_count, 1, "{held:?}");
    // it goes on probing: a few more attempts, all of the held output
    let seen = attempts.lock().len();
    let deadline = Instant::now() + Duration::from_secs(60);
    while attempts.lock().len() < seen + 3 {
        assert!(Instant::now() < deadline, "the held output is tried again");
        std::thread::sleep(Duration::from_millis(1));
    }
    let status = runner.handle().status();
    let tried = attempts.lock().clone();
    assert!(
        tried.iter().all(|(position, _)| *position == 0),
        "only the probe was sent while the target was down: {tried:?}"
    );
    assert!(
        status.not_published >= tried.len() as u64 - 1
            && status.not_published <= tried.len() as u64,
        "one failed attempt counted per attempt made: {status:?}, {} attempts",
        tried.len()
    );
    assert_eq!(status.queued, 9, "the nine unsent outputs are still queued");
    assert_eq!(status.held_outputs[0].key, "lines/1/0/0/0/1");
    assert!(status.held_outputs[0].attempts >= 4);
    assert!(status.held_outputs[0].next_try_in_millis.is_some());

    down.store(false, Ordering::Release);
    let status = wait_for(&runner, |status| status.published == 10);
    assert_eq!((status.published, status.held_count), (10, 0), "{status:?}");
    let tried = attempts.lock().clone();
    for position in 1..10 {
        assert_eq!(
            tried
                .iter()
                .filter(|(at, _)| *at == position)
                .collect::<Vec<_>>(),
            [&(position, 0)],
            "output {position} was sent once, as a first attempt"
        );
    }
    let mut completed = gate.completed.lock().clone();
    completed.sort_unstable();
    assert_eq!(completed, (1..=10).collect::<Vec<_>>());
    assert_eq!(gate.held.lock().len(), 1, "held once, reported once");
    runner.stop(Instant::now());
}

#[test]
fn a_held_output_is_tried_at_the_capped_backoff_until_it_is_published() {
    // issue 24, item 6: `hold` keeps trying with a capped backoff, for ever; the
    // budget decides when the output is reported held, not when trying stops
    let (runner, down, attempts, gate) = outage(
        1,
        RetryBudget {
            max_retries: 2,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(20),
            expire_after: Duration::from_secs(3600),
        },
        ExhaustedPolicy::Hold,
        false,
    );
    wait_for(&runner, |status| status.held_count == 1);
    let deadline = Instant::now() + Duration::from_secs(60);
    while attempts.lock().len() < 10 {
        assert!(Instant::now() < deadline, "the held output is tried again");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(gate.completed.lock().is_empty(), "held: not over");
    down.store(false, Ordering::Release);
    let status = wait_for(&runner, |status| status.published == 1);
    assert_eq!(
        (status.held_count, status.queued, status.retrying),
        (0, 0, 0)
    );
    assert!(status.held_outputs.is_empty() && status.held.is_empty());
    assert_eq!(*gate.completed.lock(), [1], "over once published");
    assert_eq!(runner.handle().first_held(), None);
    runner.stop(Instant::now());
}

#[test]
fn a_retry_request_tries_held_outputs_refused_for_good_now() {
    // issue 24, item 6: `POST /sinks/{name}/retry` tries now
    let (runner, down, attempts, gate) = outage(
        3,
        quick(5, Duration::from_secs(3600)),
        ExhaustedPolicy::Hold,
        true,
    );
    let status = wait_for(&runner, |status| status.held_count == 3);
    assert_eq!(status.held_count, 3);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        attempts.lock().len(),
        3,
        "refused for good: not tried again by itself"
    );
    down.store(false, Ordering::Release);
    let requested = runner.handle().retry_now();
    assert_eq!((requested.held, requested.retrying), (3, 0));
    let status = wait_for(&runner, |status| status.published == 3);
    assert_eq!((status.published, status.held_count), (3, 0), "{status:?}");
    let mut completed = gate.completed.lock().clone();
    completed.sort_unstable();
    assert_eq!(completed, [1, 2, 3]);
    runner.stop(Instant::now());
}

#[test]
fn a_lost_output_is_recorded_before_its_input_may_be_committed() {
    // issue 24, item 6: losses a sink counts are reported again at the next start, so
    // the record must be durable before the input's commit
    struct Recorder {
        gate: Arc<Gate>,
        recorded: Mutex<Vec<(String, String, bool)>>,
    }
    impl mongoose_sink::LossRecorder for Recorder {
        fn record(&self, sink: &str, lost: &[mongoose_sink::LostOutput]) {
            for output in lost {
                let completed = self.gate.completed.lock().contains(&1);
                self.recorded
                    .lock()
                    .push((sink.to_owned(), output.key.to_string(), completed));
            }
        }
    }
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let mut config = RunnerConfig::new("lossy", "memory");
    config.budget = quick(1, Duration::from_secs(3600));
    config.policy = ExhaustedPolicy::CountLoss;
    let gate = Arc::new(Gate::default());
    let recorder = Arc::new(Recorder {
        gate: Arc::clone(&gate),
        recorded: Mutex::new(Vec::new()),
    });
    let runner = SinkRunner::start_with(
        Box::new(Always {
            outcome: SinkOutcome::Uncertain {
                evidence: "timed out".into(),
            },
            attempts: Arc::clone(&attempts),
        }),
        config,
        Some(recorder.clone()),
    )
    .expect("started");
    let as_gate: Arc<dyn CommitGate> = gate.clone();
    let gate_id = runner.handle().register_gate(Arc::clone(&as_gate));
    as_gate.pending(1);
    runner
        .handle()
        .send(Output::new(key(5), b"x".to_vec()), Some((gate_id, 1)))
        .expect("taken");
    let status = wait_for(&runner, |status| status.lost == 1);
    assert_eq!(status.lost, 1);
    let deadline = Instant::now() + Duration::from_secs(60);
    while gate.completed.lock().is_empty() {
        assert!(Instant::now() < deadline, "the lost output's gate is told");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        *recorder.recorded.lock(),
        [("lossy".to_owned(), "lines/1/0/5/0/1".to_owned(), false)],
        "recorded once, before its gate was told"
    );
    runner.stop(Instant::now());
}

#[test]
fn a_sink_that_answers_nothing_is_charged_for_its_first_output() {
    // a sink that stops before its first output would make the runner spin without
    // an attempt ever counted: the first output counts as an uncertain attempt
    struct Mute;
    impl Sink for Mute {
        fn publish(&mut self, _outputs: &[Output], _outcomes: &mut Vec<SinkOutcome>) {}
    }
    let mut config = RunnerConfig::new("mute", "memory");
    config.budget = quick(2, Duration::from_secs(3600));
    config.policy = ExhaustedPolicy::CountLoss;
    let runner = SinkRunner::start(Box::new(Mute), config).expect("started");
    for position in 0..2 {
        runner
            .handle()
            .send(Output::new(key(position), b"x".to_vec()), None)
            .expect("taken");
    }
    let status = wait_for(&runner, |status| status.lost == 2);
    assert_eq!((status.lost, status.uncertain), (2, 6), "{status:?}");
    runner.stop(Instant::now());
}

#[test]
fn a_target_that_does_not_answer_is_probed_by_one_output_even_in_batches_of_one() {
    // issue 24, item 5: outputs that trickle in one at a time are each a batch of one,
    // so a stop leaves nothing unsent to show it; the sink says its target does not
    // answer, and the runner sends nothing else until the failed output is retried
    struct Silent {
        down: Arc<std::sync::atomic::AtomicBool>,
        attempts: Arc<Mutex<Vec<u64>>>,
    }
    impl Sink for Silent {
        fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
            self.attempts.lock().push(outputs[0].key.position);
            outcomes.push(if self.down.load(Ordering::Acquire) {
                SinkOutcome::Uncertain {
                    evidence: "no response within 10 ms".into(),
                }
            } else {
                SinkOutcome::Published {
                    evidence: "201".into(),
                }
            });
        }
        fn target_not_answering(&self) -> bool {
            self.down.load(Ordering::Acquire)
        }
    }
    let down = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let mut config = RunnerConfig::new("silent", "memory");
    config.batch = 1;
    config.budget = RetryBudget {
        max_retries: 1_000,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(20),
        expire_after: Duration::from_secs(3600),
    };
    let runner = SinkRunner::start(
        Box::new(Silent {
            down: Arc::clone(&down),
            attempts: Arc::clone(&attempts),
        }),
        config,
    )
    .expect("started");
    for position in 0..5 {
        runner
            .handle()
            .send(Output::new(key(position), b"x".to_vec()), None)
            .expect("taken");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while attempts.lock().len() < 10 {
        assert!(Instant::now() < deadline, "the probe is tried again");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        attempts.lock().iter().all(|position| *position == 0),
        "only the probe is sent while the target does not answer: {:?}",
        attempts.lock()
    );
    down.store(false, Ordering::Release);
    let status = wait_for(&runner, |status| status.published == 5);
    assert_eq!(status.published, 5, "{status:?}");
    runner.stop(Instant::now());
}

/// Records the size of each publish call; publishes everything.
struct Calls(Arc<Mutex<Vec<usize>>>);

impl Sink for Calls {
    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
        self.0.lock().push(outputs.len());
        outcomes.extend(outputs.iter().map(|_| SinkOutcome::Published {
            evidence: "ok".into(),
        }));
    }
}

#[test]
fn a_linger_fills_a_batch_before_publishing_and_a_stop_does_not_wait_for_it() {
    // issue 28, item 5: the HTTP sink's batch_timeout_millis. Outputs that come a
    // while apart are published together once a batch is full; a stop publishes
    // what waits at once (the 60 s linger would outlast the test's deadline).
    let calls = Arc::new(Mutex::new(Vec::new()));
    let mut config = RunnerConfig::new("linger", "test");
    config.batch = 5;
    config.linger = Duration::from_secs(60);
    let runner = SinkRunner::start(Box::new(Calls(Arc::clone(&calls))), config).expect("start");
    let handle = runner.handle();
    for position in 0..3 {
        handle
            .send(Output::new(key(position), b"x".to_vec()), None)
            .expect("send");
    }
    // long enough for a runner without a linger to publish the first three alone
    std::thread::sleep(Duration::from_millis(300));
    for position in 3..7 {
        handle
            .send(Output::new(key(position), b"x".to_vec()), None)
            .expect("send");
    }
    let status = wait_for(&runner, |status| status.published >= 5);
    assert_eq!(
        status.published, 5,
        "a full batch is published, the rest lingers"
    );
    assert_eq!(*calls.lock(), [5]);
    let started = Instant::now();
    let status = runner.stop(Instant::now() + Duration::from_secs(50));
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "the stop waited for the linger"
    );
    assert_eq!(status.published, 7);
    assert_eq!(*calls.lock(), [5, 2]);
}

#[test]
fn a_retune_takes_effect_between_batches_and_the_replacement_sink_publishes_the_rest() {
    // issue 39, item 5: a reload's new batch size and sink apply live, from the next
    // batch on: each output is published once, by the old sink or the new one
    let before = Arc::new(Mutex::new(Vec::new()));
    let after = Arc::new(Mutex::new(Vec::new()));
    let mut config = RunnerConfig::new("retune", "test");
    config.batch = 2;
    config.linger = Duration::from_secs(60);
    let runner = SinkRunner::start(Box::new(Calls(Arc::clone(&before))), config).expect("start");
    let handle = runner.handle();
    for position in 0..4 {
        handle
            .send(Output::new(key(position), b"x".to_vec()), None)
            .expect("send");
    }
    wait_for(&runner, |status| status.published >= 4);
    handle.retune(mongoose_sink::Retune {
        budget: RetryBudget::default(),
        batch: 5,
        linger: Duration::from_secs(60),
        sink: Some(Box::new(Calls(Arc::clone(&after)))),
    });
    for position in 4..14 {
        handle
            .send(Output::new(key(position), b"x".to_vec()), None)
            .expect("send");
    }
    let status = wait_for(&runner, |status| status.published >= 14);
    assert_eq!(status.published, 14, "{status:?}");
    assert_eq!(*before.lock(), [2, 2], "the old sink, batches of 2");
    assert_eq!(*after.lock(), [5, 5], "the new sink, batches of 5");
    runner.stop(Instant::now());
}

// chaos reload seed 1796683247187 (a soak): a reload replacing an HTTP sink whose one
// output waited for its retry never finished (30 s watched): the stopping runner
// waited on its queue until the retry was due, past the stop's deadline
#[test]
fn a_stop_with_a_deadline_ends_by_it_while_an_output_waits_for_a_far_retry() {
    let mut config = RunnerConfig::new("far-retry", "memory");
    config.budget = RetryBudget {
        max_retries: 3,
        initial_backoff: Duration::from_secs(3600),
        max_backoff: Duration::from_secs(3600),
        expire_after: Duration::from_secs(7200),
    };
    let runner = SinkRunner::start(
        Box::new(Always {
            outcome: SinkOutcome::NotPublished {
                evidence: "503".into(),
                retryable: true,
            },
            attempts: Arc::new(Mutex::new(Vec::new())),
        }),
        config,
    )
    .expect("started");
    runner
        .handle()
        .send(Output::new(key(1), b"one".to_vec()), None)
        .expect("taken");
    let status = wait_for(&runner, |status| status.retrying == 1);
    assert_eq!(status.retrying, 1, "{status:?}");
    let (stopped, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let status = runner.stop(Instant::now() + Duration::from_millis(200));
        let _ = stopped.send(status);
    });
    // a generous wait for the stop to return at all (the retry is an hour away)
    let status = done
        .recv_timeout(Duration::from_secs(60))
        .expect("the stop returns once its deadline passed, not when the retry is due");
    assert_eq!(
        status.retrying, 1,
        "the output is left for a restart: {status:?}"
    );
}
