//! The proxies of a plugin's source and committer.

use std::ffi::c_void;
use std::sync::{Arc, Mutex, RwLock};

use bytes::BytesMut;
use mongoose_core::{
    AnyCommitter, CoreError, Epoch, EventSource, PositionValue, SourceCommitter, SourceOutput,
    SourceStart, SourceState, WorkDone,
};
use tracing::{error, warn};

use crate::abi::{
    CommitterVTable, HostOutput, HostOutputVTable, SourceStartRef, SourceVTable, Status, Str,
};
use crate::guest::message_out;

use super::vtables::{
    host_cache, host_commit_processed, host_consumer_positions, host_filtered, host_log,
    host_publish, host_release, host_report_files, host_report_loss, host_report_state,
    host_retain, host_set_epoch, host_set_unterminated_bytes, host_try_publish,
    host_try_publish_batch, HostContext,
};
use super::{ItemCodec, PluginError, PluginLibrary, PluginRegistry, Role};

/// A plugin's committer as a [`SourceCommitter<PositionValue>`]. A panic in the
/// plugin's committer fails every later commit (the feed is not settled and a restart
/// re-delivers from the last commit that succeeded).
pub struct PluginCommitter {
    pub(super) handle: *mut c_void,
    pub(super) vtable: *const CommitterVTable,
    pub(super) feed: String,
    pub(super) failed: Option<String>,
    // last: outlives the handle
    pub(super) library: Arc<PluginLibrary>,
}

impl std::fmt::Debug for PluginCommitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginCommitter")
            .field("feed", &self.feed)
            .field("plugin", &self.library.name)
            .field("failed", &self.failed)
            .finish()
    }
}

// SAFETY: the plugin's committer is `Send` (a `SourceCommitter`); the engine calls it
// from one thread at a time.
unsafe impl Send for PluginCommitter {}

impl PluginCommitter {
    fn vtable(&self) -> &CommitterVTable {
        // SAFETY: a static of the plugin, loaded while `library` is held.
        unsafe { &*self.vtable }
    }

    fn failure(&self, message: &str) -> CoreError {
        CoreError::Source {
            source_name: self.feed.clone(),
            message: format!(
                "the plugin committer of {} {} failed: {message}",
                self.library.name, self.library.version
            ),
        }
    }
}

impl SourceCommitter<PositionValue> for PluginCommitter {
    fn acknowledged(&mut self, sequence: u64, epoch: Epoch, position: PositionValue) {
        if self.failed.is_some() {
            return;
        }
        let mut message = String::new();
        // SAFETY: the handle is the plugin's committer, alive until our drop.
        let status = unsafe {
            (self.vtable().acknowledged)(
                self.handle,
                sequence,
                epoch.0,
                position.lane,
                position.offset,
                message_out(&mut message),
            )
        };
        if status != Status::OK {
            error!(feed = %self.feed, %message, "the plugin committer failed an acknowledgement: it commits nothing more in this run");
            self.failed = Some(message);
        }
    }

    fn commit(&mut self) -> Result<(), CoreError> {
        if let Some(message) = &self.failed {
            return Err(self.failure(message));
        }
        let mut message = String::new();
        // SAFETY: as in `acknowledged`.
        let status = unsafe { (self.vtable().commit)(self.handle, message_out(&mut message)) };
        match status {
            Status::OK => Ok(()),
            Status::ERROR => Err(self.failure(&message)),
            _ => {
                let failure = self.failure(&message);
                self.failed = Some(message);
                Err(failure)
            }
        }
    }

    fn commits_after_stop(&self) -> bool {
        // SAFETY: as in `acknowledged`.
        self.failed.is_none() && unsafe { (self.vtable().commits_after_stop)(self.handle) } != 0
    }
}

impl Drop for PluginCommitter {
    fn drop(&mut self) {
        // SAFETY: freed once, by the plugin that allocated it.
        unsafe { (self.vtable().destroy)(self.handle) }
    }
}

