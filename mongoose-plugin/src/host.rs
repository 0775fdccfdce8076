//! The host's side (feature `host`): loading plugins with their handshake, the
//! registry of a plugin folder, and the proxies that make a plugin's source, committer
//! and sink ordinary [`EventSource`], [`SourceCommitter`] and [`Sink`] values.
//!
//! Every proxy holds an `Arc` of its [`PluginLibrary`], so the library stays loaded
//! while any object made from it lives; each proxy frees the plugin's object through
//! the plugin's `destroy` before it lets go of the library.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use mongoose_core::sink::{Output, OutputKey, Sink, SinkOutcome};
use mongoose_core::{
    BatchEnd, CoreError, Epoch, EventSource, PositionValue, SourceCommitter, SourceOutput,
    SourceState, TryPublish, WorkDone,
};
use tracing::{error, warn};

use crate::abi::{
    self, ByteSlice, CommitterRef, CommitterVTable, HostOutput, HostOutputVTable, ItemRef, KeyRef,
    MessageOut, OutcomeRef, OutputRef, PluginDeclaration, SinkVTable, SourceVTable, Status, Str,
};
use crate::guest::{message_out, panic_message};

/// What loading or using a plugin can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginError {
    /// The library could not be opened (not a shared library, a missing dependency).
    #[error("cannot load plugin {path}: {reason}: check that it is a plugin built with `cargo xtask plugins` for this machine")]
    Open {
        /// The file.
        path: PathBuf,
        /// The loader's error.
        reason: String,
    },
    /// The handshake refused the plugin (the message names both sides and what to
    /// rebuild).
    #[error("{0}")]
    Refused(String),
    /// The plugin folder cannot be read.
    #[error("cannot read the plugin folder {dir}: {error}: fix plugin_dir or create the folder")]
    Dir {
        /// The folder.
        dir: PathBuf,
        /// The error.
        #[source]
        error: std::io::Error,
    },
    /// Two plugins (or one, twice) declare the same kind for the same role (a source
    /// kind and a sink kind may share a name: the journal plugin's `journal`).
    #[error("kind '{kind}' is declared by {first} and by {second}: remove one of the two plugins from the plugin folder")]
    DuplicateKind {
        /// The kind.
        kind: String,
        /// The first file.
        first: PathBuf,
        /// The second file.
        second: PathBuf,
    },
    /// The plugin refused to build a source or sink (its settings), or panicked doing
    /// so.
    #[error("plugin {plugin} could not create {role} '{name}' of kind '{kind}': {message}")]
    Create {
        /// The plugin's name.
        plugin: String,
        /// "source" or "sink".
        role: &'static str,
        /// The feed or sink name.
        name: String,
        /// The kind.
        kind: String,
        /// The plugin's message.
        message: String,
    },
    /// No loaded plugin declares this kind.
    #[error("no plugin declares {role} kind '{kind}'")]
    UnknownKind {
        /// "source" or "sink".
        role: &'static str,
        /// The kind.
        kind: String,
    },
}

/// Whether a declared kind is a source or a sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A source kind.
    Source,
    /// A sink kind.
    Sink,
}

impl Role {
    /// "source" or "sink".
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Source => "source",
            Role::Sink => "sink",
        }
    }
}

/// A kind a loaded plugin declares.
#[derive(Debug)]
pub struct DeclaredKind {
    /// Its name.
    pub name: String,
    /// Source or sink.
    pub role: Role,
    source: *const SourceVTable,
    sink: *const SinkVTable,
}

/// A loaded plugin that passed the handshake.
#[derive(Debug)]
pub struct PluginLibrary {
    path: PathBuf,
    name: String,
    version: String,
    sdk_version: String,
    abi_version: u32,
    kinds: Vec<DeclaredKind>,
    // last: dropped after everything above; held only to keep the code loaded
    _library: libloading::Library,
}

// SAFETY: the raw pointers in `kinds` point to the plugin's static vtables, immutable
// and valid while `library` is loaded (it is, for the life of this value); the library
// handle itself is thread-safe.
unsafe impl Send for PluginLibrary {}
// SAFETY: as above.
unsafe impl Sync for PluginLibrary {}

