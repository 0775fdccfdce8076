//! The server's lifecycle: the start (groups and processors, then sources) and the
//! ordered shutdown with its truthful [`StopResult`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_control::{GroupOptions, ProcessorSupplier, ReplyOutcome};
use mongoose_core::{agent, IdleStrategy};
use mongoose_delivery::SourceDriver;
use mongoose_replay::{RecordConfig, Recorder};
use parking_lot::Mutex;
use serde::Serialize;
use tracing::{error, info, warn};

use crate::config::{AddFailurePolicy, GroupConfig, ProcessorConfig, ServerConfig};
use crate::ServerError;

use super::build::idle_strategy;
use super::codecs::{feed_codecs, kind_name, new_recording_run};
use super::kinds::ProcessorContext;
use super::{FeedRuntime, Server, SourceSlot};

/// The truthful result of a shutdown (book: guarantees/control-plane.md).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StopResult {
    /// Everything stopped.
    pub complete: bool,
    /// Called on an agent thread: the stop runs on a `mongoose-server-stop` thread.
    pub handed_off: bool,
    /// The startup step that blocked this attempt, if any.
    pub blocked_startup: Option<String>,
    /// Groups (and bracketed notes such as `<event sources stopping>`, and
    /// `capture:<group> <audit capture stopping>` for capture resources not closed or
    /// whose close failed) not confirmed finished, and processors a group retains (`processor:<group>/<name>`: a
    /// quarantined processor, or any processor of a dead group). Names for people, not
    /// a protocol to parse.
    pub groups_running: Vec<String>,
    /// Services not confirmed stopped: a retained processor or a group not closed may
    /// still use them, their stop is still running on its helper, or their stop failed
    /// (a failed stop is never called again).
    pub services_left_running: Vec<String>,
}

impl Server {
    /// Starts the server: processor groups and their processors first (each processor
    /// subscribes in its start), then the sources, then the start completes (cached
    /// startup items are delivered).
    pub fn start(&self) -> Result<(), ServerError> {
        let inner = &self.inner;
        {
            let mut lifecycle = inner.lifecycle.lock();
            if lifecycle.started {
                return Err(ServerError::State("the server was already started".into()));
            }
            lifecycle.started = true;
        }
        if inner.config.admin.is_some() {
            // a server with /metrics records from its first line: a counter a processor
            // bumps while the run loop is not running yet would go to no recorder
            crate::metrics::prometheus();
        }
        info!(
            feeds = inner.feeds.lock().len(),
            groups = inner.config.groups.len(),
            "server starting"
        );
        if let Some(record) = &inner.config.record {
            let run = new_recording_run(&inner.config.resolve(&record.dir))?;
            info!(dir = %run.display(), "this run records into a new folder");
            *inner.recording_run.lock() = Some(run);
        }
        for group in &inner.config.groups {
            self.create_configured_group(&inner.config, group)?;
        }
        inner.plane.start()?;
        let mut adds = Vec::new();
        for group in &inner.config.groups {
            for processor in &group.processors {
                adds.push(self.configured_processor(&inner.config, &group.name, processor)?);
            }
        }
        adds.extend(inner.code_processors.lock().drain(..));
        for (group, name, supplier) in adds {
            self.add_processor(&group, &name, supplier)?;
        }
        self.report_earlier_losses();
        for feed in inner.feeds.lock().iter() {
            Self::start_source(feed, &inner.failures);
        }
        for feed in inner.registry.feeds() {
            feed.start_complete();
        }
        inner.lifecycle.lock().running = true;
        info!("server started");
        Ok(())
    }

