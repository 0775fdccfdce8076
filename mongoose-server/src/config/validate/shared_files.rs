//! Files two parts of a configuration must not share: a sink writing what a feed reads
//! (a feedback loop), two file sinks on one file; and the file identity and glob tests
//! they use.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use crate::error::ServerError;

use crate::config::{FeedConfig, ServerConfig};

impl ServerConfig {
    /// Refuses a sink that writes what a feed reads: a file sink on a feed's input (or
    /// on a file a glob feed matches, its state file included), or a plugin sink and a
    /// plugin feed with one `settings.path`. Each output would come back as an input,
    /// for ever (a forward of 2 KB grew its file to 78 MB in 20 s).
    pub(super) fn refuse_feedback_loops(&self) -> Result<(), ServerError> {
        let refuse = |index: usize, key: &str, feed: &FeedConfig, why: String| {
            Err(ServerError::invalid(
                format!("sinks[{index}].{key}"),
                format!(
                    "{why}: every output would be read back by feed '{}' and written again, for ever (a feedback loop); \
                     write the sink's file outside what the feed reads",
                    feed.name
                ),
            ))
        };
        for (index, sink) in self.sinks.iter().enumerate() {
            if let Some(path) = &sink.path {
                let output = self.resolve(path);
                let state = self.sink_state_file(sink, &output);
                for (_, feed) in self.file_feeds() {
                    let input = self.resolve(&feed.path);
                    if !feed.is_glob() {
                        if file_identity(&input) == file_identity(&output) {
                            return refuse(
                                index,
                                "path",
                                feed,
                                format!(
                                    "{} is the input of feed '{}'",
                                    output.display(),
                                    feed.name
                                ),
                            );
                        }
                        continue;
                    }
                    let (Some(folder), Some(pattern)) = (input.parent(), input.file_name()) else {
                        continue;
                    };
                    let pattern = pattern.to_string_lossy();
                    for written in [&output, &state] {
                        let (Some(written_folder), Some(name)) =
                            (written.parent(), written.file_name())
                        else {
                            continue;
                        };
                        if file_identity(written_folder) == file_identity(folder)
                            && mongoose_source_file::glob_matches(&pattern, &name.to_string_lossy())
                        {
                            return refuse(
                                index,
                                "path",
                                feed,
                                format!(
                                    "the glob {} of feed '{}' matches the sink's file {}",
                                    feed.path.display(),
                                    feed.name,
                                    written.display()
                                ),
                            );
                        }
                    }
                }
            }
            // a plugin sink and a plugin feed on one path (a journal sink into the
            // journal a feed tails)
            let Some(sink_path) = sink
                .settings
                .as_ref()
                .and_then(|settings| settings.get("path"))
                .and_then(|path| path.as_str())
            else {
                continue;
            };
            let sink_path = file_identity(&self.resolve(Path::new(sink_path)));
            for feed in &self.feeds {
                let feed_path = feed.settings.get("path").and_then(|path| path.as_str());
                if feed_path
                    .is_some_and(|path| file_identity(&self.resolve(Path::new(path))) == sink_path)
                {
                    return refuse(
                        index,
                        "settings.path",
                        feed,
                        format!(
                            "{} is also the path of feed '{}'",
                            sink_path.display(),
                            feed.name
                        ),
                    );
                }
            }
        }
        Ok(())
    }

    /// The file sink (`kind = "file"`) that writes the file `path` names (resolved
    /// against the config file's folder, however it is spelled), if any: a ledger's own
    /// alerts file must not be one (two writers into one file overwrite each other's
    /// lines).
    pub fn file_sink_writing(&self, path: &Path) -> Option<&crate::config::SinkConfig> {
        let file = file_identity(&self.resolve(path));
        self.sinks.iter().find(|sink| {
            sink.kind == "file"
                && sink
                    .path
                    .as_ref()
                    .is_some_and(|own| file_identity(&self.resolve(own)) == file)
        })
    }

    /// Refuses two file sinks on one file, however their paths are spelled: each keeps
    /// its own state of what the file holds, and they overwrite each other's lines
    /// (issue 24, item 3: 200,000 of 400,000 lines overwritten).
    pub(super) fn refuse_file_sinks_sharing_a_file(&self) -> Result<(), ServerError> {
        let mut seen: BTreeMap<PathBuf, usize> = BTreeMap::new();
        for (index, sink) in self.sinks.iter().enumerate() {
            let Some(path) = sink.path.as_ref().filter(|_| sink.kind == "file") else {
                continue;
            };
            let file = file_identity(&self.resolve(path));
            if file.starts_with("/dev") {
                // a device (/dev/null, /dev/stdout) keeps no state: several sinks may
                continue;
            }
            if let Some(&first) = seen.get(&file) {
                let other = &self.sinks[first];
                return Err(ServerError::invalid(
                    format!("sinks[{index}].path"),
                    format!(
                        "file sinks '{}' (path \"{}\") and '{}' (path \"{}\") write the same file, {}: \
                         two file sinks on one file overwrite each other's lines; give each sink a file of its own, \
                         or let the processors write into one sink (its outputs are keyed by processor)",
                        other.name,
                        other.path.as_deref().unwrap_or(Path::new("")).display(),
                        sink.name,
                        path.display(),
                        file.display()
                    ),
                ));
            }
            seen.insert(file, index);
        }
        Ok(())
    }
}

/// Whether no file name can match both globs: their literal prefixes (before the first
/// wildcard) differ with neither starting the other, or their literal suffixes (after
/// the last wildcard) differ with neither ending the other. A sufficient test, not an
/// exact one: globs it cannot tell apart are taken to overlap.
pub(in crate::config) fn globs_disjoint(a: &str, b: &str) -> bool {
    let wildcard = |c: char| matches!(c, '*' | '?' | '[' | ']');
    let prefix = |glob: &str| glob.find(wildcard).map_or(glob.len(), |at| at);
    let suffix = |glob: &str| glob.rfind(wildcard).map_or(0, |at| at + 1);
    let (pa, pb) = (&a[..prefix(a)], &b[..prefix(b)]);
    let (sa, sb) = (&a[suffix(a)..], &b[suffix(b)..]);
    !(pa.starts_with(pb) || pb.starts_with(pa)) || !(sa.ends_with(sb) || sb.ends_with(sa))
}

/// The file a path names, to compare two feeds' inputs: the longest prefix of the
/// path that exists is resolved by the file system (symlinks, `..`), the rest (which
/// does not exist yet) lexically.
pub(super) fn file_identity(path: &Path) -> PathBuf {
    let components: Vec<Component<'_>> = path.components().collect();
    for split in (1..=components.len()).rev() {
        let prefix: PathBuf = components[..split].iter().collect();
        if let Ok(real) = std::fs::canonicalize(&prefix) {
            return lexical_join(real, &components[split..]);
        }
    }
    lexical_join(PathBuf::new(), &components)
}

fn lexical_join(mut base: PathBuf, components: &[Component<'_>]) -> PathBuf {
    for component in components {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                let climbs = matches!(
                    base.components().next_back(),
                    None | Some(Component::ParentDir)
                );
                if climbs {
                    base.push("..");
                } else {
                    base.pop();
                }
            }
            other => base.push(other.as_os_str()),
        }
    }
    base
}
