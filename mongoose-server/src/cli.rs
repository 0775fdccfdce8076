//! What the `mongoose` binary does, as library functions (the binary is a thin shell
//! over them, and the ledger example reuses them).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_delivery::StatusReport;
use mongoose_replay::cli::{ReplayOutcome, ReplayReport};
use tracing::{error, info, warn};

use crate::server::Server;
use crate::ServerError;

/// Exit code: settled and lossless (or stopped by a signal with a complete stop, no
/// loss and no stalled feed).
pub const EXIT_OK: u8 = 0;
/// Exit code: the server could not start or failed (a source that could not start, an
/// overload kill switch, a failed processor under `--exit-when-settled`; also: stopped by
/// a signal while a feed was stalled, e.g. behind a quarantined processor, or after a
/// plugin source failed).
pub const EXIT_FAILED: u8 = 1;
/// Exit code: the configuration is invalid.
pub const EXIT_BAD_CONFIG: u8 = 2;
/// Exit code: not lossless (something was dropped, refused, released or its save
/// skipped), whether the run settled or was stopped by a signal.
pub const EXIT_SETTLED_LOSSY: u8 = 3;
/// Exit code: the shutdown did not complete within its deadline.
pub const EXIT_STOP_INCOMPLETE: u8 = 4;
/// Exit code of `mongoose replay`: a recording is incomplete or could not be read (no
/// closing frame: the recorder was killed or its store was cut; a damaged store or
/// journal; a missing, garbage or changed `outputs.jsonl` / `admin.jsonl`). What it
/// holds was replayed and is reported as partial. The same number as
/// [`EXIT_STOP_INCOMPLETE`]: 4 always means something did not complete.
pub const EXIT_REPLAY_INCOMPLETE: u8 = 4;

/// The exit code of `mongoose replay` for its reports, one per group:
/// [`EXIT_REPLAY_INCOMPLETE`] when any group's recording is incomplete (whatever else
/// happened: a comparison with part of a recording proves nothing), else
/// [`EXIT_FAILED`] when any group did not reproduce its run, else [`EXIT_OK`].
pub fn replay_exit_code(reports: &[(String, ReplayReport)]) -> u8 {
    let outcomes = || reports.iter().map(|(_, report)| report.outcome());
    if outcomes().any(|outcome| outcome == ReplayOutcome::RecordingIncomplete) {
        EXIT_REPLAY_INCOMPLETE
    } else if outcomes().any(|outcome| outcome == ReplayOutcome::NotReproduced) {
        EXIT_FAILED
    } else {
        EXIT_OK
    }
}

/// How the logs on stderr are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Lines for people; coloured only when stderr is a terminal and `NO_COLOR` is
    /// not set (a file or a pipe gets plain text).
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `message`, the event's fields,
    /// `target`), for log shippers.
    Json,
}

/// Installs the tracing subscriber on stderr in `format`: `RUST_LOG` filters (default
/// `info`). Text is coloured only on a terminal, and never when `NO_COLOR` is set to
/// anything but the empty string (<https://no-color.org>). The subscriber also carries
/// the audit capture layer ([`mongoose_audit::capture::CaptureLayer`]): an event a
/// captured processor emits while its group calls it (and that passes `RUST_LOG`) is
/// written to its capture too.
pub fn init_logging(format: LogFormat) {
    init_logging_at(format, "info");
}

/// [`init_logging`] with `default` as the filter when `RUST_LOG` is not set (`warn`
/// for a command whose own output is what matters, as `mongoose test`).
pub fn init_logging_at(format: LogFormat, default: &str) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    // behind a reload layer: a config's `log_level` replaces it (crate::log_filter)
    crate::log_filter::set_default(default);
    let (filter, handle) =
        tracing_subscriber::reload::Layer::new(crate::log_filter::from_environment());
    crate::log_filter::keep(handle);
    let stderr = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let stderr = match format {
        LogFormat::Text => stderr
            .with_ansi(colour_wanted(
                std::io::IsTerminal::is_terminal(&std::io::stderr()),
                std::env::var_os("NO_COLOR").as_deref(),
            ))
            .boxed(),
        LogFormat::Json => stderr.json().flatten_event(true).with_ansi(false).boxed(),
    };
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(stderr)
        .with(mongoose_audit::capture::CaptureLayer)
        .try_init();
}

