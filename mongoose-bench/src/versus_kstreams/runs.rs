//! One measured run of one side with N instances: fresh topics and group, the group
//! formed on the empty topic, the throughput phase, the paced phase, the stop, and the
//! check of the final state and alerts against the truth.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use super::kafka::{self, Live};
use super::sides::{our_changelog, their_changelog, Instance, Names, Programs, Side};
use super::truth::{check, record_of, Checked, Truth};
use super::Options;

/// How long the instances have to form their group.
const FORM_DEADLINE: Duration = Duration::from_secs(180);

/// How long a phase may take before the run is given up.
const PHASE_DEADLINE: Duration = Duration::from_secs(300);

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub(super) struct Measured {
    /// Records per second of the throughput phase: its records (produced before, while
    /// the instances were stopped) over the time from the instances' continuing to
    /// every record committed by the group.
    pub(super) rate: f64,
    /// CPU time the instances used in the throughput phase per record, in µs (user +
    /// system, summed over the instances): what a record costs, whatever else the
    /// machine runs.
    pub(super) cpu_us: f64,
    /// Seconds the producer took to have every record of the throughput phase
    /// acknowledged, before the clock ran (the instances stopped meanwhile).
    pub(super) produced: f64,
    /// Seconds the throughput phase took.
    pub(super) seconds: f64,
    /// Seconds the instances took to form their group (start to every member in).
    pub(super) formed: f64,
    /// Latency percentiles of the paced phase, in ms: `(p50, p99)` of an alert's
    /// broker append time minus its input record's.
    pub(super) appended: Option<(f64, f64)>,
    /// `(p50, p99)` of the time a `read_committed` consumer received the alert minus
    /// its input record's append time.
    pub(super) seen: Option<(f64, f64)>,
    /// Alerts of the paced phase timed.
    pub(super) timed: usize,
    /// Each input partition's end after the throughput phase: the paced phase's
    /// records are the ones at or past it.
    pub(super) paced_from: Vec<i64>,
    /// Peak RSS summed over the instances, in KiB.
    pub(super) rss_kib: u64,
    /// The check against the truth.
    pub(super) checked: Checked,
}

/// The `p`-th percentile (0..=100) of `values`, nearest rank.
pub(super) fn percentile(values: &mut [f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * values.len() as f64).ceil() as usize;
    Some(values[rank.clamp(1, values.len()) - 1])
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id(), kafka::now_millis())
}

/// Runs `side` with `count` instances once.
pub(super) fn run_side(
    side: Side,
    count: usize,
    options: &Options,
    programs: &Programs,
    work: &Path,
) -> Result<Measured, String> {
    let brokers = options.brokers.as_str();
    let base = unique(&format!("versus-{}-{count}", side.name()));
    let names = Names {
        input: format!("{base}-in"),
        alerts: format!("{base}-alerts"),
        group: format!("{base}-app"),
    };
    kafka::create_topic(brokers, &names.input, options.partitions)?;
    kafka::create_topic(brokers, &names.alerts, options.partitions)?;
    let watcher = kafka::watcher(brokers, &names.group)?;
    let work = work.join(&base);
    let mut instances = Vec::new();
    for index in 0..count {
        instances.push(Instance::start(
            side, programs, brokers, &names, &work, index,
        )?);
    }
    let result = measure(side, count, options, &names, &watcher, &mut instances);
    let mut rss_kib = 0;
    let mut stopped = Ok(());
    for instance in instances {
        rss_kib += instance.peak_rss_kib().unwrap_or(0);
        if let Err(error) = instance.stop() {
            stopped = Err(error);
        }
    }
    let (mut measured, live) = result?;
    stopped?;
    measured.rss_kib = rss_kib;
    let seen = live.finish()?;
    check_side(side, options, &names, &mut measured, &seen)?;
    Ok(measured)
}

