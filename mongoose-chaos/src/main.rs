//! `mongoose-chaos`: runs chaos schedules against the real binaries (see the library's
//! documentation). `cargo xtask chaos` builds the binaries and runs it.
//!
//! ```text
//! mongoose-chaos ci                       the fixed seeds and schedules (CI)
//! mongoose-chaos run --seed 17 [--seed 18] one or more seeds, reported
//! mongoose-chaos run --family reload --seed 17   a seed in a family of your choice
//! mongoose-chaos run --schedule FILE       a schedule file (printed TOML)
//! mongoose-chaos show --seed 17            the schedule of a seed, as TOML
//! mongoose-chaos list --start 0 --count 40  seeds with their family, shape and faults
//! mongoose-chaos soak --minutes 30         random seeds for a while, then a table
//! mongoose-chaos soak --minutes 30 --family kafka   one family's seeds
//! mongoose-chaos minimise --seed 17        drop the steps a failure does not need
//! ```
//!
//! A seed alone runs in its own family (`seed % families`); `--family` runs it in
//! another. A failing run prints the command that replays it and its schedule.
//!
//! Exit codes: 0 every run passed (known holes aside), 1 a run failed, 2 bad usage.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use mongoose_chaos::seeds::{crate_dir, planned, read_schedule, Planned};
use mongoose_chaos::{
    family_of, generate, generate_in, minimise, run_scenario, Binaries, Launcher, Outcome, Scenario,
};

