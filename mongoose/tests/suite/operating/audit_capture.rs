//! Audit capture through the server and its admin API (book: guarantees/control-plane.md): `POST
//! /audit/{selector}/start|stop`, `GET /audit/status`, the capture folder read back
//! with the file reader, names across groups, and a failed close that keeps the stop
//! incomplete.

use crate::support;

use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use mongoose_audit::capture::{
    CaptureFailure, CaptureIdentity, CaptureLayer, CaptureRecord, CaptureResources,
    CaptureSettings, CaptureSidecar, CaptureWriter,
};
use mongoose_core::{audit, Processor, ProcessorError, StartContext};
use mongoose_server::audit_journal::read_journal_capture;
use mongoose_server::config::ServerConfig;
use mongoose_server::{admin, Server};
use mongoose_source_file::Line;

const PATIENCE: Duration = Duration::from_secs(60);

/// The process's subscriber carries the capture layer, as the `mongoose` binary's does.
fn install_capture_layer() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;
        let _ = tracing_subscriber::registry().with(CaptureLayer).try_init();
    });
}

/// Logs each line it handles and writes an audit record of it.
struct Pricer {
    handled: Arc<AtomicUsize>,
}

impl Pricer {
    fn on_line(&mut self, line: &Line) -> Result<(), ProcessorError> {
        let text = line.text();
        tracing::info!(line = %text, "priced");
        audit::record(format!("record:{text}").as_bytes());
        self.handled.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

impl Processor for Pricer {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("lines", Pricer::on_line)
    }
}

fn config(groups: &str) -> String {
    format!(
        r#"
shutdown_timeout_millis = 10000
[[feeds]]
name = "lines"
source = "file"
path = "input.txt"
read_strategy = "COMMITED"
{groups}
"#
    )
}

fn append(dir: &Path, text: &str) {
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join("input.txt"))
        .expect("input");
    file.write_all(text.as_bytes()).expect("append");
}

fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn request(method: &str, address: &str, path: &str) -> (u16, serde_json::Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(40)))
        .build()
        .into();
    let url = format!("http://{address}{path}");
    let mut response = match method {
        "POST" => agent.post(&url).send_empty(),
        _ => agent.get(&url).call(),
    }
    .expect("answered");
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("json: {text}")),
    )
}

/// A started server with `pricer` processors in `groups`, and its admin address.
fn server(dir: &Path, groups: &[&str], handled: &Arc<AtomicUsize>) -> (Server, String) {
    install_capture_layer();
    std::fs::write(dir.join("input.txt"), "").expect("input");
    let group_tables: String = groups
        .iter()
        .map(|group| {
            format!("[[groups]]\nname = \"{group}\"\nidle_strategy = \"sleeping-millis:1\"\n")
        })
        .collect();
    let parsed = ServerConfig::parse(&config(&group_tables), dir).expect("config");
    let mut builder = Server::builder(parsed);
    for group in groups {
        let handled = Arc::clone(handled);
        builder = builder.processor(group, "pricer", move || Pricer { handled });
    }
    let server = builder.build().expect("built");
    server.start().expect("started");
    let handle = admin::serve(server.clone(), "127.0.0.1:0").expect("admin");
    (server, handle.address.to_string())
}

