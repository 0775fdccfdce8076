//! Where in a configuration text a key is: its key path and its line and column, for
//! the messages of values the TOML parser itself refused.

use std::collections::BTreeMap;

/// The key path (`feeds[0].queue_capacity`, `groups[1].processors[0].settings.x`) of
/// the value at byte offset `at` of a TOML text, from the table headers above it and
/// the key on its line (one level of inline table); `None` when no key is found.
pub(super) fn key_path_at(text: &str, at: usize) -> Option<String> {
    let at = at.min(text.len());
    let line_start = text[..at].rfind('\n').map_or(0, |newline| newline + 1);
    // the table the line is in: the last header above it, with array indexes
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut table = String::new();
    for line in text[..line_start].lines() {
        let line = line.trim();
        if let Some(name) = line
            .strip_prefix("[[")
            .and_then(|rest| rest.split("]]").next())
        {
            let name = name.trim().to_owned();
            // a new element of an array forgets the elements of the arrays below it
            let index = counts.get(&name).map_or(0, |count| count + 1);
            counts.retain(|other, _| !other.starts_with(&format!("{name}.")));
            counts.insert(name.clone(), index);
            table = indexed(&name, &counts);
        } else if let Some(name) = line
            .strip_prefix('[')
            .and_then(|rest| rest.split(']').next())
        {
            table = indexed(name.trim(), &counts);
        }
    }
    let line = &text[line_start..at];
    let (key, rest) = line.split_once('=')?;
    let mut path = key.trim().trim_matches('"').to_owned();
    // inside an inline table: the last `key =` before the value
    if rest.contains('{') {
        let inner = rest.rsplit(['{', ',']).next().unwrap_or_default();
        if let Some((inner_key, _)) = inner.split_once('=') {
            path = format!("{path}.{}", inner_key.trim().trim_matches('"'));
        }
    }
    if path.is_empty() {
        return None;
    }
    Some(if table.is_empty() {
        path
    } else {
        format!("{table}.{path}")
    })
}

/// `groups.processors` as `groups[1].processors[0]`, from the element counts of the
/// arrays of tables seen so far.
fn indexed(name: &str, counts: &BTreeMap<String, usize>) -> String {
    let mut path = String::new();
    let mut prefix = String::new();
    for part in name.split('.') {
        if !prefix.is_empty() {
            prefix.push('.');
            path.push('.');
        }
        prefix.push_str(part);
        path.push_str(part);
        if let Some(index) = counts.get(&prefix) {
            path.push_str(&format!("[{index}]"));
        }
    }
    path
}

/// The 1-based line and column (in characters) of the byte offset `at` of `text`.
pub(super) fn line_and_column(text: &str, at: usize) -> (usize, usize) {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// What to say of a text the TOML parser refused: the config is TOML, and, when the
/// text looks like YAML or JSON (a file written for another tool), how TOML spells
/// what it holds.
pub(super) fn not_toml_hint(text: &str) -> String {
    let first = text
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty() && !line.starts_with('#'))
        .unwrap_or_default();
    let yaml_key = first
        .trim_start_matches("- ")
        .split_once(':')
        .is_some_and(|(key, rest)| {
            !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
                && (rest.is_empty() || rest.starts_with(' '))
        });
    let looks_like = if first == "---" || yaml_key {
        "this looks like YAML; "
    } else if first.starts_with('{') {
        "this looks like JSON; "
    } else {
        ""
    };
    format!(
        "the config is TOML ({looks_like}write `name = \"lines\"`, a table as `[admin]`, each feed, sink or group as \
         `[[feeds]]`, `[[sinks]]`, `[[groups]]`: see the book's running/config.md)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_and_json_are_named_and_toml_is_said() {
        assert!(not_toml_hint("feeds:\n  - name: x\n").contains("looks like YAML"));
        assert!(not_toml_hint("# c\n---\nadmin:\n").contains("looks like YAML"));
        assert!(not_toml_hint("{\"feeds\": []}").contains("looks like JSON"));
        let other = not_toml_hint("name = = 1");
        assert!(other.contains("the config is TOML") && !other.contains("looks like"));
    }
}
