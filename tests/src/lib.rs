//! Cross-crate integration tests of Mongoose-rs.
//!
//! The end-to-end and crash tests need the `mongoose` binary, so they live beside it in
//! `mongoose/tests/`: `kill.rs` (the ledger killed with SIGKILL mid-burst, the
//! second-signal and SIGTERM stops), `server.rs` (the settled rule, clean stops, a
//! crash mid-burst in process), `stop_order.rs`, `admin.rs` and `record_replay.rs`.
//! This crate holds what spans crates without the binary: the regression index
//! (`tests/REGRESSIONS.md`, each finding of the reference and the test that pins its
//! fix) and the check that every test it names exists.
#![forbid(unsafe_code)]
