//! What happens to the inputs: rotations, renames in a glob, deletions and a re-created
//! source.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::scenario::{PeerKind, RotateMode, SourceKind};
use crate::world::World;

use super::{create_empty, remove, rename};

impl World {
    pub(super) fn rotate(&mut self, mode: RotateMode, stream: u32) -> Result<(), String> {
        if !matches!(self.scenario.source, SourceKind::File | SourceKind::Glob) {
            self.event("rotation skipped: the source is not a file");
            return Ok(());
        }
        let stream = stream.min(self.streams.len() as u32 - 1) as usize;
        let live = self.streams[stream].live.clone();
        if !live.exists() {
            self.event(format!(
                "rotation skipped: {} does not exist",
                live.display()
            ));
            return Ok(());
        }
        self.streams[stream].rotations += 1;
        let count = self.streams[stream].rotations;
        let second_unsettled = self.streams[stream].unsettled_rotation.is_some();
        if let Some(earlier) = self.streams[stream].unsettled_rotation.take() {
            // two rotations before the server caught up: the earlier one may become a
            // middle file, neither the pointer's nor the live one (documented: reported
            // as a possible loss, not read)
            let lines: Vec<usize> = self.streams[stream]
                .files
                .iter()
                .filter(|file| file.path == earlier)
                .flat_map(|file| file.lines.clone())
                .collect();
            self.truth.mark_maybe(lines, true);
            self.note_lossy("two rotations before the server caught up");
        }
        let numbered = |number: u32| {
            let mut name = live.as_os_str().to_owned();
            name.push(format!(".{number}"));
            PathBuf::from(name)
        };
        match mode {
            RotateMode::Rename => {
                let target = numbered(count);
                rename(&live, &target)?;
                let lines = self.moved(stream, &live, &target);
                self.mark_middle(second_unsettled, lines);
            }
            RotateMode::Create => {
                let target = if self.scenario.source == SourceKind::Glob {
                    // renamed inside the glob: the old file and the new one are read
                    // on two lanes at once
                    self.truth.unordered.insert(stream as u32);
                    live.with_file_name(format!("s{stream}-{count}.log"))
                } else {
                    numbered(count)
                };
                rename(&live, &target)?;
                let lines = self.moved(stream, &live, &target);
                if self.scenario.source == SourceKind::File {
                    self.mark_middle(second_unsettled, lines);
                }
                create_empty(&live)?;
            }
            RotateMode::Copytruncate => {
                let target = numbered(count);
                std::fs::copy(&live, &target)
                    .map_err(|error| format!("cannot copy {}: {error}", live.display()))?;
                let file = OpenOptions::new()
                    .write(true)
                    .open(&live)
                    .map_err(|error| format!("cannot open {}: {error}", live.display()))?;
                file.set_len(0)
                    .map_err(|error| format!("cannot truncate {}: {error}", live.display()))?;
                // what was not read before the cut is only in the copy, which is a
                // rotation: read from it, or a loss the run reports
                let lines = self.moved(stream, &live, &target);
                self.truth.mark_maybe(lines, true);
                self.note_lossy("copytruncate");
            }
            RotateMode::Compress => {
                let first = numbered(1);
                if first.exists() {
                    // delaycompress: the last rotation is compressed now
                    let status = std::process::Command::new("gzip")
                        .arg("-f")
                        .arg(&first)
                        .status()
                        .map_err(|error| format!("cannot run gzip: {error}"))?;
                    if !status.success() {
                        return Err(format!("gzip {} failed", first.display()));
                    }
                    let mut gz = first.as_os_str().to_owned();
                    gz.push(".gz");
                    let target = live.with_file_name(format!(
                        "{}.{}.gz",
                        live.file_name()
                            .map_or(String::new(), |name| name.to_string_lossy().into_owned()),
                        count + 1
                    ));
                    rename(Path::new(&gz), &target)?;
                    let lines = self.moved(stream, &first, &target);
                    self.truth.mark_maybe(lines, true);
                    self.note_lossy("compress");
                }
                rename(&live, &first)?;
                self.moved(stream, &live, &first);
                create_empty(&live)?;
            }
        }
        self.streams[stream].unsettled_rotation = self.streams[stream]
            .files
            .iter()
            .rev()
            .find(|file| file.path != live)
            .map(|file| file.path.clone());
        self.event(format!("rotated stream {stream} ({mode:?})"));
        Ok(())
    }

