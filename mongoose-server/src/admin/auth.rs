//! Who may call the admin API and how it is served: the bearer token, the settings
//! (address, token, export root) and the guard (token, declared body size, request
//! deadline) every request passes before its route.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tracing::debug;

use crate::config::ServerConfig;
use crate::ServerError;

use super::{MAX_BODY_BYTES, MIN_TOKEN_LENGTH, REQUEST_TIMEOUT};

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

    pub(super) fn socket_address(&self) -> Result<SocketAddr, ServerError> {
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

    pub(super) fn check(&self) -> Result<(), ServerError> {
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

pub(super) fn is_loopback(address: SocketAddr) -> bool {
    address.ip().to_canonical().is_loopback()
}

/// Who may call what: the token, and whether the reads `/status`, `/metrics`,
/// `/health` and `/ready` are open (on loopback).
#[derive(Debug)]
pub(super) struct Guard {
    pub(super) token: Option<AdminToken>,
    pub(super) open_reads: bool,
}

impl Guard {
    fn needs_token(&self, method: &Method, path: &str) -> bool {
        if self.token.is_none() {
            return false;
        }
        let read = method == Method::GET || method == Method::HEAD;
        !(self.open_reads && read && matches!(path, "/status" | "/metrics" | "/health" | "/ready"))
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

pub(super) fn error_response(status: StatusCode, message: String) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

pub(super) fn body_too_large() -> Response {
    error_response(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is larger than {MAX_BODY_BYTES} bytes, the admin API's limit: send shorter command arguments"),
    )
}

/// Authentication, the declared body size and the request deadline, before any route.
pub(super) async fn guard(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
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
