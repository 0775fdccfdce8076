//! The report: medians of the runs and the table that compares the sides.

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
            "{name:<18} {:>10.1} {:>14} {:>16.1}",
            medians.mib_per_second,
            thousands(medians.lines_per_second),
            medians.peak_rss_mib
        ),
        None => {
            let reason = runs
                .iter()
                .find_map(|run| run.as_ref().err())
                .map_or("no run", String::as_str);
            format!("{name:<18} not available ({reason})")
        }
    }
}

/// One side of the comparison: its name and its runs, in order.
pub(super) struct Side {
    pub(super) name: &'static str,
    pub(super) runs: Vec<RunResult>,
}

/// The report: a row of medians per side (ours first), the ratios of ours to each other
/// side, every run, and what the sides promise.
pub(super) fn report(sides: &[Side], options: &VersusOptions) -> String {
    let mut out = String::new();
    let input_mib = options.input_bytes() as f64 / MIB as f64;
    let names: Vec<&str> = sides.iter().map(|side| side.name).collect();
    let _ = writeln!(
        out,
        "\nversus {}: {input_mib:.0} MiB, {} lines of {} bytes tailed into a file, {} alternating runs each (medians)",
        names[1..].join(", "),
        thousands(options.lines() as f64),
        options.line_bytes,
        options.runs
    );
    let _ = writeln!(
        out,
        "{:<18} {:>10} {:>14} {:>16}",
        "", "MiB/s", "lines/s", "peak RSS MiB"
    );
    for side in sides {
        let _ = writeln!(out, "{}", side_row(side.name, &side.runs, options));
    }
    let Some((ours, others)) = sides.split_first() else {
        return out;
    };
    for other in others {
        let label = format!("{}/{}", ours.name, other.name);
        match (medians(&ours.runs, options), medians(&other.runs, options)) {
            (Some(ours), Some(theirs)) => {
                let _ = writeln!(
                    out,
                    "{label:<18} {:>9.2}x {:>13.2}x {:>15.2}x",
                    ours.mib_per_second / theirs.mib_per_second,
                    ours.lines_per_second / theirs.lines_per_second,
                    ours.peak_rss_mib / theirs.peak_rss_mib
                );
            }
            _ => {
                let _ = writeln!(out, "{label:<18} n/a");
            }
        }
    }
    let _ = writeln!(out, "{}", goal_line(sides, options));
    let _ = writeln!(out, "per run:");
    for run in 0..options.runs {
        for side in sides {
            let line = match side.runs.get(run) {
                Some(Ok(measured)) => format!(
                    "{:.2} s, {:.1} MiB/s, {} lines/s, peak RSS {:.1} MiB, output identical to the input",
                    measured.seconds,
                    input_mib / measured.seconds,
                    thousands(options.lines() as f64 / measured.seconds),
                    measured.peak_rss_bytes as f64 / MIB as f64
                ),
                Some(Err(reason)) => format!("not available ({reason})"),
                None => "not run".to_owned(),
            };
            let _ = writeln!(out, "  run {} {:<10} {line}", run + 1, side.name);
        }
    }
    let _ = writeln!(
        out,
        "not the same promise: rsyslog and syslog-ng save their read position when they read a line (a\n\
         crash can lose lines read but not yet written, and their file outputs do not fsync); ours commits\n\
         a line's position only after its output is durable. Their time ends at the 100 ms poll that sees\n\
         their last line; ours at the exit of `mongoose run --exit-when-settled` (start-up and shutdown\n\
         included). dd copies the same bytes with `oflag=dsync bs=1M`: the disk's synchronous write rate."
    );
    out
}

/// MiB/s of each run of a side (`None`: the run has no figure).
fn speeds(runs: &[RunResult], options: &VersusOptions) -> Vec<Option<f64>> {
    let input_mib = options.input_bytes() as f64 / MIB as f64;
    runs.iter()
        .map(|run| run.as_ref().ok().map(|run| input_mib / run.seconds))
        .collect()
}

/// `median (min-max)` of some figures, each printed by `show`.
fn spread(values: &[f64], show: impl Fn(f64) -> String) -> String {
    let Some(middle) = median(values) else {
        return "n/a".to_owned();
    };
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{} ({}-{})", show(middle), show(low), show(high))
}

/// The goal 1 in one line: ours in MiB/s, and the ratio of ours to rsyslog
/// and to `dd` taken run by run (each pair ran back to back), as medians with their
/// ranges; ours' largest peak RSS.
pub(super) fn goal_line(sides: &[Side], options: &VersusOptions) -> String {
    let by_name = |name: &str| sides.iter().find(|side| side.name == name);
    let Some(ours) = by_name("ours") else {
        return "durable forward: ours did not run".to_owned();
    };
    let our_speeds = speeds(&ours.runs, options);
    let ratios = |other: &str| -> Vec<f64> {
        let Some(other) = by_name(other) else {
            return Vec::new();
        };
        our_speeds
            .iter()
            .zip(speeds(&other.runs, options))
            .filter_map(|(ours, theirs)| Some(ours.as_ref()? / theirs?))
            .collect()
    };
    let measured: Vec<f64> = our_speeds.iter().flatten().copied().collect();
    let rsyslog = ratios("rsyslog");
    let dd = ratios("dd-dsync");
    let peak_rss_mb = ours
        .runs
        .iter()
        .filter_map(|run| run.as_ref().ok())
        .map(|run| run.peak_rss_bytes as f64 / 1e6)
        .fold(0.0, f64::max);
    let verdict = |values: &[f64], goal: f64| match median(values) {
        Some(value) if value >= goal => "met",
        Some(_) => "not met",
        None => "not measured",
    };
    format!(
        "durable forward: ours {} MiB/s; ours/rsyslog {} (goal 8x: {}); ours/dd {} (goal 80%: {}); peak RSS {peak_rss_mb:.1} MB (goal under 50 MB: {})",
        spread(&measured, |value| format!("{value:.1}")),
        spread(&rsyslog, |value| format!("{value:.2}x")),
        verdict(&rsyslog, 8.0),
        spread(&dd, |value| format!("{:.0}%", value * 100.0)),
        verdict(&dd, 0.8),
        if measured.is_empty() {
            "not measured"
        } else if peak_rss_mb < 50.0 {
            "met"
        } else {
            "not met"
        }
    )
}
