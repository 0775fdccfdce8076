//! The HTTP sink against a real local HTTP server: each answer, and each failure,
//! classified honestly (book: guarantees/outcomes.md: "Uncertain is a first-class result").

mod support;

use mongoose_core::sink::{Output, Sink, SinkOutcome};
use mongoose_sink::{HttpSink, HttpSinkConfig};
use mongoose_testkit::http_target::{Answer, HttpTarget};
use support::{nothing_listening, output};

fn sink(url: String, response_timeout_millis: u64) -> HttpSink {
    HttpSink::new(
        "http-test",
        HttpSinkConfig {
            url,
            timeout_millis: 2_000,
            response_timeout_millis,
            headers: vec![("X-Tenant".into(), "blue".into())],
            ..HttpSinkConfig::default()
        },
    )
    .expect("valid settings")
}

fn publish(sink: &mut HttpSink, outputs: &[Output]) -> Vec<SinkOutcome> {
    let outcomes = publish_some(sink, outputs);
    assert_eq!(outcomes.len(), outputs.len(), "one outcome per output");
    outcomes
}

/// The outcomes of the outputs the sink tried (a batch stops when the target does
/// not answer: the rest get none).
fn publish_some(sink: &mut HttpSink, outputs: &[Output]) -> Vec<SinkOutcome> {
    let mut outcomes = Vec::new();
    sink.publish(outputs, &mut outcomes);
    assert!(
        !outcomes.is_empty() && outcomes.len() <= outputs.len(),
        "the first output is always tried, none is answered twice"
    );
    outcomes
}

