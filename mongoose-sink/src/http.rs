//! The HTTP line sink: outputs `POST`ed to an `http://` or `https://` url, one per
//! request or in ndjson batches, each keyed for de-duplication by the target.
//!
//! # One output per request (`batch_max_lines = 1`, the default)
//!
//! The body is the output's payload as it is, with `Content-Type:
//! application/octet-stream` (the sink does not know what a payload holds: name it
//! with a `Content-Type` in the headers), `Idempotency-Key: <the output's key>` (the
//! [`OutputKey`] as text, `feed/epoch/lane/position/index/writer`) and
//! `X-Mongoose-Attempt: <earlier attempts>` (0 on the first attempt). A retry of the
//! same output carries the same key, so a target that de-duplicates by
//! `Idempotency-Key` holds each output once however often it is sent.
//!
//! # Batches (`batch_max_lines` above 1)
//!
//! The body is ndjson: each output's payload and a line break, in order, up to
//! `batch_max_lines` lines and `batch_max_bytes` bytes (before compression; one
//! output larger than that goes alone), with `Content-Type: application/x-ndjson`.
//! **Every line keeps its own key**: `Idempotency-Keys: k1,k2,...` lists the keys of
//! the body's lines in their order (about 40 bytes a line: a receiver's header limit
//! must allow `batch_max_lines` of them), and `X-Mongoose-Attempt` is the most
//! attempts any line of the batch had before (0: no line of it was sent before).
//! A batch has no key of its own on purpose: which outputs travel together depends on
//! timing, and after a restart a retried output may travel with others than before,
//! so a key derived from a batch would not name it again. A receiver de-duplicates
//! per line: it keeps the keys it took (per feed, the highest `position` per
//! `feed/epoch/lane/writer` is enough when it takes lines in order) and drops a line
//! whose key it holds, then answers 2xx for the whole request.
//!
//! A payload holding a line break cannot be one ndjson line: it is refused for good
//! (`NotPublished { retryable: false }`) without being sent, and the operator's
//! policy decides (use one output per request for such payloads).
//!
//! The outcome of a request is the outcome of every output in it: a batch refused
//! (4xx) is refused for each of its outputs, one that failed (5xx, a timeout) is
//! uncertain for each, and the runner retries them, each under its own key.
//!
//! `compression = "gzip"` gzips each body (`Content-Encoding: gzip`).
//!
//! # https
//!
//! An `https://` url is served with rustls. The target's certificate is checked
//! against `ca_file` (a PEM bundle) when one is given, **instead of** the built-in
//! roots (Mozilla's, compiled in, so a container without a CA store works): a private
//! CA is then the only one trusted; to trust both, put both in the file. A client
//! certificate (`client_cert_file`, a PEM chain, and `client_key_file`, its PKCS#8,
//! PKCS#1 or SEC1 key) is presented when the target asks for one. The files are read
//! and checked when the sink is made: one that cannot be read or used is a settings
//! error naming the file. A handshake that fails (the target's certificate is not
//! signed by a trusted CA, the target refuses our certificate or requires one) is
//! `NotPublished { retryable: true }` naming the cause: the target refused the
//! connection before any request on it could be taken.
//!
//! Connections are kept alive between requests; redirects are not followed; proxies
//! named in the environment (`HTTP_PROXY`, `ALL_PROXY`) are not used: the sink posts
//! to its url.
//!
//! ```
//! use mongoose_sink::{HttpSink, HttpSinkConfig};
//!
//! let config = HttpSinkConfig {
//!     url: "http://127.0.0.1:8080/events".into(),
//!     timeout_millis: 1_000,           // to connect
//!     response_timeout_millis: 5_000,  // to send the request and read the response
//!     headers: vec![("Authorization".into(), "Bearer t0k3n".into())],
//!     batch_max_lines: 500,            // ndjson bodies of up to 500 lines
//!     ..HttpSinkConfig::default()
//! };
//! let sink = HttpSink::new("alerts", config).expect("a valid url and headers");
//! # drop(sink);
//! ```
//!
//! # What each answer means
//!
//! The outcome is classified by what the target can have seen, never optimistically:
//!
//! | what happened | outcome |
//! |---|---|
//! | 2xx | `Published { evidence: "HTTP 201" }` |
//! | 408, 429, 503 (the target says it did not take it) | `NotPublished { retryable: true }` |
//! | 301, 307, 308 (the target says "not here", redirects are not followed) | `NotPublished { retryable: false }` |
//! | any other 4xx (the body's first 200 bytes in the evidence) | `NotPublished { retryable: false }` |
//! | 500 and every other 5xx, 502 and 504 included (the target may have acted before failing; a gateway answers 502/504 after it forwarded the request) | `Uncertain` |
//! | any other status (1xx, 302, 303, ...: the target may have acted) | `Uncertain` |
//! | no byte of the request was handed to the socket (refused, unreachable, DNS failure, connect timeout, a TLS handshake that failed) | `NotPublished { retryable: true }` |
//! | the target ended the TLS session with a certificate alert (TLS 1.3 tells a client so after it sent its request) | `NotPublished { retryable: true }` |
//! | any failure after the first byte of the request was handed to the socket (a timeout, a reset, an unreadable response) | `Uncertain` |
//!
//! "Handed to the socket" is observed, not guessed: the sink's connector wraps
//! ureq's transport (above TLS) and notes every transmit ureq attempts, so an error
//! with no transmit behind it proves that nothing left this process.
//! In ureq 3 (3.5) terms, the errors fall as follows:
//!
//! | ureq error | when ureq raises it | nothing sent? |
//! |---|---|---|
//! | `HostNotFound` | resolving the host | yes: `NotPublished { retryable: true }` |
//! | `Timeout(Resolve)` | resolving took longer than the connect bound (a slow resolver, or a loaded host) | yes: sent again at once (up to 3 times), then `NotPublished { retryable: true }` |
//! | `Timeout(Connect)`, `Io(ConnectionRefused / HostUnreachable / NetworkUnreachable / NetworkDown / AddrNotAvailable)`, `ConnectionFailed`, a TLS handshake error | connecting | yes: `NotPublished { retryable: true }` |
//! | `Timeout(SendRequest)`, `Timeout(SendBody)` before any byte was handed to the socket | the sink's own time budget ran out first (a loaded host): no attempt was made | yes: sent again at once (up to 3 times), then `NotPublished { retryable: true }` |
//! | `Timeout(SendRequest)`, `Timeout(SendBody)`, `Io(..)` from a write | part of the request may be with the target | no: `Uncertain` |
//! | `Timeout(RecvResponse)`, `Io(..)` from a read, `Protocol(..)`, `LargeResponseHeader` | the whole request was sent, the answer is missing or unreadable | no: `Uncertain` |
//! | `BadUri`, `Http(..)`, `RequireHttpsOnly` | before connecting (checked when the sink is made) | yes: `NotPublished { retryable: false }` |
//! | any other error | | decided by the transmit record: `NotPublished { retryable: true }` with no transmit, else `Uncertain` |
//!
//! The body of a 2xx is read (up to 64 KiB) so that the connection can be kept; a
//! failure to read it does not change the outcome: the status already said published.
//!
//! # A publish call
//!
//! Requests are posted in order, one at a time, and each is answered by what the
//! target said of it: a target that answers (any status, 2xx to 5xx) is asked about
//! every request of the call, so a failure concerns the request that failed and no
//! other. A call stops only when the target does not answer: nothing could be sent
//! (it is down or unreachable) or a request timed out (it hangs). The outputs after
//! that request were **not sent**: they get no outcome (the answer is shorter than the
//! call's outputs, as [`Sink::publish`] allows), so the runner charges them no attempt
//! and gives them again once the failed one's retry falls due; a target that is down
//! costs one probe per backoff, not one timeout (or one charged attempt) per output.

