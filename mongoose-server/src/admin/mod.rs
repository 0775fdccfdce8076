//! The admin API over HTTP (axum on hyper), on 127.0.0.1 by default:
//!
//! | route | what it does |
//! |---|---|
//! | `GET /status` | the feed status JSON (book: guarantees/status.md field names) and the sinks', camelCase |
//! | `GET /health` | 200 `{"status":"alive"}` while the process serves |
//! | `GET /ready` | 200 `{"ready":true,"reasons":[]}` when every feed started and nothing is stalled, else 503 `{"ready":false,"reasons":[..]}` |
//! | `GET /groups` | every processor group's status |
//! | `POST /processors/{group}/{name}/stop` | stops a processor, waiting up to 1 s for its reply |
//! | `GET /processors/{group}/{name}/commands` | the admin commands the running processor registered: `{"group", "processor", "commands": [..]}` (404 when no such running processor) |
//! | `POST /processors/{group}/{name}/commands/{command}` | runs one, with the JSON body `{"args": ["..."]}` (or no body: no arguments), waiting up to 5 s; answers its control reply (the command's text in `output`) |
//! | `GET /processors/{group}/{name}/state?key=K` | the current aggregates of key `K` (the `group_by` values, comma-separated) of an `aggregate` processor, as JSON (its `state` admin command); 404 for no such running processor, one that is not an aggregate, or an unknown key; 400 for a missing or malformed key. Needs the token like the other privileged routes |
//! | `POST /feeds/{feed}/overload/clear` | clears the feed's overload latches |
//! | `POST /feeds/{feed}/release[?queue=Q]` | the operator release of a held position: accepts the loss of a removed consumer's backlog, counted in `dropped` |
//! | `POST /sinks/{sink}/retry` | tries every output of the sink that waits for a retry, and every held one (a permanent refusal included), now: `{"sink", "retrying", "held"}` (what was waiting when asked; the outcomes show in `/status` as they come), 404 for an unknown sink |
//! | `POST /groups/{group}/audit/export?dir=D` | exports the group's control audit (JSON Lines + manifest) into the new folder `<export root>/D` and verifies it |
//! | `POST /audit/{selector}/start` | starts an audit capture of a processor (`NAME` or `GROUP%2FNAME`), answering once it records |
//! | `POST /audit/{selector}/stop` | stops it, answering once it is uninstalled |
//! | `GET /audit/status` | every capture session: id, selector, path, recording, records written |
//! | `GET /feeds/{feed}/tap[?limit=N&capacity=C]` | a live sample of the feed's published items, streamed as JSON Lines for at most [`TAP_STREAM_MAX`] (book: operating/tap-and-unit-tests.md); 404 for an unknown feed |
//! | `GET /sinks/{sink}/tap[?limit=N&capacity=C]` | the same of the outputs the sink is given |
//! | `GET /metrics` | Prometheus text (see [`crate::metrics`]) |
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
//!   /status`, `/metrics`, `/health` and `/ready` stay open; every other route needs
//!   the token. An
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
//!   long, are closed; at most [`MAX_CONNECTIONS`] connections are open at once: one
//!   accepted at the cap closes the oldest connection that has not completed a
//!   request (a stalled or slow client), else the oldest idle keep-alive one, so a
//!   real request is answered at once under any number of half-sent ones; when all
//!   are answering requests, the next ones wait in the kernel's accept queue. The
//!   admin API never holds more than that many file descriptors of the process (one
//!   more while it makes room) and the processing path keeps the rest.
//!
//! The module holds the routes and the serving (limits, connections); `auth` holds the
//! token, the settings and the guard every request passes; `handlers` the routes'
//! handlers and the metrics; `tap` the tap routes' streams.

mod audit;
mod auth;
mod connections;
mod handlers;
mod tap;

