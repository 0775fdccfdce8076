//! Where a COMMITED source resumes, decided before the first open by the one rule of
//! every source ([`mongoose_core::resume`], invariant 8): its pointer (when it
//! is this input's and whole) and what each consumer holds (a saved state's position, a
//! sink's written outputs, or nothing of its own). Book:
//! guarantees/where-a-feed-resumes.md.

use std::fs::File;
use std::path::Path;

use mongoose_core::resume::{resume, resume_knowing, Mismatch, Trust};
use mongoose_core::{ConsumerPosition, CoreError, Epoch, Held};
use tracing::{info, warn};

use super::FileEventSource;
use crate::identity::{identity_epoch_of, is_identity_epoch, key_of};
use crate::pointer::{owner_of, PointerRecord, LAYOUT_VERSION};
use crate::positional::read_exact_at;

/// What the source makes of its pointer file at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pointer {
    /// Whole, of this layout, with an epoch: trusted unless another input's.
    Trusted,
    /// Whole but of a layout without epochs (its offset only): the offset is kept and
    /// the epoch taken at the first open.
    Legacy,
    /// Empty or damaged, or missing while something else says the feed ran before.
    Lost,
    /// Missing, and made now: a first start unless a consumer holds a position.
    New,
}

impl<T: Send + 'static> FileEventSource<T> {
    /// Decides where to resume, before the first open.
    ///
    /// A trusted pointer (this input's, whole) resumes where it is, moved back to a
    /// consumer's saved position of its epoch before it, or to the start for a consumer
    /// whose saved state holds nothing of the feed. A pointer that cannot be trusted
    /// (missing, damaged, or another input's: see [`FileEventSource::is_foreign`])
    /// resumes under the epoch of the input file's identity
    /// ([`crate::identity::identity_epoch_of`]) at the lowest position any consumer may
    /// need: its saved or written position of this identity, the start for a consumer
    /// that keeps no position of its own (a forward into HTTP, TCP, Kafka or stdout, a
    /// processor without its guard). Lines are repeated, never skipped, and a repeat
    /// carries the key of its first delivery, so every consumer can drop it. A saved
    /// state that cannot be matched with the input is refused with what to do.
    pub(super) fn reconcile(
        &self,
        record: PointerRecord,
        pointer: Pointer,
        pointer_path: &Path,
    ) -> Result<PointerRecord, CoreError> {
        let name = &self.config.name;
        // asked once (a glob's lane is given its positions at its first start)
        let positions = self.output.consumer_positions();
        let trusted = pointer == Pointer::Trusted;
        let foreign = trusted && self.is_foreign(&record, pointer_path, &positions);
        let trusted = trusted && !foreign;
        let refuse = |message: String| CoreError::Source {
            source_name: name.clone(),
            message,
        };
        if pointer == Pointer::Legacy {
            // kept: only a saved state that holds nothing of the feed moves it back
            let at = resume(
                Trust::Trusted {
                    epoch: Epoch::NONE,
                    offset: record.offset,
                },
                Epoch::NONE,
                &positions,
            )
            .map_err(|mismatch| refuse(self.trusted_mismatch(&record, pointer_path, &mismatch)))?;
            let why = match at.decided_by.as_deref() {
                None => "the offset of a pointer of an older layout (without an epoch)".to_owned(),
                Some(consumer) => format!("a consumer's saved position ({consumer})"),
            };
            self.log_resumed(at.offset, Epoch::NONE, &why, &positions);
            return Ok(PointerRecord {
                offset: at.offset,
                ..record
            });
        }
        if trusted {
            let at = resume(
                Trust::Trusted {
                    epoch: Epoch(record.epoch),
                    offset: record.offset,
                },
                Epoch(record.epoch),
                &positions,
            )
            .map_err(|mismatch| refuse(self.trusted_mismatch(&record, pointer_path, &mismatch)))?;
            if at.offset < record.offset {
                warn!(source = %name, pointer = record.offset, resume_at = at.offset,
                    consumer = at.decided_by.as_deref().unwrap_or_default(),
                    "the pointer is past what this consumer's saved state holds (its state was deleted or restored from an older copy?): re-reading from there so nothing is skipped");
            }
            let why = match at.decided_by.as_deref() {
                None => "the pointer's offset".to_owned(),
                Some(consumer) => format!(
                    "a consumer's saved position ({consumer}), before the pointer's offset {}",
                    record.offset
                ),
            };
            self.log_resumed(at.offset, Epoch(record.epoch), &why, &positions);
            return Ok(PointerRecord {
                offset: at.offset,
                ..record
            });
        }
        // not trusted: the input's identity decides the epoch, the consumers the offset
        let opened = File::open(&self.config.path).ok();
        let identity = opened.as_ref().and_then(identity_epoch_of);
        let fresh = PointerRecord {
            layout_version: LAYOUT_VERSION,
            owner: owner_of(&self.config.path),
            ..PointerRecord::default()
        };
        // a consumer still in a file rotated away while the source was stopped: that
        // file is finished first, from where the consumers need it (the open follows
        // the rotation as it follows a pointer's), then the file at the path
        if let Some(rotated) = self.rotated_file_of(&positions, identity) {
            info!(source = %name, input = %self.config.path.display(), offset = rotated.offset,
                "resumed at byte {} of a file rotated away from the input while stopped: the consumers' saved positions are in it; it is read to its end, then the input from its start",
                rotated.offset);
            return Ok(rotated);
        }
        let Some(identity) = identity else {
            // no input file yet, or not its whole first line: no consumer can hold a
            // position of it. It is read from its start; its epoch is its identity,
            // taken at its first line
            info!(source = %name, pointer = %pointer_path.display(), foreign,
                "resumed {} at byte 0: the start of the file (no usable pointer and no input line yet); 0 bytes will be read again",
                self.config.path.display());
            return Ok(fresh);
        };
        // a saved state of another input's identity (a `path` changed to another file, a
        // file replaced while stopped), not found among the rotations: that input is not
        // this one, and this one's lines are new to it. A state of an epoch that is no
        // identity (an older layout's) cannot be told from this input's: refused
        let at = resume_knowing(Trust::Lost, Epoch(identity), &positions, |epoch| {
            is_identity_epoch(epoch.get())
        })
        .map_err(|mismatch| refuse(self.lost_mismatch(pointer_path, &mismatch)))?;
        for note in &at.notes {
            warn!(source = %name, input = %self.config.path.display(), "{note} (another input file's identity)");
        }
        let fits = at.offset == 0
            || opened.as_ref().is_some_and(|file| {
                let size = file.metadata().map(|meta| meta.len()).unwrap_or(0);
                let mut last = [0u8; 1];
                size >= at.offset
                    && read_exact_at(file, &mut last, at.offset - 1).is_ok()
                    && (last[0] == b'\n' || last[0] == b'\r')
            });
        if !fits {
            // a position under this file's identity that is no line end of it: the
            // file changed under the same identity (cut and written again in place)
            return Err(refuse(format!(
                "the pointer file {} is missing, damaged or another input's, and {} is not a line end of the input file {}: the input changed since the consumers' state or outputs were made from it. Nothing was read or changed. If it was replaced on purpose, move the consumers' state (or the sink's output and state) away so that they start over; otherwise restore the input file or the pointer file",
                pointer_path.display(),
                at.decided_by.as_deref().unwrap_or("the consumers' position"),
                self.config.path.display(),
            )));
        }
        let holds_nothing = positions
            .iter()
            .all(|consumer| matches!(consumer.held, Held::Nothing | Held::Saved(None)));
        if pointer == Pointer::New && holds_nothing {
            // nothing says the feed ran before: a first start, not a loss to warn of
            info!(source = %name, pointer = %pointer_path.display(), epoch = %Epoch(identity),
                "no pointer file and no consumer holds a position of this input: read from its start (a first start; if this feed ran before with another data folder, what it read then is read again)");
        } else {
            warn!(source = %name, pointer = %pointer_path.display(), epoch = %Epoch(identity), resume_at = at.offset,
                decided_by = at.decided_by.as_deref().unwrap_or("no consumer"), foreign,
                "the pointer file is missing, damaged or another input's: resuming under the input file's identity at the lowest position any consumer needs (repeats carry the keys of their first delivery: nothing written twice where a consumer drops repeats, nothing skipped)");
        }
        let why = match at.decided_by.as_deref() {
            Some(consumer) if at.offset > 0 => {
                format!("the consumers' saved positions ({consumer}), no usable pointer")
            }
            Some(consumer) => format!("the start of the file (no usable pointer; {consumer})"),
            None => {
                "the start of the file (no usable pointer, and no consumer holds a position of it)"
                    .to_owned()
            }
        };
        self.log_resumed(at.offset, Epoch(identity), &why, &positions);
        Ok(PointerRecord {
            offset: at.offset,
            epoch: identity,
            ..fresh
        })
    }

    /// The one INFO line of a start (per lane for a glob): where the source resumes
    /// and why, and how many bytes it reads again that a consumer already holds (the
    /// repeats it drops by its saved position or by their keys).
    fn log_resumed(&self, offset: u64, epoch: Epoch, why: &str, positions: &[ConsumerPosition]) {
        let held = positions
            .iter()
            .filter_map(|consumer| match consumer.held {
                Held::Saved(Some((saved, position))) | Held::Written((saved, position))
                    if saved == epoch || epoch == Epoch::NONE =>
                {
                    Some(position.offset)
                }
                _ => None,
            })
            .max()
            .unwrap_or(offset);
        let repeats = held.saturating_sub(offset);
        let keeping_nothing = positions
            .iter()
            .any(|consumer| consumer.held == Held::Nothing);
        let unknown = if keeping_nothing {
            " (a consumer that keeps no position of its own may get more repeats: they carry the keys of their first delivery)"
        } else {
            ""
        };
        info!(source = %self.config.name, input = %self.config.path.display(), offset, %epoch,
            "resumed {} at byte {offset}: {why}; {repeats} bytes will be read again (repeats the consumers skip by their keys){unknown}",
            self.config.path.display());
    }

    /// For a lost pointer: a file among the input's rotations whose identity is the
    /// epoch a consumer holds a position of (the input was rotated while the source was
    /// stopped), as the pointer record that names it, at the lowest position any consumer
    /// needs of it (its start for a consumer that keeps nothing, or whose state holds
    /// nothing). `None` when every consumer's epoch is the identity of the file at the
    /// path (`identity`), or none is found.
    fn rotated_file_of(
        &self,
        positions: &[ConsumerPosition],
        identity: Option<u64>,
    ) -> Option<PointerRecord> {
        let elsewhere: Vec<Epoch> = positions
            .iter()
            .filter_map(|consumer| match consumer.held {
                Held::Saved(Some((epoch, _))) | Held::Written((epoch, _))
                    if Some(epoch.get()) != identity =>
                {
                    Some(epoch)
                }
                _ => None,
            })
            .collect();
        if elsewhere.is_empty() {
            return None;
        }
        let globs = self.rotation_globs();
        for candidate in crate::rotation::candidates(&self.config.path, &globs) {
            let Ok(file) = File::open(&candidate) else {
                continue;
            };
            let Some(epoch) = identity_epoch_of(&file).map(Epoch) else {
                continue;
            };
            if !elsewhere.contains(&epoch) {
                continue;
            }
            // every consumer's need of this file: its position in it, else its start
            let offset = positions
                .iter()
                .map(|consumer| match consumer.held {
                    Held::Saved(Some((held, position))) | Held::Written((held, position))
                        if held == epoch =>
                    {
                        position.offset
                    }
                    _ => 0,
                })
                .min()
                .unwrap_or(0);
            let metadata = file.metadata().ok()?;
            let key = key_of(&metadata)?;
            let (fingerprint_length, fingerprint) =
                crate::positional::fingerprint_of(&file).unwrap_or((0, 0));
            warn!(source = %self.config.name, rotated = %candidate.display(), %epoch, resume_at = offset,
                "the pointer file is missing, damaged or another input's, and the consumers hold positions of a rotated file of the input: finishing it from the lowest position a consumer needs, under its epoch (its identity), before the file at the path");
            return Some(PointerRecord {
                offset,
                epoch: epoch.get(),
                file_key: key.0,
                layout_version: LAYOUT_VERSION,
                fingerprint_length,
                fingerprint,
                owner: owner_of(&self.config.path),
                // the glob's lane is written by the source ([`CommitShared::stamped`])
                lane: 0,
            });
        }
        None
    }

    /// The refusal of a trusted pointer past a consumer's saved state of another epoch.
    fn trusted_mismatch(
        &self,
        record: &PointerRecord,
        pointer_path: &Path,
        mismatch: &Mismatch,
    ) -> String {
        format!(
            "the pointer file {} is at byte {} of epoch {} of the input {}, but the consumer {}'s saved state holds epoch {} (byte {}): a consumer's state always holds the epoch of the lines the pointer has passed, so that state was not built from this input (another processor's or another input's state put in place?). Nothing was read or changed. Restore the consumer's own state (from a backup taken with the pointer file); or, to start over, move that state away and remove the pointer file {} so that every line is read again",
            pointer_path.display(),
            record.offset,
            Epoch(record.epoch),
            self.config.path.display(),
            mismatch.consumer,
            mismatch.saved_epoch,
            mismatch.saved_offset,
            pointer_path.display(),
        )
    }

    /// The refusal of a lost pointer where a consumer's saved state holds another epoch.
    fn lost_mismatch(&self, pointer_path: &Path, mismatch: &Mismatch) -> String {
        format!(
            "the pointer file {} is missing, damaged or another input's, and the consumer {}'s saved state holds byte {} of epoch {}, which is not the input file {}'s identity ({}): that state was built from another input, or from this one under an older epoch, and reading the input again could apply its lines twice. Nothing was read or changed. Restore the pointer file (from a backup taken with the consumer's state); or, to start over, move the consumer's state away so that every line is read again",
            pointer_path.display(),
            mismatch.consumer,
            mismatch.saved_offset,
            mismatch.saved_epoch,
            self.config.path.display(),
            mismatch.epoch,
        )
    }

    /// Whether a pointer that decodes well is another input's, put in place of this
    /// input's. Its owner names another path (a pointer without an owner, written before
    /// the field, is this input's), it does not name the file at the path by its file key
    /// (a pointer moved with its file, a rename inside a glob, still does), and no
    /// consumer holds a position under its epoch (the evidence that lines of that epoch
    /// were this input's).
    ///
    /// Even the same leading bytes are no evidence: two copies of one content, or two
    /// inputs that start alike, fingerprint alike. Taken for this input's, another copy's
    /// pointer skips as many lines of this file as the other one had read, unread and
    /// unreported (chaos seed 1796554965093), or reports a loss that never was (a
    /// shorter file).
    ///
    /// A pointer of this input whose file was replaced keeps this path as its owner (the
    /// new file is read from its start under its own epoch, as always).
    pub(super) fn is_foreign(
        &self,
        record: &PointerRecord,
        pointer_path: &Path,
        positions: &[ConsumerPosition],
    ) -> bool {
        let path = &self.config.path;
        if record.owner == 0 || record.owner == owner_of(path) {
            return false;
        }
        let same_key = File::open(path)
            .and_then(|file| file.metadata())
            .ok()
            .and_then(|meta| key_of(&meta))
            .map(|key| key.0)
            == Some(record.file_key);
        if same_key {
            return false;
        }
        let held = positions.iter().any(|consumer| match consumer.held {
            Held::Saved(Some((epoch, _))) | Held::Written((epoch, _)) => {
                epoch.get() == record.epoch
            }
            Held::Saved(None) | Held::Nothing => false,
        });
        if held {
            return false;
        }
        warn!(source = %self.config.name, pointer = %pointer_path.display(), input = %path.display(),
            epoch = record.epoch, offset = record.offset,
            "the pointer file was written for another input (another path, another file key, and an epoch none of the consumers holds): not used. Resuming under the input file's identity where the consumers need it");
        true
    }
}
