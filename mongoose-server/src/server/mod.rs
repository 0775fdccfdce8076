//! The server: wiring from a configuration, the lifecycle and the ordered shutdown.
//!
//! Its jobs live in submodules: `kinds` (processor kinds and what their factories and
//! settings checks are given), `builder` (the [`ServerBuilder`]: checks and wiring),
//! `lifecycle` (start, the ordered shutdown and its [`StopResult`]) and `codecs` (the
//! feeds' record codecs and [`replay`] of a recording). This module holds the
//! [`Server`] itself: its state, its status and its loss records.

mod build;
mod builder;
mod checks;
mod codecs;
mod kinds;
mod lifecycle;
mod preflight;
mod reload;
mod reload_keys;
mod taps;

pub use builder::ServerBuilder;
pub use codecs::replay;
pub use kinds::{
    ProcessorContext, ProcessorFactory, ProcessorKind, ProcessorReports, SettingsCheck,
    SettingsError, SettingsValidator, StatusReader,
};
pub use lifecycle::StopResult;
pub use reload::ReloadStatus;
pub use taps::TapRefused;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mongoose_control::{ControlPlane, GroupStatus, ProcessorSupplier};
use mongoose_core::EventSource;
use mongoose_delivery::{AnyFeed, DriverStop, FeedRegistry, StatusReport};
use parking_lot::Mutex;
use tracing::{error, warn};

use crate::config::ServerConfig;
use crate::sinks::{SharedConfig, Sinks};

use build::glob_source_config;

enum SourceSlot {
    Ready(Box<dyn EventSource>),
    Running {
        stop: DriverStop,
        thread: JoinHandle<()>,
    },
    Stopped,
}

struct FeedRuntime {
    name: String,
    publisher: Arc<dyn AnyFeed>,
    source: Mutex<SourceSlot>,
}

#[derive(Default)]
struct Lifecycle {
    started: bool,
    /// The start completed: a reload may change what runs.
    running: bool,
    stopping: bool,
    sources_stopped: bool,
    drained: bool,
    groups_closed: bool,
    committed_after_stop: bool,
    stopped: bool,
    last: Option<StopResult>,
}

struct Inner {
    /// The configuration the server started with.
    config: ServerConfig,
    /// The configuration it runs now (the last a reload applied).
    running: SharedConfig,
    kinds: BTreeMap<String, ProcessorKind>,
    code_processors: Mutex<Vec<(String, String, ProcessorSupplier)>>,
    /// The names of the feeds added by code (a reloaded config may name them).
    code_feed_names: Vec<String>,
    registry: FeedRegistry,
    plane: ControlPlane,
    feeds: Mutex<Vec<Arc<FeedRuntime>>>,
    sinks: Sinks,
    /// The processors' own statuses (`/status`, under `processors`).
    reports: kinds::ProcessorReports,
    /// The plugins of `plugin_dir`, for feeds and sinks a reload adds.
    plugins: Option<Arc<mongoose_plugin::host::PluginRegistry>>,
    /// The kill switch of configured feeds, for feeds a reload adds.
    kill_switch: mongoose_delivery::KillSwitch,
    /// Registers feeds with the control plane's view of them.
    connector: mongoose_control::DeliveryFeeds,
    /// The reloads so far: one at a time, their count and the last outcome.
    reloads: Mutex<reload::Reloads>,
    /// With `[record]`: this run's recording folder (`record.dir/run-N`), made at start;
    /// a group a reload adds records into it too.
    recording_run: Mutex<Option<std::path::PathBuf>>,
    lifecycle: Mutex<Lifecycle>,
    /// Why the run cannot go on: a source that could not start, a kill switch.
    failures: Arc<Mutex<Vec<String>>>,
    /// Processors whose add at start was not applied (REPORT policy).
    failed_adds: Mutex<Vec<String>>,
    /// The loss records of earlier runs this start reported, per loss file: marked
    /// reported once this run ends ([`Server::mark_earlier_losses_reported`]).
    earlier_losses: Mutex<Vec<(std::path::PathBuf, usize)>>,
    /// The data folder's lock, held until a complete shutdown (none when the server
    /// keeps no state there: no file feed with a pointer, no file sink).
    data_lock: Mutex<Option<crate::config::data_dir::DataFolderLock>>,
}

/// The failed plugin sources of `report`, one reason each (see
/// [`Server::source_failures`]).
pub(crate) fn source_failures_in(report: &StatusReport) -> Vec<String> {
    report
        .feeds
        .iter()
        .filter_map(|feed| {
            let detail = feed.detail.as_deref()?;
            detail
                .starts_with(mongoose_plugin::host::SOURCE_FAILED)
                .then(|| format!("feed '{}': {detail}", feed.feed))
        })
        .collect()
}

