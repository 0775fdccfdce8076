//! The ledger: a stateful processor that survives `kill -9` with every line applied
//! exactly once (see the `mongoose-ledger` crate), on a server built as values
//! (`example.rs`).
//!
//! ```sh
//! # the bundled demo: generates an input in a folder it keeps, processes it, checks
//! # each line was applied once, prints the status table and how to run it again
//! cargo run --release -p mongoose --example ledger [-- --demo-dir DIR --lines N --fresh]
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
/// Lines of the input the closing hint generates to kill the demo mid-run: enough that
/// it still runs 3 s after its start.
const KILL_LINES: u64 = 2_000_000;

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
    /// The demo's folder, kept between runs (default: `mongoose-ledger-demo` in the
    /// temporary folder).
    #[arg(long)]
    demo_dir: Option<PathBuf>,
    /// The demo generates this many input lines when its folder holds no input.
    #[arg(long, default_value_t = LINES)]
    lines: u64,
    /// The demo starts over: removes its folder (input, state, alerts) first.
    #[arg(long)]
    fresh: bool,
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

/// The demo's settings: its folder, kept between runs, and the size of the input it
/// generates when the folder holds none.
struct Demo {
    dir: PathBuf,
    lines: u64,
    fresh: bool,
}

fn io_error(context: &str) -> impl FnOnce(std::io::Error) -> (u8, ServerError) + '_ {
    move |error| {
        (
            EXIT_FAILED,
            ServerError::Io {
                context: context.into(),
                error,
            },
        )
    }
}

/// Writes `lines` generated `account,amount` lines (one malformed line in 2,000) to
/// `input` through a temporary file renamed into place: a demo killed while it writes
/// its input leaves none, and the next run generates it again.
fn generate_input(input: &std::path::Path, lines: u64) -> Result<(), (u8, ServerError)> {
    let partial = input.with_extension("txt.partial");
    let mut file = std::io::BufWriter::new(
        std::fs::File::create(&partial).map_err(io_error("cannot write the demo input"))?,
    );
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for index in 0..lines {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        if index % 2_000 == 1_999 {
            writeln!(file, "this line is not account,amount")
        } else {
            let amount = (seed % 2_001) as i64 - 1_050;
            writeln!(file, "acct-{},{amount}", seed % 100)
        }
        .map_err(io_error("cannot write the demo input"))?;
    }
    file.into_inner()
        .map_err(|error| error.into_error())
        .and_then(|file| file.sync_all())
        .map_err(io_error("cannot write the demo input"))?;
    std::fs::rename(&partial, input).map_err(io_error("cannot write the demo input"))
}

/// The lines of `input` that end in a newline (the ones a file feed delivers).
fn count_lines(input: &std::path::Path) -> Result<u64, (u8, ServerError)> {
    let bytes = std::fs::read(input).map_err(io_error("cannot read the demo input"))?;
    Ok(bytes.iter().filter(|&&byte| byte == b'\n').count() as u64)
}

/// Every file below `dir` with its size, sorted, as `path (N bytes)` lines.
fn list_files(dir: &std::path::Path, into: &mut Vec<(PathBuf, u64)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.metadata() {
            Ok(metadata) if metadata.is_dir() => list_files(&path, into),
            Ok(metadata) => into.push((path, metadata.len())),
            Err(_) => {}
        }
    }
    into.sort();
}

/// Quotes `text` for a POSIX shell when it needs it.
fn shell_quote(text: &str) -> String {
    if !text.is_empty()
        && text
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"/._-=+:,".contains(&byte))
    {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// The bundled demo: generates its input in a folder it keeps (unless it holds one
/// already), runs the ledger until settled, checks that every line of the input was
/// applied or rejected exactly once, and prints how to run it again and how to kill it
/// mid-run.
fn demo(settings: &Demo) -> Result<u8, (u8, ServerError)> {
    let dir = &settings.dir;
    if settings.fresh {
        match std::fs::remove_dir_all(dir) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                return Err(io_error("cannot remove the demo folder")(error))
            }
            _ => {}
        }
    }
    std::fs::create_dir_all(dir).map_err(io_error("cannot create the demo folder"))?;
    let input = dir.join("input.txt");
    let state_dir = dir.join("state");
    let alerts = dir.join("alerts.txt");
    if input.exists() {
        println!(
            "ledger demo: the input of an earlier run is still in {} (give --fresh to start over)",
            dir.display()
        );
    } else {
        generate_input(&input, settings.lines)?;
    }
    let lines = count_lines(&input)?;
    let before = if state_dir.exists() {
        LedgerState::load(&state_dir)
            .map_err(|error| (EXIT_FAILED, ServerError::State(error.to_string())))?
    } else {
        LedgerState::default()
    };
    println!(
        "ledger demo: {lines} lines (one in 2,000 malformed) in {}; each delivery saves the state with fsync",
        input.display()
    );
    let started = std::time::Instant::now();
    let example = LedgerExample {
        input: input.clone(),
        state_dir: state_dir.clone(),
        alerts,
        admin: None,
    };
    let outcome = run(&example, true)?;
    let elapsed = started.elapsed();
    let state = LedgerState::load(&state_dir)
        .map_err(|error| (EXIT_FAILED, ServerError::State(error.to_string())))?;
    println!();
    print!("{}", cli::status_table(&outcome.last_status));
    println!();
    let done_before = before.applied + before.rejected;
    println!(
        "this run: {} lines applied, {} rejected, in {:.2} s; {} accounts",
        state.applied - before.applied.min(state.applied),
        state.rejected - before.rejected.min(state.rejected),
        elapsed.as_secs_f64(),
        state.balances.len()
    );
    let done = state.applied + state.rejected;
    let exact = done == lines;
    println!(
        "all runs: {} applied + {} rejected = {done} of the input's {lines} lines{}",
        state.applied,
        state.rejected,
        if exact {
            ": each line once, nothing lost, nothing doubled"
        } else {
            ": NOT each line once"
        }
    );
    if done_before > 0 {
        println!("({done_before} of them were applied by earlier runs)");
    }
    let mut files = Vec::new();
    list_files(dir, &mut files);
    println!("the demo's files (kept; the state is a checksummed outbox record per delivery, with its epoch and position, and snapshots):");
    for (path, size) in &files {
        println!("  {} ({size} bytes)", path.display());
    }
    let exe = std::env::current_exe()
        .map(|path| shell_quote(&path.to_string_lossy()))
        .unwrap_or_else(|_| "cargo run --release -p mongoose --example ledger --".to_owned());
    let folder = shell_quote(&dir.to_string_lossy());
    println!("run it again (nothing is applied twice):");
    println!("  {exe} --demo-dir {folder}");
    println!("kill -9 it mid-run and run it again (nothing lost, nothing doubled):");
    println!(
        "  {exe} --demo-dir {folder} --fresh --lines {KILL_LINES} & sleep 3; kill -9 $!; wait; {exe} --demo-dir {folder}"
    );
    if !exact {
        return Ok(EXIT_FAILED);
    }
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
                    mongoose::outln!("{}", state.summary_first_json());
                    Ok(0)
                }
                Err(error) => Err((EXIT_FAILED, ServerError::State(error.to_string()))),
            },
        }
    } else {
        match (&arguments.input, &arguments.state_dir, &arguments.alerts) {
            (None, None, None) => demo(&Demo {
                dir: arguments
                    .demo_dir
                    .clone()
                    .unwrap_or_else(|| std::env::temp_dir().join("mongoose-ledger-demo")),
                lines: arguments.lines,
                fresh: arguments.fresh,
            }),
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