mod body;
mod tls;
mod transport;

use std::fmt;
use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mongoose_core::sink::{Output, OutputKey, Sink, SinkOutcome};
use serde::{Deserialize, Serialize};
use ureq::http::{HeaderName, HeaderValue, Uri};
use ureq::unversioned::transport::{Connector, RustlsConnector, TcpConnector};
use ureq::{Agent, Error as UreqError, Timeout};

pub use self::body::HttpCompression;
use self::body::{take_batch, Bodies};
use self::transport::{LiteralFirst, TransmitRecorder};
use crate::SinkError;

/// How many bytes of a refusal's body go into its evidence.
const EVIDENCE_BODY_BYTES: usize = 200;
/// How much of a response body is read so that its connection can be kept alive.
const DRAIN_LIMIT: u64 = 64 * 1024;
/// How often a request whose own time budget ran out before any byte of it was sent
/// (no attempt: the target saw nothing) is sent again at once before that counts as a
/// failed attempt.
const LOCAL_TRIES: u32 = 3;
/// The headers the sink sets itself.
const OWN_HEADERS: [&str; 5] = [
    "idempotency-key",
    "idempotency-keys",
    "x-mongoose-attempt",
    "content-encoding",
    "content-length",
];

/// The settings of an [`HttpSink`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpSinkConfig {
    /// Where outputs are posted: `http://host:port/path` or `https://host:port/path`.
    pub url: String,
    /// The bound on resolving the host, connecting and the TLS handshake, in
    /// milliseconds.
    pub timeout_millis: u64,
    /// The bound on each of sending the request, waiting for the response's head and
    /// reading its body, in milliseconds. Past it the outputs are
    /// [`SinkOutcome::Uncertain`]: the target may have them.
    pub response_timeout_millis: u64,
    /// Extra headers sent with every request (`Authorization`, `Content-Type`...).
    pub headers: Vec<(String, String)>,
    /// The most outputs in one request: 1 (the default) posts each output's payload as
    /// its body; above 1 the body is ndjson (see the [module](self) docs).
    pub batch_max_lines: usize,
    /// The most bytes of an ndjson body before compression (one output larger than
    /// this goes alone). Default 1 MiB.
    pub batch_max_bytes: usize,
    /// How bodies are compressed (default none).
    pub compression: HttpCompression,
    /// https: the trust anchors and the client certificate.
    pub tls: HttpTlsConfig,
}

