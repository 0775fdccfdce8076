//! The plugin's side: adapters from an author's [`EventSource`] (publishing into a
//! [`PluginOutput`]), [`SourceCommitter`] and [`Sink`] to the [`crate::abi`] vtables,
//! and the registry [`crate::export_plugin!`] fills.
//!
//! An author never touches this module directly: the macro builds a [`Plugin`] of
//! factories and exports the declaration; the vtables below are the same for every
//! plugin (their `create` finds the kind's factory by name).

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

use mongoose_core::sink::{Output, OutputKey, Sink, SinkOutcome};
use mongoose_core::{
    BatchEnd, ConsumerPosition, CoreError, Epoch, EventSource, EvidenceStatus, FailureKind,
    FileLag, PositionValue, PublishRefused, Refusal, SourceCommitter, SourceOutput, SourceState,
    TryPublish,
};

use crate::abi::{
    self, ByteSlice, CommitterRef, CommitterVTable, HostOutput, ItemRef, KeyRef, KindDeclaration,
    MessageOut, OutcomeRef, OutputRef, PluginDeclaration, SinkVTable, SourceVTable, Status, Str,
};
use crate::guest_log::Forwarding;
use crate::settings::{self, SettingsError};

/// Builds a source of a kind from the feed's settings (TOML text) and the output it
/// publishes into.
type SourceFactory =
    Box<dyn Fn(&str, PluginOutput) -> Result<Box<dyn EventSource>, String> + Send + Sync>;

/// Builds a sink of a kind from its settings (TOML text).
type SinkFactory = Box<dyn Fn(&str) -> Result<Box<dyn Sink>, String> + Send + Sync>;

/// Checks a kind's settings (TOML text) without opening or creating anything.
type SettingsCheck = Box<dyn Fn(&str) -> Result<(), SettingsError> + Send + Sync>;

