//! One connection of an [`super::HttpTarget`]: the TLS handshake, then requests read
//! and answered as the queue, the script and the standing answer say.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;

use rustls::{ServerConnection, StreamOwned};

use super::{Answer, Inner, Request};

/// A connection, plain or TLS.
trait Conn: Read + Write {
    /// The TCP socket under it.
    fn tcp(&self) -> &TcpStream;
    /// Whether it is TLS.
    fn tls(&self) -> bool;
    /// Sends what the TLS session still has to send (its alert after an error).
    fn send_pending(&mut self) {}
}

impl Conn for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }

    fn tls(&self) -> bool {
        false
    }
}

impl Conn for StreamOwned<ServerConnection, TcpStream> {
    fn tcp(&self) -> &TcpStream {
        &self.sock
    }

    fn tls(&self) -> bool {
        true
    }

    fn send_pending(&mut self) {
        let _ = self.conn.complete_io(&mut self.sock);
    }
}

/// Serves `stream` until it ends.
pub(super) fn connection(inner: &Inner, stream: TcpStream, number: usize) {
    if let Some(timeout) = inner.read_timeout {
        let _ = stream.set_read_timeout(Some(timeout));
    }
    let result = match &inner.tls {
        None => requests(inner, stream, number, None),
        Some(config) => match ServerConnection::new(config.clone()) {
            Err(error) => Err(io::Error::other(error)),
            Ok(session) => {
                let mut tls = StreamOwned::new(session, stream);
                match tls.conn.complete_io(&mut tls.sock) {
                    Err(error) => {
                        inner.state().refused.push(error.to_string());
                        let_the_alert_be_read(&tls.sock);
                        Err(error)
                    }
                    Ok(_) => {
                        let client_cert = tls
                            .conn
                            .peer_certificates()
                            .and_then(|chain| chain.first())
                            .map(|cert| cert.to_vec());
                        requests(inner, tls, number, client_cert)
                    }
                }
            }
        },
    };
    if let Err(error) = result {
        if let Some(script) = &inner.script {
            script.connection_failed(&error);
        }
    }
}

/// rustls sent its alert: closing with the client's bytes unread would reset the
/// connection instead of letting the client read it.
fn let_the_alert_be_read(socket: &TcpStream) {
    let _ = socket.shutdown(Shutdown::Write);
    let _ = socket.set_read_timeout(Some(Duration::from_secs(2)));
    let mut socket = socket;
    let _ = io::copy(&mut socket, &mut io::sink());
}

