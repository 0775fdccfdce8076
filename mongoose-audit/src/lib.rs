//! The control audit and audit capture of Mongoose-rs (book:
//! guarantees/control-plane.md, admin/control-audit.md, admin/audit-capture.md).
//!
//! Its jobs:
//!
//! * **The control audit** ([`control`]): every input, decision, effect outcome and
//!   reply of a processor group's control logic as an [`AuditRecord`], kept in a
//!   bounded ring ([`ControlAudit`]: bounded by records and by bytes, drops counted so
//!   the audit says it is incomplete), exported as JSON Lines with a manifest through
//!   the durable layer, and read back: [`verify`] checks an export against its
//!   manifest, [`read_request`] gives one request's records.
//! * **Audit capture** ([`capture`]): one processor's audit log (its `tracing` events
//!   and the records it writes through [`mongoose_core::audit`](mod@mongoose_core::audit))
//!   routed on its group's thread into a session of its own ([`capture::routing`]), the
//!   session's folder with its identity sidecar and records file on the durable layer
//!   ([`capture::file`]), and a group's sessions with their bounds
//!   ([`capture::CaptureSessions`]).
//! * The wire form of an optional id ([`sentinel`]: `-1` for none), shared with
//!   `mongoose-control`'s replies.
//!
//! It depends on `mongoose-core` and `mongoose-durable` only: `mongoose-control`,
//! whose groups write the audit and install the captures, depends on it, never the
//! other way (`cargo xtask layout` checks it).
//!
//! # Writing, exporting and verifying a control audit
//!
//! ```
//! use mongoose_audit::{read_request, verify, ControlAudit, NewRecord, RecordType, Verification};
//!
//! let audit = ControlAudit::new(0, None); // the default bounds, no mirror
//! let input = audit.write(NewRecord::new(RecordType::Input, Some(7), "Add").name(Some("pricer")));
//! audit.write(
//!     NewRecord::new(RecordType::Reply, Some(7), "Reply")
//!         .cause(input)
//!         .outcome("APPLIED"),
//! );
//! assert!(audit.is_complete());
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("pricing.control-audit.jsonl");
//! let manifest = audit.export(&path)?; // records, then the manifest, each replaced atomically
//! assert!(manifest.exists());
//! assert_eq!(verify(&path), Verification::Complete);
//!
//! let records = read_request(&path, Some(7))?;
//! assert_eq!(records.len(), 2);
//! assert_eq!(records[1].cause_seq, Some(records[0].seq));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
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