/// What a plugin declares: its name, version and kinds with their factories. Built by
/// [`crate::export_plugin!`].
pub struct Plugin {
    name: String,
    version: String,
    sources: Vec<(String, SourceFactory)>,
    sinks: Vec<(String, SinkFactory)>,
    source_checks: Vec<(String, SettingsCheck)>,
    sink_checks: Vec<(String, SettingsCheck)>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("version", &self.version)
            .field(
                "sources",
                &self
                    .sources
                    .iter()
                    .map(|(kind, _)| kind)
                    .collect::<Vec<_>>(),
            )
            .field(
                "sinks",
                &self.sinks.iter().map(|(kind, _)| kind).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Plugin {
    /// A plugin with no kinds yet.
    pub fn new(name: &str, version: &str) -> Self {
        Plugin {
            name: name.to_owned(),
            version: version.to_owned(),
            sources: Vec::new(),
            sinks: Vec::new(),
            source_checks: Vec::new(),
            sink_checks: Vec::new(),
        }
    }

    /// Declares the settings check of source kind `kind`: run when the host loads the
    /// configuration (`validate`, and `run` before anything starts), it must not open
    /// or create anything. A kind without one is checked only when it is created.
    pub fn source_check<F>(mut self, kind: &str, check: F) -> Self
    where
        F: Fn(&str) -> Result<(), SettingsError> + Send + Sync + 'static,
    {
        self.source_checks.push((kind.to_owned(), Box::new(check)));
        self
    }

    /// Declares the settings check of sink kind `kind` (see [`Plugin::source_check`]).
    pub fn sink_check<F>(mut self, kind: &str, check: F) -> Self
    where
        F: Fn(&str) -> Result<(), SettingsError> + Send + Sync + 'static,
    {
        self.sink_checks.push((kind.to_owned(), Box::new(check)));
        self
    }

    /// Declares source kind `kind`, built by `factory(settings, output)`.
    pub fn source<S, F>(mut self, kind: &str, factory: F) -> Self
    where
        S: EventSource + 'static,
        F: Fn(&str, PluginOutput) -> Result<S, String> + Send + Sync + 'static,
    {
        self.sources.push((
            kind.to_owned(),
            Box::new(move |config, output| {
                factory(config, output).map(|source| Box::new(source) as Box<dyn EventSource>)
            }),
        ));
        self
    }

    /// Declares sink kind `kind`, built by `factory(settings)`.
    pub fn sink<K, F>(mut self, kind: &str, factory: F) -> Self
    where
        K: Sink + 'static,
        F: Fn(&str) -> Result<K, String> + Send + Sync + 'static,
    {
        self.sinks.push((
            kind.to_owned(),
            Box::new(move |config| factory(config).map(|sink| Box::new(sink) as Box<dyn Sink>)),
        ));
        self
    }
}

/// The declaration and what its pointers point into, kept for the library's life.
struct Declared {
    plugin: Plugin,
    sdk_version: String,
    target: String,
    kinds: Vec<KindDeclaration>,
    declaration: PluginDeclaration,
}

// SAFETY: the raw pointers in a `Declared` point into its own heap data (strings and
// the kinds vector, never moved or changed after construction) and to static vtables;
// it is only ever read after it is built.
unsafe impl Send for Declared {}
// SAFETY: as above: immutable once built.
unsafe impl Sync for Declared {}

static DECLARED: OnceLock<Declared> = OnceLock::new();

/// The plugin's declaration, read by the host before any other call.
fn declared() -> Result<&'static Declared, &'static str> {
    DECLARED
        .get()
        .ok_or("the plugin was not declared (no declaration was read)")
}

static SOURCE_VTABLE: SourceVTable = SourceVTable {
    create: source_create,
    start: source_start,
    do_work: source_do_work,
    stop: source_stop,
    destroy: source_destroy,
    check: source_check,
};

static SINK_VTABLE: SinkVTable = SinkVTable {
    create: sink_create,
    publish: sink_publish,
    verify: sink_verify,
    destroy: sink_destroy,
    check: sink_check,
};

static COMMITTER_VTABLE: CommitterVTable = CommitterVTable {
    acknowledged: committer_acknowledged,
    commit: committer_commit,
    commits_after_stop: committer_commits_after_stop,
    destroy: committer_destroy,
};

/// Registers `plugin` (once per library) and returns its declaration, declaring
/// `abi_version` and `layout_fingerprint` (the SDK's own, unless a test build
/// overrides them). Called by the function [`crate::export_plugin!`] exports; null if
/// building the declaration panicked.
#[doc(hidden)]
pub fn declare(
    plugin: impl FnOnce() -> Plugin,
    abi_version: u32,
    layout_fingerprint: u64,
) -> *const PluginDeclaration {
    let declared = catch_unwind(AssertUnwindSafe(|| {
        let declared = DECLARED.get_or_init(|| {
            let plugin = plugin();
            let mut declared = Declared {
                sdk_version: abi::SDK_VERSION.to_owned(),
                target: abi::TARGET.to_owned(),
                kinds: Vec::new(),
                declaration: PluginDeclaration {
                    magic: abi::MAGIC,
                    abi_version,
                    reserved: 0,
                    sdk_version: Str::NONE,
                    target: Str::NONE,
                    layout_fingerprint,
                    name: Str::NONE,
                    version: Str::NONE,
                    kinds: std::ptr::null(),
                    kind_count: 0,
                    set_log: guest_set_log,
                },
                plugin,
            };
            let mut kinds = Vec::new();
            for (kind, _) in &declared.plugin.sources {
                kinds.push(KindDeclaration {
                    name: Str::new(kind),
                    role: abi::role::SOURCE,
                    source: &SOURCE_VTABLE,
                    sink: std::ptr::null(),
                });
            }
            for (kind, _) in &declared.plugin.sinks {
                kinds.push(KindDeclaration {
                    name: Str::new(kind),
                    role: abi::role::SINK,
                    source: std::ptr::null(),
                    sink: &SINK_VTABLE,
                });
            }
            declared.kinds = kinds;
            let header = &mut declared.declaration;
            header.sdk_version = Str::new(&declared.sdk_version);
            header.target = Str::new(&declared.target);
            header.name = Str::new(&declared.plugin.name);
            header.version = Str::new(&declared.plugin.version);
            header.kinds = declared.kinds.as_ptr();
            header.kind_count = declared.kinds.len();
            declared
        });
        &declared.declaration as *const PluginDeclaration
    }));
    declared.unwrap_or(std::ptr::null())
}

/// [`PluginDeclaration::set_log`]: keeps the host's plugin-wide log for the events
/// raised outside its calls.
unsafe extern "C" fn guest_set_log(log: abi::PluginLogFn) {
    let _ = catch_unwind(|| {
        if let Some(declared) = DECLARED.get() {
            crate::guest_log::set_plugin_log(log, &declared.plugin.name);
        }
    });
}

/// The text of a panic's payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

/// Writes `text` to the caller's message callback.
fn write(out: MessageOut, text: &str) {
    // SAFETY: the caller gave a callback and context valid for this call; the text is
    // borrowed for the call only.
    unsafe { (out.write)(out.context, Str::new(text)) }
}

/// Runs `body` at the boundary: an error is written to `out` ([`Status::ERROR`]), a
/// panic is caught and written too ([`Status::PANIC`]).
fn guarded(out: MessageOut, body: impl FnOnce() -> Result<(), String>) -> Status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => Status::OK,
        Ok(Err(message)) => {
            write(out, &message);
            Status::ERROR
        }
        Err(payload) => {
            write(out, &format!("panicked: {}", panic_message(&*payload)));
            Status::PANIC
        }
    }
}

