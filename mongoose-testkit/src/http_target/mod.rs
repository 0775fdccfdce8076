//! One scripted HTTP/1.1 target ([`HttpTarget`]) for every test that needs a real
//! server on loopback: the sink's tests, the end-to-end tests, the chaos harness's HTTP
//! peer and the benchmarks (issue 42, item 4). Plain, or TLS with a rustls
//! [`ServerConfig`] (see [`crate::https`]); keep-alive connections, a thread each.
//!
//! What it answers to each request is decided, in this order, by
//!
//! 1. the next of the answers queued with [`HttpTarget::script`],
//! 2. the [`Script`] given to [`Builder::script`] (a closure over the [`Request`] will
//!    do), which may decide before the body is read ([`Script::before_body`], the only
//!    way to [`Answer::CloseMidBody`]) or once it is read ([`Script::answer`]),
//! 3. the standing answer of [`HttpTarget::answer`] (`201` at first).
//!
//! Every request is recorded (method, path, headers, its body gunzipped, the answer)
//! for the test to read ([`HttpTarget::exchanges`]), unless the target was built with
//! [`Builder::keep_requests`]`(false)` (a long-running peer), and shown to
//! [`Script::observe`] before its answer is written. [`HttpTarget::hold`] withholds
//! answers (requests are still taken); [`HttpTarget::down`] and [`HttpTarget::up`]
//! stop and start listening on the same port.
//!
//! # Example
//!
//! ```no_run
//! use mongoose_testkit::http_target::{Answer, HttpTarget};
//!
//! let target = HttpTarget::start();
//! target.script([Answer::Status(503), Answer::Hang]);
//! // ... post to target.url() ...
//! assert!(target.requests().iter().all(|request| request.method == "POST"));
//! ```

mod serve;

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use rustls::ServerConfig;

/// What the target does with one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Answer this status (an empty body) and keep the connection.
    Status(u16),
    /// Answer this status with this body and keep the connection.
    StatusWithBody(u16, String),
    /// Answer this status, then close the connection (as a target closes an idle
    /// keep-alive connection).
    StatusThenClose(u16),
    /// Answer this status after this delay.
    Late(Duration, u16),
    /// Never answer: keep the connection, reading, until the client closes it (or
    /// 120 s pass).
    Hang,
    /// Read the request, then close the connection without an answer.
    Close,
    /// Read half the body, close the writing side without an answer while the client
    /// may still be sending, read the rest (for the record, up to 30 s), then close.
    /// Only [`Script::before_body`] or the queue can choose it.
    CloseMidBody,
}

impl Answer {
    /// The status it answers, if it answers.
    pub fn status(&self) -> Option<u16> {
        match self {
            Answer::Status(status)
            | Answer::StatusWithBody(status, _)
            | Answer::StatusThenClose(status)
            | Answer::Late(_, status) => Some(*status),
            Answer::Hang | Answer::Close | Answer::CloseMidBody => None,
        }
    }

    /// Whether it answers 2xx: the client is told the request was taken.
    pub fn takes(&self) -> bool {
        self.status()
            .is_some_and(|status| (200..300).contains(&status))
    }
}

/// A request as the target read it.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// Counted over the target's life from 0, in the order their heads were read.
    pub number: u64,
    /// Which accepted connection it came on (0, 1, ...).
    pub connection: usize,
    /// `POST`, `GET`, ...
    pub method: String,
    /// The request target (`/events`).
    pub path: String,
    /// Header names in lowercase, values trimmed, in order.
    pub headers: Vec<(String, String)>,
    /// The body, gunzipped when `content-encoding: gzip` (as far as it decodes).
    /// Empty in [`Script::before_body`].
    pub body: Vec<u8>,
    /// The body as it came (gzipped or not).
    pub raw_body: Vec<u8>,
    /// Whether the whole `content-length` body was read (false for a body cut short
    /// by [`Answer::CloseMidBody`], and in [`Script::before_body`]).
    pub complete: bool,
    /// Why a gzip body did not decode, when it did not.
    pub decode_error: Option<String>,
    /// The client's certificate (DER), when it presented one over TLS.
    pub client_cert: Option<Vec<u8>>,
}

impl Request {
    /// The value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body's lines (an ndjson body: each line without its `\n`).
    pub fn lines(&self) -> Vec<String> {
        self.text().lines().map(str::to_owned).collect()
    }

    /// The `Idempotency-Keys` header split into keys.
    pub fn keys(&self) -> Vec<String> {
        self.header("idempotency-keys")
            .map(|keys| keys.split(',').map(|key| key.trim().to_owned()).collect())
            .unwrap_or_default()
    }

