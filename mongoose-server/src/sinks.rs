//! The sinks declared in the configuration (`[[sinks]]`): each runs on its own thread
//! ([`mongoose_sink::SinkRunner`]), and a processor writes to one through a
//! [`SinkWriter`] its kind's factory takes from [`crate::ProcessorContext::sink`]. The
//! writer holds each output's input (its feed and the processor's group) until the
//! output is published, so the feed's position is committed only then.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::sink::{CommitGate, ExhaustedPolicy, RetryBudget, Sink};
use mongoose_delivery::FeedRegistry;
use mongoose_plugin::host::{PluginRegistry, PluginSink};
use mongoose_sink::{
    FileSink, FileSinkConfig, HttpSink, HttpSinkConfig, HttpTlsConfig, LossRecorder, LostOutput,
    RetryRequested, RunnerConfig, SinkRunner, SinkStatus, SinkWriter, StdoutSink, TcpSink,
    TcpSinkConfig,
};
use parking_lot::Mutex;

use crate::config::{ServerConfig, SinkConfig};
use crate::error::ServerError;

/// The configured sinks, running, by name.
pub struct Sinks {
    runners: Mutex<BTreeMap<String, SinkRunner>>,
    /// The statuses of the sinks once stopped.
    stopped: Mutex<Vec<SinkStatus>>,
    names: Mutex<Vec<String>>,
    /// The feeds whose commits the writers hold (none: a replay's sinks hold nothing).
    registry: Option<FeedRegistry>,
    /// Where a `count_loss` sink records its losses (none for a replay).
    losses: Option<Arc<dyn LossRecorder>>,
    /// Every sink keeps its outputs here instead (the config unit tests).
    capture: Option<crate::unit_tests::SinkCapture>,
}

impl std::fmt::Debug for Sinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sinks")
            .field("names", &*self.names.lock())
            .finish()
    }
}

/// The configuration a server runs now: the one it started with, or the last one a
/// reload applied.
pub(crate) type SharedConfig = Arc<parking_lot::RwLock<Arc<ServerConfig>>>;

fn runner_config(sink: &SinkConfig) -> RunnerConfig {
    let mut config = RunnerConfig::new(&sink.name, &sink.kind);
    let defaults = RetryBudget::default();
    config.budget = RetryBudget {
        max_retries: sink.max_retries.unwrap_or(defaults.max_retries),
        initial_backoff: sink
            .initial_backoff_millis
            .map_or(defaults.initial_backoff, Duration::from_millis),
        max_backoff: sink
            .max_backoff_millis
            .map_or(defaults.max_backoff, Duration::from_millis),
        expire_after: sink
            .expire_after_millis
            .map_or(defaults.expire_after, Duration::from_millis),
    };
    config.policy = sink.on_exhausted.unwrap_or(ExhaustedPolicy::Hold);
    let file = sink.kind == "file";
    // measured on 1 GiB of 100-byte lines into a file sink: 16,384 / 8,192 ran in
    // 3.1 s with a peak RSS of 56 MiB, 65,536 / 16,384 in 3.5 s with 75 MiB
    // an HTTP sink that batches gets its batch's lines per publish, waiting up to
    // batch_timeout_millis to fill them
    let http_lines = http_batch_lines(sink);
    config.batch = sink.batch.unwrap_or(if file {
        8_192
    } else if http_lines > 1 {
        http_lines
    } else {
        1_024
    });
    if http_lines > 1 {
        config.linger = Duration::from_millis(
            sink.batch_timeout_millis
                .unwrap_or(DEFAULT_HTTP_BATCH_TIMEOUT_MILLIS),
        );
    }
    config.capacity = sink.queue_capacity.unwrap_or(16_384);
    config
}

/// How long an HTTP sink's batch that is not full waits for more outputs, by default.
const DEFAULT_HTTP_BATCH_TIMEOUT_MILLIS: u64 = 200;

/// The most outputs in one request of an `http` sink (1 for every other kind).
fn http_batch_lines(sink: &SinkConfig) -> usize {
    if sink.kind == "http" {
        sink.batch_max_lines.unwrap_or(1)
    } else {
        1
    }
}

/// Opens the sink a `[[sinks]]` entry describes (a file sink creates its file and cuts
/// off what was written past its durable length).
/// Makes (and drops) each network sink (`tcp`, `http`): their settings checks, with
/// nothing connected, opened or written.
pub(crate) fn check_network_sinks(config: &ServerConfig) -> Result<(), ServerError> {
    for sink in config
        .sinks
        .iter()
        .filter(|sink| matches!(sink.kind.as_str(), "tcp" | "http"))
    {
        open_sink(config, sink, None)?;
    }
    Ok(())
}