/// The text of a declaration string, bounded (a garbage length is refused, not read).
///
/// # Safety
/// `text` comes from a declaration whose magic matched.
unsafe fn declared_text(text: Str, what: &str, path: &Path) -> Result<String, PluginError> {
    if text.len > 4096 {
        return Err(PluginError::Refused(format!(
            "plugin {} declares a {what} of {} bytes: not a plugin of this SDK",
            path.display(),
            text.len
        )));
    }
    // SAFETY: a declaration's strings live as long as the library.
    Ok(unsafe { text.as_str() }.into_owned())
}

/// `major.minor` of a version.
fn major_minor(version: &str) -> &str {
    let mut dots = version.match_indices('.');
    match (dots.next(), dots.next()) {
        (Some(_), Some((second, _))) => &version[..second],
        _ => version,
    }
}

impl PluginLibrary {
    /// Loads the plugin at `path` and checks its declaration: the magic, the ABI
    /// version, the SDK version (same major.minor), the target triple and the layout
    /// fingerprint. A mismatch is [`PluginError::Refused`] naming both sides' values and
    /// what to rebuild; the library is unloaded again.
    pub fn load(path: &Path) -> Result<PluginLibrary, PluginError> {
        let file = path.display();
        // SAFETY: loading a library runs its initialisers: a plugin is code the
        // operator chose to run (it is in the configured plugin folder).
        let library =
            unsafe { libloading::Library::new(path) }.map_err(|error| PluginError::Open {
                path: path.to_path_buf(),
                reason: error.to_string(),
            })?;
        // SAFETY: the symbol's type is the SDK's `extern "C" fn() -> *const
        // PluginDeclaration`; a library without it is refused below.
        let declare = unsafe {
            library
                .get::<unsafe extern "C" fn() -> *const PluginDeclaration>(abi::DECLARATION_SYMBOL)
        }
        .map_err(|_| {
            PluginError::Refused(format!(
                "{file} is not a Mongoose plugin: it exports no `mongoose_plugin_declaration` \
                 (build it with mongoose_plugin::export_plugin!)"
            ))
        })?;
        // SAFETY: the SDK's declaration function catches panics and returns a pointer
        // to a static declaration, or null.
        let declaration = unsafe { declare() };
        if declaration.is_null() {
            return Err(PluginError::Refused(format!(
                "plugin {file} could not build its declaration (it panicked while declaring its kinds)"
            )));
        }
        // SAFETY: non-null, and every SDK version starts its declaration with the same
        // header (magic, abi_version, sdk_version, target, layout_fingerprint, ...).
        let header = unsafe { &*declaration };
        if header.magic != abi::MAGIC {
            return Err(PluginError::Refused(format!(
                "{file} is not a Mongoose plugin: its declaration has magic {:#018x}, expected {:#018x}",
                header.magic,
                abi::MAGIC
            )));
        }
        // SAFETY: the magic matched: this is an SDK header.
        let sdk_version = unsafe { declared_text(header.sdk_version, "SDK version", path) }?;
        // SAFETY: as above.
        let target = unsafe { declared_text(header.target, "target", path) }?;
        let ours = major_minor(abi::SDK_VERSION);
        if header.abi_version != abi::ABI_VERSION {
            return Err(PluginError::Refused(format!(
                "plugin {file} was built for ABI {} with mongoose-plugin {sdk_version}, this server speaks ABI {} \
                 (mongoose-plugin {}): rebuild the plugin against mongoose-plugin {ours}.x",
                header.abi_version,
                abi::ABI_VERSION,
                abi::SDK_VERSION
            )));
        }
        if major_minor(&sdk_version) != ours {
            return Err(PluginError::Refused(format!(
                "plugin {file} was built with mongoose-plugin {sdk_version}, this server uses mongoose-plugin {} \
                 (the major.minor versions must match): rebuild the plugin against mongoose-plugin {ours}.x",
                abi::SDK_VERSION
            )));
        }
        if target != abi::TARGET {
            return Err(PluginError::Refused(format!(
                "plugin {file} was built for target {target}, this server runs on {}: rebuild the plugin \
                 for {} (cargo xtask plugins on this machine)",
                abi::TARGET,
                abi::TARGET
            )));
        }
        if header.layout_fingerprint != abi::LAYOUT_FINGERPRINT {
            return Err(PluginError::Refused(format!(
                "plugin {file} declares layout fingerprint {:#018x}, this server's is {:#018x} (both say \
                 ABI {} and mongoose-plugin {ours}): the shared structs' layouts differ; rebuild the plugin \
                 against this server's mongoose-plugin {} with the same toolchain",
                header.layout_fingerprint,
                abi::LAYOUT_FINGERPRINT,
                abi::ABI_VERSION,
                abi::SDK_VERSION
            )));
        }
        // SAFETY: the handshake passed: the rest of the declaration has our layout.
        let name = unsafe { declared_text(header.name, "name", path) }?;
        // SAFETY: as above.
        let version = unsafe { declared_text(header.version, "version", path) }?;
        let mut kinds = Vec::new();
        if header.kind_count > 0 && !header.kinds.is_null() {
            // SAFETY: as above: `kinds` points to `kind_count` declarations.
            let declared = unsafe { std::slice::from_raw_parts(header.kinds, header.kind_count) };
            for kind in declared {
                // SAFETY: as above.
                let kind_name = unsafe { declared_text(kind.name, "kind name", path) }?;
                let role = match kind.role {
                    abi::role::SOURCE if !kind.source.is_null() => Role::Source,
                    abi::role::SINK if !kind.sink.is_null() => Role::Sink,
                    other => {
                        return Err(PluginError::Refused(format!(
                            "plugin {file} declares kind '{kind_name}' with role {other} and no matching vtable: \
                             rebuild it with mongoose_plugin::export_plugin!"
                        )))
                    }
                };
                kinds.push(DeclaredKind {
                    name: kind_name,
                    role,
                    source: kind.source,
                    sink: kind.sink,
                });
            }
        }
        // SAFETY: the handshake passed: `set_log` is the SDK's, and `plugin_log` is
        // callable from any thread for the life of the process.
        unsafe { (header.set_log)(plugin_log) };
        Ok(PluginLibrary {
            path: path.to_path_buf(),
            name,
            version,
            sdk_version,
            abi_version: header.abi_version,
            kinds,
            _library: library,
        })
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The plugin's version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The `mongoose-plugin` version it was built with.
    pub fn sdk_version(&self) -> &str {
        &self.sdk_version
    }

    /// The ABI version it declares.
    pub fn abi_version(&self) -> u32 {
        self.abi_version
    }

    /// Its kinds.
    pub fn kinds(&self) -> &[DeclaredKind] {
        &self.kinds
    }

    fn kind(&self, role: Role, name: &str) -> Option<&DeclaredKind> {
        self.kinds
            .iter()
            .find(|kind| kind.role == role && kind.name == name)
    }
}

/// A plugin file the registry did not load, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The file.
    pub path: PathBuf,
    /// Why (names both sides' values and what to do).
    pub reason: String,
}

