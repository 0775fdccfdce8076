//! `cargo mongoose-bench versus-kafka-streams [--runs 3] [--warmup 20000] [--records 300000]
//! [--paced 2000] [--rate 1000] [--instances 1,3] [--partitions 6] [--brokers
//! 127.0.0.1:19092] [--keep DIR]`: the ledger as ours (the release `mongoose` binary,
//! the ledger with `state = "changelog"` on a Kafka feed, alerts to a topic through a
//! Kafka sink) and as a Kafka Streams application (`peers/kafka-streams`:
//! `exactly_once_v2`, a persistent store of balances with its changelog, alerts to a
//! topic) on the same broker and the same records, side by side (issue 27, item 6).
//!
//! Setup: the command runs as a release build of mongoose-bench (a debug build's
//! librdkafka is not optimised, and its producer would cap the rates); the test broker
//! is started when nothing answers on `--brokers` (`cargo xtask broker start`); ours is
//! built (`cargo build --release -p mongoose`, `cargo xtask plugins`); the peer is built with
//! Maven when its pom or sources changed (offline from the local repository in
//! `$MONGOOSE_KAFKA_CACHE`, else
//! `~/.cache/mongoose-kafka/m2`, after the first resolve) into
//! `target/kafka-streams-peer`.
//!
//! Each run, for each instance count, runs both sides (ours first on odd runs, theirs
//! first on even ones). A side's run:
//! 1. a new input topic and alerts topic of `--partitions` partitions, both with the
//!    broker's append time as record timestamps, and a new group (application id);
//! 2. the instances start and form their group on the empty topic (every member in);
//! 3. **warm-up**: `--warmup` lines processed before the clock runs (the JVM compiles
//!    its hot paths; a short run would otherwise time Java's interpreter);
//! 4. **throughput**: `--records` lines `acc<n % 200>,<n % 7 - 3>` keyed by account
//!    (every 1,000th malformed), produced batched while every instance is stopped
//!    (SIGSTOP, a few seconds, within their sessions), so the producer cannot set the
//!    pace; records/s is their count over the time from the instances' SIGCONT to
//!    every record committed by the group;
//! 5. **latency**: `--paced` more lines at `--rate` records/s, one per request; for
//!    each alert of them, its broker append time minus its input record's, and the time
//!    a `read_committed` consumer here received it minus its input record's append time
//!    (p50 and p99);
//! 6. peak RSS: `VmHWM` of each instance summed, read before SIGTERM;
//! 7. **check**: the input topic read back gives the truth (each line applied once in
//!    its partition's order); the side's final balances and rejected count (ours: its
//!    changelog folded with `mongoose_kafka::changelog::fold` and
//!    `mongoose_ledger::partition_state`; theirs: the last value of each key of its
//!    store's changelog, `read_committed`) must equal it, and every alert of the truth
//!    must be in the alerts topic (`read_committed`) and none other; duplicates are
//!    counted and reported, not failed (both sides write their alerts in transactions:
//!    ours with the ledger's `alerts_topic`, in the changelog's transactions).
//!
//! Prints a table of medians, the ratios ours/theirs per instance count and the 3-vs-1
//! scaling, and fails (exit 1) when a side could not run or a check failed.

use std::path::{Path, PathBuf};

mod kafka;
mod report;
mod runs;
mod sides;
mod truth;

#[cfg(test)]
mod tests;

use self::report::{report, Series};
use self::sides::{build_peer, Programs, Side};

/// The command line.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub(crate) struct Options {
    /// Runs of each side and instance count.
    #[arg(long, default_value_t = 3, value_parser = crate::versus::positive_count)]
    pub(crate) runs: usize,
    /// Records processed before the throughput phase, not timed.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) warmup: u64,
    /// Records of the throughput phase.
    #[arg(long, default_value_t = 300_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) records: u64,
    /// Records of the paced (latency) phase.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) paced: u64,
    /// The paced phase's rate, records/s.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) rate: u64,
    /// The instance counts, e.g. 1,3.
    #[arg(
        long,
        default_value = "1,3",
        value_delimiter = ',',
        value_parser = crate::versus::positive_count
    )]
    pub(crate) instances: Vec<usize>,
    /// The input topic's partitions.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(i32).range(1..))]
    pub(crate) partitions: i32,
    /// The broker.
    #[arg(long, default_value = "127.0.0.1:19092")]
    pub(crate) brokers: String,
    /// Keep the instances' folders here (else removed at the end).
    #[arg(long, value_name = "DIR")]
    pub(crate) keep: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            runs: 3,
            warmup: 20_000,
            records: 300_000,
            paced: 2_000,
            rate: 1_000,
            instances: vec![1, 3],
            partitions: 6,
            brokers: "127.0.0.1:19092".to_owned(),
            keep: None,
        }
    }
}