impl Default for HttpSinkConfig {
    /// No url (give one), 5 s to connect, 10 s per response, one output per request,
    /// 1 MiB batches, no compression, the built-in roots and no client certificate.
    fn default() -> Self {
        HttpSinkConfig {
            url: String::new(),
            timeout_millis: 5_000,
            response_timeout_millis: 10_000,
            headers: Vec::new(),
            batch_max_lines: 1,
            batch_max_bytes: 1 << 20,
            compression: HttpCompression::None,
            tls: HttpTlsConfig::default(),
        }
    }
}

/// The TLS settings of an https sink (each a PEM file).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpTlsConfig {
    /// The CA certificates trusted for the target's certificate, instead of the
    /// built-in (Mozilla) roots.
    pub ca_file: Option<PathBuf>,
    /// The client certificate (and its chain) presented to a target that asks.
    pub client_cert_file: Option<PathBuf>,
    /// The client certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub client_key_file: Option<PathBuf>,
}

/// A sink that posts outputs to an HTTP endpoint (see the [module](self) docs for the
/// requests and how each answer is classified).
pub struct HttpSink {
    name: String,
    url: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// The configured headers name a `Content-Type` (else the sink sets its own).
    content_type_given: bool,
    response_timeout_millis: u64,
    batch_max_lines: usize,
    batch_max_bytes: usize,
    compression: HttpCompression,
    bodies: Bodies,
    agent: Agent,
    /// Set by the transport when ureq hands request bytes to a socket; cleared
    /// before each request.
    transmitted: Arc<AtomicBool>,
    /// The last publish ended on a request the target did not answer.
    not_answering: bool,
    /// The last publish could not reach the target (connect or handshake): why.
    unreachable: Option<String>,
}

