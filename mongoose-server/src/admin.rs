//! The admin API over HTTP (axum), on 127.0.0.1 by default:
//!
//! | route | what it does |
//! |---|---|
//! | `GET /status` | the feed status JSON (§7 field names) |
//! | `GET /groups` | every processor group's status |
//! | `POST /processors/{group}/{name}/stop` | stops a processor, waiting up to 1 s for its reply |
//! | `GET /processors/{group}/{name}/commands` | the admin commands the running processor registered: `{"group", "processor", "commands": [..]}` (404 when no such running processor) |
//! | `POST /processors/{group}/{name}/commands/{command}` | runs one, with the JSON body `{"args": ["..."]}` (or no body: no arguments), waiting up to 5 s; answers its control reply (the command's text in `output`) |
//! | `POST /feeds/{feed}/overload/clear` | clears the feed's overload latches |
//! | `POST /feeds/{feed}/release[?queue=Q]` | the operator release of a held position: accepts the loss of a removed consumer's backlog, counted in `dropped` |
//! | `POST /groups/{group}/audit/export?dir=D` | exports the group's control audit (JSON Lines + manifest) into the new folder D and verifies it |
//! | `GET /metrics` | Prometheus text |
//!
//! The HTTP status of a command run ([`command_status`]): 200 APPLIED; 404 REFUSED
//! because the processor or the command is unknown (the reason lists what there is);
//! 409 FAILED because the command returned an error (the processor keeps running), or
//! REFUSED because the processor is quarantined; 500 FAILED because the command
//! panicked and its processor was quarantined; 503 NOT_RUNNING or a full mailbox; 202
//! when no reply came within 5 s (the command still runs); 400 for a body that is not
//! `{"args": [strings]}`.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde::Deserialize;
use serde_json::json;
use tracing::{error, info};

use mongoose_control::{ControlReply, ReplyOutcome};
use mongoose_core::FailureKind;

use crate::server::Server;
use crate::ServerError;

fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            error!(
                "another metrics recorder is installed: /metrics shows only what this one records"
            );
        }
        handle
    })
}

/// Updates the gauges from the current status (per feed and queue, per group).
pub fn record_metrics(server: &Server) {
    prometheus();
    let report = server.status();
    for feed in &report.feeds {
        let name = feed.feed.clone();
        metrics::gauge!("mongoose_feed_published", "feed" => name.clone())
            .set(feed.sequence as f64);
        metrics::gauge!("mongoose_feed_dropped", "feed" => name.clone()).set(feed.dropped as f64);
        metrics::gauge!("mongoose_feed_refused", "feed" => name.clone()).set(feed.refused as f64);
        metrics::gauge!("mongoose_feed_paused", "feed" => name.clone()).set(if feed.paused {
            1.0
        } else {
            0.0
        });
        metrics::gauge!("mongoose_feed_pauses", "feed" => name.clone()).set(feed.pauses as f64);
        metrics::gauge!("mongoose_feed_pending_acks", "feed" => name.clone())
            .set(feed.pending_acks as f64);
        metrics::gauge!("mongoose_feed_lossless", "feed" => name.clone()).set(if feed.lossless {
            1.0
        } else {
            0.0
        });
        for queue in &feed.subscribers {
            let depth = queue.position.saturating_sub(queue.dispatched);
            metrics::gauge!("mongoose_queue_depth", "queue" => queue.queue.clone())
                .set(depth as f64);
            metrics::gauge!("mongoose_queue_dispatched", "queue" => queue.queue.clone())
                .set(queue.dispatched as f64);
        }
    }
    for group in server.group_statuses() {
        metrics::gauge!("mongoose_group_processors", "group" => group.group.clone())
            .set(group.running.len() as f64);
        metrics::gauge!("mongoose_group_quarantined", "group" => group.group.clone())
            .set(group.quarantined.len() as f64);
    }
}

fn not_found(what: String) -> Response {
    (StatusCode::NOT_FOUND, Json(json!({ "error": what }))).into_response()
}

async fn status(State(server): State<Server>) -> Response {
    Json(server.status()).into_response()
}

async fn groups(State(server): State<Server>) -> Response {
    Json(server.group_statuses()).into_response()
}