// book: guarantees/control-plane.md: start returns once the capture records; the
// processor's audit log (its tracing events and its records) goes to a fresh
// capture-* folder with an identity sidecar; stop returns once it is uninstalled
#[test]
fn audit_capture_start_records_a_processors_tracing_events_and_audit_records_then_stop() {
    let dir = tempfile::tempdir().expect("dir");
    let handled = Arc::new(AtomicUsize::new(0));
    let (server, address) = server(dir.path(), &["audited"], &handled);

    let (code, started) = request("POST", &address, "/audit/pricer/start");
    assert_eq!(code, 200, "{started}");
    assert_eq!(started["outcome"], "APPLIED");
    assert_eq!(started["reason"], "recording");
    let (code, again) = request("POST", &address, "/audit/audited%2Fpricer/start");
    assert_eq!(
        (code, again["reason"].clone()),
        (200, "already recording".into())
    );

    append(dir.path(), "a\nb\n");
    wait_until("both lines handled", || handled.load(Ordering::SeqCst) == 2);
    let (code, stopped) = request("POST", &address, "/audit/pricer/stop");
    assert_eq!(
        (code, stopped["reason"].clone()),
        (200, "stopped recording".into()),
        "{stopped}"
    );
    let (code, noop) = request("POST", &address, "/audit/pricer/stop");
    assert_eq!(
        (code, noop["reason"].clone()),
        (200, "not recording".into())
    );
    // after the stop nothing more is captured
    append(dir.path(), "c\n");
    wait_until("the third line handled", || {
        handled.load(Ordering::SeqCst) == 3
    });

    let mut sessions = serde_json::Value::Null;
    wait_until("the session closed", || {
        sessions = request("GET", &address, "/audit/status").1;
        sessions[0]["state"] == "closed"
    });
    assert_eq!(sessions.as_array().map(Vec::len), Some(1), "{sessions}");
    let session = &sessions[0];
    assert_eq!(session["selector"], "audited/pricer");
    assert_eq!(session["recording"], false);
    assert_eq!(session["records_written"], 4, "{session}");
    let folder = std::path::PathBuf::from(session["path"].as_str().expect("path"));
    assert_eq!(folder.parent(), Some(dir.path().join("captures").as_path()));
    assert!(folder
        .file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.starts_with("capture-")));

    // the default store: a journal in the session's folder, beside the sidecar
    let sidecar = CaptureSidecar::read(&folder).expect("the identity sidecar");
    assert_eq!(
        (sidecar.group.as_str(), sidecar.name.as_str()),
        ("audited", "pricer")
    );
    assert_eq!(sidecar.capture_id, session["id"].as_str().expect("id"));
    let records = read_journal_capture(&folder).expect("read back");
    let seen: Vec<String> = records
        .iter()
        .map(|record| match record {
            CaptureRecord::Event {
                level,
                target,
                text,
                ..
            } => format!("{level} {target}: {text}"),
            CaptureRecord::Record { bytes, .. } => String::from_utf8_lossy(bytes).into_owned(),
        })
        .collect();
    assert_eq!(
        seen,
        [
            // an event's target is the module it is logged from (this file's)
            format!("INFO {}: priced line=a", module_path!()),
            "record:a".to_owned(),
            format!("INFO {}: priced line=b", module_path!()),
            "record:b".to_owned(),
        ]
    );
    assert!(server.shutdown().complete);
}

// book: guarantees/control-plane.md: a name admitted in
// several groups is refused naming the groups; group/name addresses one
#[test]
fn an_ambiguous_processor_name_is_refused_naming_the_groups() {
    let dir = tempfile::tempdir().expect("dir");
    let handled = Arc::new(AtomicUsize::new(0));
    let (server, address) = server(dir.path(), &["west", "east"], &handled);

    let (code, refused) = request("POST", &address, "/audit/pricer/start");
    assert_eq!(code, 400, "{refused}");
    let message = refused["error"].as_str().expect("error");
    assert!(
        message.contains("several groups (east, west)") && message.contains("GROUP/NAME"),
        "{message}"
    );
    let (code, unknown) = request("POST", &address, "/audit/nobody/start");
    assert_eq!(code, 404, "{unknown}");
    let (code, started) = request("POST", &address, "/audit/east%2Fpricer/start");
    assert_eq!(
        (code, started["reason"].clone()),
        (200, "recording".into()),
        "{started}"
    );
    let (_, sessions) = request("GET", &address, "/audit/status");
    assert_eq!(sessions[0]["selector"], "east/pricer");
    assert_eq!(sessions[0]["recording"], true);
    assert!(server.shutdown().complete);
}

/// Storage whose close fails.
struct FailingClose;

struct FailingWriter;

impl CaptureWriter for FailingWriter {
    fn write(&mut self, _record: &[u8]) -> Result<(), CaptureFailure> {
        Ok(())
    }
    fn close(self: Box<Self>) -> Result<(), CaptureFailure> {
        Err("the device went away".into())
    }
}