impl fmt::Debug for HttpSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpSink")
            .field("name", &self.name)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl HttpSink {
    /// A sink named `name` (for logs and errors) with `config`. Checks the url
    /// (`http://` or `https://` with a host), the headers, the timeouts and the batch
    /// limits, and reads the TLS files; connects lazily, on the first publish.
    pub fn new(name: &str, config: HttpSinkConfig) -> Result<HttpSink, SinkError> {
        let settings = |message: String| SinkError::Settings {
            sink: name.to_string(),
            message,
        };
        let uri: Uri = config.url.parse().map_err(|error| {
            settings(format!(
                "url '{}' is not a valid url ({error}): give http://host:port/path or \
                 https://host:port/path",
                config.url
            ))
        })?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => {
                return Err(settings(format!(
                    "url '{}' must start with http:// or https://",
                    config.url
                )))
            }
        };
        if uri.host().is_none_or(str::is_empty) {
            return Err(settings(format!(
                "url '{}' has no host: give http://host:port/path",
                config.url
            )));
        }
        if config.timeout_millis == 0 || config.response_timeout_millis == 0 {
            return Err(settings(
                "timeout_millis and response_timeout_millis must be above 0 (a sink never \
                 waits without a bound)"
                    .to_string(),
            ));
        }
        if config.batch_max_lines == 0 || config.batch_max_bytes == 0 {
            return Err(settings(
                "batch_max_lines and batch_max_bytes must be above 0 (batch_max_lines = 1 \
                 posts one output per request)"
                    .to_string(),
            ));
        }
        let tls = &config.tls;
        let tls_given = tls.ca_file.is_some()
            || tls.client_cert_file.is_some()
            || tls.client_key_file.is_some();
        if tls_given && !https {
            return Err(settings(format!(
                "ca_file, client_cert_file and client_key_file are for an https:// url, and \
                 url '{}' is plain http: use https:// or remove them",
                config.url
            )));
        }
        let mut headers = Vec::with_capacity(config.headers.len());
        let mut content_type_given = false;
        for (key, value) in &config.headers {
            let header_name = HeaderName::from_bytes(key.as_bytes()).map_err(|_| {
                settings(format!(
                    "header name '{key}' is not a valid HTTP header name"
                ))
            })?;
            if OWN_HEADERS.contains(&header_name.as_str()) {
                return Err(settings(format!(
                    "header '{key}' is set by the sink itself: remove it from the headers"
                )));
            }
            content_type_given |= header_name == "content-type";
            let header_value = HeaderValue::from_str(value).map_err(|_| {
                settings(format!(
                    "header '{key}' has a value with characters HTTP does not allow"
                ))
            })?;
            headers.push((header_name, header_value));
        }

        let connect = Duration::from_millis(config.timeout_millis);
        let response = Duration::from_millis(config.response_timeout_millis);
        let mut agent_config = Agent::config_builder()
            .http_status_as_error(false)
            // Post to the url, never through a proxy named in the environment.
            .proxy(None)
            .max_redirects(0)
            .max_redirects_will_error(false)
            .timeout_resolve(Some(connect))
            .timeout_connect(Some(connect))
            .timeout_send_request(Some(response))
            .timeout_send_body(Some(response))
            .timeout_recv_response(Some(response))
            .timeout_recv_body(Some(response));
        if https {
            agent_config = agent_config.tls_config(tls::tls_config(tls).map_err(settings)?);
        }
        let transmitted = Arc::new(AtomicBool::new(false));
        // the recorder wraps the TLS transport, not the TCP one: a handshake's bytes
        // are not a request's
        let connector = TcpConnector::default()
            .chain(RustlsConnector::default())
            .chain(TransmitRecorder {
                transmitted: Arc::clone(&transmitted),
            });
        let agent = Agent::with_parts(agent_config.build(), connector, LiteralFirst::default());
        Ok(HttpSink {
            name: name.to_string(),
            url: config.url,
            headers,
            content_type_given,
            response_timeout_millis: config.response_timeout_millis,
            batch_max_lines: config.batch_max_lines,
            batch_max_bytes: config.batch_max_bytes,
            compression: config.compression,
            bodies: Bodies::default(),
            agent,
            transmitted,
            not_answering: false,
            unreachable: None,
        })
    }

    /// Whether requests carry ndjson batches (else one payload each).
    fn ndjson(&self) -> bool {
        self.batch_max_lines > 1
    }

    /// Posts `outputs` in one request and classifies the answer; whether the target
    /// answered (a publish goes on only while it does).
    fn post(&mut self, outputs: &[Output]) -> (SinkOutcome, Answered) {
        let ndjson = self.ndjson();
        let first = &outputs[0].key;
        let attempt = outputs
            .iter()
            .map(|output| output.attempt)
            .max()
            .unwrap_or(0);
        let mut tries = 0;
        let (result, transmitted) = loop {
            tries += 1;
            let mut request = self
                .agent
                .post(&self.url)
                .header("X-Mongoose-Attempt", attempt.to_string());
            request = if ndjson {
                request.header("Idempotency-Keys", self.bodies.keys(outputs))
            } else {
                request.header("Idempotency-Key", first.to_string())
            };
            if !self.content_type_given {
                request = request.header(
                    "Content-Type",
                    if ndjson {
                        "application/x-ndjson"
                    } else {
                        "application/octet-stream"
                    },
                );
            }
            if self.compression == HttpCompression::Gzip {
                request = request.header("Content-Encoding", "gzip");
            }
            for (header_name, header_value) in &self.headers {
                request = request.header(header_name, header_value);
            }
            self.transmitted.store(false, Ordering::SeqCst);
            let body = self.bodies.body(outputs, ndjson, self.compression);
            let result = request.send(body);
            let transmitted = self.transmitted.load(Ordering::SeqCst);
            match &result {
                // the sink's own budget ran out before a byte left (resolving an
                // address, or connected and then not scheduled in time: a loaded
                // host): no attempt was made, so none is charged; send it again at
                // once, with fresh time. A connect that timed out is the target's
                // silence: an attempt.
                Err(UreqError::Timeout(timeout))
                    if !transmitted && *timeout != Timeout::Connect && tries < LOCAL_TRIES =>
                {
                    tracing::debug!(sink = %self.name, key = %first, ?timeout, "the request's time budget ran out before it was sent: sent again");
                }
                _ => break (result, transmitted),
            }
        };
        match result {
            Ok(mut response) => {
                let status = response.status().as_u16();
                let mut head = Vec::with_capacity(EVIDENCE_BODY_BYTES);
                let mut reader = response.body_mut().as_reader();
                let _ = (&mut reader)
                    .take(EVIDENCE_BODY_BYTES as u64)
                    .read_to_end(&mut head);
                // Read the rest (bounded) so that the connection can be kept alive.
                let _ = std::io::copy(&mut reader.take(DRAIN_LIMIT), &mut std::io::sink());
                let location = response
                    .headers()
                    .get("location")
                    .and_then(|value| value.to_str().ok())
                    .map(str::to_string);
                let mut outcome = classify_status(status, &head, location.as_deref());
                if ndjson {
                    // the evidence says the answer was the batch's
                    let lines = outputs.len();
                    match &mut outcome {
                        SinkOutcome::Published { evidence }
                        | SinkOutcome::NotPublished { evidence, .. }
                        | SinkOutcome::Uncertain { evidence } => {
                            evidence.insert_str(0, &format!("batch of {lines}: "));
                        }
                    }
                }
                (outcome, Answered::Answering)
            }
            Err(error) => self.classify_error(first, error, transmitted),
        }
    }

    /// The outcome of a request that ended in `error` (`transmitted`: whether any
    /// byte of it was handed to a socket), and whether the target is answering: not
    /// when nothing could be sent (it is down or unreachable) or a request timed out
    /// (it hangs); a connection it closed or reset is one request's failure.
    fn classify_error(
        &self,
        key: &OutputKey,
        error: UreqError,
        transmitted: bool,
    ) -> (SinkOutcome, Answered) {
        let tls_error = tls::tls_error(&error);
        let refused = tls_error.and_then(tls::refused_by_target);
        let answered = match &error {
            UreqError::BadUri(_) | UreqError::Http(_) | UreqError::RequireHttpsOnly(_)
                if !transmitted =>
            {
                // this output's key or headers: the next output may be fine
                Answered::Answering
            }
            // nothing could be sent (a connection refused, a failed handshake) or the
            // target refused the TLS session: it cannot be reached
            _ if !transmitted || refused.is_some() => Answered::Unreachable,
            UreqError::Timeout(_) => Answered::NotAnswering,
            _ => Answered::Answering,
        };
        let outcome = match &error {
            UreqError::BadUri(_) | UreqError::Http(_) | UreqError::RequireHttpsOnly(_)
                if !transmitted =>
            {
                SinkOutcome::NotPublished {
                    evidence: format!(
                        "request not sent, it could not be built ({error}): the url, a \
                         header or the output's key holds characters HTTP does not allow"
                    ),
                    retryable: false,
                }
            }
            _ if refused.is_some() => SinkOutcome::NotPublished {
                evidence: format!(
                    "not taken: {} refused the TLS session ({error}): it refuses our client \
                     certificate or needs one (client_cert_file, client_key_file)",
                    self.url
                ),
                retryable: true,
            },
            _ if !transmitted && tls_error.is_some() => SinkOutcome::NotPublished {
                evidence: format!(
                    "not sent, the TLS handshake with {} failed ({error}): a certificate the \
                     target does not accept, or one of the target's that no trusted CA \
                     signed (ca_file)",
                    self.url
                ),
                retryable: true,
            },
            UreqError::Timeout(timeout) if !transmitted && *timeout != Timeout::Connect => {
                SinkOutcome::NotPublished {
                    evidence: format!(
                        "not sent: the request's time budget ran out {LOCAL_TRIES} times before \
                         any byte of it left ({error}): the host may be overloaded"
                    ),
                    retryable: true,
                }
            }
            _ if !transmitted => SinkOutcome::NotPublished {
                evidence: format!("not sent, could not connect to {}: {error}", self.url),
                retryable: true,
            },
            UreqError::Timeout(Timeout::RecvResponse) => SinkOutcome::Uncertain {
                evidence: format!(
                    "request sent, no response within {} ms",
                    self.response_timeout_millis
                ),
            },
            UreqError::Timeout(Timeout::SendRequest | Timeout::SendBody) => {
                SinkOutcome::Uncertain {
                    evidence: format!(
                        "request partly sent, not finished within {} ms",
                        self.response_timeout_millis
                    ),
                }
            }
            _ => SinkOutcome::Uncertain {
                evidence: format!("request (possibly) sent, then: {error}"),
            },
        };
        tracing::debug!(sink = %self.name, key = %key, outcome = ?outcome, "http publish failed");
        (outcome, answered)
    }
}

