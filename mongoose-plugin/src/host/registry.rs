//! The registry of a plugin folder: every plugin in it loaded, its kinds by name.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::abi::{Status, Str};
use crate::guest::message_out;

use super::{PluginError, PluginLibrary, Role};

/// A plugin file the registry did not load, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedPlugin {
    /// The file.
    pub path: PathBuf,
    /// Why (names both sides' values and what to do).
    pub reason: String,
}

/// Every plugin of a folder, loaded.
#[derive(Debug, Default)]
pub struct PluginRegistry {
    dir: PathBuf,
    pub(super) base_dir: String,
    plugins: Vec<Arc<PluginLibrary>>,
    refused: Vec<RefusedPlugin>,
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
                Err(error) => registry.refused.push(RefusedPlugin {
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
    pub fn refused(&self) -> &[RefusedPlugin] {
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

    /// Runs the settings check the plugin declaring `kind` for `role` has for it on
    /// `settings` (TOML text, relative paths against the registry's base folder),
    /// opening and creating nothing: the key at fault (empty for the whole table) and
    /// what is wrong when it refuses them. A kind no plugin declares, or without a
    /// check, passes.
    pub fn check_settings(
        &self,
        role: Role,
        kind: &str,
        settings: &str,
    ) -> Result<(), crate::settings::SettingsError> {
        let Some(declared) = self
            .find(role, kind)
            .and_then(|plugin| plugin.kind(role, kind))
        else {
            return Ok(());
        };
        // SAFETY: a vtable of a loaded plugin (the registry keeps the library loaded),
        // declared for this role.
        let check = unsafe {
            match role {
                Role::Source => (*declared.source).check,
                Role::Sink => (*declared.sink).check,
            }
        };
        let (mut key, mut message) = (String::new(), String::new());
        // SAFETY: the texts are borrowed for the call; the callbacks copy what they get.
        let status = unsafe {
            check(
                Str::new(kind),
                Str::new(settings),
                Str::new(&self.base_dir),
                message_out(&mut key),
                message_out(&mut message),
            )
        };
        if status == Status::OK {
            Ok(())
        } else {
            Err(crate::settings::SettingsError::new(key, message))
        }
    }
}
