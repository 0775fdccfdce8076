//! Record and replay of processor inputs.
//!
//! This crate is a placeholder in the workspace layout of DESIGN.md; its issue fills it.
//!
//! ```
//! assert!(true);
//! ```
#![forbid(unsafe_code)]
