//! The admin API over HTTP (axum on hyper), on 127.0.0.1 by default:
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
//! | `POST /groups/{group}/audit/export?dir=D` | exports the group's control audit (JSON Lines + manifest) into the new folder `<export root>/D` and verifies it |
//! | `GET /metrics` | Prometheus text |
//!
//! The HTTP status of a command run ([`command_status`]): 200 APPLIED; 404 REFUSED
//! because the processor or the command is unknown (the reason lists what there is);
//! 409 FAILED because the command returned an error (the processor keeps running), or
//! REFUSED because the processor is quarantined; 500 FAILED because the command
//! panicked and its processor was quarantined; 503 NOT_RUNNING or a full mailbox; 202
//! when no reply came within 5 s (the command still runs); 400 for a body that is not
//! `{"args": [strings]}`.
//!
//! # Security
//!
//! * **Token.** With `[admin] token_file`, requests need `Authorization: Bearer
//!   <token>` (compared in constant time), else 401. On a loopback address `GET
//!   /status` and `GET /metrics` stay open; every other route needs the token. An
//!   address that is not loopback needs a token file (the config is refused without
//!   one), and then every route needs the token.
//! * **Exports** go only into a new folder `D` directly below the export root
//!   (`[admin] export_root`, default `<config folder>/exports`): `D` matches
//!   `[A-Za-z0-9._-]{1,64}` and is not `.` or `..` (else 400), and an existing `D` is a
//!   409: an export never overwrites.
//! * **Limits** ([`MAX_BODY_BYTES`], [`MAX_HEAD_BYTES`], [`HEADER_READ_TIMEOUT`],
//!   [`REQUEST_TIMEOUT`], [`MAX_CONNECTIONS`], [`MAX_CONNECTION_AGE`]): a body over the
//!   limit is a 413 (a declared one before it is read); a request line and headers that
//!   do not arrive within the header timeout, or a keep-alive connection idle that
//!   long, are closed; at most [`MAX_CONNECTIONS`] connections are open at once (the
//!   next ones wait in the kernel's accept queue, holding no descriptor of the
//!   server), so the admin API never holds more than that many file descriptors of the
//!   process and the processing path keeps the rest.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tracing::{debug, error, info, warn};

use mongoose_control::{ControlReply, ReplyOutcome};
use mongoose_core::FailureKind;

use crate::config::ServerConfig;
use crate::server::Server;
use crate::ServerError;

/// The largest request body (a command's `{"args": [...]}`): 64 KiB. A larger one is a
/// 413, answered before the body is read when its length is declared.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The largest request line plus headers: 16 KiB (hyper's read buffer; a longer head
/// closes the connection with a 431).
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// How long a request line and its headers may take to arrive, counted from the
/// connection's accept or from the end of the previous response (so it is also how long
/// a keep-alive connection may stay idle): 10 s, then the connection is closed.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one request may take once its head arrived (reading its body, running
/// it): 30 s, then 503 (a stop or command that was sent still applies).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections open at once: 64. The next ones wait in the kernel's accept queue
/// (they hold no file descriptor of the server) until one closes.
pub const MAX_CONNECTIONS: usize = 64;

/// The longest a connection lives: 120 s, then it is closed after its current
/// response (or at once if that response is not taken within 10 more seconds).
pub const MAX_CONNECTION_AGE: Duration = Duration::from_secs(120);

/// How long a connection past [`MAX_CONNECTION_AGE`] may take to finish its response.
const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// The shortest token accepted (characters).
pub const MIN_TOKEN_LENGTH: usize = 16;

/// The longest export folder name.
pub const MAX_EXPORT_NAME: usize = 64;

/// The admin API's bearer token. Its `Debug` never shows it.
#[derive(Clone)]
pub struct AdminToken {
    digest: [u8; 32],
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminToken(<redacted>)")
    }
}