fn open_sink(
    config: &ServerConfig,
    sink: &SinkConfig,
    plugins: Option<&PluginRegistry>,
) -> Result<Box<dyn Sink>, ServerError> {
    let refused = |error: mongoose_sink::SinkError| match error {
        // not the configuration: its state (the run is refused, exit 1)
        mongoose_sink::SinkError::State { .. } => ServerError::StateRefused {
            what: format!("sinks.{}", sink.name),
            message: error.to_string(),
        },
        _ => ServerError::invalid(format!("sinks.{}", sink.name), error.to_string()),
    };
    let connect = sink.connect_timeout_millis.unwrap_or(5_000);
    Ok(match sink.kind.as_str() {
        "file" => {
            let path = config.resolve(sink.path.as_deref().unwrap_or(std::path::Path::new("")));
            // its folder is made (the preflight checked that it can be)
            if let Some(folder) = path
                .parent()
                .filter(|folder| !folder.as_os_str().is_empty())
            {
                std::fs::create_dir_all(folder).map_err(|error| ServerError::Io {
                    context: format!(
                        "sink '{}': cannot create the folder {}",
                        sink.name,
                        folder.display()
                    ),
                    error,
                })?;
            }
            // with the data folder locked: a start's, or a reload's that adds the sink
            config.adopt_sink_state(sink, &path)?;
            let state_file = config.sink_state_file(sink, &path);
            if let Some(folder) = state_file.parent() {
                config.warn_about_orphan_state("sink", folder);
            }
            Box::new(
                FileSink::open(
                    &sink.name,
                    &FileSinkConfig {
                        path,
                        sync: sink.sync.unwrap_or(true),
                        state_file: Some(state_file),
                    },
                )
                .map_err(refused)?,
            )
        }
        "stdout" => Box::new(StdoutSink::default()),
        "tcp" => Box::new(
            TcpSink::new(
                &sink.name,
                TcpSinkConfig {
                    address: sink.address.clone().unwrap_or_default(),
                    connect_timeout_millis: connect,
                    write_timeout_millis: sink.write_timeout_millis.unwrap_or(10_000),
                },
            )
            .map_err(refused)?,
        ),
        "http" => {
            let defaults = HttpSinkConfig::default();
            let file = |path: &Option<std::path::PathBuf>| path.as_ref().map(|p| config.resolve(p));
            Box::new(
                HttpSink::new(
                    &sink.name,
                    HttpSinkConfig {
                        url: sink.url.clone().unwrap_or_default(),
                        timeout_millis: connect,
                        response_timeout_millis: sink.response_timeout_millis.unwrap_or(10_000),
                        headers: sink.http_headers(|path| config.resolve(path))?,
                        batch_max_lines: http_batch_lines(sink),
                        batch_max_bytes: sink.batch_max_bytes.unwrap_or(defaults.batch_max_bytes),
                        compression: sink.compression.unwrap_or_default(),
                        tls: HttpTlsConfig {
                            ca_file: file(&sink.ca_file),
                            client_cert_file: file(&sink.client_cert_file),
                            client_key_file: file(&sink.client_key_file),
                        },
                    },
                )
                .map_err(refused)?,
            )
        }
        // a plugin's sink kind (the build checked that a loaded plugin declares it)
        other => {
            let Some(plugins) = plugins else {
                return Err(ServerError::invalid(
                    format!("sinks.{}", sink.name),
                    format!("unknown sink kind '{other}' and no plugin_dir is set"),
                ));
            };
            let settings =
                toml::to_string(&sink.settings.clone().unwrap_or_default()).map_err(|error| {
                    ServerError::invalid(format!("sinks.{}.settings", sink.name), error.to_string())
                })?;
            Box::new(
                PluginSink::create(plugins, other, &sink.name, &settings).map_err(|error| {
                    ServerError::invalid(format!("sinks.{}.settings", sink.name), error.to_string())
                })?,
            )
        }
    })
}

/// Records the outputs a sink's `count_loss` policy gives up in the loss file beside
/// their feed's pointer (as an operator release is), before their inputs may be
/// committed: the next start reports them once, and that run is not lossless either.
#[derive(Debug)]
struct FeedLossFiles {
    config: SharedConfig,
}

/// How many keys a loss record names (the rest are counted).
const KEYS_NAMED: usize = 5;

impl LossRecorder for FeedLossFiles {
    fn record(&self, sink: &str, lost: &[LostOutput]) {
        let mut by_feed: BTreeMap<&str, Vec<&LostOutput>> = BTreeMap::new();
        for output in lost {
            by_feed.entry(&output.key.feed).or_default().push(output);
        }
        for (feed, outputs) in by_feed {
            let mut named: Vec<String> = outputs
                .iter()
                .take(KEYS_NAMED)
                .map(|output| format!("{} {} ({})", output.key, output.why, output.evidence))
                .collect();
            if outputs.len() > KEYS_NAMED {
                named.push(format!("and {} more", outputs.len() - KEYS_NAMED));
            }
            let config = Arc::clone(&self.config.read());
            crate::server::record_loss_of(
                &config,
                feed,
                format!(
                    "sink '{sink}' counted {} outputs lost (on_exhausted = \"count_loss\"): {}",
                    outputs.len(),
                    named.join("; ")
                ),
            );
        }
    }
}

