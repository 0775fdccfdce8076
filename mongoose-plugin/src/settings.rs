//! What a plugin's factory is given besides its output: the [`CreateContext`], with
//! the TOML text of the feed's (or sink's) `settings` table and the config file's
//! folder. A connector declares its settings as a `#[derive(Deserialize)]` struct and
//! reads them with [`CreateContext::settings`]; [`Settings`] reads a flat table
//! (`key = "text"`, `key = 12`, `key = true`) by hand, for the connectors written
//! before.
//!
//! Relative paths in settings mean what they mean in the rest of the server's config:
//! relative to the config file's folder. Resolve them with [`CreateContext::path`] (or
//! read them with [`Settings::path`]), not as plain text, or a server started from
//! another working directory writes (and looks for) your files somewhere else.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// What the host gives a plugin's factory (and its settings check) besides the output:
/// the kind's settings and the folder their relative paths resolve against. Passed in,
/// never kept in a thread-local: it is valid for the call.
#[derive(Clone, Copy, Debug)]
pub struct CreateContext<'a> {
    settings: &'a str,
    base_dir: Option<&'a Path>,
}

impl<'a> CreateContext<'a> {
    /// The context of `settings` (TOML text) whose relative paths resolve against
    /// `base_dir` (`None`: the working directory).
    pub fn new(settings: &'a str, base_dir: Option<&'a Path>) -> Self {
        CreateContext { settings, base_dir }
    }

    /// The settings as the TOML text of the feed's (or sink's) `settings` table.
    pub fn settings_text(&self) -> &'a str {
        self.settings
    }

    /// The config file's folder, when the server has one.
    pub fn base_dir(&self) -> Option<&'a Path> {
        self.base_dir
    }

    /// The settings as `S`, a `#[derive(Deserialize)]` struct (use
    /// `#[serde(deny_unknown_fields)]`: a typo must not be ignored).
    ///
    /// # Errors
    /// A [`SettingsError`] with what TOML or serde found wrong.
    pub fn settings<S: DeserializeOwned>(&self) -> Result<S, SettingsError> {
        toml::from_str(self.settings)
            .map_err(|error| SettingsError::new("", format!("settings: {}", error.message())))
    }

    /// `path` resolved against the config file's folder when it is relative.
    pub fn path(&self, path: impl AsRef<Path>) -> PathBuf {
        let path = path.as_ref();
        match self.base_dir {
            Some(base) if path.is_relative() => base.join(path),
            _ => path.to_path_buf(),
        }
    }

    /// The settings as a flat table read by hand ([`Settings`]), its paths resolving
    /// against the config file's folder.
    ///
    /// # Errors
    /// A line that is not `key = value`.
    pub fn flat(&self) -> Result<Settings, String> {
        let mut settings = Settings::parse(self.settings)?;
        settings.base_dir = self.base_dir.map(Path::to_path_buf);
        Ok(settings)
    }
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

/// A factory's error is text: a refused setting reads as `key: what is wrong`.
impl From<SettingsError> for String {
    fn from(refused: SettingsError) -> String {
        refused.to_string()
    }
}

/// A flat settings table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    values: BTreeMap<String, String>,
    base_dir: Option<PathBuf>,
}

impl Settings {
    /// Parses `key = value` lines (comments and blank lines skipped; strings in double
    /// quotes with `\"` and `\\` escapes). Relative paths read with
    /// [`Settings::path`] stay relative (to the working directory): a factory reads
    /// its settings with [`CreateContext::flat`], which resolves them against the config
    /// file's folder.
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
            base_dir: None,
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
        let create = CreateContext::new(text, Some(Path::new("/etc/mongoose")));
        let settings = create.flat().expect("parsed");
        assert_eq!(
            settings.path("pointer"),
            Ok(PathBuf::from("/etc/mongoose/state/p"))
        );
        assert_eq!(
            settings.optional_path("out"),
            Some(PathBuf::from("/var/out"))
        );
        assert!(settings.path("missing").is_err());
        assert_eq!(
            create.path("state/p"),
            PathBuf::from("/etc/mongoose/state/p")
        );
        // without the context's folder: the working directory
        let plain = Settings::parse(text).expect("parsed");
        assert_eq!(plain.path("pointer"), Ok(PathBuf::from("state/p")));
    }

    #[test]
    fn settings_derive_through_serde_and_refuse_an_unknown_key() {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        #[serde(deny_unknown_fields)]
        struct Counter {
            limit: u64,
            pointer: PathBuf,
        }
        let create = CreateContext::new("limit = 1_000\npointer = \"p\"\n", None);
        assert_eq!(
            create.settings::<Counter>(),
            Ok(Counter {
                limit: 1000,
                pointer: PathBuf::from("p")
            })
        );
        let typo = CreateContext::new("limt = 1\npointer = \"p\"\n", None);
        let refused = typo.settings::<Counter>().expect_err("refused");
        assert!(refused.message.contains("limt"), "{refused}");
    }
}
