//! The end-to-end tests of the `mongoose` binary and the server it runs, in one test
//! binary (as ripgrep's `tests/tests.rs`): one module per part of the book, each
//! module's doc naming the chapters it proves, each chapter naming its module.
//!
//! Where a new test goes: in the file of `suite/<part>/` that holds the tests of the
//! same promise, or a new file there (declared in that folder's `mod.rs`) for a new
//! one; the crash loops that run against the release binary stay in
//! `ledger_crash_loop.rs`, and the file-only build's test in `file_only.rs`.
//!

mod support;

#[cfg(feature = "kafka")]
mod kafka_support;

#[path = "suite/connectors/mod.rs"]
mod connectors;
#[path = "suite/guarantees/mod.rs"]
mod guarantees;
#[path = "suite/operating/mod.rs"]
mod operating;
#[path = "suite/outputs/mod.rs"]
mod outputs;
#[path = "suite/processors/mod.rs"]
mod processors;
#[path = "suite/running/mod.rs"]
mod running;
