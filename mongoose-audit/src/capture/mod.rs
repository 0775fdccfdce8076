//! Audit capture: recording one processor's audit log (the `tracing` events emitted on
//! its thread while its handlers run, and the records it writes through
//! [`mongoose_core::audit`](mod@mongoose_core::audit)) into a capture of its own (book: guarantees/control-plane.md).
//!
//! * **Where it goes.** A [`CaptureResources`] opens a [`CaptureWriter`] for a
//!   [`CaptureIdentity`] in a fresh `capture-<id>` folder below the capture root, which
//!   also holds the identity sidecar [`SIDECAR_FILE`]. [`file::FileCaptureResources`]
//!   writes length-prefixed, checksummed records to one file; a server may give a
//!   journal-backed one.
//! * **Who does what.** The open runs on an I/O helper thread, never on the processor's
//!   thread; the group installs the writer on its own thread between event cycles
//!   (through its control mailbox) and answers the start once the capture records. A
//!   start on a processor that records is APPLIED "already recording"; a start while an
//!   open is in progress joins it. An open that takes longer than the open timeout (30
//!   s) is answered FAILED "open timed out" and, when it completes later, its writer is
//!   closed, never installed.
//! * **Limits.** At most [`CaptureSettings::open_limit`] (8) opens in flight per group
//!   (a timed-out open keeps its permit until its helper returns) and at most
//!   [`CaptureSettings::resource_limit`] (1024) resource slots per group (opening,
//!   installed, closing and failed-close resources); past either, a start is FAILED
//!   with the reason.
//! * **Ending.** A stop uninstalls the capture and hands the writer to a closer thread
//!   for one close attempt; stopping or removing the processor stops its capture; a
//!   quarantined processor's capture is detached without calling the processor; a
//!   closing group closes its captures. A failed close is reported and keeps its slot,
//!   so a server's shutdown stays incomplete.
//! * **Routing.** The group moves the processor's capture into a thread-local for the
//!   length of each call it makes to the processor (nothing at all when the processor
//!   is not captured), where [`CaptureLayer`] (a `tracing_subscriber` layer the server
//!   installs) and [`mongoose_core::audit::record`] find it.
//!
//! Each record in a capture is one [`CaptureRecord`], encoded by
//! [`CaptureRecord::encode`].

pub mod file;
pub mod routing;
mod sessions;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::AuditError;

pub use routing::CaptureLayer;
pub use sessions::CaptureSessions;

/// The identity sidecar in every capture folder (JSON: group, name, generation,
/// capture id, start time), framed by the durable layer (header and checksum).
pub const SIDECAR_FILE: &str = ".mongoose-capture.json";

/// The failure a [`CaptureResources`] or [`CaptureWriter`] reports (any error type).
pub type CaptureFailure = Box<dyn std::error::Error + Send + Sync>;

/// Which processor registration a capture session records, and the session's id.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct CaptureIdentity {
    /// The processor's group.
    pub group: String,
    /// The processor's name in its group.
    pub name: String,
    /// The registration (a later processor of the same name has another).
    pub generation: u64,
    /// The session's id: its folder is `capture-<id>`.
    pub capture_id: String,
}

impl CaptureIdentity {
    /// The qualified selector `group/name`, each part percent-encoded ([`selector`]).
    pub fn selector(&self) -> String {
        selector(&self.group, &self.name)
    }

    /// The session folder's name, `capture-<id>`.
    pub fn folder_name(&self) -> String {
        format!("capture-{}", self.capture_id)
    }
}

/// Writes one capture session's records. Made by [`CaptureResources::open`] on an I/O
/// helper thread, then used on the processor's thread only, and closed once on a
/// closer thread.
pub trait CaptureWriter: Send {
    /// Appends one record (a [`CaptureRecord`] encoding).
    ///
    /// # Errors
    /// The record could not be written: the session stops writing and its status
    /// shows the error.
    fn write(&mut self, record: &[u8]) -> Result<(), CaptureFailure>;

