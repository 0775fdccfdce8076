//! A generated CA ([`TestCa`]) and a real HTTPS/1.1 server ([`HttpsTarget`], rustls on
//! a local port) for the HTTP sink's https tests: it records every request it reads
//! (its body gunzipped when it came gzipped) and every handshake it refused.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection, StreamOwned};

/// A certificate authority made for one test, that issues certificates.
#[derive(Debug)]
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its private key, in PEM.
#[derive(Clone, Debug)]
pub struct Issued {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// Its private key (PKCS#8), PEM.
    pub key_pem: String,
}

impl Issued {
    /// Writes `<name>.crt` and `<name>.key` into `folder`; their paths.
    pub fn write(&self, folder: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = folder.join(format!("{name}.crt"));
        let key = folder.join(format!("{name}.key"));
        std::fs::write(&cert, &self.cert_pem).expect("write the certificate");
        std::fs::write(&key, &self.key_pem).expect("write the key");
        (cert, key)
    }
}

impl TestCa {
    /// A new CA named `name` (a fresh key each time).
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("a CA key");
        TestCa {
            issuer: CertifiedIssuer::self_signed(params, key).expect("a self-signed CA"),
        }
    }

    /// The CA's certificate, PEM (what a `ca_file` holds).
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate for `names` (DNS names or IP addresses, also the common name's
    /// first) signed by this CA.
    pub fn issue(&self, names: &[&str]) -> Issued {
        let mut params = CertificateParams::new(
            names
                .iter()
                .map(|name| (*name).to_owned())
                .collect::<Vec<_>>(),
        )
        .expect("certificate parameters");
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().copied().unwrap_or("client"),
        );
        let key = KeyPair::generate().expect("a key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// A request as the server read it.
#[derive(Clone, Debug)]
pub struct Request {
    /// Header names in lowercase, with their values.
    pub headers: Vec<(String, String)>,
    /// The body, gunzipped when `content-encoding: gzip`.
    pub body: Vec<u8>,
    /// The body as it came (gzipped or not).
    pub raw_body: Vec<u8>,
    /// The client's certificate (DER), when it presented one.
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

    /// The body's lines (an ndjson body: each line without its `\n`).
    pub fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.body)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The `Idempotency-Keys` header split into keys.
    pub fn keys(&self) -> Vec<String> {
        self.header("idempotency-keys")
            .map(|keys| keys.split(',').map(str::to_owned).collect())
            .unwrap_or_default()
    }
}

#[derive(Debug, Default)]
struct State {
    /// The answer when no status is scripted (`None`: 201).
    otherwise: Option<u16>,
    statuses: VecDeque<u16>,
    /// Requests are taken but their answers withheld ([`HttpsTarget::stall`]).
    stalled: bool,
    requests: Vec<Request>,
    /// The status each request of `requests` was answered.
    answers: Vec<u16>,
    refused: Vec<String>,
}

/// An HTTPS server on a local port; it runs until the test process ends.
#[derive(Clone)]
pub struct HttpsTarget {
    /// Where it listens.
    pub address: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for HttpsTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpsTarget")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl HttpsTarget {
    /// Starts a server with the certificate `server` that answers `201` unless a
    /// status is scripted; with `client_ca`, it requires a client certificate that
    /// CA signed.
    pub fn start(server: &Issued, client_ca: Option<&TestCa>) -> HttpsTarget {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .expect("TLS versions");
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                roots
                    .add(CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).expect("CA"))
                    .expect("a client CA");
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .expect("a client verifier");
                builder.with_client_cert_verifier(verifier)
            }
        };
        let chain = CertificateDer::pem_slice_iter(server.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("the server's certificate");
        let key = PrivateKeyDer::from_pem_slice(server.key_pem.as_bytes()).expect("its key");
        let config = Arc::new(
            builder
                .with_single_cert(chain, key)
                .expect("a server config"),
        );

        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a local port");
        let address = listener.local_addr().expect("local address");
        let state = Arc::new(Mutex::new(State::default()));
        let accept_state = Arc::clone(&state);
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let state = Arc::clone(&accept_state);
                let config = Arc::clone(&config);
                thread::spawn(move || serve(stream, config, &state));
            }
        });
        HttpsTarget { address, state }
    }

    /// The sink's url for this server (by address: its certificate names
    /// `127.0.0.1`).
    pub fn url(&self) -> String {
        format!("https://{}/events", self.address)
    }

    /// The next requests are answered with these statuses, in order (then `201`).
    pub fn script(&self, statuses: impl IntoIterator<Item = u16>) {
        self.state.lock().expect("state").statuses.extend(statuses);
    }

    /// Answers `status` to every request not scripted from now on (`None`: 201 again):
    /// a target that refuses everything, for as long as a test needs it to.
    pub fn answer(&self, status: Option<u16>) {
        self.state.lock().expect("state").otherwise = status;
    }

    /// While `on`, every request is taken (it counts in [`HttpsTarget::taken`] with
    /// the answer it would get) but its answer is withheld until `stall(false)`: a
    /// target that took outputs whose answers never reached the sender (the sender
    /// killed while it waited, a lost connection after the hand-off).
    pub fn stall(&self, on: bool) {
        self.state.lock().expect("state").stalled = on;
    }

    /// The keys (`Idempotency-Key`, or each of `Idempotency-Keys`) of the outputs taken
    /// (answered 2xx) so far, with their bodies' lines, in the order taken.
    pub fn taken(&self) -> Vec<(String, String)> {
        let state = self.state.lock().expect("state");
        state
            .requests
            .iter()
            .zip(state.answers.iter())
            .filter(|(_, status)| (200..300).contains(*status))
            .flat_map(|(request, _)| {
                let keys = match request.header("idempotency-key") {
                    Some(key) => vec![key.to_owned()],
                    None => request.keys(),
                };
                let lines = request.lines();
                keys.into_iter().zip(lines).collect::<Vec<_>>()
            })
            .collect()
    }

    /// Every request read so far.
    pub fn requests(&self) -> Vec<Request> {
        self.state.lock().expect("state").requests.clone()
    }

    /// Every handshake refused so far (rustls' error).
    pub fn refused(&self) -> Vec<String> {
        self.state.lock().expect("state").refused.clone()
    }
}

