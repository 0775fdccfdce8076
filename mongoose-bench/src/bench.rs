//! `cargo mongoose-bench all [--versus-rsyslog] [--only EXAMPLE] [ARGS...]`: the
//! whole-pipeline benchmarks in release mode, one after the other so they do not compete
//! for cores, then the criterion benches (`--quick`), the instructions per line under
//! callgrind, and with `--versus-rsyslog` the comparison with rsyslog, syslog-ng and
//! `dd`. ARGS are passed to every whole-pipeline benchmark. `--only EXAMPLE` runs that
//! one whole-pipeline benchmark and nothing else (the release `mongoose` binary and the
//! plugins are built only when it needs them).
//!
//! Each benchmark prints its own figures; the lines that state a goal of the sink path
//! (issue 29) are collected and printed again at the end, together, as the summary:
//! the durable forward against rsyslog and `dd` (goal 1), file -> engine with the
//! defaults against pinned threads (goal 2), one hop against the raw ring and its
//! latency (goal 3), the ledger's group commit (goal 4), and the instructions per line
//! of the source, group and sink threads (goal 5).

use std::path::Path;
use std::process::{Command, Stdio};

use crate::{plugins, run, versus};

/// The options of `cargo mongoose-bench all`.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
pub(crate) struct AllOptions {
    /// Run `versus-rsyslog` with its defaults as a last step.
    #[arg(long)]
    pub(crate) versus_rsyslog: bool,
    /// Run only this whole-pipeline benchmark (an example's name, e.g. pipeline_bench),
    /// without the criterion benches and callgrind.
    #[arg(long, value_name = "EXAMPLE", value_parser = example_name)]
    pub(crate) only: Option<String>,
    /// Passed to every whole-pipeline benchmark.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub(crate) extra: Vec<String>,
}

/// `--only`'s value: the name of one of [`BENCHES`].
fn example_name(text: &str) -> Result<String, String> {
    if BENCHES.iter().any(|(_, example, _)| *example == text) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "no whole-pipeline benchmark is named {text}; they are {}",
            BENCHES
                .iter()
                .map(|(_, example, _)| *example)
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }
}

/// The benchmarks that run `mongoose` processes with the Kafka plugin: the release
/// binary and `target/plugins` are built before them.
const NEEDS_SERVER: &[&str] = &["scale_out_bench"];

/// (package, example, arguments) of each whole-pipeline benchmark, in order.
const BENCHES: &[(&str, &str, &[&str])] = &[
    ("mongoose-delivery", "pipeline_bench", &[]),
    ("mongoose-control", "group_dispatch_bench", &[]),
    ("mongoose-source-file", "file_feed_bench", &[]),
    ("mongoose", "ledger_bench", &[]),
    // issue 40: the aggregate of 3 sums by key over CSV and JSON against the ledger
    ("mongoose", "aggregate_bench", &[]),
    ("mongoose-replay", "replay_bench", &[]),
    // needs the test broker (`cargo xtask broker start`); prints a skip message without it
    ("mongoose-kafka", "kafka_feed_bench", &[]),
    // the same broker, the release `mongoose` binary and the plugins in target/plugins
    // (built first, below): one server vs three in one consumer group
    ("mongoose", "scale_out_bench", &[]),
];

/// (package, criterion bench) run with `--quick` after the pipeline benchmarks.
const CRITERION: &[(&str, &str)] = &[
    ("mongoose-delivery", "one_hop"),
    ("mongoose-control", "control"),
    ("mongoose-replay", "store"),
];

/// How the lines that state a goal begin, in the order of the goals.
const GOAL_LINES: &[(&str, &str)] = &[
    ("1", "durable forward:"),
    ("2", "file -> engine:"),
    ("3", "one hop:"),
    ("3", "latency at 1 M items/s:"),
    ("4", "ledger, fsync'd group commit:"),
    ("5", "instructions per line"),
    ("5", "  source  thread:"),
    ("5", "  group   thread:"),
    ("5", "  sink    thread:"),
    // issue 40's performance goals (ratios to the ledger in one run)
    ("40", "aggregate csv:"),
    ("40", "aggregate json:"),
];

/// The goal lines found in `output`, tagged with their goal.
fn goal_lines(output: &str) -> Vec<String> {
    output
        .lines()
        .filter_map(|line| {
            GOAL_LINES
                .iter()
                .find(|(_, prefix)| line.starts_with(prefix))
                .map(|(goal, _)| format!("goal {goal}: {}", line.trim()))
        })
        .collect()
}