/// The capture sessions as a table: id, selector, state, records written, folder.
pub fn capture_table(sessions: &[mongoose_audit::capture::CaptureStatus]) -> String {
    use std::fmt::Write as _;
    let mut table = format!(
        "{:<28} {:<24} {:<10} {:>8}  {}\n",
        "capture", "processor", "state", "records", "folder"
    );
    for session in sessions {
        let state = serde_json::to_value(session.state)
            .ok()
            .and_then(|value| value.as_str().map(str::to_owned))
            .unwrap_or_default();
        let _ = writeln!(
            table,
            "{:<28} {:<24} {:<10} {:>8}  {}{}",
            session.id,
            session.selector,
            state,
            session.records_written,
            session.path.display(),
            session
                .error
                .as_ref()
                .map(|error| format!("  ({error})"))
                .unwrap_or_default()
        );
    }
    if sessions.is_empty() {
        table.push_str("(no capture sessions)\n");
    }
    table
}

/// Colour escape codes only for a terminal, and only when `NO_COLOR` is unset or empty.
fn colour_wanted(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|value| value.is_empty())
}

/// How a run ended.
#[derive(Debug)]
pub struct RunOutcome {
    /// The process exit code.
    pub code: u8,
    /// The status when the run ended (before the shutdown closed the groups).
    pub last_status: StatusReport,
    /// Why the run failed (exit 1), one reason per line; empty otherwise.
    pub failures: Vec<String>,
}

/// Runs a started server until SIGTERM or SIGINT (a second signal ends the process at
/// once) or, with `exit_when_settled`, until every feed is settled; then runs the
/// ordered shutdown. Returns the exit code.
///
/// The run also ends, with [`EXIT_FAILED`] and the reasons in
/// [`RunOutcome::failures`]:
/// * at once when the server reports a fatal failure ([`Server::fatal_failures`]: a
///   source that could not start, an overload kill switch that ran), waiting to
///   settle or not;
/// * with `exit_when_settled`, when a processor failed ([`Server::processor_failures`]:
///   not added at start, or quarantined) and nothing can make progress any more: every
///   feed is settled or stalled (a stalled feed holds its position and cannot
///   complete). A settled run with a failed processor is not a success either: the
///   processor missed what came after its failure.
pub fn run_until_done(server: &Server, exit_when_settled: bool) -> Result<u8, ServerError> {
    run_until_done_with_status(server, exit_when_settled).map(|outcome| outcome.code)
}

/// [`run_until_done`], also returning the status seen when the run ended and why it
/// failed.
pub fn run_until_done_with_status(
    server: &Server,
    exit_when_settled: bool,
) -> Result<RunOutcome, ServerError> {
    let signals = Signals::install()?;
    run_until_done_with_signals(server, exit_when_settled, &signals)
}

/// SIGTERM and SIGINT caught into a flag: the first sets it (the run loop then runs the
/// ordered shutdown), a second ends the process at once (exit 130). SIGHUP is caught
/// into another flag: the run loop of [`run_until_done_reloading`] reloads the config
/// file on it (the others log it and go on); it never ends the process.
///
/// Install it before [`Server::start`]: a signal that arrives while the server starts
/// is then kept and stops the run cleanly as soon as the loop begins. Installed after
/// the start (as [`run_until_done`] does for a caller that did not), a signal in
/// between would end the process with the default action, without the ordered stop.
#[derive(Debug, Clone)]
pub struct Signals {
    signalled: Arc<AtomicBool>,
    reload: Arc<AtomicBool>,
    /// The read end of a socket each handled signal writes a byte to: the run loop
    /// waits on it between its looks, so a signal is served at once while an idle
    /// loop looks rarely. `None` when it could not be set up (the loop then sleeps).
    bell: Option<Arc<std::os::unix::net::UnixStream>>,
}