/// Every plugin of a folder, loaded.
#[derive(Debug, Default)]
pub struct PluginRegistry {
    dir: PathBuf,
    base_dir: String,
    plugins: Vec<Arc<PluginLibrary>>,
    refused: Vec<Refusal>,
}

impl PluginRegistry {
    /// Loads every `*.so` file of `dir` (in name order). A plugin the handshake refuses
    /// is kept in [`PluginRegistry::refused`] with its reason; a kind declared twice is
    /// an error naming both files.
    pub fn load_dir(dir: &Path) -> Result<PluginRegistry, PluginError> {
        let entries = std::fs::read_dir(dir).map_err(|error| PluginError::Dir {
            dir: dir.to_path_buf(),
            error,
        })?;
        let mut files = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|error| PluginError::Dir {
                dir: dir.to_path_buf(),
                error,
            })?;
            let path = entry.path();
            if path.extension().is_some_and(|extension| extension == "so") {
                files.push(path);
            }
        }
        files.sort();
        let mut registry = PluginRegistry {
            dir: dir.to_path_buf(),
            ..PluginRegistry::default()
        };
        for path in files {
            match PluginLibrary::load(&path) {
                Ok(plugin) => {
                    for (index, kind) in plugin.kinds.iter().enumerate() {
                        let first = registry
                            .plugins
                            .iter()
                            .find(|other| {
                                other
                                    .kinds
                                    .iter()
                                    .any(|o| o.name == kind.name && o.role == kind.role)
                            })
                            .map(|other| other.path.clone())
                            .or_else(|| {
                                plugin.kinds[..index]
                                    .iter()
                                    .any(|o| o.name == kind.name && o.role == kind.role)
                                    .then(|| plugin.path.clone())
                            });
                        if let Some(first) = first {
                            return Err(PluginError::DuplicateKind {
                                kind: kind.name.clone(),
                                first,
                                second: plugin.path.clone(),
                            });
                        }
                    }
                    registry.plugins.push(Arc::new(plugin));
                }
                Err(error) => registry.refused.push(Refusal {
                    path,
                    reason: error.to_string(),
                }),
            }
        }
        Ok(registry)
    }

    /// Makes the relative paths in the settings of the sources and sinks created from
    /// now on resolve against `base_dir` (the config file's folder) instead of the
    /// working directory; refused when it is not UTF-8 (the boundary passes text).
    pub fn set_base_dir(&mut self, base_dir: &Path) -> Result<(), PluginError> {
        let text = base_dir.to_str().ok_or_else(|| {
            PluginError::Refused(format!(
                "the folder {} is not UTF-8: plugin settings cannot resolve paths against it; \
                 move the config file to a folder whose path is UTF-8",
                base_dir.display()
            ))
        })?;
        self.base_dir = text.to_owned();
        Ok(())
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The loaded plugins.
    pub fn plugins(&self) -> &[Arc<PluginLibrary>] {
        &self.plugins
    }

    /// The plugin files refused, with their reasons.
    pub fn refused(&self) -> &[Refusal] {
        &self.refused
    }

    /// The names of the declared kinds of `role`, sorted.
    pub fn kinds(&self, role: Role) -> Vec<String> {
        let mut kinds: Vec<String> = self
            .plugins
            .iter()
            .flat_map(|plugin| plugin.kinds.iter())
            .filter(|kind| kind.role == role)
            .map(|kind| kind.name.clone())
            .collect();
        kinds.sort();
        kinds
    }

    /// The plugin declaring `kind` for `role`.
    pub fn find(&self, role: Role, kind: &str) -> Option<&Arc<PluginLibrary>> {
        self.plugins
            .iter()
            .find(|plugin| plugin.kind(role, kind).is_some())
    }
}