    /// Flushes and closes. Called exactly once per writer; a failure is recorded as an
    /// unresolved resource and never retried.
    ///
    /// # Errors
    /// The close failed: what was written may not be durable.
    fn close(self: Box<Self>) -> Result<(), CaptureFailure>;
}

/// Opens capture sessions: the storage of audit capture, which a server provides.
pub trait CaptureResources: Send + Sync {
    /// Opens a writer for `identity` in `dir`, a fresh folder that already holds the
    /// identity sidecar. Runs on an I/O helper thread, never on a processor's thread;
    /// it may block, but a group answers "open timed out" past its open timeout and
    /// closes the writer when it comes late. Must close anything it created before it
    /// fails.
    ///
    /// # Errors
    /// The capture could not be opened (the start is answered FAILED with it).
    fn open(
        &self,
        identity: &CaptureIdentity,
        dir: &Path,
    ) -> Result<Box<dyn CaptureWriter>, CaptureFailure>;
}

/// How a control plane captures: where, with what storage, and its bounds.
#[derive(Clone)]
pub struct CaptureSettings {
    /// The capture root: each session gets a fresh `capture-<id>` folder below it.
    pub root: PathBuf,
    /// The storage.
    pub resources: Arc<dyn CaptureResources>,
    /// How long one open may take (30 s by default).
    pub open_timeout: Duration,
    /// Opens in flight per group (8 by default).
    pub open_limit: usize,
    /// Resource slots per group: opening, installed, closing and failed-close
    /// resources (1024 by default).
    pub resource_limit: usize,
}

impl fmt::Debug for CaptureSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureSettings")
            .field("root", &self.root)
            .field("open_timeout", &self.open_timeout)
            .field("open_limit", &self.open_limit)
            .field("resource_limit", &self.resource_limit)
            .finish()
    }
}

impl CaptureSettings {
    /// The default open timeout.
    pub const DEFAULT_OPEN_TIMEOUT: Duration = Duration::from_secs(30);
    /// The default open limit per group.
    pub const DEFAULT_OPEN_LIMIT: usize = 8;
    /// The default resource limit per group.
    pub const DEFAULT_RESOURCE_LIMIT: usize = 1024;

    /// Captures below `root` with `resources` and the default bounds.
    pub fn new(root: impl Into<PathBuf>, resources: Arc<dyn CaptureResources>) -> Self {
        CaptureSettings {
            root: root.into(),
            resources,
            open_timeout: Self::DEFAULT_OPEN_TIMEOUT,
            open_limit: Self::DEFAULT_OPEN_LIMIT,
            resource_limit: Self::DEFAULT_RESOURCE_LIMIT,
        }
    }

    /// Captures below `root` into files ([`file::FileCaptureResources`]).
    pub fn files(root: impl Into<PathBuf>) -> Self {
        Self::new(root, Arc::new(file::FileCaptureResources))
    }
}

/// Where a capture session is in its life.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaptureState {
    /// Its open runs on a helper thread.
    Opening,
    /// Installed: the processor's events and records go to it.
    Recording,
    /// Uninstalled, its writer handed to the closer.
    Closing,
    /// Closed.
    Closed,
    /// Its open failed or timed out: nothing was installed.
    OpenFailed,
    /// Its close failed: an unresolved resource (its slot stays held).
    CloseFailed,
}

/// One capture session in `GET /audit/status`.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct CaptureStatus {
    /// The session's id.
    pub id: String,
    /// The processor, as `group/name` ([`selector`]).
    pub selector: String,
    /// The processor's registration.
    pub generation: u64,
    /// The session's folder.
    pub path: PathBuf,
    /// True while it is installed.
    pub recording: bool,
    /// Where it is in its life.
    pub state: CaptureState,
    /// Records written so far.
    pub records_written: u64,
    /// Why the open, a write or the close failed, if one did.
    pub error: Option<String>,
}