    /// The outputs it carries, each `(key, body)`: one under its `Idempotency-Key`
    /// (its body without a final line break), or each ndjson line under its key of
    /// `Idempotency-Keys`.
    pub fn outputs(&self) -> Vec<(String, String)> {
        match self.header("idempotency-key") {
            Some(key) => {
                let text = self.text();
                let body = text.strip_suffix('\n').unwrap_or(&text);
                vec![(key.to_owned(), body.to_owned())]
            }
            None => self.keys().into_iter().zip(self.lines()).collect(),
        }
    }
}

/// How a target answers beyond its queue: see the module's documentation. A closure
/// `Fn(&Request) -> Answer` is a script that decides once the body is read.
pub trait Script: Send + Sync + 'static {
    /// Decides before the body is read (`request.body` is empty); `None` reads it and
    /// asks [`Script::answer`].
    fn before_body(&self, request: &Request) -> Option<Answer> {
        let _ = request;
        None
    }

    /// Decides once the body is read.
    fn answer(&self, request: &Request) -> Answer;

    /// Sees each request with its answer when it is recorded: before the answer is
    /// written (after the rest of the body for [`Answer::CloseMidBody`]). An error
    /// ends the connection without an answer (and goes to
    /// [`Script::connection_failed`]).
    ///
    /// # Errors
    /// Whatever the script could not do (write its log).
    fn observe(&self, request: &Request, answer: &Answer) -> io::Result<()> {
        let _ = (request, answer);
        Ok(())
    }

    /// A connection ended with an error (a client gone, a refused handshake, a
    /// failed [`Script::observe`]).
    fn connection_failed(&self, error: &io::Error) {
        let _ = error;
    }
}

impl<F> Script for F
where
    F: Fn(&Request) -> Answer + Send + Sync + 'static,
{
    fn answer(&self, request: &Request) -> Answer {
        self(request)
    }
}

/// Builds an [`HttpTarget`] ([`HttpTarget::builder`]).
#[must_use]
pub struct Builder {
    port: u16,
    tls: Option<Arc<ServerConfig>>,
    script: Option<Box<dyn Script>>,
    keep_requests: bool,
    read_timeout: Option<Duration>,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("port", &self.port)
            .field("tls", &self.tls.is_some())
            .field("script", &self.script.is_some())
            .field("keep_requests", &self.keep_requests)
            .finish_non_exhaustive()
    }
}

impl Builder {
    /// Listen on this port of 127.0.0.1 (0, the default: a free one).
    pub fn port(mut self, port: u16) -> Builder {
        self.port = port;
        self
    }

    /// Serve https with this configuration.
    pub fn tls(mut self, config: Arc<ServerConfig>) -> Builder {
        self.tls = Some(config);
        self
    }

    /// Answer by this script (after the queue).
    pub fn script(mut self, script: impl Script) -> Builder {
        self.script = Some(Box::new(script));
        self
    }

    /// Whether requests are kept for [`HttpTarget::exchanges`] (default true; a
    /// long-running peer that logs through [`Script::observe`] keeps none).
    pub fn keep_requests(mut self, keep: bool) -> Builder {
        self.keep_requests = keep;
        self
    }

    /// Gives up a connection whose client sends nothing for this long (default:
    /// never).
    pub fn read_timeout(mut self, timeout: Duration) -> Builder {
        self.read_timeout = Some(timeout);
        self
    }

    /// Binds and starts listening.
    ///
    /// # Errors
    /// The port cannot be bound.
    pub fn try_start(self) -> io::Result<HttpTarget> {
        let listener = TcpListener::bind(("127.0.0.1", self.port))?;
        let address = listener.local_addr()?;
        let target = HttpTarget {
            inner: Arc::new(Inner {
                address,
                tls: self.tls,
                script: self.script,
                keep_requests: self.keep_requests,
                read_timeout: self.read_timeout,
                numbers: AtomicU64::new(0),
                state: Mutex::new(State::default()),
                accepting: Mutex::new(None),
            }),
        };
        target.listen(listener);
        Ok(target)
    }

    /// [`Builder::try_start`], panicking when the port cannot be bound.
    pub fn start(self) -> HttpTarget {
        self.try_start().expect("the HTTP target binds its port")
    }
}

/// A scripted HTTP/1.1 server on a local port (see the module's documentation); it
/// runs until [`HttpTarget::down`] or the end of the process. Clones share it.
#[derive(Clone)]
pub struct HttpTarget {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for HttpTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTarget")
            .field("address", &self.inner.address)
            .field("tls", &self.inner.tls.is_some())
            .finish_non_exhaustive()
    }
}

