//! The HTTP sink over https on the real `mongoose` binary (issue 28, item 5): a
//! forward of a file through ndjson batches, gzipped, to a local TLS server that
//! requires a client certificate, holds every line once; a CA file that cannot be
//! used is a bad config (exit 2) naming its path.

use crate::support;

use std::collections::BTreeMap;

use mongoose_testkit::https::{HttpsTarget, TestCa};
use support::LedgerRun;

/// A `forward` of the file feed `lines` into the https sink `out` with `sink` added
/// to the sink's table.
fn forward_config(url: &str, sink: &str) -> String {
    format!(
        r#"
[[feeds]]
name = "lines"
source = "file"
path = "input.txt"
read_strategy = "COMMITED"

[[sinks]]
name = "out"
kind = "http"
url = "{url}"
response_timeout_millis = 60000
{sink}

[[groups]]
name = "forward"
[[groups.processors]]
name = "copy"
kind = "forward"
settings = {{ feed = "lines", sink = "out" }}
"#
    )
}

#[test]
fn a_forward_over_https_in_gzipped_batches_holds_every_line_once() {
    let total = 5_000;
    let input: String = (0..total).map(|i| format!("{{\"line\":{i}}}\n")).collect();
    let ca = TestCa::new("server CA");
    let clients = TestCa::new("client CA");
    let target = HttpsTarget::start(&ca.issue(&["127.0.0.1"]), Some(&clients));
    let run = LedgerRun::new(
        &input,
        &forward_config(
            &target.url(),
            r#"batch_max_lines = 500
batch_max_bytes = 65536
batch_timeout_millis = 50
compression = "gzip"
ca_file = "tls/ca.pem"
client_cert_file = "tls/client.crt"
client_key_file = "tls/client.key""#,
        ),
    );
    let tls = run.path("tls");
    std::fs::create_dir(&tls).expect("tls folder");
    std::fs::write(tls.join("ca.pem"), ca.cert_pem()).expect("ca");
    clients.issue(&["mongoose"]).write(&tls, "client");

    let code = run.finish();
    assert_eq!(code, 0, "settled and lossless: {}", run.log());

    let requests = target.requests();
    let mut held: BTreeMap<String, String> = BTreeMap::new();
    for request in &requests {
        assert_eq!(request.header("content-type"), Some("application/x-ndjson"));
        assert_eq!(request.header("content-encoding"), Some("gzip"));
        assert!(
            request.client_cert.is_some(),
            "the client certificate was presented"
        );
        let (keys, lines) = (request.keys(), request.lines());
        assert_eq!(keys.len(), lines.len(), "a key per line");
        assert!(lines.len() <= 500 && request.body.len() <= 65_536);
        for (key, line) in keys.into_iter().zip(lines) {
            let previous = held.insert(key, line.clone());
            assert!(previous.is_none_or(|p| p == line), "a key names one line");
        }
    }
    let mut lines: Vec<String> = held.into_values().collect();
    lines.sort();
    let mut expected: Vec<String> = input.lines().map(str::to_owned).collect();
    expected.sort();
    assert_eq!(lines.len(), total, "every line, once per key");
    assert_eq!(lines, expected);
    let sent: usize = requests.iter().map(|request| request.lines().len()).sum();
    assert_eq!(
        sent, total,
        "no line was sent twice in a run without failures"
    );
    assert!(
        requests.len() < total / 10,
        "{} requests for {total} lines: batched",
        requests.len()
    );
}

#[test]
fn a_ca_file_that_cannot_be_used_is_a_bad_config_naming_its_path() {
    for (name, content) in [("missing.pem", None), ("garbage.pem", Some("not PEM\n"))] {
        let run = LedgerRun::new(
            "a\n",
            &forward_config(
                "https://127.0.0.1:9/events",
                &format!("ca_file = \"{name}\""),
            ),
        );
        if let Some(content) = content {
            std::fs::write(run.path(name), content).expect("write");
        }
        let (code, log) = run.finish_with_log();
        assert_eq!(code, 2, "a bad config: {log}");
        let path = run.path(name);
        assert!(
            log.contains(&format!("ca_file '{}'", path.display())),
            "the log names the file: {log}"
        );
    }
}
