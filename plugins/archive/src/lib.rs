//! The archive connector: a plugin source over [`mongoose_archive::RecordingReader`].
//!
//! **Source kind `archive`.** Reads one recording of the archive in `archive` (the
//! recording `recording`, or the newest of stream `stream`): first what is recorded
//! from the committed position (replay), then what the archiver appends (live), from
//! the same files, so the hand-over has no gap and no duplicate. A message is published
//! at position `(lane 0, stream position after it)` in the epoch of its recording (made of
//! the recording's identity: its id, stream, session, start position and start time, so
//! the recording 1 of an archive made again at the same path is another epoch). After
//! the engine says the messages were processed, the committer writes `<recording id>
//! <position> <epoch> <identity>` to the `pointer` file (a temporary file, fsync'd,
//! renamed); a restart (or a `kill -9`) resumes after the last committed message. PAUSE
//! keeps the message (copied once, only then) and stops polling: the archive is the
//! buffer. A pointer of another recording (the stream's recording was replaced, or the
//! archive was made again and its recording has the pointer's id but not its identity)
//! is logged as a WARN and the recording is read from its start in its own epoch; a
//! recording that no longer holds the committed position (truncated) is logged as a
//! WARN and read again from its start in a new epoch, which the pointer keeps. A gap
//! the archive recorded (UDP data the publication had lost) is a loss: logged as a
//! WARN, reported to the feed (`report_loss`: the run is not lossless, the status counts
//! it) and its position committed past. A run that resumes after such gaps reports them
//! again, as the recording's known losses: the data it delivers has those holes.
//!
//! Settings: `archive` and `pointer` (required), `recording` or `stream` (one of
//! them), `batch` (messages per duty cycle, default 1024).
//!
//! ```toml
//! [[feeds]]
//! name = "ticks"
//! source = "archive"
//! settings = { archive = "/var/lib/mongoose/archive", stream = 7, pointer = "/var/lib/mongoose/ticks.pointer" }
//! ```

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use mongoose_archive::{
    ArchiveError, RecordingDescriptor, RecordingReader, RecordingSelector, ReplayEvent,
};
use mongoose_core::{
    AnyCommitter, CoreError, Epoch, EventSource, PositionValue, SourceCommitter, SourceOutput,
    SourceStart, SourceState, WorkDone,
};
use mongoose_durable::header::{Header, MAGIC};
use mongoose_plugin::settings::CreateContext;
use mongoose_plugin::PluginOutput;

/// Messages one duty cycle publishes at most, unless `batch` says otherwise.
const DEFAULT_BATCH: u64 = 1024;

fn core_error(context: String, error: ArchiveError) -> CoreError {
    CoreError::io(context, std::io::Error::other(error.to_string()))
}

/// What a pointer file holds: the recording, the committed position, and the epoch of
/// the positions (the recording id, unless the recording was found truncated below a
/// committed position: then a new epoch, kept here so a restart keeps it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pointer {
    recording: u64,
    position: u64,
    epoch: u64,
    /// The recording's identity ([`recording_identity`]); `None` in a pointer an older
    /// version wrote.
    identity: Option<u64>,
}

/// A recording's identity: a hash (FNV-1a, stable across processes and builds) of what
/// the catalog says of it when it starts. An archive made again at the same path numbers
/// its recordings from 1 again, but they start at another time, in another session.
fn recording_identity(recording: &RecordingDescriptor) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &byte in bytes {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(&recording.id.to_le_bytes());
    eat(&recording.stream.to_le_bytes());
    eat(&recording.session.to_le_bytes());
    eat(&recording.start_position.to_le_bytes());
    eat(&recording.started_unix_ms.to_le_bytes());
    eat(recording.source.as_bytes());
    hash
}

/// The epoch of a recording read from its start: made of its identity, never 0, below
/// [`REREAD_EPOCH`].
fn identity_epoch(identity: u64) -> Epoch {
    Epoch((identity >> 2).max(1))
}

/// The bit that marks the epoch of a recording read again from its start after it was
/// found truncated (recording ids never reach it).
const REREAD_EPOCH: u64 = 1 << 63;

/// The pointer file's format name in its durable header.
const POINTER_FORMAT: &str = "mongoose-archive-pointer";

fn pointer_header() -> Header {
    Header::new(POINTER_FORMAT, 1, Vec::new())
}