impl AdminToken {
    /// A token from its text (trimmed).
    ///
    /// # Errors
    /// [`ServerError::Config`] at `admin.token_file` when it is empty, shorter than
    /// [`MIN_TOKEN_LENGTH`] or not printable ASCII without spaces.
    pub fn new(text: &str) -> Result<Self, ServerError> {
        let token = text.trim();
        if token.is_empty() {
            return Err(ServerError::invalid(
                "admin.token_file",
                "the token file is empty: put a random token in it, e.g. `openssl rand -hex 32 > admin.token && chmod 600 admin.token`",
            ));
        }
        if !token.bytes().all(|byte| byte.is_ascii_graphic()) {
            return Err(ServerError::invalid(
                "admin.token_file",
                "the token must be printable ASCII without spaces (it is sent in an HTTP header), e.g. `openssl rand -hex 32`",
            ));
        }
        if token.len() < MIN_TOKEN_LENGTH {
            return Err(ServerError::invalid(
                "admin.token_file",
                format!(
                    "the token is too short ({} characters): use at least {MIN_TOKEN_LENGTH}, e.g. `openssl rand -hex 32`",
                    token.len()
                ),
            ));
        }
        Ok(AdminToken {
            digest: Sha256::digest(token.as_bytes()).into(),
        })
    }

    /// Reads a token file: refused when it cannot be read, is readable by others, or
    /// holds no acceptable token ([`AdminToken::new`]).
    ///
    /// # Errors
    /// [`ServerError::Config`] at `admin.token_file`, saying what to do.
    pub fn read(path: &std::path::Path) -> Result<Self, ServerError> {
        let text = std::fs::read_to_string(path).map_err(|error| {
            ServerError::invalid(
                "admin.token_file",
                format!(
                    "cannot read the token file {}: {error}: create it with a random token, e.g. `openssl rand -hex 32 > {0} && chmod 600 {0}`",
                    path.display()
                ),
            )
        })?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(path)
                .map(|metadata| metadata.permissions().mode())
                .unwrap_or(0);
            if mode & 0o007 != 0 {
                return Err(ServerError::invalid(
                    "admin.token_file",
                    format!(
                        "the token file {} is open to every user (mode {:o}): `chmod 600 {}`",
                        path.display(),
                        mode & 0o777,
                        path.display()
                    ),
                ));
            }
        }
        AdminToken::new(&text)
    }

    /// Whether `offered` is this token, compared in constant time (of digests, so the
    /// time tells neither the token's length nor its prefix).
    pub fn matches(&self, offered: &str) -> bool {
        let offered: [u8; 32] = Sha256::digest(offered.as_bytes()).into();
        bool::from(self.digest.ct_eq(&offered))
    }
}

/// How the admin API is served: where, with which token, and where exports go.
#[derive(Clone, Debug)]
pub struct AdminSettings {
    /// Where to listen.
    pub address: String,
    /// The bearer token, if one is configured.
    pub token: Option<AdminToken>,
    /// The folder audit exports are written below.
    pub export_root: PathBuf,
}

impl AdminSettings {
    /// The settings of the config's `[admin]` section (reading its token file), or
    /// `None` when it has none.
    ///
    /// # Errors
    /// [`ServerError::Config`] when the token file is missing, empty or open to every
    /// user, or the address is not loopback and no token is configured.
    pub fn from_config(config: &ServerConfig) -> Result<Option<Self>, ServerError> {
        match &config.admin {
            Some(admin) => Self::at(config, &admin.address).map(Some),
            None => Ok(None),
        }
    }

    /// The settings of the config's `[admin]` section (or the defaults: no token,
    /// `<config folder>/exports`), listening on `address`.
    ///
    /// # Errors
    /// As [`AdminSettings::from_config`].
    pub fn at(config: &ServerConfig, address: &str) -> Result<Self, ServerError> {
        let admin = config.admin.as_ref();
        let token = match admin.and_then(|admin| admin.token_file.as_ref()) {
            Some(file) => Some(AdminToken::read(&config.resolve(file))?),
            None => None,
        };
        let export_root = config.resolve(
            admin
                .and_then(|admin| admin.export_root.as_deref())
                .unwrap_or(std::path::Path::new("exports")),
        );
        let settings = AdminSettings {
            address: address.to_owned(),
            token,
            export_root,
        };
        settings.check()?;
        Ok(settings)
    }