fn requests<C: Conn>(
    inner: &Inner,
    conn: C,
    connection: usize,
    client_cert: Option<Vec<u8>>,
) -> io::Result<()> {
    let mut reader = BufReader::new(conn);
    loop {
        let head = match read_head(&mut reader) {
            Ok(Some(head)) => head,
            Ok(None) => return Ok(()),
            Err(error) => {
                if reader.get_ref().tls() {
                    // a client certificate refused in TLS 1.3 shows here, at a read
                    inner.state().refused.push(error.to_string());
                    let stream = reader.get_mut();
                    stream.send_pending();
                    let_the_alert_be_read(stream.tcp());
                }
                return Err(error);
            }
        };
        let (method, path, headers) = head;
        let mut request = Request {
            number: inner.numbers.fetch_add(1, Ordering::Relaxed),
            connection,
            method,
            path,
            headers,
            client_cert: client_cert.clone(),
            ..Request::default()
        };
        let queued = inner.state().queue.pop_front();
        let early = queued.or_else(|| {
            inner
                .script
                .as_ref()
                .and_then(|script| script.before_body(&request))
        });
        let length: usize = request
            .header("content-length")
            .and_then(|length| length.parse().ok())
            .unwrap_or(0);
        let mut raw = vec![0; length];
        if early == Some(Answer::CloseMidBody) {
            // half the body, then our side closed: no answer will come while the client
            // may still be sending. The rest is read for the record only.
            let half = length / 2;
            reader.read_exact(&mut raw[..half])?;
            let _ = reader.get_ref().tcp().shutdown(Shutdown::Write);
            let _ = reader
                .get_ref()
                .tcp()
                .set_read_timeout(Some(Duration::from_secs(30)));
            let read = half + read_up_to(&mut reader, &mut raw[half..]);
            raw.truncate(read);
            request.complete = read == length;
            decode(&mut request, raw);
            record(inner, request, &Answer::CloseMidBody)?;
            let _ = reader.get_ref().tcp().shutdown(Shutdown::Both);
            return Ok(());
        }
        reader.read_exact(&mut raw)?;
        request.complete = true;
        decode(&mut request, raw);
        let answer = match early {
            Some(answer) => answer,
            None => match &inner.script {
                Some(script) => script.answer(&request),
                None => inner
                    .state()
                    .otherwise
                    .clone()
                    .unwrap_or(Answer::Status(201)),
            },
        };
        // recorded before the answer: a client that saw the answer finds it recorded
        record(inner, request, &answer)?;
        match answer {
            Answer::Status(status) => respond(inner, reader.get_mut(), status, "")?,
            Answer::StatusWithBody(status, body) => {
                respond(inner, reader.get_mut(), status, &body)?;
            }
            Answer::StatusThenClose(status) => {
                let _ = respond(inner, reader.get_mut(), status, "");
                let _ = reader.get_ref().tcp().shutdown(Shutdown::Both);
                return Ok(());
            }
            Answer::Late(delay, status) => {
                thread::sleep(delay);
                respond(inner, reader.get_mut(), status, "")?;
            }
            Answer::Hang => {
                // never answered: wait until the client gives up and closes
                let mut conn = reader.into_inner();
                conn.tcp()
                    .set_read_timeout(Some(Duration::from_secs(120)))?;
                let mut sink = [0u8; 1024];
                while matches!(conn.read(&mut sink), Ok(read) if read > 0) {}
                return Ok(());
            }
            Answer::Close | Answer::CloseMidBody => {
                let _ = reader.get_ref().tcp().shutdown(Shutdown::Both);
                return Ok(());
            }
        }
    }
}

/// Shows the request to the script and keeps it.
fn record(inner: &Inner, request: Request, answer: &Answer) -> io::Result<()> {
    if let Some(script) = &inner.script {
        script.observe(&request, answer)?;
    }
    if inner.keep_requests {
        inner.state().exchanges.push((request, answer.clone()));
    }
    Ok(())
}

/// Sets the request's body from `raw`: gunzipped when `content-encoding: gzip`.
fn decode(request: &mut Request, raw: Vec<u8>) {
    if request.header("content-encoding") == Some("gzip") {
        let mut plain = Vec::new();
        // what decodes of a cut body is kept
        if let Err(error) = flate2::read::GzDecoder::new(&raw[..]).read_to_end(&mut plain) {
            request.decode_error = Some(error.to_string());
        }
        request.body = plain;
    } else {
        request.body = raw.clone();
    }
    request.raw_body = raw;
}

/// Writes an answer once answers are no longer held.
fn respond<C: Conn>(inner: &Inner, conn: &mut C, status: u16, body: &str) -> io::Result<()> {
    while inner.state().held {
        thread::sleep(Duration::from_millis(5));
    }
    let response = format!(
        "HTTP/1.1 {status} Scripted\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(response.as_bytes())?;
    conn.flush()
}

/// A request's head: method, path and headers (names lowercased, values trimmed);
/// `None` when the connection ends first.
type Head = (String, String, Vec<(String, String)>);

fn read_head<R: BufRead>(reader: &mut R) -> io::Result<Option<Head>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut words = line.split_whitespace();
    let method = words.next().unwrap_or_default().to_owned();
    let path = words.next().unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            return Ok(Some((method, path, headers)));
        }
        if let Some((name, value)) = trimmed.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
}

/// Reads into `buffer` until it is full or the connection ends or fails; how much.
fn read_up_to<R: Read>(reader: &mut R, buffer: &mut [u8]) -> usize {
    let mut filled = 0;
    while filled < buffer.len() {
        match reader.read(&mut buffer[filled..]) {
            Ok(0) | Err(_) => break,
            Ok(read) => filled += read,
        }
    }
    filled
}
