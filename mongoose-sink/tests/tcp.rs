//! The TCP line sink against a real local listener (the testkit's `TcpLineTarget`, or
//! a peer of the test's own where it misbehaves on purpose): lines in order, and a peer
//! that goes away part way gives uncertain outcomes, never invented ones.

mod support;

use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use mongoose_core::sink::{Output, Sink, SinkOutcome};
use mongoose_sink::{TcpSink, TcpSinkConfig};
use mongoose_testkit::tcp_target::TcpLineTarget;
use support::{nothing_listening, output};

fn sink(address: String, write_timeout_millis: u64) -> TcpSink {
    TcpSink::new(
        "tcp-test",
        TcpSinkConfig {
            address,
            connect_timeout_millis: 2_000,
            write_timeout_millis,
        },
    )
    .expect("valid settings")
}

fn publish(sink: &mut TcpSink, outputs: &[Output]) -> Vec<SinkOutcome> {
    let mut outcomes = Vec::new();
    sink.publish(outputs, &mut outcomes);
    assert_eq!(outcomes.len(), outputs.len(), "one outcome per output");
    outcomes
}

/// Outputs of `size` bytes each, big enough together to overflow the socket buffers.
fn big_batch(count: u32, size: usize) -> Vec<Output> {
    (0..count)
        .map(|index| {
            let mut line = format!("{index:08} ");
            line.extend(std::iter::repeat_n('x', size - line.len()));
            output(1, index, &line)
        })
        .collect()
}

#[test]
fn lines_arrive_in_order_and_each_is_published_without_acknowledgement() {
    let target = TcpLineTarget::start();
    let address = target.address().to_string();
    let mut sink = sink(address, 5_000);

    let mut expected = Vec::new();
    for batch in 0..3u64 {
        let outputs: Vec<Output> = (0..4u32)
            .map(|index| output(batch, index, &format!("line {batch}.{index}")))
            .collect();
        expected.extend(
            outputs
                .iter()
                .map(|o| String::from_utf8(o.payload.clone()).unwrap()),
        );
        for outcome in publish(&mut sink, &outputs) {
            assert_eq!(
                outcome,
                SinkOutcome::Published {
                    evidence:
                        "written to the socket (no acknowledgement in a plain TCP line protocol)"
                            .into()
                }
            );
        }
    }
    let got: Vec<String> = target
        .wait_for_lines(expected.len())
        .into_iter()
        .map(|(_, line)| line)
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn nothing_listening_is_not_published_and_retryable() {
    let mut sink = sink(nothing_listening().to_string(), 5_000);
    let outcomes = publish(&mut sink, &[output(1, 0, "a"), output(1, 1, "b")]);
    for outcome in &outcomes {
        assert!(
            matches!(
                outcome,
                SinkOutcome::NotPublished {
                    retryable: true,
                    ..
                }
            ),
            "nothing was written: {outcome:?}"
        );
    }
}

#[test]
fn a_payload_holding_a_newline_is_refused_for_good_and_the_rest_written() {
    let target = TcpLineTarget::start();
    let address = target.address().to_string();
    let mut sink = sink(address, 5_000);
    let outcomes = publish(
        &mut sink,
        &[
            output(1, 0, "one"),
            output(1, 1, "two\nthree"),
            output(1, 2, "four"),
        ],
    );
    assert!(outcomes[0].is_published() && outcomes[2].is_published());
    assert!(!outcomes[1].may_retry(), "{:?}", outcomes[1]);
    let lines = target.wait_for_lines(2);
    assert_eq!((lines[0].1.as_str(), lines[1].1.as_str()), ("one", "four"));
}

// The peer reads a little, then closes while a large write is under way: the lines
// that (partly) went are uncertain, the ones that never left are not published, none
// is reported published; the next publish connects again.
#[test]
fn a_peer_closing_mid_write_makes_that_write_uncertain_and_the_next_publish_reconnects() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    let (first_read, first_done) = mpsc::channel();
    let (later_lines, later) = mpsc::channel();
    thread::spawn(move || {
        let mut incoming = listener.incoming();
        // The first connection: read 64 KiB, then close with unread data (a reset).
        let mut first = incoming.next().expect("a connection").expect("accept");
        let mut head = vec![0u8; 64 * 1024];
        first.read_exact(&mut head).expect("the first 64 KiB");
        first_read.send(head).expect("send");
        drop(first);
        // The second connection: read lines.
        let second: TcpStream = incoming.next().expect("a connection").expect("accept");
        for line in BufReader::new(second).lines() {
            let Ok(line) = line else { return };
            if later_lines.send(line).is_err() {
                return;
            }
        }
    });

    let mut sink = sink(address, 60_000);
    // 4,000 lines of 16 KiB: 64 MiB, far beyond what loopback socket buffers hold.
    let batch = big_batch(4_000, 16 * 1024);
    let outcomes = publish(&mut sink, &batch);
    let head = first_done
        .recv_timeout(Duration::from_secs(30))
        .expect("the peer read");
    assert!(head.starts_with(b"00000000 "));

    assert!(
        outcomes.iter().all(|outcome| !outcome.is_published()),
        "no line of a write that failed is reported published"
    );
    assert!(
        matches!(outcomes[0], SinkOutcome::Uncertain { .. }),
        "the peer read the first line: it must not be called not published: {:?}",
        outcomes[0]
    );
    let first_unsent = outcomes
        .iter()
        .position(|outcome| matches!(outcome, SinkOutcome::NotPublished { .. }))
        .expect("lines beyond the socket buffers never left the process");
    assert!(outcomes[..first_unsent]
        .iter()
        .all(|outcome| matches!(outcome, SinkOutcome::Uncertain { .. })));
    assert!(outcomes[first_unsent..].iter().all(|outcome| matches!(
        outcome,
        SinkOutcome::NotPublished {
            retryable: true,
            ..
        }
    )));

    // The next publish connects again and its lines arrive.
    let outcomes = publish(&mut sink, &[output(2, 0, "after the reset")]);
    assert!(outcomes[0].is_published(), "{:?}", outcomes[0]);
    assert_eq!(
        later.recv_timeout(Duration::from_secs(30)).expect("a line"),
        "after the reset"
    );
}