// book: guarantees/outcomes.md: "After a Producer has taken ownership, a timeout ... cannot
// prove that the target did not persist the record"; issue 13's first named test.
#[test]
fn an_uncertain_publish_is_never_reported_as_not_published() {
    let server = HttpTarget::start();
    server.script([Answer::Hang]);
    // 300 ms is a bound, not an expectation: the server never answers.
    let mut sink = sink(server.url(), 300);
    let first = output(10, 0, "debit 5");
    let outcomes = publish(&mut sink, std::slice::from_ref(&first));
    match &outcomes[0] {
        SinkOutcome::Uncertain { evidence } => {
            assert!(
                evidence.contains("request sent, no response within 300 ms"),
                "{evidence}"
            );
        }
        other => {
            panic!("a request the server took and never answered must be uncertain, got {other:?}")
        }
    }
    assert_eq!(server.requests().len(), 1, "the server did get the request");

    // A retry of the same output carries the same key (the runner sends it again;
    // here through a sink with a roomier bound, so that a loaded machine cannot make
    // the answer late).
    let retry = Output {
        attempt: 1,
        ..first.clone()
    };
    let mut patient = self::sink(server.url(), 10_000);
    let outcomes = publish(&mut patient, &[retry]);
    assert_eq!(
        outcomes[0],
        SinkOutcome::Published {
            evidence: "HTTP 201".into()
        }
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let key = first.key.to_string();
    assert_eq!(requests[0].header("idempotency-key"), Some(key.as_str()));
    assert_eq!(requests[1].header("idempotency-key"), Some(key.as_str()));
}

#[test]
fn a_connection_closed_after_the_request_is_uncertain_not_unpublished() {
    let server = HttpTarget::start();
    server.script([Answer::Close]);
    let mut sink = sink(server.url(), 5_000);
    let outcomes = publish(&mut sink, &[output(1, 0, "credit 3")]);
    assert!(
        matches!(outcomes[0], SinkOutcome::Uncertain { .. }),
        "the server read the request and hung up: it may have acted, got {:?}",
        outcomes[0]
    );
}

#[test]
fn each_status_is_classified_by_what_the_target_said() {
    let server = HttpTarget::start();
    server.script([
        Answer::StatusWithBody(201, "ok".into()),
        Answer::StatusWithBody(400, "field 'amount' is missing".into()),
        Answer::StatusWithBody(503, "busy".into()),
        Answer::StatusWithBody(500, "boom".into()),
        Answer::Status(429),
        Answer::StatusWithBody(504, "upstream timed out".into()),
    ]);
    let mut sink = sink(server.url(), 5_000);
    let mut outcome_of = |position| publish(&mut sink, &[output(position, 0, "x")]).remove(0);

    assert_eq!(
        outcome_of(1),
        SinkOutcome::Published {
            evidence: "HTTP 201".into()
        }
    );
    assert_eq!(
        outcome_of(2),
        SinkOutcome::NotPublished {
            evidence: "HTTP 400: field 'amount' is missing".into(),
            retryable: false
        }
    );
    assert_eq!(
        outcome_of(3),
        SinkOutcome::NotPublished {
            evidence: "HTTP 503: busy".into(),
            retryable: true
        }
    );
    let five_hundred = outcome_of(4);
    assert!(
        matches!(&five_hundred, SinkOutcome::Uncertain { evidence } if evidence.starts_with("HTTP 500")),
        "a 500 may come after the target acted: {five_hundred:?}"
    );
    assert!(matches!(
        outcome_of(5),
        SinkOutcome::NotPublished {
            retryable: true,
            ..
        }
    ));
    // A gateway answers 504 after it forwarded the request: the target behind it may
    // have acted.
    let gateway_timeout = outcome_of(6);
    assert!(
        matches!(&gateway_timeout, SinkOutcome::Uncertain { evidence } if evidence.starts_with("HTTP 504")),
        "{gateway_timeout:?}"
    );
    // Keep-alive: all six on one connection.
    assert_eq!(server.connections(), 1);
}

#[test]
fn nothing_listening_is_not_published_and_retryable() {
    let mut sink = sink(format!("http://{}/events", nothing_listening()), 5_000);
    let outcomes = publish_some(&mut sink, &[output(1, 0, "a"), output(1, 1, "b")]);
    assert_eq!(
        outcomes.len(),
        1,
        "the batch stops: the second output is not sent, so it has no outcome (issue 24, item 5)"
    );
    assert!(
        matches!(
            outcomes[0],
            SinkOutcome::NotPublished {
                retryable: true,
                ..
            }
        ),
        "nothing was sent: {:?}",
        outcomes[0]
    );
    assert!(
        outcomes[0].evidence().contains("could not connect"),
        "{outcomes:?}"
    );
}

#[test]
fn every_request_carries_the_key_the_attempt_and_the_configured_headers() {
    let server = HttpTarget::start();
    server.script([Answer::StatusWithBody(503, "busy".into())]);
    let mut sink = sink(server.url(), 5_000);
    let first = output(42, 3, "{\"amount\":5}");
    assert!(publish(&mut sink, std::slice::from_ref(&first))[0].may_retry());
    let retry = Output {
        attempt: 1,
        ..first.clone()
    };
    assert!(publish(&mut sink, &[retry])[0].is_published());

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for (attempt, request) in requests.iter().enumerate() {
        assert_eq!(request.header("idempotency-key"), Some("lines/1/0/42/3/1"));
        assert_eq!(
            request.header("x-mongoose-attempt"),
            Some(attempt.to_string().as_str())
        );
        assert_eq!(request.header("x-tenant"), Some("blue"));
        assert_eq!(request.body, b"{\"amount\":5}");
    }
}

#[test]
fn a_batch_goes_on_while_the_target_answers_whatever_it_answers() {
    // issue 24, item 5: a batch stopped at its first retryable failure and answered
    // the rest "not sent", which the runner charged as failed attempts. A target that
    // answers is asked about every output: each outcome is that request's own.
    let server = HttpTarget::start();
    server.script([
        Answer::Status(200),
        Answer::StatusWithBody(422, "bad".into()),
        Answer::Status(503),
        Answer::Status(500),
        Answer::Close,
    ]);
    let mut sink = sink(server.url(), 5_000);
    let outputs: Vec<Output> = (0..7).map(|index| output(7, index, "line")).collect();
    let outcomes = publish(&mut sink, &outputs);
    assert!(outcomes[0].is_published());
    assert!(!outcomes[1].may_retry(), "a permanent refusal");
    assert!(matches!(
        outcomes[2],
        SinkOutcome::NotPublished {
            retryable: true,
            ..
        }
    ));
    assert!(matches!(outcomes[3], SinkOutcome::Uncertain { .. }));
    assert!(
        matches!(outcomes[4], SinkOutcome::Uncertain { .. }),
        "a closed connection is that request's failure"
    );
    assert!(outcomes[5].is_published() && outcomes[6].is_published());
    assert_eq!(server.requests().len(), 7, "every output was sent once");
}

#[test]
fn a_batch_stops_when_the_target_does_not_answer_and_leaves_the_rest_unanswered() {
    // issue 24, item 5: the outputs after a timeout were not sent; they get no
    // outcome, so no attempt is charged to them
    let server = HttpTarget::start();
    server.script([Answer::Status(201), Answer::Hang]);
    let mut sink = sink(server.url(), 300);
    let outputs: Vec<Output> = (0..5).map(|index| output(8, index, "line")).collect();
    let outcomes = publish_some(&mut sink, &outputs);
    assert_eq!(outcomes.len(), 2, "{outcomes:?}");
    assert!(outcomes[0].is_published());
    assert!(matches!(outcomes[1], SinkOutcome::Uncertain { .. }));
    assert_eq!(
        server.requests().len(),
        2,
        "the rest of the batch was not sent"
    );
    assert!(sink.target_not_answering(), "the runner is told to pause");

    // a batch of one that times out says so too; one the target answers does not
    server.script([Answer::Hang]);
    assert_eq!(publish(&mut sink, &[output(9, 0, "line")]).len(), 1);
    assert!(sink.target_not_answering());
    server.script([Answer::StatusWithBody(503, "busy".into())]);
    assert!(publish(&mut sink, &[output(9, 0, "line")])[0].may_retry());
    assert!(!sink.target_not_answering(), "a 503 is an answer");
}

#[test]
fn a_connection_the_target_closed_after_a_request_is_replaced() {
    let server = HttpTarget::start();
    let mut sink = sink(server.url(), 5_000);
    assert!(publish(&mut sink, &[output(1, 0, "a")])[0].is_published());
    // The next request on that connection is read, then the server hangs up (an
    // idle keep-alive connection the target closes); the one after needs a new
    // connection.
    server.script([Answer::Close]);
    assert!(matches!(
        publish(&mut sink, &[output(2, 0, "b")])[0],
        SinkOutcome::Uncertain { .. }
    ));
    assert!(publish(&mut sink, &[output(2, 0, "b")])[0].is_published());
    assert_eq!(server.connections(), 2);
}

#[test]
fn an_idle_connection_the_target_closed_is_not_mistaken_for_a_failed_publish() {
    let server = HttpTarget::start();
    server.script([Answer::StatusThenClose(200)]);
    let mut sink = sink(server.url(), 5_000);
    assert!(publish(&mut sink, &[output(1, 0, "a")])[0].is_published());
    support::wait_until("the server closed the kept-alive connection", || {
        server.closed() == 1
    });
    // The pool sees the closed connection before sending: nothing is lost, nothing
    // is uncertain.
    assert!(publish(&mut sink, &[output(2, 0, "b")])[0].is_published());
    assert_eq!(server.connections(), 2);
}

#[test]
fn an_output_key_http_cannot_carry_is_refused_for_good_without_sending() {
    use mongoose_core::sink::OutputKey;
    use mongoose_core::Epoch;
    let server = HttpTarget::start();
    let mut sink = sink(server.url(), 5_000);
    let key = OutputKey::new("bad\nfeed", Epoch(1), 0, 1, 0, 1);
    let outcomes = publish(&mut sink, &[Output::new(key, b"x".to_vec())]);
    assert!(
        matches!(&outcomes[0], SinkOutcome::NotPublished { retryable: false, evidence } if evidence.contains("could not be built")),
        "{:?}",
        outcomes[0]
    );
    assert!(server.requests().is_empty());
}
