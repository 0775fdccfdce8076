//! Faults: damaged state files and journal excerpts, full disks, the peers' actions, and
//! healing.

use std::fs::OpenOptions;
use std::io::Write;
use std::time::Duration;

use rand::Rng;

use crate::peer::write_mode;
use crate::scenario::{
    Damage, Disk, HttpMode, PeerAction, PeerKind, SinkKind, SourceKind, StateFile,
};
use crate::world::World;

use super::{copy_path, files_below, remove};

impl World {
    pub(super) fn damage(&mut self, what: StateFile, how: Damage) -> Result<(), String> {
        if what == StateFile::JournalExcerpt {
            return self.damage_journal_excerpt(how);
        }
        let mut path = self.state_path(what);
        if path.is_dir() && matches!(how, Damage::FlipByte { .. } | Damage::CutTail { .. }) {
            // a folder's damage is one of its files'
            let mut files = files_below(&path);
            files.sort();
            if files.is_empty() {
                self.event(format!("nothing to damage in {}", path.display()));
                return Ok(());
            }
            let pick = self.random.random_range(0..files.len());
            path = files.swap_remove(pick);
        }
        match how {
            Damage::FlipByte { at } => {
                let mut bytes = match std::fs::read(&path) {
                    Ok(bytes) if !bytes.is_empty() => bytes,
                    _ => {
                        self.event(format!("nothing to damage at {}", path.display()));
                        return Ok(());
                    }
                };
                // any byte of any state file: a file sink's state is a record log of
                // the durable layer, and a byte in its header or in a record others
                // follow is refused naming it, one in its last record is a torn tail
                // (cut, then the output file decides)
                let offset = (bytes.len().saturating_sub(1) * at.min(1000) as usize) / 1000;
                bytes[offset] ^= 0x5a;
                std::fs::write(&path, &bytes)
                    .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
                self.event(format!("flipped byte {offset} of {}", path.display()));
            }
            Damage::CutTail { keep } => {
                let Ok(meta) = std::fs::metadata(&path) else {
                    return Ok(());
                };
                let length = meta.len() * u64::from(keep.min(999)) / 1000;
                OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .and_then(|file| file.set_len(length))
                    .map_err(|error| format!("cannot cut {}: {error}", path.display()))?;
                self.event(format!("cut {} to {length} bytes", path.display()));
            }
            Damage::OlderCopy => {
                let Some(copy) = self.copies.get(&what).cloned() else {
                    self.event(format!("no copy of {what:?} kept: nothing put back"));
                    return Ok(());
                };
                remove(&path);
                copy_path(&copy, &path)
                    .map_err(|error| format!("cannot put back {}: {error}", path.display()))?;
                self.event(format!("put an older copy of {} back", path.display()));
            }
            Damage::Foreign => {
                let foreign = crate::foreign::foreign_state(self, what)?;
                remove(&path);
                copy_path(&foreign, &path)
                    .map_err(|error| format!("cannot put {} in place: {error}", path.display()))?;
                self.event(format!("put another run's {what:?} at {}", path.display()));
            }
        }
        Ok(())
    }

