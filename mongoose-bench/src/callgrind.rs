//! `cargo mongoose-bench callgrind [--lines 200000] [--binary PATH] [--keep DIR]`: the
//! instructions each line of a durable forward costs on each of its three threads.
//!
//! Runs the release `mongoose` binary (or `--binary`, an earlier build to compare with)
//! under valgrind's callgrind, one output file per thread, on the `versus-rsyslog` shape:
//! a COMMITED file feed of 100-byte lines forwarded into a file sink that fdatasyncs
//! each batch, until settled (`--exit-when-settled`). Each thread's file is named by
//! the functions it ran (the source driver, the group's runtime, the sink runner) and
//! its instruction total is divided by the lines. The output is checked line for line
//! against the input. Instruction counts do not depend on the machine's load, so the
//! figures of two builds compare where wall-clock times would not.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::versus::{build_mongoose, first_difference, input_line, mongoose_config};

/// The thread kinds, each named by a function only it runs.
const THREADS: &[(&str, &str)] = &[
    ("source", "SourceDriver"),
    ("group", "run_group"),
    ("sink", "runner::run::Run"),
];

/// The options of `cargo mongoose-bench callgrind`.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub(crate) struct Options {
    /// Lines of 100 bytes forwarded.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) lines: u64,
    /// The `mongoose` binary to measure (an earlier build to compare with); default:
    /// the release build, built first.
    #[arg(long, value_name = "PATH")]
    pub(crate) binary: Option<PathBuf>,
    /// Keep the input, output and callgrind files in this folder.
    #[arg(long, value_name = "DIR")]
    pub(crate) keep: Option<PathBuf>,
}

/// Runs the measurement and prints instructions per line for each thread; false when
/// it could not run or the output differs from its input.
pub(crate) fn callgrind(root: &Path, options: &Options) -> bool {
    match measure(root, options) {
        Ok(()) => true,
        Err(error) => {
            eprintln!("mongoose-bench: callgrind: {error}");
            false
        }
    }
}

fn measure(root: &Path, options: &Options) -> Result<(), String> {
    let binary = match &options.binary {
        // the run's folder is its current directory: a relative path would miss
        Some(binary) => binary
            .canonicalize()
            .map_err(|error| format!("no binary at {}: {error}", binary.display()))?,
        None => build_mongoose(root)?,
    };
    let work = options
        .keep
        .clone()
        .unwrap_or_else(|| root.join("target").join("callgrind"));
    let _ = fs::remove_dir_all(&work);
    let input_dir = work.join("input");
    fs::create_dir_all(&input_dir)
        .map_err(|error| format!("cannot create {}: {error}", input_dir.display()))?;
    let input = input_dir.join("lines.txt");
    let mut bytes = Vec::with_capacity(options.lines as usize * 100);
    let mut line = Vec::new();
    for index in 0..options.lines {
        input_line(index, 100, &mut line);
        bytes.extend_from_slice(&line);
    }
    fs::write(&input, &bytes)
        .map_err(|error| format!("cannot write {}: {error}", input.display()))?;
    let output = work.join("output.txt");
    let config = work.join("mongoose.toml");
    fs::write(&config, mongoose_config(&input, &output))
        .map_err(|error| format!("cannot write {}: {error}", config.display()))?;
    let out_files = work.join("callgrind.out");
    eprintln!(
        "mongoose-bench: callgrind: {} lines through {} (this takes a minute or more)",
        options.lines,
        binary.display()
    );
    let status = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg("--separate-threads=yes")
        .arg("--dump-instr=no")
        .arg(format!("--callgrind-out-file={}", out_files.display()))
        .arg(&binary)
        .args(["run", "--config"])
        .arg(&config)
        .arg("--exit-when-settled")
        .current_dir(&work)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(
            fs::File::create(work.join("valgrind.log"))
                .map_err(|error| format!("cannot create the log: {error}"))?,
        )
        .status()
        .map_err(|error| format!("cannot start valgrind (install Debian's valgrind): {error}"))?;
    if !status.success() {
        return Err(format!(
            "mongoose under valgrind exited with {status}: see {}",
            work.join("valgrind.log").display()
        ));
    }
    if let Some(difference) =
        first_difference(&input, &output).map_err(|error| error.to_string())?
    {
        return Err(format!("MISMATCH: {difference}"));
    }
    let mut totals = vec![0u64; THREADS.len()];
    let mut other = 0u64;
    for entry in fs::read_dir(&work).map_err(|error| error.to_string())? {
        let path = entry.map_err(|error| error.to_string())?.path();
        let name = path
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or("");
        if !name.starts_with("callgrind.out") {
            continue;
        }
        let text =
            fs::read_to_string(&path).map_err(|error| format!("{}: {error}", path.display()))?;
        let total = text
            .lines()
            .find_map(|line| {
                line.strip_prefix("summary: ")
                    .or_else(|| line.strip_prefix("totals: "))
            })
            .and_then(|value| value.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        match THREADS.iter().position(|(_, marker)| text.contains(marker)) {
            Some(at) => totals[at] += total,
            None => other += total,
        }
    }
    let lines = options.lines as f64;
    println!(
        "instructions per line under callgrind ({} lines of 100 bytes, forward -> durable file sink, {}):",
        options.lines,
        binary.display()
    );
    for ((kind, _), total) in THREADS.iter().zip(&totals) {
        println!("  {kind:<7} thread: {:>8.0}", *total as f64 / lines);
    }
    println!(
        "  all three: {:>8.0}   (other threads, start and stop: {:.0})",
        totals.iter().sum::<u64>() as f64 / lines,
        other as f64 / lines
    );
    if options.keep.is_none() {
        let _ = fs::remove_dir_all(&work);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Options;
    use crate::parse_options;

    fn arguments(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn the_options_default_to_200_000_lines_and_refuse_what_cannot_run() {
        let options: Options = parse_options(&[]).expect("defaults");
        assert_eq!(options.lines, 200_000);
        assert!(options.binary.is_none() && options.keep.is_none());
        let options: Options =
            parse_options(&arguments("--lines 5 --binary /b --keep /k")).expect("parsed");
        assert_eq!(options.lines, 5);
        assert_eq!(options.binary.as_deref(), Some(std::path::Path::new("/b")));
        for wrong in ["--lines 0", "--lines", "--fast 1"] {
            assert!(
                parse_options::<Options>(&arguments(wrong)).is_err(),
                "{wrong} must be refused"
            );
        }
    }
}
