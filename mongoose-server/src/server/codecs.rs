//! Record and replay: the configured feeds' codecs and the replay of a recording.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mongoose_core::Processor;
use mongoose_replay::cli::{replay_report, ReplayReport};
use mongoose_replay::{FeedCodecs, Replayer};
use mongoose_source_file::Line;
use parking_lot::Mutex;

use crate::config::{FeedCodec, ServerConfig};
use crate::sinks::Sinks;
use crate::ServerError;

use super::kinds::ProcessorContext;
use super::ServerBuilder;

/// A processor kind's name as the `'static` type name a recording's provenance keeps
/// (a bounded leak: one small string per configured kind).
pub(super) fn kind_name(kind: &str) -> &'static str {
    static KINDS: std::sync::OnceLock<Mutex<BTreeMap<String, &'static str>>> =
        std::sync::OnceLock::new();
    let kinds = KINDS.get_or_init(|| Mutex::new(BTreeMap::new()));
    let mut kinds = kinds.lock();
    if let Some(name) = kinds.get(kind) {
        return name;
    }
    let leaked: &'static str = Box::leak(kind.to_owned().into_boxed_str());
    kinds.insert(kind.to_owned(), leaked);
    leaked
}

/// Replays a recording made by a server with this configuration: per group, each
/// configured processor is built afresh from its kind and settings and given its
/// recorded stream alone. Point the configuration's processor settings at scratch
/// state (a replayed ledger applies the recorded lines to the state it opens).
pub fn replay(
    builder: ServerBuilder,
    recording: &Path,
) -> Result<Vec<(String, ReplayReport)>, ServerError> {
    builder.check()?;
    let plugins = builder.plugins()?;
    let config = builder.config;
    let recording = &recording_to_replay(recording);
    // a replay's sinks hold no feed's commit
    let sinks = Arc::new(Sinks::open(
        &Arc::new(parking_lot::RwLock::new(Arc::new(config.clone()))),
        None,
        plugins.as_deref(),
        None,
    )?);
    let mut reports = Vec::new();
    for (group_index, group) in config.groups.iter().enumerate() {
        let dir = recording.join(&group.name);
        let mut replayer = Replayer::open(&dir, feed_codecs(&config));
        for (index, processor) in group.processors.iter().enumerate() {
            let factory = builder
                .kinds
                .get(&processor.kind)
                .map(|kind| Arc::clone(&kind.build))
                .ok_or_else(|| ServerError::UnknownProcessorKind {
                    path: format!("groups[{group_index}].processors[{index}].kind"),
                    kind: processor.kind.clone(),
                    known: builder.kinds.keys().cloned().collect::<Vec<_>>().join(", "),
                })?;
            let settings = processor.settings.clone();
            let (name, group_name, base) = (
                processor.name.clone(),
                group.name.clone(),
                config.base_dir.clone(),
            );
            let sinks = Arc::clone(&sinks);
            let build = move || -> Result<Box<dyn Processor>, String> {
                factory(&ProcessorContext {
                    name: &name,
                    group: &group_name,
                    settings: &settings,
                    base_dir: &base,
                    sinks: &sinks,
                    // a replay never reaches the feeds' systems
                    feeds: &[],
                    reports: &crate::server::kinds::ProcessorReports::default(),
                })
            };
            build().map_err(|message| ServerError::ProcessorSettings {
                name: processor.name.clone(),
                kind: processor.kind.clone(),
                message,
            })?;
            replayer = replayer.processor(
                &processor.name,
                mongoose_control::ProcessorSupplier::boxed(move || match build() {
                    Ok(built) => built,
                    Err(message) => {
                        panic!("the processor could not be built again for the replay: {message}")
                    }
                })
                .named(kind_name(&processor.kind)),
            );
        }
        reports.push((group.name.clone(), replay_report(&dir, replayer)));
    }
    Ok(reports)
}

/// The prefix of a run's folder in `record.dir`: `run-1`, `run-2`, ...
const RUN_PREFIX: &str = "run-";

/// The run numbers of the `run-<N>` folders in `root` (none when it cannot be read).
fn recording_runs(root: &Path) -> Vec<u64> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let name = entry.file_name();
            let number = name.to_str()?.strip_prefix(RUN_PREFIX)?.parse().ok()?;
            entry.path().is_dir().then_some(number)
        })
        .collect()
}

