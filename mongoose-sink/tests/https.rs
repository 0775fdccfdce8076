//! The HTTP sink over https against a real local TLS server with a generated CA, and
//! its ndjson batches (issue 28, item 5): what arrives, what a wrong CA or a missing
//! client certificate gives, and the keys a batch carries, retried or not.

mod support;

use mongoose_core::sink::{Output, Sink, SinkOutcome};
use mongoose_sink::{HttpCompression, HttpSink, HttpSinkConfig, HttpTlsConfig};
use mongoose_testkit::https::{HttpsTarget, TestCa};
use support::output;

/// A sink posting to `url` with `tls`, in batches of `lines` (1: one per request).
fn sink(url: String, tls: HttpTlsConfig, lines: usize) -> HttpSink {
    try_sink(url, tls, lines).expect("valid settings")
}

fn try_sink(
    url: String,
    tls: HttpTlsConfig,
    lines: usize,
) -> Result<HttpSink, mongoose_sink::SinkError> {
    HttpSink::new(
        "https-test",
        HttpSinkConfig {
            url,
            timeout_millis: 10_000,
            response_timeout_millis: 60_000,
            batch_max_lines: lines,
            tls,
            ..HttpSinkConfig::default()
        },
    )
}

fn publish(sink: &mut HttpSink, outputs: &[Output]) -> Vec<SinkOutcome> {
    let mut outcomes = Vec::new();
    sink.publish(outputs, &mut outcomes);
    outcomes
}

/// A CA, a server certificate it signed for 127.0.0.1, the CA's file in `folder`.
fn server_and_ca(
    folder: &std::path::Path,
    client_ca: Option<&TestCa>,
) -> (HttpsTarget, HttpTlsConfig) {
    let ca = TestCa::new("mongoose test CA");
    let target = HttpsTarget::start(&ca.issue(&["127.0.0.1"]), client_ca);
    let ca_file = folder.join("ca.pem");
    std::fs::write(&ca_file, ca.cert_pem()).expect("write the CA");
    let tls = HttpTlsConfig {
        ca_file: Some(ca_file),
        ..HttpTlsConfig::default()
    };
    (target, tls)
}

#[test]
fn records_arrive_over_https_checked_against_the_ca_file() {
    let folder = tempfile::tempdir().expect("a folder");
    let (target, tls) = server_and_ca(folder.path(), None);
    let mut sink = sink(target.url(), tls, 1);
    let outputs: Vec<Output> = (0..3)
        .map(|i| output(i, 0, &format!("{{\"n\":{i}}}")))
        .collect();
    let outcomes = publish(&mut sink, &outputs);
    assert!(
        outcomes.iter().all(SinkOutcome::is_published),
        "{outcomes:?}"
    );
    let requests = target.requests();
    assert_eq!(requests.len(), 3);
    for (request, output) in requests.iter().zip(&outputs) {
        assert_eq!(request.body, output.payload);
        assert_eq!(
            request.header("idempotency-key"),
            Some(output.key.to_string().as_str())
        );
        assert_eq!(
            request.header("content-type"),
            Some("application/octet-stream")
        );
    }

    // the built-in roots do not hold the test's CA: refused before anything is sent
    let mut untrusting = self::sink(target.url(), HttpTlsConfig::default(), 1);
    let outcome = &publish(&mut untrusting, &outputs[..1])[0];
    assert!(
        matches!(outcome, SinkOutcome::NotPublished { retryable: true, evidence } if evidence.contains("TLS handshake")),
        "{outcome:?}"
    );
    assert_eq!(target.requests().len(), 3, "nothing more arrived");
}

#[test]
fn a_target_signed_by_another_ca_is_refused_with_a_clear_outcome() {
    let folder = tempfile::tempdir().expect("a folder");
    let (target, _) = server_and_ca(folder.path(), None);
    let other = folder.path().join("other-ca.pem");
    std::fs::write(&other, TestCa::new("another CA").cert_pem()).expect("write");
    let mut sink = sink(
        target.url(),
        HttpTlsConfig {
            ca_file: Some(other),
            ..HttpTlsConfig::default()
        },
        1,
    );
    let outcomes = publish(&mut sink, &[output(1, 0, "a"), output(2, 0, "b")]);
    assert_eq!(
        outcomes.len(),
        1,
        "the target does not answer: the rest waits unsent"
    );
    match &outcomes[0] {
        SinkOutcome::NotPublished {
            retryable: true,
            evidence,
        } => {
            assert!(evidence.contains("TLS handshake"), "{evidence}");
            assert!(
                evidence.contains("UnknownIssuer") || evidence.contains("unknown issuer"),
                "the cause is named: {evidence}"
            );
            assert!(evidence.contains("ca_file"), "{evidence}");
        }
        other => panic!("a certificate no trusted CA signed is not published: {other:?}"),
    }
    assert!(sink.target_not_answering());
    assert!(target.requests().is_empty());
}

