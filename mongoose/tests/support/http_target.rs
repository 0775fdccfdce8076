//! A real HTTP/1.1 target on loopback for the tests that need to see what an HTTP
//! forward sent: every request's `Idempotency-Key` and body line is kept, and every
//! request is answered with the status set by [`HttpTarget::answer`] (201 at first).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// One request the target answered 2xx: its key and its body (one output).
#[derive(Clone, Debug)]
pub struct Received {
    pub key: String,
    pub body: String,
}

/// A real HTTP target on a free loopback port (see the module documentation).
pub struct HttpTarget {
    port: u16,
    status: Arc<AtomicU16>,
    received: Arc<Mutex<Vec<Received>>>,
}

impl HttpTarget {
    /// Listens on a free port, answering 201.
    pub fn start() -> HttpTarget {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = listener.local_addr().expect("address").port();
        let target = HttpTarget {
            port,
            status: Arc::new(AtomicU16::new(201)),
            received: Arc::default(),
        };
        let (status, received) = (Arc::clone(&target.status), Arc::clone(&target.received));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (status, received) = (Arc::clone(&status), Arc::clone(&received));
                std::thread::spawn(move || serve(stream, &status, &received));
            }
        });
        target
    }

    /// The url to post to.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/events", self.port)
    }

    /// Answers every request from now on with `status` (a 5xx makes each output
    /// uncertain: the sink retries it, its input stays uncommitted).
    pub fn answer(&self, status: u16) {
        self.status.store(status, Ordering::Release);
    }

    /// What the target took (answered 2xx) so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().clone()
    }
}

fn serve(stream: TcpStream, status: &AtomicU16, received: &Mutex<Vec<Received>>) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let (mut length, mut key) = (0usize, String::new());
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header.trim_end().is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                match name.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "idempotency-key" => key = value.trim().to_owned(),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let answer = status.load(Ordering::Acquire);
        if (200..300).contains(&answer) {
            received.lock().push(Received {
                key,
                body: String::from_utf8_lossy(&body).into_owned(),
            });
        }
        let reply = format!("HTTP/1.1 {answer} Target\r\ncontent-length: 0\r\n\r\n");
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}