async fn stop_processor(
    State(server): State<Server>,
    Path((group, name)): Path<(String, String)>,
) -> Response {
    let reply = tokio::task::spawn_blocking(move || {
        server
            .control()
            .stop_processor_wait(&group, &name, Duration::from_secs(1))
            .ok_or((group, name))
    })
    .await;
    match reply {
        Ok(Ok(reply)) => Json(reply).into_response(),
        Ok(Err((group, name))) => (
            StatusCode::ACCEPTED,
            Json(json!({ "pending": format!("stop pending (still applies): {group}/{name}") })),
        )
            .into_response(),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": error.to_string() })),
        )
            .into_response(),
    }
}

async fn clear_overload(State(server): State<Server>, Path(feed): Path<String>) -> Response {
    match server.feed(&feed) {
        Some(found) => {
            found.clear_overload();
            Json(json!({ "feed": feed, "cleared": true })).into_response()
        }
        None => not_found(format!("no feed named '{feed}'")),
    }
}

#[derive(Deserialize)]
struct ReleaseQuery {
    queue: Option<String>,
}

async fn release(
    State(server): State<Server>,
    Path(feed): Path<String>,
    Query(query): Query<ReleaseQuery>,
) -> Response {
    match server.feed(&feed) {
        Some(found) => match found.release(query.queue.as_deref()) {
            Ok(released) => {
                if released.items > 0 || !released.queues.is_empty() {
                    server.record_loss(
                        &feed,
                        format!(
                            "an operator released {} held items (queues: {})",
                            released.items,
                            released.queues.join(", ")
                        ),
                    );
                }
                Json(json!({
                    "feed": feed,
                    "queue": query.queue,
                    "released": released.items,
                    "queues": released.queues,
                }))
                .into_response()
            }
            Err(error) => not_found(error.to_string()),
        },
        None => not_found(format!("no feed named '{feed}'")),
    }
}

#[derive(Deserialize)]
struct ExportQuery {
    dir: std::path::PathBuf,
}

async fn export_audit(
    State(server): State<Server>,
    Path(group): Path<String>,
    Query(query): Query<ExportQuery>,
) -> Response {
    let Some(found) = server.control().group(&group) else {
        return not_found(format!("no group named '{group}'"));
    };
    let result = tokio::task::spawn_blocking(move || -> Result<serde_json::Value, String> {
        std::fs::create_dir_all(&query.dir).map_err(|error| error.to_string())?;
        let path = query.dir.join(format!("{group}.control-audit.jsonl"));
        let manifest = found
            .audit()
            .export(&path)
            .map_err(|error| error.to_string())?;
        let verification = mongoose_control::verify(&path);
        Ok(json!({
            "group": group,
            "export": path,
            "manifest": manifest,
            "verification": verification,
        }))
    })
    .await;
    match result {
        Ok(Ok(body)) => Json(body).into_response(),
        Ok(Err(error)) => {
            (StatusCode::BAD_REQUEST, Json(json!({ "error": error }))).into_response()
        }
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": error.to_string() })),
        )
            .into_response(),
    }
}

async fn metrics_text(State(server): State<Server>) -> Response {
    let text = tokio::task::spawn_blocking(move || {
        record_metrics(&server);
        prometheus().render()
    })
    .await
    .unwrap_or_default();
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        text,
    )
        .into_response()
}

/// How long `POST .../commands/{command}` waits for the reply.
const COMMAND_WAIT: Duration = Duration::from_secs(5);

async fn list_commands(
    State(server): State<Server>,
    Path((group, name)): Path<(String, String)>,
) -> Response {
    match server.control().admin_commands(&group, &name) {
        Some(commands) => {
            Json(json!({ "group": group, "processor": name, "commands": commands })).into_response()
        }
        None => not_found(format!("no running processor '{name}' in group '{group}'")),
    }
}

/// The body of `POST .../commands/{command}`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CommandBody {
    #[serde(default)]
    args: Vec<String>,
}