/// The feed a plugin source publishes into: the host's output, seen through the
/// boundary. It implements [`SourceOutput<T, PositionValue>`] for any item type that is
/// bytes (`T: AsRef<[u8]>`): the host copies the bytes during the call, so on
/// [`TryPublish::Paused`] or [`TryPublish::Retry`] the item is given back to the source
/// as usual. [`SourceOutput::poll_acknowledgements`] and
/// [`SourceOutput::flush_paused`] do nothing here: the host's source driver calls them
/// around every duty cycle.
///
/// # Lifetime
///
/// A `PluginOutput` holds a reference on the host's context (taken when it is made or
/// cloned, given back when it is dropped), so every call on it is safe for as long as
/// it lives: a clone may be kept by a committer that the host calls after the source
/// was stopped and destroyed, or by a thread of the plugin's own. Once the source was
/// destroyed the feed takes nothing more: a publish is refused (`Paused`, or an error
/// for a push publish), the other calls do nothing, and the log calls still log. A
/// clone kept for ever keeps the host's context (and the plugin loaded) for ever: drop
/// it when the work it was kept for is done.
#[derive(Debug)]
pub struct PluginOutput {
    host: HostOutput,
    feed: Arc<str>,
}

// SAFETY: the host's output context is `Sync` (a feed's publisher behind an `Arc`, its
// reference count atomic) and stays valid while this value holds its reference.
unsafe impl Send for PluginOutput {}
// SAFETY: as above.
unsafe impl Sync for PluginOutput {}

impl Clone for PluginOutput {
    fn clone(&self) -> Self {
        PluginOutput::retained(self.host, Arc::clone(&self.feed))
    }
}

impl Drop for PluginOutput {
    fn drop(&mut self) {
        // SAFETY: gives back the reference this value took (`retained`).
        unsafe { (self.vtable().release)(self.host.context) }
    }
}

impl PluginOutput {
    /// An output over `host` with a reference of its own.
    fn retained(host: HostOutput, feed: Arc<str>) -> Self {
        // SAFETY: `host` is valid (the source's, while it lives, or one a live
        // `PluginOutput` holds); the reference taken is given back by `Drop`.
        unsafe { ((*host.vtable).retain)(host.context) };
        PluginOutput { host, feed }
    }

    /// The feed's name (the source's name).
    pub fn feed(&self) -> &str {
        &self.feed
    }

    /// See [`SourceOutput::filtered`].
    pub fn filtered(&self, position: PositionValue, reason: &str) {
        // SAFETY: as in try_publish.
        unsafe {
            (self.vtable().filtered)(
                self.host.context,
                position.lane,
                position.offset,
                Str::new(reason),
            )
        }
    }

    /// See [`SourceOutput::acknowledge_with`]: the host owns the committer from now on.
    pub fn acknowledge_with(&self, committer: Box<dyn SourceCommitter<PositionValue>>) {
        let handle = Box::into_raw(Box::new(committer)) as *mut c_void;
        // SAFETY: the host takes the committer and frees it through its vtable's
        // `destroy`, which frees it here, on the side that allocated it.
        unsafe {
            (self.vtable().acknowledge_with)(
                self.host.context,
                CommitterRef {
                    handle,
                    vtable: &COMMITTER_VTABLE,
                },
            )
        }
    }

    /// See [`SourceOutput::set_epoch`].
    pub fn set_epoch(&self, epoch: Epoch) {
        // SAFETY: as in try_publish.
        unsafe { (self.vtable().set_epoch)(self.host.context, epoch.0) }
    }

    /// See [`SourceOutput::set_pause_by_default`].
    pub fn set_pause_by_default(&self, pause: bool) {
        // SAFETY: as in try_publish.
        unsafe { (self.vtable().set_pause_by_default)(self.host.context, u8::from(pause)) }
    }

    /// See [`SourceOutput::report_state`].
    pub fn report_state(&self, state: SourceState, detail: Option<&str>) {
        let detail = detail.map_or(Str::NONE, Str::new);
        // SAFETY: as in try_publish.
        unsafe { (self.vtable().report_state)(self.host.context, state_code(state), detail) }
    }