/// Runs `command` with its output shown, keeping what it printed on stdout.
fn run_kept(command: &mut Command, kept: &mut String) -> bool {
    eprintln!("mongoose-bench: running {command:?}");
    match command.stderr(Stdio::inherit()).output() {
        Ok(output) => {
            let text = String::from_utf8_lossy(&output.stdout);
            print!("{text}");
            kept.push_str(&text);
            output.status.success()
        }
        Err(error) => {
            eprintln!("mongoose-bench: could not start {command:?}: {error}");
            false
        }
    }
}

/// Runs the benchmarks `options` ask for; false when one failed.
pub(crate) fn bench(root: &Path, options: &AllOptions) -> bool {
    let selected: Vec<&(&str, &str, &[&str])> = BENCHES
        .iter()
        .filter(|(_, example, _)| options.only.as_deref().is_none_or(|only| only == *example))
        .collect();
    let mut printed = String::new();
    // the scale-out bench runs `mongoose` processes with the Kafka plugin
    let mut ok = true;
    if selected
        .iter()
        .any(|(_, example, _)| NEEDS_SERVER.contains(example))
    {
        ok = versus::build_mongoose(root)
            .map_err(|error| eprintln!("mongoose-bench: {error}"))
            .is_ok()
            && plugins(root, &root.join("target").join("plugins"));
    }
    for (package, example, arguments) in selected {
        let source = root
            .join(package)
            .join("examples")
            .join(format!("{example}.rs"));
        if !source.exists() {
            eprintln!("mongoose-bench: skipping {package}/{example}: not built yet");
            continue;
        }
        let mut command = Command::new(env!("CARGO"));
        command
            .current_dir(root)
            .args([
                "run",
                "--release",
                "--quiet",
                "-p",
                package,
                "--example",
                example,
                "--",
            ])
            .args(*arguments)
            .args(&options.extra);
        ok &= run_kept(&mut command, &mut printed);
    }
    if options.only.is_some() {
        return ok;
    }
    for (package, bench) in CRITERION {
        if !root
            .join(package)
            .join("benches")
            .join(format!("{bench}.rs"))
            .exists()
        {
            continue;
        }
        let mut command = Command::new(env!("CARGO"));
        command
            .current_dir(root)
            .args(["bench", "-p", package, "--bench", bench, "--", "--quick"]);
        ok &= run(&mut command);
    }
    // this program again, its stdout kept for the goal lines
    let Ok(lab) = std::env::current_exe() else {
        eprintln!("mongoose-bench: cannot find its own executable to run callgrind");
        return false;
    };
    ok &= run_kept(
        Command::new(&lab).current_dir(root).arg("callgrind"),
        &mut printed,
    );
    if options.versus_rsyslog {
        ok &= run_kept(
            Command::new(&lab).current_dir(root).arg("versus-rsyslog"),
            &mut printed,
        );
    }
    println!("\nthe sink path at disk speed (issue 29), each goal as measured above:");
    for line in goal_lines(&printed) {
        println!("  {line}");
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::{goal_lines, AllOptions};
    use crate::parse_options;

    fn arguments(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn all_takes_its_flags_first_and_passes_the_rest_to_every_benchmark() {
        let options: AllOptions = parse_options(&[]).expect("no arguments are valid");
        assert_eq!(options, AllOptions::default());
        let options: AllOptions = parse_options(&arguments(
            "--versus-rsyslog --only pipeline_bench 1000 hop",
        ))
        .expect("flags, then the benchmark's arguments");
        assert!(options.versus_rsyslog);
        assert_eq!(options.only.as_deref(), Some("pipeline_bench"));
        assert_eq!(options.extra, ["1000", "hop"]);
        let error = parse_options::<AllOptions>(&arguments("--only pipeline"))
            .expect_err("no benchmark is named pipeline");
        assert!(error.to_string().contains("pipeline_bench"), "{error}");
    }

    #[test]
    fn the_summary_keeps_the_goal_lines_in_the_order_printed() {
        let printed = "noise\none hop: 95.1 M events/s = 51% of the raw ring (186.0 M)\n\
                       durable forward: 250 MiB/s = 8.1x rsyslog\nother\n  sink    thread:      682\n";
        assert_eq!(
            goal_lines(printed),
            vec![
                "goal 3: one hop: 95.1 M events/s = 51% of the raw ring (186.0 M)".to_owned(),
                "goal 1: durable forward: 250 MiB/s = 8.1x rsyslog".to_owned(),
                "goal 5: sink    thread:      682".to_owned(),
            ]
        );
    }
}
