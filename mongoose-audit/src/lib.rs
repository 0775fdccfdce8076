//! The control audit of Mongoose-rs.
#![forbid(unsafe_code)]

pub mod capture;
pub mod control;
mod error;
pub mod sentinel;

pub use control::{
    manifest_path, read_request, verify, AuditCounts, AuditMirror, AuditRecord, ControlAudit,
    Manifest, NewRecord, RecordType, Verification,
};
pub use error::AuditError;