/// The chaos harness of Mongoose-rs.
#[derive(Parser)]
#[command(version)]
struct Cli {
    /// The folder of the `mongoose` binary (default: target/release).
    #[arg(long, global = true)]
    bin_dir: Option<PathBuf>,
    /// The plugin folder (default: target/plugins).
    #[arg(long, global = true)]
    plugin_dir: Option<PathBuf>,
    /// Where the runs' folders go (default: target/chaos).
    #[arg(long, global = true)]
    work: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The fixed set of `seeds.toml`: fails on any failure that is not a known hole.
    Ci,
    /// Runs seeds or schedule files and reports each.
    Run {
        /// A seed (repeatable).
        #[arg(long)]
        seed: Vec<u64>,
        /// The family the seeds run in (default: each seed's own).
        #[arg(long)]
        family: Option<String>,
        /// A schedule file (repeatable).
        #[arg(long)]
        schedule: Vec<PathBuf>,
    },
    /// Lists seeds with their family, workload, source, sink and faults.
    List {
        /// The first seed.
        #[arg(long, default_value_t = 0)]
        start: u64,
        /// How many.
        #[arg(long, default_value_t = 40)]
        count: u64,
    },
    /// Prints a seed's schedule as TOML (what `--schedule` reads).
    Show {
        /// The seed.
        #[arg(long)]
        seed: u64,
        /// Its family (default: the seed's own).
        #[arg(long)]
        family: Option<String>,
    },
    /// Runs random seeds for a while and prints a table.
    Soak {
        /// How long.
        #[arg(long, default_value_t = 10)]
        minutes: u64,
        /// The first seed (default: from the clock).
        #[arg(long)]
        start: Option<u64>,
        /// Only this family: every seed's schedule is made in it.
        #[arg(long)]
        family: Option<String>,
        /// Minimise each failing seed (a run per step of its schedule) and print the
        /// smallest failing schedule.
        #[arg(long)]
        minimise: bool,
    },
    /// Minimises a failing seed or schedule and prints the smallest failing schedule.
    Minimise {
        /// The seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Its family (default: the seed's own).
        #[arg(long)]
        family: Option<String>,
        /// A schedule file.
        #[arg(long)]
        schedule: Option<PathBuf>,
        /// Write the result here too.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    if let Some(code) = mongoose_chaos::peer::run_from_env() {
        return ExitCode::from(code as u8);
    }
    let cli = Cli::parse();
    // the Kafka broker a kafka scenario started ends with the harness
    let _broker = mongoose_chaos::world::kafka::BrokerGuard;
    let root = crate_dir()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let bins = Binaries {
        mongoose: cli
            .bin_dir
            .clone()
            .unwrap_or_else(|| root.join("target/release"))
            .join("mongoose"),
        plugin_dir: cli
            .plugin_dir
            .clone()
            .unwrap_or_else(|| root.join("target/plugins")),
        peer: Launcher {
            program: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("mongoose-chaos")),
            args: Vec::new(),
        },
    };
    let work = cli
        .work
        .clone()
        .unwrap_or_else(|| root.join("target/chaos"));
    if !bins.mongoose.exists() {
        eprintln!(
            "mongoose-chaos: no mongoose binary at {} (build it: cargo build --release -p mongoose, or run cargo xtask chaos)",
            bins.mongoose.display()
        );
        return ExitCode::from(2);
    }
    let ok = match cli.command {
        Command::Ci => ci(&bins, &work),
        Command::Run {
            seed,
            family,
            schedule,
        } => {
            let mut scenarios: Vec<Scenario> = Vec::new();
            for seed in seed {
                match scenario_of(seed, family.as_deref()) {
                    Ok(scenario) => scenarios.push(scenario),
                    Err(error) => {
                        eprintln!("mongoose-chaos: {error}");
                        return ExitCode::from(2);
                    }
                }
            }
            for file in schedule {
                match read_schedule(&file) {
                    Ok(scenario) => scenarios.push(scenario),
                    Err(error) => {
                        eprintln!("mongoose-chaos: {error}");
                        return ExitCode::from(2);
                    }
                }
            }
            let mut ok = true;
            for scenario in scenarios {
                let outcome = run_scenario(&scenario, &bins, &work.join(folder_of(&scenario)));
                print!("{}", outcome.report());
                if !outcome.passed() {
                    print_replay(&scenario);
                }
                ok &= outcome.passed();
            }
            ok
        }
        Command::List { start, count } => {
            for seed in start..start + count {
                let scenario = generate(seed);
                println!(
                    "{seed:<8} {:<16} {:<32} {:>6} lines  {}",
                    family_of(seed),
                    scenario.label(),
                    scenario
                        .steps
                        .iter()
                        .map(|step| match step {
                            mongoose_chaos::scenario::Step::Append { lines, .. } => *lines,
                            _ => 0,
                        })
                        .sum::<u32>(),
                    scenario.fault_families().join(",")
                );
            }
            true
        }
        Command::Show { seed, family } => {
            let scenario = match scenario_of(seed, family.as_deref()) {
                Ok(scenario) => scenario,
                Err(error) => {
                    eprintln!("mongoose-chaos: {error}");
                    return ExitCode::from(2);
                }
            };
            print!(
                "# {}\n{}",
                scenario.describe().replace('\n', "\n# "),
                scenario.to_toml()
            );
            true
        }
        Command::Soak {
            minutes,
            start,
            family,
            minimise,
        } => {
            if let Some(family) = &family {
                if let Err(error) = generate_in(family, 0) {
                    eprintln!("mongoose-chaos: {error}");
                    return ExitCode::from(2);
                }
            }
            soak(&bins, &work, minutes, start, family.as_deref(), minimise)
        }
        Command::Minimise {
            seed,
            family,
            schedule,
            out,
        } => {
            let scenario = match (seed, schedule) {
                (Some(seed), None) => match scenario_of(seed, family.as_deref()) {
                    Ok(scenario) => scenario,
                    Err(error) => {
                        eprintln!("mongoose-chaos: {error}");
                        return ExitCode::from(2);
                    }
                },
                (None, Some(file)) => match read_schedule(&file) {
                    Ok(scenario) => scenario,
                    Err(error) => {
                        eprintln!("mongoose-chaos: {error}");
                        return ExitCode::from(2);
                    }
                },
                _ => {
                    eprintln!("mongoose-chaos: give one of --seed or --schedule");
                    return ExitCode::from(2);
                }
            };
            match minimised(&scenario, &bins, &work.join("minimise")) {
                Some(text) => {
                    if let Some(out) = out {
                        if let Err(error) = std::fs::write(&out, text) {
                            eprintln!("mongoose-chaos: cannot write {}: {error}", out.display());
                        }
                    }
                    false
                }
                None => true,
            }
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn folder_of(scenario: &Scenario) -> String {
    format!("seed-{}", scenario.seed)
}

/// The scenario of `seed`, in `family` when given.
fn scenario_of(seed: u64, family: Option<&str>) -> Result<Scenario, String> {
    match family {
        Some(family) => generate_in(family, seed),
        None => Ok(generate(seed)),
    }
}

/// What a failing run prints: the command that replays it, the one that minimises it,
/// and its schedule (to edit and run with `--schedule FILE`).
fn print_replay(scenario: &Scenario) {
    if !scenario.family.is_empty() {
        println!(
            "--- replay: cargo xtask chaos run --family {family} --seed {seed}\n--- minimise: cargo xtask chaos minimise --family {family} --seed {seed} --out mongoose-chaos/schedules/NAME.toml",
            family = scenario.family,
            seed = scenario.seed
        );
    }
    println!(
        "--- schedule (replay with: cargo xtask chaos run --schedule FILE) ---\n{}",
        scenario.to_toml()
    );
}

/// Minimises a failing `scenario` and prints the smallest failing schedule; its text
/// (`None` when the scenario passed).
fn minimised(scenario: &Scenario, bins: &Binaries, work: &Path) -> Option<String> {
    let (smallest, outcome) = minimise(scenario, bins, work, |line| eprintln!("minimise: {line}"))?;
    print!("{}", outcome.report());
    let text = format!(
        "# minimised from seed {} ({}); fails with: {}\n{}",
        scenario.seed,
        scenario.family,
        outcome
            .failures
            .iter()
            .map(|failure| failure.kind.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        smallest.to_toml()
    );
    println!("--- minimised schedule ---\n{text}");
    Some(text)
}

/// The families of the CI set run alone, after the two lanes: a crash loop judges the
/// progress each kill leaves, which a busy machine slows.
const ALONE: [&str; 2] = ["crash-loop", "crash-loop-progress"];

/// The fixed set: every failure that is not a known hole fails the command. Two lanes
/// run side by side: the `kafka` family's seeds (mostly waiting on the harness's broker:
/// its sessions, restarts and timeouts, 58% of the set's time on 2 cores) and every
/// other family's; then the crash loops alone ([`ALONE`]). Each seed has a folder of
/// its own and the Kafka seeds the harness's one broker, so the lanes share nothing.
fn ci(bins: &Binaries, work: &Path) -> bool {
    let planned = match planned(&crate_dir()) {
        Ok(planned) => planned,
        Err(error) => {
            eprintln!("mongoose-chaos: {error}");
            return false;
        }
    };
    let began = Instant::now();
    let total = planned.len();
    let lane = |family: &dyn Fn(&str) -> bool| -> Vec<(usize, &Planned)> {
        planned
            .iter()
            .enumerate()
            .filter(|(_, plan)| family(&plan.scenario.family))
            .collect()
    };
    let kafka = lane(&|family| family == "kafka");
    let others = lane(&|family| family != "kafka" && !ALONE.contains(&family));
    let alone = lane(&|family| ALONE.contains(&family));
    let run_lane = |plans: Vec<(usize, &Planned)>| -> Vec<(usize, Outcome)> {
        plans
            .into_iter()
            .map(|(index, plan)| {
                let outcome = run_scenario(&plan.scenario, bins, &work.join(format!("ci-{index}")));
                print_ci_line(index, total, plan, &outcome);
                (index, outcome)
            })
            .collect()
    };
    let mut outcomes = std::thread::scope(|scope| {
        let kafka = scope.spawn(|| run_lane(kafka));
        let mut outcomes = run_lane(others);
        outcomes.extend(
            kafka
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
        );
        outcomes
    });
    outcomes.extend(run_lane(alone));
    outcomes.sort_by_key(|(index, _)| *index);

    let mut unexpected = Vec::new();
    let mut still_known = Vec::new();
    let mut now_passing = Vec::new();
    let mut skipped = Vec::new();
    for (index, outcome) in &outcomes {
        let plan = &planned[*index];
        if outcome.skipped.is_some() {
            skipped.push(plan.name.clone());
            continue;
        }
        match (&plan.known, outcome.passed()) {
            (None, false) => {
                print!("{}", outcome.report());
                print_replay(&plan.scenario);
                unexpected.push(plan.name.clone());
            }
            (Some(known), false) => still_known.push(format!("{} ({known})", plan.name)),
            (Some(known), true) => now_passing.push(format!("{} ({known})", plan.name)),
            (None, true) => {}
        }
    }
    println!(
        "\nchaos ci: {} runs in {:.0}s: {} unexpected failures, {} known holes still found, {} known holes not found this time",
        total,
        began.elapsed().as_secs_f64(),
        unexpected.len(),
        still_known.len(),
        now_passing.len()
    );
    for name in &still_known {
        println!("  known hole still open: {name}");
    }
    for name in &now_passing {
        println!("  known hole not found this time (fixed? then drop its `known`): {name}");
    }
    for name in &unexpected {
        println!("  UNEXPECTED failure: {name}");
    }
    for name in &skipped {
        println!("  skipped (no broker): {name}");
    }
    unexpected.is_empty()
}

/// One seed's line of the CI set as it ends (the two lanes interleave; one `print!`
/// per seed keeps each seed's lines together).
fn print_ci_line(index: usize, total: usize, plan: &Planned, outcome: &Outcome) {
    let mut text = format!(
        "[{:>3}/{}] {:<28} {:<18} {:<34} {} ({:.1}s){}\n",
        index + 1,
        total,
        plan.name,
        plan.scenario.family,
        plan.scenario.label(),
        match (&outcome.skipped, outcome.passed()) {
            (Some(_), _) => "SKIPPED",
            (None, true) => "pass",
            (None, false) => "FAIL",
        },
        outcome.elapsed.as_secs_f64(),
        plan.known
            .as_ref()
            .map_or(String::new(), |known| format!(" [known: {known}]"))
    );
    if let Some(why) = &outcome.skipped {
        text.push_str(&format!("      {why}\n"));
    } else if plan.known.is_some() && !outcome.passed() {
        for failure in &outcome.failures {
            text.push_str(&format!("      {failure}\n"));
        }
    }
    print!("{text}");
}

/// A row of the soak's table: runs, failures, failing seeds, what failed.
#[derive(Default)]
struct Row(u32, u32, Vec<u64>, Vec<String>);

/// Random seeds for `minutes`, then the table.
fn soak(
    bins: &Binaries,
    work: &Path,
    minutes: u64,
    start: Option<u64>,
    family: Option<&str>,
    minimise_failures: bool,
) -> bool {
    let mut seed = start.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |elapsed| elapsed.as_secs() * 1000)
    });
    let deadline = Instant::now() + Duration::from_secs(minutes * 60);
    let mut table: BTreeMap<(String, String), Row> = BTreeMap::new();
    let mut total = 0;
    let mut failed = 0;
    while Instant::now() < deadline {
        let scenario = match scenario_of(seed, family) {
            Ok(scenario) => scenario,
            Err(error) => {
                eprintln!("mongoose-chaos: {error}");
                return false;
            }
        };
        let outcome: Outcome = run_scenario(&scenario, bins, &work.join("soak"));
        total += 1;
        let row = table
            .entry((scenario.family.clone(), scenario.label()))
            .or_default();
        row.0 += 1;
        println!(
            "seed {seed:<14} {:<18} {:<34} {} ({:.1}s)",
            scenario.family,
            scenario.label(),
            if outcome.passed() { "pass" } else { "FAIL" },
            outcome.elapsed.as_secs_f64()
        );
        if !outcome.passed() {
            failed += 1;
            row.1 += 1;
            row.2.push(seed);
            for failure in &outcome.failures {
                println!("      {failure}");
                let kind = failure.kind.to_string();
                if !row.3.contains(&kind) {
                    row.3.push(kind);
                }
            }
            // keep the failing folder for a look
            let kept = work.join(format!("failed-{seed}"));
            let _ = std::fs::remove_dir_all(&kept);
            let _ = std::fs::rename(work.join("soak"), &kept);
            println!(
                "      replay: cargo xtask chaos run --family {} --seed {seed}",
                scenario.family
            );
            if minimise_failures {
                minimised(&scenario, bins, &work.join("minimise"));
            }
        }
        seed += 1;
    }
    println!("\n| workload | source -> sink | faults | seeds run | failures | failing seeds | what failed |");
    println!("|---|---|---|---|---|---|---|");
    for ((family, label), Row(runs, failures, seeds, kinds)) in &table {
        let (workload, path) = label.split_once(' ').unwrap_or((label.as_str(), ""));
        let shown: Vec<String> = seeds.iter().take(4).map(u64::to_string).collect();
        println!(
            "| {workload} | {path} | {family} | {runs} | {failures} | {} | {} |",
            shown.join(" "),
            kinds.join(", ")
        );
    }
    println!("\nsoak: {total} seeds in {minutes} min, {failed} failed");
    failed == 0
}