impl Signals {
    /// Installs the handlers.
    pub fn install() -> Result<Self, ServerError> {
        let signalled = Arc::new(AtomicBool::new(false));
        for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
            // the second signal exits at once; the first sets the flag
            signal_hook::flag::register_conditional_shutdown(signal, 130, Arc::clone(&signalled))
                .and_then(|_| signal_hook::flag::register(signal, Arc::clone(&signalled)))
                .map_err(|error| ServerError::Io {
                    context: "cannot install signal handlers".into(),
                    error,
                })?;
        }
        // SIGHUP's default action ends the process: caught from the start on, a reload
        // request that arrives while the server starts is served once it runs
        let reload = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&reload)).map_err(
            |error| ServerError::Io {
                context: "cannot install the SIGHUP handler".into(),
                error,
            },
        )?;
        let bell = Self::ring_on_signals()
            .inspect_err(|error| {
                warn!(%error, "cannot set up the wake-up on signals: the run loop serves a signal at its next look (within a second)");
            })
            .ok()
            .map(Arc::new);
        Ok(Signals {
            signalled,
            reload,
            bell,
        })
    }

    /// A socket pair whose write end the handlers of SIGTERM, SIGINT and SIGHUP write
    /// a byte to (async-signal-safe); returns the read end.
    fn ring_on_signals() -> std::io::Result<std::os::unix::net::UnixStream> {
        let (read, write) = std::os::unix::net::UnixStream::pair()?;
        for signal in [
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGHUP,
        ] {
            signal_hook::low_level::pipe::register(signal, write.try_clone()?)?;
        }
        Ok(read)
    }

    /// Waits up to `timeout`, or until a signal arrives (at once if one arrived since
    /// the last wait).
    pub fn wait(&self, timeout: Duration) {
        use std::io::Read;
        let Some(bell) = self.bell.as_deref() else {
            std::thread::sleep(timeout);
            return;
        };
        let mut rung = [0u8; 64];
        if bell
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .is_err()
            || matches!((&*bell).read(&mut rung), Err(ref error) if !matches!(error.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted))
        {
            std::thread::sleep(timeout);
        }
    }

    /// True once a SIGHUP arrived since the last call (the request is taken).
    pub fn take_reload_request(&self) -> bool {
        self.reload.swap(false, Ordering::AcqRel)
    }

    /// True once a signal arrived.
    pub fn received(&self) -> bool {
        self.signalled.load(Ordering::Acquire)
    }

    /// The flag a signal sets (for a loop that stops on it, as the archiver's).
    pub fn flag(&self) -> &AtomicBool {
        &self.signalled
    }
}

/// [`run_until_done_with_status`] with signal handlers installed earlier (before the
/// server started: see [`Signals`]).
pub fn run_until_done_with_signals(
    server: &Server,
    exit_when_settled: bool,
    signals: &Signals,
) -> Result<RunOutcome, ServerError> {
    run_loop(server, exit_when_settled, signals, None)
}

/// [`run_until_done_with_signals`], reloading `config_file` on each SIGHUP
/// ([`Server::reload_file`]: an invalid file or a change that cannot apply live is
/// logged and the old configuration keeps running).
pub fn run_until_done_reloading(
    server: &Server,
    exit_when_settled: bool,
    signals: &Signals,
    config_file: &std::path::Path,
) -> Result<RunOutcome, ServerError> {
    run_loop(server, exit_when_settled, signals, Some(config_file))
}

/// How often the run loop of `--exit-when-settled` looks at the status.
const SETTLE_LOOK: Duration = Duration::from_millis(20);
/// The longest wait between two looks of the run loop of a server that runs on, at
/// its status, its fatal failures and its progress line, once nothing moves (a signal
/// ends the wait at once).
const QUIET_LOOK: Duration = Duration::from_secs(1);

