//! `cargo xtask versus-rsyslog`: the same file of lines tailed into an output file by
//! `mongoose run` (a `forward` processor into a `file` sink) and by rsyslog (imfile ->
//! omfile, one worker, in order), alternately, with the throughput, the peak RSS and a
//! line-for-line check of each output against the input (issue 13, item 6).
//!
//! rsyslog is installed from Debian's packages when `rsyslogd` is missing, and run in
//! the foreground (`rsyslogd -n -f <our config> -i <pidfile>`) with a private work
//! directory, so its imfile state file lives in the run's own folder: the system service
//! is never started or touched. Each run starts from a fresh output file and fresh state
//! (our pointer file beside the input is deleted; rsyslog's work directory is new), and
//! `sync` runs between runs so that one run does not pay for the previous run's writeback.
//!
//! What is timed:
//! * rsyslog: from spawning `rsyslogd` to the poll (every 100 ms) that sees the last line
//!   in its output file; peak RSS is the process's `VmHWM` read just before SIGTERM.
//! * ours: from spawning `mongoose run --exit-when-settled` to its exit; peak RSS is
//!   `wait4`'s `ru_maxrss`.
//!
//! The two sides do not promise the same thing: rsyslog saves its read position when it
//! reads a line (a crash can lose lines it had read but not written), ours commits a
//! line's position only after its output is durable. The report says so.

use std::fmt::{self, Write as _};
use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const MIB: u64 = 1024 * 1024;
/// How often rsyslog's output is polled for its line count.
const RSYSLOG_POLL: Duration = Duration::from_millis(100);
/// How long a side may go without writing a byte before the run is given up.
const STALL_DEADLINE: Duration = Duration::from_secs(60);
/// How long a stopped process has to exit after SIGTERM before it is killed.
const STOP_DEADLINE: Duration = Duration::from_secs(30);
/// The input file's name inside `<work>/input/`.
const INPUT_NAME: &str = "lines.txt";

/// What went wrong in the harness itself (not a side's failed run, which is reported).
#[derive(Debug, thiserror::Error)]
pub(crate) enum VersusError {
    /// A command-line argument is missing, unknown or malformed.
    #[error("{0}; usage: cargo xtask versus-rsyslog [--size-mib 1024] [--line-bytes 100] [--runs 3] [--keep DIR]")]
    Usage(String),
    /// A file or process operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file or program.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// rsyslog is missing and could not be installed.
    #[error("rsyslogd is missing and `apt-get install -y rsyslog` failed: install it by hand (Debian package `rsyslog`) and run again")]
    NoRsyslog,
}

fn io_error(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> VersusError {
    let path = path.to_path_buf();
    move |source| VersusError::Io { what, path, source }
}

/// The command line of `cargo xtask versus-rsyslog`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct VersusOptions {
    /// The input's size in MiB (rounded down to whole lines).
    pub(crate) size_mib: u64,
    /// Each line's length in bytes, its newline included.
    pub(crate) line_bytes: u64,
    /// How many runs of each side, alternating (ours first).
    pub(crate) runs: usize,
    /// Keep the input, configs, logs and outputs in this folder (and reuse an input of
    /// the right size found there); without it everything is removed at the end.
    pub(crate) keep: Option<PathBuf>,
}

impl Default for VersusOptions {
    fn default() -> Self {
        VersusOptions {
            size_mib: 1024,
            line_bytes: 100,
            runs: 3,
            keep: None,
        }
    }
}

/// The shortest line: a 12-digit counter, a space, one byte of padding and the newline.
const MIN_LINE_BYTES: u64 = 15;

