//! What a reload changes key by key, in the parts the running configuration and the
//! new one both have (issue 39, item 5): each key that differs, named by its path
//! (`sinks[out].path`, `feeds[app].overload.spin_bound_millis`,
//! `groups[copy].processors[app].settings.sink`, `progress_interval_seconds`), with its
//! old and new values as the file spells them, and whether it can apply while the
//! server runs.
//!
//! What applies live (the book's reload chapter has the same table):
//!
//! | where | keys |
//! |---|---|
//! | top level | `progress_interval_seconds`, `stalled_exit_millis`, `shutdown_timeout_millis`, `shutdown_drain_timeout_millis`, `log_level` |
//! | `[[sinks]]` | `batch`, `batch_max_lines` (above 1 before and after), `batch_max_bytes`, `batch_timeout_millis`, `connect_timeout_millis`, `response_timeout_millis`, `write_timeout_millis`, `max_retries`, `initial_backoff_millis`, `max_backoff_millis`, `expire_after_millis` |
//! | `[[feeds]]` | `overload.spin_bound_millis`, `overload.block_deadline_millis`, `overload.quiet_period_millis`, and the same in `overload.subscribers.<group>` |
//!
//! Everything else is refused, each key named: what reads another input, writes
//! another output, changes a promise (an overload policy, `on_exhausted`) or the
//! target's request format, or lives in a running processor.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::config::ServerConfig;

/// Why `path` is refused for a reload when it holds no table at all (empty, blank,
/// comments only, or top-level keys alone: no `[[feeds]]`, `[[sinks]]`, `[[groups]]`,
/// nor any other section): applied, it would remove every feed, sink and group.
/// `None` otherwise (the loader says the rest).
pub(super) fn empty_config(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let parsed: toml::Table = toml::from_str(&text).ok()?;
    let tables = parsed
        .values()
        .any(|value| value.is_table() || value.is_array());
    (!tables).then(|| {
        format!(
            "the config file {} is empty (no table: no feed, sink or group): an editor's truncating save? Nothing was changed; write the whole config and send SIGHUP again",
            path.display()
        )
    })
}

/// The top-level keys that apply live (read from the running configuration where
/// they are used).
const TOP_LIVE: &[&str] = &[
    "progress_interval_seconds",
    "stalled_exit_millis",
    "shutdown_timeout_millis",
    "shutdown_drain_timeout_millis",
    "log_level",
];

/// A sink's keys that apply live, between two batches.
const SINK_LIVE: &[&str] = &[
    "batch",
    "batch_max_lines",
    "batch_max_bytes",
    "batch_timeout_millis",
    "connect_timeout_millis",
    "response_timeout_millis",
    "write_timeout_millis",
    "max_retries",
    "initial_backoff_millis",
    "max_backoff_millis",
    "expire_after_millis",
];

/// A sink's live keys that need the sink opened again (a network sink's requests).
const SINK_REOPEN: &[&str] = &[
    "batch_max_lines",
    "batch_max_bytes",
    "connect_timeout_millis",
    "response_timeout_millis",
    "write_timeout_millis",
];

/// An overload block's keys that apply live (its bounds; not its policy).
const OVERLOAD_LIVE: &[&str] = &[
    "spin_bound_millis",
    "block_deadline_millis",
    "quiet_period_millis",
];

/// Why a key that is not live is refused.
const RESTART: &str = "cannot change while the server runs: restart to apply it";

/// Why an overload policy (and the bounds of a block whose policy changes) is refused.
const POLICY: &str =
    "the policy decides whether the feed may drop or must wait: restart to apply it";

/// One key a reload changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct KeyChange {
    /// Its path: `sinks[out].batch`, `progress_interval_seconds`.
    pub(super) path: String,
    /// Its running value as the file spells it (`"out.txt"`, `500`, `(unset)`).
    pub(super) old: String,
    /// Its new value.
    pub(super) new: String,
    /// Why it cannot apply live; `None`: it applies live.
    pub(super) refused: Option<&'static str>,
}