    /// Notes that `from` of `stream` is now at `to`; the lines it holds.
    /// A file rotated away while an earlier rotation was unsettled: the server's
    /// pointer may still be in a file before it (the earlier rotation's, or one it was
    /// reading when that came), so this one is a middle file, neither the pointer's nor
    /// the one at the path. A restart finds it written after the pointer's file and
    /// does not read it (it cannot be proven a rotation: a copy would be read twice):
    /// its lines may be missing and their loss must be reported. (The rotated files are
    /// numbered up, not shifted, so the earlier rotation's file is not the middle one:
    /// the one made now is; seed 1796199420421.)
    fn mark_middle(&mut self, second_unsettled: bool, lines: Vec<usize>) {
        if second_unsettled {
            self.truth.mark_maybe(lines, true);
        }
    }

    fn moved(&mut self, stream: usize, from: &Path, to: &Path) -> Vec<usize> {
        let files = &mut self.streams[stream];
        match files.files.iter_mut().find(|file| file.path == from) {
            Some(file) => {
                file.path = to.to_path_buf();
                file.lines.clone()
            }
            None => Vec::new(),
        }
    }

    pub(super) fn rename_in_glob(&mut self, stream: u32) -> Result<(), String> {
        if self.scenario.source != SourceKind::Glob {
            self.event("rename skipped: the source is not a glob");
            return Ok(());
        }
        let stream = stream.min(self.streams.len() as u32 - 1) as usize;
        let live = self.streams[stream].live.clone();
        if !live.exists() {
            return Ok(());
        }
        self.streams[stream].rotations += 1;
        let target =
            live.with_file_name(format!("s{stream}r{}.log", self.streams[stream].rotations));
        rename(&live, &target)?;
        self.moved(stream, &live, &target);
        // the writer keeps writing the same file under its new name
        self.streams[stream].live = target;
        Ok(())
    }

    pub(super) fn delete_input(&mut self, stream: u32) -> Result<(), String> {
        if self.scenario.source != SourceKind::Glob {
            self.event("delete skipped: the source is not a glob");
            return Ok(());
        }
        let stream = stream.min(self.streams.len() as u32 - 1) as usize;
        let live = self.streams[stream].live.clone();
        if !live.exists() {
            return Ok(());
        }
        remove(&live);
        let lines = self.moved(stream, &live, Path::new("/deleted"));
        self.truth.mark_maybe(lines, true);
        if self.scenario.options.max_open_files.is_some() {
            // a file waiting for a slot (or one that gave its slot up) has no open
            // handle to read it to its end through: whether it grew after it was last
            // seen, a watch's events cannot say for sure
            self.uncertain_losses
                .push("delete-input (a file without an open handle)".to_owned());
            self.note_lossy("delete-input");
        } else {
            self.note_lossy_unseen("delete-input");
        }
        // the stream's next lines go to a new file of the original name
        self.streams[stream].live = self.path(&format!("in/logs/s{stream}.log"));
        Ok(())
    }

    pub(super) fn recreate_source(&mut self) -> Result<(), String> {
        let old: Vec<usize> = self
            .streams
            .iter()
            .flat_map(|files| files.files.iter().flat_map(|file| file.lines.clone()))
            .collect();
        match self.scenario.source {
            SourceKind::File | SourceKind::Glob => {
                for files in &mut self.streams {
                    for file in &mut files.files {
                        remove(&file.path);
                        file.path = PathBuf::from("/deleted");
                    }
                }
                // the pointer's file is gone: the server cannot tell whether lines were
                // appended to it after it last read it, so it may report a possible
                // loss (exit 3, in the run that finds it and the one after)
                self.note_lossy_unseen("recreate-source");
            }
            SourceKind::Journal => {
                self.close_appender()?;
                let live = self.path("in/journal");
                remove(&live);
                self.generation += 1;
                // a new journal: its excerpts are the lines appended from now on, and
                // no excerpt of it is damaged
                for files in &mut self.streams {
                    files.files.retain(|file| file.path != live);
                }
                self.journal_damaged_at = None;
            }
            SourceKind::ArchiveIpc | SourceKind::ArchiveUdp => {
                if let Some(mut publisher) = self.peers.remove(&PeerKind::Publisher) {
                    publisher.kill();
                }
                if let Some(mut archiver) = self.peers.remove(&PeerKind::Archiver) {
                    archiver.terminate(Duration::from_secs(30));
                }
                remove(&self.path("in/archive"));
                remove(&self.path("in/ipc"));
                std::fs::create_dir_all(self.path("in/ipc"))
                    .map_err(|error| format!("cannot make in/ipc: {error}"))?;
                self.session += 1;
                self.start_peer(PeerKind::Archiver)?;
            }
            SourceKind::Kafka => self.recreate_topic()?,
        }
        for files in &mut self.streams {
            files
                .files
                .retain(|file| file.path != Path::new("/deleted"));
        }
        // what the server had not read of the old source went with it
        self.truth.mark_maybe(old, false);
        self.event("re-created the source");
        Ok(())
    }
}
