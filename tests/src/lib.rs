//! Cross-crate integration tests of Mongoose-rs.
//!
//! The end-to-end and crash tests need the `mongoose` binary, so they live beside it in
//! one test binary, `mongoose/tests/suite.rs`, with a module per part of the book in
//! `mongoose/tests/suite/` (`guarantees/kill.rs`: the ledger killed with SIGKILL
//! mid-burst, the second-signal and SIGTERM stops; `guarantees/server.rs`: the settled
//! rule, clean stops, a crash mid-burst in process; `operating/admin.rs`,
//! `running/record_replay.rs`...).
//! This crate holds what spans crates without the binary: the regression index
//! (`tests/REGRESSIONS.md`, each finding the book's guarantees chapters explain and the
//! test that pins its fix) and the check that every test it names exists, the check that
//! every chapter the code cites exists (`tests/book_citations.rs`), and the book's Rust
//! examples, run as this crate's doc tests (`cargo test -p mongoose-tests --doc`).
#![forbid(unsafe_code)]

/// The book's chapters that hold Rust examples (`docs/src/`), one item each, so that
/// `cargo test --doc` compiles and runs every example without mdBook.
#[cfg(doctest)]
pub mod book {
    #[doc = include_str!("../../docs/src/processors/stateful-processors.md")]
    pub struct StatefulProcessors;
    #[doc = include_str!("../../docs/src/running/embedding.md")]
    pub struct Embedding;
    #[doc = include_str!("../../docs/src/running/record-and-replay.md")]
    pub struct RecordAndReplay;
    #[doc = include_str!("../../docs/src/connectors/writing-a-connector.md")]
    pub struct WritingAConnector;
    #[doc = include_str!("../../docs/src/admin/commands.md")]
    pub struct AdminCommands;
    #[doc = include_str!("../../docs/src/reference/delivery-engine.md")]
    pub struct DeliveryEngine;
    #[doc = include_str!("../../README.md")]
    pub struct Readme;
}
