//! The `mongoose` binary: `run`, `validate`, `replay`, `status`, `tap`, `test`, `top`, `plugins list`. Exit codes of `run`: 0
//! settled and lossless (or a clean signal stop), 1 failure (with the reasons on stderr:
//! a source that could not start, an overload kill switch, or with
//! `--exit-when-settled` a failed processor that leaves nothing able to make progress;
//! or a signal stop while a feed was stalled), 2 invalid config, 3 not lossless, 4
//! shutdown incomplete. SIGHUP reloads the config file (see
//! [`mongoose_server::Server::reload_file`]). `replay`: 0 reproduced, 1 not reproduced, 2 invalid config, 4
//! the recording is incomplete or unreadable (a partial replay).

/// mimalloc: the per-line items a file feed allocates on the source thread are freed on
/// the processor group's thread, which it handles far more cheaply than the system allocator.
/// Built with `no_thp`: mimalloc otherwise asks for transparent huge pages on its arenas,
/// so every touched arena page costs 2 MiB of resident memory (a forward run's peak RSS
/// was 54-62 MB with them, 22-24 MB without, at the same throughput).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand};
use mongoose::{out, outln, status_cli, tap_cli};
use mongoose_server::cli::{self, LogFormat, EXIT_BAD_CONFIG, EXIT_FAILED};
use mongoose_server::config::ServerConfig;
use mongoose_server::{admin, Server, ServerBuilder, ServerError};

/// Mongoose-rs: an event-processing server that loses nothing and tells the truth.
/// `mongoose --version`: `mongoose 0.1.0 (1a2b3c4d5e6f)`, the commit from `build.rs`.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("MONGOOSE_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(name = "mongoose", version = VERSION)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How the logs on stderr are written: `text` or `json`.
    ///
    /// How the logs on stderr are written: `text` (coloured only on a terminal and
    /// without NO_COLOR) or `json` (one object per line).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Subcommand)]
