//! Processes: spawning, watching, signalling and reaping each side, and the files
//! and folders a run uses.

use std::fs::{self, File};
use std::io::{self};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{io_error, VersusError, STOP_DEADLINE};

/// How a process ended.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ended {
    /// When it exited (seen by the watching thread).
    pub(super) at: Instant,
    /// The exit code, or 128 + the signal that ended it.
    pub(super) code: i32,
    /// Peak resident set size, bytes (`wait4`'s `ru_maxrss`).
    pub(super) max_rss_bytes: u64,
}

/// A child process under watch. A thread waits for its exit without reaping it
/// (`waitid` with `WNOWAIT`), so the exit time is exact; only this struct reaps it (with
/// `wait4`, which also gives its peak RSS), so a signal it sends before that cannot reach
/// another process that reused the id. Dropped unreaped, it kills and reaps the child.
#[derive(Debug)]
pub(super) struct Watched {
    pid: libc::pid_t,
    exited: mpsc::Receiver<io::Result<Instant>>,
    reaped: bool,
}

impl Watched {
    pub(super) fn spawn(command: &mut Command) -> io::Result<Watched> {
        let child = command.spawn()?;
        let pid = libc::pid_t::try_from(child.id()).map_err(io::Error::other)?;
        // `child` is dropped without waiting: this struct reaps the process
        drop(child);
        let (sender, exited) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send(wait_for_exit_unreaped(pid));
        });
        Ok(Watched {
            pid,
            exited,
            reaped: false,
        })
    }

    pub(super) fn id(&self) -> u32 {
        self.pid.unsigned_abs()
    }

    /// Waits up to `timeout` for the exit: `None` while it runs, else how it ended
    /// (reaped).
    pub(super) fn wait_timeout(&mut self, timeout: Duration) -> Option<io::Result<Ended>> {
        let at = match self.exited.recv_timeout(timeout) {
            Ok(Ok(at)) => at,
            Ok(Err(error)) => return Some(Err(error)),
            Err(mpsc::RecvTimeoutError::Timeout) => return None,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Some(Err(io::Error::other("the watching thread is gone")))
            }
        };
        Some(self.reap(at))
    }

    fn reap(&mut self, at: Instant) -> io::Result<Ended> {
        let mut status: libc::c_int = 0;
        // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: `status` and `usage` are valid and writable for the call; `pid` is
            // our child, reaped nowhere else.
            let waited = unsafe { libc::wait4(self.pid, &mut status, 0, &mut usage) };
            if waited == self.pid {
                break;
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
        self.reaped = true;
        let code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            128 + libc::WTERMSIG(status)
        };
        Ok(Ended {
            at,
            code,
            max_rss_bytes: u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024,
        })
    }

    fn signal(&self, signal: libc::c_int) {
        if self.reaped {
            return;
        }
        // SAFETY: kill has no memory effects; `pid` is our child and not reaped yet (a
        // zombie keeps its id), so it cannot name another process.
        unsafe {
            libc::kill(self.pid, signal);
        }
    }

    /// Sends SIGTERM and waits for the exit (SIGKILL after [`STOP_DEADLINE`]).
    pub(super) fn stop(&mut self) -> io::Result<Ended> {
        self.signal(libc::SIGTERM);
        if let Some(ended) = self.wait_timeout(STOP_DEADLINE) {
            return ended;
        }
        eprintln!(
            "mongoose-bench: process {} did not exit within {STOP_DEADLINE:?} of SIGTERM: killing it",
            self.pid
        );
        self.signal(libc::SIGKILL);
        self.wait_timeout(Duration::MAX)
            .unwrap_or_else(|| Err(io::Error::other("the process did not exit")))
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if !self.reaped {
            self.signal(libc::SIGKILL);
            let _ = self.wait_timeout(STOP_DEADLINE);
        }
    }
}

/// Blocks until the child `pid` has exited, leaving it unreaped, and says when.
fn wait_for_exit_unreaped(pid: libc::pid_t) -> io::Result<Instant> {
    let id = libc::id_t::try_from(pid).map_err(io::Error::other)?;
    loop {
        // SAFETY: an all-zero `siginfo_t` is a valid value of this plain C struct.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is valid and writable for the call; WNOWAIT leaves the child
        // to be reaped by its `Watched`.
        let waited =
            unsafe { libc::waitid(libc::P_PID, id, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if waited == 0 {
            return Ok(Instant::now());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// `VmHWM` (peak RSS) of a live process, bytes.
pub(super) fn peak_rss_of_live(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Flushes every dirty page to disk, so a run does not pay for the previous one's.
pub(super) fn sync_disks() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

/// The last `count` lines of a log file, for an error message.
pub(super) fn tail_of(path: &Path, count: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(count)..].join(" | ");
    if tail.is_empty() {
        format!("{} is empty", path.display())
    } else {
        tail
    }
}

pub(super) fn log_file(path: &Path) -> Result<(Stdio, Stdio), VersusError> {
    let file = File::create(path).map_err(io_error("cannot create", path))?;
    let copy = file.try_clone().map_err(io_error("cannot create", path))?;
    Ok((Stdio::from(file), Stdio::from(copy)))
}

pub(super) fn fresh_dir(path: &Path) -> Result<(), VersusError> {
    match fs::remove_dir_all(path) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(io_error("cannot remove", path)(error)),
    }
    fs::create_dir_all(path).map_err(io_error("cannot create", path))
}
