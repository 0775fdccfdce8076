//! A generated CA ([`TestCa`]), a rustls server configuration from its certificates
//! ([`server_config`]) and a real HTTPS/1.1 server ([`HttpsTarget`]: the scripted
//! [`HttpTarget`] over TLS) for the HTTP sink's https tests: it records every request
//! it reads (its body gunzipped when it came gzipped) and every handshake it refused.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

pub use crate::http_target::Request;
use crate::http_target::{Answer, HttpTarget};

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

/// A server configuration with the certificate `server`; with `client_ca`, it requires
/// a client certificate that CA signed.
pub fn server_config(server: &Issued, client_ca: Option<&TestCa>) -> Arc<ServerConfig> {
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
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .expect("a client verifier");
            builder.with_client_cert_verifier(verifier)
        }
    };
    let chain = CertificateDer::pem_slice_iter(server.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("the server's certificate");
    let key = PrivateKeyDer::from_pem_slice(server.key_pem.as_bytes()).expect("its key");
    Arc::new(
        builder
            .with_single_cert(chain, key)
            .expect("a server config"),
    )
}

/// An HTTPS server on a local port answering statuses: the scripted [`HttpTarget`]
/// over TLS, with a 60 s read timeout; it runs until the test process ends.
#[derive(Clone, Debug)]
pub struct HttpsTarget {
    /// Where it listens.
    pub address: SocketAddr,
    target: HttpTarget,
}

impl HttpsTarget {
    /// Starts a server with the certificate `server` that answers `201` unless a
    /// status is scripted; with `client_ca`, it requires a client certificate that
    /// CA signed.
    pub fn start(server: &Issued, client_ca: Option<&TestCa>) -> HttpsTarget {
        let target = HttpTarget::builder()
            .tls(server_config(server, client_ca))
            .read_timeout(Duration::from_secs(60))
            .start();
        HttpsTarget {
            address: target.address(),
            target,
        }
    }

    /// The sink's url for this server (by address: its certificate names
    /// `127.0.0.1`).
    pub fn url(&self) -> String {
        self.target.url()
    }

    /// The scripted target under it, for answers other than statuses.
    pub fn target(&self) -> &HttpTarget {
        &self.target
    }

    /// The next requests are answered with these statuses, in order (then `201`).
    pub fn script(&self, statuses: impl IntoIterator<Item = u16>) {
        self.target.script(statuses.into_iter().map(Answer::Status));
    }

    /// Answers `status` to every request not scripted from now on (`None`: 201 again):
    /// a target that refuses everything, for as long as a test needs it to.
    pub fn answer(&self, status: Option<u16>) {
        self.target.answer(status.map(Answer::Status));
    }

    /// While `on`, every request is taken (it counts in [`HttpsTarget::taken`] with
    /// the answer it would get) but its answer is withheld until `stall(false)`: a
    /// target that took outputs whose answers never reached the sender (the sender
    /// killed while it waited, a lost connection after the hand-off).
    pub fn stall(&self, on: bool) {
        self.target.hold(on);
    }

    /// The keys (`Idempotency-Key`, or each of `Idempotency-Keys`) of the outputs taken
    /// (answered 2xx) so far, with their bodies' lines, in the order taken.
    pub fn taken(&self) -> Vec<(String, String)> {
        self.target.taken()
    }

    /// Every request read so far.
    pub fn requests(&self) -> Vec<Request> {
        self.target.requests()
    }

    /// Every handshake refused so far (rustls' error).
    pub fn refused(&self) -> Vec<String> {
        self.target.refused()
    }
}
