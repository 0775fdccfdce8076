//! A `[[sinks]]` entry: its kind, the kind's settings, its retries and its policy.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A sink processors write to (`[[sinks]]`): its kind and the kind's settings, and how
/// its outputs are retried and what happens to one that cannot be published.
///
/// ```toml
/// [[sinks]]
/// name = "out"
/// kind = "file"            # file | stdout | tcp | http | a plugin's sink kind
/// path = "out.log"         # file: lines appended, each batch fdatasync'd (sync = false: not)
/// # address = "127.0.0.1:5140"            # tcp
/// # url = "https://127.0.0.1:8443/events" # http: http:// or https://
/// # batch_max_lines = 500                 # http: ndjson batches (1, the default: one POST per output)
/// # compression = "gzip"                  # http: gzipped bodies
/// # ca_file = "ca.pem"                    # https: the CAs trusted instead of the built-in roots
/// max_retries = 10
/// expire_after_millis = 300000
/// on_exhausted = "hold"    # hold (the feed's commit stays before the input) | count_loss
/// ```
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    /// The sink's name.
    pub name: String,
    /// The sink kind: `file`, `stdout`, `tcp` or `http`.
    pub kind: String,
    /// `file`: the output file (created when absent).
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// `file`: fdatasync each batch before its outputs count as published (default
    /// true).
    #[serde(default)]
    pub sync: Option<bool>,
    /// `tcp`: the peer, `host:port`.
    #[serde(default)]
    pub address: Option<String>,
    /// `http`: the URL outputs are POSTed to (`http://` or `https://`).
    #[serde(default)]
    pub url: Option<String>,
    /// `http`: the most outputs in one request (default 1: each output's payload is
    /// a request's body; above 1 the body is ndjson with the lines' keys in
    /// `Idempotency-Keys`).
    #[serde(default)]
    pub batch_max_lines: Option<usize>,
    /// `http`: the most bytes of an ndjson body, before compression (default 1 MiB).
    #[serde(default)]
    pub batch_max_bytes: Option<usize>,
    /// `http`: how long a batch not full waits for more outputs (default 200 ms; only
    /// with `batch_max_lines` above 1).
    #[serde(default)]
    pub batch_timeout_millis: Option<u64>,
    /// `http`: `none` (default) or `gzip` (`Content-Encoding: gzip`).
    #[serde(default)]
    pub compression: Option<mongoose_sink::http::HttpCompression>,
    /// `http` over https: a PEM file of the CA certificates trusted for the target's
    /// certificate, instead of the built-in (Mozilla) roots (relative to the config
    /// file's folder).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// `http` over https: the client certificate (PEM, with its chain) presented to a
    /// target that asks; with `client_key_file`.
    #[serde(default)]
    pub client_cert_file: Option<PathBuf>,
    /// `http` over https: the client certificate's private key (PEM: PKCS#8, PKCS#1
    /// or SEC1).
    #[serde(default)]
    pub client_key_file: Option<PathBuf>,
    /// `http`: extra request headers.
    #[serde(default)]
    pub headers: Option<std::collections::BTreeMap<String, String>>,
    /// `http`: request headers whose values are read from files, for secrets kept out
    /// of the config (`header_files = { Authorization = "secrets/auth-header" }`: the
    /// file holds `Bearer ...`; relative to the config file's folder; trimmed; read
    /// when the sink opens). A header named here and in `headers` is refused.
    #[serde(default)]
    pub header_files: Option<std::collections::BTreeMap<String, PathBuf>>,
    /// `tcp`, `http`: the bound on connecting (default 5,000 ms).
    #[serde(default)]
    pub connect_timeout_millis: Option<u64>,
    /// `http`: the bound on waiting for a response once the request is sent (default
    /// 10,000 ms); past it the output is uncertain.
    #[serde(default)]
    pub response_timeout_millis: Option<u64>,
    /// `tcp`: the bound on writing one batch (default 10,000 ms).
    #[serde(default)]
    pub write_timeout_millis: Option<u64>,
    /// Retries after an output's first attempt (default 10). Only attempts made
    /// count: an output a batch did not send (its target stopped answering) is charged
    /// none.
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// The wait before the first retry, doubled per retry (default 100 ms).
    #[serde(default)]
    pub initial_backoff_millis: Option<u64>,
    /// The longest wait between retries (default 10,000 ms): also the pace at which
    /// `hold` goes on trying a held output.
    #[serde(default)]
    pub max_backoff_millis: Option<u64>,
    /// How long after its first attempt an output expires (default 300,000 ms).
    #[serde(default)]
    pub expire_after_millis: Option<u64>,
    /// What an output that failed permanently, spent its retries or expired does:
    /// `hold` (default: its feed's commit stays before its input, the feed reports it
    /// `stalled` and the sink lists it in `held_outputs`; one whose retries are spent
    /// or that expired is still tried every `max_backoff_millis`, for as long as it
    /// takes, and published when the target returns; one refused for good waits for
    /// `POST /sinks/{name}/retry` or a restart) or `count_loss` (counted lost,
    /// `lossless: false`, recorded beside the feed's pointer so the next start
    /// reports it once).
    #[serde(default)]
    pub on_exhausted: Option<mongoose_core::sink::ExhaustedPolicy>,
    /// A plugin sink's settings, given to the plugin's sink as TOML text.
    #[serde(default)]
    pub settings: Option<toml::Table>,
    /// The most outputs given to the sink at once (default 1,024; 8,192 for `file`;
    /// `batch_max_lines` for an `http` sink that batches).
    #[serde(default)]
    pub batch: Option<usize>,
    /// The most outputs queued or in flight for the sink (default 16,384); past it a
    /// processor is busy and its item is offered again later (the feed's queue fills
    /// and a re-readable source pauses).
    #[serde(default)]
    pub queue_capacity: Option<usize>,
}
