//! Reconciling a COMMITED source's pointer, before the first open, with what the feed's
//! consumers hold: the positions they saved with their state (exact: the authority) and
//! the positions their sinks hold outputs of (a lower bound, used only when the pointer
//! cannot be trusted). Book: guarantees/consumer-side-positions.md.

use std::fs::File;
use std::path::Path;

use mongoose_core::{ConsumerPosition, CoreError, Epoch, PositionValue};
use tracing::{info, warn};

use super::FileEventSource;
use crate::identity::key_of;
use crate::pointer::{owner_of, PointerRecord, LAYOUT_VERSION};
use crate::positional::read_exact_at;

impl<T: Send + 'static> FileEventSource<T> {
    /// Reconciles the pointer with what the feed's consumers hold, before the first
    /// open.
    ///
    /// A trusted pointer past a consumer's saved position of the same epoch (or past 0,
    /// for a consumer whose state holds nothing of the feed) moves back to it: the lines
    /// between are re-read, and the consumers that have them skip them.
    ///
    /// A pointer that cannot be trusted, missing, damaged, or another input's (its
    /// owner is another path and it does not describe the file at the path: see
    /// [`FileEventSource::is_foreign`]), resumes at the consumers' `(epoch, position)`:
    /// the saved ones, and the written ones (what the consumers' sinks hold,
    /// [`mongoose_core::SourceOutput::written_positions`]) instead of the start of the
    /// file under a new epoch, which would apply every line a second time, and write
    /// every output again under keys the sink has never seen. When the positions
    /// disagree on the epoch, or do not fit the input file, the start is refused with
    /// what to do.
    pub(super) fn reconcile(
        &self,
        record: PointerRecord,
        trusted: bool,
        pointer_path: &Path,
    ) -> Result<PointerRecord, CoreError> {
        let name = &self.config.name;
        // asked once each (a glob's lane is given its positions at its first start)
        let saved = self.output.saved_positions();
        let written = self.output.written_positions();
        let foreign = trusted && self.is_foreign(&record, pointer_path, &saved, &written);
        let trusted = trusted && !foreign;
        let refuse = |message: String| CoreError::Source {
            source_name: name.clone(),
            message,
        };
        if trusted {
            if saved.is_empty() {
                return Ok(record);
            }
            let mut resume = record.offset;
            for consumer in &saved {
                let wanted = match consumer.saved {
                    None => 0,
                    Some((epoch, position)) if epoch.get() == record.epoch => position.offset,
                    // saved under another epoch (an earlier file) while the pointer
                    // is still at this epoch's start: it takes every line of this
                    // epoch anyway
                    Some(_) if record.offset == 0 => continue,
                    // the pointer is past lines of this epoch that the consumer must
                    // have processed (the commit never passes what a consumer did not
                    // process), yet its state holds another epoch: its state was not
                    // built from this input (another consumer's state folder put in
                    // place). Applying the rest on top of it would mix two inputs.
                    Some((epoch, position)) => {
                        return Err(refuse(format!(
                            "the pointer file {} is at byte {} of epoch {} of the input {}, but the consumer {}'s saved state holds epoch {epoch} (byte {}): a consumer's state always holds the epoch of the lines the pointer has passed, so that state was not built from this input (another processor's or another input's state put in place?). Nothing was read or changed. Restore the consumer's own state (from a backup taken with the pointer file); or, to start over, move that state away and remove the pointer file {} so that every line is read again",
                            pointer_path.display(),
                            record.offset,
                            Epoch(record.epoch),
                            self.config.path.display(),
                            consumer.consumer,
                            position.offset,
                            pointer_path.display(),
                        )));
                    }
                };
                if wanted < resume {
                    warn!(source = %name, consumer = %consumer.consumer, pointer = record.offset, resume_at = wanted,
                        "the pointer is past what this consumer's saved state holds (its state was deleted or restored from an older copy?): re-reading from there so nothing is skipped");
                    resume = wanted;
                }
            }
            return Ok(PointerRecord {
                offset: resume,
                ..record
            });
        }
        // not trusted: a foreign pointer is forgotten (its epoch, offset and identity
        // are another input's: kept, they would send the open looking for that file
        // among this input's rotations and report it lost)
        let record = if foreign {
            PointerRecord {
                layout_version: LAYOUT_VERSION,
                ..PointerRecord::default()
            }
        } else {
            record
        };
        // (consumer, epoch, offset, what it is) of every consumer that holds a position
        let positioned: Vec<(&ConsumerPosition, Epoch, PositionValue, &str)> = saved
            .iter()
            .filter_map(|consumer| {
                consumer
                    .saved
                    .map(|(epoch, position)| (consumer, epoch, position, "saved state"))
            })
            .chain(written.iter().filter_map(|consumer| {
                consumer
                    .saved
                    .map(|(epoch, position)| (consumer, epoch, position, "sink's outputs"))
            }))
            .collect();
        let Some((_, epoch, _, _)) = positioned.first().copied() else {
            info!(source = %name, pointer = %pointer_path.display(),
                "no usable pointer and no consumer holds a saved or written position: reading from the start under a new epoch");
            return Ok(record);
        };
        if let Some((other, other_epoch, _, other_what)) =
            positioned.iter().find(|(_, other, _, _)| *other != epoch)
        {
            let (first, _, _, first_what) = positioned[0];
            return Err(refuse(format!(
                "the pointer file {} is missing, damaged or another input's, and the consumers disagree on the epoch ({}'s {first_what} holds epoch {epoch}, {}'s {other_what} holds epoch {other_epoch}): the source cannot tell where to resume. Nothing was read or changed. Restore the pointer file, or move the state (or the sink's output and state) of the consumers whose epoch is stale away so that they start over",
                pointer_path.display(),
                first.consumer,
                other.consumer,
            )));
        }
        // a consumer whose state holds nothing needs the file from its start
        let resume = if saved.iter().any(|consumer| consumer.saved.is_none()) {
            0
        } else {
            positioned
                .iter()
                .map(|(_, _, position, _)| position.offset)
                .min()
                .unwrap_or(0)
        };
        let fits = match File::open(&self.config.path) {
            Ok(file) => {
                let size = file.metadata().map(|meta| meta.len()).unwrap_or(0);
                let mut last = [0u8; 1];
                resume == 0
                    || (size >= resume
                        && read_exact_at(&file, &mut last, resume - 1).is_ok()
                        && (last[0] == b'\n' || last[0] == b'\r'))
            }
            Err(_) => resume == 0,
        };
        if !fits {
            return Err(refuse(format!(
                "the pointer file {} is missing, damaged or another input's, and the consumers' position {resume} (epoch {epoch}) is not a line end of the input file {}: the input is not the file their state or outputs were made from. Nothing was read or changed. If it was replaced on purpose, move the consumers' state (or the sink's output and state) away so that they start over; otherwise restore the input file or the pointer file",
                pointer_path.display(),
                self.config.path.display(),
            )));
        }
        if saved.iter().any(|consumer| consumer.saved.is_some()) {
            warn!(source = %name, pointer = %pointer_path.display(), %epoch, resume_at = resume, foreign,
                "the pointer file is missing, damaged or another input's: resuming from the consumers' saved position, under their epoch (nothing applied twice, nothing skipped)");
        } else {
            warn!(source = %name, pointer = %pointer_path.display(), %epoch, resume_at = resume, foreign,
                "the pointer file is missing, damaged or another input's: resuming after what the consumers' sinks hold, under its epoch (nothing written twice, nothing skipped)");
        }
        Ok(PointerRecord {
            offset: resume,
            epoch: epoch.get(),
            file_key: 0,
            layout_version: LAYOUT_VERSION,
            fingerprint_length: 0,
            fingerprint: 0,
            owner: owner_of(&self.config.path),
        })
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
    /// shorter file). What this costs: a folder copied (not moved) to another path, its
    /// input files copied too, is read again from the start by a consumer that reports
    /// no position (a TCP or HTTP sink), as after a lost pointer.
    ///
    /// A pointer of this input whose file was replaced keeps this path as its owner (the
    /// new file is read from its start under a new epoch, as always).
    pub(super) fn is_foreign(
        &self,
        record: &PointerRecord,
        pointer_path: &Path,
        saved: &[ConsumerPosition],
        written: &[ConsumerPosition],
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
        let held = saved
            .iter()
            .chain(written)
            .filter_map(|consumer| consumer.saved.map(|(epoch, _)| epoch))
            .any(|epoch| epoch.get() == record.epoch);
        if held {
            return false;
        }
        warn!(source = %self.config.name, pointer = %pointer_path.display(), input = %path.display(),
            epoch = record.epoch, offset = record.offset,
            "the pointer file was written for another input (another path, another file key, and an epoch none of the consumers holds): not used. Resuming from what the consumers hold, or from the start under a new epoch when they hold nothing");
        true
    }
}
