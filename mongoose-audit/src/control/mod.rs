//! The control audit: every input, decision, effect outcome and reply of a group's
//! control logic, in a bounded ring, with a verifiable export.
//!
//! book: guarantees/control-plane.md. Records carry a group-local gap-free `seq`,
//! the `request_id`, the `root_id` shared by every record of one request and, for a
//! record caused by another, its `cause_seq`. When the ring drops records, or a mirror
//! write fails, [`ControlAudit::is_complete`] is false and the export's manifest says so.
//!
//! The ring is bounded twice: by records ([`DEFAULT_AUDIT_CAPACITY`]) and by bytes
//! ([`DEFAULT_AUDIT_BYTES`], the sum of the retained records' sizes); whichever is
//! reached first drops the oldest records, counted in `dropped` (so the audit is no
//! longer complete). A text field longer than [`MAX_AUDIT_FIELD_BYTES`] (a giant admin
//! command argument, an error that quotes one) is cut with a
//! `…[truncated: N bytes]` marker and counted in `truncated`: the record stays, its
//! text is abridged, so one request can never pin more than a few KiB.

//!
//! Its jobs live in submodules: `record` (what a record holds, and the builder the
//! group writes with), `ring` (the bounded ring of one group: [`ControlAudit`], its
//! bounds and counters) and `export` (the JSON Lines export, its manifest, [`verify`]
//! and [`read_request`]).

mod export;
mod record;
mod ring;
#[cfg(test)]
mod tests;

pub use export::{manifest_path, read_request, verify, Manifest, Verification};
pub use record::{AuditRecord, NewRecord, RecordType};
pub use ring::{AuditCounts, AuditMirror, ControlAudit};

/// The default ring capacity per group.
pub const DEFAULT_AUDIT_CAPACITY: usize = 10_000;

/// The default bound of a group's ring in bytes: the sum of its records' sizes
/// ([`AuditCounts::bytes`]).
pub const DEFAULT_AUDIT_BYTES: usize = 8 << 20;

/// The longest text field a record keeps (in bytes); a longer one is cut at a
/// character boundary and ends with `…[truncated: N bytes]`, N its full length.
pub const MAX_AUDIT_FIELD_BYTES: usize = 4096;

/// The manifest's `format` value.
pub const EXPORT_FORMAT: &str = "mongoose-control-audit";

/// The manifest's `version` value.
pub const EXPORT_VERSION: u32 = 1;