impl VersusOptions {
    /// Parses `[--size-mib N] [--line-bytes N] [--runs N] [--keep DIR]`.
    pub(crate) fn parse(arguments: &[String]) -> Result<VersusOptions, VersusError> {
        let mut options = VersusOptions::default();
        let mut remaining = arguments.iter();
        while let Some(flag) = remaining.next() {
            let mut value = || {
                remaining
                    .next()
                    .ok_or_else(|| VersusError::Usage(format!("{flag} needs a value")))
            };
            let number = |text: &String| {
                text.parse::<u64>()
                    .ok()
                    .filter(|number| *number > 0)
                    .ok_or_else(|| {
                        VersusError::Usage(format!("{flag} wants a positive integer, not {text}"))
                    })
            };
            match flag.as_str() {
                "--size-mib" => options.size_mib = number(value()?)?,
                "--line-bytes" => options.line_bytes = number(value()?)?,
                "--runs" => options.runs = usize::try_from(number(value()?)?).unwrap_or(1),
                "--keep" => options.keep = Some(PathBuf::from(value()?)),
                other => return Err(VersusError::Usage(format!("unknown argument {other}"))),
            }
        }
        if options.line_bytes < MIN_LINE_BYTES {
            return Err(VersusError::Usage(format!(
                "--line-bytes must be at least {MIN_LINE_BYTES} (a 12-digit counter, a space, padding, the newline)"
            )));
        }
        if options.size_mib * MIB < options.line_bytes {
            return Err(VersusError::Usage(
                "--size-mib must hold at least one line".to_owned(),
            ));
        }
        Ok(options)
    }

    /// The number of lines in the input.
    pub(crate) fn lines(&self) -> u64 {
        self.size_mib * MIB / self.line_bytes
    }

    /// The input's exact size in bytes.
    pub(crate) fn input_bytes(&self) -> u64 {
        self.lines() * self.line_bytes
    }
}

// ---------------------------------------------------------------------------------------
// the input and the checks of an output

/// Line `index` of the input: a 12-digit counter, a space, and letters rotated by the
/// counter up to `line_bytes - 1` bytes, then a newline. Deterministic, printable, no
/// two lines alike.
pub(crate) fn input_line(index: u64, line_bytes: u64, line: &mut Vec<u8>) {
    const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyz";
    line.clear();
    // the counter wraps at 10^12 lines, far past any input this harness writes
    let _ = write!(line, "{:012} ", index % 1_000_000_000_000);
    let start = (index % LETTERS.len() as u64) as usize;
    let body = usize::try_from(line_bytes - 1).unwrap_or(usize::MAX);
    let mut letter = start;
    while line.len() < body {
        line.push(LETTERS[letter]);
        letter = (letter + 1) % LETTERS.len();
    }
    line.push(b'\n');
}

/// Writes the input file (`options.lines()` lines) at `path`, unless a file of exactly
/// the right size is already there (a kept input of the same options).
pub(crate) fn write_input(options: &VersusOptions, path: &Path) -> Result<bool, VersusError> {
    if fs::metadata(path).is_ok_and(|metadata| metadata.len() == options.input_bytes()) {
        return Ok(false);
    }
    let file = File::create(path).map_err(io_error("cannot create the input", path))?;
    let mut writer = BufWriter::with_capacity(MIB as usize, file);
    let mut line = Vec::with_capacity(options.line_bytes as usize);
    for index in 0..options.lines() {
        input_line(index, options.line_bytes, &mut line);
        writer
            .write_all(&line)
            .map_err(io_error("cannot write the input", path))?;
    }
    writer
        .into_inner()
        .map_err(|error| error.into_error())
        .and_then(|file| file.sync_all())
        .map_err(io_error("cannot write the input", path))?;
    Ok(true)
}

/// Where an output first differs from the input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Difference {
    /// The 1-based line number of the first line that differs (or is missing or extra).
    pub(crate) line: u64,
    /// The input's size in bytes.
    pub(crate) expected_bytes: u64,
    /// The output's size in bytes.
    pub(crate) actual_bytes: u64,
}

impl fmt::Display for Difference {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "the output differs from the input from line {} on (input {} bytes, output {} bytes)",
            self.line, self.expected_bytes, self.actual_bytes
        )
    }
}

