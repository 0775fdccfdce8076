//! `cargo xtask`: project automation.
//!
//! * `cargo xtask bench [--versus-rsyslog]` runs the whole-pipeline benchmarks in release
//!   mode, one after the other so they do not compete for cores, and prints their
//!   figures; with `--versus-rsyslog`, `versus-rsyslog` with its defaults as a last step.
//! * `cargo xtask versus-rsyslog [--size-mib 1024] [--line-bytes 100] [--runs 3] [--keep
//!   DIR]` tails the same file of lines into an output file with `mongoose run` and with
//!   rsyslog, alternately, and prints the throughput and peak RSS of each (see
//!   [`versus`]).
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
//!   librdkafka in the server library nor in the file-only binary, no source file over
//!   800 lines, every `invariant N` a comment cites listed in the book's
//!   `reference/invariants.md`, at most five test binaries in `mongoose/tests/` and
//!   every path of them the book names existing (see [`layout`], [`invariants`],
//!   [`test_layout`]).
//! * `cargo xtask broker start [--brokers 1|3] [--port P] | stop | status` runs the
//!   test broker, Apache Kafka in KRaft mode, on 127.0.0.1:19092 (and :19093, :19094
//!   with three nodes) in the background, resolving its jars with Maven first when
//!   missing (see [`broker`]).
//! * `cargo xtask versus-kafka-streams [--runs 3] [--warmup 20000] [--records 300000]
//!   [--paced 2000] [--rate 1000] [--instances 1,3] [--keep DIR]` runs the ledger as ours
//!   (the release `mongoose` binary, state in a changelog) and as a Kafka Streams
//!   application (`peers/kafka-streams`, exactly_once_v2) on the same broker and
//!   records, and prints records/s, CPU per record, latency, peak RSS and the check of
//!   both results (see [`versus_kstreams`]).

mod bench;
mod broker;
mod callgrind;
mod chaos;
mod invariants;
mod layout;
mod test_layout;
mod versus;
mod versus_kstreams;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

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
pub(crate) fn plugins(arguments: &[String]) -> bool {
    let root = workspace_root();
    let out = match arguments {
        [] => root.join("target").join("plugins"),
        [flag, dir] if flag == "--out" => PathBuf::from(dir),
        _ => {
            eprintln!("usage: cargo xtask plugins [--out DIR]");
            return false;
        }
    };
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
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let ok = match arguments.first().map(String::as_str) {
        Some("bench") => bench::bench(&workspace_root(), &arguments[1..]),
        Some("broker") => broker::broker(&workspace_root(), &arguments[1..]),
        Some("plugins") => plugins(&arguments[1..]),
        Some("chaos") => chaos::chaos(&workspace_root(), &arguments[1..]),
        Some("callgrind") => callgrind::callgrind(&workspace_root(), &arguments[1..]),
        Some("layout") => layout::layout(&workspace_root()),
        Some("versus-rsyslog") => versus::versus_rsyslog(&workspace_root(), &arguments[1..]),
        Some("versus-kafka-streams") => {
            versus_kstreams::versus_kafka_streams(&workspace_root(), &arguments[1..])
        }
        Some("fuzz") => fuzz(
            arguments
                .get(1)
                .and_then(|text| text.parse().ok())
                .unwrap_or(60),
        ),
        _ => {
            eprintln!(
                "usage: cargo xtask bench [--versus-rsyslog] [ARGS...] | cargo xtask versus-rsyslog \
                 [--size-mib 1024] [--line-bytes 100] [--runs 3] [--keep DIR] | cargo xtask versus-kafka-streams [--runs 3] [--warmup 20000] [--records 300000] [--paced 2000] [--rate 1000] [--instances 1,3] [--keep DIR] | cargo xtask plugins [--out DIR] | cargo xtask fuzz [SECONDS] | cargo xtask broker start [--brokers 1|3] [--port P]|stop|status | cargo xtask chaos [--minutes N | --seed S] [--family F] [ARGS...] | cargo xtask layout"
            );
            false
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
