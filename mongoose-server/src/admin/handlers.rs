//! The admin routes' handlers (status, groups, stop, commands, overload, release, sink
//! retry, audit export) and the Prometheus metrics.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;
use tracing::info;

use mongoose_control::{ControlReply, ReplyOutcome};
use mongoose_core::FailureKind;

use crate::server::Server;

use super::auth::{body_too_large, error_response};
use super::{MAX_BODY_BYTES, MAX_EXPORT_NAME};

fn not_found(what: String) -> Response {
    (StatusCode::NOT_FOUND, Json(json!({ "error": what }))).into_response()
}

pub(super) async fn status(State(server): State<Server>) -> Response {
    let mut status = serde_json::to_value(server.status()).unwrap_or_default();
    if let Some(object) = status.as_object_mut() {
        object.insert("sinks".to_owned(), json!(server.sink_statuses()));
        object.insert(
            "processors".to_owned(),
            serde_json::Value::Object(server.processor_reports()),
        );
        object.insert(
            "configGeneration".to_owned(),
            json!(server.config_generation()),
        );
        object.insert("lastReload".to_owned(), json!(server.last_reload()));
    }
    Json(status).into_response()
}

/// `GET /health`: the process serves.
pub(super) async fn health() -> Response {
    Json(json!({ "status": "alive" })).into_response()
}

/// Why the server is not ready, one reason each: a feed whose source has not started,
/// a stalled feed, a failed source, a run that cannot go on. Empty when ready.
pub(crate) fn not_ready_reasons(server: &Server) -> Vec<String> {
    let report = server.status();
    let mut reasons = Vec::new();
    for feed in &report.feeds {
        if feed.state == "STARTING" {
            reasons.push(format!(
                "feed '{}' has not started yet (STARTING)",
                feed.feed
            ));
        }
        if let Some(stalled) = &feed.stalled {
            reasons.push(format!("feed '{}' stalled: {stalled}", feed.feed));
        }
    }
    reasons.extend(crate::server::source_failures_in(&report));
    // a sink whose target cannot be reached: nothing it is given can be delivered,
    // whether or not anything is held yet (a sink that has sent nothing is ready)
    for sink in server.sink_statuses() {
        if let Some(error) = &sink.cannot_deliver {
            reasons.push(format!(
                "sink '{}' cannot deliver: its last attempt could not reach its target: {error}",
                sink.name
            ));
        }
    }
    reasons.extend(server.fatal_failures());
    reasons
}

/// `GET /ready`: 200 when every feed started, nothing is stalled and every sink can
/// deliver, else 503 with the reasons.
pub(super) async fn ready(State(server): State<Server>) -> Response {
    let reasons = tokio::task::spawn_blocking(move || not_ready_reasons(&server))
        .await
        .unwrap_or_else(|error| vec![format!("the readiness check failed: {error}")]);
    if reasons.is_empty() {
        Json(json!({ "ready": true, "reasons": [] })).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "ready": false, "reasons": reasons })),
        )
            .into_response()
    }
}

pub(super) async fn groups(State(server): State<Server>) -> Response {
    Json(server.group_statuses()).into_response()
}