/// The HTTP status of an admin command's reply (see the module docs).
pub fn command_status(reply: &ControlReply) -> StatusCode {
    match (reply.outcome, reply.kind) {
        (ReplyOutcome::Applied, _) => StatusCode::OK,
        (ReplyOutcome::Refused, FailureKind::RefusedState) => StatusCode::NOT_FOUND,
        (ReplyOutcome::Refused, FailureKind::Quarantined) => StatusCode::CONFLICT,
        (ReplyOutcome::Refused, _) => StatusCode::SERVICE_UNAVAILABLE,
        (ReplyOutcome::Failed, FailureKind::Quarantined) => StatusCode::INTERNAL_SERVER_ERROR,
        (ReplyOutcome::Failed, _) => StatusCode::CONFLICT,
        (ReplyOutcome::NotRunning, _) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

async fn run_command(
    State(server): State<Server>,
    Path((group, name, command)): Path<(String, String, String)>,
    body: Bytes,
) -> Response {
    let body: CommandBody = if body.iter().all(u8::is_ascii_whitespace) {
        CommandBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(body) => body,
            Err(error) => {
                return (
                    StatusCode::BAD_REQUEST,
                    Json(json!({
                        "error": format!("the body must be {{\"args\": [\"...\"]}}: {error}")
                    })),
                )
                    .into_response()
            }
        }
    };
    let reply = tokio::task::spawn_blocking(move || {
        server
            .control()
            .invoke_admin_command_wait(&group, &name, &command, body.args, COMMAND_WAIT)
            .ok_or((group, name, command))
    })
    .await;
    match reply {
        Ok(Ok(reply)) => (command_status(&reply), Json(reply)).into_response(),
        Ok(Err((group, name, command))) => (
            StatusCode::ACCEPTED,
            Json(json!({
                "pending": format!("admin command '{command}' of {group}/{name}: no reply within {}s (it still runs)", COMMAND_WAIT.as_secs())
            })),
        )
            .into_response(),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": error.to_string() })),
        )
            .into_response(),
    }
}

/// The admin routes over a server.
pub fn router(server: Server) -> Router {
    Router::new()
        .route("/status", get(status))
        .route("/groups", get(groups))
        .route("/processors/{group}/{name}/stop", post(stop_processor))
        .route("/processors/{group}/{name}/commands", get(list_commands))
        .route(
            "/processors/{group}/{name}/commands/{command}",
            post(run_command),
        )
        .route("/feeds/{feed}/overload/clear", post(clear_overload))
        .route("/feeds/{feed}/release", post(release))
        .route("/groups/{group}/audit/export", post(export_audit))
        .route("/metrics", get(metrics_text))
        .with_state(server)
}

/// A running admin API; dropping it does not stop it (the process ends it).
#[derive(Debug)]
pub struct AdminHandle {
    /// The address it listens on (the port is the real one when 0 was asked).
    pub address: SocketAddr,
}

/// Starts the admin API on its own thread and runtime.
pub fn serve(server: Server, address: &str) -> Result<AdminHandle, ServerError> {
    let address: SocketAddr = address.parse().map_err(|_| {
        ServerError::invalid("admin.address", format!("'{address}' is not host:port"))
    })?;
    let listener = std::net::TcpListener::bind(address).map_err(|error| ServerError::Io {
        context: format!("cannot listen on {address} for the admin API"),
        error,
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|error| ServerError::Io {
            context: "cannot configure the admin listener".into(),
            error,
        })?;
    let bound = listener.local_addr().map_err(|error| ServerError::Io {
        context: "cannot read the admin address".into(),
        error,
    })?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("mongoose-admin")
        .enable_all()
        .build()
        .map_err(|error| ServerError::Io {
            context: "cannot start the admin runtime".into(),
            error,
        })?;
    std::thread::Builder::new()
        .name("mongoose-admin-main".into())
        .spawn(move || {
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(listener) => listener,
                    Err(error) => {
                        error!(%error, "the admin listener failed");
                        return;
                    }
                };
                if let Err(error) = axum::serve(listener, router(server)).await {
                    error!(%error, "the admin API stopped");
                }
            });
        })
        .map_err(|error| ServerError::Io {
            context: "cannot start the admin thread".into(),
            error,
        })?;
    info!(address = %bound, "admin API listening");
    Ok(AdminHandle { address: bound })
}

/// `GET http://ADDRESS/PATH` with a short timeout; the body as text.
pub fn get_text(address: &str, path: &str) -> Result<String, ServerError> {
    let url = format!("http://{address}{path}");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut response = agent.get(&url).call().map_err(|error| ServerError::State(format!(
        "cannot reach the admin API at {address} ({error}): is the server running with an [admin] address?"
    )))?;
    response
        .body_mut()
        .read_to_string()
        .map_err(|error| ServerError::State(format!("cannot read the answer of {url}: {error}")))
}