/// A new participant in the processing checkpoint of `feed` for `group` (`None`: no
/// registry, as in a replay, or no such feed).
fn gate_of(
    registry: Option<&FeedRegistry>,
    feed: &str,
    group: &str,
) -> Option<Arc<dyn CommitGate>> {
    let feed = registry?.get(feed)?;
    Some(Arc::new(feed.hold(group).participant()))
}

impl Sinks {
    /// Opens and starts every configured sink. `registry`: the feeds whose commits the
    /// writers hold (`None` for a replay); `plugins`: the loaded plugins, for a sink of a
    /// plugin's kind; `capture`: every sink keeps its outputs there instead (the config
    /// unit tests).
    ///
    /// # Errors
    /// A sink that cannot be opened (its file, its settings), or a thread that cannot
    /// start.
    pub(crate) fn open(
        shared: &SharedConfig,
        registry: Option<FeedRegistry>,
        plugins: Option<&PluginRegistry>,
        capture: Option<crate::unit_tests::SinkCapture>,
    ) -> Result<Self, ServerError> {
        let config = Arc::clone(&shared.read());
        // a replay's sinks record no loss: the run it replays did
        let losses: Option<Arc<dyn LossRecorder>> = registry.as_ref().map(|_| {
            Arc::new(FeedLossFiles {
                config: Arc::clone(shared),
            }) as Arc<dyn LossRecorder>
        });
        let sinks = Sinks {
            names: Mutex::default(),
            runners: Mutex::default(),
            stopped: Mutex::new(Vec::new()),
            registry,
            losses,
            capture,
        };
        for sink in &config.sinks {
            sinks.add(&config, sink, plugins)?;
        }
        Ok(sinks)
    }

    /// Opens and starts the sink `sink` of `config` (at start, or added by a reload).
    ///
    /// # Errors
    /// The sink cannot be opened (its file, its settings), or its thread cannot start.
    pub(crate) fn add(
        &self,
        config: &ServerConfig,
        sink: &SinkConfig,
        plugins: Option<&PluginRegistry>,
    ) -> Result<(), ServerError> {
        let opened = match &self.capture {
            Some(capture) => capture.sink(&sink.name),
            None => open_sink(config, sink, plugins)?,
        };
        let runner = SinkRunner::start_with(opened, runner_config(sink), self.losses.clone())
            .map_err(|error| {
                ServerError::invalid(
                    format!("sinks.{}", sink.name),
                    format!("cannot start the sink's thread: {error}"),
                )
            })?;
        let mut runners = self.runners.lock();
        runners.insert(sink.name.clone(), runner);
        *self.names.lock() = runners.keys().cloned().collect();
        // a sink of this name that a reload removed earlier is now this one
        self.stopped
            .lock()
            .retain(|status| status.name != sink.name);
        Ok(())
    }

    /// Gives the running sink `sink.name` the settings of `sink` that a reload may change
    /// live (retries, batch, linger; with `reopen`, a network sink opened again with
    /// `sink`'s timeouts and request sizes): its thread takes them between two batches.
    ///
    /// # Errors
    /// No such sink runs, or the sink cannot be opened with the new settings (nothing
    /// changed then).
    pub(crate) fn retune(
        &self,
        config: &ServerConfig,
        sink: &SinkConfig,
        reopen: bool,
    ) -> Result<(), ServerError> {
        let replacement = if reopen && matches!(sink.kind.as_str(), "http" | "tcp") {
            Some(open_sink(config, sink, None)?)
        } else {
            None
        };
        let settings = runner_config(sink);
        let runners = self.runners.lock();
        let Some(runner) = runners.get(&sink.name) else {
            return Err(ServerError::invalid(
                format!("sinks.{}", sink.name),
                "the sink is not running",
            ));
        };
        runner.handle().retune(mongoose_sink::Retune {
            budget: settings.budget,
            batch: settings.batch,
            linger: settings.linger,
            sink: replacement,
        });
        Ok(())
    }

    /// Stops the sink `name` (removed by a reload): it publishes what is queued until
    /// `deadline`; what is left keeps its inputs uncommitted. Its last status stays in
    /// [`Sinks::statuses`]. `None` when no such sink runs.
    pub(crate) fn remove(&self, name: &str, deadline: Instant) -> Option<SinkStatus> {
        let runner = {
            let mut runners = self.runners.lock();
            let runner = runners.remove(name)?;
            *self.names.lock() = runners.keys().cloned().collect();
            runner
        };
        let status = runner.stop(deadline);
        self.stopped.lock().push(status.clone());
        Some(status)
    }