    /// Logs `message` as a WARN in the host's log, with the feed's name, from any
    /// thread. (A plugin's own `tracing` events at INFO and above reach the host's log
    /// too: with the feed's name on the thread the host is calling into the source
    /// from, with the plugin's name elsewhere.)
    pub fn warn(&self, message: &str) {
        // SAFETY: as in try_publish.
        unsafe { (self.vtable().log)(self.host.context, abi::level::WARN, Str::new(message)) }
    }

    /// Logs `message` as an INFO in the host's log, with the feed's name.
    pub fn info(&self, message: &str) {
        // SAFETY: as in try_publish.
        unsafe { (self.vtable().log)(self.host.context, abi::level::INFO, Str::new(message)) }
    }

    /// See [`SourceOutput::report_loss`]: a loss the source knows of (input it will
    /// never deliver) makes the feed not lossless.
    pub fn report_loss(&self, what: &str, bytes: Option<u64>) {
        // SAFETY: as in try_publish.
        unsafe {
            (self.vtable().report_loss)(
                self.host.context,
                Str::new(what),
                bytes.unwrap_or(0),
                u8::from(bytes.is_some()),
            )
        }
    }

    /// See [`SourceOutput::report_files`]: the input files of a many-file source, for
    /// the feed's status (at most once per scan or poll interval, never per item).
    pub fn report_files(&self, files: &[FileLag]) {
        let files: Vec<abi::FileLagRef> = files
            .iter()
            .map(|file| abi::FileLagRef {
                path: Str::new(&file.path),
                committed: file.committed,
                size: file.size,
                lag: file.lag,
                lane: file.lane,
                reserved: 0,
            })
            .collect();
        // SAFETY: as in try_publish; the files and their paths are borrowed for the call.
        unsafe { (self.vtable().report_files)(self.host.context, files.as_ptr(), files.len()) }
    }

    /// See [`SourceOutput::saved_positions`]: what the feed's consumers that store
    /// positions with their state hold, for the source to reconcile its own committed
    /// position with at start (a lost or damaged store resumes there instead of
    /// re-applying or skipping).
    pub fn saved_positions(&self) -> Vec<ConsumerPosition> {
        unsafe extern "C" fn each(
            context: *mut c_void,
            consumer: Str,
            saved: u8,
            epoch: u64,
            lane: u32,
            offset: u64,
        ) {
            let _ = catch_unwind(AssertUnwindSafe(|| {
                // SAFETY: `context` is the vector `saved_positions` passed, alive for
                // the call; `consumer` is borrowed for this call.
                let positions = unsafe { &mut *(context as *mut Vec<ConsumerPosition>) };
                positions.push(ConsumerPosition {
                    consumer: unsafe { consumer.as_str() }.into_owned(),
                    saved: (saved != 0).then_some((Epoch(epoch), PositionValue { lane, offset })),
                });
            }));
        }
        let mut positions: Vec<ConsumerPosition> = Vec::new();
        // SAFETY: as in try_publish; the callback and its context live for the call.
        unsafe {
            (self.vtable().saved_positions)(
                self.host.context,
                each,
                &mut positions as *mut Vec<ConsumerPosition> as *mut c_void,
            )
        };
        positions
    }

    /// See [`SourceOutput::set_unterminated_bytes`].
    pub fn set_unterminated_bytes(&self, bytes: u64) {
        // SAFETY: as in try_publish.
        unsafe { (self.vtable().set_unterminated_bytes)(self.host.context, bytes) }
    }

    fn vtable(&self) -> &abi::HostOutputVTable {
        // SAFETY: the host's vtable is in its context, valid while this value holds its
        // reference.
        unsafe { &*self.host.vtable }
    }
}

fn state_code(state: SourceState) -> u32 {
    match state {
        SourceState::Starting => abi::state::STARTING,
        SourceState::Behind => abi::state::BEHIND,
        SourceState::CaughtUp => abi::state::CAUGHT_UP,
        SourceState::EndOfStream => abi::state::END_OF_STREAM,
    }
}

impl<T: AsRef<[u8]> + Send> SourceOutput<T, PositionValue> for PluginOutput {
    fn try_publish(&self, item: T, position: PositionValue) -> TryPublish<T> {
        // SAFETY: the host context is valid (see the type); the bytes are borrowed for
        // the call and copied by the host.
        let code = unsafe {
            (self.vtable().try_publish)(
                self.host.context,
                ByteSlice::new(item.as_ref()),
                position.lane,
                position.offset,
            )
        };
        match code {
            abi::publish::PUBLISHED => TryPublish::Published,
            abi::publish::RETRY => TryPublish::Retry(item),
            _ => TryPublish::Paused(item),
        }
    }

