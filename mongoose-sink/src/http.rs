//! The HTTP line sink: one `POST` per output, its payload as the body, keyed for
//! de-duplication by the target.
//!
//! Every request carries `Idempotency-Key: <the output's key>` (the
//! [`OutputKey`] as text, `feed/epoch/lane/position/index/generation`) and
//! `X-Mongoose-Attempt: <earlier attempts>` (0 on the first attempt). A retry of the
//! same output carries the same key, so a target that de-duplicates by
//! `Idempotency-Key` holds each output once however often it is sent.
//!
//! Plain `http://` only: **https is not built yet** (a `https://` url is refused when
//! the sink is made). Connections are kept alive between requests; redirects are not
//! followed; proxies named in the environment (`HTTP_PROXY`, `ALL_PROXY`) are not
//! used: the sink posts to its url.
//!
//! ```
//! use mongoose_sink::{HttpSink, HttpSinkConfig};
//!
//! let config = HttpSinkConfig {
//!     url: "http://127.0.0.1:8080/events".into(),
//!     timeout_millis: 1_000,           // to connect
//!     response_timeout_millis: 5_000,  // to send the request and read the response
//!     headers: vec![("Authorization".into(), "Bearer t0k3n".into())],
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
//! | no byte of the request was handed to the socket (refused, unreachable, DNS failure, connect timeout) | `NotPublished { retryable: true }` |
//! | any failure after the first byte of the request was handed to the socket (a timeout, a reset, an unreadable response) | `Uncertain` |
//!
//! "Handed to the socket" is observed, not guessed: the sink's connector wraps
//! ureq's TCP transport and notes every transmit ureq attempts, so an error with no
//! transmit behind it proves that nothing left this process.
//! In ureq 3 (3.5) terms, the errors fall as follows:
//!
//! | ureq error | when ureq raises it | nothing sent? |
//! |---|---|---|
//! | `HostNotFound` | resolving the host | yes: `NotPublished { retryable: true }` |
//! | `Timeout(Resolve)` | resolving took longer than the connect bound (a slow resolver, or a loaded host) | yes: sent again at once (up to 3 times), then `NotPublished { retryable: true }` |
//! | `Timeout(Connect)`, `Io(ConnectionRefused / HostUnreachable / NetworkUnreachable / NetworkDown / AddrNotAvailable)`, `ConnectionFailed` | `TcpStream::connect` | yes: `NotPublished { retryable: true }` |
//! | `Timeout(SendRequest)`, `Timeout(SendBody)` before any byte was handed to the socket | the sink's own time budget ran out first (a loaded host): no attempt was made | yes: sent again at once (up to 3 times), then `NotPublished { retryable: true }` |
//! | `Timeout(SendRequest)`, `Timeout(SendBody)`, `Io(..)` from a write | part of the request may be with the target | no: `Uncertain` |
//! | `Timeout(RecvResponse)`, `Io(..)` from a read, `Protocol(..)`, `LargeResponseHeader` | the whole request was sent, the answer is missing or unreadable | no: `Uncertain` |
//! | `BadUri`, `Http(..)`, `RequireHttpsOnly` | before connecting (checked when the sink is made) | yes: `NotPublished { retryable: false }` |
//! | any other error | | decided by the transmit record: `NotPublished { retryable: true }` with no transmit, else `Uncertain` |
//!
//! The body of a 2xx is read (up to 64 KiB) so that the connection can be kept; a
//! failure to read it does not change the outcome: the status already said published.
//!
//! # A batch
//!
//! Outputs are posted in order, one at a time, and each is answered by what the target
//! said of it: a target that answers (any status, 2xx to 5xx) is asked about every
//! output of the batch, so a failure concerns the request that failed and no other.
//! A batch stops only when the target does not answer: nothing could be sent (it is
//! down or unreachable) or a request timed out (it hangs). The outputs after that one
//! were **not sent**: they get no outcome (the answer is shorter than the batch, as
//! [`Sink::publish`] allows), so the runner charges them no attempt and gives them
//! again once the failed one's retry falls due; a target that is down costs one probe
//! per backoff, not one timeout (or one charged attempt) per output.

use std::fmt;
use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mongoose_core::sink::{Output, OutputKey, Sink, SinkOutcome};
use serde::{Deserialize, Serialize};
use ureq::config::Config as UreqConfig;
use ureq::http::{HeaderName, HeaderValue, Uri};
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, NextTimeout, TcpConnector, Transport,
};
use ureq::{Agent, Error as UreqError, Timeout};

