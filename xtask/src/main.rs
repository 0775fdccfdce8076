//! `cargo xtask`: the task runner (issue 42: tasks only, parsed with clap, no librdkafka;
//! the benchmarks are `mongoose-bench`, `cargo mongoose-bench --help`).
//!
//! * `cargo xtask plugins [--out DIR]` builds every connector crate under `plugins/` in
//!   release mode and copies each one's shared library into DIR (default
//!   `target/plugins`): point a config's `plugin_dir` at it.
//! * `cargo xtask fuzz [SECONDS]` runs every cargo-fuzz target of the workspace for
//!   SECONDS each (default 60), installing cargo-fuzz first if it is missing. A target
//!   with a folder of seed inputs, `<crate>/fuzz/seeds/<target>/` (kept in git, unlike
//!   the corpus), starts from them as well as from its corpus.
//! * `cargo xtask chaos [--minutes N | --seed S] [--family F] [ARGS...]` builds the release
//!   binaries and runs the chaos harness (`mongoose-chaos`): the fixed CI seeds, random
//!   seeds for N minutes, or one seed (see [`chaos`]).
//! * `cargo xtask layout` checks the architecture the manifests and files show: no
//!   librdkafka in the server library, the file-only binary nor the task runner, no
//!   source file over 800 lines, every `invariant N` a comment cites listed in the book's
//!   `reference/invariants.md`, at most five test binaries in `mongoose/tests/` and
//!   every path of them the book names existing (see [`layout`], [`invariants`],
//!   [`test_layout`]).
//! * `cargo xtask broker start [--brokers 1|3] [--port P] | stop | status` runs the
//!   test broker, Apache Kafka in KRaft mode, on 127.0.0.1:19092 (and :19093, :19094
//!   with three nodes) in the background, resolving its jars with Maven first when
//!   missing (see [`broker`]).

mod broker;
mod chaos;
mod invariants;
mod layout;
mod test_layout;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::{Parser, Subcommand};

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "xtask",
    bin_name = "cargo xtask",
    about = "The task runner: plugins, fuzzing, chaos, the layout check, the test broker (benchmarks: cargo mongoose-bench)"
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

/// The tasks.
#[derive(Debug, Subcommand)]
enum Task {
    /// Builds every connector crate under plugins/ in release and copies its shared
    /// library into DIR: point a config's plugin_dir at it.
    Plugins {
        /// Where the libraries go [default: target/plugins]
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Runs every cargo-fuzz target of the workspace for SECONDS each (installing
    /// cargo-fuzz first when it is missing).
    Fuzz {
        /// How long each target runs.
        #[arg(default_value_t = 60)]
        seconds: u64,
    },
    /// Builds the release binaries and plugins and runs the chaos harness.
    Chaos(chaos::ChaosOptions),
    /// Checks the architecture the manifests and files show (CI runs it).
    Layout,
    /// Runs the test broker, Apache Kafka in KRaft mode, in the background.
    Broker {
        #[command(subcommand)]
        action: broker::BrokerAction,
    },
}

fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

fn run(command: &mut Command) -> bool {
    eprintln!("xtask: running {command:?}");
    match command.status() {
        Ok(status) => status.success(),
        Err(error) => {
            eprintln!("xtask: could not start {command:?}: {error}");
            false
        }
    }
}

fn fuzz(seconds: u64) -> bool {
    let root = workspace_root();
    let has_fuzz = Command::new(env!("CARGO"))
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|output| output.status.success());
    if !has_fuzz && !run(Command::new(env!("CARGO")).args(["install", "cargo-fuzz", "--locked"])) {
        return false;
    }
    let mut ok = true;
    let Ok(entries) = std::fs::read_dir(&root) else {
        return false;
    };
    for entry in entries.flatten() {
        let crate_dir = entry.path();
        if !crate_dir.join("fuzz").join("Cargo.toml").exists() {
            continue;
        }
        let listed = Command::new(env!("CARGO"))
            .current_dir(&crate_dir)
            .args(["fuzz", "list"])
            .output();
        let Ok(listed) = listed else {
            ok = false;
            continue;
        };
        for target in String::from_utf8_lossy(&listed.stdout)
            .lines()
            .map(str::trim)
        {
            if target.is_empty() {
                continue;
            }
            let budget = format!("-max_total_time={seconds}");
            let mut command = Command::new(env!("CARGO"));
            command
                .current_dir(&crate_dir)
                .args(["fuzz", "run", "-s", "none", target]);
            let seeds = crate_dir.join("fuzz").join("seeds").join(target);
            if seeds.is_dir() {
                // the corpus first: libFuzzer writes new inputs into the first folder
                let corpus = crate_dir.join("fuzz").join("corpus").join(target);
                if let Err(error) = std::fs::create_dir_all(&corpus) {
                    eprintln!("xtask: cannot create {}: {error}", corpus.display());
                }
                command.arg(&corpus).arg(&seeds);
            }
            ok &= run(command.args(["--", &budget]));
        }
    }
    ok
}

/// The package name of the crate whose manifest is `manifest` (its `[package]` `name`).
fn package_name(manifest: &Path) -> Option<String> {
    let text = std::fs::read_to_string(manifest).ok()?;
    let mut in_package = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
            continue;
        }
        if in_package {
            if let Some(value) = line.strip_prefix("name") {
                let value = value.trim_start().strip_prefix('=')?.trim();
                return Some(value.trim_matches('"').to_owned());
            }
        }
    }
    None
}