/// Turns the bytes a plugin source publishes into the feed's item type: the host's
/// codec hook. The bytes are the host's own copy (chunked: no allocation per item).
pub trait ItemCodec<I>: Send + Sync {
    /// The item of `bytes`.
    fn decode(&self, bytes: Bytes) -> I;
}

impl<I, F: Fn(Bytes) -> I + Send + Sync> ItemCodec<I> for F {
    fn decode(&self, bytes: Bytes) -> I {
        self(bytes)
    }
}

/// How much a source's copy buffer grows at a time: items are copied into one chunk
/// until it is full, so copying allocates once per chunk, not per item.
const COPY_CHUNK: usize = 64 * 1024;

/// The host's output context a plugin source publishes through (boxed: its address
/// is what the plugin holds).
struct HostContext<I> {
    output: Arc<dyn SourceOutput<I, PositionValue>>,
    codec: Arc<dyn ItemCodec<I>>,
    buffer: Mutex<BytesMut>,
    vtable: HostOutputVTable,
    library: Arc<PluginLibrary>,
    feed: String,
}

impl<I> HostContext<I> {
    fn buffer(&self) -> std::sync::MutexGuard<'_, BytesMut> {
        self.buffer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn copy(&self, bytes: &[u8]) -> Bytes {
        copy_into(&mut self.buffer(), bytes)
    }
}

/// Copies `bytes` into the chunk `buffer` (a new chunk when it is full) and splits
/// them off, frozen.
fn copy_into(buffer: &mut BytesMut, bytes: &[u8]) -> Bytes {
    if buffer.capacity() - buffer.len() < bytes.len() {
        // a new chunk: the items split off the old one keep it alive
        *buffer = BytesMut::with_capacity(COPY_CHUNK.max(bytes.len()));
    }
    buffer.extend_from_slice(bytes);
    buffer.split().freeze()
}

/// The host context behind a plugin's pointer.
///
/// # Safety
/// `context` is a `HostContext<I>` alive for the call (the plugin source's proxy owns
/// it and destroys the plugin's source before it).
unsafe fn host_context<'a, I>(context: *const c_void) -> &'a HostContext<I> {
    // SAFETY: see the function's contract.
    unsafe { &*(context as *const HostContext<I>) }
}