/// A plugin's source as an [`EventSource`] publishing into a host feed of items `I`.
///
/// The plugin publishes borrowed bytes; the host copies them into chunked buffers (no
/// allocation per item), decodes them with the feed's [`ItemCodec`] and publishes them
/// into the feed. Run it with the engine's source driver like any source.
///
/// A panic in the plugin's `start`, `do_work` or `stop` is caught at the boundary: the
/// source is marked failed, reports BEHIND with the panic's message as its status
/// detail, every later cycle fails with it (the driver logs it), and the plugin's
/// source is never called again (but for its `destroy`). The feed delivers nothing more
/// in this run; what its committer committed holds, so a restart resumes there.
pub struct PluginSource<I: 'static> {
    name: String,
    kind: String,
    handle: *mut c_void,
    vtable: *const SourceVTable,
    failed: Option<String>,
    context: Arc<HostContext<I>>,
    // last: outlives the handle and the context's vtable use
    library: Arc<PluginLibrary>,
}

impl<I> std::fmt::Debug for PluginSource<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginSource")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("plugin", &self.library.name)
            .field("failed", &self.failed)
            .finish()
    }
}

// SAFETY: the plugin's source is `Send` (an `EventSource`), and the proxy calls it from
// one thread at a time (`&mut self`); the host context is `Sync`.
unsafe impl<I: Send + 'static> Send for PluginSource<I> {}

/// What the status detail of a failed plugin source starts with.
pub const SOURCE_FAILED: &str = "FAILED: the plugin source";

impl<I: Send + 'static> PluginSource<I> {
    /// Creates source `name` of `kind` in `registry`'s plugins from `settings` (TOML
    /// text), publishing into `output` through `codec`.
    pub fn create(
        registry: &PluginRegistry,
        kind: &str,
        name: &str,
        settings: &str,
        output: Arc<dyn SourceOutput<I, PositionValue>>,
        codec: Arc<dyn ItemCodec<I>>,
    ) -> Result<Self, PluginError> {
        let library =
            registry
                .find(Role::Source, kind)
                .ok_or_else(|| PluginError::UnknownKind {
                    role: "source",
                    kind: kind.to_owned(),
                })?;
        Self::create_in(
            library,
            kind,
            name,
            settings,
            &registry.base_dir,
            output,
            codec,
        )
    }

    /// [`PluginSource::create`] with the plugin given, and the folder relative paths in
    /// `settings` resolve against (empty: the working directory).
    pub fn create_in(
        library: &Arc<PluginLibrary>,
        kind: &str,
        name: &str,
        settings: &str,
        base_dir: &str,
        output: Arc<dyn SourceOutput<I, PositionValue>>,
        codec: Arc<dyn ItemCodec<I>>,
    ) -> Result<Self, PluginError> {
        let declared =
            library
                .kind(Role::Source, kind)
                .ok_or_else(|| PluginError::UnknownKind {
                    role: "source",
                    kind: kind.to_owned(),
                })?;
        let vtable = declared.source;
        let context = Arc::new(HostContext {
            output: RwLock::new(Some(output)),
            codec,
            buffer: Mutex::new(BytesMut::new()),
            vtable: HostOutputVTable {
                try_publish: host_try_publish::<I>,
                try_publish_batch: host_try_publish_batch::<I>,
                publish: host_publish::<I>,
                cache: host_cache::<I>,
                filtered: host_filtered::<I>,
                set_epoch: host_set_epoch::<I>,
                report_state: host_report_state::<I>,
                set_unterminated_bytes: host_set_unterminated_bytes::<I>,
                commit_processed: host_commit_processed::<I>,
                log: host_log::<I>,
                retain: host_retain::<I>,
                release: host_release::<I>,
                report_loss: host_report_loss::<I>,
                consumer_positions: host_consumer_positions::<I>,
                report_files: host_report_files::<I>,
            },
            library: Arc::clone(library),
            feed: name.to_owned(),
        });
        let host = HostOutput {
            context: Arc::as_ptr(&context) as *const c_void,
            vtable: &context.vtable,
        };
        let mut handle: *mut c_void = std::ptr::null_mut();
        let mut message = String::new();
        // SAFETY: a vtable of the loaded plugin; the texts are borrowed for the call;
        // the context lives in a box the proxy keeps until after `destroy`.
        let status = unsafe {
            ((*vtable).create)(
                Str::new(kind),
                Str::new(name),
                Str::new(settings),
                Str::new(base_dir),
                host,
                &mut handle,
                message_out(&mut message),
            )
        };
        if status != Status::OK || handle.is_null() {
            return Err(PluginError::Create {
                plugin: library.name.clone(),
                role: "source",
                name: name.to_owned(),
                kind: kind.to_owned(),
                message,
            });
        }
        Ok(PluginSource {
            name: name.to_owned(),
            kind: kind.to_owned(),
            handle,
            vtable,
            failed: None,
            context,
            library: Arc::clone(library),
        })
    }

    /// Why the source failed (a panic in the plugin), if it did.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    fn vtable(&self) -> &SourceVTable {
        // SAFETY: a static of the plugin, loaded while `library` is held.
        unsafe { &*self.vtable }
    }

    fn error(&self, message: String) -> CoreError {
        CoreError::Source {
            source_name: self.name.clone(),
            message,
        }
    }

    /// Turns a failing status into an error; a panic marks the source failed.
    fn check(&mut self, call: &str, status: Status, message: String) -> Result<(), CoreError> {
        match status {
            Status::OK => Ok(()),
            Status::ERROR => Err(self.error(format!(
                "the plugin source ({} {}, kind '{}') failed in {call}: {message}",
                self.library.name, self.library.version, self.kind
            ))),
            _ => {
                let detail = format!(
                    "{SOURCE_FAILED} ({} {}, kind '{}', {}) {message} in {call}: it is not called again in this run; \
                     the feed delivers nothing more and keeps its committed position (a restart resumes there)",
                    self.library.name,
                    self.library.version,
                    self.kind,
                    self.library.path.display()
                );
                error!(feed = %self.name, "{detail}");
                self.context.with_output((), |output| {
                    output.report_state(SourceState::Behind, Some(&detail))
                });
                self.failed = Some(detail.clone());
                Err(self.error(detail))
            }
        }
    }
}