/// Whether the target answered a request (with any status), so that the publish goes
/// on to the next request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answered {
    /// It answered, or the failure concerns this request alone.
    Answering,
    /// The request timed out: the rest of the call's outputs are not sent.
    NotAnswering,
    /// Nothing could be sent (a connection refused, a failed TLS handshake), or the
    /// target refused the TLS session: the rest of the call's outputs are not sent,
    /// and the sink cannot deliver ([`Sink::cannot_reach`]).
    Unreachable,
}

/// The outcome of a response with `status`, `head` (the first bytes of its body) and
/// its `Location` header.
fn classify_status(status: u16, head: &[u8], location: Option<&str>) -> SinkOutcome {
    let body = String::from_utf8_lossy(head);
    let with_body = |text: String| {
        if body.trim().is_empty() {
            text
        } else {
            format!("{text}: {}", body.trim())
        }
    };
    match status {
        200..=299 => SinkOutcome::Published {
            evidence: format!("HTTP {status}"),
        },
        408 | 429 | 503 => SinkOutcome::NotPublished {
            evidence: with_body(format!("HTTP {status}")),
            retryable: true,
        },
        301 | 307 | 308 => SinkOutcome::NotPublished {
            evidence: format!(
                "HTTP {status} to {}: redirects are not followed, set the sink's url to the \
                 final address",
                location.unwrap_or("(no location)")
            ),
            retryable: false,
        },
        400..=499 => SinkOutcome::NotPublished {
            evidence: with_body(format!("HTTP {status}")),
            retryable: false,
        },
        500..=599 => SinkOutcome::Uncertain {
            evidence: with_body(format!(
                "HTTP {status} (the target may have acted before failing)"
            )),
        },
        _ => SinkOutcome::Uncertain {
            evidence: format!("HTTP {status} (not an answer the sink can classify)"),
        },
    }
}

