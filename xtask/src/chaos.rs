//! `cargo xtask chaos [ARGS]`: builds the release `mongoose` binary (with its `kafka`
//! feature: the `kafka` family's ledgers keep their state in a changelog topic), the
//! journal, archive and Kafka plugins (into `target/chaos-plugins`) and the
//! `mongoose-chaos` harness, then runs the harness. Without arguments it runs the fixed
//! CI set (`ci`); `--minutes N` runs random seeds for N minutes (`soak`); `--seed S`
//! runs one seed;
//! anything else is passed to `mongoose-chaos` as it is (`run --schedule FILE`,
//! `minimise --seed S`, `show --seed S`).
//!
//! The `kafka` family runs a broker of the harness's own from Apache Kafka's jars, found
//! the way the tests find them (`mongoose_testkit::kafka::cached_classpath`;
//! `cargo xtask broker start` resolves them once): without them its seeds are skipped,
//! or fail when `MONGOOSE_REQUIRE_BROKER` is set (CI sets it).

use std::path::Path;
use std::process::Command;

use crate::run;

/// The plugins the chaos scenarios load.
const PLUGINS: &[&str] = &["journal-plugin", "archive-plugin", "kafka-plugin"];

/// The options of `cargo xtask chaos`: the harness's own command line, shortened.
#[derive(Debug, Default, PartialEq, Eq, clap::Args)]
pub(crate) struct ChaosOptions {
    /// Passed to mongoose-chaos. None: the fixed CI set (`ci`). Starting with a flag:
    /// `soak` when `--minutes N` is among them, else `run` (`--seed S`, `--family F`).
    /// Otherwise as they are: `run --schedule FILE`, `show --seed S`, `minimise --seed
    /// S --out FILE`, `soak --minutes N --minimise`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub(crate) harness: Vec<String>,
}

/// The harness's command line for `given`, the arguments after `cargo xtask chaos`.
fn harness_arguments(given: &[String]) -> Vec<String> {
    match given.first().map(String::as_str) {
        None => vec!["ci".to_owned()],
        Some(flag) if flag.starts_with("--") => {
            let command = if given.iter().any(|argument| argument == "--minutes") {
                "soak"
            } else {
                "run"
            };
            std::iter::once(command.to_owned())
                .chain(given.iter().cloned())
                .collect()
        }
        Some(_) => given.to_vec(),
    }
}

/// Builds what the harness runs and runs it; false when a build or a seed failed.
pub(crate) fn chaos(root: &Path, options: &ChaosOptions) -> bool {
    let mut build = Command::new(env!("CARGO"));
    build.current_dir(root).args([
        "build",
        "--release",
        "-p",
        "mongoose",
        "--bin",
        "mongoose",
        "-p",
        "mongoose-chaos",
        "--bin",
        "mongoose-chaos",
        // the plugins are libraries: without `--lib` the `--bin` filters above leave
        // them unbuilt (a stale copy, or none in a fresh clone, was then loaded)
        "--lib",
        // the default features: the `kafka` family's ledgers keep their state in a
        // changelog topic (the binary's `kafka` feature). librdkafka's cmake build is
        // paid for by the Kafka plugin and the harness's broker client anyway (the
        // family adds about 215 CPU-seconds to a cold build, 440 -> 655); the feature
        // itself adds about 3 (linking librdkafka into the binary): measured on
        // 2 shared cores, docs/src/crashes/chaos.md
    ]);
    for plugin in PLUGINS {
        build.args(["-p", plugin]);
    }
    if !run(&mut build) {
        return false;
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let plugin_dir = target.join("chaos-plugins");
    if let Err(error) = std::fs::create_dir_all(&plugin_dir) {
        eprintln!("xtask: cannot create {}: {error}", plugin_dir.display());
        return false;
    }
    for plugin in PLUGINS {
        let file = format!("lib{}.so", plugin.replace('-', "_"));
        let temporary = plugin_dir.join(format!(".{file}.tmp"));
        let copied = std::fs::copy(target.join("release").join(&file), &temporary)
            .and_then(|_| std::fs::rename(&temporary, plugin_dir.join(&file)));
        if let Err(error) = copied {
            eprintln!(
                "xtask: cannot copy {file} into {}: {error}",
                plugin_dir.display()
            );
            return false;
        }
    }
    // `--minutes N [--family F]` soaks, `--seed N [--family F]` runs; anything else
    // is the harness's own command line
    let passed = harness_arguments(&options.harness);
    if mongoose_testkit::kafka::cached_classpath().is_none() {
        eprintln!(
            "xtask: Apache Kafka's jars are not resolved: the kafka family's seeds are skipped ({}); `cargo xtask broker start` resolves them once (Java 17 and Maven), then `cargo xtask broker stop`",
            if std::env::var_os("MONGOOSE_REQUIRE_BROKER").is_some() {
                "failed: MONGOOSE_REQUIRE_BROKER is set"
            } else {
                "set MONGOOSE_REQUIRE_BROKER to fail them"
            }
        );
    }
    let mut harness = Command::new(target.join("release").join("mongoose-chaos"));
    harness
        .current_dir(root)
        .arg("--bin-dir")
        .arg(target.join("release"))
        .arg("--plugin-dir")
        .arg(&plugin_dir)
        .arg("--work")
        .arg(target.join("chaos"))
        .args(&passed);
    run(&mut harness)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::harness_arguments;

    /// The harness's arguments `cargo xtask LINE` gives.
    fn passed(line: &str) -> Vec<String> {
        match crate::Cli::try_parse_from(line.split_whitespace()).map(|cli| cli.task) {
            Ok(crate::Task::Chaos(options)) => harness_arguments(&options.harness),
            other => panic!("{line} parsed as {other:?}"),
        }
    }

    #[test]
    fn chaos_runs_the_ci_set_soaks_with_minutes_runs_a_seed_and_passes_the_rest() {
        assert_eq!(passed("xtask chaos"), ["ci"]);
        assert_eq!(
            passed("xtask chaos --minutes 30 --family reload"),
            ["soak", "--minutes", "30", "--family", "reload"]
        );
        assert_eq!(
            passed("xtask chaos --seed 53 --family mixed-consumers"),
            ["run", "--seed", "53", "--family", "mixed-consumers"]
        );
        assert_eq!(
            passed("xtask chaos soak --minutes 30 --family kafka --minimise"),
            ["soak", "--minutes", "30", "--family", "kafka", "--minimise"]
        );
        assert_eq!(
            passed("xtask chaos show --seed 1007"),
            ["show", "--seed", "1007"]
        );
    }
}
