//! `/ready` while a sink cannot deliver (issue 39, item 6), on the real `mongoose`
//! binary over real TCP: an https sink whose every handshake fails (the target's
//! certificate is not signed by the CA the sink trusts), then an HTTP target that
//! refuses connections, make `/ready` 503 with a reason naming the sink and its last
//! error, and `/status` shows it on the sink; once the right CA is given (a restart),
//! `/ready` is 200 again and every line is delivered once. A sink with nothing to send
//! is ready: the target is not probed.
//!
//! Before: `/ready` was 200 throughout, until outputs were held (the retry budget spent).

use crate::support;

use std::collections::BTreeMap;
use std::process::Child;
use std::time::Duration;

use mongoose_testkit::https::{HttpsTarget, TestCa};
use support::LedgerRun;

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("address").port()
}

/// A forward of the file feed `lines` into the http sink `out` at `url` (`ca` its
/// `ca_file`, if any), with the admin API on `admin`. The retry budget is long: the
/// outputs wait for a retry, none is held while the test looks.
fn config(admin: &str, url: &str, ca: Option<&str>) -> String {
    let ca = ca.map_or(String::new(), |ca| format!("ca_file = \"{ca}\""));
    format!(
        r#"
[admin]
address = "{admin}"

[[feeds]]
name = "lines"
source = "file"
path = "input.txt"
read_strategy = "COMMITED"

[[sinks]]
name = "out"
kind = "http"
url = "{url}"
response_timeout_millis = 10000
batch_max_lines = 100
max_retries = 1000000
max_backoff_millis = 200
{ca}

[[groups]]
name = "forward"
[[groups.processors]]
name = "copy"
kind = "forward"
settings = {{ feed = "lines", sink = "out" }}
"#
    )
}

/// `GET path` on the admin API: the status code and the JSON body.
fn get(admin: &str, path: &str) -> Option<(u16, serde_json::Value)> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut response = agent.get(&format!("http://{admin}{path}")).call().ok()?;
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().ok()?;
    Some((status, serde_json::from_str(&text).ok()?))
}

/// Waits until `/ready` answers `code`; its body.
fn ready_becomes(run: &LedgerRun, child: &mut Child, admin: &str, code: u16) -> serde_json::Value {
    let mut last = None;
    run.wait_until(child, &format!("/ready answered {code}"), || {
        last = get(admin, "/ready");
        last.as_ref().is_some_and(|(status, _)| *status == code)
    });
    last.expect("answered").1
}

/// The one reason of `/ready` that names sink `out`.
fn sink_reason(ready: &serde_json::Value) -> String {
    ready["reasons"]
        .as_array()
        .expect("reasons")
        .iter()
        .filter_map(|reason| reason.as_str())
        .find(|reason| reason.contains("sink 'out'"))
        .unwrap_or_else(|| panic!("a reason names the sink: {ready}"))
        .to_owned()
}

fn restart(run: &LedgerRun, child: Child, config: &str) -> Child {
    let mut child = child;
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    std::fs::write(run.path("mongoose.toml"), config).expect("config");
    run.spawn(false)
}

#[test]
fn ready_is_503_while_a_sink_fails_its_handshakes() {
    let total = 300;
    let input: String = (0..total).map(|i| format!("{{\"line\":{i}}}\n")).collect();
    let ca = TestCa::new("server CA");
    let other = TestCa::new("a CA the target's certificate is not signed by");
    let target = HttpsTarget::start(&ca.issue(&["127.0.0.1"]), None);
    let admin = format!("127.0.0.1:{}", free_port());
    let mut run = LedgerRun::new("", &config(&admin, &target.url(), Some("tls/other.pem")));
    run.log_filter = "info";
    let tls = run.path("tls");
    std::fs::create_dir(&tls).expect("tls folder");
    std::fs::write(tls.join("ca.pem"), ca.cert_pem()).expect("ca");
    std::fs::write(tls.join("other.pem"), other.cert_pem()).expect("other ca");

    // nothing to send: ready, and the target is not probed
    let mut child = run.spawn(false);
    ready_becomes(&run, &mut child, &admin, 200);

    // lines to send, every handshake fails: not ready, naming the sink and the error
    std::fs::write(run.path("input.txt"), &input).expect("input");
    let ready = ready_becomes(&run, &mut child, &admin, 503);
    let reason = sink_reason(&ready);
    assert!(
        reason.contains("cannot deliver") && reason.to_lowercase().contains("certificate"),
        "the reason says why: {reason}"
    );
    let (_, status) = get(&admin, "/status").expect("status");
    let sink = &status["sinks"][0];
    assert_eq!(sink["name"], "out", "{status}");
    assert!(
        sink["cannotDeliver"]
            .as_str()
            .is_some_and(|error| error.to_lowercase().contains("certificate")),
        "/status shows it on the sink: {sink}"
    );
    assert_eq!(sink["heldCount"], 0, "nothing is held yet: {sink}");
    // and `mongoose status` says it under the sink
    let text = std::process::Command::new(support::binary())
        .args(["status", "--admin", &admin])
        .output()
        .expect("mongoose status runs");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(
            "cannot deliver (not ready until a delivery succeeds): not sent, the TLS handshake"
        ),
        "{text}"
    );

    // a target that refuses connections: not ready either
    let refused = format!("http://127.0.0.1:{}/events", free_port());
    let mut child = restart(&run, child, &config(&admin, &refused, None));
    let ready = ready_becomes(&run, &mut child, &admin, 503);
    let reason = sink_reason(&ready);
    assert!(
        reason.contains("cannot deliver") && reason.contains("127.0.0.1"),
        "the reason names the sink's last error: {reason}"
    );

    // the right CA: ready again, every line delivered once
    let mut child = restart(
        &run,
        child,
        &config(&admin, &target.url(), Some("tls/ca.pem")),
    );
    run.wait_until(&mut child, "every line delivered", || {
        target
            .requests()
            .iter()
            .map(|request| request.lines().len())
            .sum::<usize>()
            >= total
    });
    let ready = ready_becomes(&run, &mut child, &admin, 200);
    assert_eq!(ready["ready"], true, "{ready}");
    let (_, status) = get(&admin, "/status").expect("status");
    assert!(
        status["sinks"][0]["cannotDeliver"].is_null(),
        "cleared by the first delivery: {status}"
    );
    let mut held: BTreeMap<String, String> = BTreeMap::new();
    let mut sent = 0;
    for request in target.requests() {
        for (key, line) in request.keys().into_iter().zip(request.lines()) {
            sent += 1;
            assert!(held.insert(key, line).is_none(), "a line delivered twice");
        }
    }
    assert_eq!(sent, total, "every line delivered once");
    let mut lines: Vec<String> = held.into_values().collect();
    lines.sort();
    let mut expected: Vec<String> = input.lines().map(str::to_owned).collect();
    expected.sort();
    assert_eq!(lines, expected);
    assert_eq!(run.terminate(child), 0, "{}", run.log());
}
