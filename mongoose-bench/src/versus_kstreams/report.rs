//! The table: medians over the runs of each side and instance count, the ratios, the
//! issue's targets, and each side's check.

use std::fmt::Write;

use super::runs::{percentile, Measured};
use super::sides::Side;
use super::Options;

/// The runs of one side with one instance count.
#[derive(Debug)]
pub(super) struct Series {
    /// The side.
    pub(super) side: Side,
    /// Its instance count.
    pub(super) count: usize,
    /// Each run: what it measured, or why it failed.
    pub(super) runs: Vec<Result<Measured, String>>,
}

impl Series {
    fn measured(&self) -> impl Iterator<Item = &Measured> {
        self.runs.iter().filter_map(|run| run.as_ref().ok())
    }

    fn median(&self, value: impl Fn(&Measured) -> Option<f64>) -> Option<f64> {
        let mut values: Vec<f64> = self.measured().filter_map(value).collect();
        percentile(&mut values, 50.0)
    }

    /// The median records/s.
    pub(super) fn rate(&self) -> Option<f64> {
        self.median(|run| Some(run.rate))
    }

    /// Whether every run ran and passed its check.
    pub(super) fn passed(&self) -> bool {
        self.runs
            .iter()
            .all(|run| run.as_ref().is_ok_and(|run| run.checked.passed()))
    }
}

fn figure(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_owned(), |value| format!("{value:.decimals$}"))
}

/// The report of `series` (ours and theirs for each instance count).
pub(super) fn report(series: &[Series], options: &Options) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nversus-kafka-streams: {} warm-up + {} timed + {} paced ({} records/s) records per run, {} partitions, medians over {} run(s)",
        options.warmup, options.records, options.paced, options.rate, options.partitions, options.runs
    );
    let _ = writeln!(
        out,
        "{:<14} {:>4} {:>11} {:>11} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>22}  check",
        "side",
        "inst",
        "records/s",
        "CPU us/rec",
        "formed s",
        "app p50",
        "app p99",
        "seen p50",
        "seen p99",
        "RSS MiB",
        "alerts written/truth",
    );
    for one in series {
        let duplicates: usize = one.measured().map(|run| run.checked.duplicates).sum();
        let last = one.measured().last();
        let alerts = last.map_or_else(
            || "-".to_owned(),
            |run| {
                format!(
                    "{}/{} (+{duplicates} dup)",
                    run.checked.alerts_written, run.checked.truth_alerts
                )
            },
        );
        let check = if one.passed() {
            "ok".to_owned()
        } else {
            one.runs
                .iter()
                .enumerate()
                .filter_map(|(index, run)| match run {
                    Err(error) => Some(format!("run {}: FAILED: {error}", index + 1)),
                    Ok(run) if !run.checked.passed() => {
                        Some(format!("run {}: {}", index + 1, run.checked.problems()))
                    }
                    Ok(_) => None,
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        let _ = writeln!(
            out,
            "{:<14} {:>4} {:>11} {:>11} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>22}  {check}",
            one.side.name(),
            one.count,
            figure(one.rate(), 0),
            figure(one.median(|run| Some(run.cpu_us)), 1),
            figure(one.median(|run| Some(run.formed)), 1),
            figure(one.median(|run| run.appended.map(|(p50, _)| p50)), 0),
            figure(one.median(|run| run.appended.map(|(_, p99)| p99)), 0),
            figure(one.median(|run| run.seen.map(|(p50, _)| p50)), 0),
            figure(one.median(|run| run.seen.map(|(_, p99)| p99)), 0),
            figure(one.median(|run| Some(run.rss_kib as f64 / 1024.0)), 0),
            alerts,
        );
    }
    let rate = |side: Side, count: usize| {
        series
            .iter()
            .find(|one| one.side == side && one.count == count)
            .and_then(Series::rate)
    };
    let cpu = |side: Side, count: usize| {
        series
            .iter()
            .find(|one| one.side == side && one.count == count)
            .and_then(|one| one.median(|run| Some(run.cpu_us)))
    };
    let mut counts: Vec<usize> = series.iter().map(|one| one.count).collect();
    counts.dedup();
    for count in &counts {
        if let (Some(ours), Some(theirs)) = (rate(Side::Ours, *count), rate(Side::Theirs, *count)) {
            let ratio = ours / theirs;
            let cpu_ratio = cpu(Side::Theirs, *count)
                .zip(cpu(Side::Ours, *count))
                .map_or_else(String::new, |(theirs, ours)| {
                    format!(
                        "; theirs spends {:.1}x ours' CPU time per record",
                        theirs / ours
                    )
                });
            let _ = writeln!(
                out,
                "ours/theirs at {count} instance(s): {ratio:.2}x records/s (target >= 2x: {}){cpu_ratio}",
                if ratio >= 2.0 { "met" } else { "NOT met" }
            );
        }
    }
    for side in [Side::Ours, Side::Theirs] {
        if let (Some(one), Some(three)) = (rate(side, 1), rate(side, 3)) {
            let scaling = three / one;
            let target = if side == Side::Ours {
                format!(
                    " (target >= 2.5x: {})",
                    if scaling >= 2.5 { "met" } else { "NOT met" }
                )
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "{}: 3 instances / 1 = {scaling:.2}x records/s{target}",
                side.name()
            );
        }
    }
    let _ = writeln!(
        out,
        "records/s: the throughput phase's records (produced before the clock ran, the instances stopped with SIGSTOP meanwhile, after the group formed on the empty topic and the warm-up records were committed) over the time from the instances' SIGCONT to every record committed by the group (ours: the consumer group; theirs: the application's); CPU us/rec: the instances' user + system CPU time in that phase per record (/proc/<pid>/stat, summed over the instances; it holds when other work shares the machine);\n\
         app p50/p99 (ms): in the paced phase, an alert's broker append time minus its input record's (LogAppendTime on both topics); seen p50/p99 (ms): when a read_committed consumer received the alert minus its input record's append time (a transaction's alerts are seen once it commits);\n\
         RSS: VmHWM summed over the instances, read just before SIGTERM; alerts: records in the alerts topic (read_committed) / alerts of the truth, with the extra copies over all runs (both write them in transactions, exactly once as a read_committed reader sees them; a duplicate is reported, not failed);\n\
         check: every account's balance in the side's final state (ours: its changelog folded; theirs: its store's changelog) and its rejected count equal the truth computed from the input topic, no alert missing, none invented"
    );
    out
}