/// What the identity sidecar holds.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct CaptureSidecar {
    /// The processor's group.
    pub group: String,
    /// The processor's name.
    pub name: String,
    /// Its registration.
    pub generation: u64,
    /// The session's id.
    pub capture_id: String,
    /// When the session began, milliseconds since the Unix epoch.
    pub started_at_millis: u64,
}

impl CaptureSidecar {
    /// Reads the sidecar of the capture folder `dir`: a one-record log of the durable
    /// layer (format [`SIDECAR_FORMAT`]) holding the JSON, or the bare JSON an earlier
    /// release wrote.
    ///
    /// # Errors
    /// [`AuditError::Capture`] when it is missing or not a sidecar (a changed byte of
    /// a sidecar with a header fails its checksum).
    pub fn read(dir: &Path) -> Result<Self, AuditError> {
        let path = dir.join(SIDECAR_FILE);
        let bytes = std::fs::read(&path).map_err(|error| AuditError::Capture {
            reason: format!(
                "cannot read the capture sidecar {}: {error}: is this a capture-* folder?",
                path.display()
            ),
        })?;
        let damaged = |why: String| AuditError::Capture {
            reason: format!("the capture sidecar {} is damaged: {why}", path.display()),
        };
        let json = if bytes.starts_with(&mongoose_durable::header::MAGIC) {
            let read = mongoose_durable::log::read(&path, &sidecar_header())
                .map_err(|error| damaged(error.to_string()))?;
            match (read.records.as_slice(), read.torn_tail) {
                ([json], None) => json.clone(),
                (records, torn) => {
                    return Err(damaged(format!(
                        "{} records{} where one is written",
                        records.len(),
                        if torn.is_some() {
                            " and a torn one"
                        } else {
                            ""
                        }
                    )))
                }
            }
        } else {
            bytes
        };
        serde_json::from_slice(&json).map_err(|error| damaged(error.to_string()))
    }

    /// The sidecar's bytes as written: a one-record durable log of its JSON.
    fn encode(&self) -> Result<Vec<u8>, CaptureFailure> {
        let json = serde_json::to_vec_pretty(self)?;
        Ok(mongoose_durable::log::encode(
            &sidecar_header(),
            [json.as_slice()],
        )?)
    }
}

/// The sidecar's format name in its durable-layer header.
pub const SIDECAR_FORMAT: &str = "mongoose-capture-sidecar";

/// The sidecar's header (no owner: the records file's header names the session).
fn sidecar_header() -> mongoose_durable::header::Header {
    mongoose_durable::header::Header::new(SIDECAR_FORMAT, 1, Vec::new())
}

/// Milliseconds since the Unix epoch, now.
pub fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

/// Creates the fresh session folder `root/capture-<id>` (refusing one that exists) and
/// writes its identity sidecar; returns the folder. A group calls it on the open's
/// helper thread before [`CaptureResources::open`].
///
/// # Errors
/// The root or the folder cannot be created (or the folder exists), or the sidecar
/// cannot be written.
pub fn create_session_folder(
    root: &Path,
    identity: &CaptureIdentity,
) -> Result<PathBuf, CaptureFailure> {
    std::fs::create_dir_all(root)
        .map_err(|error| format!("cannot create the capture root {}: {error}", root.display()))?;
    let dir = root.join(identity.folder_name());
    // create_dir, not create_dir_all: a session never shares a folder
    std::fs::create_dir(&dir).map_err(|error| {
        format!(
            "cannot create the fresh capture folder {}: {error}",
            dir.display()
        )
    })?;
    let sidecar = CaptureSidecar {
        group: identity.group.clone(),
        name: identity.name.clone(),
        generation: identity.generation,
        capture_id: identity.capture_id.clone(),
        started_at_millis: now_millis(),
    };
    // the folder's name durable, then the sidecar by the atomic replace (synced, the
    // folder synced): a session folder is never left without its identity
    mongoose_durable::disk::sync_folder(root)
        .map_err(|error| format!("cannot sync the capture root {}: {error}", root.display()))?;
    mongoose_durable::replace::replace(&dir.join(SIDECAR_FILE), &sidecar.encode()?).map_err(
        |error| {
            format!(
                "cannot write the capture sidecar in {}: {error}",
                dir.display()
            )
        },
    )?;
    Ok(dir)
}