impl KeyChange {
    /// `sinks[out].batch: 100 -> 500: could apply live, not applied: ...`, for a live
    /// key of a refused file.
    pub(super) fn not_applied(&self) -> String {
        format!(
            "{}: {} -> {}: could apply live, not applied: the file is refused as a whole",
            self.path, self.old, self.new
        )
    }

    /// `sinks[out].batch: 100 -> 500 (applied live)`.
    pub(super) fn applied(&self) -> String {
        format!("{}: {} -> {} (applied live)", self.path, self.old, self.new)
    }

    /// `feeds[app].path: "a.log" -> "b.log": cannot change while the server runs: ...`.
    pub(super) fn refusal(&self) -> String {
        format!(
            "{}: {} -> {}: {}",
            self.path,
            self.old,
            self.new,
            self.refused.unwrap_or(RESTART)
        )
    }

    /// The sink this key belongs to, when it is a sink's.
    pub(super) fn sink(&self) -> Option<&str> {
        component(&self.path, "sinks[")
    }

    /// The feed this key belongs to, when it is a feed's.
    pub(super) fn feed(&self) -> Option<&str> {
        component(&self.path, "feeds[")
    }

    /// Whether applying this key opens its sink again.
    pub(super) fn reopens_the_sink(&self) -> bool {
        self.sink().is_some() && SINK_REOPEN.contains(&self.key())
    }

    /// The key's last name (`batch` of `sinks[out].batch`).
    fn key(&self) -> &str {
        self.path.rsplit('.').next().unwrap_or(&self.path)
    }
}

/// `name` of a path `<prefix>name].key`.
fn component<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    path.strip_prefix(prefix)?
        .split_once(']')
        .map(|(name, _)| name)
}

fn json<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// A value as the file spells it: strings quoted, numbers bare, an absent key
/// `(unset)`.
fn shown(value: &Value) -> String {
    match value {
        Value::Null => "(unset)".to_owned(),
        other => other.to_string(),
    }
}

/// A value as the log and `/status` may show it: a secret is hidden (a header's value,
/// a key naming a password, secret, token or credential: `"***"`), and a url's
/// user information (`https://user:pass@host/`) is cut.
fn shown_at(path: &str, value: &Value) -> String {
    if value.is_null() {
        return shown(value);
    }
    let lower = path.to_ascii_lowercase();
    let secret = lower.contains(".headers.")
        || ["password", "secret", "token", "credential", "auth"]
            .iter()
            .any(|word| {
                lower
                    .rsplit('.')
                    .next()
                    .is_some_and(|key| key.contains(word))
            });
    if secret {
        return "\"***\"".to_owned();
    }
    match value {
        Value::String(text) if lower.ends_with("url") => {
            let Some((scheme, rest)) = text.split_once("://") else {
                return value.to_string();
            };
            // user information is what precedes an `@` in the authority
            let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
            match authority.rfind('@') {
                Some(at) => {
                    Value::String(format!("{scheme}://***@{}", &rest[at + 1..])).to_string()
                }
                None => value.to_string(),
            }
        }
        other => shown(other),
    }
}

