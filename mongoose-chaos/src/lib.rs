//! The chaos harness of Mongoose-rs: the real `mongoose` binary and its peers driven
//! through random fault schedules, each run checked against a truth model.
//!
//! A **scenario** ([`Scenario`]) is a workload (the ledger, or `forward`) over a
//! source kind (a file, a glob, a journal, an archive over IPC or UDP, a Kafka topic of
//! the harness's own broker) into a sink kind (a file, HTTP, a journal, TCP, a Kafka
//! topic), with one or two writers into the sink, and a
//! schedule of steps: appends, server starts, SIGKILLs, SIGSTOPs, crash loops,
//! logrotate in every mode, renames and deletions inside a glob, a source deleted and
//! made again, state files deleted or damaged (a flipped byte, a cut tail, an older
//! copy, another run's file), full tmpfs file systems later freed, peers killed or
//! paused, an HTTP target that fails, times out or closes, Kafka records deleted, a
//! topic made again, partitions added ([`world::kafka`]). A seed gives a schedule
//! ([`generate()`]); a schedule prints as TOML and reads back, so a failing seed is
//! replayed, minimised ([`minimise()`]) and kept as a regression schedule.
//!
//! After the last step every fault is healed and the server runs with
//! `--exit-when-settled` to its end. The **truth** ([`truth`]) then says whether every
//! input was applied exactly once (the ledger's state has one account per line), every
//! output is where the sink promises it (exactly once in a file sink, at least once
//! under one key over HTTP), nothing is in the state or the output that no input made,
//! a damaged state was refused without changing anything or left everything exact, and
//! the exit code and the status told the truth (a known loss is never "lossless", a
//! sink's failure counters match what its target saw, a run that cannot go on ends).
//!
//! `cargo xtask chaos` builds the release binaries and runs the fixed seeds of
//! `mongoose-chaos/seeds.toml` and the schedules of `mongoose-chaos/schedules/`;
//! `cargo xtask chaos --minutes 30` runs random seeds and prints a table.
//!
//! ```no_run
//! use std::path::Path;
//! use mongoose_chaos::{generate, run_scenario, Binaries, Launcher};
//!
//! let bins = Binaries {
//!     mongoose: "target/release/mongoose".into(),
//!     plugin_dir: "target/plugins".into(),
//!     peer: Launcher { program: "target/release/mongoose-chaos".into(), args: Vec::new() },
//! };
//! let scenario = generate(42);
//! print!("{}", scenario.describe());
//! let outcome = run_scenario(&scenario, &bins, Path::new("target/chaos/42"));
//! print!("{}", outcome.report());
//! assert!(outcome.passed());
//! ```

pub mod consumers;
pub mod failure;
pub mod foreign;
pub mod generate;
pub mod http_target;
pub mod minimise;
pub mod outputs;
pub mod peer;
pub mod process;
pub mod run;
pub mod scenario;
pub mod seeds;
pub mod steps;
pub mod truth;
pub mod world;

pub use generate::{family_of, generate, generate_in};
pub use minimise::minimise;
pub use run::{run_scenario, Outcome};
pub use scenario::Scenario;
pub use world::{Binaries, Launcher};