enum Command {
    /// Runs a server from a config file until a signal (or until settled).
    Run {
        /// The TOML config file.
        #[arg(long)]
        config: PathBuf,
        /// Exit once every feed is settled (exit 0 when lossless, 3 when not).
        ///
        /// Exit once every feed is settled: 0 when lossless, 3 when not; 1 once a
        /// processor failed (not added, or quarantined) and nothing can make progress.
        #[arg(long)]
        exit_when_settled: bool,
    },
    /// Checks a config file as `run` does, starting nothing (exit 0 valid, 2 invalid).
    ///
    /// Checks a config file as `run` does before it starts anything (the file, the
    /// disk it names, every processor kind's settings check) and exits: 0 valid, 2
    /// invalid, with the key path and what to do.
    Validate {
        /// The TOML config file.
        #[arg(long)]
        config: PathBuf,
    },
    /// Runs a config's unit tests (`<config stem>.tests.toml` beside it).
    ///
    /// Each case's input lines go through the config's processors, and the sinks'
    /// outputs are compared with the expected lines. Exits 0 all passed, 1 one failed
    /// (with a diff), 2 invalid.
    Test {
        /// The TOML config file.
        #[arg(long)]
        config: PathBuf,
        /// The tests file (default: `<config stem>.tests.toml` beside the config).
        #[arg(long)]
        tests: Option<PathBuf>,
    },
    /// Replays a recording made with `[record]` and compares each processor's run.
    ///
    /// Replays a recording made with `[record]` and prints, per processor, complete or
    /// stopped (with the reason), losses and a diff of outputs. Exits 0 only when the
    /// recording is complete and every processor reproduced its run, 1 when one did
    /// not, 4 when the recording is incomplete or unreadable (no closing frame, a cut or
    /// damaged store, a damaged outputs.jsonl or admin.jsonl): what it holds is replayed
    /// and reported as partial.
    Replay {
        /// A run's recording folder, or the `[record] dir` for its newest run.
        ///
        /// A run's recording folder (`<record.dir>/run-N`), or the `[record] dir` itself
        /// to replay its newest run.
        #[arg(long)]
        recording: PathBuf,
        /// The config to build the processors from (point their state at scratch).
        #[arg(long)]
        config: PathBuf,
    },
    /// Lists the connector plugins of a folder, and why any is refused.
    ///
    /// Connector plugins: `plugins list --plugin-dir DIR` loads every plugin of DIR and
    /// prints its file, name, version, SDK, ABI and kinds, and each refused file with the
    /// reason; exits 1 when one was refused (or the folder cannot be read).
    Plugins {
        #[command(subcommand)]
        command: PluginsCommand,
    },
    /// Audit capture of a running server's processors: start, stop, status.
    ///
    /// Audit capture of a running server's processors: `start SELECTOR`, `stop
    /// SELECTOR` (SELECTOR is NAME or GROUP/NAME) and `status`. Exits 0 when applied, 1
    /// otherwise, printing the reason.
    Audit {
        /// What to do.
        #[command(subcommand)]
        action: AuditAction,
        /// The admin address of the server.
        #[arg(long, global = true, default_value = "127.0.0.1:8089")]
        admin: String,
        /// A file holding the admin API's bearer token (the server's [admin] token_file).
        #[arg(long, global = true)]
        token_file: Option<PathBuf>,
    },
    /// Prints what a running server's /status says, as text.
    ///
    /// Prints what a running server's /status says, as text: its feeds (why each is
    /// where it is, a glob's files), its sinks (with held outputs), its processor groups
    /// and the last reload.
    Status {
        /// Print the raw status JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        server: AdminArgs,
    },
    /// Prints the aggregates of one key of a running aggregate processor, as JSON.
    ///
    /// Asks the admin API (GET /processors/GROUP/NAME/state?key=KEY, which needs the
    /// admin token when one is configured); exits 1 for an unknown processor or key.
    State {
        /// The aggregate processor: GROUP/NAME.
        processor: String,
        /// The key: the values of its group_by fields, comma-separated (alice,EUR).
        key: String,
        #[command(flatten)]
        server: AdminArgs,
    },
    /// A live sample of a running server's feed items or sink outputs.
    ///
    /// One line each, until --limit or Ctrl-C; then how many the tap dropped (the tap
    /// drops, never the pipeline).
    #[command(group(clap::ArgGroup::new("point").required(true).args(["feed", "sink"])))]
    Tap {
        /// The feed whose published items to show.
        #[arg(long)]
        feed: Option<String>,
        /// The sink whose outputs to show (each attempt, as the sink is given it).
        #[arg(long)]
        sink: Option<String>,
        /// Stop after this many records.
        #[arg(long)]
        limit: Option<u64>,
        /// Print the admin API's JSON line per record.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        server: AdminArgs,
    },
    /// A refreshing terminal view of a running server (`q` quits).
    ///
    /// A refreshing terminal view of a running server's feeds, groups and sinks, with
    /// rates from successive /status polls; `q` quits (exit 0).
    Top {
        /// How often to poll and redraw, in milliseconds.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
        interval_ms: u64,
        #[command(flatten)]
        server: AdminArgs,
    },
    /// The archive (aeron-like): serve, publish, list, describe, replay.
    ///
    /// The archive (aeron-like): run an archiver, publish lines, list and describe
    /// recordings, replay one.
    Archive {
        #[command(subcommand)]
        action: ArchiveAction,
    },
    /// Operator tools for a journal: append, tail, dump.
    ///
    /// Operator tools for a journal (the journal connector's files): append lines,
    /// tail excerpts, dump the index with checksums.
    Journal {
        #[command(subcommand)]
        action: JournalAction,
    },
    /// Prints a shell completion script for bash, zsh, fish, elvish or powershell.
    ///
    /// bash: `mongoose completions bash > ~/.local/share/bash-completion/completions/mongoose`;
    /// zsh: `mongoose completions zsh > ~/.zfunc/_mongoose` (with `fpath+=~/.zfunc` before
    /// `compinit` in ~/.zshrc); fish: `mongoose completions fish >
    /// ~/.config/fish/completions/mongoose.fish`.
    Completions {
        /// The shell the script is for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `mongoose archive ...`.
#[derive(Debug, Subcommand)]
enum ArchiveAction {
    /// Runs an archiver recording every publication it receives.
    ///
    /// Runs an archiver recording every publication it receives (UDP on `--udp`, IPC
    /// rings created in `--ipc`) until SIGTERM or SIGINT.
    Serve {
        /// The archive directory (catalog and recordings).
        dir: PathBuf,
        /// Receive UDP publications on this address (e.g. 127.0.0.1:40123).
        #[arg(long)]
        udp: Option<std::net::SocketAddr>,
        /// Record the IPC rings publishers create in this folder.
        #[arg(long)]
        ipc: Option<PathBuf>,
    },
    /// Publishes each line of standard input as one message.
    ///
    /// Publishes each line of standard input as one message, then waits until the
    /// archiver confirms it has everything.
    Publish {
        /// Send to an archiver's UDP address.
        #[arg(long)]
        udp: Option<std::net::SocketAddr>,
        /// Create an IPC ring in this folder (the archiver's `--ipc`).
        #[arg(long)]
        ipc: Option<PathBuf>,
        /// The stream id.
        #[arg(long)]
        stream: u32,
        /// The session id.
        #[arg(long, default_value_t = 1)]
        session: u32,
    },
    /// Lists the recordings of an archive.
    List {
        /// The archive directory.
        dir: PathBuf,
    },
    /// Describes one recording: positions, stop reason, gaps, torn tails cut.
    Describe {
        /// The archive directory.
        dir: PathBuf,
        /// The recording id.
        id: u64,
    },
    /// Prints `position<TAB>text` per message of a recording (a gap as `GAP`).
    Replay {
        /// The archive directory.
        dir: PathBuf,
        /// The recording id.
        #[arg(long)]
        recording: Option<u64>,
        /// The newest recording of this stream id.
        #[arg(long)]
        stream: Option<u32>,
        /// The stream position to start from (one a reader handed out).
        #[arg(long)]
        from: Option<u64>,
        /// Wait for more messages until the recording stops.
        #[arg(long)]
        follow: bool,
    },
}

fn archive(action: ArchiveAction) -> Result<u8, (u8, ServerError)> {
    use mongoose::archive_cli;
    let failed = |error| (EXIT_FAILED, error);
    match action {
        ArchiveAction::Serve { dir, udp, ipc } => {
            let signals = cli::Signals::install().map_err(failed)?;
            archive_cli::serve(&dir, udp, ipc.as_deref(), signals.flag()).map_err(failed)?;
            Ok(cli::EXIT_OK)
        }
        ArchiveAction::Publish {
            udp,
            ipc,
            stream,
            session,
        } => {
            let stdin = std::io::stdin().lock();
            let (count, position) =
                archive_cli::publish(udp, ipc.as_deref(), stream, session, stdin)
                    .map_err(failed)?;
            outln!("published {count} messages; the stream is at position {position}");
            Ok(cli::EXIT_OK)
        }
        ArchiveAction::List { dir } => {
            archive_cli::list(&dir, &mut mongoose::stdout::stdout()).map_err(failed)?;
            Ok(cli::EXIT_OK)
        }
        ArchiveAction::Describe { dir, id } => {
            archive_cli::describe(&dir, id, &mut mongoose::stdout::stdout()).map_err(failed)?;
            Ok(cli::EXIT_OK)
        }
        ArchiveAction::Replay {
            dir,
            recording,
            stream,
            from,
            follow,
        } => {
            let selector = match (recording, stream) {
                (Some(id), None) => mongoose_archive::RecordingSelector::Id(id),
                (None, Some(stream)) => {
                    mongoose_archive::RecordingSelector::LatestForStream(stream)
                }
                _ => {
                    return Err((
                        EXIT_BAD_CONFIG,
                        ServerError::invalid(
                            "archive replay",
                            "give one of --recording ID or --stream S",
                        ),
                    ))
                }
            };
            archive_cli::replay(
                &dir,
                selector,
                from,
                follow,
                &mut mongoose::stdout::stdout(),
                &|| false,
            )
            .map_err(failed)?;
            Ok(cli::EXIT_OK)
        }
    }
}

/// `mongoose journal ...`.
#[derive(Debug, Subcommand)]
enum JournalAction {
    /// Appends each line of standard input as one excerpt.
    ///
    /// Appends each line of standard input as one excerpt (creating the journal), then
    /// prints how many and the last index. Exits 1 when another appender holds the
    /// journal or the disk is full.
    Append {
        /// The journal directory.
        dir: PathBuf,
        /// Sync (msync) every this many lines (0: only at the end).
        #[arg(long, default_value_t = 0)]
        sync_every: u64,
    },
    /// Prints `index<TAB>text` for each excerpt from `--from`.
    ///
    /// Prints `index<TAB>text` for each excerpt from `--from`; never prints a torn or
    /// damaged excerpt (it stops before it).
    Tail {
        /// The journal directory.
        dir: PathBuf,
        /// The first index to print.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Wait for more excerpts until interrupted.
        #[arg(long)]
        follow: bool,
    },
    /// Prints every indexed excerpt with its checksum (exit 1 on a damaged one).
    ///
    /// Prints every indexed excerpt, whole or not (index, segment, offset, length,
    /// checksum); exits 1 when one is damaged.
    Dump {
        /// The journal directory.
        dir: PathBuf,
    },
}

fn journal(action: JournalAction) -> Result<u8, (u8, ServerError)> {
    let failed = |error| (EXIT_FAILED, error);
    match action {
        JournalAction::Append { dir, sync_every } => {
            let stdin = std::io::stdin().lock();
            let (count, last) =
                mongoose::journal_cli::append(&dir, stdin, sync_every).map_err(failed)?;
            match last {
                Some(last) => outln!("appended {count} excerpts; the last is index {last}"),
                None => outln!("appended nothing (standard input was empty)"),
            }
            Ok(cli::EXIT_OK)
        }
        JournalAction::Tail { dir, from, follow } => {
            let mut out = mongoose::stdout::stdout();
            mongoose::journal_cli::tail(&dir, from, follow, &mut out, &|| false).map_err(failed)?;
            Ok(cli::EXIT_OK)
        }
        JournalAction::Dump { dir } => {
            let mut out = mongoose::stdout::stdout();
            let (total, damaged) = mongoose::journal_cli::dump(&dir, &mut out).map_err(failed)?;
            if damaged > 0 {
                eprintln!("mongoose: {damaged} of {total} excerpts are damaged (a tailer stops before the first); an appender opening the journal cuts them");
                return Ok(EXIT_FAILED);
            }
            Ok(cli::EXIT_OK)
        }
    }
}

#[derive(Subcommand)]
enum PluginsCommand {
    /// Lists the plugins of a folder, their kinds, and the refused ones with reasons.
    List {
        /// The plugin folder (a config's plugin_dir).
        #[arg(long)]
        plugin_dir: PathBuf,
    },
}

/// `mongoose plugins list`.
fn plugins_list(dir: &std::path::Path) -> Result<u8, (u8, ServerError)> {
    let registry = mongoose_plugin::host::PluginRegistry::load_dir(dir).map_err(|error| {
        (
            EXIT_FAILED,
            ServerError::invalid("--plugin-dir", error.to_string()),
        )
    })?;
    out!("{}", cli::plugins_table(&registry));
    Ok(if registry.refused().is_empty() {
        0
    } else {
        EXIT_FAILED
    })
}

/// `mongoose audit ...`.
#[derive(Subcommand)]
enum AuditAction {
    /// Starts capturing a processor's audit log into a fresh capture-* folder.
    ///
    /// Starts capturing a processor's audit log into a fresh capture-* folder; prints
    /// `audit: RECORDING <selector>` once it records.
    Start {
        /// NAME, or GROUP/NAME when the name is admitted in several groups.
        selector: String,
    },
    /// Stops capturing a processor (a processor not recording: a no-op).
    Stop {
        /// NAME or GROUP/NAME.
        selector: String,
    },
    /// Lists the capture sessions: id, selector, recording, records written, folder.
    Status {
        /// Print the raw JSON.
        #[arg(long)]
        json: bool,
    },
}

/// The server's builder with every processor kind this binary knows: `run`,
/// `validate` and `replay` all build through it, so `validate` runs the same settings
/// checks `run` does.
fn builder(config: ServerConfig) -> ServerBuilder {
    mongoose::kinds::register(Server::builder(config))
}

fn run(config: PathBuf, exit_when_settled: bool) -> Result<u8, (u8, ServerError)> {
    // before anything starts: a SIGTERM during the start stops the run cleanly once
    // it begins, instead of killing the process with the default action
    let signals = cli::Signals::install().map_err(|error| (EXIT_FAILED, error))?;
    let config_file = config;
    let config = ServerConfig::load(&config_file).map_err(|error| (EXIT_BAD_CONFIG, error))?;
    if let Some(directives) = &config.log_level {
        // the config's filter, instead of RUST_LOG's (the load checked it)
        let _ = mongoose_server::log_filter::set(Some(directives));
    }
    let admin_settings =
        admin::AdminSettings::from_config(&config).map_err(|error| (EXIT_BAD_CONFIG, error))?;
    let builder = builder(config);
    // exactly what `validate` checks, before anything is opened or created
    builder
        .preflight()
        .map_err(|error| (EXIT_BAD_CONFIG, error))?;
    let server = builder.build().map_err(|error| match error {
        // a sink's state refused at open, another server on the data folder: not the
        // configuration
        ServerError::StateRefused { .. } | ServerError::DataFolderLocked { .. } => {
            (EXIT_FAILED, error)
        }
        error => (EXIT_BAD_CONFIG, error),
    })?;
    server.start().map_err(|error| (EXIT_FAILED, error))?;
    if let Some(settings) = admin_settings {
        admin::serve_with(server.clone(), settings).map_err(|error| (EXIT_FAILED, error))?;
    }
    // SIGHUP reloads the file (an invalid one changes nothing)
    let outcome = cli::run_until_done_reloading(&server, exit_when_settled, &signals, &config_file)
        .map_err(|error| (EXIT_FAILED, error))?;
    for failure in &outcome.failures {
        eprintln!("mongoose: {failure}");
    }
    Ok(outcome.code)
}

#[cfg(test)]
mod help_lines;

fn main() -> ExitCode {
    let arguments = Cli::parse();
    let log_format = arguments.log_format;
    // the cases' servers log what a run logs: a test run shows only warnings by default
    let quiet = matches!(arguments.command, Command::Test { .. });
    cli::init_logging_at(log_format, if quiet { "warn" } else { "info" });
    let outcome = match arguments.command {
        Command::Run {
            config,
            exit_when_settled,
        } => run(config, exit_when_settled),
        // run's checks before it starts anything (`ServerBuilder::preflight`), creating
        // and writing nothing
        // beside a running server on the same data folder, its admin address is its own
        Command::Validate { config } => match ServerConfig::load(&config).and_then(|loaded| {
            admin::AdminSettings::from_config(&loaded)?;
            builder(loaded).preflight_beside_running()
        }) {
            Ok(None) => {
                outln!("{}: valid", config.display());
                Ok(0)
            }
            Ok(Some(pid)) => {
                outln!(
                    "{}: valid (the admin address is held by the server running on this data folder, process {pid}: SIGHUP reloads it)",
                    config.display()
                );
                Ok(0)
            }
            Err(error) => Err((EXIT_BAD_CONFIG, error)),
        },
        Command::Replay { recording, config } => match ServerConfig::load(&config)
            .and_then(|loaded| mongoose_server::replay(builder(loaded), &recording))
        {
            Ok(reports) => {
                for (group, report) in &reports {
                    outln!("group {group}:");
                    outln!("{report}");
                }
                Ok(cli::replay_exit_code(&reports))
            }
            Err(error) => Err((EXIT_BAD_CONFIG, error)),
        },
        Command::Test { config, tests } => mongoose::test_cli::run(&config, tests.as_deref()),
        Command::Plugins {
            command: PluginsCommand::List { plugin_dir },
        } => plugins_list(&plugin_dir),
        Command::Status { json, server } => server
            .target()
            .and_then(|target| status_cli::status(&target, json)),
        Command::State {
            processor,
            key,
            server,
        } => server.target().and_then(|target| {
            let token = read_token(target.token_file.as_deref())?;
            let text = mongoose::status_cli::processor_state(
                &target.address,
                &processor,
                &key,
                token.as_deref().map(str::trim),
            )
            .map_err(|error| (EXIT_FAILED, error))?;
            outln!("{text}");
            Ok(cli::EXIT_OK)
        }),
        Command::Top {
            interval_ms,
            server,
        } => server.target().and_then(|target| {
            let token = read_token(target.token_file.as_deref())?;
            mongoose::top::run(
                &target.address,
                std::time::Duration::from_millis(interval_ms),
                token.as_deref().map(str::trim),
            )
            .map(|()| 0)
            .map_err(|error| (EXIT_FAILED, error))
        }),
        Command::Tap {
            feed,
            sink,
            limit,
            json,
            server,
        } => server.target().and_then(|target| {
            let point = match (feed, sink) {
                (Some(feed), _) => tap_cli::TapPoint::Feed(feed),
                (None, Some(sink)) => tap_cli::TapPoint::Sink(sink),
                (None, None) => unreachable!("clap requires --feed or --sink"),
            };
            let format = if json {
                tap_cli::TapFormat::Json
            } else {
                tap_cli::TapFormat::Text
            };
            tap_cli::run(&target, &point, limit, format)
        }),
        Command::Journal { action } => journal(action),
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "mongoose", &mut script);
            // through the binary's stdout: a closed pipe ends it cleanly
            let _ = std::io::Write::write_all(&mut mongoose::stdout::stdout(), &script);
            Ok(0)
        }
        Command::Archive { action } => archive(action),
        Command::Audit {
            action,
            admin: address,
            token_file,
        } => audit(&address, action, token_file.as_deref()),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err((code, error)) => {
            match log_format {
                LogFormat::Text => eprintln!("mongoose: {error}"),
                // a log shipper reads stderr as JSON lines: the reason is one too
                LogFormat::Json => tracing::error!(exit_code = code, "mongoose: {error}"),
            }
            ExitCode::from(code)
        }
    }
}

