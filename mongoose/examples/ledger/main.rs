//! The ledger: a stateful processor that survives `kill -9` with every line applied
//! exactly once (see the `mongoose-ledger` crate), on a server built as values
//! (`example.rs`).
//!
//! ```sh
//! # the bundled demo: generates an input, processes it, prints the status table
//! cargo run --release -p mongoose --example ledger
//! # your own input
//! cargo run --release -p mongoose --example ledger -- \
//!     --input lines.txt --state-dir state --alerts alerts.txt [--admin 127.0.0.1:8089] [--exit-when-settled] \
//!     [--log-format text|json]
//! cargo run --release -p mongoose --example ledger -- --state-dir state --dump-state
//! # with --admin, ask the running ledger for a balance (its admin command)
//! curl -XPOST localhost:8089/processors/ledger/ledger/commands/balance -d '{"args":["acc1"]}'
//! ```

/// mimalloc: the per-line items a file feed allocates on the source thread are freed on
/// the processor group's thread, which it handles far more cheaply than the system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

mod example;

use clap::Parser;
use example::LedgerExample;
use mongoose_ledger::LedgerState;
use mongoose_server::cli::{self, LogFormat, EXIT_BAD_CONFIG, EXIT_FAILED};
use mongoose_server::{admin, ServerError};

/// Lines in the bundled demo's input.
const LINES: u64 = 10_000;

/// Runs the ledger on a COMMITED file feed of `account,amount` lines.
#[derive(Parser)]
#[command(about)]
struct Arguments {
    /// The input file of `account,amount` lines (tailed).
    #[arg(long)]
    input: Option<PathBuf>,
    /// Where the state and rejected.log live.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// The alerts file (`position,account,balance` per negative balance).
    #[arg(long)]
    alerts: Option<PathBuf>,
    /// Serve the admin API here (127.0.0.1:PORT).
    #[arg(long)]
    admin: Option<String>,
    /// Exit once settled: 0 when lossless, 3 when not.
    #[arg(long)]
    exit_when_settled: bool,
    /// Print the saved state as JSON and exit.
    #[arg(long)]
    dump_state: bool,
    /// How the logs on stderr are written: `text` (coloured only on a terminal and
    /// without NO_COLOR) or `json` (one object per line).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

fn run(
    example: &LedgerExample,
    exit_when_settled: bool,
) -> Result<cli::RunOutcome, (u8, ServerError)> {
    // before anything starts: a SIGTERM during the start stops the run cleanly once
    // it begins, instead of killing the process with the default action
    let signals = cli::Signals::install().map_err(|error| (EXIT_FAILED, error))?;
    // the config and the ledger's settings are values, not TOML text: any path works
    let config = example
        .server_config()
        .map_err(|error| (EXIT_BAD_CONFIG, error))?;
    let server = example
        .server_builder(config)
        .map_err(|error| (EXIT_FAILED, error))?
        .build()
        .map_err(|error| (EXIT_BAD_CONFIG, error))?;
    server.start().map_err(|error| (EXIT_FAILED, error))?;
    if let Some(address) = &example.admin {
        admin::serve(server.clone(), address).map_err(|error| (EXIT_FAILED, error))?;
    }
    cli::run_until_done_with_signals(&server, exit_when_settled, &signals)
        .map_err(|error| (EXIT_FAILED, error))
}

fn demo() -> Result<u8, (u8, ServerError)> {
    let dir = std::env::temp_dir().join("mongoose-ledger-demo");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|error| {
        (
            EXIT_FAILED,
            ServerError::Io {
                context: "cannot create the demo folder".into(),
                error,
            },
        )
    })?;
    let input = dir.join("input.txt");
    let mut text = String::new();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for index in 0..LINES {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        if index % 2_000 == 1_999 {
            text.push_str("this line is not account,amount\n");
            continue;
        }
        let amount = (seed % 2_001) as i64 - 1_050;
        text.push_str(&format!("acct-{},{amount}\n", seed % 100));
    }
    let mut file = std::fs::File::create(&input).map_err(|error| {
        (
            EXIT_FAILED,
            ServerError::Io {
                context: "cannot write the demo input".into(),
                error,
            },
        )
    })?;
    file.write_all(text.as_bytes()).map_err(|error| {
        (
            EXIT_FAILED,
            ServerError::Io {
                context: "cannot write the demo input".into(),
                error,
            },
        )
    })?;
    let state_dir = dir.join("state");
    let alerts = dir.join("alerts.txt");
    println!(
        "ledger demo: {LINES} lines ({} malformed) in {}; each delivery saves the state with fsync",
        LINES / 2_000,
        input.display()
    );
    let started = std::time::Instant::now();
    let example = LedgerExample {
        input: input.clone(),
        state_dir: state_dir.clone(),
        alerts: alerts.clone(),
        admin: None,
    };
    let outcome = run(&example, true)?;
    let pointer = example
        .server_config()
        .map(|config| {
            mongoose_source_file::pointer::pointer_path_in(Some(&config.feed_state_dir(0)), &input)
        })
        .map_err(|error| (EXIT_FAILED, error))?;
    let elapsed = started.elapsed();
    let state = LedgerState::load(&state_dir)
        .map_err(|error| (EXIT_FAILED, ServerError::State(error.to_string())))?;
    println!();
    print!("{}", cli::status_table(&outcome.last_status));
    println!();
    println!(
        "applied {} lines, rejected {}, {} accounts, in {:.2} s",
        state.applied,
        state.rejected,
        state.balances.len(),
        elapsed.as_secs_f64()
    );
    println!(
        "state (a checksummed outbox record per delivery, with its epoch and position, fsync'd in groups; snapshots): {} and {}",
        LedgerState::outbox_path(&state_dir).display(),
        LedgerState::path(&state_dir).display()
    );
    println!("alerts (position,account,balance):  {}", alerts.display());
    println!(
        "rejected lines:                     {}",
        state_dir.join("rejected.log").display()
    );
    println!(
        "source pointer (commit after processing): {}",
        pointer.display()
    );
    println!("run it again: nothing is applied twice; kill -9 it mid-run and restart: nothing lost, nothing doubled");
    Ok(outcome.code)
}

fn main() -> ExitCode {
    let arguments = Arguments::parse();
    cli::init_logging(arguments.log_format);
    let outcome = if arguments.dump_state {
        match &arguments.state_dir {
            None => Err((
                EXIT_BAD_CONFIG,
                ServerError::State("--dump-state needs --state-dir".into()),
            )),
            Some(state_dir) => match LedgerState::load(state_dir) {
                Ok(state) => {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&state).unwrap_or_default()
                    );
                    Ok(0)
                }
                Err(error) => Err((EXIT_FAILED, ServerError::State(error.to_string()))),
            },
        }
    } else {
        match (&arguments.input, &arguments.state_dir, &arguments.alerts) {
            (None, None, None) => demo(),
            (Some(input), Some(state_dir), Some(alerts)) => run(
                &LedgerExample {
                    input: input.clone(),
                    state_dir: state_dir.clone(),
                    alerts: alerts.clone(),
                    admin: arguments.admin.clone(),
                },
                arguments.exit_when_settled,
            )
            .map(|outcome| outcome.code),
            _ => Err((
                EXIT_BAD_CONFIG,
                ServerError::State(
                    "give --input, --state-dir and --alerts together (or none for the demo)".into(),
                ),
            )),
        }
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err((code, error)) => {
            match arguments.log_format {
                LogFormat::Text => eprintln!("ledger: {error}"),
                LogFormat::Json => tracing::error!(exit_code = code, "ledger: {error}"),
            }
            ExitCode::from(code)
        }
    }
}
