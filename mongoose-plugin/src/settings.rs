//! The settings a plugin's factory is given: the TOML text of the feed's (or sink's)
//! `settings` table. [`Settings`] reads a flat table (`key = "text"`, `key = 12`,
//! `key = true`) without a TOML dependency; a connector with nested settings parses the
//! text with the `toml` crate instead.

use std::collections::BTreeMap;

/// A flat settings table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    values: BTreeMap<String, String>,
}

impl Settings {
    /// Parses `key = value` lines (comments and blank lines skipped; strings in double
    /// quotes with `\"` and `\\` escapes).
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
        Ok(Settings { values })
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
}
