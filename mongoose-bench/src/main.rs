//! `cargo mongoose-bench`: the benchmark lab (issue 42: out of `xtask`, the one tool
//! crate that links librdkafka; `cargo xtask layout` keeps it out of the task runner).
//!
//! * `cargo mongoose-bench all [--versus-rsyslog] [--only EXAMPLE] [ARGS...]` runs the
//!   whole-pipeline benchmarks in release mode, one after the other so they do not
//!   compete for cores, then the criterion benches and the instructions per line, and
//!   prints the goal lines together (see [`mod@bench`]); `--only` runs one of them alone.
//! * `cargo mongoose-bench callgrind [--lines 200000] [--binary PATH] [--keep DIR]`: the
//!   instructions each line of a durable forward costs on each thread (see
//!   [`callgrind`]).
//! * `cargo mongoose-bench versus-rsyslog [--size-mib 1024] [--line-bytes 100] [--runs 3]
//!   [--keep DIR]` tails the same file of lines into an output file with `mongoose run`,
//!   rsyslog, syslog-ng and `dd`, alternately (see [`versus`]).
//! * `cargo mongoose-bench versus-kafka-streams [--runs 3] [--warmup 20000] [--records
//!   300000] [--paced 2000] [--rate 1000] [--instances 1,3] [--keep DIR]` runs the
//!   ledger as ours and as a Kafka Streams application on the same broker and records
//!   (see [`versus_kstreams`]).
//!
//! `cargo mongoose-bench` is a cargo alias (`.cargo/config.toml`) for
//! `cargo run --quiet -p mongoose-bench --`. What belongs to the task runner (building
//! the plugins, starting the test broker) is asked of `cargo xtask`.

mod bench;
mod callgrind;
mod versus;
mod versus_kstreams;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::{Parser, Subcommand};

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "mongoose-bench",
    bin_name = "cargo mongoose-bench",
    about = "The benchmark lab: whole-pipeline figures, instructions per line, and the peers measured beside ours"
)]
struct Cli {
    #[command(subcommand)]
    command: BenchCommand,
}

/// What to measure.
#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// The whole-pipeline benchmarks in release mode one after the other, the criterion
    /// benches (`--quick`) and the instructions per line, then the goal lines together.
    All(bench::AllOptions),
    /// The instructions each line of a durable forward costs on each of its threads,
    /// under valgrind's callgrind.
    Callgrind(callgrind::Options),
    /// The same file of lines into an output file by ours, rsyslog, syslog-ng and `dd`,
    /// alternately: throughput, peak RSS and a line-for-line check.
    VersusRsyslog(versus::VersusOptions),
    /// The ledger as ours and as a Kafka Streams application on the same broker and
    /// records: records/s, CPU per record, latency, peak RSS and the check of both.
    VersusKafkaStreams(versus_kstreams::Options),
}

fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

fn run(command: &mut Command) -> bool {
    eprintln!("mongoose-bench: running {command:?}");
    match command.status() {
        Ok(status) => status.success(),
        Err(error) => {
            eprintln!("mongoose-bench: could not start {command:?}: {error}");
            false
        }
    }
}

/// Runs `cargo xtask ARGUMENTS` (the task runner builds the plugins and starts the
/// broker; the lab does not do it a second way).
fn xtask(root: &Path, arguments: &[&str]) -> bool {
    run(Command::new(env!("CARGO"))
        .current_dir(root)
        .args(["run", "--quiet", "-p", "xtask", "--"])
        .args(arguments))
}

/// `cargo xtask plugins --out DIR`.
fn plugins(root: &Path, out: &Path) -> bool {
    match out.to_str() {
        Some(out) => xtask(root, &["plugins", "--out", out]),
        None => {
            eprintln!("mongoose-bench: {} is not UTF-8", out.display());
            false
        }
    }
}

/// Parses `arguments` (those after the command's name) as `T`'s options, for the tests
/// of each command's options.
#[cfg(test)]
fn parse_options<T: clap::Args>(arguments: &[String]) -> Result<T, clap::Error> {
    let command = T::augment_args(clap::Command::new("command").no_binary_name(true));
    let matches = command.try_get_matches_from(arguments)?;
    T::from_arg_matches(&matches)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let root = workspace_root();
    let ok = match &cli.command {
        BenchCommand::All(options) => bench::bench(&root, options),
        BenchCommand::Callgrind(options) => callgrind::callgrind(&root, options),
        BenchCommand::VersusRsyslog(options) => versus::versus_rsyslog(&root, options),
        BenchCommand::VersusKafkaStreams(options) => {
            versus_kstreams::versus_kafka_streams(&root, options)
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