    /// Publishes items pulled from `next` in one call to the host (the host takes its
    /// feed's lock once and pulls an item only when it can take it), so a source with
    /// many items ready crosses the boundary once per batch, not once per item.
    fn try_publish_batch(
        &self,
        next: &mut dyn FnMut() -> Option<(T, PositionValue)>,
    ) -> BatchEnd<T, PositionValue> {
        let mut state = Pull {
            next,
            current: None,
            panic: None,
        };
        // SAFETY: the host pulls through `pull::<T>` with `state`, alive for the call;
        // each item stays in `state.current` until the next pull, so its bytes are
        // valid while the host copies them.
        let code = unsafe {
            (self.vtable().try_publish_batch)(
                self.host.context,
                pull::<T>,
                &mut state as *mut Pull<'_, T> as *mut c_void,
            )
        };
        if let Some(payload) = state.panic {
            // the source's own producer panicked: unwind in the plugin, as it would
            // without the boundary (the boundary around do_work catches it)
            std::panic::resume_unwind(payload);
        }
        let current = state.current.take();
        let returned = |refusal| match current {
            Some((item, position)) => BatchEnd::Returned(item, position, refusal),
            None => BatchEnd::Paused,
        };
        match code {
            abi::batch::EXHAUSTED => BatchEnd::Exhausted,
            abi::batch::PAUSED => BatchEnd::Paused,
            abi::batch::RETURNED_RETRY => returned(Refusal::Retry),
            // RETURNED_PAUSED, or a host failure: keep the last item (a duplicate at
            // worst, never a gap)
            _ => returned(Refusal::Paused),
        }
    }

    fn publish(&self, item: T) -> Result<(), PublishRefused> {
        let mut message = String::new();
        // SAFETY: as in try_publish; `message` outlives the call.
        let status = unsafe {
            (self.vtable().publish)(
                self.host.context,
                ByteSlice::new(item.as_ref()),
                message_out(&mut message),
            )
        };
        if status == Status::OK {
            return Ok(());
        }
        let (kind, reason) = match message.split_once(": ") {
            Some(("RefusedDeadline", reason)) => (FailureKind::RefusedDeadline, reason),
            Some((_, reason)) => (FailureKind::RefusedState, reason),
            None => (FailureKind::RefusedState, message.as_str()),
        };
        Err(PublishRefused {
            feed: self.feed.to_string(),
            kind,
            evidence: EvidenceStatus::NotDegraded,
            reason: reason.to_owned(),
        })
    }

    fn cache(&self, item: T, position: PositionValue) {
        // SAFETY: as in try_publish.
        unsafe {
            (self.vtable().cache)(
                self.host.context,
                ByteSlice::new(item.as_ref()),
                position.lane,
                position.offset,
            )
        }
    }

    fn filtered(&self, position: PositionValue, reason: &str) {
        PluginOutput::filtered(self, position, reason)
    }

    fn poll_acknowledgements(&self) -> usize {
        // the host's driver polls around every cycle; this is for a source that must
        // commit before it gives input up (a revoked partition)
        // SAFETY: as in try_publish.
        let polled = unsafe { (self.vtable().poll_acknowledgements)(self.host.context) };
        usize::try_from(polled).unwrap_or(usize::MAX)
    }

    fn flush_paused(&self) -> bool {
        true // the host's driver flushes around every cycle
    }

    fn acknowledge_with(&self, committer: Box<dyn SourceCommitter<PositionValue>>) {
        PluginOutput::acknowledge_with(self, committer)
    }

    fn set_epoch(&self, epoch: Epoch) {
        PluginOutput::set_epoch(self, epoch)
    }

    fn set_pause_by_default(&self, pause: bool) {
        PluginOutput::set_pause_by_default(self, pause)
    }

    fn report_state(&self, state: SourceState, detail: Option<&str>) {
        PluginOutput::report_state(self, state, detail)
    }

    fn set_unterminated_bytes(&self, bytes: u64) {
        PluginOutput::set_unterminated_bytes(self, bytes)
    }

    fn report_loss(&self, what: &str, bytes: Option<u64>) {
        PluginOutput::report_loss(self, what, bytes)
    }