/// The pointer file's bytes for `line`: the durable header, then the line as the one
/// checksummed record (a changed byte anywhere fails a check).
fn pointer_bytes(line: &str) -> Result<Vec<u8>, mongoose_durable::DurableError> {
    mongoose_durable::log::encode(&pointer_header(), [line.as_bytes()])
}

/// The pointer file's content, if any; `Ok(Err(text))` when its content is damaged.
///
/// The file is a record log of the durable layer holding one record, the line
/// `<recording> <position> <epoch> <identity>`. A file without the durable header is
/// the bare line an earlier release wrote (no checksum), read as it is; the next
/// commit writes the new layout.
fn load_pointer(path: &Path) -> Result<Result<Option<Pointer>, String>, CoreError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Ok(None)),
        Err(error) => {
            return Err(CoreError::io(
                format!("cannot read the archive pointer {}", path.display()),
                error,
            ))
        }
    };
    if !bytes.starts_with(&MAGIC) {
        return Ok(match String::from_utf8(bytes) {
            Ok(text) => parse_pointer(path, &text),
            Err(_) => Err(format!(
                "the archive pointer {} is damaged (not text)",
                path.display()
            )),
        });
    }
    let record = match mongoose_durable::log::read(path, &pointer_header()) {
        Ok(recovery) if recovery.torn_tail.is_none() && recovery.records.len() == 1 => {
            recovery.records.into_iter().next().unwrap_or_default()
        }
        Ok(recovery) => {
            return Ok(Err(format!(
                "the archive pointer {} is damaged ({} records{}; it holds one)",
                path.display(),
                recovery.records.len(),
                if recovery.torn_tail.is_some() {
                    " and a cut one"
                } else {
                    ""
                }
            )))
        }
        Err(mongoose_durable::DurableError::Io { source, .. }) => {
            return Err(CoreError::io(
                format!("cannot read the archive pointer {}", path.display()),
                source,
            ))
        }
        Err(damage) => return Ok(Err(format!("the archive pointer is damaged: {damage}"))),
    };
    Ok(match String::from_utf8(record) {
        Ok(text) => parse_pointer(path, &text),
        Err(_) => Err(format!(
            "the archive pointer {} is damaged (not text)",
            path.display()
        )),
    })
}

/// The pointer's line: `<recording> <position>[ <epoch>[ <identity>]]` and its line end.
fn parse_pointer(path: &Path, text: &str) -> Result<Option<Pointer>, String> {
    // the committer writes one whole line: without its line end it was cut short (a torn
    // write, or damage), and what is left of its numbers cannot be trusted
    let numbers: Result<Vec<u64>, _> = text.split_whitespace().map(str::parse::<u64>).collect();
    if !text.ends_with('\n') {
        return Err(format!(
            "the archive pointer {} is cut short ('{}': no line end)",
            path.display(),
            text.trim()
        ));
    }
    match numbers.as_deref() {
        Ok([recording, position]) => Ok(Some(Pointer {
            recording: *recording,
            position: *position,
            epoch: *recording,
            identity: None,
        })),
        Ok([recording, position, epoch]) => Ok(Some(Pointer {
            recording: *recording,
            position: *position,
            epoch: *epoch,
            identity: None,
        })),
        Ok([recording, position, epoch, identity]) => Ok(Some(Pointer {
            recording: *recording,
            position: *position,
            epoch: *epoch,
            identity: Some(*identity),
        })),
        _ => Err(format!(
            "the archive pointer {} is damaged ('{}')",
            path.display(),
            text.trim()
        )),
    }
}

/// Replays a recording from its committed position, then follows it live.
#[derive(Debug)]
pub struct ArchiveSource {
    output: PluginOutput,
    archive: PathBuf,
    selector: RecordingSelector,
    pointer: PathBuf,
    batch: u64,
    reader: Option<RecordingReader>,
    /// A message the feed could not take yet (PAUSE), with its position.
    held: Option<(Vec<u8>, u64)>,
    /// The bytes of the message being offered.
    scratch: Vec<u8>,
    caught_up: bool,
    waiting_reported: bool,
    /// The recording this start's committer commits, set when it is opened (at start,
    /// or at a later cycle while the archive has no such recording yet).
    opened: Arc<OnceLock<OpenedRecording>>,
}

