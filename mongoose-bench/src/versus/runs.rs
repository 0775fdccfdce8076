//! One run of each side: the peers' (rsyslog, syslog-ng), `dd`'s and ours, measured and
//! checked.

use std::fs::{self};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::checks::{first_difference, Difference, GrowingFileLines};
use super::configs::{mongoose_config, rsyslog_config, syslog_ng_config};
use super::processes::{fresh_dir, log_file, peak_rss_of_live, sync_disks, tail_of, Watched};
use super::setup::syslog_ng_unpacked_paths;
use super::{io_error, VersusError, VersusOptions, RSYSLOG_POLL, STALL_DEADLINE};

/// One measured run.
#[derive(Clone, Copy, Debug)]
pub(super) struct Measured {
    pub(super) seconds: f64,
    pub(super) peak_rss_bytes: u64,
}

/// What one side's run gave: figures, or why it has none.
pub(super) type RunResult = Result<Measured, String>;

/// The paths shared by every run.
#[derive(Debug)]
pub(super) struct Layout {
    pub(super) work: PathBuf,
    pub(super) input: PathBuf,
    pub(super) keep: bool,
}

impl Layout {
    pub(super) fn run_dir(&self, side: &str, run: usize) -> PathBuf {
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
                eprintln!(
                    "mongoose-bench: cannot remove {}: {error}",
                    output.display()
                );
            }
        }
        sync_disks();
        Ok(difference)
    }
}

/// A peer: a daemon that tails the input into an output file until it is stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Peer {
    /// rsyslog: imfile -> omfile.
    Rsyslog,
    /// syslog-ng: file source -> file destination.
    SyslogNg,
}

impl Peer {
    /// The name in the report and in the run folders.
    pub(super) fn name(self) -> &'static str {
        match self {
            Peer::Rsyslog => "rsyslog",
            Peer::SyslogNg => "syslog-ng",
        }
    }

    /// Writes the peer's config into `dir` and returns the command that runs it in the
    /// foreground with every file of its own in `dir`.
    fn command(
        self,
        program: &Path,
        layout: &Layout,
        options: &VersusOptions,
        dir: &Path,
        output: &Path,
    ) -> Result<Command, VersusError> {
        let mut command = Command::new(program);
        match self {
            Peer::Rsyslog => {
                let work_directory = dir.join("work");
                fs::create_dir_all(&work_directory)
                    .map_err(io_error("cannot create", &work_directory))?;
                let config = dir.join("rsyslog.conf");
                fs::write(
                    &config,
                    rsyslog_config(&layout.input, output, &work_directory, options.line_bytes),
                )
                .map_err(io_error("cannot write", &config))?;
                command
                    .arg("-n")
                    .arg("-f")
                    .arg(&config)
                    .arg("-i")
                    .arg(dir.join("rsyslogd.pid"));
            }
            Peer::SyslogNg => {
                let config = dir.join("syslog-ng.conf");
                fs::write(
                    &config,
                    syslog_ng_config(&layout.input, output, options.line_bytes),
                )
                .map_err(io_error("cannot write", &config))?;
                if let Some((libraries, modules)) = syslog_ng_unpacked_paths(program) {
                    command
                        .env("LD_LIBRARY_PATH", libraries)
                        .arg(format!("--module-path={}", modules.display()));
                }
                command
                    .arg("-F")
                    .arg("--no-caps")
                    .arg("-f")
                    .arg(&config)
                    .arg("-R")
                    .arg(dir.join("syslog-ng.persist"))
                    .arg("-p")
                    .arg(dir.join("syslog-ng.pid"))
                    .arg("-c")
                    .arg(dir.join("syslog-ng.ctl"));
            }
        }
        Ok(command)
    }
}

/// One run of `peer` (the program `program`): from its spawn to the poll (every 100 ms)
/// that sees the input's last line in its output; peak RSS read before SIGTERM.
pub(super) fn run_peer(
    layout: &Layout,
    options: &VersusOptions,
    run: usize,
    peer: Peer,
    program: &Path,
) -> Result<RunResult, VersusError> {
    let name = peer.name();
    let dir = layout.run_dir(name, run);
    fresh_dir(&dir)?;
    let output = dir.join("output.txt");
    let log = dir.join(format!("{name}.log"));
    let mut command = peer.command(program, layout, options, &dir, &output)?;
    let (stdout, stderr) = log_file(&log)?;
    let started = Instant::now();
    let mut child = Watched::spawn(
        command
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr),
    )
    .map_err(io_error("cannot start", program))?;
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
                "{name} ended before writing every line ({how}, {} of {expected_lines} lines): {}",
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
                "{name} wrote nothing for {STALL_DEADLINE:?} at {} of {expected_lines} lines: {}",
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

/// One run of `dd if=<input> of=<output> oflag=dsync bs=1M`: the disk's synchronous
/// write rate for the same bytes (each 1 MiB block written through to the disk before
/// the next is read), timed from its spawn to its exit.
pub(super) fn run_dd(layout: &Layout, run: usize) -> Result<RunResult, VersusError> {
    let dir = layout.run_dir("dd", run);
    fresh_dir(&dir)?;
    let output = dir.join("output.txt");
    let log = dir.join("dd.log");
    let (stdout, stderr) = log_file(&log)?;
    let started = Instant::now();
    let mut child = Watched::spawn(
        Command::new("dd")
            .arg(format!("if={}", layout.input.display()))
            .arg(format!("of={}", output.display()))
            .args(["oflag=dsync", "bs=1M"])
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr),
    )
    .map_err(io_error("cannot start", Path::new("dd")))?;
    let ended = loop {
        match child.wait_timeout(Duration::from_millis(100)) {
            Some(Ok(ended)) => break ended,
            Some(Err(error)) => return Ok(Err(format!("cannot wait for dd: {error}"))),
            None => {}
        }
    };
    if ended.code != 0 {
        return Ok(Err(format!(
            "dd exited with {}: {}",
            ended.code,
            tail_of(&log, 5)
        )));
    }
    if let Some(difference) = layout.check_and_clean(&output)? {
        return Ok(Err(format!("MISMATCH: {difference}")));
    }
    Ok(Ok(Measured {
        seconds: (ended.at - started).as_secs_f64(),
        peak_rss_bytes: ended.max_rss_bytes,
    }))
}

pub(super) fn run_ours(
    layout: &Layout,
    binary: &Path,
    run: usize,
) -> Result<RunResult, VersusError> {
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