struct Inner {
    address: SocketAddr,
    tls: Option<Arc<ServerConfig>>,
    script: Option<Box<dyn Script>>,
    keep_requests: bool,
    read_timeout: Option<Duration>,
    numbers: AtomicU64,
    state: Mutex<State>,
    /// The accept thread while listening, and its stop flag.
    accepting: Mutex<Option<(Arc<AtomicBool>, JoinHandle<()>)>>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Answer>,
    /// The standing answer (`None`: 201).
    otherwise: Option<Answer>,
    held: bool,
    exchanges: Vec<(Request, Answer)>,
    refused: Vec<String>,
    connections: usize,
    closed: usize,
    /// The open connections (a clone of each socket), for [`HttpTarget::down`].
    open: HashMap<usize, TcpStream>,
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl HttpTarget {
    /// A plain target on a free port answering `201` unless told otherwise.
    pub fn start() -> HttpTarget {
        HttpTarget::builder().start()
    }

    /// A target to configure.
    pub fn builder() -> Builder {
        Builder {
            port: 0,
            tls: None,
            script: None,
            keep_requests: true,
            read_timeout: None,
        }
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.inner.address
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.inner.address.port()
    }

    /// A sink's url for it: `http(s)://127.0.0.1:<port>/events`.
    pub fn url(&self) -> String {
        let scheme = if self.inner.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}/events", self.inner.address)
    }

    /// The next requests get these answers, in order, before any script.
    pub fn script(&self, answers: impl IntoIterator<Item = Answer>) {
        self.inner.state().queue.extend(answers);
    }

    /// The answer to every request neither queued nor scripted from now on (`None`:
    /// `201` again).
    pub fn answer(&self, answer: Option<Answer>) {
        self.inner.state().otherwise = answer;
    }

    /// While `on`, every request is taken (recorded with the answer it will get) but
    /// answers are withheld until `hold(false)`: a target that took outputs whose
    /// answers never reached the sender.
    pub fn hold(&self, on: bool) {
        self.inner.state().held = on;
    }

    /// Every request recorded so far with its answer, in the order recorded.
    pub fn exchanges(&self) -> Vec<(Request, Answer)> {
        self.inner.state().exchanges.clone()
    }

    /// Every request recorded so far.
    pub fn requests(&self) -> Vec<Request> {
        let state = self.inner.state();
        state
            .exchanges
            .iter()
            .map(|(request, _)| request.clone())
            .collect()
    }

    /// The outputs ([`Request::outputs`]) of the requests answered 2xx so far, in the
    /// order taken.
    pub fn taken(&self) -> Vec<(String, String)> {
        let state = self.inner.state();
        state
            .exchanges
            .iter()
            .filter(|(_, answer)| answer.takes())
            .flat_map(|(request, _)| request.outputs())
            .collect()
    }

    /// Every TLS handshake (or first read) refused so far: rustls' error.
    pub fn refused(&self) -> Vec<String> {
        self.inner.state().refused.clone()
    }

    /// How many connections it accepted.
    pub fn connections(&self) -> usize {
        self.inner.state().connections
    }

    /// How many connections have ended.
    pub fn closed(&self) -> usize {
        self.inner.state().closed
    }

    /// Stops listening (the port refuses from now on) and closes every connection.
    pub fn down(&self) {
        let accepting = self
            .inner
            .accepting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some((stop, thread)) = accepting else {
            return;
        };
        stop.store(true, Ordering::Release);
        // wakes the accept thread, which sees the flag and drops the listener
        let _ = TcpStream::connect(self.inner.address);
        let _ = thread.join();
        for (_, connection) in self.inner.state().open.drain() {
            let _ = connection.shutdown(Shutdown::Both);
        }
    }

    /// Listens again on its port after [`HttpTarget::down`].
    ///
    /// # Panics
    /// The port was taken meanwhile.
    pub fn up(&self) {
        let listener = TcpListener::bind(self.inner.address).expect("the target's port again");
        self.listen(listener);
    }

    fn listen(&self, listener: TcpListener) {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let inner = Arc::clone(&self.inner);
        let thread = thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::Acquire) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let connection = {
                    let mut state = inner.state();
                    state.connections += 1;
                    let connection = state.connections - 1;
                    if let Ok(clone) = stream.try_clone() {
                        state.open.insert(connection, clone);
                    }
                    connection
                };
                let inner = Arc::clone(&inner);
                thread::spawn(move || {
                    serve::connection(&inner, stream, connection);
                    let mut state = inner.state();
                    state.open.remove(&connection);
                    state.closed += 1;
                });
            }
        });
        let previous = self
            .inner
            .accepting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace((stop, thread));
        assert!(previous.is_none(), "the target was already listening");
    }
}