    /// A writer to sink `name` for processor `processor` of `group`: each output it
    /// writes holds its input's commit (its feed, this group) until the output is over,
    /// and is keyed by its writer, `group/processor` (so two processors writing into one
    /// sink never share keys, whatever their place in the configuration).
    ///
    /// # Errors
    /// No sink of that name (the message lists the configured ones).
    pub fn writer(&self, name: &str, group: &str, processor: &str) -> Result<SinkWriter, String> {
        let (handle, gates, writer) = self.writer_parts(name, group, processor)?;
        Ok(SinkWriter::new(handle, gates).named(&writer))
    }

    /// Attaches a tap of sink `name`'s outputs ([`mongoose_sink::SinkHandle::attach_tap`]):
    /// `Ok(None)` when it serves as many taps as it can; the sinks' names when there is
    /// no such sink.
    pub(crate) fn attach_tap(
        &self,
        name: &str,
        capacity: usize,
    ) -> Result<Option<mongoose_core::tap::TapReceiver>, Vec<String>> {
        let runners = self.runners.lock();
        match runners.get(name) {
            Some(runner) => Ok(runner.handle().attach_tap(capacity)),
            None => Err(runners.keys().cloned().collect()),
        }
    }

    /// What [`Sinks::writer`] builds its writer of: the sink's handle, the gates of its
    /// outputs' feeds for `group`, and the writer's name (`group/processor`), for a
    /// processor that tracks its outputs' outcomes itself (the ledger).
    ///
    /// # Errors
    /// As [`Sinks::writer`].
    pub fn writer_parts(
        &self,
        name: &str,
        group: &str,
        processor: &str,
    ) -> Result<(mongoose_sink::SinkHandle, mongoose_sink::GateSource, String), String> {
        let runners = self.runners.lock();
        let Some(runner) = runners.get(name) else {
            return Err(format!(
                "no sink named '{name}': configured sinks are [{}]; declare it under [[sinks]]",
                self.names.lock().join(", ")
            ));
        };
        let registry = self.registry.clone();
        let gate_group = group.to_owned();
        let gates: mongoose_sink::GateSource =
            Arc::new(move |feed: &str| gate_of(registry.as_ref(), feed, &gate_group));
        Ok((runner.handle(), gates, format!("{group}/{processor}")))
    }

    /// The commit gate of `feed` for processors of `group` (`None`: no registry, as in a
    /// replay, or no such feed).
    pub fn gate(&self, feed: &str, group: &str) -> Option<Arc<dyn CommitGate>> {
        gate_of(self.registry.as_ref(), feed, group)
    }

    /// Asks sink `name` to try every waiting and held output now.
    ///
    /// # Errors
    /// No running sink of that name (the message lists the configured ones).
    pub fn retry_now(&self, name: &str) -> Result<RetryRequested, String> {
        match self.runners.lock().get(name) {
            Some(runner) => Ok(runner.handle().retry_now()),
            None => Err(format!(
                "no running sink named '{name}': configured sinks are [{}]",
                self.names.lock().join(", ")
            )),
        }
    }

    /// What each sink has done.
    pub fn statuses(&self) -> Vec<SinkStatus> {
        let mut statuses: Vec<SinkStatus> = self
            .runners
            .lock()
            .values()
            .map(|runner| runner.handle().status())
            .collect();
        statuses.extend(self.stopped.lock().iter().cloned());
        statuses.sort_by(|a, b| a.name.cmp(&b.name));
        statuses
    }

    /// Waits until every running sink has nothing queued or waiting for a retry, or
    /// until `deadline`; true when they are idle. A sink a reload removed is stopped:
    /// what it kept will not move (its inputs stay uncommitted), so it is not waited
    /// for (waiting spent the whole shutdown bound, and the groups then had no time to
    /// close: an incomplete stop, exit 4).
    pub fn await_idle(&self, deadline: Instant) -> bool {
        loop {
            let idle = self
                .runners
                .lock()
                .values()
                .map(|runner| runner.handle().status())
                .all(|status| status.queued == 0 && status.retrying == 0);
            if idle || Instant::now() >= deadline {
                return idle;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Stops every sink: each publishes what is queued until `deadline`; what is left
    /// keeps its inputs uncommitted.
    pub fn stop(&self, deadline: Instant) -> Vec<SinkStatus> {
        let runners = std::mem::take(&mut *self.runners.lock());
        let stopped: Vec<SinkStatus> = runners
            .into_values()
            .map(|runner| runner.stop(deadline))
            .collect();
        self.stopped.lock().extend(stopped.iter().cloned());
        stopped
    }
}