use crate::SinkError;

/// How many bytes of a refusal's body go into its evidence.
const EVIDENCE_BODY_BYTES: usize = 200;
/// How much of a response body is read so that its connection can be kept alive.
const DRAIN_LIMIT: u64 = 64 * 1024;
/// How often a request whose own time budget ran out before any byte of it was sent
/// (no attempt: the target saw nothing) is sent again at once before that counts as a
/// failed attempt.
const LOCAL_TRIES: u32 = 3;

/// The settings of an [`HttpSink`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpSinkConfig {
    /// Where outputs are posted: `http://host:port/path` (https is not built yet).
    pub url: String,
    /// The bound on resolving the host and connecting, in milliseconds.
    pub timeout_millis: u64,
    /// The bound on each of sending the request, waiting for the response's head and
    /// reading its body, in milliseconds. Past it the output is
    /// [`SinkOutcome::Uncertain`]: the target may have it.
    pub response_timeout_millis: u64,
    /// Extra headers sent with every request (`Authorization`, `Content-Type`...).
    pub headers: Vec<(String, String)>,
}

/// A sink that posts each output to an HTTP endpoint (see the [module](self) docs for
/// how each answer is classified).
pub struct HttpSink {
    name: String,
    url: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    response_timeout_millis: u64,
    agent: Agent,
    /// Set by the transport when ureq hands request bytes to a socket; cleared
    /// before each request.
    transmitted: Arc<AtomicBool>,
    /// The last publish ended on a request the target did not answer.
    not_answering: bool,
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
    /// A sink named `name` (for logs and errors) with `config`. Checks the url (plain
    /// `http://` with a host), the headers and the timeouts; connects lazily, on the
    /// first publish.
    pub fn new(name: &str, config: HttpSinkConfig) -> Result<HttpSink, SinkError> {
        let settings = |message: String| SinkError::Settings {
            sink: name.to_string(),
            message,
        };
        let uri: Uri = config.url.parse().map_err(|error| {
            settings(format!(
                "url '{}' is not a valid url ({error}): give http://host:port/path",
                config.url
            ))
        })?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(settings(format!(
                    "url '{}': https is not built yet in the HTTP sink: use http:// (a local \
                     TLS-terminating proxy can forward to the https target)",
                    config.url
                )))
            }
            _ => {
                return Err(settings(format!(
                    "url '{}' must start with http://",
                    config.url
                )))
            }
        }
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
        let mut headers = Vec::with_capacity(config.headers.len());
        for (key, value) in &config.headers {
            let header_name = HeaderName::from_bytes(key.as_bytes()).map_err(|_| {
                settings(format!(
                    "header name '{key}' is not a valid HTTP header name"
                ))
            })?;
            if header_name == "idempotency-key" || header_name == "x-mongoose-attempt" {
                return Err(settings(format!(
                    "header '{key}' is set by the sink itself: remove it from the headers"
                )));
            }
            let header_value = HeaderValue::from_str(value).map_err(|_| {
                settings(format!(
                    "header '{key}' has a value with characters HTTP does not allow"
                ))
            })?;
            headers.push((header_name, header_value));
        }

        let connect = Duration::from_millis(config.timeout_millis);
        let response = Duration::from_millis(config.response_timeout_millis);
        let agent_config = Agent::config_builder()
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
            .timeout_recv_body(Some(response))
            .build();
        let transmitted = Arc::new(AtomicBool::new(false));
        let connector = TcpConnector::default().chain(TransmitRecorder {
            transmitted: Arc::clone(&transmitted),
        });
        let agent = Agent::with_parts(agent_config, connector, LiteralFirst::default());
        Ok(HttpSink {
            name: name.to_string(),
            url: config.url,
            headers,
            response_timeout_millis: config.response_timeout_millis,
            agent,
            transmitted,
            not_answering: false,
        })
    }

    /// Posts one output and classifies the answer; whether the target answered (a
    /// batch goes on only while it does).
    fn post(&mut self, output: &Output) -> (SinkOutcome, Answered) {
        let mut tries = 0;
        let (result, transmitted) = loop {
            tries += 1;
            let mut request = self
                .agent
                .post(&self.url)
                .header("Idempotency-Key", output.key.to_string())
                .header("X-Mongoose-Attempt", output.attempt.to_string());
            for (header_name, header_value) in &self.headers {
                request = request.header(header_name, header_value);
            }
            self.transmitted.store(false, Ordering::SeqCst);
            let result = request.send(&output.payload[..]);
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
                    tracing::debug!(sink = %self.name, key = %output.key, ?timeout, "the request's time budget ran out before it was sent: sent again");
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
                (
                    classify_status(status, &head, location.as_deref()),
                    Answered::Answering,
                )
            }
            Err(error) => self.classify_error(&output.key, error, transmitted),
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
        let answered = match &error {
            UreqError::BadUri(_) | UreqError::Http(_) | UreqError::RequireHttpsOnly(_)
                if !transmitted =>
            {
                // this output's key or headers: the next output may be fine
                Answered::Answering
            }
            _ if !transmitted => Answered::NotAnswering,
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

/// Whether the target answered a request (with any status), so that the batch goes
/// on to the next output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answered {
    /// It answered, or the failure concerns this request alone.
    Answering,
    /// Nothing could be sent, or the request timed out: the rest of the batch is not
    /// sent.
    NotAnswering,
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
        for output in outputs {
            let (outcome, answered) = self.post(output);
            outcomes.push(outcome);
            if answered == Answered::NotAnswering {
                // the rest is not sent: no outcome, so no attempt is charged to it
                self.not_answering = true;
                break;
            }
        }
    }

    fn target_not_answering(&self) -> bool {
        self.not_answering
    }
}