fn count_newlines(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|byte| **byte == b'\n').count() as u64
}

/// Reads as much of `buffer` as the reader has (less only at its end).
fn read_full(reader: &mut impl Read, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match reader.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

/// Compares `actual` with `expected` byte for byte: `None` when they are equal, else the
/// first line that differs.
pub(crate) fn first_difference(
    expected: &Path,
    actual: &Path,
) -> Result<Option<Difference>, VersusError> {
    let mut expected_file = File::open(expected).map_err(io_error("cannot open", expected))?;
    let mut actual_file = File::open(actual).map_err(io_error("cannot open", actual))?;
    let expected_bytes = expected_file
        .metadata()
        .map_err(io_error("cannot stat", expected))?
        .len();
    let actual_bytes = actual_file
        .metadata()
        .map_err(io_error("cannot stat", actual))?
        .len();
    let mut expected_block = vec![0_u8; MIB as usize];
    let mut actual_block = vec![0_u8; MIB as usize];
    let mut lines_before = 0_u64;
    loop {
        let expected_read = read_full(&mut expected_file, &mut expected_block)
            .map_err(io_error("cannot read", expected))?;
        let actual_read = read_full(&mut actual_file, &mut actual_block)
            .map_err(io_error("cannot read", actual))?;
        let common = expected_read.min(actual_read);
        let mismatch = expected_block[..common]
            .iter()
            .zip(&actual_block[..common])
            .position(|(left, right)| left != right)
            .or((expected_read != actual_read).then_some(common));
        if let Some(at) = mismatch {
            return Ok(Some(Difference {
                line: lines_before + count_newlines(&expected_block[..at]) + 1,
                expected_bytes,
                actual_bytes,
            }));
        }
        if expected_read == 0 {
            return Ok(None);
        }
        lines_before += count_newlines(&expected_block[..expected_read]);
    }
}

/// Counts the lines of a file that grows, reading only what was appended since the last
/// call.
#[derive(Debug, Default)]
struct GrowingFileLines {
    file: Option<File>,
    bytes: u64,
    lines: u64,
    buffer: Vec<u8>,
}

impl GrowingFileLines {
    /// Reads what was appended to `path` (nothing if it does not exist yet) and returns
    /// whether anything was.
    fn advance(&mut self, path: &Path) -> Result<bool, VersusError> {
        if self.file.is_none() {
            match File::open(path) {
                Ok(file) => self.file = Some(file),
                Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
                Err(error) => return Err(io_error("cannot open", path)(error)),
            }
            self.buffer = vec![0; MIB as usize];
        }
        let Some(file) = self.file.as_mut() else {
            return Ok(false);
        };
        let before = self.bytes;
        loop {
            let read = match file.read(&mut self.buffer) {
                Ok(read) => read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(io_error("cannot read", path)(error)),
            };
            if read == 0 {
                break;
            }
            self.bytes += read as u64;
            self.lines += count_newlines(&self.buffer[..read]);
        }
        Ok(self.bytes > before)
    }
}

// ---------------------------------------------------------------------------------------
// the configs

/// Quotes a path for rsyslog's RainerScript or TOML (both take a double-quoted string
/// with backslash escapes).
fn quoted(path: &Path) -> String {
    let text = path.display().to_string();
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// rsyslog's config: imfile reads `input` from its beginning (`freshStartTail="off"`)
/// into a ruleset of its own (rsyslog's internal messages stay out of the output), one
/// main-queue worker, a direct action queue, and omfile writes the message text alone
/// (`%msg%` of an imfile line has no leading space), unescaped.
pub(crate) fn rsyslog_config(
    input: &Path,
    output: &Path,
    work_directory: &Path,
    line_bytes: u64,
) -> String {
    // room for the longest line and then some: rsyslog truncates at maxMessageSize
    let max_message_size = (line_bytes + 1024).max(8192);
    format!(
        r#"# written by cargo xtask versus-rsyslog
global(
  workDirectory={work}
  maxMessageSize="{max_message_size}"
  parser.escapeControlCharactersOnReceive="off"
)
main_queue(queue.workerThreads="1")
module(load="imfile" mode="inotify")
template(name="message_only" type="string" string="%msg%\n")
ruleset(name="copy") {{
  action(type="omfile" file={output} template="message_only" queue.type="Direct")
}}
input(type="imfile" file={input} tag="t" ruleset="copy" freshStartTail="off" addMetadata="off")
"#,
        work = quoted(work_directory),
        output = quoted(output),
        input = quoted(input),
    )
}

/// Our config: the file feed `lines` (COMMITED) forwarded by a `forward` processor into
/// the file sink `out`.
pub(crate) fn mongoose_config(input: &Path, output: &Path) -> String {
    format!(
        r#"# written by cargo xtask versus-rsyslog
[[feeds]]
name = "lines"
source = "file"
path = {input}
read_strategy = "COMMITED"

[[sinks]]
name = "out"
kind = "file"
path = {output}

[[groups]]
name = "forward"

[[groups.processors]]
name = "copy"
kind = "forward"
settings = {{ feed = "lines", sink = "out" }}
"#,
        input = quoted(input),
        output = quoted(output),
    )
}

// ---------------------------------------------------------------------------------------
// processes

/// How a process ended.
#[derive(Clone, Copy, Debug)]
struct Ended {
    /// When it exited (seen by the watching thread).
    at: Instant,
    /// The exit code, or 128 + the signal that ended it.
    code: i32,
    /// Peak resident set size, bytes (`wait4`'s `ru_maxrss`).
    max_rss_bytes: u64,
}

/// A child process under watch. A thread waits for its exit without reaping it
/// (`waitid` with `WNOWAIT`), so the exit time is exact; only this struct reaps it (with
/// `wait4`, which also gives its peak RSS), so a signal it sends before that cannot reach
/// another process that reused the id. Dropped unreaped, it kills and reaps the child.
#[derive(Debug)]
struct Watched {
    pid: libc::pid_t,
    exited: mpsc::Receiver<io::Result<Instant>>,
    reaped: bool,
}

impl Watched {
    fn spawn(command: &mut Command) -> io::Result<Watched> {
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

    fn id(&self) -> u32 {
        self.pid.unsigned_abs()
    }

    /// Waits up to `timeout` for the exit: `None` while it runs, else how it ended
    /// (reaped).
    fn wait_timeout(&mut self, timeout: Duration) -> Option<io::Result<Ended>> {
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
    fn stop(&mut self) -> io::Result<Ended> {
        self.signal(libc::SIGTERM);
        if let Some(ended) = self.wait_timeout(STOP_DEADLINE) {
            return ended;
        }
        eprintln!(
            "xtask: process {} did not exit within {STOP_DEADLINE:?} of SIGTERM: killing it",
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
fn peak_rss_of_live(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Flushes every dirty page to disk, so a run does not pay for the previous one's.
fn sync_disks() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

/// The last `count` lines of a log file, for an error message.
fn tail_of(path: &Path, count: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(count)..].join(" | ");
    if tail.is_empty() {
        format!("{} is empty", path.display())
    } else {
        tail
    }
}

fn log_file(path: &Path) -> Result<(Stdio, Stdio), VersusError> {
    let file = File::create(path).map_err(io_error("cannot create", path))?;
    let copy = file.try_clone().map_err(io_error("cannot create", path))?;
    Ok((Stdio::from(file), Stdio::from(copy)))
}

fn fresh_dir(path: &Path) -> Result<(), VersusError> {
    match fs::remove_dir_all(path) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(io_error("cannot remove", path)(error)),
    }
    fs::create_dir_all(path).map_err(io_error("cannot create", path))
}

// ---------------------------------------------------------------------------------------
// one run of each side

/// One measured run.
#[derive(Clone, Copy, Debug)]
struct Measured {
    seconds: f64,
    peak_rss_bytes: u64,
}

/// What one side's run gave: figures, or why it has none.
type RunResult = Result<Measured, String>;

/// The paths shared by every run.
#[derive(Debug)]
struct Layout {
    work: PathBuf,
    input: PathBuf,
    keep: bool,
}

impl Layout {
    fn run_dir(&self, side: &str, run: usize) -> PathBuf {
        self.work.join("runs").join(format!("{side}-{run}"))
    }

    /// Removes everything beside the input (our pointer file, lane registry) so the
    /// next run of ours reads the input from its beginning.
    fn reset_input_state(&self) -> Result<(), VersusError> {
        let folder = self.input.parent().unwrap_or(Path::new("."));
        for entry in fs::read_dir(folder).map_err(io_error("cannot list", folder))? {
            let path = entry.map_err(io_error("cannot list", folder))?.path();
            if path == self.input {
                continue;
            }
            let removed = if path.is_dir() {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            removed.map_err(io_error("cannot remove", &path))?;
        }
        Ok(())
    }

    /// After a run: checks the output against the input, then (unless kept) removes the
    /// output, and syncs.
    fn check_and_clean(&self, output: &Path) -> Result<Option<Difference>, VersusError> {
        let difference = first_difference(&self.input, output)?;
        if !self.keep {
            if let Err(error) = fs::remove_file(output) {
                eprintln!("xtask: cannot remove {}: {error}", output.display());
            }
        }
        sync_disks();
        Ok(difference)
    }
}

fn run_rsyslog(
    layout: &Layout,
    options: &VersusOptions,
    run: usize,
) -> Result<RunResult, VersusError> {
    let dir = layout.run_dir("rsyslog", run);
    fresh_dir(&dir)?;
    let work_directory = dir.join("work");
    fs::create_dir_all(&work_directory).map_err(io_error("cannot create", &work_directory))?;
    let output = dir.join("output.txt");
    let config = dir.join("rsyslog.conf");
    let log = dir.join("rsyslogd.log");
    fs::write(
        &config,
        rsyslog_config(&layout.input, &output, &work_directory, options.line_bytes),
    )
    .map_err(io_error("cannot write", &config))?;
    let (stdout, stderr) = log_file(&log)?;
    let started = Instant::now();
    let mut child = Watched::spawn(
        Command::new(rsyslogd_path().unwrap_or_else(|| PathBuf::from("rsyslogd")))
            .arg("-n")
            .arg("-f")
            .arg(&config)
            .arg("-i")
            .arg(dir.join("rsyslogd.pid"))
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr),
    )
    .map_err(io_error("cannot start", Path::new("rsyslogd")))?;
    let expected_lines = options.lines();
    let mut counted = GrowingFileLines::default();
    let mut last_progress = Instant::now();
    let finished = loop {
        if let Some(result) = child.wait_timeout(RSYSLOG_POLL) {
            let how = match result {
                Ok(ended) => format!("exit code {}", ended.code),
                Err(error) => error.to_string(),
            };
            return Ok(Err(format!(
                "rsyslogd ended before writing every line ({how}, {} of {expected_lines} lines): {}",
                counted.lines,
                tail_of(&log, 5)
            )));
        }
        if counted.advance(&output)? {
            last_progress = Instant::now();
        }
        if counted.lines >= expected_lines {
            break Ok(started.elapsed());
        }
        if last_progress.elapsed() > STALL_DEADLINE {
            break Err(format!(
                "rsyslogd wrote nothing for {STALL_DEADLINE:?} at {} of {expected_lines} lines: {}",
                counted.lines,
                tail_of(&log, 5)
            ));
        }
    };
    let peak_before_stop = peak_rss_of_live(child.id());
    let stopped = child.stop();
    let elapsed = match finished {
        Ok(elapsed) => elapsed,
        Err(reason) => return Ok(Err(reason)),
    };
    let peak_rss_bytes = match (peak_before_stop, &stopped) {
        (Some(peak), _) => peak,
        (None, Ok(ended)) => ended.max_rss_bytes,
        (None, Err(_)) => 0,
    };
    if let Some(difference) = layout.check_and_clean(&output)? {
        return Ok(Err(format!("MISMATCH: {difference}")));
    }
    Ok(Ok(Measured {
        seconds: elapsed.as_secs_f64(),
        peak_rss_bytes,
    }))
}

fn run_ours(layout: &Layout, binary: &Path, run: usize) -> Result<RunResult, VersusError> {
    layout.reset_input_state()?;
    let dir = layout.run_dir("ours", run);
    fresh_dir(&dir)?;
    let output = dir.join("output.txt");
    let config = dir.join("mongoose.toml");
    let log = dir.join("mongoose.log");
    fs::write(&config, mongoose_config(&layout.input, &output))
        .map_err(io_error("cannot write", &config))?;
    let (stdout, stderr) = log_file(&log)?;
    let started = Instant::now();
    let mut child = Watched::spawn(
        Command::new(binary)
            .arg("run")
            .arg("--config")
            .arg(&config)
            .arg("--exit-when-settled")
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr),
    )
    .map_err(io_error("cannot start", binary))?;
    let mut last_size = 0;
    let mut last_progress = Instant::now();
    let ended = loop {
        match child.wait_timeout(Duration::from_millis(500)) {
            Some(Ok(ended)) => break ended,
            Some(Err(error)) => return Ok(Err(format!("cannot wait for mongoose: {error}"))),
            None => {}
        }
        let size = fs::metadata(&output).map_or(0, |metadata| metadata.len());
        if size != last_size {
            last_size = size;
            last_progress = Instant::now();
        }
        if last_progress.elapsed() > STALL_DEADLINE {
            let _ = child.stop();
            return Ok(Err(format!(
                "mongoose wrote nothing for {STALL_DEADLINE:?} at {last_size} bytes and was stopped: {}",
                tail_of(&log, 5)
            )));
        }
    };
    let elapsed = ended.at - started;
    if ended.code != 0 {
        return Ok(Err(format!(
            "mongoose run exited with {}: {}",
            ended.code,
            tail_of(&log, 5)
        )));
    }
    if !output.exists() {
        return Ok(Err(format!(
            "mongoose run exited 0 but wrote no {}",
            output.display()
        )));
    }
    if let Some(difference) = layout.check_and_clean(&output)? {
        return Ok(Err(format!("MISMATCH: {difference}")));
    }
    Ok(Ok(Measured {
        seconds: elapsed.as_secs_f64(),
        peak_rss_bytes: ended.max_rss_bytes,
    }))
}

// ---------------------------------------------------------------------------------------
// setup

fn rsyslogd_path() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    candidates.extend(["/usr/sbin", "/sbin"].map(PathBuf::from));
    candidates
        .into_iter()
        .map(|folder| folder.join("rsyslogd"))
        .find(|path| path.is_file())
}

/// Installs rsyslog from Debian's packages when `rsyslogd` is missing (the package
/// lists are refreshed once if the first try fails). The service is never started here.
fn ensure_rsyslog() -> Result<PathBuf, VersusError> {
    if let Some(path) = rsyslogd_path() {
        return Ok(path);
    }
    let install = || {
        crate::run(
            Command::new("apt-get")
                .args(["install", "-y", "-q", "rsyslog"])
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
    };
    if !install() {
        crate::run(Command::new("apt-get").args(["update", "-q"]));
        install();
    }
    rsyslogd_path().ok_or(VersusError::NoRsyslog)
}

/// Builds the release `mongoose` binary and returns its path.
pub(crate) fn build_mongoose(root: &Path) -> Result<PathBuf, String> {
    let built = crate::run(Command::new(env!("CARGO")).current_dir(root).args([
        "build",
        "--release",
        "-p",
        "mongoose",
        "--bin",
        "mongoose",
    ]));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let binary = target.join("release").join("mongoose");
    if built && binary.is_file() {
        Ok(binary)
    } else {
        Err("`cargo build --release -p mongoose --bin mongoose` failed".to_owned())
    }
}

// ---------------------------------------------------------------------------------------
// the report

/// The median of some figures (the mean of the middle two for an even count).
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    Some(if sorted.len() % 2 == 0 {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    } else {
        sorted[middle]
    })
}

/// A side's medians: MiB/s, lines/s, peak RSS MiB.
#[derive(Clone, Copy, Debug)]
struct Medians {
    mib_per_second: f64,
    lines_per_second: f64,
    peak_rss_mib: f64,
}

fn medians(runs: &[RunResult], options: &VersusOptions) -> Option<Medians> {
    let measured: Vec<Measured> = runs
        .iter()
        .filter_map(|run| run.as_ref().ok())
        .copied()
        .collect();
    let input_mib = options.input_bytes() as f64 / MIB as f64;
    let lines = options.lines() as f64;
    Some(Medians {
        mib_per_second: median(
            &measured
                .iter()
                .map(|run| input_mib / run.seconds)
                .collect::<Vec<_>>(),
        )?,
        lines_per_second: median(
            &measured
                .iter()
                .map(|run| lines / run.seconds)
                .collect::<Vec<_>>(),
        )?,
        peak_rss_mib: median(
            &measured
                .iter()
                .map(|run| run.peak_rss_bytes as f64 / MIB as f64)
                .collect::<Vec<_>>(),
        )?,
    })
}

/// `1234567.8` -> `1,234,568`.
fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

fn side_row(name: &str, runs: &[RunResult], options: &VersusOptions) -> String {
    match medians(runs, options) {
        Some(medians) => format!(
            "{name:<14} {:>10.1} {:>14} {:>16.1}",
            medians.mib_per_second,
            thousands(medians.lines_per_second),
            medians.peak_rss_mib
        ),
        None => {
            let reason = runs
                .iter()
                .find_map(|run| run.as_ref().err())
                .map_or("no run", String::as_str);
            format!("{name:<14} not available ({reason})")
        }
    }
}

fn report(ours: &[RunResult], theirs: &[RunResult], options: &VersusOptions) -> String {
    let mut out = String::new();
    let input_mib = options.input_bytes() as f64 / MIB as f64;
    let _ = writeln!(
        out,
        "\nversus rsyslog: {input_mib:.0} MiB, {} lines of {} bytes tailed into a file, {} alternating runs each (medians)",
        thousands(options.lines() as f64),
        options.line_bytes,
        options.runs
    );
    let _ = writeln!(
        out,
        "{:<14} {:>10} {:>14} {:>16}",
        "", "MiB/s", "lines/s", "peak RSS MiB"
    );
    let _ = writeln!(out, "{}", side_row("ours", ours, options));
    let _ = writeln!(out, "{}", side_row("rsyslog", theirs, options));
    match (medians(ours, options), medians(theirs, options)) {
        (Some(ours), Some(theirs)) => {
            let _ = writeln!(
                out,
                "{:<14} {:>9.2}x {:>13.2}x {:>15.2}x",
                "ours/rsyslog",
                ours.mib_per_second / theirs.mib_per_second,
                ours.lines_per_second / theirs.lines_per_second,
                ours.peak_rss_mib / theirs.peak_rss_mib
            );
        }
        _ => {
            let _ = writeln!(out, "{:<14} n/a", "ours/rsyslog");
        }
    }
    let _ = writeln!(out, "per run:");
    for (index, (our_run, their_run)) in ours.iter().zip(theirs).enumerate() {
        for (name, run) in [("ours", our_run), ("rsyslog", their_run)] {
            let line = match run {
                Ok(measured) => format!(
                    "{:.2} s, {:.1} MiB/s, {} lines/s, peak RSS {:.1} MiB, output identical to the input",
                    measured.seconds,
                    input_mib / measured.seconds,
                    thousands(options.lines() as f64 / measured.seconds),
                    measured.peak_rss_bytes as f64 / MIB as f64
                ),
                Err(reason) => format!("not available ({reason})"),
            };
            let _ = writeln!(out, "  run {} {name:<8} {line}", index + 1);
        }
    }
    let _ = writeln!(
        out,
        "not the same promise: rsyslog saves its read position when it reads a line (a crash can lose\n\
         lines read but not yet written, and its omfile does not fsync); ours commits a line's position\n\
         only after its output is durable. rsyslog's time ends at the 100 ms poll that sees its last\n\
         line; ours at the exit of `mongoose run --exit-when-settled` (start-up and shutdown included)."
    );
    out
}

// ---------------------------------------------------------------------------------------
// the command

/// Runs the comparison and prints the report; false when the harness itself failed or
/// an output did not match its input (a side that is merely unavailable is reported,
/// not a failure).
pub(crate) fn versus_rsyslog(root: &Path, arguments: &[String]) -> bool {
    match versus(root, arguments) {
        Ok(ok) => ok,
        Err(error) => {
            eprintln!("xtask: versus-rsyslog: {error}");
            false
        }
    }
}

fn versus(root: &Path, arguments: &[String]) -> Result<bool, VersusError> {
    let options = VersusOptions::parse(arguments)?;
    let rsyslogd = ensure_rsyslog()?;
    eprintln!("xtask: rsyslog is {}", rsyslogd.display());
    let binary = build_mongoose(root);
    let work = options
        .keep
        .clone()
        .unwrap_or_else(|| root.join("target").join("versus-rsyslog"));
    let input_dir = work.join("input");
    fs::create_dir_all(&input_dir).map_err(io_error("cannot create", &input_dir))?;
    let layout = Layout {
        input: input_dir.join(INPUT_NAME),
        work: work.clone(),
        keep: options.keep.is_some(),
    };
    eprintln!(
        "xtask: writing the input {} ({} lines of {} bytes)",
        layout.input.display(),
        thousands(options.lines() as f64),
        options.line_bytes
    );
    if !write_input(&options, &layout.input)? {
        eprintln!("xtask: reusing the input already there");
    }
    sync_disks();

    let mut ours: Vec<RunResult> = Vec::new();
    let mut theirs: Vec<RunResult> = Vec::new();
    for run in 1..=options.runs {
        let our_run = match (&binary, ours.iter().find_map(|run| run.as_ref().err())) {
            (Err(error), _) => Err(error.clone()),
            // ours failed once: it will fail the same way; do not spend the time again
            (Ok(_), Some(first_failure)) => Err(format!("as run 1: {first_failure}")),
            (Ok(binary), None) => {
                eprintln!("xtask: run {run}: ours");
                run_ours(&layout, binary, run)?
            }
        };
        if let Err(reason) = &our_run {
            eprintln!("xtask: run {run}: ours: not available ({reason})");
        }
        ours.push(our_run);
        eprintln!("xtask: run {run}: rsyslog");
        let their_run = run_rsyslog(&layout, &options, run)?;
        if let Err(reason) = &their_run {
            eprintln!("xtask: run {run}: rsyslog: not available ({reason})");
        }
        theirs.push(their_run);
    }
    print!("{}", report(&ours, &theirs, &options));
    if options.keep.is_none() {
        if let Err(error) = fs::remove_dir_all(&work) {
            eprintln!("xtask: cannot remove {}: {error}", work.display());
        }
    } else {
        println!("kept: {}", work.display());
    }
    let mismatch = ours.iter().chain(&theirs).any(|run| {
        run.as_ref()
            .is_err_and(|reason| reason.starts_with("MISMATCH"))
    });
    if mismatch {
        eprintln!("xtask: versus-rsyslog: AN OUTPUT DIFFERS FROM ITS INPUT (see above)");
    }
    Ok(!mismatch)
}

#[cfg(test)]
mod tests;