/// Forms the group, then the two phases; the instances still run after it.
fn measure(
    side: Side,
    count: usize,
    options: &Options,
    names: &Names,
    watcher: &rdkafka::consumer::BaseConsumer,
    instances: &mut [Instance],
) -> Result<(Measured, Live), String> {
    let brokers = options.brokers.as_str();
    let alive = |instances: &mut [Instance]| -> Result<(), String> {
        instances.iter_mut().try_for_each(Instance::alive)
    };
    // the group forms on the empty topic (every member in, the rebalances over): the
    // clock then measures processing, not the JVM's or the group's start
    let started = Instant::now();
    loop {
        alive(instances)?;
        if matches!(kafka::group_state(watcher, &names.group), Some((state, members)) if state == "Stable" && members == count)
        {
            break;
        }
        if started.elapsed() > FORM_DEADLINE {
            return Err(format!(
                "{} instance(s) of {} did not form group {} within {} s",
                count,
                side.name(),
                names.group,
                FORM_DEADLINE.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let formed = started.elapsed().as_secs_f64();
    // the warm-up: records processed before the clock runs (the JVM compiles its hot
    // paths; our allocator and the connections settle)
    if options.warmup > 0 {
        kafka::produce(brokers, &names.input, 0..options.warmup, None)?;
        wait_committed(watcher, names, options, options.warmup, instances)?;
    }
    let (first, records) = (options.warmup, options.records);
    let cpu = |instances: &[Instance]| -> f64 {
        instances.iter().filter_map(Instance::cpu_seconds).sum()
    };
    // the records are produced before the clock runs, the instances stopped meanwhile
    // (SIGSTOP, well within their sessions: the producer takes a few seconds at most),
    // so the producer cannot set the pace of the faster side (issue 41, item 4)
    for instance in instances.iter() {
        instance.signal(libc::SIGSTOP);
    }
    let producing = Instant::now();
    let produced = kafka::produce(brokers, &names.input, first..first + records, None)
        .map(|()| producing.elapsed().as_secs_f64());
    let cpu_before = cpu(instances);
    let clock = Instant::now();
    for instance in instances.iter() {
        instance.signal(libc::SIGCONT);
    }
    let produced = produced?;
    wait_committed(watcher, names, options, first + records, instances)?;
    let seconds = clock.elapsed().as_secs_f64();
    let cpu_us = (cpu(instances) - cpu_before) * 1e6 / records as f64;
    let paced_from = kafka::ends(brokers, &names.input, options.partitions)?;
    // the paced phase: alerts watched live from the end of what is there now
    let from = kafka::ends(brokers, &names.alerts, options.partitions)?;
    let live = Live::start(brokers, &names.alerts, &from)?;
    // the watcher connects and fetches before the first paced record goes out
    std::thread::sleep(Duration::from_millis(500));
    let total = first + records + options.paced;
    kafka::produce(
        brokers,
        &names.input,
        first + records..total,
        Some(options.rate),
    )?;
    wait_committed(watcher, names, options, total, instances)?;
    Ok((
        Measured {
            rate: records as f64 / seconds,
            cpu_us,
            seconds,
            produced,
            formed,
            paced_from,
            ..Measured::default()
        },
        live,
    ))
}

fn wait_committed(
    watcher: &rdkafka::consumer::BaseConsumer,
    names: &Names,
    options: &Options,
    total: u64,
    instances: &mut [Instance],
) -> Result<(), String> {
    let started = Instant::now();
    while kafka::committed(watcher, &names.input, options.partitions) < total as i64 {
        instances.iter_mut().try_for_each(Instance::alive)?;
        if started.elapsed() > PHASE_DEADLINE {
            return Err(format!(
                "group {} did not commit {total} records within {} s",
                names.group,
                PHASE_DEADLINE.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Reads the input back (the truth), the side's final state and its alerts, and
/// checks them; times the paced phase's alerts.
fn check_side(
    side: Side,
    options: &Options,
    names: &Names,
    measured: &mut Measured,
    seen: &[kafka::Seen],
) -> Result<(), String> {
    let brokers = options.brokers.as_str();
    let input = kafka::read_topic(brokers, &names.input, options.partitions, false)?;
    let produced: usize = input.iter().map(Vec::len).sum();
    let total = options.warmup + options.records + options.paced;
    if produced as u64 != total {
        return Err(format!(
            "the input topic {} holds {produced} records, not {total}",
            names.input
        ));
    }
    let truth = Truth::of(input.iter().enumerate().map(|(partition, records)| {
        (
            partition as i32,
            records
                .iter()
                .map(|read| (read.offset, read.value.as_deref().unwrap_or_default())),
        )
    }));
    let (balances, rejected) = match side {
        Side::Ours => our_state(options, names)?,
        Side::Theirs => their_state(options, names)?,
    };
    let alerts = kafka::read_topic(brokers, &names.alerts, options.partitions, true)?;
    let texts: Vec<String> = alerts
        .iter()
        .flatten()
        .map(|read| String::from_utf8_lossy(read.value.as_deref().unwrap_or_default()).into_owned())
        .collect();
    measured.checked = check(&truth, &balances, rejected, &texts);
    // the paced phase's input records (each partition's past its end after the
    // throughput phase) and their append times
    let mut appended_at: HashMap<(i32, i64), i64> = HashMap::new();
    for (partition, records) in input.iter().enumerate() {
        let from = measured
            .paced_from
            .get(partition)
            .copied()
            .unwrap_or(i64::MAX);
        for read in records.iter().filter(|read| read.offset >= from) {
            if let Some(timestamp) = read.timestamp {
                appended_at.insert((partition as i32, read.offset), timestamp);
            }
        }
    }
    let mut appended = Vec::new();
    let mut timed_once = std::collections::HashSet::new();
    for read in alerts.iter().flatten() {
        let text = String::from_utf8_lossy(read.value.as_deref().unwrap_or_default());
        if let (Some(input), Some(timestamp)) = (record_of(&text), read.timestamp) {
            if let Some(input_at) = appended_at.get(&input) {
                if timed_once.insert(input) {
                    appended.push((timestamp - input_at) as f64);
                }
            }
        }
    }
    let mut arrived = Vec::new();
    let mut arrived_once = std::collections::HashSet::new();
    for (text, at) in seen {
        if let Some(input) = record_of(text) {
            if let Some(input_at) = appended_at.get(&input) {
                if arrived_once.insert(input) {
                    arrived.push((at - input_at) as f64);
                }
            }
        }
    }
    measured.timed = appended.len();
    measured.appended = percentile(&mut appended, 50.0).zip(percentile(&mut appended, 99.0));
    measured.seen = percentile(&mut arrived, 50.0).zip(percentile(&mut arrived, 99.0));
    Ok(())
}

/// Ours' final state: its changelog folded per partition (`mongoose_kafka::changelog`,
/// `mongoose_ledger::partition_state`), the balances summed, the rejected count.
fn our_state(
    options: &Options,
    names: &Names,
) -> Result<(BTreeMap<String, i64>, Option<u64>), String> {
    let store = mongoose_kafka::changelog::Changelog::open(
        mongoose_kafka::changelog::ChangelogConfig::new(
            "versus-check",
            &options.brokers,
            &our_changelog(names),
        ),
        &names.input,
        std::sync::Arc::new(|_, _| {}),
    )
    .map_err(|error| format!("our changelog: {error}"))?;
    let mut balances = BTreeMap::new();
    let mut rejected = 0;
    for partition in 0..options.partitions {
        let records = store
            .read(partition)
            .map_err(|error| format!("our changelog partition {partition}: {error}"))?;
        let restored = mongoose_kafka::changelog::fold(&records, |_| {});
        let state = mongoose_ledger::partition_state(&restored)
            .map_err(|error| format!("our changelog partition {partition}: {error}"))?;
        rejected += state.rejected;
        for (account, balance) in state.balances {
            *balances.entry(account).or_insert(0) += balance;
        }
    }
    Ok((balances, Some(rejected)))
}

/// Theirs' final state: the last value of each key of its store's changelog
/// (`read_committed`), the balances summed over partitions, `#rejected` summed.
fn their_state(
    options: &Options,
    names: &Names,
) -> Result<(BTreeMap<String, i64>, Option<u64>), String> {
    let topic = their_changelog(names);
    let partitions = kafka::read_topic(&options.brokers, &topic, options.partitions, true)?;
    let mut balances = BTreeMap::new();
    let mut rejected = 0;
    for records in partitions {
        let mut last: HashMap<Vec<u8>, Option<Vec<u8>>> = HashMap::new();
        for read in records {
            if let Some(key) = read.key {
                last.insert(key, read.value);
            }
        }
        for (key, value) in last {
            let key = String::from_utf8_lossy(&key).into_owned();
            let Some(value) = value else { continue };
            let value: [u8; 8] = value
                .as_slice()
                .try_into()
                .map_err(|_| format!("{topic}: the value of {key} is not a long"))?;
            let value = i64::from_be_bytes(value);
            if key == "#rejected" {
                rejected += value as u64;
            } else {
                *balances.entry(key).or_insert(0) += value;
            }
        }
    }
    Ok((balances, Some(rejected)))
}