/// The wait before the next look after `quiet_looks` looks in a row saw nothing move:
/// 20 ms, doubling with each, up to [`QUIET_LOOK`].
fn quiet_look(quiet_looks: u32) -> Duration {
    SETTLE_LOOK
        .saturating_mul(1 << quiet_looks.min(8))
        .min(QUIET_LOOK)
}

/// A sum of the counts that move while a server works (published and dispatched per
/// queue, what each sink was given and finished): equal at two looks, nothing moved.
fn activity_of(report: &StatusReport, sinks: &[mongoose_sink::SinkStatus]) -> u64 {
    let queues = report
        .feeds
        .iter()
        .flat_map(|feed| &feed.subscribers)
        .fold(0u64, |sum, queue| {
            sum.wrapping_add(queue.position)
                .wrapping_add(queue.dispatched)
        });
    sinks.iter().fold(queues, |sum, sink| {
        sum.wrapping_add(sink.published)
            .wrapping_add(sink.expired)
            .wrapping_add(sink.lost)
            .wrapping_add(sink.queued)
            .wrapping_add(sink.held_count)
    })
}

fn run_loop(
    server: &Server,
    exit_when_settled: bool,
    signals: &Signals,
    config_file: Option<&std::path::Path>,
) -> Result<RunOutcome, ServerError> {
    let signalled = &signals.signalled;
    let mut settled_code = None;
    let mut failures = Vec::new();
    let mut warned_stalled = false;
    // since when every unsettled feed is stalled with no sink still trying
    let mut stuck_since: Option<Instant> = None;
    let mut stalled_exit = Duration::from_millis(server.config().stalled_exit_millis);
    let mut last_status;
    let mut observer = crate::progress::Observer::new(
        server.config().progress_interval_seconds,
        server.config().admin.is_some(),
    );
    // looks in a row that saw nothing move (the wait between looks grows with them)
    let mut quiet_looks = 0u32;
    let mut last_activity = 0u64;
    loop {
        last_status = server.status();
        let sinks = server.sink_statuses();
        observer.observe(&last_status, &sinks);
        let moved = activity_of(&last_status, &sinks);
        quiet_looks = if moved == last_activity {
            quiet_looks.saturating_add(1)
        } else {
            0
        };
        last_activity = moved;
        if signalled.load(Ordering::Acquire) {
            info!("signal received: shutting down (a second signal ends the process at once)");
            break;
        }
        if signals.take_reload_request() {
            match config_file {
                Some(path) => {
                    server.reload_file(path);
                    // the keys a reload changes live that this loop reads
                    let running = server.running_config();
                    stalled_exit = Duration::from_millis(running.stalled_exit_millis);
                    observer.set_interval(running.progress_interval_seconds);
                }
                None => warn!("SIGHUP received: this server was not started from a config file, so there is nothing to reload; it goes on"),
            }
            continue;
        }
        failures = server.fatal_failures();
        if !failures.is_empty() {
            error!(reasons = ?failures, "the run cannot go on: shutting down");
            break;
        }
        if exit_when_settled {
            let report = &last_status;
            // a failed plugin source can make no more progress either
            let stuck = report.feeds.iter().all(|feed| {
                feed.settled
                    || feed.stalled.is_some()
                    || feed.detail.as_deref().is_some_and(|detail| {
                        detail.starts_with(mongoose_plugin::host::SOURCE_FAILED)
                    })
            });
            if report.settled || stuck {
                failures = server.processor_failures();
            }
            if !failures.is_empty() {
                error!(reasons = ?failures, settled = report.settled,
                    "a processor failed and nothing more can make progress: shutting down");
                break;
            }
            if report.settled {
                if report.lossless {
                    info!("settled and lossless: shutting down");
                    settled_code = Some(EXIT_OK);
                } else {
                    warn!("settled but NOT lossless: the run is lossy (see dropped/refused/completionFailures per feed)");
                    settled_code = Some(EXIT_SETTLED_LOSSY);
                }
                break;
            }
            if stuck && !warned_stalled {
                warned_stalled = true;
                let stalled = stalled_feeds(report);
                // a sink that still holds or retries outputs keeps the run unsettled
                // while every feed looks settled: say which, and that it goes on
                let sinks: Vec<String> = server
                    .sink_statuses()
                    .iter()
                    .filter(|sink| sink.held_count + sink.retrying + sink.queued > 0)
                    .map(|sink| {
                        format!(
                            "{}: {} held, {} retrying, {} queued (held outputs are tried again by themselves; POST /sinks/{}/retry tries now)",
                            sink.name, sink.held_count, sink.retrying, sink.queued, sink.name
                        )
                    })
                    .collect();
                warn!(?stalled, ?sinks, "waiting to settle, but every unsettled feed is stalled: add a consumer for it, or stop the server");
            }
            // a sink still trying an output may get it through (a target that comes
            // back): only a stall nothing works on any more needs an operator
            let sinks_trying = server
                .sink_statuses()
                .iter()
                .any(|sink| sink.retrying > 0 || sink.queued > 0);
            if stuck && !report.settled && !sinks_trying {
                let since = *stuck_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= stalled_exit {
                    failures = stalled_feeds(report);
                    if failures.is_empty() {
                        failures.push("every unsettled feed is stalled".to_owned());
                    }
                    error!(stalled = ?failures, waited_ms = stalled_exit.as_millis() as u64,
                        "the run cannot go on: every unsettled feed stayed stalled (see stalled_exit_millis); shutting down, fix what each stall names and run again");
                    break;
                }
            } else {
                stuck_since = None;
            }
        }
        // a run that waits to settle, or whose counts move, looks every 20 ms (the
        // latency marks are taken at the looks); one where nothing moved looks less
        // often, down to once a second (a signal wakes it at once), so an idle server
        // does not wake 50 times a second for nothing
        signals.wait(if exit_when_settled {
            SETTLE_LOOK
        } else {
            quiet_look(quiet_looks)
        });
    }
    let result = server.shutdown();
    // the loss counters only grow, so the status after the stop has them all; the
    // stalled reasons are those seen before the groups closed (a closed group leaves
    // every positioned feed without a live consumer)
    let after_stop = server.status();
    if result.complete {
        // the run ends and tells its status (not lossless): the earlier losses its
        // start reported are reported now; a killed run leaves them for the next start
        server.mark_earlier_losses_reported();
    }
    record_losses(server, &after_stop);
    if !failures.is_empty() {
        if !result.complete {
            warn!(?result, "the shutdown did not complete");
            failures.push(format!(
                "the shutdown did not complete either: groups running {:?}, services left running {:?}",
                result.groups_running, result.services_left_running
            ));
        }
        return Ok(RunOutcome {
            code: EXIT_FAILED,
            last_status,
            failures,
        });
    }
    if !result.complete {
        warn!(?result, "the shutdown did not complete");
        warn_stalled(&last_status);
        return Ok(RunOutcome {
            code: EXIT_STOP_INCOMPLETE,
            last_status,
            failures,
        });
    }
    let mut code = settled_code.unwrap_or_else(|| stopped_code(&last_status, &after_stop));
    // a plugin source that failed (a caught panic) made the run fail, even though the
    // other feeds went on to a clean stop
    let failed_sources = crate::server::source_failures_in(&last_status);
    if !failed_sources.is_empty() {
        warn!(failed = ?failed_sources, "stopped, and a plugin source had failed in this run");
        if code == EXIT_OK {
            code = EXIT_FAILED;
        }
        failures = failed_sources;
    }
    Ok(RunOutcome {
        code,
        last_status,
        failures,
    })
}

