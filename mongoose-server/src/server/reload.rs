//! Reloading the configuration while the server runs (SIGHUP, issue 28 item 3).
//!
//! The new file is loaded and checked as a start checks it (the same loader, the
//! admin settings, every processor kind's settings check). An invalid file changes
//! nothing. A valid one is compared with the running configuration:
//!
//! * feeds, groups, processors and sinks added or removed are applied, with the
//!   guarantees of a start and of a shutdown: a removed processor is stopped through
//!   the control plane (what it was given and did not process is never committed); a
//!   removed feed's source is stopped as a shutdown stops it, its queues drain (up to
//!   `shutdown_drain_timeout_millis`) and what its consumers processed is committed; a
//!   removed sink publishes what it holds (up to `shutdown_timeout_millis`); a removed
//!   group is closed; an added feed's processors are added before its source starts;
//! * each key that changed in a part both files have is compared on its own
//!   ([`reload_keys`]): a setting that can apply live (a batch size, a timeout, a retry
//!   setting, an overload bound, the progress interval, the log level) applies, a sink's
//!   between two batches; any other is refused, named by its path with its old and new
//!   values (`feeds[app].path: "a.log" -> "b.log": ... restart to apply it`). With a
//!   refusal, the live keys still apply and nothing else does (no part is added or
//!   removed): what runs is the old file with those keys, never half of a new file's
//!   parts;
//! * a file with no table at all (empty, blank, comments, top-level keys alone: an
//!   editor's truncating save) is refused before it is read as a config.
//!
//! One reload runs at a time, never during the start or the shutdown. Its outcome is
//! logged (INFO applied or unchanged, ERROR invalid, refused or failed) and kept:
//! [`Server::last_reload`], [`Server::config_generation`] (1 at start, one more per
//! applied reload), `configGeneration` and `lastReload` in `GET /status`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mongoose_control::ReplyOutcome;
use serde::Serialize;
use tracing::{error, info, warn};

use crate::config::data_dir::DataFolderLock;
use crate::config::ServerConfig;
use crate::ServerError;

use super::build::configured_feed;
use super::reload_keys::{self, KeyChange};
use super::{FeedRuntime, Server, ServerBuilder};

/// How a reload ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReloadStatus {
    /// `applied`, `unchanged` (the file asks for what runs), `invalid` (the file does
    /// not load or fails a check), `refused` (it changes what cannot change live) or
    /// `failed` (applying it failed part way: the reasons say what runs).
    pub outcome: String,
    /// The configuration generation after it (1 at start, one more per applied reload).
    pub generation: u64,
    /// When it ended, in milliseconds since the Unix epoch.
    pub at_millis: u64,
    /// What it changed (`added feed 'audit'`, `removed processor 'copy/x'`).
    pub changes: Vec<String>,
    /// Why it was invalid, refused or failed.
    pub reasons: Vec<String>,
}

/// The reloads of a server so far.
#[derive(Debug, Default)]
pub(super) struct Reloads {
    applied: u64,
    last: Option<ReloadStatus>,
}

/// What a reload changes, by name (groups and processors) or by index in the new
/// configuration (what is added).
#[derive(Debug, Default)]
struct Plan {
    refused: Vec<String>,
    removed_processors: Vec<(String, String)>,
    removed_groups: Vec<String>,
    removed_feeds: Vec<String>,
    removed_sinks: Vec<String>,
    added_sinks: Vec<usize>,
    added_feeds: Vec<usize>,
    added_groups: Vec<usize>,
    added_processors: Vec<(usize, usize)>,
}

impl Plan {
    fn is_empty(&self) -> bool {
        self.removed_processors.is_empty()
            && self.removed_groups.is_empty()
            && self.removed_feeds.is_empty()
            && self.removed_sinks.is_empty()
            && self.added_sinks.is_empty()
            && self.added_feeds.is_empty()
            && self.added_groups.is_empty()
            && self.added_processors.is_empty()
    }
}