/// The paths below `prefix` whose values differ between `old` and `new`, with both.
fn differences(prefix: &str, old: &Value, new: &Value, out: &mut Vec<(String, Value, Value)>) {
    match (old, new) {
        (Value::Object(old_map), Value::Object(new_map)) => {
            let mut keys: Vec<&String> = old_map.keys().chain(new_map.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                differences(
                    &path,
                    old_map.get(key).unwrap_or(&Value::Null),
                    new_map.get(key).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        _ if old != new => out.push((prefix.to_owned(), old.clone(), new.clone())),
        _ => {}
    }
}

/// Each key that differs between the parts of `old` and `new` with the same name (and
/// the top-level keys, but for `data_dir`, which the reload checks by the folder it
/// names), with whether it applies live.
pub(super) fn changed_keys(old: &ServerConfig, new: &ServerConfig) -> Vec<KeyChange> {
    let mut changes = Vec::new();
    let mut push = |path: String, before: &Value, after: &Value, refused: Option<&'static str>| {
        changes.push(KeyChange {
            old: shown_at(&path, before),
            new: shown_at(&path, after),
            path,
            refused,
        });
    };
    let top = |config: &ServerConfig| {
        let mut value = json(config);
        if let Value::Object(map) = &mut value {
            for part in ["feeds", "sinks", "groups", "data_dir"] {
                map.remove(part);
            }
        }
        value
    };
    let mut found = Vec::new();
    differences("", &top(old), &top(new), &mut found);
    for (path, before, after) in found.drain(..) {
        let refused = (!TOP_LIVE.contains(&path.as_str())).then_some(RESTART);
        push(path, &before, &after, refused);
    }
    for feed in &old.feeds {
        let Some(now) = new.feeds.iter().find(|now| now.name == feed.name) else {
            continue;
        };
        let prefix = format!("feeds[{}]", feed.name);
        differences(&prefix, &json(feed), &json(now), &mut found);
        // the bounds of a block whose policy changes go with the policy
        let new_policies: Vec<String> = found
            .iter()
            .filter_map(|(path, _, _)| path.strip_suffix("policy").map(str::to_owned))
            .collect();
        for (path, before, after) in found.drain(..) {
            let key = &path[prefix.len() + 1..];
            let refused = if new_policies
                .iter()
                .any(|block| path.starts_with(block.as_str()))
            {
                Some(POLICY)
            } else {
                overload_refusal(key)
            };
            push(path, &before, &after, refused);
        }
    }
    for sink in &old.sinks {
        let Some(now) = new.sinks.iter().find(|now| now.name == sink.name) else {
            continue;
        };
        let prefix = format!("sinks[{}]", sink.name);
        differences(&prefix, &json(sink), &json(now), &mut found);
        for (path, before, after) in found.drain(..) {
            let key = &path[prefix.len() + 1..];
            let batches = |config: &crate::config::SinkConfig| {
                config.kind == "http" && config.batch_max_lines.unwrap_or(1) > 1
            };
            let refused = if !SINK_LIVE.contains(&key) {
                Some(RESTART)
            } else if key == "batch_max_lines" && batches(sink) != batches(now) {
                Some(
                    "switches between one output per request and ndjson batches (the target \
                     gets another body format): restart to apply it",
                )
            } else {
                None
            };
            push(path, &before, &after, refused);
        }
    }
    for group in &old.groups {
        let Some(now) = new.groups.iter().find(|now| now.name == group.name) else {
            continue;
        };
        let without_processors = |group: &crate::config::GroupConfig| {
            let mut value = json(group);
            if let Value::Object(map) = &mut value {
                map.remove("processors");
            }
            value
        };
        let prefix = format!("groups[{}]", group.name);
        differences(
            &prefix,
            &without_processors(group),
            &without_processors(now),
            &mut found,
        );
        for processor in &group.processors {
            if let Some(same) = now.processors.iter().find(|p| p.name == processor.name) {
                let prefix = format!("{prefix}.processors[{}]", processor.name);
                differences(&prefix, &json(processor), &json(same), &mut found);
            }
        }
        for (path, before, after) in found.drain(..) {
            let refused = if path.contains(".processors[") {
                "a running processor keeps the settings it was made with: restart, or give it \
                 another name to replace it"
            } else {
                RESTART
            };
            push(path, &before, &after, Some(refused));
        }
    }
    changes
}

/// Why a feed's `key` (below `feeds[name].`) cannot apply live; `None` for an overload
/// bound.
fn overload_refusal(key: &str) -> Option<&'static str> {
    let bound = key
        .strip_prefix("overload.")
        .map(|rest| match rest.strip_prefix("subscribers.") {
            // `subscribers.<group>.<bound>`: a group's override block
            Some(block) => block.split_once('.').map_or("", |(_, bound)| bound),
            None => rest,
        });
    match bound {
        Some(bound) if OVERLOAD_LIVE.contains(&bound) => None,
        Some("policy") | Some("kill_switch") => Some(POLICY),
        _ => Some(RESTART),
    }
}

/// Copies into `running` the value each live key of `changes` has in `new`, so that
/// `running` is what runs once they applied.
pub(super) fn take_live_keys(
    running: &mut ServerConfig,
    new: &ServerConfig,
    changes: &[KeyChange],
) {
    macro_rules! copy {
        ($key:expr, $into:expr, $from:expr; $($field:ident),+ $(,)?) => {
            match $key {
                $(stringify!($field) => $into.$field = $from.$field.clone(),)+
                _ => debug_assert!(false, "no live key {}", $key),
            }
        };
    }
    for change in changes.iter().filter(|change| change.refused.is_none()) {
        if let Some(name) = change.sink() {
            let (Some(into), Some(from)) = (
                running.sinks.iter_mut().find(|sink| sink.name == name),
                new.sinks.iter().find(|sink| sink.name == name),
            ) else {
                continue;
            };
            copy!(change.key(), into, from; batch, batch_max_lines, batch_max_bytes,
                batch_timeout_millis, connect_timeout_millis, response_timeout_millis,
                write_timeout_millis, max_retries, initial_backoff_millis, max_backoff_millis,
                expire_after_millis);
        } else if let Some(name) = change.feed() {
            let (Some(into), Some(from)) = (
                running.feeds.iter_mut().find(|feed| feed.name == name),
                new.feeds.iter().find(|feed| feed.name == name),
            ) else {
                continue;
            };
            let (into, from) = match change.path.split(".subscribers.").nth(1) {
                Some(rest) => {
                    let group = rest.split('.').next().unwrap_or_default();
                    match (
                        into.overload.subscribers.get_mut(group),
                        from.overload.subscribers.get(group),
                    ) {
                        (Some(into), Some(from)) => (into, from),
                        _ => continue,
                    }
                }
                None => (&mut into.overload, &from.overload),
            };
            copy!(change.key(), into, from; spin_bound_millis, block_deadline_millis,
                quiet_period_millis);
        } else {
            copy!(change.key(), running, new; progress_interval_seconds, stalled_exit_millis,
                shutdown_timeout_millis, shutdown_drain_timeout_millis, log_level);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(text: &str) -> ServerConfig {
        ServerConfig::parse(text, Path::new("/base")).expect("valid")
    }

    const BASE: &str = r#"
        progress_interval_seconds = 10
        [[feeds]]
        name = "app"
        source = "file"
        path = "app.log"
        overload = { policy = "BLOCK_WITH_DEADLINE", block_deadline_millis = 100 }
        [[sinks]]
        name = "out"
        kind = "http"
        url = "http://127.0.0.1:9/x"
        batch_max_lines = 5
        [[groups]]
        name = "copy"
        [[groups.processors]]
        name = "app"
        kind = "forward"
        settings = { feed = "app", sink = "out" }
    "#;

    #[test]
    fn each_changed_key_is_named_with_both_values_and_whether_it_applies_live() {
        let old = parse(BASE);
        assert!(changed_keys(&old, &parse(BASE)).is_empty());
        let text = BASE
            .replace(
                "progress_interval_seconds = 10",
                "progress_interval_seconds = 3",
            )
            .replace("path = \"app.log\"", "path = \"other.log\"")
            .replace("block_deadline_millis = 100", "block_deadline_millis = 250")
            .replace(
                "batch_max_lines = 5",
                "batch_max_lines = 50\nmax_retries = 3",
            )
            .replace("sink = \"out\" }", "sink = \"out\", keep = \"x\" }");
        let changes: Vec<String> = changed_keys(&old, &parse(&text))
            .iter()
            .map(|change| match change.refused {
                None => change.applied(),
                Some(_) => change.refusal(),
            })
            .collect();
        assert_eq!(
            changes,
            [
                "progress_interval_seconds: 10 -> 3 (applied live)",
                "feeds[app].overload.block_deadline_millis: 100 -> 250 (applied live)",
                "feeds[app].path: \"app.log\" -> \"other.log\": cannot change while the server runs: restart to apply it",
                "sinks[out].batch_max_lines: 5 -> 50 (applied live)",
                "sinks[out].max_retries: (unset) -> 3 (applied live)",
                "groups[copy].processors[app].settings.keep: (unset) -> \"x\": a running processor keeps the settings it was made with: restart, or give it another name to replace it",
            ]
        );
    }

    #[test]
    fn secrets_are_hidden_in_what_a_reload_names() {
        let text = |url: &str, header: &str| {
            BASE.replace("http://127.0.0.1:9/x", url).replace(
                "batch_max_lines = 5",
                &format!("batch_max_lines = 5\nheaders = {{ Authorization = \"{header}\" }}"),
            )
        };
        let old = parse(&text("https://user:old-pass@127.0.0.1:9/x", "Bearer old"));
        let new = parse(&text("https://user:new-pass@127.0.0.1:9/y", "Bearer new"));
        let said: Vec<String> = changed_keys(&old, &new)
            .iter()
            .map(KeyChange::refusal)
            .collect();
        let all = said.join("\n");
        assert!(!all.contains("pass") && !all.contains("Bearer"), "{all}");
        assert!(
            all.contains("sinks[out].headers.Authorization: \"***\" -> \"***\""),
            "{all}"
        );
        assert!(
            all.contains(
                "sinks[out].url: \"https://***@127.0.0.1:9/x\" -> \"https://***@127.0.0.1:9/y\""
            ),
            "{all}"
        );
    }

    #[test]
    fn a_batch_size_that_changes_the_request_format_and_an_overload_policy_are_refused() {
        let old = parse(BASE);
        let text = BASE
            .replace("batch_max_lines = 5", "batch_max_lines = 1")
            .replace(
                "\"BLOCK_WITH_DEADLINE\", block_deadline_millis = 100",
                "\"PAUSE\"",
            )
            .replace("[admin]", "");
        let refused: Vec<String> = changed_keys(&old, &parse(&text))
            .iter()
            .filter(|change| change.refused.is_some())
            .map(|change| change.path.clone())
            .collect();
        assert_eq!(
            refused,
            [
                "feeds[app].overload.block_deadline_millis",
                "feeds[app].overload.policy",
                "sinks[out].batch_max_lines",
            ]
        );
    }

    #[test]
    fn after_taking_the_live_keys_only_the_refused_ones_differ() {
        let old = parse(BASE);
        let text = BASE
            .replace(
                "progress_interval_seconds = 10",
                "progress_interval_seconds = 3\nshutdown_timeout_millis = 7000",
            )
            .replace("path = \"app.log\"", "path = \"other.log\"")
            .replace("block_deadline_millis = 100", "block_deadline_millis = 250")
            .replace(
                "batch_max_lines = 5",
                "batch_max_lines = 50\nbatch = 9\nbatch_max_bytes = 99\nbatch_timeout_millis = 9\n\
                 connect_timeout_millis = 9\nresponse_timeout_millis = 9\nmax_retries = 3\n\
                 initial_backoff_millis = 9\nmax_backoff_millis = 99\nexpire_after_millis = 999",
            );
        let new = parse(&text);
        let changes = changed_keys(&old, &new);
        let mut running = old.clone();
        take_live_keys(&mut running, &new, &changes);
        let left: Vec<String> = changed_keys(&running, &new)
            .into_iter()
            .map(|change| change.path)
            .collect();
        assert_eq!(left, ["feeds[app].path"]);
    }
}
