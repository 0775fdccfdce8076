//! The log filter of the process, changeable while it runs: [`crate::cli::init_logging`]
//! installs it behind a [`tracing_subscriber::reload`] layer, and a config's
//! `log_level` (at the start of `mongoose run` and at each reload that changes it)
//! replaces it.

use std::sync::OnceLock;

use tracing_subscriber::{reload, EnvFilter, Registry};

/// The handle of the installed filter (none before [`crate::cli::init_logging`], or in a
/// program that installed its own subscriber).
static HANDLE: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// The filter when neither `log_level` nor `RUST_LOG` is set (`info`, or the command's
/// own: `warn` for `mongoose test`).
static DEFAULT: OnceLock<String> = OnceLock::new();

/// Sets the filter used when neither `log_level` nor `RUST_LOG` is set.
pub(crate) fn set_default(default: &str) {
    let _ = DEFAULT.set(default.to_owned());
}

/// The filter when no `log_level` is set: `RUST_LOG`, else the default (`info`).
pub(crate) fn from_environment() -> EnvFilter {
    let default = DEFAULT.get().map_or("info", String::as_str);
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default))
}

/// Keeps the handle of the filter `init_logging` installed.
pub(crate) fn keep(handle: reload::Handle<EnvFilter, Registry>) {
    let _ = HANDLE.set(handle);
}

/// Logs with `directives` (`RUST_LOG`'s syntax) from now on; `None`: `RUST_LOG`'s
/// filter, else the default. Returns whether the filter was replaced: false when this
/// process's subscriber is not the one `init_logging` installs (an embedder's own).
///
/// # Errors
/// `directives` is not a filter (the config's check refuses such a `log_level` first).
pub fn set(directives: Option<&str>) -> Result<bool, String> {
    let filter = match directives {
        Some(directives) => EnvFilter::try_new(directives).map_err(|error| error.to_string())?,
        None => from_environment(),
    };
    let Some(handle) = HANDLE.get() else {
        return Ok(false);
    };
    handle
        .reload(filter)
        .map(|()| true)
        .map_err(|error| error.to_string())
}