    fn socket_address(&self) -> Result<SocketAddr, ServerError> {
        self.address.parse().map_err(|_| {
            ServerError::invalid(
                "admin.address",
                format!(
                    "'{}' is not an address: expected host:port, e.g. 127.0.0.1:8089",
                    self.address
                ),
            )
        })
    }

    fn check(&self) -> Result<(), ServerError> {
        let address = self.socket_address()?;
        if !is_loopback(address) && self.token.is_none() {
            return Err(ServerError::invalid(
                "admin.address",
                format!(
                    "'{address}' is not a loopback address, so the admin API (which can stop processors, run their commands, export files and release held items) needs a bearer token: put a random token in a file only the server's user can read (e.g. `openssl rand -hex 32 > admin.token && chmod 600 admin.token`) and set token_file = \"admin.token\" in [admin], or listen on 127.0.0.1"
                ),
            ));
        }
        Ok(())
    }
}

fn is_loopback(address: SocketAddr) -> bool {
    address.ip().to_canonical().is_loopback()
}

/// Who may call what: the token, and whether the reads `/status` and `/metrics` are
/// open (on loopback).
#[derive(Debug)]
struct Guard {
    token: Option<AdminToken>,
    open_reads: bool,
}

impl Guard {
    fn needs_token(&self, method: &Method, path: &str) -> bool {
        if self.token.is_none() {
            return false;
        }
        let read = method == Method::GET || method == Method::HEAD;
        !(self.open_reads && read && (path == "/status" || path == "/metrics"))
    }

    fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split_once(' '))
            .is_some_and(|(scheme, offered)| {
                scheme.eq_ignore_ascii_case("bearer") && token.matches(offered.trim())
            })
    }
}

fn error_response(status: StatusCode, message: String) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

fn body_too_large() -> Response {
    error_response(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is larger than {MAX_BODY_BYTES} bytes, the admin API's limit: send shorter command arguments"),
    )
}

/// Authentication, the declared body size and the request deadline, before any route.
async fn guard(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    if guard.needs_token(request.method(), request.uri().path())
        && !guard.authorized(request.headers())
    {
        debug!(method = %request.method(), path = request.uri().path(), "admin request without a valid token refused");
        let mut response = error_response(
            StatusCode::UNAUTHORIZED,
            "this admin API needs its token: send the header 'Authorization: Bearer <token>' with the token of the file named by [admin] token_file (`mongoose status --token-file FILE`)".to_owned(),
        );
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer realm=\"mongoose-admin\""),
        );
        return response;
    }
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_BODY_BYTES as u64) {
        return body_too_large();
    }
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(request)).await {
        Ok(response) => response,
        Err(_) => error_response(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the request took longer than {} s and was abandoned (a stop or command already sent still applies: see /status and /groups)", REQUEST_TIMEOUT.as_secs()),
        ),
    }
}

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
    dir: Option<String>,
}

/// Where exports go (the router's extension).
#[derive(Clone, Debug)]
struct ExportRoot(Arc<PathBuf>);

/// Whether `name` may name an export folder: `[A-Za-z0-9._-]{1,64}`, not `.` or `..`.
fn is_export_name(name: &str) -> bool {
    (1..=MAX_EXPORT_NAME).contains(&name.len())
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
}

