//! Child processes the harness runs (the server and its peers), and the signals it
//! sends them.

use std::io::Write;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A child process: the server or a peer.
#[derive(Debug)]
pub struct Proc {
    /// What it is, for the event log.
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    stopped: bool,
    exit: Option<ExitStatus>,
}

impl Proc {
    /// Starts `command`; with `stdin`, its standard input is a pipe the harness writes.
    ///
    /// # Errors
    /// The program cannot be started.
    pub fn spawn(name: &str, command: &mut Command, stdin: bool) -> std::io::Result<Proc> {
        command.stdin(if stdin { Stdio::piped() } else { Stdio::null() });
        let mut child = command.spawn()?;
        let stdin = child.stdin.take();
        Ok(Proc {
            name: name.to_owned(),
            child,
            stdin,
            stopped: false,
            exit: None,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, signal: i32) {
        if self.exit.is_none() {
            // SAFETY: kill(2) with the pid of a child this process has not reaped yet
            // (so the pid cannot have been reused) and a valid signal number.
            unsafe {
                libc::kill(self.child.id() as libc::pid_t, signal);
            }
        }
    }

    /// The exit status, once it exited (reaped here).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit
    }

    /// SIGKILL (a stopped process is killed too), then its status.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        if self.exited().is_none() {
            self.signal(libc::SIGKILL);
            self.exit = self.child.wait().ok();
        }
        self.stdin = None;
        self.exit
    }

    /// SIGHUP (a reload of the config).
    pub fn hangup(&self) {
        self.signal(libc::SIGHUP);
    }

    /// SIGSTOP.
    pub fn pause(&mut self) {
        self.signal(libc::SIGSTOP);
        self.stopped = true;
    }

    /// SIGCONT.
    pub fn resume(&mut self) {
        if self.stopped {
            self.signal(libc::SIGCONT);
            self.stopped = false;
        }
    }

    /// SIGTERM, then waits up to `patience` for the exit (SIGKILL after it).
    pub fn terminate(&mut self, patience: Duration) -> Option<ExitStatus> {
        self.resume();
        self.signal(libc::SIGTERM);
        self.wait_for(patience).or_else(|| self.kill())
    }

    /// Waits up to `patience` for the exit.
    pub fn wait_for(&mut self, patience: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + patience;
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Writes to its standard input.
    ///
    /// # Errors
    /// It has no pipe (closed, or never had one), or the write failed (it exited).
    pub fn write_stdin(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match &mut self.stdin {
            Some(stdin) => stdin.write_all(bytes).and_then(|()| stdin.flush()),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                format!("{} has no standard input", self.name),
            )),
        }
    }

    /// Closes its standard input (end of input).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The exit code of `status`, or `128 + signal` for a signal death.
pub fn code_of(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// A free TCP port on 127.0.0.1 (bound, then released).
pub fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map_or(0, |address| address.port())
}

/// A free UDP port on 127.0.0.1 (bound, then released).
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|socket| socket.local_addr())
        .map_or(0, |address| address.port())
}
