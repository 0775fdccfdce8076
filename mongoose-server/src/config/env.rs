//! Environment variables in the configuration's string values, expanded after the TOML
//! is parsed (so a `$` in a comment or a key does nothing, and quoting is TOML's):
//!
//! * `${VAR}`: the variable's value; unset, it is a load error naming the key path
//!   (`sinks.alerts.url: environment variable ALERTS_URL is not set`). Set but empty,
//!   it is the empty string.
//! * `${VAR:-default}`: the default when the variable is unset or empty (as a shell
//!   does); the default may itself hold references (`${A:-${B:-x}}`), looked up only
//!   when it is used.
//! * `$${` is a literal `${` (`"$${HOME}"` is the text `${HOME}`); any other `$` is
//!   itself (`$HOME`, `a$b` and `$$` are kept as written).
//! * A string that is one reference and nothing else (`port = "${PORT}"`), in a field
//!   that wants a number or a boolean, is read as one (`8089`, `true`); everywhere else
//!   (and inside a processor's or plugin's free-form `settings` table) a value stays a
//!   string.
//!
//! Variable names are ASCII letters, digits and `_`, not starting with a digit.

/// One step of a key path: a table key or an array index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// A table's key.
    Key(String),
    /// An array's index.
    Index(usize),
}

/// A string value that was one reference and nothing else: read as a number or a
/// boolean when its field wants one.
#[derive(Clone, Debug)]
pub(super) struct WholeValue {
    /// Where it is, as `serde_path_to_error` prints a path (`feeds[0].queue_capacity`).
    pub(super) serde_path: String,
    /// Where it is, step by step.
    pub(super) steps: Vec<Step>,
    /// The value the reference expanded to.
    pub(super) text: String,
}

impl WholeValue {
    /// The expanded text as a TOML integer, float or boolean, if it reads as one.
    pub(super) fn typed(&self) -> Option<toml::Value> {
        let text = self.text.trim();
        if let Ok(integer) = text.parse::<i64>() {
            return Some(toml::Value::Integer(integer));
        }
        match text {
            "true" => return Some(toml::Value::Boolean(true)),
            "false" => return Some(toml::Value::Boolean(false)),
            _ => {}
        }
        text.parse::<f64>()
            .ok()
            .filter(|float| float.is_finite())
            .map(toml::Value::Float)
    }
}

/// What an expansion of a whole configuration found.
#[derive(Debug, Default)]
pub(super) struct Expanded {
    /// Whether any value held a reference or an escape (so the table differs from the
    /// text).
    pub(super) changed: bool,
    /// The values that were one reference each.
    pub(super) whole_values: Vec<WholeValue>,
}

/// A problem with one value: its key path (for people) and what is wrong.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ExpandError {
    /// The key path, with array elements named by their `name` where they have one
    /// (`sinks.alerts.url`), else by index (`feeds[0].path`).
    pub(super) path: String,
    /// What is wrong and what to do.
    pub(super) message: String,
}

/// Looks a variable up: `Ok(None)` when it is unset, `Err` when it cannot be read (not
/// UTF-8).
pub(super) type Lookup<'a> = &'a dyn Fn(&str) -> Result<Option<String>, String>;

/// Looks a variable up in the process's environment.
pub(super) fn process_environment(name: &str) -> Result<Option<String>, String> {
    match std::env::var(name) {
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!(
            "environment variable {name} is not valid UTF-8: set it to UTF-8 text"
        )),
    }
}

/// Expands every string value of `table` in place (keys are never expanded).
pub(super) fn expand_table(
    table: &mut toml::Table,
    lookup: Lookup<'_>,
) -> Result<Expanded, ExpandError> {
    let mut expanded = Expanded::default();
    let mut walk = Walk {
        lookup,
        steps: Vec::new(),
        serde_path: String::new(),
        display_path: String::new(),
        expanded: &mut expanded,
    };
    walk.table(table)?;
    Ok(expanded)
}

struct Walk<'a, 'b> {
    lookup: Lookup<'a>,
    steps: Vec<Step>,
    serde_path: String,
    display_path: String,
    expanded: &'b mut Expanded,
}

impl Walk<'_, '_> {
    fn table(&mut self, table: &mut toml::Table) -> Result<(), ExpandError> {
        for (key, value) in table.iter_mut() {
            let (serde_len, display_len) = (self.serde_path.len(), self.display_path.len());
            for path in [&mut self.serde_path, &mut self.display_path] {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
            }
            self.steps.push(Step::Key(key.clone()));
            self.value(value)?;
            self.steps.pop();
            self.serde_path.truncate(serde_len);
            self.display_path.truncate(display_len);
        }
        Ok(())
    }