    fn saved_positions(&self) -> Vec<ConsumerPosition> {
        PluginOutput::saved_positions(self)
    }

    fn report_files(&self, files: &[FileLag]) {
        PluginOutput::report_files(self, files)
    }
}

/// The state of a batch the host pulls from: the source's producer and the item
/// pulled last (kept so its bytes stay valid, and given back if it is not published).
struct Pull<'a, T> {
    next: &'a mut dyn FnMut() -> Option<(T, PositionValue)>,
    current: Option<(T, PositionValue)>,
    panic: Option<Box<dyn std::any::Any + Send>>,
}

/// The host's pull of the next item of a batch.
unsafe extern "C" fn pull<T: AsRef<[u8]>>(context: *mut c_void, item: *mut ItemRef) -> u8 {
    // SAFETY: `context` is the `Pull` of the running `try_publish_batch`.
    let state = unsafe { &mut *(context as *mut Pull<'_, T>) };
    if state.panic.is_some() {
        return 0;
    }
    state.current = None;
    match catch_unwind(AssertUnwindSafe(|| (state.next)())) {
        Ok(Some(pulled)) => {
            let (value, position) = state.current.insert(pulled);
            // SAFETY: the host's out pointer, valid for the call.
            unsafe {
                *item = ItemRef {
                    bytes: ByteSlice::new(value.as_ref()),
                    offset: position.offset,
                    lane: position.lane,
                    reserved: 0,
                };
            }
            1
        }
        Ok(None) => 0,
        Err(payload) => {
            state.panic = Some(payload);
            0
        }
    }
}

/// A [`MessageOut`] that copies into `message`.
pub(crate) fn message_out(message: &mut String) -> MessageOut {
    unsafe extern "C" fn copy(context: *mut c_void, text: Str) {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: `context` is the `String` `message_out` was given, alive for the
            // call; `text` is borrowed for this call.
            let message = unsafe { &mut *(context as *mut String) };
            message.push_str(&unsafe { text.as_str() });
        }));
    }
    MessageOut {
        context: message as *mut String as *mut c_void,
        write: copy,
    }
}

/// A plugin source behind a handle, with its feed (where its `tracing` events go
/// while the host calls into it).
struct SourceHandle {
    source: Box<dyn EventSource>,
    host: HostOutput,
}

fn core_message(error: CoreError) -> String {
    error.to_string()
}

/// [`SourceVTable::check`].
unsafe extern "C" fn source_check(
    kind: Str,
    config: Str,
    base_dir: Str,
    key: MessageOut,
    error: MessageOut,
) -> Status {
    check_settings(false, kind, config, base_dir, key, error)
}

/// [`SinkVTable::check`].
unsafe extern "C" fn sink_check(
    kind: Str,
    config: Str,
    base_dir: Str,
    key: MessageOut,
    error: MessageOut,
) -> Status {
    check_settings(true, kind, config, base_dir, key, error)
}

/// Runs the settings check of a kind (none declared: nothing to check).
fn check_settings(
    sink: bool,
    kind: Str,
    config: Str,
    base_dir: Str,
    key: MessageOut,
    error: MessageOut,
) -> Status {
    guarded(error, || {
        // SAFETY: the host passes text valid for this call.
        let (kind, config, base_dir) =
            unsafe { (kind.as_str(), config.as_str(), base_dir.as_str()) };
        let declared = declared()?;
        let checks = if sink {
            &declared.plugin.sink_checks
        } else {
            &declared.plugin.source_checks
        };
        let Some((_, check)) = checks.iter().find(|(declared, _)| *declared == kind) else {
            return Ok(());
        };
        settings::resolving_against(&base_dir, || check(&config)).map_err(|refused| {
            if !refused.key.is_empty() {
                write(key, &refused.key);
            }
            refused.message
        })
    })
}

unsafe extern "C" fn source_create(
    kind: Str,
    name: Str,
    config: Str,
    base_dir: Str,
    host: HostOutput,
    handle: *mut *mut c_void,
    error: MessageOut,
) -> Status {
    guarded(error, || {
        // SAFETY: the host passes text valid for this call.
        let (kind, name, config, base_dir) = unsafe {
            (
                kind.as_str(),
                name.as_str(),
                config.as_str(),
                base_dir.as_str(),
            )
        };
        let declared = declared()?;
        let factory = declared
            .plugin
            .sources
            .iter()
            .find(|(declared, _)| *declared == kind)
            .map(|(_, factory)| factory)
            .ok_or_else(|| format!("this plugin declares no source kind '{kind}'"))?;
        let output = PluginOutput::retained(host, Arc::from(&*name));
        let _forwarding = Forwarding::to(host);
        let source = settings::resolving_against(&base_dir, || factory(&config, output))?;
        let boxed = Box::new(SourceHandle { source, host });
        // SAFETY: the host passes a valid out pointer.
        unsafe { *handle = Box::into_raw(boxed) as *mut c_void };
        Ok(())
    })
}