/// Compares the running configuration with a new one.
fn plan(old: &ServerConfig, new: &ServerConfig) -> Plan {
    let mut plan = Plan::default();
    if old.base_dir != new.base_dir {
        plan.refused.push(format!(
            "the config file's folder changed ({} -> {}): restart to apply it",
            old.base_dir.display(),
            new.base_dir.display()
        ));
    }
    // a part both files have: its keys are compared one by one (reload_keys)
    for feed in &old.feeds {
        if !new
            .feeds
            .iter()
            .any(|candidate| candidate.name == feed.name)
        {
            plan.removed_feeds.push(feed.name.clone());
        }
    }
    for (index, feed) in new.feeds.iter().enumerate() {
        if !old
            .feeds
            .iter()
            .any(|candidate| candidate.name == feed.name)
        {
            plan.added_feeds.push(index);
        }
    }
    for sink in &old.sinks {
        if !new
            .sinks
            .iter()
            .any(|candidate| candidate.name == sink.name)
        {
            plan.removed_sinks.push(sink.name.clone());
        }
    }
    for (index, sink) in new.sinks.iter().enumerate() {
        if !old
            .sinks
            .iter()
            .any(|candidate| candidate.name == sink.name)
        {
            plan.added_sinks.push(index);
        }
    }
    for group in &old.groups {
        let Some(now) = new
            .groups
            .iter()
            .find(|candidate| candidate.name == group.name)
        else {
            plan.removed_groups.push(group.name.clone());
            for processor in &group.processors {
                plan.removed_processors
                    .push((group.name.clone(), processor.name.clone()));
            }
            continue;
        };
        for processor in &group.processors {
            if !now
                .processors
                .iter()
                .any(|candidate| candidate.name == processor.name)
            {
                plan.removed_processors
                    .push((group.name.clone(), processor.name.clone()));
            }
        }
    }
    for (group_index, group) in new.groups.iter().enumerate() {
        let before = old
            .groups
            .iter()
            .find(|candidate| candidate.name == group.name);
        if before.is_none() {
            plan.added_groups.push(group_index);
        }
        for (index, processor) in group.processors.iter().enumerate() {
            let existed = before.is_some_and(|before| {
                before
                    .processors
                    .iter()
                    .any(|candidate| candidate.name == processor.name)
            });
            if !existed {
                plan.added_processors.push((group_index, index));
            }
        }
    }
    plan
}

fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

impl Server {
    /// The configuration generation: 1 at start, one more per applied reload.
    pub fn config_generation(&self) -> u64 {
        self.inner.reloads.lock().applied + 1
    }

    /// How the last reload ended; `None` before the first.
    pub fn last_reload(&self) -> Option<ReloadStatus> {
        self.inner.reloads.lock().last.clone()
    }

