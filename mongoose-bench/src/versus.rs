//! `cargo mongoose-bench versus-rsyslog`: the same file of lines tailed into an output file by
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

use std::fs::{self};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod checks;
mod configs;
mod processes;
mod report;
mod runs;
mod setup;

pub(crate) use self::checks::{first_difference, input_line, write_input};
pub(crate) use self::configs::mongoose_config;
use self::processes::sync_disks;
use self::report::{report, thousands, Side};
use self::runs::{run_dd, run_ours, run_peer, Layout, Peer, RunResult};
pub(crate) use self::setup::build_mongoose;
use self::setup::{ensure_rsyslog, ensure_syslog_ng};

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
    #[error("{0}; see cargo mongoose-bench versus-rsyslog --help")]
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

/// The command line of `cargo mongoose-bench versus-rsyslog`.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub(crate) struct VersusOptions {
    /// The input's size in MiB (rounded down to whole lines).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) size_mib: u64,
    /// Each line's length in bytes, its newline included (at least 15).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) line_bytes: u64,
    /// How many runs of each side, alternating (ours first).
    #[arg(long, default_value_t = 3, value_parser = positive_count)]
    pub(crate) runs: usize,
    /// Keep the input, configs, logs and outputs in this folder (and reuse an input of
    /// the right size found there); without it everything is removed at the end.
    #[arg(long, value_name = "DIR")]
    pub(crate) keep: Option<PathBuf>,
}

/// A count of at least one.
pub(crate) fn positive_count(text: &str) -> Result<usize, String> {
    text.parse::<usize>()
        .ok()
        .filter(|count| *count > 0)
        .ok_or_else(|| format!("wants a positive integer, not {text}"))
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
    /// Parses `[--size-mib N] [--line-bytes N] [--runs N] [--keep DIR]` (the arguments
    /// after the command's name) and checks them.
    #[cfg(test)]
    pub(crate) fn parse(arguments: &[String]) -> Result<VersusOptions, VersusError> {
        let options: VersusOptions = crate::parse_options(arguments)
            .map_err(|error| VersusError::Usage(error.to_string().trim().to_owned()))?;
        options.check()?;
        Ok(options)
    }

    /// Refuses what clap cannot: a line too short for its counter, an input without a
    /// line.
    pub(crate) fn check(&self) -> Result<(), VersusError> {
        if self.line_bytes < MIN_LINE_BYTES {
            return Err(VersusError::Usage(format!(
                "--line-bytes must be at least {MIN_LINE_BYTES} (a 12-digit counter, a space, padding, the newline)"
            )));
        }
        if self.size_mib * MIB < self.line_bytes {
            return Err(VersusError::Usage(
                "--size-mib must hold at least one line".to_owned(),
            ));
        }
        Ok(())
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
// the command

/// Runs the comparison and prints the report; false when the harness itself failed or
/// an output did not match its input (a side that is merely unavailable is reported,
/// not a failure).
pub(crate) fn versus_rsyslog(root: &Path, options: &VersusOptions) -> bool {
    match versus(root, options) {
        Ok(ok) => ok,
        Err(error) => {
            eprintln!("mongoose-bench: versus-rsyslog: {error}");
            false
        }
    }
}

fn versus(root: &Path, options: &VersusOptions) -> Result<bool, VersusError> {
    options.check()?;
    let rsyslogd = ensure_rsyslog()?;
    eprintln!("mongoose-bench: rsyslog is {}", rsyslogd.display());
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
        "mongoose-bench: writing the input {} ({} lines of {} bytes)",
        layout.input.display(),
        thousands(options.lines() as f64),
        options.line_bytes
    );
    if !write_input(options, &layout.input)? {
        eprintln!("mongoose-bench: reusing the input already there");
    }
    sync_disks();

    let syslog_ng = ensure_syslog_ng(root);
    match &syslog_ng {
        Some(path) => eprintln!("mongoose-bench: syslog-ng is {}", path.display()),
        None => eprintln!("mongoose-bench: syslog-ng is missing and unpacking Debian's syslog-ng-core failed: its row says so"),
    }
    let mut ours: Vec<RunResult> = Vec::new();
    let mut rsyslog: Vec<RunResult> = Vec::new();
    let mut syslog_ng_runs: Vec<RunResult> = Vec::new();
    let mut dd: Vec<RunResult> = Vec::new();
    for run in 1..=options.runs {
        let our_run = match (&binary, ours.iter().find_map(|run| run.as_ref().err())) {
            (Err(error), _) => Err(error.clone()),
            // ours failed once: it will fail the same way; do not spend the time again
            (Ok(_), Some(first_failure)) => Err(format!("as run 1: {first_failure}")),
            (Ok(binary), None) => {
                eprintln!("mongoose-bench: run {run}: ours");
                run_ours(&layout, binary, run)?
            }
        };
        if let Err(reason) = &our_run {
            eprintln!("mongoose-bench: run {run}: ours: not available ({reason})");
        }
        ours.push(our_run);
        eprintln!("mongoose-bench: run {run}: rsyslog");
        let their_run = run_peer(&layout, options, run, Peer::Rsyslog, &rsyslogd)?;
        if let Err(reason) = &their_run {
            eprintln!("mongoose-bench: run {run}: rsyslog: not available ({reason})");
        }
        rsyslog.push(their_run);
        let their_run = match &syslog_ng {
            Some(program) => {
                eprintln!("mongoose-bench: run {run}: syslog-ng");
                run_peer(&layout, options, run, Peer::SyslogNg, program)?
            }
            None => Err("syslog-ng is not installed (Debian package syslog-ng-core, unpacked into target/peers)".to_owned()),
        };
        if let Err(reason) = &their_run {
            eprintln!("mongoose-bench: run {run}: syslog-ng: not available ({reason})");
        }
        syslog_ng_runs.push(their_run);
        eprintln!("mongoose-bench: run {run}: dd oflag=dsync bs=1M");
        dd.push(run_dd(&layout, run)?);
    }
    let sides = [
        Side {
            name: "ours",
            runs: ours,
        },
        Side {
            name: "rsyslog",
            runs: rsyslog,
        },
        Side {
            name: "syslog-ng",
            runs: syslog_ng_runs,
        },
        Side {
            name: "dd-dsync",
            runs: dd,
        },
    ];
    print!("{}", report(&sides, options));
    if options.keep.is_none() {
        if let Err(error) = fs::remove_dir_all(&work) {
            eprintln!("mongoose-bench: cannot remove {}: {error}", work.display());
        }
    } else {
        println!("kept: {}", work.display());
    }
    let mismatch = sides.iter().flat_map(|side| &side.runs).any(|run| {
        run.as_ref()
            .is_err_and(|reason| reason.starts_with("MISMATCH"))
    });
    if mismatch {
        eprintln!("mongoose-bench: versus-rsyslog: AN OUTPUT DIFFERS FROM ITS INPUT (see above)");
    }
    Ok(!mismatch)
}

#[cfg(test)]
mod tests;
