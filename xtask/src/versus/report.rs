//! The report: medians of the runs and the table that compares the two sides.

use std::fmt::Write as _;

use super::runs::{Measured, RunResult};
use super::{VersusOptions, MIB};

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
pub(super) fn thousands(value: f64) -> String {
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

pub(super) fn report(ours: &[RunResult], theirs: &[RunResult], options: &VersusOptions) -> String {
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