/// Which running server a client subcommand asks (`status`, `state`, `tap`, `top`).
#[derive(clap::Args, Debug)]
struct AdminArgs {
    /// The admin address of the server (default: the [admin] address of --config,
    /// else 127.0.0.1:8089).
    #[arg(long)]
    admin: Option<String>,
    /// The server's config file: its [admin] address and token_file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// A file holding the admin API's bearer token (the server's [admin] token_file).
    #[arg(long)]
    token_file: Option<PathBuf>,
}

impl AdminArgs {
    /// The server's admin address and token file ([`status_cli::admin_target`]); a
    /// config that cannot be read is a bad config.
    fn target(self) -> Result<status_cli::AdminTarget, (u8, ServerError)> {
        status_cli::admin_target(self.admin, self.config.as_deref(), self.token_file)
            .map_err(|error| (EXIT_BAD_CONFIG, error))
    }
}

/// The token in `token_file`, if one is named.
fn read_token(token_file: Option<&std::path::Path>) -> Result<Option<String>, (u8, ServerError)> {
    Ok(match token_file {
        Some(path) => Some(std::fs::read_to_string(path).map_err(|error| {
            (
                EXIT_FAILED,
                ServerError::Io {
                    context: format!("cannot read the token file {}", path.display()),
                    error,
                },
            )
        })?),
        None => None,
    })
}