    fn value(&mut self, value: &mut toml::Value) -> Result<(), ExpandError> {
        match value {
            toml::Value::String(text) => {
                let Some((replaced, whole)) =
                    expand_str(text, self.lookup).map_err(|message| ExpandError {
                        path: self.display_path.clone(),
                        message,
                    })?
                else {
                    return Ok(());
                };
                self.expanded.changed = true;
                if whole {
                    self.expanded.whole_values.push(WholeValue {
                        serde_path: self.serde_path.clone(),
                        steps: self.steps.clone(),
                        text: replaced.clone(),
                    });
                }
                *text = replaced;
                Ok(())
            }
            toml::Value::Table(table) => self.table(table),
            toml::Value::Array(items) => {
                for (index, item) in items.iter_mut().enumerate() {
                    let (serde_len, display_len) = (self.serde_path.len(), self.display_path.len());
                    self.serde_path.push_str(&format!("[{index}]"));
                    // an element with a plain `name` is named by it (`sinks.alerts`)
                    match item
                        .get("name")
                        .and_then(toml::Value::as_str)
                        .filter(|name| !name.contains('$') && !name.is_empty())
                    {
                        Some(name) => {
                            self.display_path.push('.');
                            self.display_path.push_str(name);
                        }
                        None => self.display_path.push_str(&format!("[{index}]")),
                    }
                    self.steps.push(Step::Index(index));
                    self.value(item)?;
                    self.steps.pop();
                    self.serde_path.truncate(serde_len);
                    self.display_path.truncate(display_len);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// Deserializes an expanded table: a value that was one reference and that its field
/// refuses as a string is read as a number or a boolean, and the table tried again.
pub(super) fn deserialize_expanded<T: serde::de::DeserializeOwned>(
    mut table: toml::Table,
    mut expanded: Expanded,
) -> Result<T, crate::ServerError> {
    loop {
        let value = toml::Value::Table(table.clone());
        let error = match serde_path_to_error::deserialize::<_, T>(value) {
            Ok(parsed) => return Ok(parsed),
            Err(error) => error,
        };
        let path = error.path().to_string();
        let whole = expanded
            .whole_values
            .iter()
            .position(|whole| whole.serde_path == path);
        if let Some(index) = whole {
            let whole = expanded.whole_values.remove(index);
            if let (Some(typed), Some(slot)) = (whole.typed(), value_at(&mut table, &whole.steps)) {
                *slot = typed;
                continue;
            }
        }
        let message = error.into_inner().message().trim().to_owned();
        return Err(crate::ServerError::invalid(path, message));
    }
}

/// The value at `steps` of `table`.
pub(super) fn value_at<'t>(
    table: &'t mut toml::Table,
    steps: &[Step],
) -> Option<&'t mut toml::Value> {
    let (Step::Key(first), rest) = steps.split_first()? else {
        return None;
    };
    let mut value = table.get_mut(first)?;
    for step in rest {
        value = match step {
            Step::Key(key) => value.as_table_mut()?.get_mut(key)?,
            Step::Index(index) => value.as_array_mut()?.get_mut(*index)?,
        };
    }
    Some(value)
}

/// `text` with its references expanded, and whether it was one reference and nothing
/// else; `None` when it holds no reference and no escape (it stays as it is).
pub(super) fn expand_str(text: &str, lookup: Lookup<'_>) -> Result<Option<(String, bool)>, String> {
    if !text.contains("${") {
        return Ok(None);
    }
    let mut parser = Parser {
        text,
        at: 0,
        lookup,
    };
    let (expanded, references) = parser.expand(true, false)?;
    let whole = references == 1 && text.starts_with("${") && {
        // one reference spanning the whole text: it ends at the last character
        let mut probe = Parser {
            text,
            at: 2,
            lookup,
        };
        probe.reference(false).is_ok() && probe.at == text.len()
    };
    Ok(Some((expanded, whole)))
}

struct Parser<'t, 'l> {
    text: &'t str,
    at: usize,
    lookup: Lookup<'l>,
}

impl Parser<'_, '_> {
    /// Expands from `at` to the end of the text, or (`nested`) to the `}` closing the
    /// default being read; looks variables up only when `evaluate`. Returns the text
    /// and how many references it held at this level.
    fn expand(&mut self, evaluate: bool, nested: bool) -> Result<(String, usize), String> {
        let mut out = String::new();
        let mut references = 0;
        while self.at < self.text.len() {
            let rest = &self.text[self.at..];
            if rest.starts_with("$${") {
                out.push_str("${");
                self.at += 3;
            } else if rest.starts_with("${") {
                self.at += 2;
                out.push_str(&self.reference(evaluate)?);
                references += 1;
            } else if nested && rest.starts_with('}') {
                return Ok((out, references));
            } else {
                let next = rest.chars().next().unwrap_or_default();
                out.push(next);
                self.at += next.len_utf8();
            }
        }
        if nested {
            return Err(unclosed(self.text));
        }
        Ok((out, references))
    }

    /// Reads one reference after its `${`, through its `}`.
    fn reference(&mut self, evaluate: bool) -> Result<String, String> {
        let rest = &self.text[self.at..];
        let name_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = &rest[..name_len];
        self.at += name_len;
        let after = &self.text[self.at..];
        let bad_name = name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit());
        if after.is_empty() {
            return Err(unclosed(self.text));
        }
        if bad_name || !(after.starts_with('}') || after.starts_with(":-")) {
            return Err(format!(
                "'{}' is not a variable reference: write ${{NAME}} or ${{NAME:-default}} (NAME of letters, digits and _, not starting with a digit), or $${{ for a literal ${{",
                self.text
            ));
        }
        let value = if evaluate { (self.lookup)(name)? } else { None };
        if after.starts_with('}') {
            self.at += 1;
            return match value {
                Some(value) => Ok(value),
                None if !evaluate => Ok(String::new()),
                None => Err(format!(
                    "environment variable {name} is not set: set it in the server's environment, or give a default with ${{{name}:-default}}"
                )),
            };
        }
        // `:-default}`: the default is read (and checked) whatever the variable holds,
        // and its references looked up only when it is used
        self.at += 2;
        let use_default = evaluate && value.as_deref().is_none_or(str::is_empty);
        let (default, _) = self.expand(use_default, true)?;
        self.at += 1; // the closing '}'
        Ok(if use_default {
            default
        } else {
            value.unwrap_or_default()
        })
    }
}

fn unclosed(text: &str) -> String {
    format!(
        "'{text}' has a ${{ without its closing }}: close the reference, or write $${{ for a literal ${{"
    )
}

/// A lookup over a fixed set of variables, for tests.
#[cfg(test)]
pub(super) fn fixed(variables: &[(&str, &str)]) -> impl Fn(&str) -> Result<Option<String>, String> {
    let map: std::collections::BTreeMap<String, String> = variables
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
    move |name| Ok(map.get(name).cloned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServerConfig;
    use std::path::Path;

    fn expand(text: &str, variables: &[(&str, &str)]) -> Result<Option<(String, bool)>, String> {
        expand_str(text, &fixed(variables))
    }

    fn parse(text: &str, variables: &[(&str, &str)]) -> Result<ServerConfig, crate::ServerError> {
        ServerConfig::parse_with_environment(text, Path::new("/base"), &fixed(variables))
    }

    #[test]
    fn a_reference_is_replaced_by_the_variable_and_other_dollars_stay_as_written() {
        let found = expand("http://${HOST}:8080/$path/a$$b", &[("HOST", "example")]);
        assert_eq!(
            found,
            Ok(Some(("http://example:8080/$path/a$$b".to_owned(), false)))
        );
        assert_eq!(expand("no reference, $HOME", &[]), Ok(None));
        assert_eq!(
            expand("${EMPTY}", &[("EMPTY", "")]),
            Ok(Some((String::new(), true)))
        );
    }

    #[test]
    fn a_default_is_used_when_the_variable_is_unset_or_empty() {
        assert_eq!(
            expand("${PORT:-8089}", &[]),
            Ok(Some(("8089".to_owned(), true)))
        );
        assert_eq!(
            expand("${PORT:-8089}", &[("PORT", "")]),
            Ok(Some(("8089".to_owned(), true)))
        );
        assert_eq!(
            expand("${PORT:-8089}", &[("PORT", "9000")]),
            Ok(Some(("9000".to_owned(), true)))
        );
        assert_eq!(expand("a${X:-}b", &[]), Ok(Some(("ab".to_owned(), false))));
    }

    #[test]
    fn defaults_nest_and_are_looked_up_only_when_used() {
        assert_eq!(
            expand("${A:-${B:-${C:-deep}}}/x", &[]),
            Ok(Some(("deep/x".to_owned(), false)))
        );
        assert_eq!(
            expand("${A:-${B}}", &[("B", "bee")]),
            Ok(Some(("bee".to_owned(), true)))
        );
        // A is set: the unset B of its default is never looked up
        assert_eq!(
            expand("${A:-${B}}", &[("A", "ay")]),
            Ok(Some(("ay".to_owned(), true)))
        );
    }

    #[test]
    fn a_doubled_dollar_before_a_brace_is_a_literal_reference() {
        assert_eq!(
            expand("$${HOME} and ${USER}", &[("USER", "me"), ("HOME", "/h")]),
            Ok(Some(("${HOME} and me".to_owned(), false)))
        );
    }

    #[test]
    fn an_unset_variable_or_a_broken_reference_is_refused_with_what_to_do() {
        let unset = expand("${ALERTS_URL}", &[]).unwrap_err();
        assert!(
            unset.contains("environment variable ALERTS_URL is not set"),
            "{unset}"
        );
        assert!(expand("${OPEN", &[])
            .unwrap_err()
            .contains("without its closing"));
        assert!(expand("${A:-x", &[])
            .unwrap_err()
            .contains("without its closing"));
        assert!(expand("${1A}", &[])
            .unwrap_err()
            .contains("not a variable reference"));
        assert!(expand("${A B}", &[])
            .unwrap_err()
            .contains("not a variable reference"));
    }

    #[test]
    fn an_unset_variable_fails_the_load_at_the_key_path_of_its_value() {
        let text = r#"
            [[sinks]]
            name = "alerts"
            kind = "http"
            url = "${ALERTS_URL}"
        "#;
        let error = parse(text, &[]).unwrap_err().to_string();
        assert_eq!(
            error,
            "config error at sinks.alerts.url: environment variable ALERTS_URL is not set: set it in the server's environment, or give a default with ${ALERTS_URL:-default}"
        );
        let unnamed = "[[feeds]]\nsource = \"file\"\npath = \"${LOGS}/app.log\"\n";
        let error = parse(unnamed, &[]).unwrap_err().to_string();
        assert!(
            error.starts_with("config error at feeds[0].path: environment variable LOGS"),
            "{error}"
        );
    }

    #[test]
    fn values_are_expanded_but_comments_and_keys_are_not() {
        let text = r#"
            # ${NOT_SET} in a comment does nothing
            [[feeds]]
            name = "app"
            source = "file"
            path = "${LOGS:-/var/log}/app.log"

            [[sinks]]
            name = "out"
            kind = "http"
            url = "http://${HOST}/in"
            headers = { "X-${KEY}" = "Bearer ${TOKEN}" }
        "#;
        let config = parse(text, &[("HOST", "h:1"), ("TOKEN", "t0k")]).unwrap();
        assert_eq!(config.feeds[0].path, Path::new("/var/log/app.log"));
        assert_eq!(config.sinks[0].url.as_deref(), Some("http://h:1/in"));
        let headers = config.sinks[0].headers.clone().unwrap();
        assert_eq!(
            headers.get("X-${KEY}").map(String::as_str),
            Some("Bearer t0k")
        );
    }

    #[test]
    fn a_whole_value_reference_in_a_numeric_or_boolean_field_is_read_as_one() {
        let text = r#"
            control_wait_millis = "${WAIT}"
            [[feeds]]
            name = "${NAME:-app}"
            source = "file"
            path = "${NAME:-app}.log"
            queue_capacity = "${CAPACITY:-64}"
            status_events = "${EVENTS}"
        "#;
        let config = parse(
            text,
            &[("WAIT", "2500"), ("EVENTS", "true"), ("NAME", "42")],
        )
        .unwrap();
        assert_eq!(config.control_wait_millis, 2500);
        assert_eq!(config.feeds[0].queue_capacity, Some(64));
        assert!(config.feeds[0].status_events);
        // a string field keeps the text, even when it reads as a number
        assert_eq!(config.feeds[0].name, "42");
        let error = parse(text, &[("WAIT", "soon"), ("EVENTS", "true")])
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("config error at control_wait_millis: "),
            "{error}"
        );
    }
}