/// Runs a host callback's body, logging a panic instead of unwinding into the plugin.
fn host_guard<T>(feed_of: impl FnOnce() -> String, fallback: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(value) => value,
        Err(payload) => {
            error!(feed = %feed_of(), panic = %panic_message(&*payload), "the host panicked in a plugin source's callback (a host bug): the call failed");
            fallback
        }
    }
}

/// [`abi::PluginLogFn`]: a plugin's event raised outside the host's calls (on a thread
/// of the plugin's own), logged with the plugin's name.
unsafe extern "C" fn plugin_log(plugin: Str, level: u32, message: Str) {
    host_guard(String::new, (), || {
        // SAFETY: the plugin passes strings valid for the call.
        let (plugin, message) = unsafe { (plugin.as_str(), message.as_str()) };
        if level == abi::level::WARN {
            tracing::warn!(plugin = %plugin, "{message}");
        } else {
            tracing::info!(plugin = %plugin, "{message}");
        }
    })
}

unsafe extern "C" fn host_try_publish<I: 'static>(
    context: *const c_void,
    item: ByteSlice,
    lane: u32,
    offset: u64,
) -> u32 {
    host_guard(String::new, abi::publish::FAILED, || {
        // SAFETY: the plugin calls with our context and bytes valid for the call.
        let (context, bytes) = unsafe { (host_context::<I>(context), item.as_slice()) };
        let item = context.codec.decode(context.copy(bytes));
        match context
            .output
            .try_publish(item, PositionValue { lane, offset })
        {
            TryPublish::Published => abi::publish::PUBLISHED,
            TryPublish::Paused(_) => abi::publish::PAUSED,
            TryPublish::Retry(_) => abi::publish::RETRY,
        }
    })
}

unsafe extern "C" fn host_try_publish_batch<I: 'static>(
    context: *const c_void,
    pull: abi::PullFn,
    pull_context: *mut c_void,
) -> u32 {
    host_guard(String::new, abi::batch::FAILED, || {
        // SAFETY: the plugin calls with our context.
        let context = unsafe { host_context::<I>(context) };
        let mut buffer = context.buffer();
        let mut next = || {
            let mut item = ItemRef {
                bytes: ByteSlice::new(&[]),
                offset: 0,
                lane: 0,
                reserved: 0,
            };
            // SAFETY: the plugin's pull function and context, valid for this batch; the
            // item's bytes are borrowed until the next pull, and copied now.
            if unsafe { pull(pull_context, &mut item) } == 0 {
                return None;
            }
            // SAFETY: as above.
            let bytes = copy_into(&mut buffer, unsafe { item.bytes.as_slice() });
            Some((
                context.codec.decode(bytes),
                PositionValue {
                    lane: item.lane,
                    offset: item.offset,
                },
            ))
        };
        match context.output.try_publish_batch(&mut next) {
            BatchEnd::Exhausted => abi::batch::EXHAUSTED,
            BatchEnd::Paused => abi::batch::PAUSED,
            BatchEnd::Returned(_, _, mongoose_core::Refusal::Paused) => abi::batch::RETURNED_PAUSED,
            BatchEnd::Returned(_, _, mongoose_core::Refusal::Retry) => abi::batch::RETURNED_RETRY,
        }
    })
}

unsafe extern "C" fn host_publish<I: 'static>(
    context: *const c_void,
    item: ByteSlice,
    error: MessageOut,
) -> Status {
    host_guard(String::new, Status::PANIC, || {
        // SAFETY: as in `host_try_publish`.
        let (context, bytes) = unsafe { (host_context::<I>(context), item.as_slice()) };
        let item = context.codec.decode(context.copy(bytes));
        match context.output.publish(item) {
            Ok(()) => Status::OK,
            Err(refused) => {
                let text = format!("{:?}: {}", refused.kind, refused.reason);
                // SAFETY: the plugin's callback, valid for the call.
                unsafe { (error.write)(error.context, Str::new(&text)) };
                Status::ERROR
            }
        }
    })
}

