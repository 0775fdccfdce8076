//! The sink's connections: a resolver that needs none for an address in the url, and
//! a transport that notes when request bytes are handed to the socket (above TLS: a
//! handshake is not a request).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ureq::config::Config as UreqConfig;
use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{Buffers, ConnectionDetails, Connector, NextTimeout, Transport};
use ureq::Error as UreqError;

/// A resolver that answers an address written in the url (`http://127.0.0.1:8080/`)
/// itself and asks ureq's default resolver for a name. The default one resolves on a
/// thread of its own to bound the wait, one per new connection: on a loaded host that
/// thread alone outlasted the connect bound, for an address that needs no resolving.
#[derive(Debug, Default)]
pub(super) struct LiteralFirst {
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
            Some(SocketAddr::new(
                address,
                authority.port_u16().unwrap_or(default_port(uri)),
            ))
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
pub(super) struct TransmitRecorder {
    pub(super) transmitted: Arc<AtomicBool>,
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
pub(super) struct RecordedTransport<T> {
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

    // ureq refuses an https request on a transport that does not say it is TLS
    fn is_tls(&self) -> bool {
        self.inner.is_tls()
    }
}

/// The port of a url that names none: 443 for https, else 80.
fn default_port(uri: &Uri) -> u16 {
    if uri.scheme_str() == Some("https") {
        443
    } else {
        80
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_written_in_the_url_needs_no_resolver() {
        let config = ureq::Agent::config_builder().build();
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
        assert_eq!(
            resolve("https://127.0.0.1/events"),
            ["127.0.0.1:443".parse::<SocketAddr>().expect("an address")]
        );
    }
}
