//! A raw TCP line target ([`TcpLineTarget`]), the counterpart of
//! [`crate::http_target::HttpTarget`] for the TCP line sink: it accepts connections on
//! a local port, a thread each, and takes **whole lines only** (a line cut by a broken
//! connection is not received), keeping each with the number of its connection and,
//! when asked, appending them to a file (the chaos harness's TCP peer).

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// Builds a [`TcpLineTarget`] ([`TcpLineTarget::builder`]).
#[derive(Debug)]
#[must_use]
pub struct TcpLineBuilder {
    port: u16,
    append_to: Option<File>,
    keep_lines: bool,
}

impl TcpLineBuilder {
    /// Listen on this port of 127.0.0.1 (0, the default: a free one).
    pub fn port(mut self, port: u16) -> TcpLineBuilder {
        self.port = port;
        self
    }

    /// Append the lines taken to `file` as they come (whole lines, each connection's
    /// in its order).
    pub fn append_to(mut self, file: File) -> TcpLineBuilder {
        self.append_to = Some(file);
        self
    }

    /// Whether lines are kept for [`TcpLineTarget::lines`] (default true).
    pub fn keep_lines(mut self, keep: bool) -> TcpLineBuilder {
        self.keep_lines = keep;
        self
    }

    /// Binds and starts listening.
    ///
    /// # Errors
    /// The port cannot be bound.
    pub fn try_start(self) -> io::Result<TcpLineTarget> {
        let listener = TcpListener::bind(("127.0.0.1", self.port))?;
        let address = listener.local_addr()?;
        let shared = Arc::new(Shared {
            lines: Mutex::new(Vec::new()),
            more: Condvar::new(),
            append_to: self.append_to.map(Mutex::new),
            keep_lines: self.keep_lines,
        });
        let accepting = Arc::clone(&shared);
        thread::spawn(move || {
            for (connection, stream) in listener.incoming().enumerate() {
                let Ok(mut stream) = stream else { continue };
                let shared = Arc::clone(&accepting);
                thread::spawn(move || {
                    let mut pending = Vec::new();
                    let mut buffer = vec![0u8; 64 * 1024];
                    while let Ok(read) = stream.read(&mut buffer) {
                        if read == 0 {
                            break;
                        }
                        pending.extend_from_slice(&buffer[..read]);
                        if let Some(end) = pending.iter().rposition(|byte| *byte == b'\n') {
                            shared.take(connection, &pending[..=end]);
                            pending.drain(..=end);
                        }
                    }
                });
            }
        });
        Ok(TcpLineTarget { address, shared })
    }

    /// [`TcpLineBuilder::try_start`], panicking when the port cannot be bound.
    pub fn start(self) -> TcpLineTarget {
        self.try_start().expect("the TCP target binds its port")
    }
}

struct Shared {
    lines: Mutex<Vec<(usize, String)>>,
    more: Condvar,
    append_to: Option<Mutex<File>>,
    keep_lines: bool,
}

impl Shared {
    fn lines(&self) -> MutexGuard<'_, Vec<(usize, String)>> {
        self.lines.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes `whole` (whole lines, each ending with `\n`) read on `connection`.
    fn take(&self, connection: usize, whole: &[u8]) {
        if let Some(file) = &self.append_to {
            let _ = file
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .write_all(whole);
        }
        if self.keep_lines {
            let text = String::from_utf8_lossy(whole);
            self.lines()
                .extend(text.lines().map(|line| (connection, line.to_owned())));
            self.more.notify_all();
        }
    }
}

/// A TCP line server on a local port; it runs until the process ends.
#[derive(Clone)]
pub struct TcpLineTarget {
    address: SocketAddr,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for TcpLineTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpLineTarget")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl TcpLineTarget {
    /// A target on a free port that keeps the lines it takes.
    pub fn start() -> TcpLineTarget {
        TcpLineTarget::builder().start()
    }

    /// A target to configure.
    pub fn builder() -> TcpLineBuilder {
        TcpLineBuilder {
            port: 0,
            append_to: None,
            keep_lines: true,
        }
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Every line taken so far with its connection's number (0, 1, ...), in the order
    /// taken.
    pub fn lines(&self) -> Vec<(usize, String)> {
        self.shared.lines().clone()
    }

    /// The first `count` lines taken, once there are that many.
    ///
    /// # Panics
    /// Fewer came within 30 s.
    pub fn wait_for_lines(&self, count: usize) -> Vec<(usize, String)> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut lines = self.shared.lines();
        while lines.len() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "{} lines within 30 s, not {count}: {:?}",
                lines.len(),
                *lines
            );
            lines = self
                .shared
                .more
                .wait_timeout(lines, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        lines[..count].to_vec()
    }
}