unsafe extern "C" fn host_cache<I: 'static>(
    context: *const c_void,
    item: ByteSlice,
    lane: u32,
    offset: u64,
) {
    host_guard(String::new, (), || {
        // SAFETY: as in `host_try_publish`.
        let (context, bytes) = unsafe { (host_context::<I>(context), item.as_slice()) };
        let item = context.codec.decode(context.copy(bytes));
        context.output.cache(item, PositionValue { lane, offset });
    })
}

unsafe extern "C" fn host_filtered<I: 'static>(
    context: *const c_void,
    lane: u32,
    offset: u64,
    reason: Str,
) {
    host_guard(String::new, (), || {
        // SAFETY: as in `host_try_publish`.
        let (context, reason) = unsafe { (host_context::<I>(context), reason.as_str()) };
        context
            .output
            .filtered(PositionValue { lane, offset }, &reason);
    })
}

unsafe extern "C" fn host_set_epoch<I: 'static>(context: *const c_void, epoch: u64) {
    host_guard(String::new, (), || {
        // SAFETY: as in `host_try_publish`.
        unsafe { host_context::<I>(context) }
            .output
            .set_epoch(Epoch(epoch));
    })
}

unsafe extern "C" fn host_set_pause_by_default<I: 'static>(context: *const c_void, pause: u8) {
    host_guard(String::new, (), || {
        // SAFETY: as in `host_try_publish`.
        unsafe { host_context::<I>(context) }
            .output
            .set_pause_by_default(pause != 0);
    })
}

unsafe extern "C" fn host_report_state<I: 'static>(
    context: *const c_void,
    state: u32,
    detail: Str,
) {
    host_guard(String::new, (), || {
        // SAFETY: as in `host_try_publish`.
        let context = unsafe { host_context::<I>(context) };
        let state = match state {
            abi::state::STARTING => SourceState::Starting,
            abi::state::CAUGHT_UP => SourceState::CaughtUp,
            abi::state::END_OF_STREAM => SourceState::EndOfStream,
            _ => SourceState::Behind,
        };
        // SAFETY: borrowed for the call.
        let detail = (!detail.is_none()).then(|| unsafe { detail.as_str() });
        context.output.report_state(state, detail.as_deref());
    })
}

unsafe extern "C" fn host_set_unterminated_bytes<I: 'static>(context: *const c_void, bytes: u64) {
    host_guard(String::new, (), || {
        // SAFETY: as in `host_try_publish`.
        unsafe { host_context::<I>(context) }
            .output
            .set_unterminated_bytes(bytes);
    })
}

unsafe extern "C" fn host_poll_acknowledgements<I: 'static>(context: *const c_void) -> u64 {
    host_guard(String::new, 0, || {
        // SAFETY: as in `host_try_publish`.
        let polled = unsafe { host_context::<I>(context) }
            .output
            .poll_acknowledgements();
        u64::try_from(polled).unwrap_or(u64::MAX)
    })
}

unsafe extern "C" fn host_log<I: 'static>(context: *const c_void, level: u32, message: Str) {
    host_guard(String::new, (), || {
        // SAFETY: as in `host_try_publish`.
        let context = unsafe { host_context::<I>(context) };
        // SAFETY: borrowed for the call.
        let message = unsafe { message.as_str() };
        let plugin = context.library.name();
        if level == abi::level::WARN {
            tracing::warn!(feed = %context.feed, plugin, "{message}");
        } else {
            tracing::info!(feed = %context.feed, plugin, "{message}");
        }
    })
}

unsafe extern "C" fn host_acknowledge_with<I: 'static>(
    context: *const c_void,
    committer: CommitterRef,
) {
    host_guard(String::new, (), || {
        // SAFETY: as in `host_try_publish`.
        let context = unsafe { host_context::<I>(context) };
        context.output.acknowledge_with(Box::new(PluginCommitter {
            handle: committer.handle,
            vtable: committer.vtable,
            feed: context.feed.clone(),
            failed: None,
            library: Arc::clone(&context.library),
        }));
    })
}