impl Sink for HttpSink {
    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
        self.not_answering = false;
        self.unreachable = None;
        let mut rest = outputs;
        while let Some(first) = rest.first() {
            if self.ndjson() && !Bodies::fits_a_line(first) {
                outcomes.push(SinkOutcome::NotPublished {
                    evidence: "not sent: the payload holds a line break, so it cannot be one \
                               line of an ndjson batch (set batch_max_lines = 1 to post such \
                               payloads one per request)"
                        .to_owned(),
                    retryable: false,
                });
                rest = &rest[1..];
                continue;
            }
            let count = if self.ndjson() {
                take_batch(rest, self.batch_max_lines, self.batch_max_bytes)
            } else {
                1
            };
            let (batch, after) = rest.split_at(count);
            let (outcome, answered) = self.post(batch);
            if answered == Answered::Unreachable {
                if let SinkOutcome::NotPublished { evidence, .. } = &outcome {
                    self.unreachable = Some(evidence.clone());
                }
            }
            outcomes.extend(std::iter::repeat_n(outcome, count));
            rest = after;
            if answered != Answered::Answering {
                // the rest is not sent: no outcome, so no attempt is charged to it
                self.not_answering = true;
                break;
            }
        }
    }

    fn target_not_answering(&self) -> bool {
        self.not_answering
    }

    fn cannot_reach(&self) -> Option<&str> {
        self.unreachable.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classified_as_the_module_docs_say() {
        assert!(classify_status(201, b"", None).is_published());
        assert_eq!(
            classify_status(400, b"bad field", None),
            SinkOutcome::NotPublished {
                evidence: "HTTP 400: bad field".into(),
                retryable: false
            }
        );
        for status in [408, 429, 503] {
            assert!(matches!(
                classify_status(status, b"", None),
                SinkOutcome::NotPublished {
                    retryable: true,
                    ..
                }
            ));
        }
        for status in [500, 501, 502, 504, 505, 599, 302, 303, 102] {
            assert!(matches!(
                classify_status(status, b"", None),
                SinkOutcome::Uncertain { .. }
            ));
        }
        assert!(!classify_status(308, b"", Some("http://x/")).may_retry());
    }

    #[test]
    fn tls_files_need_an_https_url_and_each_other() {
        let config = |url: &str, tls: HttpTlsConfig| HttpSinkConfig {
            url: url.into(),
            tls,
            ..HttpSinkConfig::default()
        };
        let error = HttpSink::new(
            "out",
            config(
                "http://127.0.0.1:1/",
                HttpTlsConfig {
                    ca_file: Some("ca.pem".into()),
                    ..HttpTlsConfig::default()
                },
            ),
        )
        .unwrap_err();
        assert!(
            error.to_string().contains("are for an https:// url"),
            "{error}"
        );
        let error = HttpSink::new(
            "out",
            config(
                "https://127.0.0.1:1/",
                HttpTlsConfig {
                    client_cert_file: Some("client.pem".into()),
                    ..HttpTlsConfig::default()
                },
            ),
        )
        .unwrap_err();
        assert!(error.to_string().contains("go together"), "{error}");
        let error = HttpSink::new(
            "out",
            config(
                "https://127.0.0.1:1/",
                HttpTlsConfig {
                    ca_file: Some("/nonexistent/ca.pem".into()),
                    ..HttpTlsConfig::default()
                },
            ),
        )
        .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("ca_file '/nonexistent/ca.pem': cannot read it"),
            "{error}"
        );
        assert!(HttpSink::new(
            "out",
            config("https://example.invalid/", HttpTlsConfig::default())
        )
        .is_ok());
    }
}