/// Keeps a record of every feed that lost items in this run beside its pointer, so the
/// next start reports it. Skipped completions are not recorded: their items are held,
/// never committed, so the next start re-delivers them (unless an operator released
/// them, which is in `dropped`).
fn record_losses(server: &Server, after_stop: &StatusReport) {
    for feed in &after_stop.feeds {
        if feed.dropped + feed.refused == 0 {
            continue;
        }
        server.record_loss(
            &feed.feed,
            format!(
                "the run ended not lossless: dropped {} (operator releases included), refused {}",
                feed.dropped, feed.refused
            ),
        );
    }
}

/// The exit code of a run stopped by a signal: a run that lost something is lossy
/// (3) even when it never settled; a run whose feeds hold positions they could not
/// commit (a quarantined processor, a save that kept failing) failed (1): a restart
/// re-delivers what they hold.
fn stopped_code(before_stop: &StatusReport, after_stop: &StatusReport) -> u8 {
    if !after_stop.lossless {
        warn!("stopped, and the run was NOT lossless (see dropped/refused/completionFailures per feed)");
        return EXIT_SETTLED_LOSSY;
    }
    if warn_stalled(before_stop) {
        EXIT_FAILED
    } else {
        EXIT_OK
    }
}

/// `feed: reason` for each stalled feed of `report`.
fn stalled_feeds(report: &StatusReport) -> Vec<String> {
    report
        .feeds
        .iter()
        .filter_map(|feed| {
            let reason = feed.stalled.as_ref()?;
            Some(format!("{}: {reason}", feed.feed))
        })
        .collect()
}