/// Runs the comparison and prints its table; false when a side could not run or a
/// result was wrong.
pub(crate) fn versus_kafka_streams(root: &Path, options: &Options) -> bool {
    match versus(root, options) {
        Ok(ok) => ok,
        Err(error) => {
            eprintln!("mongoose-bench: versus-kafka-streams: {error}");
            false
        }
    }
}

fn versus(root: &Path, options: &Options) -> Result<bool, String> {
    if cfg!(debug_assertions) {
        // `cargo mongoose-bench` is a debug build, its librdkafka compiled without
        // optimisation: its producer would set the pace of the faster side. The harness
        // runs as a release build (its dependencies are mostly those of the release
        // `mongoose`)
        eprintln!("mongoose-bench: versus-kafka-streams runs as a release build of mongoose-bench");
        return Ok(crate::run(
            std::process::Command::new(env!("CARGO"))
                .current_dir(root)
                .args(["run", "--release", "--quiet", "-p", "mongoose-bench", "--"])
                // this command line as it was given: `versus-kafka-streams` and its options
                .args(std::env::args_os().skip(1)),
        ));
    }
    let first = options.brokers.split(',').next().unwrap_or_default();
    if mongoose_testkit::kafka::metadata_brokers(first).is_none()
        && !crate::xtask(root, &["broker", "start"])
    {
        return Err(format!(
            "no broker answers on {first} and none could be started"
        ));
    }
    let mongoose = crate::versus::build_mongoose(root)?;
    let plugins = root.join("target").join("plugins");
    if !crate::plugins(root, &plugins) {
        return Err("`cargo xtask plugins` failed".to_owned());
    }
    let programs = Programs {
        mongoose,
        kafka_plugin: plugins.join("libkafka_plugin.so"),
        java: mongoose_testkit::kafka::java(),
        classpath: build_peer(root)?,
    };
    let work = options
        .keep
        .clone()
        .unwrap_or_else(|| root.join("target").join("versus-kafka-streams"));
    let mut series: Vec<Series> = Vec::new();
    for count in &options.instances {
        for side in [Side::Ours, Side::Theirs] {
            series.push(Series {
                side,
                count: *count,
                runs: Vec::new(),
            });
        }
    }
    for run in 1..=options.runs {
        for count in &options.instances {
            let order = if run % 2 == 1 {
                [Side::Ours, Side::Theirs]
            } else {
                [Side::Theirs, Side::Ours]
            };
            for side in order {
                eprintln!(
                    "mongoose-bench: run {run}: {} with {count} instance(s)",
                    side.name()
                );
                let result = runs::run_side(side, *count, options, &programs, &work);
                match &result {
                    Ok(measured) => eprintln!(
                        "mongoose-bench: run {run}: {} x{count}: {:.0} records/s ({:.2} s; produced before, in {:.2} s; {:.1} us CPU/record), seen p50/p99 {:?} ms, RSS {} MiB, {}",
                        side.name(),
                        measured.rate,
                        measured.seconds,
                        measured.produced,
                        measured.cpu_us,
                        measured.seen,
                        measured.rss_kib / 1024,
                        if measured.checked.passed() {
                            format!(
                                "checked: {} alerts written of {} ({} duplicates)",
                                measured.checked.alerts_written,
                                measured.checked.truth_alerts,
                                measured.checked.duplicates
                            )
                        } else {
                            measured.checked.problems()
                        }
                    ),
                    Err(error) => eprintln!("mongoose-bench: run {run}: {} x{count}: FAILED: {error}", side.name()),
                }
                if let Some(one) = series
                    .iter_mut()
                    .find(|one| one.side == side && one.count == *count)
                {
                    one.runs.push(result);
                }
            }
        }
    }
    print!("{}", report(&series, options));
    if options.keep.is_none() {
        let _ = std::fs::remove_dir_all(&work);
    } else {
        println!("kept: {}", work.display());
    }
    Ok(series.iter().all(Series::passed))
}