    /// Creates the configured group `group` (recording it when `config` has a
    /// `[record]` section): at start, and for a group a reload adds.
    pub(super) fn create_configured_group(
        &self,
        config: &ServerConfig,
        group: &GroupConfig,
    ) -> Result<(), ServerError> {
        let recording_run = self.inner.recording_run.lock().clone();
        let recorder = match (&config.record, recording_run) {
            (Some(record), Some(run)) => {
                let dir = run.join(&group.name);
                let record_config =
                    RecordConfig::new(record.processors.clone(), feed_codecs(config));
                let recorder = Recorder::create(&dir, record_config).map_err(|error| {
                    ServerError::invalid(
                        "record.dir",
                        format!("cannot record into {}: {error}", dir.display()),
                    )
                })?;
                info!(group = %group.name, dir = %dir.display(), "recording processor inputs");
                Some(Box::new(recorder) as Box<dyn mongoose_control::GroupRecorder>)
            }
            _ => None,
        };
        self.inner.plane.create_group(
            &group.name,
            GroupOptions {
                idle: idle_strategy(group.idle_strategy),
                core: group.core,
                recorder,
                ..GroupOptions::default()
            },
        )?;
        Ok(())
    }

    /// The supplier of configured processor `processor` of `group`, built by its kind's
    /// factory with `config`'s feeds and folder.
    pub(super) fn configured_processor(
        &self,
        config: &ServerConfig,
        group: &str,
        processor: &ProcessorConfig,
    ) -> Result<(String, String, ProcessorSupplier), ServerError> {
        let inner = &self.inner;
        let factory = Arc::clone(&inner.kinds[&processor.kind].build);
        let context = ProcessorContext {
            name: &processor.name,
            group,
            settings: &processor.settings,
            base_dir: &config.base_dir,
            sinks: &inner.sinks,
            feeds: &config.feeds,
            reports: &inner.reports,
        };
        let built = factory(&context).map_err(|message| ServerError::ProcessorSettings {
            name: processor.name.clone(),
            kind: processor.kind.clone(),
            message,
        })?;
        let supplier = ProcessorSupplier::boxed(move || built).named(kind_name(&processor.kind));
        Ok((group.to_owned(), processor.name.clone(), supplier))
    }

    /// Adds a processor through the control plane and waits for its reply (up to
    /// `control_wait_millis`); a reply that is not APPLIED follows `add_failure_policy`.
    pub(super) fn add_processor(
        &self,
        group: &str,
        name: &str,
        supplier: ProcessorSupplier,
    ) -> Result<(), ServerError> {
        let inner = &self.inner;
        let wait = Duration::from_millis(inner.config.control_wait_millis);
        let added = inner.plane.add_processor(group, name, supplier);
        match added.reply.wait_for(wait) {
            Ok(reply) if reply.outcome == ReplyOutcome::Applied => {
                info!(group = %group, processor = %name, "processor started");
            }
            Ok(reply) => {
                let message = format!(
                    "processor '{group}/{name}' not added: {:?} ({:?}): {}",
                    reply.outcome, reply.kind, reply.reason
                );
                match inner.config.add_failure_policy {
                    AddFailurePolicy::Report => {
                        error!("{message}");
                        inner.failed_adds.lock().push(message);
                    }
                    AddFailurePolicy::Throw => return Err(ServerError::State(message)),
                }
            }
            Err(error) => {
                warn!(group = %group, processor = %name, %error, "no reply to the add in time; it still applies")
            }
        }
        Ok(())
    }

    pub(super) fn start_source(feed: &FeedRuntime, failures: &Arc<Mutex<Vec<String>>>) {
        let mut slot = feed.source.lock();
        let SourceSlot::Ready(mut source) = std::mem::replace(&mut *slot, SourceSlot::Stopped)
        else {
            return;
        };
        // the feed has a source: it is behind until the source says otherwise, never a
        // silent (fallback) feed judged on drained alone while its thread starts
        feed.publisher.report_source_starting();
        // the driver polls acknowledgements and flushes paused items around each duty
        // cycle, idles, retries a failing cycle and polls once more at the stop
        let driver = SourceDriver::new(&feed.name, IdleStrategy::default());
        let stop = driver.stop_handle();
        let publisher = Arc::clone(&feed.publisher);
        let name = feed.name.clone();
        let failed = Arc::clone(failures);
        let thread = std::thread::Builder::new()
            .name(format!("mongoose-source-{name}"))
            .spawn(move || {
                if let Err(error) = driver.run(&mut *source, &*publisher) {
                    // the feed can never deliver: the run ends (issue 9, item 11)
                    let reason = format!("feed '{name}': the source could not start: {error}");
                    error!("{reason}");
                    failed.lock().push(reason);
                }
            });
        match thread {
            Ok(thread) => *slot = SourceSlot::Running { stop, thread },
            Err(error) => {
                let reason = format!(
                    "feed '{}': cannot start the source thread: {error}",
                    feed.name
                );
                error!("{reason}");
                failures.lock().push(reason);
            }
        }
    }