/// Makes this run's recording folder below `root` (`record.dir`, made if missing):
/// `run-<N>`, N one more than the highest run there, so a recording is never written
/// over and a server restarted with the same config records again.
pub(super) fn new_recording_run(root: &Path) -> Result<PathBuf, ServerError> {
    let io = |error| {
        ServerError::Io {
        context: format!(
            "cannot make this run's recording folder in record.dir {}: check that it is a folder the server may write",
            root.display()
        ),
        error,
    }
    };
    std::fs::create_dir_all(root).map_err(io)?;
    let mut number = recording_runs(root).into_iter().max().unwrap_or(0) + 1;
    loop {
        let run = root.join(format!("{RUN_PREFIX}{number}"));
        match std::fs::create_dir(&run) {
            Ok(()) => return Ok(run),
            // another server took this number at the same moment: the next one
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => number += 1,
            Err(error) => return Err(io(error)),
        }
    }
}

/// The folder a replay of `recording` reads: `recording` itself when it is a run's
/// folder (or a recording made before runs had folders), else its newest `run-<N>`.
fn recording_to_replay(recording: &Path) -> PathBuf {
    match recording_runs(recording).into_iter().max() {
        Some(newest) => {
            let run = recording.join(format!("{RUN_PREFIX}{newest}"));
            tracing::info!(run = %run.display(), "replaying the newest run of the recording folder");
            run
        }
        None => recording.to_path_buf(),
    }
}

/// The codecs of the configured feeds (their [`Line`]s), for record and replay.
pub(super) fn feed_codecs(config: &ServerConfig) -> FeedCodecs {
    config.feeds.iter().fold(FeedCodecs::new(), |codecs, feed| {
        let path = match feed.plugin_kind() {
            None => config.resolve(&feed.path),
            // a plugin feed of lines: its lines' path is the source kind
            Some(kind) if feed.codec.unwrap_or_default() == FeedCodec::Line => {
                std::path::PathBuf::from(kind)
            }
            // a plugin feed of bytes has no codec here: its processors are not recorded
            Some(_) => return codecs,
        };
        codecs.feed_with::<Line, _>(&feed.name, LineCodec { path }, false)
    })
}

/// The recorded form of a file feed's line: its length (a postcard varint) and its
/// bytes as they were on disk, which is also how a `String` line was recorded before
/// lines were [`Line`]s: those recordings replay unchanged. A replayed line's path is
/// the feed's configured input.
#[derive(Debug)]
struct LineCodec {
    path: std::path::PathBuf,
}

impl mongoose_replay::EventCodec<Line> for LineCodec {
    fn encode(&self, line: &Line, out: &mut Vec<u8>) -> Result<(), mongoose_replay::ReplayError> {
        let mut length = line.len();
        while length >= 0x80 {
            out.push((length as u8) | 0x80);
            length >>= 7;
        }
        out.push(length as u8);
        out.extend_from_slice(line.as_bytes());
        Ok(())
    }

    fn decode(&self, bytes: &[u8]) -> Result<Line, mongoose_replay::ReplayError> {
        let mut length = 0usize;
        for (index, &byte) in bytes.iter().enumerate().take(10) {
            length |= usize::from(byte & 0x7f) << (7 * index);
            if byte & 0x80 == 0 {
                let text = &bytes[index + 1..];
                if text.len() != length {
                    break;
                }
                return Ok(Line::new(&self.path, text.to_vec()));
            }
        }
        Err(mongoose_replay::ReplayError::Codec {
            action: "decode",
            reason: format!(
                "a recorded line is not a length and that many bytes ({} bytes)",
                bytes.len()
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongoose_replay::{EventCodec, PostcardCodec};

    #[test]
    fn a_recorded_line_decodes_with_its_bytes_and_a_string_recording_still_replays() {
        let codec = LineCodec {
            path: "in.csv".into(),
        };
        let long = "x".repeat(300);
        for bytes in [&b"a,5"[..], b"caf\xe9", b"", long.as_bytes()] {
            let mut encoded = Vec::new();
            codec
                .encode(&Line::new("in.csv", bytes.to_vec()), &mut encoded)
                .expect("encoded");
            let decoded = codec.decode(&encoded).expect("decoded");
            assert_eq!(decoded.as_bytes(), bytes);
            assert_eq!(decoded.path(), std::path::Path::new("in.csv"));
        }
        // lines were recorded as postcard Strings before they were Lines
        let mut recorded = Vec::new();
        PostcardCodec::<String>::new()
            .encode(&format!("héllo,{long}"), &mut recorded)
            .expect("encoded");
        assert_eq!(
            codec.decode(&recorded).expect("decoded"),
            format!("héllo,{long}")
        );
        assert!(codec.decode(&[5, b'a']).is_err(), "a short record");
    }
}
