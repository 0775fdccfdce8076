//! The host's side (feature `host`): loading plugins with their handshake, the
//! registry of a plugin folder, and the proxies that make a plugin's source, committer
//! and sink ordinary [`EventSource`](mongoose_core::EventSource),
//! [`SourceCommitter`](mongoose_core::SourceCommitter) and
//! [`Sink`](mongoose_core::sink::Sink) values.
//!
//! A plugin that passed its handshake stays loaded until the process exits (its
//! threads and the outputs it keeps may outlive every host object). Each proxy frees
//! the plugin's object through the plugin's `destroy`. The context a plugin source
//! publishes through is counted: the proxy holds one reference and each
//! `PluginOutput` the plugin keeps holds one, so no safe plugin code reaches freed
//! host memory (see the SDK's `PluginOutput`).

use std::path::PathBuf;

use crate::abi::{SinkVTable, SourceVTable};

mod loader;
mod registry;
mod sink;
mod source;
mod vtables;

pub use loader::PluginLibrary;
pub use registry::{PluginRegistry, RefusedPlugin};
pub use sink::PluginSink;
pub use source::{PluginCommitter, PluginSource, SOURCE_FAILED};
pub use vtables::ItemCodec;

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
