//! A tailing file source whose pointer is never ahead of processing.
//!
//! This crate is a placeholder in the workspace layout of DESIGN.md; its issue fills it.
//!
//! ```
//! assert!(true);
//! ```
#![forbid(unsafe_code)]