/// The source behind `handle`.
///
/// # Safety
/// `handle` came from `source_create` and was not destroyed; the host calls one
/// function at a time per handle.
unsafe fn source<'a>(handle: *mut c_void) -> &'a mut SourceHandle {
    // SAFETY: see the function's contract.
    unsafe { &mut *(handle as *mut SourceHandle) }
}

unsafe extern "C" fn source_start(handle: *mut c_void, error: MessageOut) -> Status {
    // SAFETY: the host's contract (see `source`).
    guarded(error, || {
        let handle = unsafe { source(handle) };
        let _forwarding = Forwarding::to(handle.host);
        handle.source.start().map_err(core_message)
    })
}

unsafe extern "C" fn source_do_work(
    handle: *mut c_void,
    work: *mut usize,
    error: MessageOut,
) -> Status {
    guarded(error, || {
        // SAFETY: the host's contract (see `source`).
        let handle = unsafe { source(handle) };
        let _forwarding = Forwarding::to(handle.host);
        let done = handle.source.do_work().map_err(core_message)?;
        // SAFETY: the host passes a valid out pointer.
        unsafe { *work = done.0 };
        Ok(())
    })
}

unsafe extern "C" fn source_stop(handle: *mut c_void, error: MessageOut) -> Status {
    // SAFETY: the host's contract (see `source`).
    guarded(error, || {
        let handle = unsafe { source(handle) };
        let _forwarding = Forwarding::to(handle.host);
        handle.source.stop().map_err(core_message)
    })
}

unsafe extern "C" fn source_destroy(handle: *mut c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if !handle.is_null() {
            // SAFETY: made by `source_create` with `Box::into_raw`, destroyed once.
            drop(unsafe { Box::from_raw(handle as *mut SourceHandle) });
        }
    }));
}

/// The committer behind `handle`.
///
/// # Safety
/// `handle` came from `acknowledge_with` and was not destroyed.
unsafe fn committer<'a>(handle: *mut c_void) -> &'a mut Box<dyn SourceCommitter<PositionValue>> {
    // SAFETY: see the function's contract.
    unsafe { &mut *(handle as *mut Box<dyn SourceCommitter<PositionValue>>) }
}

unsafe extern "C" fn committer_acknowledged(
    handle: *mut c_void,
    sequence: u64,
    epoch: u64,
    lane: u32,
    offset: u64,
    error: MessageOut,
) -> Status {
    guarded(error, || {
        // SAFETY: the host's contract (see `committer`).
        unsafe { committer(handle) }.acknowledged(
            sequence,
            Epoch(epoch),
            PositionValue { lane, offset },
        );
        Ok(())
    })
}

unsafe extern "C" fn committer_commit(handle: *mut c_void, error: MessageOut) -> Status {
    // SAFETY: the host's contract (see `committer`).
    guarded(error, || {
        unsafe { committer(handle) }.commit().map_err(core_message)
    })
}

unsafe extern "C" fn committer_commits_after_stop(handle: *mut c_void) -> u8 {
    // SAFETY: the host's contract (see `committer`).
    catch_unwind(AssertUnwindSafe(|| {
        u8::from(unsafe { committer(handle) }.commits_after_stop())
    }))
    .unwrap_or(0)
}

unsafe extern "C" fn committer_destroy(handle: *mut c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if !handle.is_null() {
            // SAFETY: made by `acknowledge_with` with `Box::into_raw`, destroyed once.
            drop(unsafe { Box::from_raw(handle as *mut Box<dyn SourceCommitter<PositionValue>>) });
        }
    }));
}

/// A plugin sink behind a handle, with the outcomes of its last call (their evidence
/// is what the host's [`OutcomeRef`]s borrow until the next call).
struct SinkHandle {
    sink: Box<dyn Sink>,
    outputs: Vec<Output>,
    outcomes: Vec<SinkOutcome>,
    verified: Option<SinkOutcome>,
}

const NO_OUTCOME: &str = "the plugin sink gave no outcome for this output (counted uncertain)";