async fn export_audit(
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
        let verification = mongoose_control::verify(&path);
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

/// The admin routes over a server, guarded by `settings`' token and limits.
pub fn router(server: Server, settings: &AdminSettings) -> Router {
    let open_reads = settings.socket_address().map(is_loopback).unwrap_or(false);
    let guard = Arc::new(Guard {
        token: settings.token.clone(),
        open_reads,
    });
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
        .layer(Extension(ExportRoot(Arc::new(
            settings.export_root.clone(),
        ))))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .route_layer(middleware::from_fn_with_state(guard, self::guard))
        .with_state(server)
}

/// A running admin API; dropping it does not stop it (the process ends it).
#[derive(Debug)]
pub struct AdminHandle {
    /// The address it listens on (the port is the real one when 0 was asked).
    pub address: SocketAddr,
}

/// Starts the admin API on `address` on its own thread and runtime, with the token and
/// export root of the server's `[admin]` section (the defaults without one).
///
/// # Errors
/// A config error when the token file is refused or a non-loopback address has no
/// token; an I/O error when the address cannot be bound.
pub fn serve(server: Server, address: &str) -> Result<AdminHandle, ServerError> {
    let settings = AdminSettings::at(server.config(), address)?;
    serve_with(server, settings)
}

/// Starts the admin API with `settings` on its own thread and runtime.
///
/// # Errors
/// As [`serve`].
pub fn serve_with(server: Server, settings: AdminSettings) -> Result<AdminHandle, ServerError> {
    settings.check()?;
    let address = settings.socket_address()?;
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
    let router = router(server, &settings);
    std::thread::Builder::new()
        .name("mongoose-admin-main".into())
        .spawn(move || {
            runtime.block_on(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(listener) => accept_connections(listener, router).await,
                    Err(error) => error!(%error, "the admin listener failed"),
                }
            });
        })
        .map_err(|error| ServerError::Io {
            context: "cannot start the admin thread".into(),
            error,
        })?;
    info!(
        address = %bound,
        token = settings.token.is_some(),
        export_root = %settings.export_root.display(),
        "admin API listening"
    );
    Ok(AdminHandle { address: bound })
}

/// Accepts at most [`MAX_CONNECTIONS`] connections at once (a permit is taken before
/// `accept`, so a waiting connection holds no descriptor of ours) and serves each with
/// the header timeout, head size bound and age bound.
async fn accept_connections(listener: tokio::net::TcpListener, router: Router) {
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES);
    loop {
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // e.g. EMFILE: the permit goes back, and we wait instead of spinning
                warn!(%error, "the admin API cannot accept a connection; retrying in 1 s");
                drop(permit);
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let connection = http.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(router.clone()),
        );
        tokio::spawn(async move {
            let _permit = permit;
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(error) = result {
                        debug!(%peer, %error, "admin connection closed");
                    }
                }
                () = tokio::time::sleep(MAX_CONNECTION_AGE) => {
                    connection.as_mut().graceful_shutdown();
                    if tokio::time::timeout(CLOSE_GRACE, connection).await.is_err() {
                        debug!(%peer, "admin connection closed at its age limit");
                    }
                }
            }
        });
    }
}

/// `GET http://ADDRESS/PATH` with a short timeout; the body as text.
pub fn get_text(address: &str, path: &str) -> Result<String, ServerError> {
    get_text_with_token(address, path, None)
}

/// [`get_text`] with `Authorization: Bearer TOKEN` when a token is given.
pub fn get_text_with_token(
    address: &str,
    path: &str,
    token: Option<&str>,
) -> Result<String, ServerError> {
    let url = format!("http://{address}{path}");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut request = agent.get(&url);
    if let Some(token) = token {
        request = request.header("authorization", &format!("Bearer {}", token.trim()));
    }
    let mut response = request.call().map_err(|error| ServerError::State(format!(
        "cannot reach the admin API at {address} ({error}): is the server running with an [admin] address?"
    )))?;
    let status = response.status();
    let text = response
        .body_mut()
        .read_to_string()
        .map_err(|error| ServerError::State(format!("cannot read the answer of {url}: {error}")))?;
    if status == StatusCode::UNAUTHORIZED {
        return Err(ServerError::State(format!(
            "the admin API at {address} needs its token{}: pass --token-file FILE, the file named by [admin] token_file",
            if token.is_some() { " and refused the one given" } else { "" }
        )));
    }
    if !status.is_success() {
        return Err(ServerError::State(format!(
            "{url} answered {status}: {text}"
        )));
    }
    Ok(text)
}
