//! The recording catalog: an append-only file of checksummed events.
//!
//! `<archive>/catalog` is a durable-layer record log ([`mongoose_durable::log`], header
//! `mongoose-archive-catalog` v2), one postcard-encoded `CatalogEvent` per record.
//! Each append is synced before the archiver acts on it. The archiver cuts a torn last
//! record at start (a crash in the middle of an append); readers ignore one. A bad
//! record with a whole record after it is damage: refused, naming the file and the
//! byte, and never cut.
//!
//! A catalog of the earlier layout (a 16-byte header, magic `MGARCAT1`, then records
//! `[len: u32][crc32 of the body: u32][body]`) is read by the same rules, and rewritten
//! as a durable log (atomically) when an archiver opens it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use mongoose_durable::disk::RealDisk;
use mongoose_durable::header::Header;
use mongoose_durable::log::RecordLog;
use mongoose_durable::DurableError;

use crate::error::{ArchiveError, Result};

/// The catalog's format name in its durable-layer header.
const FORMAT: &str = "mongoose-archive-catalog";
/// The earlier layout's magic.
const MAGIC: &[u8; 8] = b"MGARCAT1";
/// The earlier layout's version.
const VERSION: u32 = 1;
const HEADER_LEN: u64 = 16;
/// The catalog's file name in the archive directory.
pub(crate) const CATALOG_FILE: &str = "catalog";

/// Why a recording stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    /// The publication was closed and everything up to its end is recorded.
    PublicationEnded,
    /// The archiver was stopped (a clean stop).
    ArchiverStopped,
    /// Nothing was heard from the publication for the configured timeout.
    PublicationTimedOut,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopReason::PublicationEnded => "publication ended",
            StopReason::ArchiverStopped => "archiver stopped",
            StopReason::PublicationTimedOut => "publication timed out",
        })
    }
}

/// One catalog event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum CatalogEvent {
    Started {
        id: u64,
        stream: u32,
        session: u32,
        start_position: u64,
        source: String,
        started_unix_ms: u64,
    },
    Stopped {
        id: u64,
        stop_position: u64,
        reason: StopReason,
    },
    Gap {
        id: u64,
        from: u64,
        to: u64,
    },
    TornTailCut {
        id: u64,
        position: u64,
        bytes: u64,
    },
}

/// What the catalog knows of a recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordingDescriptor {
    /// The recording id (also the epoch of the positions read from it).
    pub id: u64,
    /// The stream id.
    pub stream: u32,
    /// The publication's session id.
    pub session: u32,
    /// The stream position of the first record.
    pub start_position: u64,
    /// The position after the last record, once the recording stopped.
    pub stop_position: Option<u64>,
    /// Why it stopped.
    pub stop_reason: Option<StopReason>,
    /// Where the data came from (`udp 127.0.0.1:4000`, `ipc /dev/shm/1-7.ipc`).
    pub source: String,
    /// When the recording started (milliseconds since the Unix epoch).
    pub started_unix_ms: u64,
    /// Gaps recorded: stream ranges the publication could no longer send.
    pub gaps: Vec<(u64, u64)>,
    /// Torn tails cut at a restart of the archiver: (position, bytes).
    pub torn_tails_cut: Vec<(u64, u64)>,
}

impl RecordingDescriptor {
    /// The stream bytes lost in gaps.
    pub fn lost_bytes(&self) -> u64 {
        self.gaps.iter().map(|(from, to)| to - from).sum()
    }
}

/// The catalog's state.
#[derive(Debug, Default)]
pub(crate) struct CatalogState {
    pub(crate) recordings: BTreeMap<u64, RecordingDescriptor>,
}

impl CatalogState {
    fn apply(&mut self, event: CatalogEvent) {
        match event {
            CatalogEvent::Started {
                id,
                stream,
                session,
                start_position,
                source,
                started_unix_ms,
            } => {
                self.recordings.insert(
                    id,
                    RecordingDescriptor {
                        id,
                        stream,
                        session,
                        start_position,
                        stop_position: None,
                        stop_reason: None,
                        source,
                        started_unix_ms,
                        gaps: Vec::new(),
                        torn_tails_cut: Vec::new(),
                    },
                );
            }
            CatalogEvent::Stopped {
                id,
                stop_position,
                reason,
            } => {
                if let Some(recording) = self.recordings.get_mut(&id) {
                    recording.stop_position = Some(stop_position);
                    recording.stop_reason = Some(reason);
                }
            }
            CatalogEvent::Gap { id, from, to } => {
                if let Some(recording) = self.recordings.get_mut(&id) {
                    recording.gaps.push((from, to));
                }
            }
            CatalogEvent::TornTailCut {
                id,
                position,
                bytes,
            } => {
                if let Some(recording) = self.recordings.get_mut(&id) {
                    recording.torn_tails_cut.push((position, bytes));
                }
            }
        }
    }