    /// Flips the first payload byte of one excerpt of the input journal (at `at`
    /// per-mille of its excerpts): the excerpts from it on may stay unread.
    fn damage_journal_excerpt(&mut self, how: Damage) -> Result<(), String> {
        let Damage::FlipByte { at } = how else {
            self.event("only a flipped byte damages a journal excerpt: nothing done");
            return Ok(());
        };
        // the next lines go through a new appender, which opens the damaged journal;
        // what the old one refused is no input, so the lines below are the journal's
        self.close_appender()?;
        let output = self
            .mongoose(&["journal", "dump", "in/journal"])
            .output()
            .map_err(|error| format!("cannot run journal dump: {error}"))?;
        let text = String::from_utf8_lossy(&output.stdout);
        let rows: Vec<(usize, u64, u64)> = text
            .lines()
            .skip(1)
            .filter_map(|line| {
                let fields: Vec<&str> = line.split('\t').collect();
                Some((
                    fields.first()?.parse().ok()?,
                    fields.get(1)?.parse().ok()?,
                    fields.get(2)?.parse().ok()?,
                ))
            })
            .collect();
        if rows.len() < 3 {
            self.event("too few excerpts to damage one in the middle");
            return Ok(());
        }
        let pick = 1 + (rows.len() - 2) * at.min(1000) as usize / 1000;
        let (index, segment, offset) = rows[pick.min(rows.len() - 2)];
        let file = self.path(&format!("in/journal/{segment:020}.segment"));
        let mut bytes = std::fs::read(&file)
            .map_err(|error| format!("cannot read {}: {error}", file.display()))?;
        let at = offset as usize + 8;
        if at >= bytes.len() {
            return Err(format!(
                "excerpt {index} is past the end of {}",
                file.display()
            ));
        }
        bytes[at] ^= 0x5a;
        std::fs::write(&file, &bytes)
            .map_err(|error| format!("cannot write {}: {error}", file.display()))?;
        let live = self.path("in/journal");
        let after: Vec<usize> = self.streams[0]
            .files
            .iter()
            .filter(|file| file.path == live)
            .flat_map(|file| file.lines.iter().skip(index).copied().collect::<Vec<_>>())
            .collect();
        self.truth.mark_maybe(after, true);
        self.note_lossy(format!("journal excerpt {index} damaged"));
        self.input_damaged = true;
        self.journal_damaged_at
            .get_or_insert(self.truth.lines.len());
        self.event(format!(
            "flipped the first payload byte of excerpt {index} ({}, offset {offset})",
            file.display()
        ));
        Ok(())
    }

    pub(super) fn fill_disk(&mut self, under: Disk, leave: u32) {
        let Some(tmpfs) = self.tmpfs.get(&under) else {
            self.event(format!("no tmpfs under {under:?}: nothing filled"));
            return;
        };
        let filler = tmpfs.path().join("filler");
        let Ok(mut file) = OpenOptions::new().create(true).append(true).open(&filler) else {
            return;
        };
        let block = vec![0u8; 4096];
        while file.write_all(&block).is_ok() {}
        while file.write_all(&block[..1]).is_ok() {}
        if leave > 0 {
            if let Ok(meta) = file.metadata() {
                let _ = file.set_len(meta.len().saturating_sub(u64::from(leave)));
            }
        }
        let _ = file.sync_all();
        self.event(format!(
            "filled the {under:?} tmpfs (leaving {leave} bytes)"
        ));
    }

    pub(super) fn free_disk(&mut self, under: Disk) {
        if let Some(tmpfs) = self.tmpfs.get(&under) {
            remove(&tmpfs.path().join("filler"));
            self.event(format!("freed the {under:?} tmpfs"));
        }
    }

    pub(super) fn peer_action(&mut self, peer: PeerKind, action: PeerAction) -> Result<(), String> {
        if peer == PeerKind::Broker {
            return self.broker_action(action);
        }
        match action {
            PeerAction::Kill => {
                if let Some(mut process) = self.peers.remove(&peer) {
                    process.kill();
                    if peer == PeerKind::HttpTarget {
                        self.http_went_down();
                    }
                    self.event(format!("{peer:?} killed"));
                    if peer == PeerKind::Appender {
                        self.reconcile_journal()?;
                    }
                }
            }
            PeerAction::Pause { ms } => {
                if let Some(process) = self.peers.get_mut(&peer) {
                    process.pause();
                    if peer == PeerKind::HttpTarget {
                        self.http_went_down();
                    }
                    std::thread::sleep(Duration::from_millis(ms));
                    if let Some(process) = self.peers.get_mut(&peer) {
                        process.resume();
                    }
                }
            }
            PeerAction::Restart => {
                // a writer peer comes back with its next input
                if !matches!(peer, PeerKind::Appender | PeerKind::Publisher) {
                    self.start_peer(peer)?;
                }
            }
        }
        Ok(())
    }