fn outcome_ref(outcome: Option<&SinkOutcome>) -> OutcomeRef {
    match outcome {
        Some(SinkOutcome::Published { evidence }) => OutcomeRef {
            kind: abi::outcome::PUBLISHED,
            retryable: 0,
            evidence: Str::new(evidence),
        },
        Some(SinkOutcome::NotPublished {
            evidence,
            retryable,
        }) => OutcomeRef {
            kind: abi::outcome::NOT_PUBLISHED,
            retryable: u32::from(*retryable),
            evidence: Str::new(evidence),
        },
        Some(SinkOutcome::Uncertain { evidence }) => OutcomeRef {
            kind: abi::outcome::UNCERTAIN,
            retryable: 0,
            evidence: Str::new(evidence),
        },
        None => OutcomeRef {
            kind: abi::outcome::UNCERTAIN,
            retryable: 0,
            evidence: Str::new(NO_OUTCOME),
        },
    }
}

/// The owned key of a borrowed one.
///
/// # Safety
/// `key.feed` is valid for the call.
unsafe fn owned_key(key: &KeyRef) -> OutputKey {
    OutputKey::new(
        // SAFETY: see the function's contract.
        &unsafe { key.feed.as_str() },
        Epoch(key.epoch),
        key.lane,
        key.position,
        key.index,
        key.generation,
    )
}

unsafe extern "C" fn sink_create(
    kind: Str,
    _name: Str,
    config: Str,
    base_dir: Str,
    handle: *mut *mut c_void,
    error: MessageOut,
) -> Status {
    guarded(error, || {
        // SAFETY: the host passes text valid for this call.
        let (kind, config, base_dir) =
            unsafe { (kind.as_str(), config.as_str(), base_dir.as_str()) };
        let declared = declared()?;
        let factory = declared
            .plugin
            .sinks
            .iter()
            .find(|(declared, _)| *declared == kind)
            .map(|(_, factory)| factory)
            .ok_or_else(|| format!("this plugin declares no sink kind '{kind}'"))?;
        let sink = settings::resolving_against(&base_dir, || factory(&config))?;
        let boxed = Box::new(SinkHandle {
            sink,
            outputs: Vec::new(),
            outcomes: Vec::new(),
            verified: None,
        });
        // SAFETY: the host passes a valid out pointer.
        unsafe { *handle = Box::into_raw(boxed) as *mut c_void };
        Ok(())
    })
}

unsafe extern "C" fn sink_publish(
    handle: *mut c_void,
    outputs: *const OutputRef,
    outcomes: *mut OutcomeRef,
    count: usize,
    error: MessageOut,
) -> Status {
    guarded(error, || {
        // SAFETY: `handle` came from `sink_create`; the host calls one function at a
        // time per sink; `outputs` and `outcomes` hold `count` entries for the call.
        let (sink, given, answers) = unsafe {
            (
                &mut *(handle as *mut SinkHandle),
                std::slice::from_raw_parts(outputs, count),
                std::slice::from_raw_parts_mut(outcomes, count),
            )
        };
        sink.outputs.clear();
        for output in given {
            sink.outputs.push(Output {
                // SAFETY: borrowed for the call.
                key: unsafe { owned_key(&output.key) },
                // SAFETY: borrowed for the call.
                payload: unsafe { output.payload.as_slice() }.to_vec(),
                attempt: output.attempt,
            });
        }
        sink.outcomes.clear();
        sink.sink.publish(&sink.outputs, &mut sink.outcomes);
        for (index, answer) in answers.iter_mut().enumerate() {
            *answer = outcome_ref(sink.outcomes.get(index));
        }
        Ok(())
    })
}

unsafe extern "C" fn sink_verify(
    handle: *mut c_void,
    key: *const KeyRef,
    outcome: *mut OutcomeRef,
    found: *mut u8,
    error: MessageOut,
) -> Status {
    guarded(error, || {
        // SAFETY: as in `sink_publish`; `key`, `outcome` and `found` are valid for the
        // call.
        let (sink, key) = unsafe { (&mut *(handle as *mut SinkHandle), owned_key(&*key)) };
        sink.verified = sink.sink.verify(&key);
        // SAFETY: valid out pointers for the call.
        unsafe {
            *found = u8::from(sink.verified.is_some());
            *outcome = outcome_ref(sink.verified.as_ref());
        }
        Ok(())
    })
}

unsafe extern "C" fn sink_destroy(handle: *mut c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if !handle.is_null() {
            // SAFETY: made by `sink_create` with `Box::into_raw`, destroyed once.
            drop(unsafe { Box::from_raw(handle as *mut SinkHandle) });
        }
    }));
}
