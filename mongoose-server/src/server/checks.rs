//! What [`ServerBuilder::check`] refuses before anything is opened: the configuration,
//! the processor kinds and their settings, the plugin kinds.

use mongoose_plugin::host::Role;

use crate::config::check_name;
use crate::ServerError;

use super::kinds::{unknown_feed, SettingsCheck};
use super::ServerBuilder;

impl ServerBuilder {
    /// Refuses a feed's source or a sink's kind that is neither built in nor declared
    /// by a loaded plugin, naming the known kinds and the plugin folder.
    fn check_plugin_kinds(&self) -> Result<(), ServerError> {
        let config = &self.config;
        let wanted = config
            .feeds
            .iter()
            .enumerate()
            .filter_map(|(index, feed)| {
                let kind = feed.plugin_kind()?;
                Some((
                    format!("feeds[{index}].source"),
                    Role::Source,
                    kind,
                    vec!["file"],
                    (
                        format!("feeds[{index}].settings"),
                        toml::to_string(&feed.settings),
                    ),
                ))
            })
            .chain(
                config
                    .sinks
                    .iter()
                    .enumerate()
                    .filter(|(_, sink)| !sink.is_built_in())
                    .map(|(index, sink)| {
                        (
                            format!("sinks[{index}].kind"),
                            Role::Sink,
                            sink.kind.as_str(),
                            crate::config::SinkConfig::BUILT_IN.to_vec(),
                            (
                                format!("sinks[{index}].settings"),
                                toml::to_string(&sink.settings.clone().unwrap_or_default()),
                            ),
                        )
                    }),
            )
            .collect::<Vec<_>>();
        if wanted.is_empty() {
            // a plugin folder nothing uses is still loaded (and checked) by `build`
            return Ok(());
        }
        let plugins = self.plugins()?;
        for (key, role, kind, built_in, (settings_key, settings)) in wanted {
            let role_name = role.as_str();
            let Some(registry) = plugins.as_deref() else {
                return Err(ServerError::invalid(
                    key,
                    format!(
                        "'{kind}' is not a built-in {role_name} kind ({}) and no plugin_dir is set: set plugin_dir                          to the folder holding the plugin that declares it (cargo xtask plugins --out DIR builds them)",
                        built_in.join(", ")
                    ),
                ));
            };
            if registry.find(role, kind).is_none() {
                let mut known: Vec<String> =
                    built_in.iter().map(|kind| (*kind).to_owned()).collect();
                known.extend(registry.kinds(role));
                return Err(ServerError::invalid(
                    key,
                    format!(
                        "no plugin in {} declares the {role_name} kind '{kind}': the known {role_name} kinds are [{}];                          fix the kind, or build the plugin that declares it into that folder (cargo xtask plugins --out {})",
                        registry.dir().display(),
                        known.join(", "),
                        registry.dir().display()
                    ),
                ));
            }
            // the kind's own settings check: a bad value is refused now, with its key,
            // not when the source or sink starts
            let settings = settings
                .map_err(|error| ServerError::invalid(settings_key.clone(), error.to_string()))?;
            if let Err(refused) = registry.check_settings(role, kind, &settings) {
                let key = if refused.key.is_empty() {
                    settings_key
                } else {
                    format!("{settings_key}.{}", refused.key)
                };
                return Err(ServerError::invalid(key, refused.message));
            }
        }
        Ok(())
    }

