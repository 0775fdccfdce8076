//! The admin API and `mongoose status` against a running server.

use std::time::{Duration, Instant};

use mongoose_core::{Processor, ProcessorError, StartContext};
use mongoose_server::config::ServerConfig;
use mongoose_server::{admin, Line, Server};

struct Quiet;

impl Quiet {
    fn on_line(&mut self, _line: &Line) -> Result<(), ProcessorError> {
        Ok(())
    }
}

impl Processor for Quiet {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("lines", Quiet::on_line)
    }
}

fn post(address: &str, path: &str) -> (u16, serde_json::Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut response = agent
        .post(&format!("http://{address}{path}"))
        .send_empty()
        .expect("answered");
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().expect("body");
    (status, serde_json::from_str(&body).expect("json"))
}

#[test]
fn the_admin_api_reports_and_acts_and_the_cli_prints_a_table() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("input.txt"), "a\nb\nc\n").expect("input");
    let config = ServerConfig::parse(
        "[[feeds]]\nname = \"lines\"\nsource = \"file\"\npath = \"input.txt\"\n",
        dir.path(),
    )
    .expect("config");
    let server = Server::builder(config)
        .processor("g", "quiet", || Quiet)
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

    let status: serde_json::Value =
        serde_json::from_str(&admin::get_text(&address, "/status").expect("status")).expect("json");
    assert_eq!(status["settled"], true);
    assert_eq!(status["feeds"][0]["feed"], "lines");
    assert_eq!(status["feeds"][0]["sequence"], 3);

    let groups: serde_json::Value =
        serde_json::from_str(&admin::get_text(&address, "/groups").expect("groups")).expect("json");
    assert_eq!(groups[0]["group"], "g");

    let metrics = admin::get_text(&address, "/metrics").expect("metrics");
    assert!(
        metrics.contains("mongoose_feed_events_published_total{feed=\"lines\"} 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("mongoose_queue_events_dispatched_total{queue=\"g/lines\"} 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("mongoose_group_processors{group=\"g\"} 1"),
        "{metrics}"
    );

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mongoose"))
        .args(["status", "--admin", &address])
        .output()
        .expect("runs");
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(
        table.contains("settled: true") && table.contains("lines") && table.contains("PAUSE"),
        "{table}"
    );
    assert!(
        table.contains("GROUP") && table.contains("quiet"),
        "the groups table: {table}"
    );
    let json = std::process::Command::new(env!("CARGO_BIN_EXE_mongoose"))
        .args(["status", "--admin", &address, "--json"])
        .output()
        .expect("runs");
    let raw: serde_json::Value = serde_json::from_slice(&json.stdout).expect("raw json");
    assert_eq!(raw["lossless"], true);

    let (code, cleared) = post(&address, "/feeds/lines/overload/clear");
    assert_eq!(
        (code, cleared["cleared"].clone()),
        (200, serde_json::Value::Bool(true))
    );
    let (code, _) = post(&address, "/feeds/nope/overload/clear");
    assert_eq!(code, 404);
    let (code, released) = post(&address, "/feeds/lines/release");
    assert_eq!(
        (code, released["released"].clone()),
        (200, serde_json::json!(0))
    );

    // exports go below the export root (default: the config folder's exports/)
    let (code, exported) = post(&address, "/groups/g/audit/export?dir=audit");
    assert_eq!(code, 200, "{exported}");
    assert!(
        exported["export"].as_str().is_some_and(
            |path| path.starts_with(&dir.path().join("exports/audit").display().to_string())
        ),
        "{exported}"
    );
    let manifest = std::fs::read_to_string(exported["manifest"].as_str().expect("manifest path"))
        .unwrap_or_default();
    let lines = format!(
        "{exported}: {:?}",
        std::fs::read_to_string(exported["export"].as_str().expect("export path"))
    );
    assert_eq!(exported["verification"], "COMPLETE", "{manifest}\n{lines}");

    let (code, stopped) = post(&address, "/processors/g/quiet/stop");
    assert_eq!(code, 200, "{stopped}");
    assert_eq!(stopped["outcome"], "APPLIED", "{stopped}");
    let (_, unknown) = post(&address, "/processors/g/nobody/stop");
    assert_eq!(unknown["outcome"], "REFUSED", "{unknown}");
    assert!(server.shutdown().complete);
}