impl<I: Send + 'static> EventSource for PluginSource<I> {
    fn name(&self) -> &str {
        &self.name
    }

    fn start(&mut self) -> Result<SourceStart, CoreError> {
        if let Some(failed) = &self.failed {
            return Err(self.error(failed.clone()));
        }
        let mut message = String::new();
        let mut started = SourceStartRef::EMPTY;
        // SAFETY: our live handle; one call at a time (`&mut self`); `started` is valid
        // for the call.
        let status =
            unsafe { (self.vtable().start)(self.handle, &mut started, message_out(&mut message)) };
        self.check("start", status, message)?;
        // the host owns the plugin's committer from now on (freed by its `destroy`)
        let committer = (!started.committer.handle.is_null()).then(|| {
            AnyCommitter::new(PluginCommitter {
                handle: started.committer.handle,
                vtable: started.committer.vtable,
                feed: self.name.clone(),
                failed: None,
                library: Arc::clone(&self.library),
            })
        });
        Ok(SourceStart {
            epoch: Epoch(started.epoch),
            pause_by_default: started.pause_by_default != 0,
            committer,
        })
    }

    fn do_work(&mut self) -> Result<WorkDone, CoreError> {
        if let Some(failed) = &self.failed {
            return Err(self.error(failed.clone()));
        }
        let mut work = 0usize;
        let mut message = String::new();
        // SAFETY: as in `start`.
        let status =
            unsafe { (self.vtable().do_work)(self.handle, &mut work, message_out(&mut message)) };
        self.check("do_work", status, message)?;
        Ok(WorkDone(work))
    }

    fn stop(&mut self) -> Result<(), CoreError> {
        if self.failed.is_some() {
            warn!(feed = %self.name, "the plugin source failed earlier: its stop is not called");
            return Ok(());
        }
        let mut message = String::new();
        // SAFETY: as in `start`.
        let status = unsafe { (self.vtable().stop)(self.handle, message_out(&mut message)) };
        self.check("stop", status, message)
    }
}

impl<I: 'static> Drop for PluginSource<I> {
    fn drop(&mut self) {
        // SAFETY: freed once, by the plugin that allocated it, before the proxy's
        // reference on the context is dropped (fields drop after this).
        unsafe { ((*self.vtable).destroy)(self.handle) }
        // the feed is let go; a reference the plugin kept (a committer's output) keeps
        // the context itself valid
        self.context.close();
    }
}
