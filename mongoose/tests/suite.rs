//! The end-to-end tests of the `mongoose` binary and the server it runs, in one test
//! binary (as ripgrep's `tests/tests.rs`): one module per part of the book, each
//! module's doc naming the chapters it proves, each chapter naming its module.
//!
//! Where a new test goes: in the file of `suite/<part>/` that holds the tests of the
//! same promise, or a new file there (declared in that folder's `mod.rs`) for a new
//! one; the crash loops that run against the release binary stay in
//! `ledger_crash_loop.rs`, and the file-only build's test in `file_only.rs`.
//!
//! The tests of all the files run at the same time in this one process (libtest runs
//! as many as there are cores), where each file used to be a process of its own. What
//! the process shares is handled once:
//! - a test that starts Apache Kafka nodes of its own (`kafka_support::own_cluster`)
//!   holds the process-wide lock of such clusters while they run, so no two sets of
//!   JVMs start at once on the machine's few cores;
//! - a test that signals itself (`signal_during_start`, `sighup_during_start`) runs its
//!   body in a child process of this binary (`support::own_process`): the handlers
//!   of every server the process ran stay installed, and would all see the signal;
//! - topic names carry a counter of the process (`kafka_support::unique_topic`);
//! - nothing sets environment variables or the process's current folder; each test
//!   works in a temporary folder of its own, on ports the system picks. The metrics
//!   recorder and the tracing subscriber are process-wide: only `admin` reads
//!   `/metrics` of a server in this process (the scrape writes that server's status
//!   into the recorder just before it renders), and only `audit_capture` installs the
//!   subscriber (with the capture layer, as the `mongoose` binary does).

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