    /// The next recording id (ids start at 1: epoch 0 means "no epoch").
    pub(crate) fn next_id(&self) -> u64 {
        self.recordings.keys().next_back().map_or(1, |id| id + 1)
    }

    /// The newest recording of a stream.
    pub(crate) fn latest_for_stream(&self, stream: u32) -> Option<&RecordingDescriptor> {
        self.recordings
            .values()
            .rev()
            .find(|recording| recording.stream == stream)
    }
}

/// The catalog's header (a durable-layer log: any archive may read it).
fn header() -> Header {
    Header::new(FORMAT, 2, Vec::new())
}

/// The catalog's events as written on disk.
struct Events {
    state: CatalogState,
    /// The records, undecoded (a catalog of the earlier layout is rewritten with them).
    records: Vec<Vec<u8>>,
    /// A torn tail (never synced, never acted on): where and how many bytes.
    torn_tail: Option<(u64, u64)>,
    /// Whether the file is of the earlier layout (`MGARCAT1`).
    earlier: bool,
}

/// Reads the catalog's events: a torn tail is reported, damage in the middle (a bad
/// record with a whole record after it) refused, never skipped.
fn read_events(path: &Path) -> Result<Option<Events>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(ArchiveError::io("read the catalog", path)(error)),
    };
    let (records, torn_tail, earlier) = if bytes.starts_with(&mongoose_durable::header::MAGIC) {
        let read = mongoose_durable::log::read(path, &header())?;
        let torn = read.torn_tail.map(|torn| (torn.offset, torn.bytes_cut));
        (read.records, torn, false)
    } else if bytes.len() < HEADER_LEN as usize {
        // a catalog of the earlier layout whose header was being written when the
        // archiver died: nothing was ever appended to it
        return Ok(None);
    } else if bytes.starts_with(MAGIC) {
        if u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) != VERSION {
            return Err(ArchiveError::BadFormat {
                path: path.to_path_buf(),
                what: "mongoose-archive catalog",
                detail: "unknown version".to_string(),
            });
        }
        let (records, torn) = read_earlier(path, &bytes)?;
        (records, torn, true)
    } else {
        return Err(ArchiveError::BadFormat {
            path: path.to_path_buf(),
            what: "mongoose-archive catalog",
            detail: format!("neither a {FORMAT} header nor the earlier MGARCAT1 magic"),
        });
    };
    let mut state = CatalogState::default();
    for (number, record) in records.iter().enumerate() {
        // a whole record that passed its checksum and does not decode is no torn tail
        let event = postcard::from_bytes::<CatalogEvent>(record).map_err(|error| {
            ArchiveError::BadFormat {
                path: path.to_path_buf(),
                what: "mongoose-archive catalog",
                detail: format!(
                    "record {number} passes its checksum but does not decode ({error}): refusing to skip it"
                ),
            }
        })?;
        state.apply(event);
    }
    Ok(Some(Events {
        state,
        records,
        torn_tail,
        earlier,
    }))
}

/// A catalog's records, and its torn tail (where, how many bytes).
type Frames = (Vec<Vec<u8>>, Option<(u64, u64)>);

/// The records of a catalog of the earlier layout (`MGARCAT1`, then `length u32 |
/// crc32 of the body u32 | body`) and its torn tail: a bad record with a whole record
/// anywhere after it is damage, refused.
fn read_earlier(path: &Path, bytes: &[u8]) -> Result<Frames> {
    let mut records = Vec::new();
    let mut at = HEADER_LEN as usize;
    while at < bytes.len() {
        match earlier_frame(bytes, at) {
            Ok(end) => {
                records.push(bytes[at + 8..end].to_vec());
                at = end;
            }
            Err(reason) => {
                if (at + 1..bytes.len()).any(|later| earlier_frame(bytes, later).is_ok()) {
                    return Err(DurableError::DamagedRecord {
                        path: path.to_path_buf(),
                        offset: at as u64,
                        reason,
                    }
                    .into());
                }
                return Ok((records, Some((at as u64, (bytes.len() - at) as u64))));
            }
        }
    }
    Ok((records, None))
}

/// The end of the earlier layout's record at `at`, or what is wrong with it.
fn earlier_frame(bytes: &[u8], at: usize) -> std::result::Result<usize, &'static str> {
    let Some(head) = bytes.get(at..at + 8) else {
        return Err("a record header cut short");
    };
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len == 0 {
        // never written (an event holds at least its tag): zeros a power loss left
        return Err("an empty record");
    }
    let Some(body) = bytes.get(at + 8..at + 8 + len) else {
        return Err("a record longer than the rest of the file");
    };
    if crc32fast::hash(body) != u32::from_le_bytes([head[4], head[5], head[6], head[7]]) {
        return Err("a checksum that does not match");
    }
    Ok(at + 8 + len)
}

