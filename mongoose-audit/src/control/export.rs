//! The export of an audit: JSON Lines and a manifest written from one snapshot,
//! [`verify`] that checks one, and [`read_request`] that reads a request's records
//! back.

use std::fs;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use mongoose_durable::disk::{Disk, RealDisk};
use mongoose_durable::replace::{replace_via, temporary_path};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::record::AuditRecord;
use super::ring::ControlAudit;
use super::{EXPORT_FORMAT, EXPORT_VERSION};
use crate::error::AuditError;

impl ControlAudit {
    /// The records as JSON Lines, with no manifest.
    pub fn export_text(&self) -> String {
        let (records, _) = self.snapshot();
        render(&records)
    }

    /// Writes the records as JSON Lines to `path` and a manifest to
    /// [`manifest_path`]`(path)`, from one snapshot, each by the durable layer's atomic
    /// replace (synced, renamed, the folder synced), the records first: once this
    /// returns, the export survives a power loss. An old manifest is removed first, so
    /// an interrupted export never claims to be complete. Returns the manifest path.
    ///
    /// # Errors
    /// [`AuditError::AuditIo`] when a file cannot be removed or written.
    pub fn export(&self, path: &Path) -> Result<PathBuf, AuditError> {
        let exported = self.export_on(&mut RealDisk, path);
        if exported.is_err() {
            // a failed export keeps no half-written copy taking space (a full disk)
            let _ = fs::remove_file(temporary_path(path));
            let _ = fs::remove_file(temporary_path(&manifest_path(path)));
        }
        exported
    }

    /// As [`ControlAudit::export`], on `disk` (a
    /// [`RecordingDisk`](mongoose_durable::crash::RecordingDisk) in the crash-point
    /// test).
    ///
    /// # Errors
    /// As [`ControlAudit::export`].
    pub fn export_on<D: Disk>(&self, disk: &mut D, path: &Path) -> Result<PathBuf, AuditError> {
        let manifest = manifest_path(path);
        match fs::remove_file(&manifest) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                return Err(AuditError::AuditIo {
                    path: manifest,
                    error,
                })
            }
        }
        let (records, counts) = self.snapshot();
        let text = render(&records);
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error: mongoose_durable::DurableError| AuditError::AuditIo {
                path,
                error: error.into(),
            }
        };
        // the durable layer's replace: the records synced and renamed into a synced
        // folder before the manifest is written, so an export the API reported is
        // still there after a power loss
        replace_via(disk, path, &temporary_path(path), text.as_bytes()).map_err(io(path))?;
        let body = Manifest {
            format: EXPORT_FORMAT.to_owned(),
            version: EXPORT_VERSION,
            sha256: sha256_hex(text.as_bytes()),
            total: counts.total,
            retained: counts.retained,
            dropped: counts.dropped,
            sink_failures: counts.sink_failures,
            complete: counts.complete,
        };
        let json = serde_json::to_vec_pretty(&body).map_err(|error| AuditError::AuditIo {
            path: manifest.clone(),
            error: std::io::Error::other(error),
        })?;
        // the durable layer's replace: the manifest is there whole or not at all
        let temporary = manifest.with_extension("json.tmp");
        replace_via(disk, &manifest, &temporary, &json).map_err(io(&manifest))?;
        Ok(manifest)
    }
}

fn render(records: &[AuditRecord]) -> String {
    let mut text = String::new();
    for record in records {
        // a record of plain strings and numbers always serializes
        if let Ok(line) = serde_json::to_string(record) {
            text.push_str(&line);
            text.push('\n');
        }
    }
    text
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The manifest written beside an export.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always [`EXPORT_FORMAT`].
    pub format: String,
    /// Always [`EXPORT_VERSION`].
    pub version: u32,
    /// The sha256 of the exact exported bytes, in lowercase hex.
    pub sha256: String,
    /// Records ever written.
    pub total: u64,
    /// Records exported.
    pub retained: u64,
    /// Records dropped before the export.
    pub dropped: u64,
    /// Mirror writes that failed.
    pub sink_failures: u64,
    /// Nothing dropped and no write failed.
    pub complete: bool,
}

/// The manifest path of an export: the export's file name with `.manifest.json` added.
pub fn manifest_path(export: &Path) -> PathBuf {
    let mut name = export.file_name().unwrap_or_default().to_os_string();
    name.push(".manifest.json");
    export.with_file_name(name)
}

/// What [`verify`] concludes about an export.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verification {
    /// The manifest matches the bytes and nothing was dropped or failed. Necessary,
    /// not sufficient, for an invariant pass.
    Complete,
    /// The manifest matches, but records were dropped or failed to write.
    Incomplete,
    /// The manifest is missing, malformed, inconsistent or does not match the bytes.
    Unknown,
}

impl Verification {
    /// True only for [`Verification::Complete`].
    pub fn permits_invariant_pass(self) -> bool {
        self == Verification::Complete
    }
}

/// Checks an export against its manifest, reading only the two files.
pub fn verify(path: &Path) -> Verification {
    let Ok(manifest_bytes) = fs::read(manifest_path(path)) else {
        return Verification::Unknown;
    };
    let Ok(manifest) = serde_json::from_slice::<Manifest>(&manifest_bytes) else {
        return Verification::Unknown;
    };
    let Ok(bytes) = fs::read(path) else {
        return Verification::Unknown;
    };
    let lines = bytes.iter().filter(|byte| **byte == b'\n').count() as u64;
    let consistent = manifest.format == EXPORT_FORMAT
        && manifest.version == EXPORT_VERSION
        && manifest.sha256 == sha256_hex(&bytes)
        && manifest.retained == lines
        && manifest.total == manifest.retained + manifest.dropped
            // a failed mirror write adds a fallback record, never removes one
        && manifest.complete == (manifest.dropped == 0 && manifest.sink_failures == 0);
    match (consistent, manifest.complete) {
        (false, _) => Verification::Unknown,
        (true, true) => Verification::Complete,
        (true, false) => Verification::Incomplete,
    }
}

/// Reads an export and returns the records of one request (by `root_id`), in export
/// order.
///
/// # Errors
/// [`AuditError::AuditIo`] when the file cannot be read or a line is not a record.
pub fn read_request(path: &Path, root_id: Option<u64>) -> Result<Vec<AuditRecord>, AuditError> {
    let io = |error| AuditError::AuditIo {
        path: path.to_path_buf(),
        error,
    };
    let file = fs::File::open(path).map_err(io)?;
    let mut found = Vec::new();
    for line in std::io::BufReader::new(file).lines() {
        let line = line.map_err(io)?;
        if line.trim().is_empty() {
            continue;
        }
        let record: AuditRecord = serde_json::from_str(&line)
            .map_err(|error| io(std::io::Error::new(std::io::ErrorKind::InvalidData, error)))?;
        if record.root_id == root_id {
            found.push(record);
        }
    }
    Ok(found)
}