    /// Loads the configuration file `path` and reloads it (see the module
    /// documentation): the outcome is logged and returned. A panic while reloading is
    /// caught, logged and reported `failed`.
    pub fn reload_file(&self, path: &Path) -> ReloadStatus {
        info!(config = %path.display(), "reloading the configuration");
        // an editor's truncating save (or a file emptied by mistake) would remove every
        // feed, sink and group: a file with no table at all is never taken for a config
        if let Some(reason) = reload_keys::empty_config(path) {
            return self.finish_reload("refused", Vec::new(), vec![reason]);
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            match ServerConfig::load(path) {
                Ok(config) => self.reload(config),
                Err(error) => self.finish_reload("invalid", Vec::new(), vec![error.to_string()]),
            }
        }));
        outcome.unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<&str>()
                .map(|text| (*text).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            self.finish_reload(
                "failed",
                Vec::new(),
                vec![format!(
                    "the reload panicked ({message}): part of it may have been applied; check `GET /status` and `GET /groups`, or restart to be sure what runs"
                )],
            )
        })
    }

    /// Reloads a loaded configuration (see the module documentation).
    pub fn reload(&self, config: ServerConfig) -> ReloadStatus {
        let mut config = match self.check_reloaded(config) {
            Ok(config) => config,
            Err(error) => {
                return self.finish_reload("invalid", Vec::new(), vec![error.to_string()])
            }
        };
        let inner = &self.inner;
        // one at a time, and never while the server starts or stops
        let lifecycle = inner.lifecycle.lock();
        if !lifecycle.running || lifecycle.stopping {
            drop(lifecycle);
            return self.finish_reload(
                "refused",
                Vec::new(),
                vec!["the server is not running (starting or stopping)".to_owned()],
            );
        }
        let old = self.running_config();
        let mut plan = plan(&old, &config);
        let keys = reload_keys::changed_keys(&old, &config);
        let (live, refused): (Vec<_>, Vec<_>) =
            keys.into_iter().partition(|key| key.refused.is_none());
        plan.refused.extend(refused.iter().map(KeyChange::refusal));
        match self.data_folder_in_use(&old, &config) {
            // pinned, as a start pins it: a symlink moved later moves nothing
            Ok(folder) => config.data_dir = folder,
            Err(reason) => plan.refused.push(reason),
        }
        if !plan.refused.is_empty() {
            // a file applies whole or not at all: what runs is always one file, and the
            // keys that could have applied live are named as not applied either
            drop(lifecycle);
            let mut reasons = plan.refused;
            reasons.extend(live.iter().map(KeyChange::not_applied));
            return self.finish_reload("refused", Vec::new(), reasons);
        }
        if plan.is_empty() && live.is_empty() {
            // the file may differ in what no part of the server reads again (a
            // reordering): what runs stays, and so does the generation
            drop(lifecycle);
            return self.finish_reload("unchanged", Vec::new(), Vec::new());
        }
        if let Err(error) = self.lock_data_folder_for(&config) {
            drop(lifecycle);
            return self.finish_reload(
                "failed",
                Vec::new(),
                vec![
                    error.to_string(),
                    "nothing changed: the old configuration keeps running".to_owned(),
                ],
            );
        }
        let config = Arc::new(config);
        let (mut changes, mut reasons) = if plan.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            self.apply(&config, &plan)
        };
        // an addition that could not be opened undid the others: nothing changed, and
        // the old configuration is still the one that runs
        let undone = changes.is_empty() && !reasons.is_empty();
        if !undone {
            let (live_changes, live_failures, kept) = self.apply_live_keys(&config, &live);
            changes.extend(live_changes);
            reasons.extend(live_failures);
            let mut running = (*config).clone();
            reload_keys::take_live_keys(&mut running, &old, &kept);
            *inner.running.write() = Arc::new(running);
        }
        drop(lifecycle);
        if reasons.is_empty() {
            self.finish_reload("applied", changes, reasons)
        } else {
            self.finish_reload("failed", changes, reasons)
        }
    }

    /// Applies the live keys `live` of `config` (see [`reload_keys`]): the sinks they
    /// name take their new settings before their next batch, the feeds their new
    /// overload bounds, the log filter its new directives; the top-level timeouts are
    /// read from the running configuration where they are used. Returns what changed,
    /// why some could not, and the keys that did not apply.
    fn apply_live_keys(
        &self,
        config: &ServerConfig,
        live: &[KeyChange],
    ) -> (Vec<String>, Vec<String>, Vec<KeyChange>) {
        let inner = &self.inner;
        let mut changes = Vec::new();
        let mut reasons = Vec::new();
        let mut kept = Vec::new();
        let mut sinks: Vec<(&str, bool)> = Vec::new();
        for key in live {
            if let Some(name) = key.sink() {
                match sinks.iter_mut().find(|(sink, _)| *sink == name) {
                    Some((_, reopen)) => *reopen |= key.reopens_the_sink(),
                    None => sinks.push((name, key.reopens_the_sink())),
                }
            }
        }
        let failed_sink = |name: &str| -> Option<String> {
            let sink = config.sinks.iter().find(|sink| sink.name == name)?;
            let reopen = sinks.iter().any(|(sink, reopen)| *sink == name && *reopen);
            inner
                .sinks
                .retune(config, sink, reopen)
                .err()
                .map(|error| format!("sink '{name}' kept its settings: {error}"))
        };
        let failed: Vec<(String, String)> = sinks
            .iter()
            .filter_map(|(name, _)| failed_sink(name).map(|reason| ((*name).to_owned(), reason)))
            .collect();
        let mut feeds: Vec<&str> = live.iter().filter_map(KeyChange::feed).collect();
        feeds.dedup();
        let mut failed_feeds = Vec::new();
        for name in feeds {
            let Some(index) = config.feeds.iter().position(|feed| feed.name == name) else {
                continue;
            };
            let settings = config.feed_overload(index).and_then(|default| {
                Ok((default, config.feed_overrides(index)?.into_iter().collect()))
            });
            let running = inner
                .feeds
                .lock()
                .iter()
                .find(|feed| feed.name == name)
                .cloned();
            match (settings, running) {
                (Ok((default, overrides)), Some(feed)) => {
                    feed.publisher.retune_overload(default, overrides)
                }
                (Err(error), _) => {
                    failed_feeds.push(name.to_owned());
                    reasons.push(format!("feed '{name}' kept its overload settings: {error}"));
                }
                (_, None) => {}
            }
        }
        let mut log_failed = false;
        if live.iter().any(|key| key.path == "log_level") {
            if let Err(error) = crate::log_filter::set(config.log_level.as_deref()) {
                log_failed = true;
                reasons.push(format!("log_level kept: {error}"));
            }
        }
        for key in live {
            let log_failed = log_failed && key.path == "log_level";
            let sink_failed = key
                .sink()
                .is_some_and(|name| failed.iter().any(|(sink, _)| sink == name));
            let feed_failed = key
                .feed()
                .is_some_and(|name| failed_feeds.iter().any(|feed| feed == name));
            if sink_failed || feed_failed || log_failed {
                kept.push(key.clone());
            } else {
                changes.push(key.applied());
            }
        }
        reasons.extend(failed.into_iter().map(|(_, reason)| reason));
        (changes, reasons, kept)
    }

    /// The data folder this server keeps its state in (the folder it holds the lock
    /// of, or, holding none, the one `old` names), when `new` names it too, by their
    /// canonical paths: `data` and `./data` are one folder. Otherwise why `new` cannot
    /// apply live: the state it keeps cannot move while it runs, and a folder the
    /// server does not hold the lock of is one another server may take (issue 36, item
    /// 2). A symlink moved under the server is a change.
    fn data_folder_in_use(
        &self,
        old: &ServerConfig,
        new: &ServerConfig,
    ) -> Result<PathBuf, String> {
        let used = match self.inner.data_lock.lock().as_ref() {
            Some(lock) => lock.folder().to_path_buf(),
            None => old.canonical_data_folder(),
        };
        let named = new.canonical_data_folder();
        if named == used {
            return Ok(used);
        }
        Err(format!(
            "`data_dir` changed: it names {} now (`{}`), and the server keeps its state in {}: the data folder \
             cannot move while the server runs: restart to move it (stop the server, move the folder's contents \
             if you want its state kept, then start it)",
            named.display(),
            new.data_dir.display(),
            used.display()
        ))
    }

    /// Takes the data folder's lock when `config` keeps state and this server holds
    /// no lock yet (it started with nothing to keep: a reload adds its first file feed
    /// with a pointer, or its first file sink). Held from then on, as a start holds it.
    fn lock_data_folder_for(&self, config: &ServerConfig) -> Result<(), ServerError> {
        let mut held = self.inner.data_lock.lock();
        if held.is_none() && config.keeps_state() {
            let lock = DataFolderLock::acquire(&config.canonical_data_folder())?;
            info!(folder = %lock.folder().display(),
                "the data folder is locked: this reload adds the server's first state");
            *held = Some(lock);
        }
        Ok(())
    }

    /// The checks of a start: the admin settings, and the builder's checks with this
    /// server's processor kinds, feeds added by code and plugins, and the machine's
    /// (input folders readable, state and output folders writable: the preflight but
    /// for the admin address, which this server holds).
    fn check_reloaded(&self, config: ServerConfig) -> Result<ServerConfig, ServerError> {
        crate::admin::AdminSettings::from_config(&config)?;
        let inner = &self.inner;
        let builder = ServerBuilder {
            config,
            kinds: inner.kinds.clone(),
            code_processors: Vec::new(),
            code_feeds: Vec::new(),
            code_feed_names: inner.code_feed_names.clone(),
            code_sources: Vec::new(),
            kill_switch: None,
            built_registry: Arc::default(),
            plugins: std::sync::OnceLock::from(inner.plugins.clone()),
            sink_capture: None,
        };
        builder.preflight_folders()?;
        Ok(builder.config)
    }

    /// Applies `plan`: what is added is opened first (a sink or feed that cannot be
    /// opened fails the reload before anything is removed), then the removals, then
    /// the additions start. Returns what changed and what failed.
    fn apply(&self, config: &Arc<ServerConfig>, plan: &Plan) -> (Vec<String>, Vec<String>) {
        let inner = &self.inner;
        let mut changes = Vec::new();
        let mut reasons = Vec::new();
        // 1. open what is added: sinks, then feeds (registered, not started)
        let mut opened_sinks = Vec::new();
        for &index in &plan.added_sinks {
            let sink = &config.sinks[index];
            match inner.sinks.add(config, sink, inner.plugins.as_deref()) {
                Ok(()) => opened_sinks.push(sink.name.clone()),
                Err(error) => {
                    reasons.push(format!("sink '{}' cannot be opened: {error}", sink.name));
                    break;
                }
            }
        }
        let mut new_feeds: Vec<Arc<FeedRuntime>> = Vec::new();
        if reasons.is_empty() {
            for &index in &plan.added_feeds {
                let built = configured_feed(
                    config,
                    index,
                    inner.plugins.as_deref(),
                    &inner.kill_switch,
                    &inner.connector,
                );
                match built {
                    Ok(Some(feed)) => new_feeds.push(Arc::new(feed)),
                    Ok(None) => {}
                    Err(error) => {
                        reasons.push(format!(
                            "feed '{}' cannot be built: {error}",
                            config.feeds[index].name
                        ));
                        break;
                    }
                }
            }
        }
        let deadline = Instant::now() + Duration::from_millis(config.shutdown_timeout_millis);
        if !reasons.is_empty() {
            // nothing was removed yet: undo the opening, so nothing changes
            for feed in &new_feeds {
                inner.connector.unregister(&feed.name);
            }
            for name in &opened_sinks {
                inner.sinks.remove(name, deadline);
            }
            reasons.push("nothing changed: the old configuration keeps running".to_owned());
            return (Vec::new(), reasons);
        }
        // 2. the removals, in a shutdown's order: the removed feeds' sources stop and
        // their queues drain to their consumers (still running), what they processed is
        // committed; then the removed processors and groups stop, then the feeds are
        // forgotten and the removed sinks stop
        let mut stopped_feeds = Vec::new();
        for name in &plan.removed_feeds {
            match self.stop_removed_feed(name, config) {
                Ok(feed) => stopped_feeds.push(feed),
                Err(reason) => reasons.push(reason),
            }
        }
        // a group that loses processors and gains others (a replacement) takes no
        // event from its feeds until the new ones are in: the events between the old
        // ones' stop and the new ones' start went to its other processors alone, were
        // committed, and the replacement never got them (chaos reload seed
        // 1796642187050)
        let holds: Vec<_> = plan
            .removed_processors
            .iter()
            .map(|(group, _)| group)
            .filter(|group| {
                plan.added_processors
                    .iter()
                    .any(|&(index, _)| config.groups[index].name == **group)
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .filter_map(|group| inner.plane.group(group))
            .map(|group| group.hold_dispatch())
            .collect();
        let wait = Duration::from_millis(config.control_wait_millis);
        for (group, name) in &plan.removed_processors {
            match inner.plane.stop_processor_wait(group, name, wait) {
                Some(reply) if reply.outcome == ReplyOutcome::Applied => {
                    inner.reports.remove(group, name);
                    changes.push(format!("removed processor '{group}/{name}'"));
                }
                Some(reply) => reasons.push(format!(
                    "processor '{group}/{name}' not stopped: {:?} ({:?}): {}",
                    reply.outcome, reply.kind, reply.reason
                )),
                None => reasons.push(format!(
                    "processor '{group}/{name}': no reply to its stop in time (it still applies)"
                )),
            }
        }
        for group in &plan.removed_groups {
            match inner.plane.remove_group(group, deadline) {
                Ok(_) => changes.push(format!("removed group '{group}'")),
                Err(reason) => reasons.push(reason),
            }
        }
        for feed in stopped_feeds {
            // what the consumers processed while they stopped is committed too
            feed.publisher.commit_processed_after_stop();
            inner
                .feeds
                .lock()
                .retain(|running| !Arc::ptr_eq(running, &feed));
            inner.connector.unregister(&feed.name);
            changes.push(format!("removed feed '{}'", feed.name));
        }
        for name in &plan.removed_sinks {
            if let Some(status) = inner.sinks.remove(name, deadline) {
                if status.queued + status.retrying + status.held_count > 0 {
                    warn!(sink = %name, queued = status.queued, retrying = status.retrying, held = status.held_count,
                        "removed sink stopped with outputs not published: their inputs stay uncommitted and are delivered again at the next start");
                }
                changes.push(format!("removed sink '{name}'"));
            }
        }
        // 3. the additions: sinks are open; groups, processors, then the feeds' sources
        changes.extend(
            opened_sinks
                .iter()
                .map(|name| format!("added sink '{name}'")),
        );
        for &index in &plan.added_groups {
            let group = &config.groups[index];
            match self.create_configured_group(config, group) {
                Ok(()) => changes.push(format!("added group '{}'", group.name)),
                Err(error) => reasons.push(format!("group '{}': {error}", group.name)),
            }
        }
        for &(group_index, index) in &plan.added_processors {
            let group = &config.groups[group_index].name;
            let processor = &config.groups[group_index].processors[index];
            let added = self
                .configured_processor(config, group, processor)
                .and_then(|(group, name, supplier)| self.add_processor(&group, &name, supplier));
            match added {
                Ok(()) => changes.push(format!("added processor '{group}/{}'", processor.name)),
                Err(error) => {
                    reasons.push(format!("processor '{group}/{}': {error}", processor.name))
                }
            }
        }
        // the replaced groups read again, every processor in place
        drop(holds);
        for feed in &new_feeds {
            Self::start_source(feed, &inner.failures);
            feed.publisher.start_complete();
            changes.push(format!("added feed '{}'", feed.name));
        }
        inner.feeds.lock().extend(new_feeds);
        (changes, reasons)
    }

    /// Stops feed `name`'s source as a shutdown does, lets its queues drain to its
    /// consumers (up to `shutdown_drain_timeout_millis`) and commits what they
    /// processed.
    fn stop_removed_feed(
        &self,
        name: &str,
        config: &ServerConfig,
    ) -> Result<Arc<FeedRuntime>, String> {
        let inner = &self.inner;
        let Some(feed) = inner
            .feeds
            .lock()
            .iter()
            .find(|feed| feed.name == name)
            .cloned()
        else {
            return Err(format!("feed '{name}' is not running"));
        };
        let stop_deadline = Instant::now() + Duration::from_secs(5);
        if !Self::stop_sources_of(std::slice::from_ref(&feed), stop_deadline) {
            return Err(format!(
                "feed '{name}': its source did not stop within 5 s: it stays until the server stops"
            ));
        }
        // what was published is processed (or the drain bound passes), its outputs
        // published, then committed: the next start of this feed resumes after it
        let drain = Duration::from_millis(config.shutdown_drain_timeout_millis);
        let drain_deadline = Instant::now() + drain;
        let mut acknowledged = feed.publisher.commit_processed_after_stop();
        loop {
            let status = feed.publisher.status();
            if status.pending_acks == 0 || Instant::now() >= drain_deadline {
                if status.pending_acks > 0 {
                    warn!(feed = %name, pending = status.pending_acks,
                        "removed feed: its queues did not drain in time: what was not processed stays uncommitted and is delivered again when the feed is added back");
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
            acknowledged += feed.publisher.commit_processed_after_stop();
        }
        info!(feed = %name, acknowledged, "removed feed: its source stopped and what its consumers processed is committed");
        Ok(feed)
    }

    /// Logs and keeps the outcome of a reload.
    fn finish_reload(
        &self,
        outcome: &str,
        changes: Vec<String>,
        reasons: Vec<String>,
    ) -> ReloadStatus {
        let mut reloads = self.inner.reloads.lock();
        // a refusal that applied the live keys changed what runs too
        if outcome == "applied" || (outcome != "unchanged" && !changes.is_empty()) {
            reloads.applied += 1;
        }
        let status = ReloadStatus {
            outcome: outcome.to_owned(),
            generation: reloads.applied + 1,
            at_millis: now_millis(),
            changes,
            reasons,
        };
        reloads.last = Some(status.clone());
        drop(reloads);
        match outcome {
            "applied" => {
                for change in &status.changes {
                    info!("reload: {change}");
                }
                info!(generation = status.generation, changes = ?status.changes, "configuration reloaded")
            }
            "unchanged" => info!(
                generation = status.generation,
                "configuration reloaded: nothing to change"
            ),
            // a failure before anything changed says so, as a refusal does
            "failed" if !status.changes.is_empty() => {
                error!(generation = status.generation, changes = ?status.changes, reasons = ?status.reasons,
                "configuration reload failed part way: what changed and why the rest did not are listed; restart to be sure what runs")
            }
            _ => {
                for reason in &status.reasons {
                    error!("reload {outcome}: {reason}");
                }
                error!(generation = status.generation, "configuration reload {outcome}: nothing changed, the old configuration keeps running");
            }
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> ServerConfig {
        ServerConfig::parse(text, Path::new("/base")).expect("valid")
    }

    const BASE: &str = r#"
        [[feeds]]
        name = "app"
        source = "file"
        path = "app.log"
        [[sinks]]
        name = "out"
        kind = "stdout"
        [[groups]]
        name = "copy"
        [[groups.processors]]
        name = "app"
        kind = "forward"
        settings = { feed = "app", sink = "out" }
    "#;

    #[test]
    fn added_and_removed_parts_are_planned_and_an_unchanged_file_plans_nothing() {
        let old = parse(BASE);
        assert!(plan(&old, &parse(BASE)).is_empty());
        let more = format!(
            "{BASE}\n[[feeds]]\nname = \"audit\"\nsource = \"file\"\npath = \"audit.log\"\n\
             [[groups]]\nname = \"audit\"\n[[groups.processors]]\nname = \"audit\"\nkind = \"forward\"\n\
             settings = {{ feed = \"audit\", sink = \"out\" }}\n"
        );
        let grown = plan(&old, &parse(&more));
        assert!(grown.refused.is_empty(), "{:?}", grown.refused);
        assert_eq!(grown.added_feeds, [1]);
        assert_eq!(grown.added_groups, [1]);
        assert_eq!(grown.added_processors, [(1, 0)]);
        let shrunk = plan(&parse(&more), &old);
        assert_eq!(shrunk.removed_feeds, ["audit"]);
        assert_eq!(shrunk.removed_groups, ["audit"]);
        assert_eq!(
            shrunk.removed_processors,
            [("audit".to_owned(), "audit".to_owned())]
        );
    }
}