impl CaptureResources for FailingClose {
    fn open(
        &self,
        _identity: &CaptureIdentity,
        _dir: &Path,
    ) -> Result<Box<dyn CaptureWriter>, CaptureFailure> {
        Ok(Box::new(FailingWriter))
    }
}

// book: guarantees/control-plane.md: a group
// closes its captures as it closes; a failed physical close is not counted as closed,
// and the stop stays incomplete
#[test]
fn a_failed_capture_close_keeps_the_shutdown_incomplete() {
    let dir = tempfile::tempdir().expect("dir");
    let handled = Arc::new(AtomicUsize::new(0));
    let (server, address) = server(dir.path(), &["audited"], &handled);
    server.control().enable_capture(CaptureSettings::new(
        dir.path().join("captures"),
        Arc::new(FailingClose),
    ));
    let (code, started) = request("POST", &address, "/audit/pricer/start");
    assert_eq!(code, 200, "{started}");

    let result = server.shutdown();
    assert!(!result.complete, "{result:?}");
    let held: Vec<&String> = result
        .groups_running
        .iter()
        .filter(|entry| entry.starts_with("capture:audited"))
        .collect();
    assert_eq!(held.len(), 1, "{result:?}");
    assert!(held[0].contains("the device went away"), "{}", held[0]);
    // resuming does not retry the close, and does not claim it closed
    let again = server.shutdown();
    assert!(!again.complete, "{again:?}");
}

/// Runs `mongoose audit ARGS --admin ADDRESS`; its exit code, stdout and stderr.
fn mongoose_audit(address: &str, args: &[&str]) -> (i32, String, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mongoose"))
        .arg("audit")
        .args(args)
        .args(["--admin", address])
        .output()
        .expect("the mongoose binary runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

// book: guarantees/control-plane.md: the admin commands audit.start / audit.stop
// print the outcome; audit.status prints id, selector and path
#[test]
fn the_mongoose_audit_commands_start_list_and_stop_a_capture_of_a_running_server() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let address = format!("127.0.0.1:{port}");
    let run = support::LedgerRun::new(
        "acc1,5\n",
        &support::ledger_config(
            &format!("[admin]\naddress = \"{address}\"\n[audit]\ncapture_dir = \"caps\"\n"),
            "",
            "state_dir = \"state\", alerts = \"alerts.txt\"",
        ),
    );
    let mut child = run.spawn(false);
    let mut started = (0, String::new(), String::new());
    run.wait_until(&mut child, "answered an audit start", || {
        started = mongoose_audit(&address, &["start", "ledger"]);
        !started.2.contains("cannot reach the admin API")
    });
    assert_eq!(started.0, 0, "{started:?}");
    assert_eq!(started.1.trim(), "audit: RECORDING ledger");
    let again = mongoose_audit(&address, &["start", "ledger/ledger"]);
    assert_eq!(
        again.1.trim(),
        "audit: ledger/ledger: already recording",
        "{again:?}"
    );
    let unknown = mongoose_audit(&address, &["start", "nobody"]);
    assert_eq!(unknown.0, 1, "{unknown:?}");
    assert!(unknown.2.contains("no processor 'nobody'"), "{unknown:?}");

    let (code, table, _) = mongoose_audit(&address, &["status"]);
    assert_eq!(code, 0);
    assert!(
        table.contains("ledger/ledger") && table.contains("recording"),
        "{table}"
    );
    assert!(
        table.contains(&run.path("caps").display().to_string()),
        "{table}"
    );
    let stopped = mongoose_audit(&address, &["stop", "ledger"]);
    assert_eq!(
        stopped.1.trim(),
        "audit: ledger: stopped recording",
        "{stopped:?}"
    );
    let (_, json, _) = mongoose_audit(&address, &["status", "--json"]);
    let sessions: serde_json::Value = serde_json::from_str(&json).expect("json");
    let folder = std::path::PathBuf::from(sessions[0]["path"].as_str().expect("path"));
    assert!(folder.join(".mongoose-capture.json").is_file(), "{json}");
    assert_eq!(run.terminate(child), 0, "{}", run.log());
}