/// A plugin's committer as a [`SourceCommitter<PositionValue>`]. A panic in the
/// plugin's committer fails every later commit (the feed is not settled and a restart
/// re-delivers from the last commit that succeeded).
pub struct PluginCommitter {
    handle: *mut c_void,
    vtable: *const CommitterVTable,
    feed: String,
    failed: Option<String>,
    // last: outlives the handle
    library: Arc<PluginLibrary>,
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
    context: Box<HostContext<I>>,
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
        let context = Box::new(HostContext {
            output,
            codec,
            buffer: Mutex::new(BytesMut::new()),
            vtable: HostOutputVTable {
                try_publish: host_try_publish::<I>,
                try_publish_batch: host_try_publish_batch::<I>,
                publish: host_publish::<I>,
                cache: host_cache::<I>,
                filtered: host_filtered::<I>,
                set_epoch: host_set_epoch::<I>,
                set_pause_by_default: host_set_pause_by_default::<I>,
                report_state: host_report_state::<I>,
                set_unterminated_bytes: host_set_unterminated_bytes::<I>,
                acknowledge_with: host_acknowledge_with::<I>,
                poll_acknowledgements: host_poll_acknowledgements::<I>,
                log: host_log::<I>,
            },
            library: Arc::clone(library),
            feed: name.to_owned(),
        });
        let host = HostOutput {
            context: &*context as *const HostContext<I> as *const c_void,
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
                self.context
                    .output
                    .report_state(SourceState::Behind, Some(&detail));
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

    fn start(&mut self) -> Result<(), CoreError> {
        if let Some(failed) = &self.failed {
            return Err(self.error(failed.clone()));
        }
        let mut message = String::new();
        // SAFETY: our live handle; one call at a time (`&mut self`).
        let status = unsafe { (self.vtable().start)(self.handle, message_out(&mut message)) };
        self.check("start", status, message)
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
        // SAFETY: freed once, by the plugin that allocated it, before the context it
        // points to is dropped (fields drop after this).
        unsafe { ((*self.vtable).destroy)(self.handle) }
    }
}

/// A plugin's sink as a [`Sink`].
///
/// A panic in the plugin's `publish` is caught: every output of that batch is
/// [`SinkOutcome::Uncertain`] (the plugin may have handed some over), and the sink is
/// never called again: later outputs are [`SinkOutcome::NotPublished`], not retryable,
/// with the panic in the evidence (the sink's exhausted policy then holds their feed or
/// counts them lost).
pub struct PluginSink {
    name: String,
    kind: String,
    handle: *mut c_void,
    vtable: *const SinkVTable,
    failed: Option<String>,
    answers: Vec<OutcomeRef>,
    // last: outlives the handle
    library: Arc<PluginLibrary>,
}

impl std::fmt::Debug for PluginSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginSink")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("plugin", &self.library.name)
            .field("failed", &self.failed)
            .finish()
    }
}

// SAFETY: the plugin's sink is `Send` (a `Sink`), called from one thread at a time
// (`&mut self`).
unsafe impl Send for PluginSink {}

fn key_ref(key: &OutputKey) -> KeyRef {
    KeyRef {
        feed: Str::new(&key.feed),
        epoch: key.epoch.0,
        position: key.position,
        generation: key.writer,
        lane: key.lane,
        index: key.index,
    }
}

/// The owned outcome of a plugin's answer (copied: the evidence is borrowed).
///
/// # Safety
/// The evidence is valid until the plugin's next call on the sink.
unsafe fn owned_outcome(answer: &OutcomeRef) -> SinkOutcome {
    // SAFETY: see the function's contract.
    let evidence = unsafe { answer.evidence.as_str() }.into_owned();
    match answer.kind {
        abi::outcome::PUBLISHED => SinkOutcome::Published { evidence },
        abi::outcome::NOT_PUBLISHED => SinkOutcome::NotPublished {
            evidence,
            retryable: answer.retryable != 0,
        },
        _ => SinkOutcome::Uncertain { evidence },
    }
}