fn serve(stream: TcpStream, config: Arc<ServerConfig>, state: &Mutex<State>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    let connection = ServerConnection::new(config).expect("a TLS session");
    let mut tls = StreamOwned::new(connection, stream);
    if let Err(error) = tls.conn.complete_io(&mut tls.sock) {
        state.lock().expect("state").refused.push(error.to_string());
        // rustls sent its alert; let the client read it (closing with its bytes
        // unread would reset the connection instead)
        let _ = tls.sock.shutdown(Shutdown::Write);
        let _ = tls.sock.set_read_timeout(Some(Duration::from_secs(2)));
        let _ = std::io::copy(&mut tls.sock, &mut std::io::sink());
        return;
    }
    let client_cert = tls
        .conn
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|cert| cert.to_vec());
    let mut reader = BufReader::new(tls);
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) => return,
            Ok(_) => {}
            Err(error) => {
                // a client certificate refused in TLS 1.3 shows here, at the first read
                state.lock().expect("state").refused.push(error.to_string());
                let stream = reader.get_mut();
                let _ = stream.conn.complete_io(&mut stream.sock);
                let _ = stream.sock.shutdown(Shutdown::Write);
                let _ = stream.sock.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = std::io::copy(&mut stream.sock, &mut std::io::sink());
                return;
            }
        }
        let Some((headers, raw_body)) = read_headers_and_body(&mut reader) else {
            return;
        };
        let gzipped = headers
            .iter()
            .any(|(key, value)| key == "content-encoding" && value == "gzip");
        let body = if gzipped {
            let mut plain = Vec::new();
            flate2::read::GzDecoder::new(&raw_body[..])
                .read_to_end(&mut plain)
                .expect("a gzip body");
            plain
        } else {
            raw_body.clone()
        };
        let status = {
            let mut state = state.lock().expect("state");
            state.requests.push(Request {
                headers,
                body,
                raw_body,
                client_cert: client_cert.clone(),
            });
            let otherwise = state.otherwise.unwrap_or(201);
            let status = state.statuses.pop_front().unwrap_or(otherwise);
            state.answers.push(status);
            status
        };
        while state.lock().expect("state").stalled {
            thread::sleep(Duration::from_millis(5));
        }
        let response = format!("HTTP/1.1 {status} Scripted\r\nContent-Length: 0\r\n\r\n");
        let stream = reader.get_mut();
        if stream.write_all(response.as_bytes()).is_err() || stream.flush().is_err() {
            return;
        }
    }
}

/// A request's headers (names lower-cased) and body.
pub type HeadersAndBody = (Vec<(String, String)>, Vec<u8>);

/// Reads an HTTP/1.1 request's headers (after its request line: names lower-cased,
/// values trimmed) and its `Content-Length` body; `None` when the connection ends first.
/// The test HTTP servers of this crate and of the sink's tests share it.
pub fn read_headers_and_body<R: BufRead>(reader: &mut R) -> Option<HeadersAndBody> {
    let mut headers = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        if let Some((key, value)) = trimmed.split_once(':') {
            headers.push((key.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    let length: usize = headers
        .iter()
        .find(|(key, _)| key == "content-length")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((headers, body))
}
