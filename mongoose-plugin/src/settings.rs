//! The settings a plugin's factory is given: the TOML text of the feed's (or sink's)
//! `settings` table. [`Settings`] reads a flat table (`key = "text"`, `key = 12`,
//! `key = true`) without a TOML dependency; a connector with nested settings parses the
//! text with the `toml` crate instead.
//!
//! Relative paths in settings mean what they mean in the rest of the server's config:
//! relative to the config file's folder. Read them with [`Settings::path`] (or resolve
//! them with [`base_dir`]), not as plain text, or a server started from another working
//! directory writes (and looks for) your files somewhere else.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

thread_local! {
    /// The config file's folder, while the host creates a source or sink on this thread.
    static BASE_DIR: RefCell<Option<PathBuf>> = const { RefCell::new(None) };
}

/// Runs `create` (a plugin factory) with `base_dir` as the folder relative paths resolve
/// against (empty: the working directory).
pub(crate) fn resolving_against<T>(base_dir: &str, create: impl FnOnce() -> T) -> T {
    let base = (!base_dir.is_empty()).then(|| PathBuf::from(base_dir));
    let before = BASE_DIR.replace(base);
    let created = create();
    BASE_DIR.set(before);
    created
}

/// The folder relative paths of the settings being created resolve against: the config
/// file's folder, while the host calls a plugin's factory; `None` elsewhere (the working
/// directory).
pub fn base_dir() -> Option<PathBuf> {
    BASE_DIR.with(|base| base.borrow().clone())
}

/// A kind's settings refused by its check: the key at fault (empty for the table as a
/// whole) and what is wrong. The server reports it at `feeds[N].settings.<key>` (or
/// `sinks[N].settings.<key>`), and `validate` and `run` exit 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsError {
    /// The key at fault, or empty.
    pub key: String,
    /// What is wrong, and what to do.
    pub message: String,
}

impl SettingsError {
    /// A refusal of `key` (empty: the whole table).
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        SettingsError {
            key: key.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for SettingsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.key.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.key, self.message)
        }
    }
}

impl std::error::Error for SettingsError {}

/// A flat settings table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    values: BTreeMap<String, String>,
    base_dir: Option<PathBuf>,
}

impl Settings {
    /// Parses `key = value` lines (comments and blank lines skipped; strings in double
    /// quotes with `\"` and `\\` escapes). Relative paths read with
    /// [`Settings::path`] resolve against [`base_dir`] as it is now.
    pub fn parse(text: &str) -> Result<Settings, String> {
        let mut values = BTreeMap::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(format!(
                    "settings line {}: expected key = value, found '{line}'",
                    number + 1
                ));
            };
            let key = key.trim().trim_matches('"').to_owned();
            let value = value.trim();
            let value = if let Some(quoted) = value.strip_prefix('"') {
                let Some(inner) = quoted.strip_suffix('"') else {
                    return Err(format!(
                        "settings line {}: the string of '{key}' is not closed",
                        number + 1
                    ));
                };
                inner.replace("\\\"", "\"").replace("\\\\", "\\")
            } else {
                value.to_owned()
            };
            values.insert(key, value);
        }
        Ok(Settings {
            values,
            base_dir: base_dir(),
        })
    }

    /// The text of `key`, if set.
    pub fn text(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// The text of `key`, or an error naming it.
    pub fn required(&self, key: &str) -> Result<&str, String> {
        self.text(key)
            .ok_or_else(|| format!("settings: '{key}' is required"))
    }

    /// The path of `key`, if set: a relative one resolved against the config file's
    /// folder.
    pub fn optional_path(&self, key: &str) -> Option<PathBuf> {
        let path = Path::new(self.text(key)?);
        Some(match &self.base_dir {
            Some(base) if path.is_relative() => base.join(path),
            _ => path.to_path_buf(),
        })
    }

    /// The path of `key` (see [`Settings::optional_path`]), or an error naming it.
    pub fn path(&self, key: &str) -> Result<PathBuf, String> {
        self.required(key)?;
        Ok(self.optional_path(key).unwrap_or_default())
    }

    /// The unsigned integer of `key`, if set.
    pub fn u64(&self, key: &str) -> Result<Option<u64>, String> {
        self.text(key)
            .map(|text| {
                text.replace('_', "").parse().map_err(|_| {
                    format!("settings: '{key}' must be a whole number, found '{text}'")
                })
            })
            .transpose()
    }

    /// Refuses a key not in `known` (a typo must not be ignored).
    pub fn only(&self, known: &[&str]) -> Result<(), String> {
        match self
            .values
            .keys()
            .find(|key| !known.contains(&key.as_str()))
        {
            Some(key) => Err(format!(
                "settings: unknown key '{key}': the known keys are [{}]",
                known.join(", ")
            )),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flat_table_parses() {
        let settings =
            Settings::parse("limit = 1_000\npath = \"out \\\"x\\\".txt\"\n# no\nflag = true\n")
                .expect("parsed");
        assert_eq!(settings.u64("limit"), Ok(Some(1000)));
        assert_eq!(settings.text("path"), Some("out \"x\".txt"));
        assert_eq!(settings.text("flag"), Some("true"));
        assert!(settings.only(&["limit", "path"]).is_err());
        assert!(Settings::parse("nonsense").is_err());
    }

    #[test]
    fn a_relative_path_resolves_against_the_folder_of_the_create_call() {
        let text = "pointer = \"state/p\"\nout = \"/var/out\"\n";
        let settings =
            resolving_against("/etc/mongoose", || Settings::parse(text)).expect("parsed");
        assert_eq!(
            settings.path("pointer"),
            Ok(PathBuf::from("/etc/mongoose/state/p"))
        );
        assert_eq!(
            settings.optional_path("out"),
            Some(PathBuf::from("/var/out"))
        );
        assert!(settings.path("missing").is_err());
        // outside a create call: the working directory, and the folder is gone again
        assert_eq!(base_dir(), None);
        let plain = Settings::parse(text).expect("parsed");
        assert_eq!(plain.path("pointer"), Ok(PathBuf::from("state/p")));
    }
}
