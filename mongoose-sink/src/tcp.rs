//! The TCP line sink: each output is written as one line (`payload\n`) to a TCP
//! peer, a publish call's outputs in one write.
//!
//! **A plain TCP line protocol has no acknowledgement.** When the kernel accepts the
//! bytes of a line, the sink answers [`SinkOutcome::Published`] with the evidence
//! `"written to the socket (no acknowledgement in a plain TCP line protocol)"`: that
//! proves the line left this process, not that the peer read or kept it. A peer that
//! closes or crashes after the kernel took the bytes loses them without anyone
//! knowing. Use the HTTP sink (a status per output, an `Idempotency-Key`) or the file
//! sink when an output must be known to be held.
//!
//! What the sink can tell, it tells exactly:
//!
//! | what happened | outcome |
//! |---|---|
//! | the whole line was accepted by the kernel | `Published` (no acknowledgement, see above) |
//! | connecting failed (refused, unreachable, timeout) | `NotPublished { retryable: true }` for the whole batch |
//! | the write failed or timed out part way: lines wholly or partly accepted before the failure | `Uncertain` (some bytes may have reached the peer) |
//! | ... lines of which no byte was accepted before the failure | `NotPublished { retryable: true }` (they never left the process) |
//! | a payload holding a newline (it would be two lines) | `NotPublished { retryable: false }` |
//!
//! After a failure the connection is dropped and the next publish connects again.
//! Before each write the sink also checks, without blocking, whether the peer has
//! closed the connection (end of stream or a reset), and connects again if so.
//! The host name of `address` is resolved on each connect by the system resolver
//! (bounded by its own timeouts); the connect and the whole write of one publish call
//! are bounded by the settings.
//!
//! ```
//! use mongoose_sink::{TcpSink, TcpSinkConfig};
//!
//! let config = TcpSinkConfig {
//!     address: "127.0.0.1:5140".into(),
//!     connect_timeout_millis: 1_000,
//!     write_timeout_millis: 5_000, // for the whole batch of one publish call
//! };
//! let sink = TcpSink::new("syslog", config).expect("valid settings");
//! # drop(sink);
//! ```

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use mongoose_core::sink::{Output, Sink, SinkOutcome};
use serde::{Deserialize, Serialize};

use crate::SinkError;

/// The evidence of a line the kernel accepted.
const WRITTEN: &str = "written to the socket (no acknowledgement in a plain TCP line protocol)";

/// The settings of a [`TcpSink`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpSinkConfig {
    /// The peer: `host:port`.
    pub address: String,
    /// The bound on connecting (to each resolved address), in milliseconds.
    pub connect_timeout_millis: u64,
    /// The bound on writing one publish call's batch, in milliseconds. Past it the
    /// lines already (partly) accepted are [`SinkOutcome::Uncertain`] and the rest
    /// not published.
    pub write_timeout_millis: u64,
}

/// A sink that writes each output as a line to a TCP peer (see the [module](self)
/// docs for what its outcomes can and cannot prove).
#[derive(Debug)]
pub struct TcpSink {
    name: String,
    config: TcpSinkConfig,
    stream: Option<TcpStream>,
    /// The batch being written (kept to reuse its allocation).
    batch: Vec<u8>,
    /// The end offset in `batch` of each line written, by output index.
    ends: Vec<Option<usize>>,
    /// The last publish could not connect: why ([`Sink::cannot_reach`]).
    unreachable: Option<String>,
}

impl TcpSink {
    /// A sink named `name` (for logs and errors) with `config`. Checks the settings;
    /// connects lazily, on the first publish.
    pub fn new(name: &str, config: TcpSinkConfig) -> Result<TcpSink, SinkError> {
        let settings = |message: String| SinkError::Settings {
            sink: name.to_string(),
            message,
        };
        if config
            .address
            .rsplit_once(':')
            .is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
        {
            return Err(settings(format!(
                "address '{}' is not host:port (for example 127.0.0.1:5140)",
                config.address
            )));
        }
        if config.connect_timeout_millis == 0 || config.write_timeout_millis == 0 {
            return Err(settings(
                "connect_timeout_millis and write_timeout_millis must be above 0 (a sink \
                 never waits without a bound)"
                    .to_string(),
            ));
        }
        Ok(TcpSink {
            name: name.to_string(),
            config,
            stream: None,
            batch: Vec::new(),
            ends: Vec::new(),
            unreachable: None,
        })
    }

    /// The open connection, made anew when there is none or the peer closed it.
    fn connection(&mut self) -> Result<&mut TcpStream, String> {
        if let Some(stream) = &mut self.stream {
            if let Err(reason) = check_open(stream) {
                tracing::info!(sink = %self.name, %reason, "tcp peer closed the connection, reconnecting");
                self.stream = None;
            }
        }
        if self.stream.is_none() {
            self.stream = Some(self.connect()?);
        }
        Ok(self.stream.as_mut().expect("connected above"))
    }

