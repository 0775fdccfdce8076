//! A writer on a thread that batches (a processor group's: [`batch_end`]) keeps the
//! outputs of a poll and hands them to its sink together at the batch's end: each
//! output's input is held (its gate knows the output) from the write on, nothing
//! reaches the sink before the batch ends, everything does after it, in the order
//! written, and an output written outside a delivery goes after what the writer kept.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::batch_end;
use mongoose_core::engine;
use mongoose_core::sink::{CommitGate, Output, Sink, SinkOutcome};
use mongoose_core::{Delivery, Epoch, PositionValue};
use mongoose_sink::{RunnerConfig, SinkRunner, SinkWriter};
use parking_lot::Mutex;

mod support;
use support::gate::Gate;
use support::wait_until;

/// Publishes everything, noting each payload in order.
struct Noted(Arc<Mutex<Vec<Vec<u8>>>>);

impl Sink for Noted {
    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
        let mut noted = self.0.lock();
        for output in outputs {
            noted.push(output.payload.clone());
            outcomes.push(SinkOutcome::Published {
                evidence: "noted".to_owned(),
            });
        }
    }
}

/// A runner of a [`Noted`] sink, and what it notes.
fn noted_runner() -> (SinkRunner, Arc<Mutex<Vec<Vec<u8>>>>) {
    let noted = Arc::new(Mutex::new(Vec::new()));
    let runner = SinkRunner::start(
        Box::new(Noted(Arc::clone(&noted))),
        RunnerConfig::new("noted", "memory"),
    )
    .expect("started");
    (runner, noted)
}

fn write_in_delivery(writer: &mut SinkWriter, feed: &Arc<str>, sequence: u64, text: &str) {
    let delivery = Delivery::new(
        Arc::clone(feed),
        sequence,
        Epoch(1),
        PositionValue {
            lane: 0,
            offset: sequence * 10,
        },
        0,
    );
    let _entered = engine::enter_delivery(&delivery);
    writer
        .write_with(|payload| payload.extend_from_slice(text.as_bytes()))
        .expect("taken");
}

#[test]
fn a_batching_thread_hands_its_outputs_over_at_the_batch_s_end_in_order_holding_their_inputs() {
    let (runner, noted) = noted_runner();
    let gate = Arc::new(Gate::default());
    let source: Arc<dyn CommitGate> = gate.clone();
    let mut writer = SinkWriter::new(
        runner.handle(),
        Arc::new(move |_feed: &str| Some(Arc::clone(&source))),
    );
    let feed: Arc<str> = Arc::from("lines");
    let batching = batch_end::batching();
    for sequence in 1..=3 {
        write_in_delivery(&mut writer, &feed, sequence, &format!("line {sequence}"));
    }
    // held from the write on, not handed over yet
    assert_eq!(*gate.pending.lock(), vec![1, 2, 3]);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        noted.lock().is_empty(),
        "nothing reaches the sink before the batch ends"
    );
    // the kept outputs count as queued (with the rest of the writer's credit, given
    // back at the batch's end)
    assert!(runner.handle().status().queued >= 3);
    assert!(!writer.is_settled());

    assert_eq!(batch_end::end_batch(), 1);
    wait_until("the batch is published", || {
        gate.completed.lock().len() == 3
    });
    assert_eq!(
        *noted.lock(),
        vec![b"line 1".to_vec(), b"line 2".to_vec(), b"line 3".to_vec()]
    );

    // an output made outside a delivery (a timer's) goes after what was kept
    write_in_delivery(&mut writer, &feed, 4, "line 4");
    writer.write(b"timer".to_vec()).expect("taken");
    wait_until("both are published", || noted.lock().len() == 5);
    assert_eq!(noted.lock()[3..], [b"line 4".to_vec(), b"timer".to_vec()]);
    drop(batching);

    // a thread that does not batch hands each output over at once
    write_in_delivery(&mut writer, &feed, 5, "line 5");
    wait_until("it is published", || noted.lock().len() == 6);
    let status = runner.stop(Instant::now() + Duration::from_secs(30));
    assert_eq!(status.published, 6);
    assert_eq!(status.queued, 0);
}

#[test]
fn outputs_a_dropped_writer_kept_reach_the_sink() {
    let (runner, noted) = noted_runner();
    let mut writer = SinkWriter::new(runner.handle(), Arc::new(|_feed: &str| None));
    let feed: Arc<str> = Arc::from("lines");
    let _batching = batch_end::batching();
    write_in_delivery(&mut writer, &feed, 1, "kept");
    drop(writer);
    wait_until("the kept output is published", || noted.lock().len() == 1);
    assert_eq!(
        runner
            .stop(Instant::now() + Duration::from_secs(30))
            .published,
        1
    );
}