/// The recording a start opened: what its committer writes into the pointer.
#[derive(Debug, Clone, Copy)]
struct OpenedRecording {
    recording: u64,
    identity: u64,
    epoch: Epoch,
}

impl ArchiveSource {
    /// A source from its settings (see the crate docs).
    pub fn new(create: &CreateContext<'_>, output: PluginOutput) -> Result<ArchiveSource, String> {
        let settings = create.flat()?;
        settings.only(&["archive", "recording", "stream", "pointer", "batch"])?;
        let selector = match (settings.u64("recording")?, settings.u64("stream")?) {
            (Some(id), None) => RecordingSelector::Id(id),
            (None, Some(stream)) => RecordingSelector::LatestForStream(
                u32::try_from(stream).map_err(|_| format!("settings: stream {stream} is not a stream id"))?,
            ),
            _ => return Err("settings: give one of 'recording' (an id) or 'stream' (the newest recording of a stream id)".to_owned()),
        };
        Ok(ArchiveSource {
            output,
            archive: settings.path("archive")?,
            selector,
            pointer: settings.path("pointer")?,
            batch: settings.u64("batch")?.unwrap_or(DEFAULT_BATCH).max(1),
            reader: None,
            held: None,
            scratch: Vec::new(),
            caught_up: false,
            waiting_reported: false,
            opened: Arc::default(),
        })
    }

    /// Opens the recording at its committed position; `None` while the archive has no
    /// such recording yet.
    fn open(&mut self) -> Result<Option<RecordingReader>, CoreError> {
        let opening = format!("cannot open the recording in {}", self.archive.display());
        let reader = match RecordingReader::open(&self.archive, self.selector, None) {
            Ok(reader) => reader,
            Err(ArchiveError::NoSuchRecording(_) | ArchiveError::NoRecordingForStream(_)) => {
                if !self.waiting_reported {
                    self.waiting_reported = true;
                    self.output.report_state(
                        SourceState::Starting,
                        Some("waiting for the archive to record the stream"),
                    );
                }
                return Ok(None);
            }
            Err(error) => return Err(core_error(opening, error)),
        };
        let id = reader.recording_id();
        let identity = recording_identity(reader.descriptor());
        let pointer = match load_pointer(&self.pointer)? {
            Ok(pointer) => pointer,
            Err(error) => {
                // keep the damaged pointer for inspection: reading resumes at the
                // consumers' saved positions, or at the start when they hold none
                // (duplicates, never a loss)
                let mut kept = self.pointer.as_os_str().to_owned();
                kept.push(".damaged");
                let kept = PathBuf::from(kept);
                std::fs::rename(&self.pointer, &kept)
                    .and_then(|()| {
                        let folder = kept
                            .parent()
                            .filter(|folder| !folder.as_os_str().is_empty());
                        mongoose_durable::disk::sync_folder(folder.unwrap_or(Path::new(".")))
                    })
                    .map_err(|rename| {
                        CoreError::io(
                            format!("cannot move the damaged pointer {}", self.pointer.display()),
                            rename,
                        )
                    })?;
                self.output.warn(&format!(
                    "archive {}: {error}; it is kept as {} and reading resumes at the consumers' saved positions (at the recording's start if they hold none: duplicates, no loss)",
                    self.archive.display(),
                    kept.display()
                ));
                None
            }
        };
        let (reader, epoch) = match pointer {
            Some(pointer)
                if pointer.recording == id
                    && pointer.identity.is_none_or(|known| known == identity) =>
            {
                let resume = self.reconcile(
                    Epoch(pointer.epoch),
                    Some(pointer.position),
                    reader.descriptor().start_position,
                )?;
                match RecordingReader::open(&self.archive, RecordingSelector::Id(id), Some(resume))
                {
                    Ok(resumed) => {
                        // the losses of the recording before the committed position
                        // are known losses of the data this feed delivers
                        for &(from, to) in &resumed.descriptor().gaps {
                            if to <= resume {
                                self.output.report_loss(
                                    &format!(
                                        "archive {}: recording {id} lost stream bytes [{from}, {to}) (a gap it recorded, before the committed position {resume})",
                                        self.archive.display(),
                                    ),
                                    Some(to - from),
                                );
                            }
                        }
                        (resumed, Epoch(pointer.epoch))
                    }
                    Err(ArchiveError::NotABoundary { .. }) => {
                        // the recording no longer holds the committed position
                        let epoch = Epoch(identity_epoch(identity).0 | REREAD_EPOCH);
                        self.output.warn(&format!(
                            "archive {}: recording {id} no longer holds the committed position {} (it was truncated): reading it again from its start in a new epoch ({})",
                            self.archive.display(),
                            pointer.position,
                            epoch.0
                        ));
                        (reader, epoch)
                    }
                    Err(error) => return Err(core_error(opening, error)),
                }
            }
            Some(pointer) if pointer.recording == id => {
                self.output.warn(&format!(
                    "archive {}: the pointer {} holds recording {id} at position {}, but it is not the recording {id} the archive holds now (identity {:016x}, now {identity:016x}: the archive was made again): reading recording {id} from its start in a new epoch",
                    self.archive.display(),
                    self.pointer.display(),
                    pointer.position,
                    pointer.identity.unwrap_or_default(),
                ));
                (reader, identity_epoch(identity))
            }
            Some(pointer) => {
                self.output.warn(&format!(
                    "archive {}: the pointer {} holds recording {}, but the recording read now is {id} (the stream's recording was replaced): reading recording {id} from its start in its own epoch",
                    self.archive.display(),
                    self.pointer.display(),
                    pointer.recording
                ));
                (reader, identity_epoch(identity))
            }
            None => {
                let epoch = identity_epoch(identity);
                let start = reader.descriptor().start_position;
                let resume = self.reconcile(epoch, None, start)?;
                if resume == start {
                    (reader, epoch)
                } else {
                    let resumed = RecordingReader::open(
                        &self.archive,
                        RecordingSelector::Id(id),
                        Some(resume),
                    )
                    .map_err(|error| core_error(opening.clone(), error))?;
                    for &(from, to) in &resumed.descriptor().gaps {
                        if to <= resume {
                            self.output.report_loss(
                                &format!(
                                    "archive {}: recording {id} lost stream bytes [{from}, {to}) (a gap it recorded, before the saved position {resume})",
                                    self.archive.display(),
                                ),
                                Some(to - from),
                            );
                        }
                    }
                    (resumed, epoch)
                }
            }
        };
        let output = &self.output;
        output.set_epoch(epoch);
        // this start's committer (registered at start) commits into this recording from
        // now on; opened once per start
        let _ = self.opened.set(OpenedRecording {
            recording: id,
            identity,
            epoch,
        });
        output.report_state(SourceState::Behind, Some("replaying the recording"));
        Ok(Some(reader))
    }
}

