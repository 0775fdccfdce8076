//! The scripted HTTP target against a raw-socket client: the order in which answers are
//! decided (queue, script, standing answer), what is recorded, a mid-body close, held
//! answers, and a target stopped and started again on its port.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mongoose_testkit::http_target::{Answer, HttpTarget, Request};

/// A keep-alive client on one connection.
struct Client {
    reader: BufReader<TcpStream>,
}

impl Client {
    fn connect(address: SocketAddr) -> Client {
        let stream = TcpStream::connect(address).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("a read timeout");
        Client {
            reader: BufReader::new(stream),
        }
    }

    fn send(&mut self, extra_headers: &str, body: &[u8]) {
        let head = format!(
            "POST /events HTTP/1.1\r\nhost: test\r\ncontent-length: {}\r\n{extra_headers}\r\n",
            body.len()
        );
        let stream = self.reader.get_mut();
        stream.write_all(head.as_bytes()).expect("head");
        stream.write_all(body).expect("body");
    }

    /// The answer's status and body; `None` when the connection ended first.
    fn status(&mut self) -> Option<(u16, String)> {
        let mut line = String::new();
        if self.reader.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        let status = line.split_whitespace().nth(1)?.parse().ok()?;
        let mut length = 0;
        loop {
            line.clear();
            self.reader.read_line(&mut line).ok()?;
            if line.trim_end().is_empty() {
                break;
            }
            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse().ok()?;
            }
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).ok()?;
        Some((status, String::from_utf8_lossy(&body).into_owned()))
    }

    fn post(&mut self, extra_headers: &str, body: &[u8]) -> Option<(u16, String)> {
        self.send(extra_headers, body);
        self.status()
    }
}

fn gzip(text: &str) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(text.as_bytes()).expect("gzip");
    encoder.finish().expect("gzip")
}

#[test]
fn answers_come_from_the_queue_then_the_script_then_the_standing_answer() {
    let scripted = Arc::new(AtomicBool::new(true));
    let script_on = Arc::clone(&scripted);
    let target = HttpTarget::builder()
        .script(move |request: &Request| {
            if script_on.load(Ordering::Acquire) && request.text().contains("poison") {
                Answer::StatusWithBody(500, "poisoned".to_owned())
            } else {
                Answer::Status(200)
            }
        })
        .start();
    target.script([Answer::Status(503)]);
    let mut client = Client::connect(target.address());
    assert_eq!(client.post("", b"poison").map(|a| a.0), Some(503), "queued");
    assert_eq!(
        client.post("", b"poison"),
        Some((500, "poisoned".to_owned())),
        "scripted on the body"
    );
    assert_eq!(client.post("", b"fine").map(|a| a.0), Some(200));

    let plain = HttpTarget::start();
    let mut client = Client::connect(plain.address());
    assert_eq!(
        client.post("", b"x").map(|a| a.0),
        Some(201),
        "201 at first"
    );
    plain.answer(Some(Answer::Status(429)));
    assert_eq!(client.post("", b"x").map(|a| a.0), Some(429));
    plain.answer(None);
    assert_eq!(client.post("", b"x").map(|a| a.0), Some(201));
    assert_eq!(plain.connections(), 1, "one keep-alive connection");
}

#[test]
fn every_request_is_recorded_with_its_body_decoded_and_its_answer() {
    let target = HttpTarget::start();
    target.script([Answer::Status(200), Answer::Status(503)]);
    let mut client = Client::connect(target.address());
    client.post(
        "content-encoding: gzip\r\nidempotency-keys: k1, k2\r\nX-Mongoose-Attempt: 3\r\n",
        &gzip("one\ntwo\n"),
    );
    client.post("idempotency-key: k3\r\n", b"three\n");
    client.post("idempotency-key: k4\r\n", b"four");
    let exchanges = target.exchanges();
    assert_eq!(exchanges.len(), 3);
    let (first, answer) = &exchanges[0];
    assert_eq!(
        (first.method.as_str(), first.path.as_str()),
        ("POST", "/events")
    );
    assert_eq!(first.header("x-mongoose-attempt"), Some("3"));
    assert_eq!(first.lines(), ["one", "two"]);
    assert_ne!(first.raw_body, first.body, "the body came gzipped");
    assert!(first.complete && first.decode_error.is_none());
    assert_eq!((first.number, first.connection), (0, 0));
    assert_eq!(answer, &Answer::Status(200));
    assert_eq!(exchanges[1].1, Answer::Status(503));
    assert_eq!(
        target.taken(),
        [
            ("k1".to_owned(), "one".to_owned()),
            ("k2".to_owned(), "two".to_owned()),
            ("k4".to_owned(), "four".to_owned()),
        ],
        "the outputs of the requests answered 2xx"
    );
}

#[test]
fn a_close_mid_body_or_before_the_answer_leaves_the_client_without_one() {
    let target = HttpTarget::start();
    target.script([
        Answer::CloseMidBody,
        Answer::Close,
        Answer::StatusThenClose(200),
    ]);
    for expected in [None, None, Some(200)] {
        let mut client = Client::connect(target.address());
        let answer = client.post("", &[b'x'; 64 * 1024]).map(|a| a.0);
        assert_eq!(answer, expected);
        assert_eq!(client.status(), None, "the connection is closed");
    }
    // a request closed mid-body is recorded once the rest is read, which may be after
    // the client saw the close and sent the next request
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut exchanges = Vec::new();
    while exchanges.len() < 3 {
        assert!(std::time::Instant::now() < deadline, "{exchanges:?}");
        std::thread::sleep(Duration::from_millis(5));
        exchanges = target.exchanges();
    }
    let (cut, _) = exchanges
        .iter()
        .find(|(_, answer)| *answer == Answer::CloseMidBody)
        .expect("the request closed mid-body");
    assert_eq!(cut.body.len(), 64 * 1024, "the rest read for the record");
    assert!(cut.complete);
    assert_eq!(target.connections(), 3);
}

#[test]
fn held_answers_are_written_once_released() {
    let target = HttpTarget::start();
    target.hold(true);
    let mut client = Client::connect(target.address());
    client.send("", b"x");
    client
        .reader
        .get_ref()
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("a short timeout");
    let mut byte = [0u8; 1];
    assert!(
        client.reader.get_mut().read(&mut byte).is_err(),
        "no answer while held"
    );
    assert_eq!(target.requests().len(), 1, "taken while held");
    target.hold(false);
    client
        .reader
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a long timeout");
    assert_eq!(client.status().map(|a| a.0), Some(201));
}

#[test]
fn a_target_down_refuses_and_up_again_listens_on_its_port() {
    let target = HttpTarget::start();
    let mut client = Client::connect(target.address());
    assert_eq!(client.post("", b"x").map(|a| a.0), Some(201));
    target.down();
    assert_eq!(client.status(), None, "its connections were closed");
    assert!(TcpStream::connect(target.address()).is_err(), "refused");
    target.up();
    let mut client = Client::connect(target.address());
    assert_eq!(client.post("", b"y").map(|a| a.0), Some(201));
    assert_eq!(target.requests().len(), 2);
}
