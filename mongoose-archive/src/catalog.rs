//! The recording catalog: an append-only file of checksummed events.
//!
//! `<archive>/catalog` starts with a 16-byte header (magic `MGARCAT1`, version) and
//! holds records `[len: u32][crc32: u32][postcard-encoded CatalogEvent]`. Each append
//! is synced before the archiver acts on it. The archiver cuts a torn last record at
//! start (a crash in the middle of an append); readers ignore one.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{ArchiveError, Result};

const MAGIC: &[u8; 8] = b"MGARCAT1";
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

/// Reads the catalog's events; returns the state and the length of the valid prefix.
fn read_events(path: &Path) -> Result<(CatalogState, u64, u64)> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok((CatalogState::default(), 0, 0))
        }
        Err(error) => return Err(ArchiveError::io("open the catalog", path)(error)),
    };
    let bytes = std::fs::read(path).map_err(ArchiveError::io("read the catalog", path))?;
    drop(file);
    let bad = |detail: &str| ArchiveError::BadFormat {
        path: path.to_path_buf(),
        what: "mongoose-archive catalog",
        detail: detail.to_string(),
    };
    if bytes.len() < HEADER_LEN as usize {
        // a catalog whose header was being written when the archiver died
        return Ok((CatalogState::default(), 0, bytes.len() as u64));
    }
    if &bytes[0..8] != MAGIC {
        return Err(bad("wrong magic"));
    }
    if u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) != VERSION {
        return Err(bad("unknown version"));
    }
    let mut state = CatalogState::default();
    let mut offset = HEADER_LEN as usize;
    while offset + 8 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4")) as usize;
        let crc = u32::from_le_bytes(bytes[offset + 4..offset + 8].try_into().expect("4"));
        let Some(body) = bytes.get(offset + 8..offset + 8 + len) else {
            break;
        };
        if crc32fast::hash(body) != crc {
            break;
        }
        let Ok(event) = postcard::from_bytes::<CatalogEvent>(body) else {
            break;
        };
        state.apply(event);
        offset += 8 + len;
    }
    Ok((state, offset as u64, bytes.len() as u64))
}

/// Reads the catalog of an archive (a reader's view; a torn last record is ignored).
pub(crate) fn read(archive: &Path) -> Result<CatalogState> {
    Ok(read_events(&archive.join(CATALOG_FILE))?.0)
}

/// The archiver's catalog: loaded at start (a torn tail cut), appended to.
#[derive(Debug)]
pub(crate) struct Catalog {
    file: File,
    path: PathBuf,
    len: u64,
    pub(crate) state: CatalogState,
}

impl Catalog {
    /// Opens (or creates) the catalog of an archive, cutting a torn tail.
    pub(crate) fn open(archive: &Path) -> Result<Catalog> {
        let path = archive.join(CATALOG_FILE);
        let (state, valid, total) = read_events(&path)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(ArchiveError::io("open the catalog", &path))?;
        let len = if valid == 0 {
            let mut header = [0u8; HEADER_LEN as usize];
            header[0..8].copy_from_slice(MAGIC);
            header[8..12].copy_from_slice(&VERSION.to_le_bytes());
            file.set_len(0)
                .map_err(ArchiveError::io("reset the catalog", &path))?;
            file.write_all_at(&header, 0)
                .map_err(ArchiveError::io("write the catalog header", &path))?;
            file.sync_all()
                .map_err(ArchiveError::io("sync the catalog", &path))?;
            HEADER_LEN
        } else {
            if total > valid {
                tracing::warn!(
                    catalog = %path.display(),
                    torn_bytes = total - valid,
                    "cutting the torn tail of the catalog"
                );
                file.set_len(valid)
                    .map_err(ArchiveError::io("cut the catalog's torn tail", &path))?;
                file.sync_all()
                    .map_err(ArchiveError::io("sync the catalog", &path))?;
            }
            valid
        };
        Ok(Catalog {
            file,
            path,
            len,
            state,
        })
    }

    /// Appends an event, synced, and applies it.
    pub(crate) fn append(&mut self, event: CatalogEvent) -> Result<()> {
        let body = postcard::to_allocvec(&event).expect("a catalog event encodes");
        let mut record = Vec::with_capacity(8 + body.len());
        record.extend_from_slice(&(body.len() as u32).to_le_bytes());
        record.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        record.extend_from_slice(&body);
        self.file
            .write_all_at(&record, self.len)
            .map_err(ArchiveError::io("append to the catalog", &self.path))?;
        self.file
            .sync_data()
            .map_err(ArchiveError::io("sync the catalog", &self.path))?;
        self.len += record.len() as u64;
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