    /// Checks everything the configuration shows, with what only the builder knows,
    /// without opening or creating anything: the configuration itself (names, ranges,
    /// paths, as [`ServerConfig::parse`](crate::config::ServerConfig::parse) does), the names of processors added by code,
    /// every processor's kind and its settings (the kind's settings check), a `feed`
    /// setting naming a feed the server has, overload overrides naming a group, and
    /// `record.processors` naming a processor. [`ServerBuilder::build`] runs it first.
    pub fn check(&self) -> Result<(), ServerError> {
        let config = &self.config;
        config.validate()?;
        self.check_plugin_kinds()?;
        for (group, name, _) in &self.code_processors {
            let key = format!("the processor '{group}/{name}' added by code");
            check_name(format!("{key}: its group"), group)?;
            check_name(key, name)?;
        }
        let mut feeds: Vec<String> = config.feeds.iter().map(|feed| feed.name.clone()).collect();
        feeds.extend(self.code_feed_names.iter().cloned());
        let mut groups: Vec<&str> = config
            .groups
            .iter()
            .map(|group| group.name.as_str())
            .collect();
        groups.extend(
            self.code_processors
                .iter()
                .map(|(group, _, _)| group.as_str()),
        );
        groups.sort_unstable();
        groups.dedup();
        for (index, feed) in config.feeds.iter().enumerate() {
            for group in feed.overload.subscribers.keys() {
                if !groups.contains(&group.as_str()) {
                    return Err(ServerError::invalid(
                        format!("feeds[{index}].overload.subscribers.{group}"),
                        format!(
                            "an override for the group '{group}', which is not configured: the groups are [{}]; \
                             fix the name or remove the override",
                            groups.join(", ")
                        ),
                    ));
                }
            }
        }
        if let Some(record) = &config.record {
            let mut processors: Vec<&str> = config
                .groups
                .iter()
                .flat_map(|group| {
                    group
                        .processors
                        .iter()
                        .map(|processor| processor.name.as_str())
                })
                .chain(
                    self.code_processors
                        .iter()
                        .map(|(_, name, _)| name.as_str()),
                )
                .collect();
            processors.sort_unstable();
            processors.dedup();
            for (index, name) in record.processors.iter().enumerate() {
                if !processors.contains(&name.as_str()) {
                    return Err(ServerError::invalid(
                        format!("record.processors[{index}]"),
                        format!(
                            "'{name}' names no processor: the processors are [{}]; fix the name \
                             (an empty list records every processor)",
                            processors.join(", ")
                        ),
                    ));
                }
            }
        }
        for (group_index, group) in config.groups.iter().enumerate() {
            for (index, processor) in group.processors.iter().enumerate() {
                let Some(kind) = self.kinds.get(&processor.kind) else {
                    return Err(ServerError::UnknownProcessorKind {
                        path: format!("groups[{group_index}].processors[{index}].kind"),
                        kind: processor.kind.clone(),
                        known: self.kinds.keys().cloned().collect::<Vec<_>>().join(", "),
                    });
                };
                let settings_key = format!("groups[{group_index}].processors[{index}].settings");
                // any kind's `feed` setting names the feed it subscribes to (issue 9,
                // item 11)
                if let Some(toml::Value::String(feed)) = processor.settings.get("feed") {
                    if !feeds.contains(feed) {
                        return Err(ServerError::invalid(
                            format!("{settings_key}.feed"),
                            unknown_feed(&group.name, &processor.name, feed, &feeds),
                        ));
                    }
                }
                let Some(validate) = &kind.validate else {
                    continue;
                };
                let check = SettingsCheck {
                    name: &processor.name,
                    group: &group.name,
                    settings: &processor.settings,
                    config,
                    feeds: &feeds,
                    named_feeds: Default::default(),
                };
                if let Err(refused) = validate(&check) {
                    let path = match &refused.key {
                        Some(key) => format!("{settings_key}.{key}"),
                        None => settings_key,
                    };
                    return Err(ServerError::invalid(
                        path,
                        format!(
                            "processor '{}/{}' ({}): {}",
                            group.name, processor.name, processor.kind, refused.message
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The feeds the configured processors subscribe to (a `feed` setting, or a feed
    /// their kind's settings check names), or `None` when that cannot be known: a
    /// processor added by code, or one that names no feed, may subscribe to any.
    fn consumed_feeds(&self) -> Option<Vec<String>> {
        if !self.code_processors.is_empty() {
            return None;
        }
        let config = &self.config;
        let mut feeds: Vec<String> = config.feeds.iter().map(|feed| feed.name.clone()).collect();
        feeds.extend(self.code_feed_names.iter().cloned());
        let mut consumed = Vec::new();
        for group in &config.groups {
            for processor in &group.processors {
                let mut named = Vec::new();
                if let Some(toml::Value::String(feed)) = processor.settings.get("feed") {
                    named.push(feed.clone());
                }
                if let Some(validate) = self
                    .kinds
                    .get(&processor.kind)
                    .and_then(|kind| kind.validate.as_ref())
                {
                    let check = SettingsCheck {
                        name: &processor.name,
                        group: &group.name,
                        settings: &processor.settings,
                        config,
                        feeds: &feeds,
                        named_feeds: Default::default(),
                    };
                    let _ = validate(&check);
                    named.extend(check.named_feeds.take());
                }
                if named.is_empty() {
                    return None;
                }
                consumed.extend(named);
            }
        }
        Some(consumed)
    }

    /// Refuses a configured feed no processor subscribes to (issue 39, item 3): nothing
    /// would read it, and a positioned feed would hold its position and never settle
    /// (`run --exit-when-settled` waited `stalled_exit_millis` for it, then exited 1).
    /// Not checked when a processor may subscribe to any feed ([`Self::consumed_feeds`]).
    pub(super) fn check_every_feed_consumed(&self) -> Result<(), ServerError> {
        let Some(consumed) = self.consumed_feeds() else {
            return Ok(());
        };
        for (index, feed) in self.config.feeds.iter().enumerate() {
            if consumed.contains(&feed.name) {
                continue;
            }
            return Err(ServerError::invalid(
                format!("feeds[{index}]"),
                format!(
                    "no processor subscribes to the feed '{name}', so nothing would read it (a feed with a pointer would hold \
                     its position and never settle): add a processor for it under [[groups.processors]] \
                     (e.g. kind = \"forward\", settings = {{ feed = \"{name}\", sink = \"...\" }}), or remove the feed",
                    name = feed.name
                ),
            ));
        }
        Ok(())
    }
}
