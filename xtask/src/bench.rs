//! `cargo xtask bench [--versus-rsyslog] [ARGS...]`: the whole-pipeline benchmarks in
//! release mode, one after the other so they do not compete for cores, then the
//! criterion benches (`--quick`), the instructions per line under callgrind, and with
//! `--versus-rsyslog` the comparison with rsyslog, syslog-ng and `dd`.
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
    eprintln!("xtask: running {command:?}");
    match command.stderr(Stdio::inherit()).output() {
        Ok(output) => {
            let text = String::from_utf8_lossy(&output.stdout);
            print!("{text}");
            kept.push_str(&text);
            output.status.success()
        }
        Err(error) => {
            eprintln!("xtask: could not start {command:?}: {error}");
            false
        }
    }
}

pub(crate) fn bench(root: &Path, arguments: &[String]) -> bool {
    let versus_rsyslog = arguments
        .iter()
        .any(|argument| argument == "--versus-rsyslog");
    let extra: Vec<&String> = arguments
        .iter()
        .filter(|argument| *argument != "--versus-rsyslog")
        .collect();
    let mut printed = String::new();
    // the scale-out bench runs `mongoose` processes with the Kafka plugin
    let built = versus::build_mongoose(root)
        .map_err(|error| eprintln!("xtask: {error}"))
        .is_ok();
    let mut ok = built
        && plugins(&[
            "--out".to_owned(),
            root.join("target").join("plugins").display().to_string(),
        ]);
    for (package, example, arguments) in BENCHES {
        let source = root
            .join(package)
            .join("examples")
            .join(format!("{example}.rs"));
        if !source.exists() {
            eprintln!("xtask: skipping {package}/{example}: not built yet");
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
            .args(&extra);
        ok &= run_kept(&mut command, &mut printed);
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
    let mut callgrind = Command::new(env!("CARGO"));
    callgrind
        .current_dir(root)
        .args(["run", "--quiet", "-p", "xtask", "--", "callgrind"]);
    ok &= run_kept(&mut callgrind, &mut printed);
    if versus_rsyslog {
        let mut versus = Command::new(env!("CARGO"));
        versus
            .current_dir(root)
            .args(["run", "--quiet", "-p", "xtask", "--", "versus-rsyslog"]);
        ok &= run_kept(&mut versus, &mut printed);
    }
    println!("\nthe sink path at disk speed (issue 29), each goal as measured above:");
    for line in goal_lines(&printed) {
        println!("  {line}");
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::goal_lines;

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