impl PluginSink {
    /// Creates sink `name` of `kind` in `registry`'s plugins from `settings` (TOML
    /// text).
    pub fn create(
        registry: &PluginRegistry,
        kind: &str,
        name: &str,
        settings: &str,
    ) -> Result<Self, PluginError> {
        let library = registry
            .find(Role::Sink, kind)
            .ok_or_else(|| PluginError::UnknownKind {
                role: "sink",
                kind: kind.to_owned(),
            })?;
        let vtable = library
            .kind(Role::Sink, kind)
            .map(|declared| declared.sink)
            .ok_or_else(|| PluginError::UnknownKind {
                role: "sink",
                kind: kind.to_owned(),
            })?;
        let mut handle: *mut c_void = std::ptr::null_mut();
        let mut message = String::new();
        // SAFETY: a vtable of the loaded plugin; texts borrowed for the call.
        let status = unsafe {
            ((*vtable).create)(
                Str::new(kind),
                Str::new(name),
                Str::new(settings),
                Str::new(&registry.base_dir),
                &mut handle,
                message_out(&mut message),
            )
        };
        if status != Status::OK || handle.is_null() {
            return Err(PluginError::Create {
                plugin: library.name.clone(),
                role: "sink",
                name: name.to_owned(),
                kind: kind.to_owned(),
                message,
            });
        }
        Ok(PluginSink {
            name: name.to_owned(),
            kind: kind.to_owned(),
            handle,
            vtable,
            failed: None,
            answers: Vec::new(),
            library: Arc::clone(library),
        })
    }

    fn vtable(&self) -> &SinkVTable {
        // SAFETY: a static of the plugin, loaded while `library` is held.
        unsafe { &*self.vtable }
    }

    fn fail(&mut self, message: &str) -> String {
        let failed = format!(
            "the plugin sink '{}' ({} {}, kind '{}') panicked: {message}; it is not called again in this run",
            self.name, self.library.name, self.library.version, self.kind
        );
        error!(sink = %self.name, "{failed}");
        self.failed = Some(failed.clone());
        failed
    }
}

impl Sink for PluginSink {
    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
        if let Some(failed) = &self.failed {
            outcomes.extend(outputs.iter().map(|_| SinkOutcome::NotPublished {
                evidence: format!("not sent: {failed}"),
                retryable: false,
            }));
            return;
        }
        let given: Vec<OutputRef> = outputs
            .iter()
            .map(|output| OutputRef {
                key: key_ref(&output.key),
                payload: ByteSlice::new(&output.payload),
                attempt: output.attempt,
                reserved: 0,
            })
            .collect();
        self.answers.clear();
        self.answers.resize(
            outputs.len(),
            OutcomeRef {
                kind: abi::outcome::UNCERTAIN,
                retryable: 0,
                evidence: Str::new("the plugin sink wrote no outcome for this output"),
            },
        );
        let mut message = String::new();
        // SAFETY: our live handle; `given` and `answers` hold `outputs.len()` entries
        // and borrow `outputs`, all alive for the call.
        let status = unsafe {
            (self.vtable().publish)(
                self.handle,
                given.as_ptr(),
                self.answers.as_mut_ptr(),
                given.len(),
                message_out(&mut message),
            )
        };
        if status == Status::OK {
            // SAFETY: the evidence is valid until our next call on the sink.
            outcomes.extend(
                self.answers
                    .iter()
                    .map(|answer| unsafe { owned_outcome(answer) }),
            );
            return;
        }
        let evidence = if status == Status::ERROR {
            format!(
                "the plugin sink failed the batch: {message}: the outputs may or may not be held"
            )
        } else {
            let failed = self.fail(&message);
            format!("{failed}: the outputs of the batch may or may not be held")
        };
        outcomes.extend(outputs.iter().map(|_| SinkOutcome::Uncertain {
            evidence: evidence.clone(),
        }));
    }

    fn verify(&mut self, key: &OutputKey) -> Option<SinkOutcome> {
        if self.failed.is_some() {
            return None;
        }
        let key = key_ref(key);
        let mut answer = OutcomeRef {
            kind: abi::outcome::UNCERTAIN,
            retryable: 0,
            evidence: Str::NONE,
        };
        let mut found = 0u8;
        let mut message = String::new();
        // SAFETY: our live handle; the pointers are valid for the call.
        let status = unsafe {
            (self.vtable().verify)(
                self.handle,
                &key,
                &mut answer,
                &mut found,
                message_out(&mut message),
            )
        };
        match status {
            // SAFETY: the evidence is valid until our next call on the sink.
            Status::OK if found != 0 => Some(unsafe { owned_outcome(&answer) }),
            Status::OK | Status::ERROR => None,
            _ => {
                self.fail(&message);
                None
            }
        }
    }
}

impl Drop for PluginSink {
    fn drop(&mut self) {
        // SAFETY: freed once, by the plugin that allocated it.
        unsafe { (self.vtable().destroy)(self.handle) }
    }
}