impl ArchiveSource {
    /// Reconciles the committed position (`None`: no pointer) with what the feed's
    /// consumers saved with their state (the saved position is the authority, as for the
    /// file source): a committed position past a consumer's saved position of `epoch`
    /// moves back to it, and to the recording's `start` for a consumer whose state holds
    /// nothing of the feed. Without a pointer, reading resumes at the consumers' saved
    /// positions of `epoch` (when every consumer has one) instead of the start, which
    /// would give every message again.
    fn reconcile(
        &self,
        epoch: Epoch,
        committed: Option<u64>,
        start: u64,
    ) -> Result<u64, CoreError> {
        use mongoose_core::resume::{resume_knowing, Trust};
        let positions = self.output.consumer_positions();
        let trust = match committed {
            Some(offset) => Trust::Trusted { epoch, offset },
            None => Trust::Lost,
        };
        // every epoch of this connector is a recording's identity (or a re-read of it):
        // another epoch is another recording, whose state takes this one whole
        let at = resume_knowing(trust, epoch, &positions, |_| true).map_err(|mismatch| CoreError::Source {
            source_name: self.output.feed().to_owned(),
            message: format!(
                "archive {}: the consumer {}'s saved state holds position {} of epoch {}, but the recording is read under epoch {} ({}): that state was not built from this recording, and reading it could apply its messages twice. Nothing was read or changed. Restore the pointer and the consumer's state together from a backup; or, to start over, move the consumer's state away and remove the pointer {}",
                self.archive.display(),
                mismatch.consumer,
                mismatch.saved_offset,
                mismatch.saved_epoch,
                mismatch.epoch,
                if committed.is_some() { "the pointer's" } else { "the recording's identity" },
                self.pointer.display()
            ),
        })?;
        for note in &at.notes {
            self.output
                .warn(&format!("archive {}: {note}", self.archive.display()));
        }
        let resume = at.offset.max(start);
        if let (Some(by), Some(committed)) = (&at.decided_by, committed) {
            if resume < committed {
                self.output.warn(&format!(
                    "archive {}: the pointer {} committed position {committed}, but {by} is before it (restored from an older copy, or cut?): reading again from {resume} so nothing is skipped",
                    self.archive.display(),
                    self.pointer.display(),
                ));
            }
        } else if committed.is_none() {
            self.output.warn(&format!(
                "archive {}: no usable pointer at {}; resuming at {resume}, the lowest position a consumer needs ({}): repeats carry the keys of their first delivery, nothing is skipped",
                self.archive.display(),
                self.pointer.display(),
                at.decided_by.as_deref().unwrap_or("no consumer holds any"),
            ));
        }
        Ok(resume)
    }
}

