//! Processor groups, the control mailbox and replies, processor handles, services, failure containment and the control audit.
//!
//! This crate is a placeholder in the workspace layout of DESIGN.md; its issue fills it.
//!
//! ```
//! assert!(true);
//! ```
#![forbid(unsafe_code)]