#[test]
fn a_client_certificate_is_required_and_presented() {
    let folder = tempfile::tempdir().expect("a folder");
    let client_ca = TestCa::new("clients");
    let (target, tls) = server_and_ca(folder.path(), Some(&client_ca));

    // without one, the target refuses the session: not published, and said why
    let mut anonymous = self::sink(target.url(), tls.clone(), 1);
    let outcome = publish(&mut anonymous, &[output(1, 0, "a")]).remove(0);
    match &outcome {
        SinkOutcome::NotPublished {
            retryable: true,
            evidence,
        } => assert!(evidence.contains("client certificate"), "{evidence}"),
        other => panic!("a session the target refused took nothing: {other:?}"),
    }
    assert!(target.requests().is_empty());
    assert!(
        !target.refused().is_empty(),
        "the server refused a handshake"
    );

    // one signed by another CA is refused too
    let stranger = TestCa::new("strangers").issue(&["client-x"]);
    let (cert, key) = stranger.write(folder.path(), "stranger");
    let mut refused = sink(
        target.url(),
        HttpTlsConfig {
            client_cert_file: Some(cert),
            client_key_file: Some(key),
            ..tls.clone()
        },
        1,
    );
    assert!(
        matches!(&publish(&mut refused, &[output(1, 0, "a")])[0], SinkOutcome::NotPublished { retryable: true, evidence } if evidence.contains("client certificate")),
    );
    assert!(target.requests().is_empty());

    // with the client CA's certificate, it is presented and the output arrives
    let issued = client_ca.issue(&["client-a"]);
    let (cert, key) = issued.write(folder.path(), "client-a");
    let mut presenting = sink(
        target.url(),
        HttpTlsConfig {
            client_cert_file: Some(cert),
            client_key_file: Some(key),
            ..tls
        },
        1,
    );
    assert!(publish(&mut presenting, &[output(1, 0, "a")])[0].is_published());
    let requests = target.requests();
    assert_eq!(requests.len(), 1);
    let presented = requests[0]
        .client_cert
        .as_ref()
        .expect("a client certificate");
    let expected: Vec<u8> = rustls_pem_der(&issued.cert_pem);
    assert_eq!(
        presented, &expected,
        "the configured certificate was presented"
    );
}

/// The DER of the first certificate in `pem`.
fn rustls_pem_der(pem: &str) -> Vec<u8> {
    let body: String = pem
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    base64_decode(&body)
}

fn base64_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut count = 0;
    let mut out = Vec::new();
    for byte in text.bytes().filter(|b| *b != b'=') {
        let value = ALPHABET.iter().position(|c| *c == byte).expect("base64") as u32;
        bits = (bits << 6) | value;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
        }
    }
    out
}

#[test]
fn unusable_tls_files_are_refused_when_the_sink_is_made_naming_the_file() {
    let folder = tempfile::tempdir().expect("a folder");
    let garbage = folder.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").expect("write");
    let error = try_sink(
        "https://127.0.0.1:1/".into(),
        HttpTlsConfig {
            ca_file: Some(garbage.clone()),
            ..HttpTlsConfig::default()
        },
        1,
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains(&format!("ca_file '{}'", garbage.display()))
            && error.contains("no PEM certificate"),
        "{error}"
    );
    // a key that is not the certificate's
    let ca = TestCa::new("ca");
    let (cert, _) = ca.issue(&["a"]).write(folder.path(), "a");
    let (_, other_key) = ca.issue(&["b"]).write(folder.path(), "b");
    let error = try_sink(
        "https://127.0.0.1:1/".into(),
        HttpTlsConfig {
            client_cert_file: Some(cert),
            client_key_file: Some(other_key),
            ..HttpTlsConfig::default()
        },
        1,
    );
    // rustls checks that the key matches the certificate's public key
    let error = error.unwrap_err().to_string();
    assert!(
        error.contains("do not make a client certificate"),
        "{error}"
    );
}