/// A resolver that answers an address written in the url (`http://127.0.0.1:8080/`)
/// itself and asks ureq's default resolver for a name. The default one resolves on a
/// thread of its own to bound the wait, one per new connection: on a loaded host that
/// thread alone outlasted the connect bound, for an address that needs no resolving.
#[derive(Debug, Default)]
struct LiteralFirst {
    names: DefaultResolver,
}

impl Resolver for LiteralFirst {
    fn resolve(
        &self,
        uri: &Uri,
        config: &UreqConfig,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, UreqError> {
        let literal = uri.authority().and_then(|authority| {
            let host = authority
                .host()
                .trim_start_matches('[')
                .trim_end_matches(']');
            let address: IpAddr = host.parse().ok()?;
            Some(SocketAddr::new(address, authority.port_u16().unwrap_or(80)))
        });
        match literal {
            Some(address) => {
                let mut addresses = self.empty();
                addresses.push(address);
                Ok(addresses)
            }
            None => self.names.resolve(uri, config, timeout),
        }
    }
}

/// A connector at the end of ureq's chain that wraps the TCP transport in a
/// [`RecordedTransport`].
#[derive(Debug)]
struct TransmitRecorder {
    transmitted: Arc<AtomicBool>,
}

impl<In: Transport> Connector<In> for TransmitRecorder {
    type Out = RecordedTransport<In>;

    fn connect(
        &self,
        _details: &ConnectionDetails<'_>,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, UreqError> {
        Ok(chained.map(|inner| RecordedTransport {
            inner,
            transmitted: Arc::clone(&self.transmitted),
        }))
    }
}

/// A transport that notes, before each transmit, that request bytes are being handed
/// to the socket (so an error with no note behind it proves nothing was sent).
#[derive(Debug)]
struct RecordedTransport<T> {
    inner: T,
    transmitted: Arc<AtomicBool>,
}

impl<T: Transport> Transport for RecordedTransport<T> {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.inner.buffers()
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), UreqError> {
        if amount > 0 {
            self.transmitted.store(true, Ordering::SeqCst);
        }
        self.inner.transmit_output(amount, timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, UreqError> {
        self.inner.await_input(timeout)
    }

    fn is_open(&mut self) -> bool {
        self.inner.is_open()
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
    fn an_address_written_in_the_url_needs_no_resolver() {
        let config = Agent::config_builder().build();
        let resolve = |url: &str| {
            LiteralFirst::default()
                .resolve(
                    &url.parse().expect("a url"),
                    &config,
                    NextTimeout::default(),
                )
                .expect("resolved")
                .to_vec()
        };
        assert_eq!(
            resolve("http://127.0.0.1:9/events"),
            ["127.0.0.1:9".parse::<SocketAddr>().expect("an address")]
        );
        assert_eq!(
            resolve("http://[::1]/events"),
            ["[::1]:80".parse::<SocketAddr>().expect("an address")]
        );
    }

    #[test]
    fn an_https_url_is_refused_until_it_is_built() {
        let config = HttpSinkConfig {
            url: "https://example.invalid/".into(),
            timeout_millis: 100,
            response_timeout_millis: 100,
            headers: Vec::new(),
        };
        let error = HttpSink::new("out", config).unwrap_err();
        assert!(error.to_string().contains("https is not built yet"));
    }
}