/// One record of a capture.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum CaptureRecord {
    /// A `tracing` event emitted on the processor's thread while it was called.
    Event {
        /// When, microseconds since the Unix epoch.
        at_micros: u64,
        /// Its level (`INFO`, ...).
        level: String,
        /// Its target.
        target: String,
        /// Its message, then its other fields as `name=value`.
        text: String,
    },
    /// A record the processor wrote ([`mongoose_core::audit::record`]).
    Record {
        /// When, microseconds since the Unix epoch.
        at_micros: u64,
        /// What it wrote.
        bytes: Vec<u8>,
    },
}

const EVENT_TAG: u8 = b'E';
const RECORD_TAG: u8 = b'R';

impl CaptureRecord {
    /// Encodes an event into `buffer` (cleared first): `E`, the time (u64 LE), the
    /// level (u8 length + bytes), the target (u16 LE length + bytes), the text.
    pub fn encode_event(
        buffer: &mut Vec<u8>,
        at_micros: u64,
        level: &str,
        target: &str,
        text: &str,
    ) {
        buffer.clear();
        buffer.push(EVENT_TAG);
        buffer.extend_from_slice(&at_micros.to_le_bytes());
        let level = &level.as_bytes()[..level.len().min(u8::MAX as usize)];
        buffer.push(level.len() as u8);
        buffer.extend_from_slice(level);
        let target = &target.as_bytes()[..target.len().min(u16::MAX as usize)];
        buffer.extend_from_slice(&(target.len() as u16).to_le_bytes());
        buffer.extend_from_slice(target);
        buffer.extend_from_slice(text.as_bytes());
    }

    /// Encodes a processor's record into `buffer` (cleared first): `R`, the time (u64
    /// LE), the bytes.
    pub fn encode_record(buffer: &mut Vec<u8>, at_micros: u64, bytes: &[u8]) {
        buffer.clear();
        buffer.push(RECORD_TAG);
        buffer.extend_from_slice(&at_micros.to_le_bytes());
        buffer.extend_from_slice(bytes);
    }

    /// This record's encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut buffer = Vec::new();
        match self {
            CaptureRecord::Event {
                at_micros,
                level,
                target,
                text,
            } => Self::encode_event(&mut buffer, *at_micros, level, target, text),
            CaptureRecord::Record { at_micros, bytes } => {
                Self::encode_record(&mut buffer, *at_micros, bytes)
            }
        }
        buffer
    }

    /// Decodes one record.
    ///
    /// # Errors
    /// [`AuditError::Capture`] when the bytes are not a capture record.
    pub fn decode(bytes: &[u8]) -> Result<Self, AuditError> {
        let damaged = |what: &str| AuditError::Capture {
            reason: format!("a capture record is damaged: {what}"),
        };
        let (&tag, rest) = bytes.split_first().ok_or_else(|| damaged("empty"))?;
        if rest.len() < 8 {
            return Err(damaged("no time"));
        }
        let (time, rest) = rest.split_at(8);
        let at_micros = u64::from_le_bytes(time.try_into().map_err(|_| damaged("no time"))?);
        match tag {
            RECORD_TAG => Ok(CaptureRecord::Record {
                at_micros,
                bytes: rest.to_vec(),
            }),
            EVENT_TAG => {
                let (&level_len, rest) = rest.split_first().ok_or_else(|| damaged("no level"))?;
                let level_len = level_len as usize;
                if rest.len() < level_len + 2 {
                    return Err(damaged("short level"));
                }
                let (level, rest) = rest.split_at(level_len);
                let (target_len, rest) = rest.split_at(2);
                let target_len = u16::from_le_bytes([target_len[0], target_len[1]]) as usize;
                if rest.len() < target_len {
                    return Err(damaged("short target"));
                }
                let (target, text) = rest.split_at(target_len);
                Ok(CaptureRecord::Event {
                    at_micros,
                    level: String::from_utf8_lossy(level).into_owned(),
                    target: String::from_utf8_lossy(target).into_owned(),
                    text: String::from_utf8_lossy(text).into_owned(),
                })
            }
            _ => Err(damaged("unknown kind")),
        }
    }
}

