//! Loading a plugin: the file checks, the handshake and the kinds it declares.

use std::path::{Path, PathBuf};

use crate::abi::{self, PluginDeclaration, Str};

use super::vtables::plugin_log;
use super::{DeclaredKind, PluginError, Role};

/// A loaded plugin that passed the handshake.
#[derive(Debug)]
pub struct PluginLibrary {
    pub(super) path: PathBuf,
    pub(super) name: String,
    pub(super) version: String,
    pub(super) sdk_version: String,
    pub(super) abi_version: u32,
    pub(super) kinds: Vec<DeclaredKind>,
    // held only to keep the code loaded, and never unloaded: a plugin's own threads,
    // thread-locals and the outputs it keeps (a `PluginOutput` given back from a thread
    // of the plugin's own may free the last host object) can outlive every host object,
    // and returning into unloaded code would crash the process. A plugin that passed
    // its handshake stays loaded until the process exits.
    _library: std::mem::ManuallyDrop<libloading::Library>,
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
    /// fingerprint. The file is checked before anything of it is mapped (a file cut
    /// short is refused, never a SIGBUS) and a private copy of it is loaded, so a file
    /// replaced or overwritten on disk never touches a running server. A mismatch is [`PluginError::Refused`] naming both sides' values and
    /// what to rebuild; the library is unloaded again.
    pub fn load(path: &Path) -> Result<PluginLibrary, PluginError> {
        let file = path.display();
        let library = crate::plugin_file::load_private_copy(path)?;
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
            _library: std::mem::ManuallyDrop::new(library),
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

    pub(super) fn kind(&self, role: Role, name: &str) -> Option<&DeclaredKind> {
        self.kinds
            .iter()
            .find(|kind| kind.role == role && kind.name == name)
    }
}