impl EventSource for ArchiveSource {
    fn name(&self) -> &str {
        self.output.feed()
    }

    fn start(&mut self) -> Result<SourceStart, CoreError> {
        self.opened = Arc::default();
        self.reader = self.open()?;
        Ok(SourceStart {
            // the recording's epoch when it opened now; else set when it opens
            epoch: self.opened.get().map_or(Epoch::NONE, |opened| opened.epoch),
            pause_by_default: true,
            committer: Some(AnyCommitter::new(PointerCommitter {
                path: self.pointer.clone(),
                opened: Arc::clone(&self.opened),
                pending: None,
            })),
        })
    }

    fn do_work(&mut self) -> Result<WorkDone, CoreError> {
        if self.reader.is_none() {
            self.reader = self.open()?;
        }
        let mut done = 0u64;
        if let Some((bytes, position)) = self.held.take() {
            if !self
                .output
                .try_publish(&bytes[..], PositionValue::at(position))
                .is_published()
            {
                self.held = Some((bytes, position));
                return Ok(WorkDone(0));
            }
            done += 1;
        }
        let Some(reader) = self.reader.as_mut() else {
            return Ok(WorkDone(0));
        };
        let mut paused = false;
        let mut drained = false;
        while done < self.batch {
            let scratch = &mut self.scratch;
            let mut event: Option<(u64, Option<u64>)> = None;
            let polled = reader
                .poll(1, |replayed| match replayed {
                    ReplayEvent::Message { position, payload } => {
                        scratch.clear();
                        scratch.extend_from_slice(payload);
                        event = Some((position, None));
                    }
                    ReplayEvent::Gap { from, to } => event = Some((to, Some(from))),
                })
                .map_err(|error| core_error("cannot read the recording".to_owned(), error))?;
            let Some((position, gap)) = event.filter(|_| polled > 0) else {
                drained = true;
                break;
            };
            if let Some(from) = gap {
                self.output.report_loss(
                    &format!(
                        "archive {}: recording {} lost stream bytes [{from}, {position}) (the publication no longer had them): a loss, committed past",
                        self.archive.display(),
                        reader.recording_id()
                    ),
                    Some(position - from),
                );
                self.output
                    .filtered(PositionValue::at(position), "a gap in the recording");
                continue;
            }
            if !self
                .output
                .try_publish(&self.scratch[..], PositionValue::at(position))
                .is_published()
            {
                // keep the message: offered again next cycle
                self.held = Some((std::mem::take(&mut self.scratch), position));
                paused = true;
                break;
            }
            done += 1;
        }
        let caught_up = drained && !paused;
        if caught_up != self.caught_up {
            self.caught_up = caught_up;
            let (state, detail) = if caught_up {
                (SourceState::CaughtUp, None)
            } else {
                (SourceState::Behind, Some("replaying the recording"))
            };
            self.output.report_state(state, detail);
        }
        Ok(WorkDone(usize::try_from(done).unwrap_or(usize::MAX)))
    }

    fn stop(&mut self) -> Result<(), CoreError> {
        self.reader = None;
        Ok(())
    }
}

/// Writes `<recording> <position> <epoch> <identity>` after the messages before it were
/// processed.
#[derive(Debug)]
struct PointerCommitter {
    path: PathBuf,
    /// Set once the recording opened; nothing is published (nor acknowledged) before.
    opened: Arc<OnceLock<OpenedRecording>>,
    pending: Option<u64>,
}

