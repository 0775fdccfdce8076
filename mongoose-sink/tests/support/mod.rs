//! A real HTTP/1.1 server on a local port for the HTTP sink's tests: it records every
//! request it reads and answers with the statuses a test scripts.

#![allow(dead_code, unreachable_pub)]

pub mod gate;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use mongoose_core::sink::{Output, OutputKey};
use mongoose_core::Epoch;
use parking_lot::Mutex;

/// What the server does with one request, once it has read it whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Answer with this status and body, keeping the connection.
    Status(u16, &'static str),
    /// Never answer (hold the connection open for a minute).
    Silence,
    /// Close the connection without answering.
    Close,
    /// Answer with this status, then close the connection (as a target closes an
    /// idle keep-alive connection).
    StatusThenClose(u16),
}

/// A request as the server read it.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// Header names in lowercase, with their values.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Which accepted connection it came on (0, 1, ...).
    pub connection: usize,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

#[derive(Default)]
struct State {
    replies: VecDeque<Reply>,
    requests: Vec<Recorded>,
    connections: usize,
    closed: usize,
}

/// The server; it runs until the test process ends.
#[derive(Clone)]
pub struct TestHttpServer {
    pub address: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl TestHttpServer {
    /// Starts a server that answers `201 Created` unless a reply is scripted.
    pub fn start() -> TestHttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a local port");
        let address = listener.local_addr().expect("local address");
        let state = Arc::new(Mutex::new(State::default()));
        let accept_state = Arc::clone(&state);
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let connection = {
                    let mut state = accept_state.lock();
                    state.connections += 1;
                    state.connections - 1
                };
                let state = Arc::clone(&accept_state);
                thread::spawn(move || {
                    serve(stream, connection, &state);
                    state.lock().closed += 1;
                });
            }
        });
        TestHttpServer { address, state }
    }

    /// The sink's url for this server.
    pub fn url(&self) -> String {
        format!("http://{}/events", self.address)
    }

    /// The next requests get these replies, in order (then `201` again).
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.state.lock().replies.extend(replies);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().requests.clone()
    }

    pub fn connections(&self) -> usize {
        self.state.lock().connections
    }

    /// How many connections the server has closed.
    pub fn closed(&self) -> usize {
        self.state.lock().closed
    }
}

fn serve(stream: TcpStream, connection: usize, state: &Mutex<State>) {
    let mut writer = stream.try_clone().expect("clone the stream");
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        // The request line.
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let Some((headers, body)) = mongoose_testkit::https::read_headers_and_body(&mut reader)
        else {
            return;
        };
        let reply = {
            let mut state = state.lock();
            state.requests.push(Recorded {
                headers,
                body,
                connection,
            });
            state
                .replies
                .pop_front()
                .unwrap_or(Reply::Status(201, "created"))
        };
        match reply {
            Reply::Status(status, text) => {
                let response = format!(
                    "HTTP/1.1 {status} Scripted\r\nContent-Length: {}\r\n\r\n{text}",
                    text.len()
                );
                if writer.write_all(response.as_bytes()).is_err() {
                    return;
                }
            }
            Reply::Silence => {
                thread::sleep(Duration::from_secs(60));
                return;
            }
            Reply::Close => return,
            Reply::StatusThenClose(status) => {
                let response = format!("HTTP/1.1 {status} Scripted\r\nContent-Length: 0\r\n\r\n");
                let _ = writer.write_all(response.as_bytes());
                let _ = writer.shutdown(std::net::Shutdown::Both);
                return;
            }
        }
    }
}

/// Output `index` of the input at `position` of feed `lines`, first attempt.
pub fn output(position: u64, index: u32, payload: &str) -> Output {
    Output::new(
        OutputKey::new("lines", Epoch(1), 0, position, index, 1),
        payload.as_bytes().to_vec(),
    )
}

/// A local address where nothing listens (a port bound, then released).
pub fn nothing_listening() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a local port");
    listener.local_addr().expect("local address")
}

/// Waits (generously) until `condition` holds.
pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(10));
    }
}
