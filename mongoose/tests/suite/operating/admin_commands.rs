//! Processor-owned admin commands over HTTP: the ledger's `balance ACCOUNT`, listed by
//! `GET /processors/{group}/{name}/commands` and run by `POST
//! /processors/{group}/{name}/commands/{command}`; recorded as AdminInvoked and replayed
//! (book: running/record-and-replay.md: AdminInvoked, adminReplies()).

use mongoose::kinds as ledger_kind;

use std::time::{Duration, Instant};

use mongoose_server::config::ServerConfig;
use mongoose_server::{admin, replay, Server};

fn config(state: &str, alerts: &str, record: bool) -> String {
    let record = if record {
        "[record]\ndir = \"recording\"\nprocessors = [\"ledger\"]\n"
    } else {
        ""
    };
    format!(
        r#"{record}
[[feeds]]
name = "lines"
source = "file"
path = "input.txt"
read_strategy = "ONCE_EARLIEST"

[[groups]]
name = "bank"
[[groups.processors]]
name = "ledger"
kind = "ledger"
settings = {{ state_dir = "{state}", alerts = "{alerts}", sync = false }}
"#
    )
}

/// `POST` with an optional body; the status and the JSON answer.
fn post(address: &str, path: &str, body: Option<&str>) -> (u16, serde_json::Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let request = agent.post(&format!("http://{address}{path}"));
    let mut response = match body {
        Some(body) => request
            .header("content-type", "application/json")
            .send(body),
        None => request.send_empty(),
    }
    .expect("answered");
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("json: {text}")),
    )
}

fn get(address: &str, path: &str) -> (u16, serde_json::Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut response = agent
        .get(&format!("http://{address}{path}"))
        .call()
        .expect("answered");
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().expect("body");
    (status, serde_json::from_str(&text).expect("json"))
}

// book: running/record-and-replay.md: AdminInvoked ("a processor-owned admin command
// ran: its name and arguments"), replayed from the command the replayed processor registered
#[test]
fn the_ledgers_balance_command_runs_over_http_and_replays_to_the_same_answers() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("input.txt"), "acc1,5\nacc2,-3\nacc1,7\n").expect("input");
    let live =
        ServerConfig::parse(&config("live", "live-alerts.txt", true), dir.path()).expect("config");
    let server = ledger_kind::register(Server::builder(live))
        .build()
        .expect("built");
    server.start().expect("started");
    let handle = admin::serve(server.clone(), "127.0.0.1:0").expect("admin");
    let address = handle.address.to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !server.status().settled {
        assert!(Instant::now() < deadline, "never settled");
        std::thread::sleep(Duration::from_millis(5));
    }

    let (code, listed) = get(&address, "/processors/bank/ledger/commands");
    assert_eq!(code, 200, "{listed}");
    assert_eq!(listed["commands"], serde_json::json!(["balance"]));
    let (code, _) = get(&address, "/processors/bank/nobody/commands");
    assert_eq!(code, 404);

    let path = "/processors/bank/ledger/commands/balance";
    let (code, balance) = post(&address, path, Some(r#"{"args": ["acc1"]}"#));
    assert_eq!(code, 200, "{balance}");
    assert_eq!(balance["outcome"], "APPLIED");
    assert_eq!(balance["output"], "12");
    let (code, overdrawn) = post(&address, path, Some(r#"{"args": ["acc2"]}"#));
    assert_eq!((code, overdrawn["output"].clone()), (200, "-3".into()));

    // the command's own error: FAILED, 409, the ledger keeps running
    let (code, unknown_account) = post(&address, path, Some(r#"{"args": ["acc9"]}"#));
    assert_eq!(code, 409, "{unknown_account}");
    assert_eq!(unknown_account["outcome"], "FAILED");
    assert_eq!(
        unknown_account["reason"],
        "admin command 'balance' failed: no account 'acc9' in the ledger"
    );
    let (code, usage) = post(&address, path, None);
    assert_eq!(code, 409, "{usage}");
    assert!(
        usage["reason"]
            .as_str()
            .is_some_and(|reason| reason.ends_with("usage: balance ACCOUNT")),
        "{usage}"
    );

    // unknown command or processor: REFUSED, 404, with what there is
    let (code, no_command) = post(&address, "/processors/bank/ledger/commands/reset", None);
    assert_eq!(code, 404, "{no_command}");
    assert_eq!(
        no_command["reason"],
        "processor 'ledger' has no admin command 'reset' (its commands: balance)"
    );
    let (code, no_processor) = post(&address, "/processors/bank/nobody/commands/balance", None);
    assert_eq!(code, 404, "{no_processor}");
    let (code, no_group) = post(&address, "/processors/vault/ledger/commands/balance", None);
    assert_eq!(code, 404, "{no_group}");
    let (code, bad_body) = post(&address, path, Some(r#"{"args": "acc1"}"#));
    assert_eq!(code, 400, "{bad_body}");

    assert!(server.status().settled);
    assert_eq!(server.group_statuses()[0].quarantined.len(), 0);
    assert!(server.shutdown().complete);

    // the recording replays: the same four answers from the command the replayed
    // ledger registered
    let scratch = ServerConfig::parse(&config("scratch", "scratch-alerts.txt", false), dir.path())
        .expect("config");
    let reports = replay(
        ledger_kind::register(Server::builder(scratch)),
        &dir.path().join("recording"),
    )
    .expect("replayed");
    let (group, report) = &reports[0];
    assert_eq!(group, "bank");
    assert!(report.reproduced(), "{report}");
    let answers: Vec<String> = report
        .replay
        .admin_replies("ledger")
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        answers,
        [
            "balance acc1 -> 12",
            "balance acc2 -> -3",
            "balance acc9 -> error: no account 'acc9' in the ledger",
            "balance -> error: usage: balance ACCOUNT",
        ]
    );
    assert!(
        report
            .to_string()
            .contains("admin replies: 4 replayed, identical to the recorded run"),
        "{report}"
    );
}
