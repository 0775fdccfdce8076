//! The plugin SDK of Mongoose-rs: connectors written in ordinary Rust against the core
//! traits, built as `cdylib`s and loaded by the server at run time from its
//! `plugin_dir`.
//!
//! # For a connector author
//!
//! Write an [`EventSource`](mongoose_core::EventSource) that publishes into the
//! [`PluginOutput`] it is given (any bytes item: `Vec<u8>`, `String`, `&[u8]`, with a
//! [`PositionValue`](mongoose_core::PositionValue)), register a
//! [`SourceCommitter<PositionValue>`](mongoose_core::SourceCommitter) in `start`, and/or
//! a [`Sink`](mongoose_core::sink::Sink); export them with one macro:
//!
//! ```ignore
//! mongoose_plugin::export_plugin! {
//!     name: "my-connector",
//!     version: env!("CARGO_PKG_VERSION"),
//!     sources: {
//!         "my-source" => MySource::new, // fn(&CreateContext<'_>, PluginOutput) -> Result<MySource, String>
//!     },
//!     sinks: {
//!         "my-sink" => MySink::new, // fn(&CreateContext<'_>) -> Result<MySink, String>
//!     },
//! }
//! ```
//!
//! The host runs the source with its source driver, so commit-after-processing, PAUSE
//! (a `TryPublish::Paused` gives the item back: keep it and offer it next cycle) and
//! epochs work as for the built-in file source. `plugins/template` is the smallest
//! connector; copy it.
//!
//! # The boundary, and why it is hand-written `#[repr(C)]`
//!
//! Rust has no stable ABI, the `mongoose` binary uses mimalloc while a plugin uses its
//! own allocator, and each `cdylib` carries its own copy of `std` (its own panic
//! runtime, its own thread locals). So only `#[repr(C)]` data crosses ([`abi`]): a
//! declaration, vtables of `extern "C"` functions, borrowed `(ptr, len)` bytes and text
//! that the receiver copies, opaque handles each freed by the side that allocated them,
//! and status codes; every `extern "C"` body on both sides runs under `catch_unwind`.
//! A load-time handshake (ABI version, SDK major.minor, target triple, a compile-time
//! layout fingerprint of every shared struct) refuses a mismatched plugin with a message
//! naming both sides' values and what to rebuild.
//!
//! `abi_stable` and `stabby` were considered. Both would carry Rust trait objects
//! across with checked layouts, but the surface here is small (four vtables), the
//! crates add a large dependency and proc-macro layer to every connector, and neither
//! removes the need to keep the core traits themselves (`EventSource`,
//! `SourceCommitter`, `Sink`, `CoreError`, `SinkOutcome`: none is `#[repr(C)]` or
//! stable-ABI) off the boundary, which is the bulk of the work. The hand-written
//! boundary is about 400 lines, is read in one sitting, and lets a plugin depend on
//! `mongoose-core` and this crate only. Plugins must be built with `panic = "unwind"`
//! (the default): under `panic = "abort"` a plugin's panic ends the process.
//!
//! # For the host
//!
//! The `host` feature adds [`host`]: [`host::PluginLibrary::load`] (with
//! `libloading`), [`host::PluginRegistry::load_dir`], and the proxies
//! [`host::PluginSource`] (an `EventSource` over a plugin's source, publishing into a
//! host feed through an [`host::ItemCodec`]), its committer and [`host::PluginSink`].
#![deny(unsafe_op_in_unsafe_fn)]

pub mod abi;
pub mod guest;
mod guest_log;
#[cfg(feature = "host")]
pub mod host;
#[cfg(feature = "host")]
mod plugin_file;
pub mod settings;

pub use guest::{Plugin, PluginOutput};

/// Exports a plugin: its name, version, and its source and sink kinds, each with the
/// factory that builds it from its settings (the TOML text of the feed's `settings` or
/// the sink's `settings` table).
///
/// ```ignore
/// mongoose_plugin::export_plugin! {
///     name: "template",
///     version: env!("CARGO_PKG_VERSION"),
///     sources: { "counter" => Counter::new },
///     sinks: { "append" => Append::open },
/// }
/// ```
///
/// A source factory is `Fn(&CreateContext<'_>, PluginOutput) -> Result<S, String>`
/// with `S: EventSource`; a sink factory is `Fn(&CreateContext<'_>) -> Result<K, String>`
/// with `K: Sink` ([`settings::CreateContext`]: the kind's settings, read into a
/// `#[derive(Deserialize)]` struct with [`settings::CreateContext::settings`], and the
/// config file's folder).
/// Two optional keys after `sinks`, `source_checks: { "kind" => check }` and
/// `sink_checks: { ... }`, declare a kind's settings check,
/// `Fn(&CreateContext<'_>) -> Result<(), settings::SettingsError>`: run when the server loads its
/// configuration (`validate`, and `run` before anything starts), it refuses bad
/// settings with the key at fault, and must not open or create anything.
/// Two optional trailing keys, `abi_version` and `layout_fingerprint`, override what
/// the plugin declares: for tests of the host's refusals only.
#[macro_export]
macro_rules! export_plugin {
    (
        name: $name:expr,
        version: $version:expr,
        sources: { $($source_kind:literal => $source_factory:expr),* $(,)? },
        sinks: { $($sink_kind:literal => $sink_factory:expr),* $(,)? }
        $(, source_checks: { $($source_check_kind:literal => $source_check:expr),* $(,)? })?
        $(, sink_checks: { $($sink_check_kind:literal => $sink_check:expr),* $(,)? })?
        $(, abi_version: $abi:expr)?
        $(, layout_fingerprint: $fingerprint:expr)?
        $(,)?
    ) => {
        /// The plugin's declaration, read by the Mongoose host when it loads the library.
        #[no_mangle]
        pub extern "C" fn mongoose_plugin_declaration() -> *const $crate::abi::PluginDeclaration {
            let abi_version: u32 = $crate::abi::ABI_VERSION;
            $(let abi_version: u32 = $abi;)?
            let fingerprint: u64 = $crate::abi::LAYOUT_FINGERPRINT;
            $(let fingerprint: u64 = $fingerprint;)?
            $crate::guest::declare(
                || {
                    $crate::guest::Plugin::new($name, $version)
                        $(.source($source_kind, $source_factory))*
                        $(.sink($sink_kind, $sink_factory))*
                        $($(.source_check($source_check_kind, $source_check))*)?
                        $($(.sink_check($sink_check_kind, $sink_check))*)?
                },
                abi_version,
                fingerprint,
            )
        }
    };
}