#[test]
fn batches_arrive_as_ndjson_within_the_limits_and_gzip_decodes_to_the_lines() {
    let folder = tempfile::tempdir().expect("a folder");
    let (target, tls) = server_and_ca(folder.path(), None);
    let outputs: Vec<Output> = (0..10)
        .map(|i| output(100 + i, 0, &format!("{{\"line\":{i:03}}}")))
        .collect();
    // 4 lines a request, and 3 lines' bytes (13 bytes and a line break each)
    for (lines, bytes, expected) in [(4, 1 << 20, vec![4, 4, 2]), (100, 42, vec![3, 3, 3, 1])] {
        let mut sink = HttpSink::new(
            "batches",
            HttpSinkConfig {
                url: target.url(),
                timeout_millis: 10_000,
                response_timeout_millis: 60_000,
                batch_max_lines: lines,
                batch_max_bytes: bytes,
                compression: HttpCompression::Gzip,
                tls: tls.clone(),
                ..HttpSinkConfig::default()
            },
        )
        .expect("valid settings");
        let before = target.requests().len();
        let outcomes = publish(&mut sink, &outputs);
        assert_eq!(outcomes.len(), outputs.len());
        assert!(
            outcomes.iter().all(SinkOutcome::is_published),
            "{outcomes:?}"
        );
        assert!(
            outcomes[0].evidence().starts_with("batch of "),
            "{outcomes:?}"
        );
        let requests = &target.requests()[before..];
        let sizes: Vec<usize> = requests.iter().map(|r| r.lines().len()).collect();
        assert_eq!(sizes, expected, "lines per request");
        let mut lines = Vec::new();
        let mut keys = Vec::new();
        for request in requests {
            assert_eq!(request.header("content-type"), Some("application/x-ndjson"));
            assert_eq!(request.header("content-encoding"), Some("gzip"));
            assert_ne!(request.raw_body, request.body, "the body came gzipped");
            assert!(request.body.len() <= bytes);
            assert_eq!(
                request.keys().len(),
                request.lines().len(),
                "a key per line"
            );
            lines.extend(request.lines());
            keys.extend(request.keys());
        }
        let sent: Vec<String> = outputs
            .iter()
            .map(|o| String::from_utf8(o.payload.clone()).expect("utf-8"))
            .collect();
        assert_eq!(lines, sent, "every line once, in order");
        let sent_keys: Vec<String> = outputs.iter().map(|o| o.key.to_string()).collect();
        assert_eq!(keys, sent_keys, "each line's own key, in the lines' order");
    }
}

#[test]
fn a_retried_batch_carries_the_same_keys_however_it_is_composed() {
    let folder = tempfile::tempdir().expect("a folder");
    let (target, tls) = server_and_ca(folder.path(), None);
    target.script([503, 500]);
    let mut sink = sink(target.url(), tls.clone(), 4);
    let outputs: Vec<Output> = (0..4).map(|i| output(i, 0, &format!("line {i}"))).collect();
    let first = publish(&mut sink, &outputs);
    assert_eq!(first.len(), 4);
    assert!(
        first.iter().all(|o| matches!(
            o,
            SinkOutcome::NotPublished {
                retryable: true,
                ..
            }
        )),
        "a 503 refuses every output of the batch: {first:?}"
    );
    // the retry: the same outputs, attempt 1, now in a batch of their own... and then,
    // as after a restart, two of them with new ones: each line keeps its key
    let retried: Vec<Output> = outputs
        .iter()
        .map(|o| Output {
            attempt: 1,
            ..o.clone()
        })
        .collect();
    let second = publish(&mut sink, &retried);
    assert!(
        second
            .iter()
            .all(|o| matches!(o, SinkOutcome::Uncertain { .. })),
        "{second:?}"
    );
    let mut restarted = self::sink(target.url(), tls, 4);
    let recomposed: Vec<Output> = retried[2..]
        .iter()
        .cloned()
        .chain((4..6).map(|i| output(i, 0, &format!("line {i}"))))
        .collect();
    assert!(publish(&mut restarted, &recomposed)
        .iter()
        .all(SinkOutcome::is_published));

    let requests = target.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(
        requests[0].keys(),
        requests[1].keys(),
        "a retry carries the same keys"
    );
    assert_eq!(requests[0].header("x-mongoose-attempt"), Some("0"));
    assert_eq!(requests[1].header("x-mongoose-attempt"), Some("1"));
    // a receiver de-duplicating per key: every line once
    let mut held = std::collections::BTreeMap::new();
    for request in &requests {
        for (key, line) in request.keys().into_iter().zip(request.lines()) {
            let previous = held.insert(key.clone(), line.clone());
            assert!(previous.is_none_or(|p| p == line), "a key names one line");
        }
    }
    let expected: Vec<String> = (0..6).map(|i| format!("line {i}")).collect();
    let mut lines: Vec<String> = held.into_values().collect();
    lines.sort();
    assert_eq!(lines, expected);
    assert_eq!(requests[2].keys()[..2], requests[0].keys()[2..]);
}

#[test]
fn a_payload_that_is_not_one_line_is_refused_without_breaking_its_batch() {
    let folder = tempfile::tempdir().expect("a folder");
    let (target, tls) = server_and_ca(folder.path(), None);
    let mut sink = sink(target.url(), tls, 10);
    let outcomes = publish(
        &mut sink,
        &[output(1, 0, "a"), output(2, 0, "b\nc"), output(3, 0, "d")],
    );
    assert!(outcomes[0].is_published() && outcomes[2].is_published());
    assert!(
        matches!(&outcomes[1], SinkOutcome::NotPublished { retryable: false, evidence } if evidence.contains("line break")),
        "{outcomes:?}"
    );
    let lines: Vec<String> = target.requests().iter().flat_map(|r| r.lines()).collect();
    assert_eq!(lines, ["a", "d"]);
}