    /// The ordered shutdown under one deadline (`shutdown_timeout_millis`): stop the
    /// feeds (capped at 5 s), drain the queues (`shutdown_drain_timeout_millis`),
    /// commit what the groups processed after the feeds stopped, close the groups,
    /// commit again, stop services only if every group closed and no group retains a
    /// processor (a quarantined one, or any of a dead group: it may still use them),
    /// each on a helper thread under the deadline. Calling it again resumes an
    /// incomplete stop: it re-joins service stops still running and never calls a
    /// service `stop()` that failed again (that service stays in
    /// `services_left_running`). On an agent thread it hands the stop to a
    /// `mongoose-server-stop` thread and returns `handed_off`.
    pub fn shutdown(&self) -> StopResult {
        if agent::is_agent_thread() {
            let server = self.clone();
            let spawned = std::thread::Builder::new()
                .name("mongoose-server-stop".into())
                .spawn(move || {
                    server.shutdown();
                });
            if let Err(error) = spawned {
                error!(%error, "cannot start the stop thread");
            }
            return StopResult {
                handed_off: true,
                ..StopResult::default()
            };
        }
        let inner = &self.inner;
        let mut lifecycle = inner.lifecycle.lock();
        if lifecycle.stopped {
            return lifecycle.last.clone().unwrap_or(StopResult {
                complete: true,
                ..Default::default()
            });
        }
        let deadline =
            Instant::now() + Duration::from_millis(self.running_config().shutdown_timeout_millis);
        if !lifecycle.stopping {
            lifecycle.stopping = true;
            info!("shutdown: fencing startup and refusing new work");
            inner.plane.begin_stopping();
            for feed in inner.registry.feeds() {
                feed.begin_stop();
            }
        }
        let mut running = Vec::new();
        if !lifecycle.sources_stopped {
            info!("shutdown: stopping feeds");
            let feed_deadline = deadline.min(Instant::now() + Duration::from_secs(5));
            lifecycle.sources_stopped = self.stop_sources(feed_deadline);
            if !lifecycle.sources_stopped {
                running.push("<event sources stopping>".to_owned());
            }
        }
        if !lifecycle.drained {
            let drain = Duration::from_millis(self.running_config().shutdown_drain_timeout_millis);
            let drain_deadline = deadline.min(Instant::now() + drain);
            info!(
                bound_ms = drain.as_millis() as u64,
                "shutdown: draining queued events"
            );
            let mut drained = true;
            for name in inner.plane.group_names() {
                if let Some(group) = inner.plane.group(&name) {
                    drained &= group.await_drained(drain_deadline);
                }
            }
            if !drained {
                let pending: usize = self
                    .group_statuses()
                    .iter()
                    .map(|status| status.queued_items)
                    .sum();
                warn!(pending, "shutdown drain timed out: the pending events stay uncommitted and are re-delivered at the next start");
            }
            lifecycle.drained = true;
            // what the groups wrote is published before the commit after the drain, so
            // that commit covers the inputs whose outputs are out
            if !inner.sinks.await_idle(drain_deadline) {
                warn!("shutdown: sinks still hold outputs after the drain: their inputs stay uncommitted and are delivered again at the next start");
            }
        }
        if lifecycle.sources_stopped {
            self.commit_after_stop("after the drain");
        }
        if !lifecycle.groups_closed {
            info!("shutdown: closing processor groups");
            let still = inner.plane.close_groups(deadline);
            lifecycle.groups_closed = still.is_empty();
            running.extend(still);
        }
        if lifecycle.groups_closed {
            // each group ended its captures as it closed; their writers close on
            // closer threads: a failed close (never retried) or one still running at
            // the deadline keeps the stop incomplete (book: guarantees/control-plane.md)
            let unresolved = inner.plane.await_captures_resolved(deadline);
            if !unresolved.is_empty() {
                warn!(
                    ?unresolved,
                    "shutdown: audit capture resources are not closed"
                );
            }
            running.extend(unresolved);
        }
        if !lifecycle.sources_stopped && lifecycle.groups_closed {
            // the feed phase ran out of its bound: join the late stop now, and make the
            // final commit only once every source has stopped (third review, item 5)
            lifecycle.sources_stopped = self.stop_sources(deadline);
            if lifecycle.sources_stopped {
                running.retain(|entry| entry != "<event sources stopping>");
            }
        }
        if lifecycle.sources_stopped && lifecycle.groups_closed && !lifecycle.committed_after_stop {
            // what processors wrote while they stopped is published (until the deadline)
            // and the sinks stop before the last commit
            for status in inner.sinks.stop(deadline) {
                if status.queued + status.retrying + status.held_count > 0 {
                    warn!(sink = %status.name, queued = status.queued, retrying = status.retrying, held = status.held_count,
                        "sink stopped with outputs not published: their inputs stay uncommitted and are delivered again at the next start");
                }
            }
            self.commit_after_stop("after the groups closed");
            lifecycle.committed_after_stop = true;
        }
        // a quarantined processor, or any processor of a dead group, keeps its instance
        // and so whatever service it was given: services are stopped only once every
        // group closed and no group holds a processor (book: guarantees/control-plane.md)
        let held = inner.plane.retained_processors();
        if !held.is_empty() {
            warn!(
                ?held,
                "shutdown: processors are retained (quarantined or in a dead group); the services stay running because those processors may still use them"
            );
        }
        running.extend(held.iter().cloned());
        let services_left_running = if lifecycle.groups_closed && held.is_empty() {
            info!("shutdown: stopping services");
            // each stop runs on a helper thread; one still running at the deadline is
            // re-joined by a resumed attempt, one that failed is never called again
            inner.plane.stop_services(deadline)
        } else {
            inner.plane.owned_services()
        };
        let complete = lifecycle.sources_stopped
            && lifecycle.groups_closed
            && lifecycle.committed_after_stop
            && services_left_running.is_empty()
            && running.is_empty();
        let result = StopResult {
            complete,
            handed_off: false,
            blocked_startup: None,
            groups_running: running,
            services_left_running,
        };
        lifecycle.stopped = complete;
        lifecycle.last = Some(result.clone());
        if complete {
            // nothing writes the data folder any more: another server may take it
            inner.data_lock.lock().take();
            info!("shutdown complete");
        } else {
            warn!(
                ?result,
                "shutdown incomplete: call shutdown again to resume"
            );
        }
        result
    }