/// Logs the feeds a stop left stalled; true when there were any.
fn warn_stalled(before_stop: &StatusReport) -> bool {
    let stalled = stalled_feeds(before_stop);
    if !stalled.is_empty() {
        warn!(stalled = %stalled.join("; "), "stopped with feeds stalled: what they hold is re-delivered at the next start");
    }
    !stalled.is_empty()
}

/// `mongoose plugins list`: each loaded plugin (file, name, version, SDK, ABI, kinds)
/// and each refused file with its reason.
pub fn plugins_table(registry: &mongoose_plugin::host::PluginRegistry) -> String {
    let mut out = format!(
        "{:<32} {:<16} {:<10} {:<8} {:>3}  {}\n",
        "FILE", "NAME", "VERSION", "SDK", "ABI", "KINDS"
    );
    for plugin in registry.plugins() {
        let kinds: Vec<String> = plugin
            .kinds()
            .iter()
            .map(|kind| format!("{} ({})", kind.name, kind.role.as_str()))
            .collect();
        out.push_str(&format!(
            "{:<32} {:<16} {:<10} {:<8} {:>3}  {}\n",
            plugin
                .path()
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default(),
            plugin.name(),
            plugin.version(),
            plugin.sdk_version(),
            plugin.abi_version(),
            kinds.join(", ")
        ));
    }
    for refusal in registry.refused() {
        out.push_str(&format!(
            "refused: {}: {}\n",
            refusal
                .path
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default(),
            refusal.reason
        ));
    }
    out
}

/// A readable table of processor groups: running and quarantined processors (with the
/// reasons), mailbox depth, queued items and audit completeness.
pub fn groups_table(groups: &[mongoose_control::GroupStatus]) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<16} {:<10} {:>7} {:>11} {:>7} {:>6} {:>6}  {}\n",
        "GROUP", "STATE", "RUNNING", "QUARANTINED", "MAILBOX", "QUEUED", "AUDIT", "PROCESSORS"
    ));
    for group in groups {
        let mut processors: Vec<String> = group.running.iter().map(|p| p.name.clone()).collect();
        processors.extend(
            group
                .quarantined
                .iter()
                .map(|p| format!("{} (quarantined: {})", p.name, p.reason)),
        );
        out.push_str(&format!(
            "{:<16} {:<10} {:>7} {:>11} {:>7} {:>6} {:>6}  {}\n",
            group.group,
            format!("{:?}", group.state),
            group.running.len(),
            group.quarantined.len(),
            group.mailbox_depth,
            group.queued_items,
            if group.audit.complete { "ok" } else { "LOST" },
            processors.join(", "),
        ));
    }
    out
}