    /// Ends the journal's appender (its standard input closed) and waits for it:
    /// everything it took is then in the journal, and if it refused the journal (a
    /// damaged one), the lines it was given are no input. Before anything reads the
    /// journal's excerpts as the harness's lines (a damage marks the lines after one).
    ///
    /// # Errors
    /// The journal cannot be read to tell what a stuck appender appended.
    pub(crate) fn close_appender(&mut self) -> Result<(), String> {
        let Some(mut appender) = self.peers.remove(&PeerKind::Appender) else {
            return Ok(());
        };
        appender.close_stdin();
        match appender.wait_for(Duration::from_secs(30)) {
            Some(status) if status.success() => Ok(()),
            Some(status) => {
                self.event(format!("Appender ended with {status}"));
                self.appender_refused();
                Ok(())
            }
            None => {
                appender.kill();
                self.event("the Appender did not finish its input in 30 s: killed");
                self.reconcile_journal()
            }
        }
    }

    /// An appender ended with a failure after the input journal was damaged: it refused
    /// the journal (only a torn tail may be cut), so the lines given to it since the
    /// damage are not input.
    pub(crate) fn appender_refused(&mut self) {
        let Some(from) = self.journal_damaged_at else {
            return;
        };
        let live = self.path("in/journal");
        let mut never = Vec::new();
        for file in &mut self.streams[0].files {
            if file.path == live {
                file.lines.retain(|index| {
                    let kept = *index < from;
                    if !kept {
                        never.push(*index);
                    }
                    kept
                });
            }
        }
        self.event(format!(
            "the appender refused the damaged journal: {} lines given to it are no input",
            never.len()
        ));
        self.truth.mark_no_input(never);
    }

    /// After a killed appender: the lines it had not read from its input were never
    /// appended; they are no input of the run. An appender started after an excerpt was
    /// damaged refused the journal and appended nothing (and a tail stops at the damaged
    /// excerpt, so it cannot tell what is after it): the lines given since the damage are
    /// no input.
    pub(crate) fn reconcile_journal(&mut self) -> Result<(), String> {
        if self.journal_damaged_at.is_some() {
            self.appender_refused();
            return Ok(());
        }
        let output = self
            .mongoose(&["journal", "tail", "in/journal"])
            .output()
            .map_err(|error| format!("cannot run journal tail: {error}"))?;
        let text = String::from_utf8_lossy(&output.stdout);
        // the journal's excerpts in order: the lines given to appenders that are there,
        // matched in order (a shared account's lines repeat their text: a set of texts
        // took a line never appended for one that was)
        let appended: Vec<&str> = text
            .lines()
            .filter_map(|line| line.split_once('\t').map(|(_, body)| body))
            .collect();
        let live = self.path("in/journal");
        let mut never = Vec::new();
        if let Some(file) = self.streams[0]
            .files
            .iter_mut()
            .find(|file| file.path == live)
        {
            let mut next = 0;
            file.lines.retain(|index| {
                let kept = appended.get(next) == Some(&self.truth.lines[*index].text.as_str());
                if kept {
                    next += 1;
                } else {
                    never.push(*index);
                }
                kept
            });
        }
        self.event(format!(
            "the killed appender had appended {} lines; {} it never read are no input",
            appended.len(),
            never.len()
        ));
        self.truth.mark_no_input(never);
        Ok(())
    }

    /// Brings every fault back to health before the final run: the disks freed, the
    /// HTTP target answering, the peers running, the input writers done.
    ///
    /// # Errors
    /// A peer cannot be started.
    pub fn heal(&mut self) -> Result<(), String> {
        for disk in [Disk::State, Disk::Outputs] {
            self.free_disk(disk);
        }
        if self.scenario.sink == SinkKind::Http {
            write_mode(&self.path("peers/http.mode"), HttpMode::Ok)
                .map_err(|error| format!("cannot write the HTTP mode: {error}"))?;
            self.http_failing = false;
        }
        for process in self.peers.values_mut() {
            process.resume();
        }
        for peer in [
            PeerKind::HttpTarget,
            PeerKind::TcpReceiver,
            PeerKind::Archiver,
        ] {
            let needed = match peer {
                PeerKind::HttpTarget => self.scenario.sink == SinkKind::Http,
                PeerKind::TcpReceiver => self.scenario.sink == SinkKind::Tcp,
                _ => matches!(
                    self.scenario.source,
                    SourceKind::ArchiveIpc | SourceKind::ArchiveUdp
                ),
            };
            if needed {
                self.start_peer(peer)?;
            }
        }
        self.heal_broker()?;
        self.close_writers();
        Ok(())
    }
}