/// `mongoose audit start|stop|status`.
fn audit(
    address: &str,
    action: AuditAction,
    token_file: Option<&std::path::Path>,
) -> Result<u8, (u8, ServerError)> {
    let token = read_token(token_file)?;
    let token = token.as_deref().map(str::trim);
    let (verb, selector) = match action {
        AuditAction::Status { json } => {
            let text = admin::get_text_with_token(address, "/audit/status", token)
                .map_err(|error| (EXIT_FAILED, error))?;
            if json {
                outln!("{text}");
                return Ok(0);
            }
            let sessions: Vec<mongoose_audit::capture::CaptureStatus> = serde_json::from_str(&text)
                .map_err(|error| {
                    (
                        EXIT_FAILED,
                        ServerError::State(format!("unexpected audit status answer: {error}")),
                    )
                })?;
            out!("{}", cli::capture_table(&sessions));
            return Ok(0);
        }
        AuditAction::Start { selector } => ("start", selector),
        AuditAction::Stop { selector } => ("stop", selector),
    };
    // the selector is one path segment: its '/' travels encoded
    let path = format!(
        "/audit/{}/{verb}",
        mongoose_audit::capture::encode_component(&selector)
    );
    let (code, text) =
        admin::post_with_token(address, &path, token).map_err(|error| (EXIT_FAILED, error))?;
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let reason = answer["reason"]
        .as_str()
        .or_else(|| answer["error"].as_str())
        .or_else(|| answer["pending"].as_str())
        .unwrap_or(&text);
    match (code, verb) {
        (200, "start") if reason == "recording" => outln!("audit: RECORDING {selector}"),
        (200, _) => outln!("audit: {selector}: {reason}"),
        _ => {
            eprintln!("mongoose: audit {verb} {selector}: {reason}");
            return Ok(EXIT_FAILED);
        }
    }
    Ok(0)
}