/// Reads the catalog of an archive (a reader's view: a torn last record is ignored,
/// damage in the middle refused).
pub(crate) fn read(archive: &Path) -> Result<CatalogState> {
    Ok(read_events(&archive.join(CATALOG_FILE))?
        .map_or_else(CatalogState::default, |events| events.state))
}

/// The archiver's catalog: loaded at start (a torn tail cut), appended to.
#[derive(Debug)]
pub(crate) struct Catalog {
    log: RecordLog,
    pub(crate) state: CatalogState,
}

impl Catalog {
    /// Opens (or creates) the catalog of an archive, cutting a torn tail and refusing
    /// damage in the middle; a catalog of the earlier layout is rewritten as a durable
    /// log (atomically) with the same events.
    pub(crate) fn open(archive: &Path) -> Result<Catalog> {
        let path = archive.join(CATALOG_FILE);
        mongoose_durable::replace::remove_leftover(&path)?;
        let events = read_events(&path)?;
        let (log, state) = match events {
            None => (
                RecordLog::create_on(&mut RealDisk, &path, &header())?,
                CatalogState::default(),
            ),
            Some(events) if events.earlier => {
                if let Some((offset, bytes)) = events.torn_tail {
                    tracing::warn!(catalog = %path.display(), offset, torn_bytes = bytes,
                        "cutting the torn tail of the catalog (the last append before a crash, never synced)");
                }
                let bytes = mongoose_durable::log::encode(
                    &header(),
                    events.records.iter().map(Vec::as_slice),
                )?;
                mongoose_durable::replace::replace(&path, &bytes)?;
                tracing::info!(catalog = %path.display(), records = events.records.len(),
                    "rewrote a catalog of the earlier layout as a durable log");
                let (log, _) = RecordLog::open_or_create(&path, &header())?;
                (log, events.state)
            }
            Some(events) => {
                // the durable layer cuts the torn tail and logs it (WARN)
                let (log, recovery) = RecordLog::open_or_create(&path, &header())?;
                debug_assert_eq!(recovery.records.len(), events.records.len());
                (log, events.state)
            }
        };
        Ok(Catalog { log, state })
    }

    /// Appends an event, synced, and applies it.
    pub(crate) fn append(&mut self, event: CatalogEvent) -> Result<()> {
        let body = postcard::to_allocvec(&event).expect("a catalog event encodes");
        self.log.append(&body)?;
        self.log.sync()?;
        self.state.apply(event);
        Ok(())
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A catalog of the earlier layout holding `events`, then `tail`.
    fn earlier_catalog(events: &[CatalogEvent], tail: &[u8]) -> Vec<u8> {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        bytes.extend_from_slice(&[0; 4]);
        for event in events {
            let body = postcard::to_allocvec(event).expect("encode");
            bytes.extend_from_slice(&(body.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
            bytes.extend_from_slice(&body);
        }
        bytes.extend_from_slice(tail);
        bytes
    }

    fn events() -> Vec<CatalogEvent> {
        vec![
            CatalogEvent::Started {
                id: 1,
                stream: 5,
                session: 9,
                start_position: 0,
                source: "ipc ring".into(),
                started_unix_ms: 7,
            },
            CatalogEvent::Stopped {
                id: 1,
                stop_position: 1040,
                reason: StopReason::PublicationEnded,
            },
        ]
    }

    #[test]
    fn a_catalog_of_the_earlier_layout_is_read_and_rewritten_as_a_durable_log() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join(CATALOG_FILE);
        // a torn third record: cut, the two before it kept
        std::fs::write(&path, earlier_catalog(&events(), &[40, 0, 0, 0, 1, 2, 3])).expect("write");
        let read_state = read(dir.path()).expect("a reader reads the earlier layout");
        assert_eq!(read_state.recordings[&1].stop_position, Some(1040));
        let mut catalog = Catalog::open(dir.path()).expect("open");
        assert_eq!(catalog.state.recordings[&1].stop_position, Some(1040));
        assert!(std::fs::read(&path)
            .expect("read")
            .starts_with(&mongoose_durable::header::MAGIC));
        catalog
            .append(CatalogEvent::Gap {
                id: 1,
                from: 10,
                to: 20,
            })
            .expect("append");
        drop(catalog);
        let state = read(dir.path()).expect("read again");
        assert_eq!(state.recordings[&1].gaps, vec![(10, 20)]);
        assert_eq!(state.recordings[&1].stop_position, Some(1040));
    }

    #[test]
    fn damage_in_the_middle_of_a_catalog_of_the_earlier_layout_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join(CATALOG_FILE);
        let mut bytes = earlier_catalog(&events(), &[]);
        bytes[16 + 8 + 3] ^= 0x20;
        std::fs::write(&path, &bytes).expect("write");
        let error = read(dir.path()).expect_err("refused");
        assert!(error.to_string().contains("at byte 16"), "{error}");
        assert!(Catalog::open(dir.path()).is_err());
        assert_eq!(std::fs::read(&path).expect("read"), bytes, "nothing cut");
    }
}
