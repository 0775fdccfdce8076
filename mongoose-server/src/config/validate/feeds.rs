//! The checks of the feeds that read files: their sources, paths and globs, and no two
//! feeds on one file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::ServerError;

use crate::config::{FeedConfig, ServerConfig, MAX_OPEN_FILES, SCAN_INTERVAL_MILLIS};

use super::shared_files::{file_identity, globs_disjoint};
use super::{check_range, name_problem};

impl ServerConfig {
    /// The feeds that read files (`source = "file"`), with their indexes.
    pub(super) fn file_feeds(&self) -> impl Iterator<Item = (usize, &FeedConfig)> {
        self.feeds
            .iter()
            .enumerate()
            .filter(|(_, feed)| feed.is_file())
    }

    /// A file feed has a path and no plugin keys; a plugin feed has no file keys.
    /// Whether a plugin declares its kind is checked when the plugins are loaded
    /// ([`crate::ServerBuilder::check`]).
    pub(super) fn validate_source(&self, index: usize) -> Result<(), ServerError> {
        let feed = &self.feeds[index];
        let at = |key: &str| format!("feeds[{index}].{key}");
        match feed.plugin_kind() {
            None => {
                if !feed.settings.is_empty() || feed.codec.is_some() {
                    let key = if feed.codec.is_some() {
                        "codec"
                    } else {
                        "settings"
                    };
                    return Err(ServerError::invalid(
                        at(key),
                        format!(
                            "`{key}` is a setting of a plugin feed, not of a file feed: remove it"
                        ),
                    ));
                }
            }
            Some(kind) => {
                if self.plugin_dir.is_none() {
                    return Err(ServerError::invalid(
                        at("source"),
                        format!(
                            "'{kind}' is not a built-in source kind (file) and no plugin_dir is set: set plugin_dir \
                             to the folder holding the plugin that declares it (cargo xtask plugins --out DIR builds them)"
                        ),
                    ));
                }
                if let Some(problem) = name_problem(kind) {
                    return Err(ServerError::invalid(at("source"), problem));
                }
                let file_keys = [
                    ("path", !feed.path.as_os_str().is_empty()),
                    ("rotated", feed.rotated.is_some()),
                    ("scan_interval_millis", feed.scan_interval_millis.is_some()),
                    ("max_open_files", feed.max_open_files.is_some()),
                ];
                if let Some((key, _)) = file_keys.iter().find(|(_, set)| *set) {
                    return Err(ServerError::invalid(
                        at(key),
                        format!(
                            "`{key}` is a setting of a file feed; feed '{}' reads the plugin source '{kind}':                              put what the plugin needs in its [feeds.settings] table",
                            feed.name
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Refuses a path no file can have (a NUL byte): the source or sink would fail to
    /// open it at run time (issue 9, item 11: the run never ended).
    pub(super) fn validate_paths(&self) -> Result<(), ServerError> {
        let mut paths: Vec<(String, &Path)> = Vec::new();
        for (index, feed) in self.file_feeds() {
            paths.push((format!("feeds[{index}].path"), &feed.path));
        }
        for (index, sink) in self.sinks.iter().enumerate() {
            if let Some(path) = &sink.path {
                paths.push((format!("sinks[{index}].path"), path));
            }
        }
        if let Some(record) = &self.record {
            paths.push(("record.dir".to_owned(), &record.dir));
        }
        if let Some(dir) = &self.plugin_dir {
            paths.push(("plugin_dir".to_owned(), dir));
        }
        paths.push(("audit.capture_dir".to_owned(), &self.audit.capture_dir));
        for (key, path) in paths {
            if path.as_os_str().as_encoded_bytes().contains(&0) {
                return Err(ServerError::invalid(
                    key,
                    format!(
                        "the path {path:?} holds a NUL byte (\\0), which no file name can hold: fix the path"
                    ),
                ));
            }
            if path.as_os_str().is_empty() {
                return Err(ServerError::invalid(
                    key,
                    "must not be empty: give a file path",
                ));
            }
        }
        // a feed on a directory read it in a busy loop, 693,248 WARN lines in five
        // seconds (issue 10, item 8); a sink on one can never be written
        let files = self
            .file_feeds()
            .map(|(index, feed)| (format!("feeds[{index}].path"), &feed.path))
            .chain(self.sinks.iter().enumerate().filter_map(|(index, sink)| {
                sink.path
                    .as_ref()
                    .map(|path| (format!("sinks[{index}].path"), path))
            }));
        for (key, path) in files {
            let resolved = self.resolve(path);
            if resolved.is_dir() {
                return Err(ServerError::invalid(
                    key,
                    format!(
                        "{} is a directory: give the path of a file (it need not exist yet)",
                        resolved.display()
                    ),
                ));
            }
        }
        if let Some(record) = &self.record {
            let resolved = self.resolve(&record.dir);
            if resolved.exists() && !resolved.is_dir() {
                return Err(ServerError::invalid(
                    "record.dir",
                    format!(
                        "{} exists and is not a directory: give a folder (it need not exist yet)",
                        resolved.display()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The glob keys of feed `index`: only on a glob path, in range, and wildcards only
    /// in the file name.
    pub(super) fn validate_glob(&self, index: usize) -> Result<(), ServerError> {
        let feed = &self.feeds[index];
        if !feed.is_glob() {
            for (key, set) in [
                ("scan_interval_millis", feed.scan_interval_millis.is_some()),
                ("max_open_files", feed.max_open_files.is_some()),
            ] {
                if set {
                    return Err(ServerError::invalid(
                        format!("feeds[{index}].{key}"),
                        format!(
                            "only a feed whose path is a glob (a file name with '*', '?' or '[', e.g. logs/*.log) takes {key}: \
                             remove it, or give a glob path"
                        ),
                    ));
                }
            }
            return Ok(());
        }
        if let Some(parent) = feed.path.parent() {
            if parent.to_string_lossy().contains(['*', '?', '[']) {
                return Err(ServerError::invalid(
                    format!("feeds[{index}].path"),
                    format!(
                        "the glob {} has wildcards in its folder: only the file name may hold '*', '?' or '[' (e.g. logs/*.log)",
                        feed.path.display()
                    ),
                ));
            }
        }
        if let Some(rotated) = feed.rotated.as_deref() {
            let pattern = feed
                .path
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default();
            if mongoose_source_file::glob_covers(rotated, &pattern) {
                return Err(ServerError::invalid(
                    format!("feeds[{index}].rotated"),
                    format!(
                        "the rotated glob '{rotated}' matches every file of the feed's glob '{pattern}': each would be taken for \
                         a rotation and none read. Give the pattern of the rotated names only (e.g. '{pattern}.[0-9]', or \
                         'app-*.log' for dateext names), or remove `rotated` (the default is <name>.* and <name>-* per file)"
                    ),
                ));
            }
        }
        if let Some(millis) = feed.scan_interval_millis {
            check_range(
                format!("feeds[{index}].scan_interval_millis"),
                millis,
                SCAN_INTERVAL_MILLIS,
                " ms",
            )?;
        }
        if let Some(files) = feed.max_open_files {
            check_range(
                format!("feeds[{index}].max_open_files"),
                files as u64,
                1..=MAX_OPEN_FILES as u64,
                " files",
            )?;
        }
        Ok(())
    }

    /// Refuses two feeds on one input file, however their paths are spelled: they would
    /// share the file's pointer (`<input>.readPointer`), and after a kill -9 lines were
    /// both lost and duplicated (issue 9, item 5).
    pub(super) fn refuse_feeds_sharing_a_file(&self) -> Result<(), ServerError> {
        let mut seen: BTreeMap<PathBuf, usize> = BTreeMap::new();
        for (index, feed) in self.file_feeds() {
            let file = file_identity(&self.resolve(&feed.path));
            if let Some(&first) = seen.get(&file) {
                let other = &self.feeds[first];
                return Err(ServerError::invalid(
                    format!("feeds[{index}].path"),
                    format!(
                        "feeds '{}' (path \"{}\") and '{}' (path \"{}\") both read {}: two feeds on one file \
                         would share its pointer file and lose and duplicate lines after a crash; \
                         keep one feed and subscribe every group that needs the lines to it",
                        other.name,
                        other.path.display(),
                        feed.name,
                        feed.path.display(),
                        file.display()
                    ),
                ));
            }
            seen.insert(file, index);
        }
        // two glob feeds in one folder whose globs may match one file: both would use
        // its pointer (globs are compared by their literal prefix and suffix: disjoint
        // only when one of them tells every name apart)
        let globs: Vec<(usize, &FeedConfig, PathBuf)> = self
            .feeds
            .iter()
            .enumerate()
            .filter(|(_, feed)| feed.is_glob())
            .map(|(index, feed)| (index, feed, self.resolve(&feed.path)))
            .collect();
        for (later, (index, feed, path)) in globs.iter().enumerate() {
            for (_, other, other_path) in &globs[..later] {
                let (Some(folder), Some(pattern)) = (path.parent(), path.file_name()) else {
                    continue;
                };
                let (Some(other_folder), Some(other_pattern)) =
                    (other_path.parent(), other_path.file_name())
                else {
                    continue;
                };
                if file_identity(folder) == file_identity(other_folder)
                    && !globs_disjoint(&pattern.to_string_lossy(), &other_pattern.to_string_lossy())
                {
                    return Err(ServerError::invalid(
                        format!("feeds[{index}].path"),
                        format!(
                            "the globs of feeds '{}' (path \"{}\") and '{}' (path \"{}\") may match the same file: \
                             two feeds on one file would share its pointer file and lose and duplicate lines after a crash; \
                             give them different folders, or globs with distinct literal extensions or prefixes (*.log and *.csv)",
                            other.name,
                            other.path.display(),
                            feed.name,
                            feed.path.display()
                        ),
                    ));
                }
            }
        }
        // a single-file feed on a file a glob feed matches: both would use its pointer
        for (glob_index, glob) in self
            .feeds
            .iter()
            .enumerate()
            .filter(|(_, feed)| feed.is_glob())
        {
            let resolved = self.resolve(&glob.path);
            let (Some(folder), Some(pattern)) = (resolved.parent(), resolved.file_name()) else {
                continue;
            };
            let folder = file_identity(folder);
            let pattern = pattern.to_string_lossy();
            for (index, feed) in self.file_feeds() {
                if index == glob_index || feed.is_glob() {
                    continue;
                }
                let resolved = self.resolve(&feed.path);
                let (Some(feed_folder), Some(name)) = (resolved.parent(), resolved.file_name())
                else {
                    continue;
                };
                if file_identity(feed_folder) == folder
                    && mongoose_source_file::glob_matches(&pattern, &name.to_string_lossy())
                {
                    return Err(ServerError::invalid(
                        format!("feeds[{index}].path"),
                        format!(
                            "the glob of feed '{}' (path \"{}\") matches the file of feed '{}' (path \"{}\"): \
                             two feeds on one file would share its pointer file and lose and duplicate lines after a crash; \
                             narrow the glob, or keep one feed",
                            glob.name,
                            glob.path.display(),
                            feed.name,
                            feed.path.display()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}
