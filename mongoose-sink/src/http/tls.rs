//! https: the trust anchors (`ca_file`, else the bundled Mozilla roots) and the
//! optional client certificate, read and checked when the sink is made; and what a
//! TLS failure tells about an attempt.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{AlertDescription, RootCertStore};
use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};

use super::HttpTlsConfig;

/// The TLS settings of an https sink, from `config`; a message naming the file and
/// what to do when one cannot be used.
pub(super) fn tls_config(config: &HttpTlsConfig) -> Result<TlsConfig, String> {
    let mut builder = TlsConfig::builder();
    if let Some(path) = &config.ca_file {
        let certificates = certificates(path, "ca_file")?;
        // every one must be a usable trust anchor: one that is not would be dropped
        // silently, and the target refused later for a reason no one could see
        let mut store = RootCertStore::empty();
        for (index, certificate) in certificates.iter().enumerate() {
            store
                .add(CertificateDer::from(certificate.der().to_vec()))
                .map_err(|error| {
                    format!(
                        "ca_file '{}': certificate {} is not a usable CA certificate ({error}): \
                         give a PEM file of CA certificates",
                        path.display(),
                        index + 1
                    )
                })?;
        }
        builder = builder.root_certs(RootCerts::Specific(Arc::new(certificates)));
    }
    match (&config.client_cert_file, &config.client_key_file) {
        (None, None) => {}
        (Some(cert_path), Some(key_path)) => {
            let chain = certificates(cert_path, "client_cert_file")?;
            let (key, pem) = private_key(key_path)?;
            check_pair(&chain, &pem).map_err(|error| {
                format!(
                    "client_cert_file '{}' and client_key_file '{}' do not make a client \
                     certificate ({error}): give the certificate and its own private key",
                    cert_path.display(),
                    key_path.display()
                )
            })?;
            builder = builder.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
        }
        (Some(_), None) | (None, Some(_)) => {
            return Err(
                "client_cert_file and client_key_file go together: give both (a client \
                 certificate and its private key, PEM) or neither"
                    .to_owned(),
            )
        }
    }
    Ok(builder.build())
}

/// The PEM certificates in the file at `path` (`key`: the setting, for the message).
fn certificates(path: &Path, key: &str) -> Result<Vec<Certificate<'static>>, String> {
    let text = std::fs::read(path)
        .map_err(|error| format!("{key} '{}': cannot read it: {error}", path.display()))?;
    let mut certificates = Vec::new();
    for item in ureq::tls::parse_pem(&text) {
        match item {
            Ok(PemItem::Certificate(certificate)) => certificates.push(certificate),
            Ok(_) => {}
            Err(error) => {
                return Err(format!(
                    "{key} '{}': not a readable PEM file ({error})",
                    path.display()
                ))
            }
        }
    }
    if certificates.is_empty() {
        return Err(format!(
            "{key} '{}' holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(certificates)
}

/// The first PEM private key in the file at `path`, and the file's text.
fn private_key(path: &Path) -> Result<(PrivateKey<'static>, Vec<u8>), String> {
    let text = std::fs::read(path).map_err(|error| {
        format!(
            "client_key_file '{}': cannot read it: {error}",
            path.display()
        )
    })?;
    let key = PrivateKey::from_pem(&text).map_err(|error| {
        format!(
            "client_key_file '{}' holds no usable PEM private key ({error}): give a PKCS#8, \
             PKCS#1 or SEC1 key",
            path.display()
        )
    })?;
    Ok((key, text))
}

/// Whether rustls takes `chain` and the key in `key_pem` as a client certificate (ureq would panic on
/// a pair rustls refuses, at the first connection: it is checked here instead).
fn check_pair(chain: &[Certificate<'static>], key_pem: &[u8]) -> Result<(), String> {
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|error| error.to_string())?;
    let chain = chain
        .iter()
        .map(|certificate| CertificateDer::from(certificate.der().to_vec()))
        .collect();
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|error| error.to_string())?
        .with_root_certificates(RootCertStore::empty())
        .with_client_auth_cert(chain, key)
        .map(drop)
        .map_err(|error| error.to_string())
}

/// The TLS error behind a failed request, if it is one (ureq hands rustls' errors
/// through as I/O errors).
pub(super) fn tls_error(error: &ureq::Error) -> Option<&rustls::Error> {
    match error {
        ureq::Error::Rustls(error) => Some(error),
        ureq::Error::Io(error) => error.get_ref()?.downcast_ref::<rustls::Error>(),
        _ => None,
    }
}

/// Whether `error` is the target refusing the TLS session (a fatal alert about the
/// handshake: our certificate, its CA, none given): it ended the connection before
/// any request on it could be taken, whenever the alert arrived (TLS 1.3 tells a
/// client its certificate was refused only after the client sent its first bytes).
pub(super) fn refused_by_target(error: &rustls::Error) -> Option<AlertDescription> {
    match error {
        rustls::Error::AlertReceived(alert)
            if matches!(
                alert,
                AlertDescription::HandshakeFailure
                    | AlertDescription::BadCertificate
                    | AlertDescription::UnsupportedCertificate
                    | AlertDescription::CertificateRevoked
                    | AlertDescription::CertificateExpired
                    | AlertDescription::CertificateUnknown
                    | AlertDescription::UnknownCA
                    | AlertDescription::AccessDenied
                    | AlertDescription::CertificateRequired
                    | AlertDescription::ProtocolVersion
                    | AlertDescription::InsufficientSecurity
            ) =>
        {
            Some(*alert)
        }
        _ => None,
    }
}