// A peer that stops reading: the write times out part way; the bound is the
// setting, and what went is uncertain, what did not is not published.
#[test]
fn a_write_that_times_out_part_way_is_uncertain_and_the_unsent_rest_not_published() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    let (accepted, held) = mpsc::channel();
    thread::spawn(move || {
        let (stream, _) = listener.accept().expect("accept");
        // Hold the connection without reading until the test ends.
        accepted.send(stream).expect("send");
    });
    // 2 s is a bound, not an expectation: the peer never reads.
    let mut sink = sink(address, 2_000);
    let outcomes = publish(&mut sink, &big_batch(4_000, 16 * 1024));
    let _peer = held
        .recv_timeout(Duration::from_secs(30))
        .expect("accepted");
    assert!(
        matches!(&outcomes[0], SinkOutcome::Uncertain { .. }),
        "{:?}",
        outcomes[0]
    );
    assert!(matches!(
        outcomes.last().expect("outcomes"),
        SinkOutcome::NotPublished {
            retryable: true,
            ..
        }
    ));
    assert!(outcomes.iter().all(|outcome| !outcome.is_published()));
    assert!(
        outcomes[0].evidence().contains("timed out"),
        "{:?}",
        outcomes[0]
    );
}

#[test]
fn a_peer_that_closed_between_publishes_is_noticed_before_writing() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    let (lines, received) = mpsc::channel();
    let (closed, closed_done) = mpsc::channel();
    thread::spawn(move || {
        let mut incoming = listener.incoming();
        // The first connection: one line, then the peer closes it.
        let first = incoming.next().expect("a connection").expect("accept");
        let mut reader = BufReader::new(first);
        let mut line = String::new();
        reader.read_line(&mut line).expect("a line");
        lines.send(line.trim_end().to_string()).expect("send");
        drop(reader);
        closed.send(()).expect("send");
        let second = incoming.next().expect("a connection").expect("accept");
        for line in BufReader::new(second).lines() {
            let Ok(line) = line else { return };
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let mut sink = sink(address, 5_000);
    assert!(publish(&mut sink, &[output(1, 0, "first")])[0].is_published());
    closed_done
        .recv_timeout(Duration::from_secs(30))
        .expect("the peer closed");
    assert!(publish(&mut sink, &[output(2, 0, "second")])[0].is_published());
    let got: Vec<String> = (0..2)
        .map(|_| {
            received
                .recv_timeout(Duration::from_secs(30))
                .expect("a line")
        })
        .collect();
    assert_eq!(
        got,
        ["first", "second"],
        "the second line went on a new connection"
    );
}