/// The sinks table of `mongoose status`: what each sink published, has queued,
/// waiting for a retry, held (with the first held outputs: key, why, attempts, next
/// try) and lost. A held output holds its feed's commit: its feed's LAG can be 0
/// while it waits here.
pub fn sinks_table(sinks: &[mongoose_sink::SinkStatus]) -> String {
    let mut out = format!(
        "{:<16} {:<10} {:>10} {:>8} {:>8} {:>6} {:>8} {:>6} {:>11}\n",
        "SINK", "KIND", "PUBLISHED", "QUEUED", "RETRYING", "HELD", "EXPIRED", "LOST", "UNCERTAIN"
    );
    for sink in sinks {
        out.push_str(&format!(
            "{:<16} {:<10} {:>10} {:>8} {:>8} {:>6} {:>8} {:>6} {:>11}\n",
            sink.name,
            sink.kind,
            sink.published,
            sink.queued,
            sink.retrying,
            sink.held_count,
            sink.expired,
            sink.lost,
            sink.uncertain
        ));
        if let Some(error) = &sink.cannot_deliver {
            out.push_str(&format!(
                "  cannot deliver (not ready until a delivery succeeds): {error}\n"
            ));
        }
        for held in &sink.held_outputs {
            let next = held.next_try_in_millis.map_or(
                "waits for POST /sinks/NAME/retry or a restart".to_owned(),
                |millis| format!("next try in {} ms", millis),
            );
            out.push_str(&format!(
                "  held {} ({}, {} attempts, last: {}; {next})\n",
                held.key, held.why, held.attempts, held.last_evidence
            ));
        }
        if sink.held_count > sink.held_outputs.len() as u64 {
            out.push_str(&format!(
                "  ... and {} more held\n",
                sink.held_count - sink.held_outputs.len() as u64
            ));
        }
    }
    out
}

/// A readable table of a status report: one line per feed with its lag.
pub fn status_table(report: &StatusReport) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "settled: {}   lossless: {}   fallback feeds: {}\n",
        report.settled,
        report.lossless,
        if report.fallback_feeds.is_empty() {
            "none".to_owned()
        } else {
            report.fallback_feeds.join(", ")
        }
    ));
    out.push_str(&format!(
        "{:<16} {:<13} {:>7} {:>8} {:<15} {:>10} {:>8} {:>6} {:>6} {:>8} {:>8}  {}\n",
        "FEED",
        "STATE",
        "SETTLED",
        "LOSSLESS",
        "POLICY",
        "PUBLISHED",
        "LAG",
        "PAUSED",
        "PAUSES",
        "DROPPED",
        "PENDING",
        "STALLED"
    ));
    for feed in &report.feeds {
        let lag: u64 = feed
            .subscribers
            .iter()
            .map(|queue| queue.position.saturating_sub(queue.dispatched))
            .sum();
        out.push_str(&format!(
            "{:<16} {:<13} {:>7} {:>8} {:<15} {:>10} {:>8} {:>6} {:>6} {:>8} {:>8}  {}\n",
            feed.feed,
            feed.state,
            feed.settled,
            feed.lossless,
            feed.policy,
            feed.sequence,
            lag,
            feed.paused,
            feed.pauses,
            feed.dropped + feed.refused + feed.completion_failures,
            feed.pending_acks,
            feed.stalled.as_deref().unwrap_or("-"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        let set = std::ffi::OsStr::new("1");
        let empty = std::ffi::OsStr::new("");
        assert!(colour_wanted(true, None));
        assert!(
            colour_wanted(true, Some(empty)),
            "an empty NO_COLOR is unset"
        );
        assert!(!colour_wanted(true, Some(set)));
        assert!(
            !colour_wanted(false, None),
            "a file or a pipe gets plain text"
        );
        assert!(!colour_wanted(false, Some(set)));
    }
}