impl SourceCommitter<PositionValue> for PointerCommitter {
    fn acknowledged(&mut self, _sequence: u64, epoch: Epoch, position: PositionValue) {
        if self
            .opened
            .get()
            .is_some_and(|opened| opened.epoch == epoch)
        {
            self.pending = Some(position.offset);
        }
    }

    fn commit(&mut self) -> Result<(), CoreError> {
        let Some(position) = self.pending else {
            return Ok(());
        };
        let Some(&OpenedRecording {
            recording,
            identity,
            epoch,
        }) = self.opened.get()
        else {
            return Ok(()); // nothing is pending before the recording opened
        };
        // the durable layer's replace (temp, fsync, rename, fsync of the folder) of a
        // checksummed one-record log
        let line = format!("{recording} {position} {} {identity}\n", epoch.0);
        pointer_bytes(&line)
            .and_then(|bytes| mongoose_durable::replace::replace(&self.path, &bytes))
            .map_err(|error| {
                CoreError::io(
                    format!("cannot write the archive pointer {}", self.path.display()),
                    error.into(),
                )
            })?;
        self.pending = None;
        Ok(())
    }

    fn commits_after_stop(&self) -> bool {
        true
    }
}

mongoose_plugin::export_plugin! {
    name: "archive",
    version: env!("CARGO_PKG_VERSION"),
    sources: {
        "archive" => ArchiveSource::new,
    },
    sinks: {},
}

#[cfg(test)]
mod tests {
    use super::*;

    // chaos mixed-consumers seed 38: an archive pointer cut short (a torn write, or
    // damage) kept its first numbers, read as an older layout's two- or three-number
    // pointer with a truncated epoch; a guarded ledger took the re-read messages for
    // another epoch's and applied 1,552 of them twice
    #[test]
    fn a_cut_archive_pointer_is_damaged_not_read_as_an_older_layout() {
        let dir = std::env::temp_dir().join(format!("archive-pointer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a folder");
        let path = dir.join("lines.pointer");
        let whole = "7 123456 7340172912345678 99887766\n";
        std::fs::write(&path, whole).expect("a pointer");
        let read = load_pointer(&path).expect("readable").expect("whole");
        assert_eq!(read.map(|pointer| pointer.epoch), Some(7340172912345678));
        for keep in [3, 10, 18, 25, whole.len() - 1] {
            std::fs::write(&path, &whole[..keep]).expect("a cut pointer");
            let read = load_pointer(&path).expect("readable");
            assert!(read.is_err(), "cut to {keep} bytes: {read:?}");
        }
        // an older layout's pointer, whole, is still read
        std::fs::write(&path, "7 123456\n").expect("an older pointer");
        let read = load_pointer(&path).expect("readable").expect("whole");
        assert_eq!(read.map(|pointer| pointer.position), Some(123456));
        let _ = std::fs::remove_dir_all(&dir);
    }

    // issue 38.2: the pointer was one bare text line, so a changed digit of its position
    // was trusted (a recording read from further on: the messages between never read).
    // It is now a checksummed record of the durable layer.
    #[test]
    fn a_changed_byte_of_the_archive_pointer_is_damage_not_another_position() {
        let dir = tempfile::tempdir().expect("a folder");
        let path = dir.path().join("lines.pointer");
        let line = "7 123456 7340172912345678 99887766\n";
        let bytes = pointer_bytes(line).expect("encoded");
        std::fs::write(&path, &bytes).expect("a pointer");
        let read = load_pointer(&path).expect("readable").expect("whole");
        assert_eq!(read.map(|pointer| pointer.position), Some(123456));
        let digit = bytes
            .windows(6)
            .position(|window| window == b"123456")
            .expect("the position");
        for at in [0, 5, digit, digit + 5, bytes.len() - 1] {
            let mut changed = bytes.clone();
            changed[at] ^= if at == digit { 0x01 } else { 0x10 };
            std::fs::write(&path, &changed).expect("a changed pointer");
            let read = load_pointer(&path).expect("readable");
            assert!(
                !matches!(read, Ok(Some(pointer)) if pointer.position != 123456),
                "byte {at} changed: {read:?}"
            );
            if at == digit {
                assert!(read.is_err(), "the changed digit is damage: {read:?}");
            }
        }
        // a cut record is damage too
        std::fs::write(&path, &bytes[..bytes.len() - 3]).expect("a cut pointer");
        assert!(load_pointer(&path).expect("readable").is_err());
    }
}