/// The selector of processor `name` in `group`: `group/name`, each part
/// percent-encoded when it holds `/`, `%` or any character outside
/// `[A-Za-z0-9._~-]`. A display name, never a filesystem path.
pub fn selector(group: &str, name: &str) -> String {
    format!("{}/{}", encode_component(group), encode_component(name))
}

/// Percent-encodes one selector part.
pub fn encode_component(part: &str) -> String {
    let mut encoded = String::with_capacity(part.len());
    for byte in part.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'~' | b'-') {
            encoded.push(byte as char);
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

fn decode_component(part: &str, selector: &str) -> Result<String, AuditError> {
    let bad = || AuditError::BadSelector {
        selector: selector.to_owned(),
    };
    let bytes = part.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = part.get(index + 1..index + 3).ok_or_else(bad)?;
            decoded.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            index += 3;
        } else {
            decoded.push(bytes[index]);
            index += 1;
        }
    }
    let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
    if decoded.is_empty() {
        return Err(bad());
    }
    Ok(decoded)
}

/// What a start or stop names: a processor name, or `group/name`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ProcessorSelector {
    /// A name: it must be admitted in exactly one group.
    Name(String),
    /// A processor of one group.
    Qualified {
        /// The group.
        group: String,
        /// The name.
        name: String,
    },
}

impl ProcessorSelector {
    /// Parses `name` or `group/name` (parts percent-encoded when they hold `/` or `%`).
    ///
    /// # Errors
    /// [`AuditError::BadSelector`] for an empty part, more than one `/` or a bad
    /// escape.
    pub fn parse(selector: &str) -> Result<Self, AuditError> {
        let mut parts = selector.split('/');
        let first = parts.next().unwrap_or_default();
        match (parts.next(), parts.next()) {
            (None, _) => Ok(ProcessorSelector::Name(decode_component(first, selector)?)),
            (Some(second), None) => Ok(ProcessorSelector::Qualified {
                group: decode_component(first, selector)?,
                name: decode_component(second, selector)?,
            }),
            (Some(_), Some(_)) => Err(AuditError::BadSelector {
                selector: selector.to_owned(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_encode_and_parse_back() {
        assert_eq!(selector("bank", "ledger"), "bank/ledger");
        assert_eq!(selector("a/b", "x%y"), "a%2Fb/x%25y");
        assert_eq!(
            ProcessorSelector::parse("a%2Fb/x%25y").unwrap(),
            ProcessorSelector::Qualified {
                group: "a/b".into(),
                name: "x%y".into()
            }
        );
        assert_eq!(
            ProcessorSelector::parse("ledger").unwrap(),
            ProcessorSelector::Name("ledger".into())
        );
        assert!(ProcessorSelector::parse("a/b/c").is_err());
        assert!(ProcessorSelector::parse("a/").is_err());
        assert!(ProcessorSelector::parse("%zz").is_err());
    }

    #[test]
    fn records_decode_to_what_was_encoded() {
        for record in [
            CaptureRecord::Event {
                at_micros: 7,
                level: "INFO".into(),
                target: "app::pricer".into(),
                text: "priced price=3".into(),
            },
            CaptureRecord::Record {
                at_micros: 9,
                bytes: vec![0, 1, 2, 255],
            },
        ] {
            assert_eq!(CaptureRecord::decode(&record.encode()).unwrap(), record);
        }
        assert!(CaptureRecord::decode(b"X12345678").is_err());
        assert!(CaptureRecord::decode(b"").is_err());
    }
}
