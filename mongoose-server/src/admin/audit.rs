//! The audit capture routes (book: guarantees/control-plane.md):
//!
//! | route | what it does |
//! |---|---|
//! | `POST /audit/{selector}/start` | starts capturing a processor; answers once it records (up to 25 s) |
//! | `POST /audit/{selector}/stop` | stops it; answers once the capture is uninstalled |
//! | `GET /audit/status` | every session: `id`, `selector`, `path`, `recording`, `state`, `records_written`, `error` |
//!
//! `{selector}` is `NAME` or `GROUP/NAME`, percent-encoded as one path segment (so
//! `GROUP%2FNAME`); a `/` or `%` inside a group or processor name is encoded twice
//! (`%252F`). The answer of a start or stop is its control reply: 200 APPLIED
//! (`reason` "recording", "already recording", "stopped recording", "not recording");
//! 409 REFUSED or FAILED with the reason ("open timed out", "open failed: ...",
//! "unresolved capture open limit reached: ...", "capture resource limit reached:
//! ...", "quarantined: ..."); 503 NOT_RUNNING. Before the request reaches a group: 400
//! for a selector that does not parse or a name admitted in several groups (the
//! message names the groups and asks for `GROUP/NAME`), 404 for an unknown processor,
//! 409 when capture is disabled (`[audit] enabled = false`). 202 when no reply came in
//! time (the request still applies: see `GET /audit/status`).

use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use mongoose_control::{ControlError, ControlReply, ReplyHandle, ReplyOutcome};

use crate::server::Server;

use super::auth::error_response;

/// The longest a start or stop route waits for its reply (under the request timeout).
const CAPTURE_WAIT: Duration = Duration::from_secs(25);

/// The HTTP status of a capture start's or stop's reply.
fn reply_status(reply: &ControlReply) -> StatusCode {
    match reply.outcome {
        ReplyOutcome::Applied => StatusCode::OK,
        ReplyOutcome::Refused | ReplyOutcome::Failed => StatusCode::CONFLICT,
        ReplyOutcome::NotRunning => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// The HTTP status of a capture call refused before it reached a group.
fn error_status(error: &ControlError) -> StatusCode {
    match error {
        ControlError::BadSelector { .. } | ControlError::AmbiguousProcessor { .. } => {
            StatusCode::BAD_REQUEST
        }
        ControlError::UnknownProcessor { .. } | ControlError::NoSuchProcessor { .. } => {
            StatusCode::NOT_FOUND
        }
        ControlError::CaptureDisabled => StatusCode::CONFLICT,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    }
}

async fn capture_call(
    server: Server,
    selector: String,
    call: fn(&Server, &str) -> Result<ReplyHandle, ControlError>,
    what: &'static str,
) -> Response {
    let answer = tokio::task::spawn_blocking(move || {
        let handle = call(&server, &selector)?;
        Ok::<_, ControlError>((selector, handle.wait(Instant::now() + CAPTURE_WAIT)))
    })
    .await;
    match answer {
        Ok(Ok((_, Ok(reply)))) => (reply_status(&reply), Json(reply)).into_response(),
        Ok(Ok((selector, Err(_)))) => (
            StatusCode::ACCEPTED,
            Json(json!({
                "pending": format!("audit capture {what} of {selector}: no reply within {} s (it still applies: see GET /audit/status)", CAPTURE_WAIT.as_secs())
            })),
        )
            .into_response(),
        Ok(Err(error)) => error_response(error_status(&error), error.to_string()),
        Err(error) => error_response(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
    }
}

pub(super) async fn start_capture(
    State(server): State<Server>,
    Path(selector): Path<String>,
) -> Response {
    capture_call(
        server,
        selector,
        |server, selector| server.control().start_capture(selector),
        "start",
    )
    .await
}

pub(super) async fn stop_capture(
    State(server): State<Server>,
    Path(selector): Path<String>,
) -> Response {
    capture_call(
        server,
        selector,
        |server, selector| server.control().stop_capture(selector),
        "stop",
    )
    .await
}

pub(super) async fn capture_status(State(server): State<Server>) -> Response {
    Json(server.control().capture_statuses()).into_response()
}
