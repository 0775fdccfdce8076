//! The plugin's side: adapters from an author's [`EventSource`] (publishing into a
//! [`PluginOutput`]), [`SourceCommitter`](mongoose_core::SourceCommitter) and [`Sink`]
//! to the [`crate::abi`] vtables, and the registry [`crate::export_plugin!`] fills.
//!
//! An author never touches this module directly: the macro builds a [`Plugin`] of
//! factories and exports the declaration; the vtables below are the same for every
//! plugin (their `create` finds the kind's factory by name).

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use mongoose_core::sink::Sink;
use mongoose_core::EventSource;

use crate::abi::{
    self, CommitterVTable, KindDeclaration, MessageOut, PluginDeclaration, SinkVTable,
    SourceVTable, Status, Str,
};
use crate::settings::{CreateContext, SettingsError};

mod output;
mod sink;
mod source;

pub use output::PluginOutput;
use sink::{sink_create, sink_destroy, sink_publish, sink_verify};
use source::{
    committer_acknowledged, committer_commit, committer_commits_after_stop, committer_destroy,
    source_create, source_destroy, source_do_work, source_start, source_stop,
};

/// Builds a source of a kind from the feed's settings (with the config's folder) and
/// the output it publishes into.
type SourceFactory = Box<
    dyn Fn(&CreateContext<'_>, PluginOutput) -> Result<Box<dyn EventSource>, String> + Send + Sync,
>;

/// Builds a sink of a kind from its settings (with the config's folder).
type SinkFactory = Box<dyn Fn(&CreateContext<'_>) -> Result<Box<dyn Sink>, String> + Send + Sync>;

/// Checks a kind's settings without opening or creating anything.
type SettingsCheck = Box<dyn Fn(&CreateContext<'_>) -> Result<(), SettingsError> + Send + Sync>;

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
        F: Fn(&CreateContext<'_>) -> Result<(), SettingsError> + Send + Sync + 'static,
    {
        self.source_checks.push((kind.to_owned(), Box::new(check)));
        self
    }

    /// Declares the settings check of sink kind `kind` (see [`Plugin::source_check`]).
    pub fn sink_check<F>(mut self, kind: &str, check: F) -> Self
    where
        F: Fn(&CreateContext<'_>) -> Result<(), SettingsError> + Send + Sync + 'static,
    {
        self.sink_checks.push((kind.to_owned(), Box::new(check)));
        self
    }

    /// Declares source kind `kind`, built by `factory(create, output)`.
    pub fn source<S, F>(mut self, kind: &str, factory: F) -> Self
    where
        S: EventSource + 'static,
        F: Fn(&CreateContext<'_>, PluginOutput) -> Result<S, String> + Send + Sync + 'static,
    {
        self.sources.push((
            kind.to_owned(),
            Box::new(move |create, output| {
                factory(create, output).map(|source| Box::new(source) as Box<dyn EventSource>)
            }),
        ));
        self
    }

    /// Declares sink kind `kind`, built by `factory(create)`.
    pub fn sink<K, F>(mut self, kind: &str, factory: F) -> Self
    where
        K: Sink + 'static,
        F: Fn(&CreateContext<'_>) -> Result<K, String> + Send + Sync + 'static,
    {
        self.sinks.push((
            kind.to_owned(),
            Box::new(move |create| factory(create).map(|sink| Box::new(sink) as Box<dyn Sink>)),
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

/// A [`MessageOut`] that copies into `message`.
pub(crate) fn message_out(message: &mut String) -> MessageOut {
    unsafe extern "C" fn copy(context: *mut c_void, text: Str) {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: `context` is the `String` `message_out` was given, alive for the
            // call; `text` is borrowed for this call.
            let message = unsafe { &mut *(context as *mut String) };
            // SAFETY: `text` points to its bytes for this call (the host's contract).
            message.push_str(&unsafe { text.as_str() });
        }));
    }
    MessageOut {
        context: message as *mut String as *mut c_void,
        write: copy,
    }
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
        check(&CreateContext::new(&config, base(&base_dir))).map_err(|refused| {
            if !refused.key.is_empty() {
                write(key, &refused.key);
            }
            refused.message
        })
    })
}

/// The config file's folder the host passed (empty: the working directory).
fn base(base_dir: &str) -> Option<&std::path::Path> {
    (!base_dir.is_empty()).then(|| std::path::Path::new(base_dir))
}
