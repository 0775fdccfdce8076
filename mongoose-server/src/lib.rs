//! Config, wiring, lifecycle and ordered shutdown, admin API and the mongoose binary.
//!
//! This crate is a placeholder in the workspace layout of DESIGN.md; its issue fills it.
//!
//! ```
//! assert!(true);
//! ```
#![forbid(unsafe_code)]