pub use crate::metrics::record_metrics;
pub use auth::{AdminSettings, AdminToken};
pub use handlers::command_status;
pub use tap::{TAP_CAPACITY_DEFAULT, TAP_CAPACITY_MAX, TAP_STREAM_MAX};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::middleware::{self};
use axum::routing::{get, post};
use axum::{Extension, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tracing::{debug, error, info, warn};

use crate::server::Server;
use crate::ServerError;

use auth::{guard, is_loopback, Guard};
use handlers::{
    clear_overload, export_audit, groups, health, list_commands, metrics_text, ready, release,
    retry_sink, run_command, status, stop_processor, ExportRoot,
};

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

/// Connections open at once: 64. One accepted at the cap closes a connection without a
/// request (the oldest first), else an idle one; when every one is answering a
/// request, the next ones wait in the kernel's accept queue until one closes.
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

/// The admin routes over a server, guarded by `settings`' token and limits.
pub fn router(server: Server, settings: &AdminSettings) -> Router {
    let open_reads = settings.socket_address().map(is_loopback).unwrap_or(false);
    let guard = Arc::new(Guard {
        token: settings.token.clone(),
        open_reads,
    });
    Router::new()
        .route("/status", get(status))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/groups", get(groups))
        .route("/processors/{group}/{name}/stop", post(stop_processor))
        .route("/processors/{group}/{name}/commands", get(list_commands))
        .route(
            "/processors/{group}/{name}/state",
            get(handlers::processor_state),
        )
        .route(
            "/processors/{group}/{name}/commands/{command}",
            post(run_command),
        )
        .route("/feeds/{feed}/overload/clear", post(clear_overload))
        .route("/feeds/{feed}/release", post(release))
        .route("/sinks/{sink}/retry", post(retry_sink))
        .route("/feeds/{feed}/tap", get(tap::tap_feed))
        .route("/sinks/{sink}/tap", get(tap::tap_sink))
        .route("/groups/{group}/audit/export", post(export_audit))
        .route("/audit/{selector}/start", post(audit::start_capture))
        .route("/audit/{selector}/stop", post(audit::stop_capture))
        .route("/audit/status", get(audit::capture_status))
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

/// Accepts connections and serves each with the header timeout, head size bound and
/// age bound, at most [`MAX_CONNECTIONS`] at once: a connection accepted at the cap
/// closes one that has not completed a request head (the oldest first), else one idle
/// between requests ([`connections::Connections::evict_one`]), and waits for its room;
/// when every open connection is answering a request, it waits for one to end.
async fn accept_connections(listener: tokio::net::TcpListener, router: Router) {
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let open = Arc::new(connections::Connections::default());
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // e.g. EMFILE: we wait instead of spinning
                warn!(%error, "the admin API cannot accept a connection; retrying in 1 s");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let permit = match Arc::clone(&permits).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                if open.evict_one() {
                    debug!(%peer, "admin API at its connection cap: closed the oldest connection without a request for room");
                }
                let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
                    return;
                };
                permit
            }
        };
        let registered = open.register();
        let connection = http.serve_connection(
            TokioIo::new(stream),
            connections::Tracked {
                inner: TowerToHyperService::new(router.clone()),
                connection: Arc::clone(&registered.connection),
            },
        );
        tokio::spawn(async move {
            let _permit = permit;
            let registered = registered;
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(error) = result {
                        debug!(%peer, %error, "admin connection closed");
                    }
                }
                () = registered.connection.evicted() => {
                    debug!(%peer, "admin connection without a request closed for room");
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

/// `POST http://ADDRESS/PATH` (no body) with `Authorization: Bearer TOKEN` when a token
/// is given; the HTTP status and the body as text.
///
/// # Errors
/// The admin API cannot be reached, or refused the token.
pub fn post_with_token(
    address: &str,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String), ServerError> {
    let url = format!("http://{address}{path}");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(REQUEST_TIMEOUT + Duration::from_secs(5)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut request = agent.post(&url);
    if let Some(token) = token {
        request = request.header("authorization", &format!("Bearer {}", token.trim()));
    }
    let (status, text) = answer(request.send_empty(), address, &url, token)?;
    Ok((status.as_u16(), text))
}

/// The status and body text of an admin API answer: an unreachable API, an unreadable
/// body and a refused token are errors that say what to do.
fn answer(
    sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    address: &str,
    url: &str,
    token: Option<&str>,
) -> Result<(StatusCode, String), ServerError> {
    let mut response = sent.map_err(|error| ServerError::State(format!(
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
    Ok((status, text))
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
    let (status, text) = answer(request.call(), address, &url, token)?;
    if !status.is_success() {
        return Err(ServerError::State(format!(
            "{url} answered {status}: {text}"
        )));
    }
    Ok(text)
}

/// `GET http://ADDRESS/PATH` of a streamed answer (a tap's JSON Lines) with
/// `Authorization: Bearer TOKEN` when a token is given: the body as a reader, read as
/// it arrives (no overall deadline; the server sends a line at least every second).
///
/// # Errors
/// The admin API cannot be reached, refused the token, or answered another status
/// than 200 (its `error` text in the message).
pub fn get_stream_with_token(
    address: &str,
    path: &str,
    token: Option<&str>,
) -> Result<Box<dyn std::io::Read + Send>, ServerError> {
    let url = format!("http://{address}{path}");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(5)))
        .timeout_recv_response(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut request = agent.get(&url);
    if let Some(token) = token {
        request = request.header("authorization", &format!("Bearer {}", token.trim()));
    }
    let sent = request.call();
    let mut response = sent.map_err(|error| ServerError::State(format!(
        "cannot reach the admin API at {address} ({error}): is the server running with an [admin] address?"
    )))?;
    let status = response.status();
    if status == StatusCode::OK {
        return Ok(Box::new(response.into_body().into_reader()));
    }
    let text = response.body_mut().read_to_string().unwrap_or_default();
    if status == StatusCode::UNAUTHORIZED {
        return Err(ServerError::State(format!(
            "the admin API at {address} needs its token{}: pass --token-file FILE, the file named by [admin] token_file",
            if token.is_some() { " and refused the one given" } else { "" }
        )));
    }
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let why = answer["error"].as_str().unwrap_or(&text);
    Err(ServerError::State(format!(
        "{url} answered {status}: {why}"
    )))
}