/// What the reason of a feed held by a sink's `hold` policy says (see
/// `mongoose_sink::runner`).
const HELD_OUTPUT: &str = "its feed's commit is held";

/// A running Mongoose server: feeds with their sources, processor groups, the status.
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("feeds", &self.inner.registry)
            .finish()
    }
}

impl Server {
    /// The configuration the server started with. A reload (SIGHUP) changes only its
    /// feeds, groups, processors and sinks: [`Server::running_config`] is the one it
    /// runs now.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// The configuration the server runs now: the one it started with, or the last one
    /// a reload applied.
    pub fn running_config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.inner.running.read())
    }

    /// The feeds, for the admin API and embedders.
    pub fn registry(&self) -> &FeedRegistry {
        &self.inner.registry
    }

    /// The control plane.
    pub fn control(&self) -> &ControlPlane {
        &self.inner.plane
    }

    /// The status of every feed. A sink that counted an output lost makes the run not
    /// `lossless`; outputs queued or waiting for a retry make it not `settled`.
    pub fn status(&self) -> StatusReport {
        let mut report = self.inner.registry.status();
        for sink in self.inner.sinks.statuses() {
            report.lossless &= sink.lost == 0;
            report.settled &= sink.queued == 0 && sink.retrying == 0 && sink.held_count == 0;
        }
        report
    }

    /// The processors' own statuses (an aggregate's counters), by `group/name`.
    pub fn processor_reports(&self) -> serde_json::Map<String, serde_json::Value> {
        self.inner.reports.read()
    }

    /// What each configured sink has done (`published`, `not_published`,
    /// `uncertain`, `retrying`, `expired`, `lost`, `queued`, `held`).
    pub fn sink_statuses(&self) -> Vec<mongoose_sink::SinkStatus> {
        self.inner.sinks.statuses()
    }

    /// Asks sink `name` to try every output waiting for a retry, and every held one,
    /// now (`POST /sinks/{name}/retry`).
    ///
    /// # Errors
    /// No running sink of that name (the message lists the configured ones).
    pub fn retry_sink(&self, name: &str) -> Result<mongoose_sink::RetryRequested, String> {
        self.inner.sinks.retry_now(name)
    }

    /// The status of every processor group.
    pub fn group_statuses(&self) -> Vec<GroupStatus> {
        let plane = &self.inner.plane;
        plane
            .group_names()
            .iter()
            .filter_map(|name| plane.group_status(name))
            .collect()
    }

    /// Why the run cannot go on, one reason each: a source that could not start, an
    /// overload kill switch that ran. [`crate::cli::run_until_done`] ends the run (exit
    /// 1) as soon as there is one.
    pub fn fatal_failures(&self) -> Vec<String> {
        self.inner.failures.lock().clone()
    }

    /// Plugin sources that failed (a panic caught at the plugin boundary), one reason
    /// each (`feed 'NAME': ...`, with the panic's message): such a feed delivers nothing
    /// more in this run and keeps its committed position; the other feeds go on.
    pub fn source_failures(&self) -> Vec<String> {
        source_failures_in(&self.status())
    }

    /// Processors (and plugin sources) that failed, one reason each: an add at start
    /// that was not applied (REPORT policy), every quarantined processor and every
    /// failed plugin source ([`Server::source_failures`]). The server goes on without
    /// them; a run that waits to settle ends (exit 1) once they leave nothing able to
    /// make progress.
    pub fn processor_failures(&self) -> Vec<String> {
        let mut failures = self.inner.failed_adds.lock().clone();
        failures.extend(self.source_failures());
        for group in self.group_statuses() {
            for processor in &group.quarantined {
                failures.push(format!(
                    "processor '{}/{}' was quarantined: {}",
                    group.group, processor.name, processor.reason
                ));
            }
        }
        // an output a sink gave up under the hold policy holds its feed for the rest
        // of the run: nothing more can make progress there
        for feed in self.status().feeds {
            if let Some(reason) = feed.stalled {
                if reason.contains(HELD_OUTPUT) {
                    failures.push(format!(
                        "feed '{}' is held by an output its sink could not publish: {reason}",
                        feed.feed
                    ));
                }
            }
        }
        failures
    }

    /// The last shutdown attempt's result.
    pub fn last_stop_result(&self) -> Option<StopResult> {
        self.inner.lifecycle.lock().last.clone()
    }

    /// Waits until a shutdown completed (use after a handed-off stop).
    pub fn await_stopped(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.inner.lifecycle.lock().stopped {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A feed by name.
    pub fn feed(&self, name: &str) -> Option<Arc<dyn AnyFeed>> {
        self.inner.registry.get(name)
    }

    /// The loss file of a configured feed that keeps a pointer
    /// ([`crate::losses::loss_path`]); `None` for other feeds.
    pub fn loss_file(&self, feed: &str) -> Option<std::path::PathBuf> {
        loss_file_of(&self.running_config(), feed)
    }

    /// Records a loss of `feed` in the log and, for a feed that keeps a pointer, in
    /// its loss file, so the next start reports it once.
    pub fn record_loss(&self, feed: &str, what: String) {
        record_loss_of(&self.running_config(), feed, what);
    }

    /// Reports the losses earlier runs recorded beside the feeds' pointers: a WARN
    /// each, and the feed is not lossless in this run. They are marked reported only
    /// when this run ends ([`Server::mark_earlier_losses_reported`]): a run killed
    /// after its start reported them leaves them for the next start.
    fn report_earlier_losses(&self) {
        let mut reported = Vec::new();
        for feed in &self.running_config().feeds {
            let Some(path) = self.loss_file(&feed.name) else {
                continue;
            };
            match crate::losses::read_unreported(&path) {
                Ok(records) if records.is_empty() => {}
                Ok(records) => {
                    for record in &records {
                        warn!(feed = %feed.name, at_millis = record.at_millis, what = %record.what,
                            "an earlier run of this feed was not lossless (reported until a run that reports it ends; this run is not lossless either)");
                    }
                    if let Some(found) = self.inner.registry.get(&feed.name) {
                        found.note_earlier_losses(records.len() as u64);
                    }
                    reported.push((path, records.len()));
                }
                Err(error) => {
                    error!(feed = %feed.name, file = %path.display(), %error, "cannot read the loss records of earlier runs");
                }
            }
        }
        *self.inner.earlier_losses.lock() = reported;
    }

    /// Marks the earlier losses this run's start reported as reported: call it once
    /// the run has ended (its status, not lossless, was told). Losses found during
    /// this run stay for the next start.
    pub fn mark_earlier_losses_reported(&self) {
        let reported = std::mem::take(&mut *self.inner.earlier_losses.lock());
        for (path, count) in reported {
            if let Err(error) = crate::losses::mark_reported(&path, count) {
                error!(file = %path.display(), %error, "cannot mark the loss records of earlier runs reported: the next start reports them again");
            }
        }
    }
}

/// The loss file of `feed` when `config` has it keep a position: a file feed's beside
/// its pointer ([`crate::losses::loss_path`]), a plugin feed's (its positions kept by
/// its source, a broker's committed offsets say) in its state folder,
/// `<data_dir>/feeds/<feed>-<key>/source.losses`. `None` for other feeds (read ONCE,
/// or a feed that keeps no position).
pub(crate) fn loss_file_of(config: &ServerConfig, feed: &str) -> Option<std::path::PathBuf> {
    let index = config
        .feeds
        .iter()
        .position(|candidate| candidate.name == feed && candidate.read_strategy.has_pointer())?;
    let found = &config.feeds[index];
    if !found.is_file() {
        return Some(config.feed_state_dir(index).join(PLUGIN_LOSS_FILE));
    }
    if found.is_glob() {
        // beside the glob feed's lane registry
        return Some(crate::losses::loss_path(
            &glob_source_config(config, index).registry_path(),
        ));
    }
    Some(crate::losses::loss_path(
        &mongoose_source_file::pointer::pointer_path_in(
            Some(&config.feed_state_dir(index)),
            &config.resolve(&found.path),
        ),
    ))
}

/// The name of a plugin feed's loss file in its state folder.
const PLUGIN_LOSS_FILE: &str = "source.losses";

/// Appends a record of `what`, a loss of `feed`, to its loss file `path` (its folder
/// made when missing), synced; an error is logged (the loss is in this run's status
/// either way).
pub(crate) fn keep_loss(path: &std::path::Path, feed: &str, what: String) {
    let kept = match path.parent() {
        Some(folder) => std::fs::create_dir_all(folder),
        None => Ok(()),
    }
    .and_then(|()| crate::losses::append(path, &crate::losses::LossRecord::now(feed, what)));
    if let Err(error) = kept {
        error!(feed, file = %path.display(), %error, "cannot keep the loss record in the loss file: the next start will not report it");
    }
}

/// [`Server::record_loss`] with the server's `config`.
pub(crate) fn record_loss_of(config: &ServerConfig, feed: &str, what: String) {
    warn!(feed, %what, "loss recorded: the next start reports it once");
    let Some(path) = loss_file_of(config, feed) else {
        warn!(
            feed,
            "the feed keeps no pointer, so no loss file: the next start cannot report this loss"
        );
        return;
    };
    keep_loss(&path, feed, what);
}