    fn stop_sources(&self, deadline: Instant) -> bool {
        let feeds = self.inner.feeds.lock().clone();
        Self::stop_sources_of(&feeds, deadline)
    }

    /// Stops the sources of `feeds` and joins their threads until `deadline`; true when
    /// every one stopped (one still running stays in its slot).
    pub(super) fn stop_sources_of(feeds: &[Arc<FeedRuntime>], deadline: Instant) -> bool {
        for feed in feeds {
            if let SourceSlot::Running { stop, .. } = &*feed.source.lock() {
                stop.stop();
            }
        }
        let mut all = true;
        for feed in feeds {
            let mut slot = feed.source.lock();
            match std::mem::replace(&mut *slot, SourceSlot::Stopped) {
                SourceSlot::Running { stop, thread } => {
                    while !thread.is_finished() && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    if thread.is_finished() {
                        if thread.join().is_err() {
                            error!(feed = %feed.name, "the source thread panicked");
                        }
                    } else {
                        all = false;
                        *slot = SourceSlot::Running { stop, thread };
                    }
                }
                SourceSlot::Ready(_) | SourceSlot::Stopped => {}
            }
        }
        all
    }

    fn commit_after_stop(&self, when: &str) {
        for feed in self.inner.feeds.lock().iter() {
            let committed = feed.publisher.commit_processed_after_stop();
            info!(feed = %feed.name, acknowledged = committed, "committed what the groups processed {when}");
        }
    }
}
