//! The checks of the sinks: built-in kinds and their settings, ranges, addresses.

use crate::error::ServerError;

use super::{
    check_range, name_problem, MAX_EXPIRE_MILLIS, MAX_QUEUE_CAPACITY, MAX_SINK_BATCH,
    MAX_TIMEOUT_MILLIS,
};

impl crate::config::SinkConfig {
    /// The sink kinds built in: `file`, `stdout`, `tcp`, `http`.
    pub const BUILT_IN: [&'static str; 4] = ["file", "stdout", "tcp", "http"];

    /// Whether its kind is built in (else a plugin declares it).
    pub fn is_built_in(&self) -> bool {
        Self::BUILT_IN.contains(&self.kind.as_str())
    }

    /// Refuses an unknown kind, a missing setting of the kind, and a setting of
    /// another kind (it would be ignored).
    pub(super) fn check_kind_settings(
        &self,
        index: usize,
        plugins: bool,
    ) -> Result<(), ServerError> {
        let at = |key: &str| format!("sinks[{index}].{key}");
        let given: [(&str, bool); 16] = [
            ("path", self.path.is_some()),
            ("sync", self.sync.is_some()),
            ("address", self.address.is_some()),
            ("url", self.url.is_some()),
            ("headers", self.headers.is_some()),
            ("header_files", self.header_files.is_some()),
            (
                "connect_timeout_millis",
                self.connect_timeout_millis.is_some(),
            ),
            (
                "response_timeout_millis",
                self.response_timeout_millis.is_some(),
            ),
            ("write_timeout_millis", self.write_timeout_millis.is_some()),
            ("batch_max_lines", self.batch_max_lines.is_some()),
            ("batch_max_bytes", self.batch_max_bytes.is_some()),
            ("batch_timeout_millis", self.batch_timeout_millis.is_some()),
            ("compression", self.compression.is_some()),
            ("ca_file", self.ca_file.is_some()),
            ("client_cert_file", self.client_cert_file.is_some()),
            ("client_key_file", self.client_key_file.is_some()),
        ];
        let (required, allowed): (&[&str], &[&str]) = match self.kind.as_str() {
            "file" => (&["path"], &["path", "sync"]),
            "stdout" => (&[], &[]),
            "tcp" => (
                &["address"],
                &["address", "connect_timeout_millis", "write_timeout_millis"],
            ),
            "http" => (
                &["url"],
                &[
                    "url",
                    "headers",
                    "header_files",
                    "connect_timeout_millis",
                    "response_timeout_millis",
                    "batch_max_lines",
                    "batch_max_bytes",
                    "batch_timeout_millis",
                    "compression",
                    "ca_file",
                    "client_cert_file",
                    "client_key_file",
                ],
            ),
            // a plugin's sink kind (checked against the loaded plugins when the server
            // is built): its settings are in its `settings` table
            other => {
                if !plugins {
                    return Err(ServerError::invalid(
                        at("kind"),
                        format!(
                            "unknown sink kind '{other}': expected \"file\", \"stdout\", \"tcp\" or \"http\", \
                             or a plugin's sink kind (set plugin_dir to the folder of the plugin that declares it)"
                        ),
                    ));
                }
                if let Some(problem) = name_problem(other) {
                    return Err(ServerError::invalid(at("kind"), problem));
                }
                (&[], &[])
            }
        };
        if self.settings.is_some() && self.is_built_in() {
            return Err(ServerError::invalid(
                at("settings"),
                format!(
                    "a {} sink has no `settings` table (that is for a plugin's sink kind): put its keys in the sink's table",
                    self.kind
                ),
            ));
        }
        for key in required {
            if !given.iter().any(|(name, set)| name == key && *set) {
                return Err(ServerError::invalid(
                    at(key),
                    format!("a {} sink needs `{key}`", self.kind),
                ));
            }
        }
        for (key, set) in given {
            if set && !allowed.contains(&key) {
                return Err(ServerError::invalid(
                    at(key),
                    format!(
                        "`{key}` is not a setting of a {} sink (its settings: {})",
                        self.kind,
                        if allowed.is_empty() {
                            "none".to_owned()
                        } else {
                            allowed.join(", ")
                        }
                    ),
                ));
            }
        }
        Ok(())
    }

    /// An `http` sink's headers: `headers`, and `header_files` each read from its file
    /// (resolved with `resolve`, trimmed, not empty).
    ///
    /// # Errors
    /// A header named in both, or a header file that cannot be read or is empty.
    pub fn http_headers(
        &self,
        resolve: impl Fn(&std::path::Path) -> std::path::PathBuf,
    ) -> Result<Vec<(String, String)>, ServerError> {
        let mut headers: Vec<(String, String)> = self
            .headers
            .iter()
            .flatten()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        for (name, file) in self.header_files.iter().flatten() {
            let at = format!("sinks.{}.header_files.{name}", self.name);
            if headers
                .iter()
                .any(|(given, _)| given.eq_ignore_ascii_case(name))
            {
                return Err(ServerError::invalid(
                    at,
                    format!("the header {name} is also in `headers`: give it one way"),
                ));
            }
            let path = resolve(file);
            let value = std::fs::read_to_string(&path).map_err(|error| {
                ServerError::invalid(
                    at.clone(),
                    format!(
                        "cannot read the header file {}: {error}; create it holding the header's value",
                        path.display()
                    ),
                )
            })?;
            let value = value.trim();
            if value.is_empty() {
                return Err(ServerError::invalid(
                    at,
                    format!(
                        "the header file {} is empty: write the header's value into it",
                        path.display()
                    ),
                ));
            }
            headers.push((name.clone(), value.to_owned()));
        }
        Ok(headers)
    }

    /// Refuses values that would panic the sink's thread, wait for ever or never reach
    /// anything: sizes and times out of range, a maximum backoff below the initial one,
    /// a port outside 1 to 65535.
    pub(super) fn check_values(&self, index: usize) -> Result<(), ServerError> {
        let at = |key: &str| format!("sinks[{index}].{key}");
        if let Some(batch) = self.batch {
            check_range(
                at("batch"),
                batch as u64,
                1..=MAX_SINK_BATCH as u64,
                " outputs",
            )?;
        }
        if let Some(lines) = self.batch_max_lines {
            check_range(
                at("batch_max_lines"),
                lines as u64,
                1..=MAX_SINK_BATCH as u64,
                " outputs",
            )?;
        }
        if let Some(bytes) = self.batch_max_bytes {
            check_range(
                at("batch_max_bytes"),
                bytes as u64,
                1..=MAX_HTTP_BODY,
                " bytes",
            )?;
        }
        if let Some(millis) = self.batch_timeout_millis {
            check_range(
                at("batch_timeout_millis"),
                millis,
                0..=MAX_BATCH_TIMEOUT_MILLIS,
                " ms",
            )?;
        }
        if let Some(capacity) = self.queue_capacity {
            check_range(
                at("queue_capacity"),
                capacity as u64,
                1..=MAX_QUEUE_CAPACITY as u64,
                " outputs",
            )?;
        }
        let times = [
            (
                "connect_timeout_millis",
                self.connect_timeout_millis,
                MAX_TIMEOUT_MILLIS,
            ),
            (
                "response_timeout_millis",
                self.response_timeout_millis,
                MAX_TIMEOUT_MILLIS,
            ),
            (
                "write_timeout_millis",
                self.write_timeout_millis,
                MAX_TIMEOUT_MILLIS,
            ),
            (
                "initial_backoff_millis",
                self.initial_backoff_millis,
                MAX_TIMEOUT_MILLIS,
            ),
            (
                "max_backoff_millis",
                self.max_backoff_millis,
                MAX_TIMEOUT_MILLIS,
            ),
            (
                "expire_after_millis",
                self.expire_after_millis,
                MAX_EXPIRE_MILLIS,
            ),
        ];
        for (key, value, max) in times {
            if let Some(value) = value {
                check_range(at(key), value, 1..=max, " ms")?;
            }
        }
        let defaults = mongoose_core::sink::RetryBudget::default();
        let initial = self
            .initial_backoff_millis
            .unwrap_or(defaults.initial_backoff.as_millis() as u64);
        let max = self
            .max_backoff_millis
            .unwrap_or(defaults.max_backoff.as_millis() as u64);
        if max < initial {
            return Err(ServerError::invalid(
                at(if self.max_backoff_millis.is_some() {
                    "max_backoff_millis"
                } else {
                    "initial_backoff_millis"
                }),
                format!(
                    "the maximum backoff ({max} ms) is below the initial one ({initial} ms): the backoff doubles from the initial one up to the maximum, so give a maximum at least as large"
                ),
            ));
        }
        if let Some(address) = &self.address {
            check_host_port(at("address"), address)?;
        }
        if let Some(url) = &self.url {
            check_url_port(at("url"), url)?;
        }
        Ok(())
    }
}

/// The largest `batch_max_bytes` of an HTTP sink (64 MiB: a request body held in
/// memory, and sent again whole on a retry).
const MAX_HTTP_BODY: u64 = 64 << 20;
/// The longest `batch_timeout_millis` (a minute: outputs wait that long before their
/// first attempt).
const MAX_BATCH_TIMEOUT_MILLIS: u64 = 60_000;

/// Refuses `host:port` at `key` without a port of 1 to 65535.
fn check_host_port(key: String, address: &str) -> Result<(), ServerError> {
    let port = address
        .rsplit_once(':')
        .map(|(_, port)| port)
        .filter(|port| !port.contains(']'));
    match port.map(str::parse::<u32>) {
        Some(Ok(port)) if (1..=65_535).contains(&port) => Ok(()),
        Some(Ok(port)) => Err(ServerError::invalid(
            key,
            format!("port {port} of '{address}' is out of range: give 1 to 65535"),
        )),
        _ => Err(ServerError::invalid(
            key,
            format!("'{address}' has no port: expected host:port, e.g. 127.0.0.1:5140"),
        )),
    }
}

/// Refuses a URL at `key` whose port (if it gives one) is outside 1 to 65535.
fn check_url_port(key: String, url: &str) -> Result<(), ServerError> {
    let Some((_, rest)) = url.split_once("://") else {
        return Ok(()); // the sink says what a URL needs when it is made
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let port = match host_port.rsplit_once(':') {
        Some((_, port)) if !port.contains(']') => port,
        _ => return Ok(()),
    };
    match port.parse::<u32>() {
        Ok(number) if (1..=65_535).contains(&number) => Ok(()),
        _ => Err(ServerError::invalid(
            key,
            format!("port '{port}' of {url} is not a port: give 1 to 65535"),
        )),
    }
}