/// `cargo xtask plugins [--out DIR]`: builds every crate under `plugins/` in release
/// and copies its `lib<crate>.so` into DIR (replaced atomically: a running server that
/// loaded the old file keeps it).
fn plugins(out: Option<&Path>) -> bool {
    let root = workspace_root();
    let out = out.map_or_else(|| root.join("target").join("plugins"), Path::to_path_buf);
    let mut packages = Vec::new();
    let Ok(entries) = std::fs::read_dir(root.join("plugins")) else {
        eprintln!("xtask: no plugins/ folder in {}", root.display());
        return false;
    };
    for entry in entries.flatten() {
        if let Some(name) = package_name(&entry.path().join("Cargo.toml")) {
            packages.push(name);
        }
    }
    packages.sort();
    if packages.is_empty() {
        eprintln!("xtask: no plugin crates under plugins/");
        return false;
    }
    let mut command = Command::new(env!("CARGO"));
    command.current_dir(&root).args(["build", "--release"]);
    for package in &packages {
        command.args(["-p", package]);
    }
    if !run(&mut command) {
        return false;
    }
    if let Err(error) = std::fs::create_dir_all(&out) {
        eprintln!("xtask: cannot create {}: {error}", out.display());
        return false;
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    for package in &packages {
        let file = format!("lib{}.so", package.replace('-', "_"));
        let built = target.join("release").join(&file);
        let temporary = out.join(format!(".{file}.tmp"));
        let copied = std::fs::copy(&built, &temporary)
            .and_then(|_| std::fs::rename(&temporary, out.join(&file)));
        match copied {
            Ok(()) => println!("{}", out.join(&file).display()),
            Err(error) => {
                eprintln!(
                    "xtask: cannot copy {} into {}: {error}",
                    built.display(),
                    out.display()
                );
                return false;
            }
        }
    }
    eprintln!(
        "xtask: {} plugin(s) in {}: set plugin_dir = \"{}\" in the server's config",
        packages.len(),
        out.display(),
        out.display()
    );
    true
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let root = workspace_root();
    let ok = match &cli.task {
        Task::Plugins { out } => plugins(out.as_deref()),
        Task::Fuzz { seconds } => fuzz(*seconds),
        Task::Chaos(options) => chaos::chaos(&root, options),
        Task::Layout => layout::layout(&root),
        Task::Broker { action } => broker::broker(&root, action),
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::{Cli, Task};

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn plugins_and_fuzz_take_their_defaults_and_refuse_strays() {
        let parse = |line: &str| Cli::try_parse_from(line.split_whitespace());
        assert!(matches!(
            parse("xtask plugins").map(|cli| cli.task),
            Ok(Task::Plugins { out: None })
        ));
        match parse("xtask plugins --out /p").map(|cli| cli.task) {
            Ok(Task::Plugins { out }) => assert_eq!(out.as_deref(), Some("/p".as_ref())),
            other => panic!("plugins --out /p parsed as {other:?}"),
        }
        assert!(matches!(
            parse("xtask fuzz").map(|cli| cli.task),
            Ok(Task::Fuzz { seconds: 60 })
        ));
        assert!(matches!(
            parse("xtask fuzz 5").map(|cli| cli.task),
            Ok(Task::Fuzz { seconds: 5 })
        ));
        for wrong in [
            "xtask plugins /p",
            "xtask fuzz soon",
            "xtask layout --fix",
            "xtask bench",
        ] {
            assert!(parse(wrong).is_err(), "{wrong} must be refused");
        }
    }
}