    fn connect(&self) -> Result<TcpStream, String> {
        let address = &self.config.address;
        let addresses: Vec<SocketAddr> = address
            .to_socket_addrs()
            .map_err(|error| format!("could not resolve {address}: {error}"))?
            .collect();
        let timeout = Duration::from_millis(self.config.connect_timeout_millis);
        let mut last_error = format!("{address} resolved to no address");
        for socket_address in addresses {
            match TcpStream::connect_timeout(&socket_address, timeout) {
                Ok(stream) => {
                    stream
                        .set_nodelay(true)
                        .map_err(|error| format!("connected to {socket_address}: {error}"))?;
                    tracing::debug!(sink = %self.name, %socket_address, "tcp sink connected");
                    return Ok(stream);
                }
                Err(error) => {
                    last_error = format!("could not connect to {socket_address}: {error}");
                }
            }
        }
        Err(last_error)
    }
}

/// Ok when `stream` looks open: no end of stream and no error waiting on it. Bytes
/// the peer sent (a line protocol's peer sends none) are read and dropped.
fn check_open(stream: &mut TcpStream) -> Result<(), String> {
    stream
        .set_nonblocking(true)
        .map_err(|error| error.to_string())?;
    let mut scratch = [0u8; 4096];
    // Bounded: a peer that keeps sending cannot keep the sink reading.
    let mut reads_left = 64;
    let result = loop {
        match stream.read(&mut scratch) {
            Ok(0) => break Err("end of stream".to_string()),
            Ok(_) if reads_left == 0 => break Ok(()),
            Ok(_) => reads_left -= 1,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => break Ok(()),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => break Err(error.to_string()),
        }
    };
    stream
        .set_nonblocking(false)
        .map_err(|error| error.to_string())?;
    result
}

/// Writes all of `bytes` to `stream` before `deadline`. On failure, says how many
/// bytes the kernel accepted before it.
fn write_before(
    stream: &mut TcpStream,
    bytes: &[u8],
    deadline: Instant,
) -> Result<(), (usize, String)> {
    let mut written = 0;
    while written < bytes.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err((written, "the write timed out".to_string()));
        }
        if let Err(error) = stream.set_write_timeout(Some(left)) {
            return Err((written, error.to_string()));
        }
        match stream.write(&bytes[written..]) {
            Ok(0) => return Err((written, "the socket accepted no more bytes".to_string())),
            Ok(accepted) => written += accepted,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err((written, "the write timed out".to_string()))
            }
            Err(error) => return Err((written, error.to_string())),
        }
    }
    Ok(())
}

impl Sink for TcpSink {
    fn cannot_reach(&self) -> Option<&str> {
        self.unreachable.as_deref()
    }

    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
        self.batch.clear();
        self.ends.clear();
        for output in outputs {
            if output.payload.contains(&b'\n') {
                self.ends.push(None);
                continue;
            }
            self.batch.extend_from_slice(&output.payload);
            self.batch.push(b'\n');
            self.ends.push(Some(self.batch.len()));
        }
        let newline_refusal = || SinkOutcome::NotPublished {
            evidence: "the payload holds a newline: a line sink writes one line per output"
                .to_string(),
            retryable: false,
        };
        if self.batch.is_empty() {
            outcomes.extend(outputs.iter().map(|_| newline_refusal()));
            return;
        }

        let write_timeout = Duration::from_millis(self.config.write_timeout_millis);
        let batch = std::mem::take(&mut self.batch);
        self.unreachable = None;
        let result = match self.connection() {
            Err(reason) => {
                tracing::warn!(sink = %self.name, %reason, "tcp sink could not connect");
                self.unreachable = Some(format!("not written: {reason}"));
                Err((None, reason))
            }
            // The bound on the write starts once connected.
            Ok(stream) => write_before(stream, &batch, Instant::now() + write_timeout)
                .map_err(|(written, reason)| (Some(written), reason)),
        };
        self.batch = batch;

        let mut start = 0;
        for end in &self.ends {
            let Some(end) = *end else {
                outcomes.push(newline_refusal());
                continue;
            };
            let outcome = match &result {
                Ok(()) => SinkOutcome::Published {
                    evidence: WRITTEN.to_string(),
                },
                Err((None, reason)) => SinkOutcome::NotPublished {
                    evidence: format!("not written: {reason}"),
                    retryable: true,
                },
                Err((Some(written), reason)) if *written >= end => SinkOutcome::Uncertain {
                    evidence: format!(
                        "written to the socket, then the connection failed ({reason}): the \
                         peer may or may not have it"
                    ),
                },
                Err((Some(written), reason)) if *written > start => SinkOutcome::Uncertain {
                    evidence: format!(
                        "partly written ({} of {} bytes), then the connection failed \
                         ({reason})",
                        written - start,
                        end - start
                    ),
                },
                Err((Some(_), reason)) => SinkOutcome::NotPublished {
                    evidence: format!("not written: the connection failed first ({reason})"),
                    retryable: true,
                },
            };
            outcomes.push(outcome);
            start = end;
        }
        if let Err((written, reason)) = result {
            if written.is_some() {
                tracing::warn!(sink = %self.name, %reason, "tcp sink write failed, the connection is dropped");
            }
            self.stream = None;
        }
    }
}