pub(super) async fn stop_processor(
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

pub(super) async fn clear_overload(
    State(server): State<Server>,
    Path(feed): Path<String>,
) -> Response {
    match server.feed(&feed) {
        Some(found) => {
            found.clear_overload();
            Json(json!({ "feed": feed, "cleared": true })).into_response()
        }
        None => not_found(format!("no feed named '{feed}'")),
    }
}

#[derive(Deserialize)]
pub(super) struct ReleaseQuery {
    queue: Option<String>,
}

pub(super) async fn release(
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

pub(super) async fn retry_sink(State(server): State<Server>, Path(sink): Path<String>) -> Response {
    match server.retry_sink(&sink) {
        Ok(requested) => {
            info!(
                sink,
                retrying = requested.retrying,
                held = requested.held,
                "an operator asked the sink to retry now"
            );
            Json(json!({
                "sink": sink,
                "retrying": requested.retrying,
                "held": requested.held,
            }))
            .into_response()
        }
        Err(reason) => not_found(reason),
    }
}

#[derive(Deserialize)]
pub(super) struct ExportQuery {
    dir: Option<String>,
}

/// Where exports go (the router's extension).
#[derive(Clone, Debug)]
pub(super) struct ExportRoot(pub(super) Arc<PathBuf>);

/// Whether `name` may name an export folder: `[A-Za-z0-9._-]{1,64}`, not `.` or `..`.
fn is_export_name(name: &str) -> bool {
    (1..=MAX_EXPORT_NAME).contains(&name.len())
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
}

pub(super) async fn export_audit(
    State(server): State<Server>,
    Extension(ExportRoot(root)): Extension<ExportRoot>,
    Path(group): Path<String>,
    query: Result<Query<ExportQuery>, QueryRejection>,
) -> Response {
    let name = match query {
        Ok(Query(ExportQuery { dir: Some(name) })) if is_export_name(&name) => name,
        _ => {
            return error_response(
                StatusCode::BAD_REQUEST,
                format!(
                    "?dir= must name a new folder directly below the export root {}: [A-Za-z0-9._-]{{1,{MAX_EXPORT_NAME}}}, not '.' or '..' (no paths)",
                    root.display()
                ),
            )
        }
    };
    let Some(found) = server.control().group(&group) else {
        return not_found(format!("no group named '{group}'"));
    };
    let result = tokio::task::spawn_blocking(move || -> Result<serde_json::Value, (StatusCode, String)> {
        let internal = |what: String| (StatusCode::INTERNAL_SERVER_ERROR, what);
        std::fs::create_dir_all(&*root).map_err(|error| {
            internal(format!(
                "cannot create the export root {}: {error}",
                root.display()
            ))
        })?;
        let folder = root.join(&name);
        std::fs::create_dir(&folder).map_err(|error| {
            if error.kind() == std::io::ErrorKind::AlreadyExists {
                (
                    StatusCode::CONFLICT,
                    format!(
                        "{} already exists: an export never overwrites another, choose a new ?dir= name",
                        folder.display()
                    ),
                )
            } else {
                internal(format!("cannot create {}: {error}", folder.display()))
            }
        })?;
        // the new folder's name is durable (the export syncs the files in it)
        mongoose_durable::disk::sync_folder(&root).map_err(|error| {
            internal(format!("cannot sync the export root {}: {error}", root.display()))
        })?;
        let file = if is_export_name(&group) {
            format!("{group}.control-audit.jsonl")
        } else {
            "control-audit.jsonl".to_owned()
        };
        let path = folder.join(file);
        let manifest = found
            .audit()
            .export(&path)
            .map_err(|error| internal(format!("the export failed: {error}")))?;
        let verification = mongoose_audit::verify(&path);
        info!(group, export = %path.display(), ?verification, "control audit exported");
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
        Ok(Err((status, message))) => error_response(status, message),
        Err(error) => error_response(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
    }
}

pub(super) async fn metrics_text(State(server): State<Server>) -> Response {
    let text = tokio::task::spawn_blocking(move || {
        crate::metrics::record_metrics(&server);
        crate::metrics::prometheus().render()
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

pub(super) async fn list_commands(
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

/// The query of `GET .../state`.
#[derive(Deserialize)]
pub(super) struct StateQuery {
    key: Option<String>,
}

/// `GET /processors/{group}/{name}/state?key=K`: the processor's `state` admin command
/// (an aggregate's: the key's aggregates as JSON). 404 for no such running processor,
/// one without a `state` command, or an unknown key; 400 for a missing or malformed key.
pub(super) async fn processor_state(
    State(server): State<Server>,
    Path((group, name)): Path<(String, String)>,
    Query(query): Query<StateQuery>,
) -> Response {
    let Some(key) = query.key else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({ "error": "give the key: ?key=V1,V2 (the group_by values, comma-separated)" })),
        )
            .into_response();
    };
    match server.control().admin_commands(&group, &name) {
        Some(commands) if commands.iter().any(|command| command == "state") => {}
        Some(_) => {
            return not_found(format!(
                "the processor '{name}' of group '{group}' keeps no state to query (it is not an aggregate)"
            ))
        }
        None => return not_found(format!("no running processor '{name}' in group '{group}'")),
    }
    let reply = tokio::task::spawn_blocking(move || {
        server
            .control()
            .invoke_admin_command_wait(&group, &name, "state", vec![key], COMMAND_WAIT)
    })
    .await;
    let reply = match reply {
        Ok(Some(reply)) => reply,
        Ok(None) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({ "error": format!("no reply within {}s", COMMAND_WAIT.as_secs()) })),
            )
                .into_response()
        }
        Err(error) => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                Json(json!({ "error": error.to_string() })),
            )
                .into_response()
        }
    };
    if reply.outcome != ReplyOutcome::Applied {
        return (command_status(&reply), Json(reply)).into_response();
    }
    let output: serde_json::Value = reply
        .output
        .as_deref()
        .and_then(|output| serde_json::from_str(output).ok())
        .unwrap_or_default();
    match output.get("status").and_then(serde_json::Value::as_u64) {
        Some(code) => (
            StatusCode::from_u16(code as u16).unwrap_or(StatusCode::BAD_REQUEST),
            Json(json!({ "error": output.get("error").cloned().unwrap_or_default() })),
        )
            .into_response(),
        None => Json(output).into_response(),
    }
}

/// The body of `POST .../commands/{command}`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct CommandBody {
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

pub(super) async fn run_command(
    State(server): State<Server>,
    Path((group, name, command)): Path<(String, String, String)>,
    body: Body,
) -> Response {
    let Ok(body) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return body_too_large();
    };
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
