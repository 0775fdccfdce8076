//! The ledger: the kill-test application (book: guarantees/consumer-side-positions.md) made real, and a model of a
//! stateful processor that survives `kill -9` with every line applied exactly once.
//!
//! Input lines are `account,amount` (account `[A-Za-z0-9_-]{1,64}`, amount a signed
//! 64-bit integer). For each line the ledger:
//!
//! 1. skips it if its saved state already contains it ([`Delivery::already_applied`]
//!    against the `(epoch, position)` saved with the state), before any change;
//! 2. applies it, or appends a malformed line with its position and reason to
//!    `rejected.log` (counted in its state and in `/metrics` as
//!    `mongoose_ledger_rejected_lines_total`);
//! 3. writes `position,account,balance` as an alert when the account's balance is
//!    negative after the line: to an alerts sink ([`SinkAlerts`]: its own file, or a server's
//!    configured sink), keyed by the line, holding the line's commit until the alert is
//!    published;
//! 4. asks for the delivery-complete hook, which admits one checksummed record (the
//!    account's new balance, the counts, the feed's `(epoch, position)` and the
//!    delivery's alerts) into its outbox (`mongoose-outbox`), fsync'd in groups when a
//!    commit gate holds the line until the record is durable, else synced at once.
//!    Once the outbox records after the last snapshot pass `compact_every` records
//!    or `snapshot_bytes` bytes (counted from the files on disk at open, so that a
//!    ledger killed every fraction of a second still snapshots, and at open itself when
//!    the log it replayed is already past the bound, or past a quarter of it and at
//!    least as large as the snapshot), or the snapshot is
//!    `snapshot_every_secs` old, the whole state is written as a checksummed snapshot
//!    (temp file, fsync, rename, fsync dir) and the outbox compacted: a restart
//!    replays a bounded log (`snapshot`). As the
//!    alerts sink reports each alert over, its outcome is recorded in the outbox in
//!    batches, so a crash leaves only the alerts in flight to publish again, and a
//!    restart publishes them under backpressure (it waits for room in the sink's
//!    queue, never fails for it): a crash loop never wedges the ledger.
//!
//! # Identity
//!
//! A new state folder gets a run id, saved in its first snapshot before any record;
//! every outbox segment carries it. Opening refuses, naming the file and what to do
//! (nothing on disk changed): an outbox segment of another ledger or another run, an
//! outbox that ends before what the snapshot holds (segments deleted, an older copy),
//! records the outbox reported durable and that are gone (a cut tail: their lines may
//! be committed), and an outbox without its snapshot (deleted). A state folder of
//! another input put in place whole is refused by the file feed (the pointer is past
//! lines of an epoch the state does not hold).
//!
//! The state is never applied twice and the source's pointer is never ahead of the
//! durable state, so no line is skipped; an alert admitted with its line's record and
//! not confirmed published at a crash is published again at the next start under its
//! key, and the file sink writes each key once.
//!
//! # Torn writes and damage
//!
//! A crash can only cut the record being written short: the journal then ends with a
//! part of a record and no newline, and that record's line was never committed (the
//! pointer moves only after the record is saved). The next start cuts that part off
//! and the line is read again. Anything else that fails its checksum (a record with
//! whole records after it, a whole last record, a snapshot) was changed after it was
//! written: cutting it off would drop lines the pointer may already be past, so the
//! ledger refuses to start, leaves its files as they are, and its error names the
//! file, the record and its byte offset, and the way to recover ([`LedgerState::load`]).
//!
//! Its admin command `balance ACCOUNT` answers with the account's balance in memory
//! (`POST /processors/{group}/{name}/commands/balance` with `{"args": ["ACCOUNT"]}`): it
//! runs on the group's thread between lines, so it reads a balance every line before it
//! is applied to (`mongoose_control::admin`).
//!
//! This crate is an application of Mongoose-rs, not a part of the server: it knows
//! the processor API (core, control's admin commands, the file source's [`Line`]) and
//! nothing of the server. The `mongoose` binary registers it as the processor kind
//! `ledger` (`mongoose/src/kinds.rs`: the server's feeds and sinks are
//! checked there, the rest by [`LedgerSettings::check`]), and the example
//! `cargo run -p mongoose --example ledger` builds its server as values.
//!
//! # On a Kafka feed shared by several servers
//!
//! [`PartitionedLedger`] keeps the same balances per input partition in a changelog
//! topic (a [`mongoose_core::state_store::PartitionStateStore`]: the Kafka connector's
//! `mongoose_kafka::changelog::Changelog`) instead of `state_dir`: each line's change is
//! acknowledged by the broker before the line's offset is committed, and the member
//! that takes a partition over restores it (fenced by its marker) and skips the lines
//! the restored state already holds. The server picks it for a Kafka feed
//! ([`LedgerSettings::state`]).
//!
//! # Example
//!
//! Opening a ledger on a state folder, as the server's `ledger` kind does (the server
//! then adds it to a processor group, which subscribes it to its feed):
//!
//! ```
//! use mongoose_ledger::{Ledger, LedgerSettings};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let settings = LedgerSettings::new(dir.path().join("state"), dir.path().join("alerts.txt"));
//! let alerts = Ledger::open_alerts_file(&dir.path().join("alerts.txt"))?;
//! // no commit gate: each record is synced before its line counts as processed
//! let ledger = Ledger::open(settings, Box::new(alerts), None)?;
//! assert_eq!(ledger.state().applied, 0);
//! # Ok(()) }
//! ```
//!
//! `settings` holds the ledger's settings and their checks; `processor` the processor
//! (its lines, saves and hooks) and `open` its opening and recovery; `apply` what one
//! line does to a state; `alerts` where alerts are written; `state` the durable state
//! and its load and atomic save; `snapshot` when a snapshot is due (by what a restart
//! would replay) and taking it; `journal` the checksummed snapshot and journal record
//! formats and the damage checks; `partitioned` the ledger with its state in a
//! changelog, and [`changelog_writes`] the bookkeeping of its changelog writes (tags at
//! the commit gate, a write given up, fenced partitions retaken or dropped), which the
//! `mongoose` binary's partitioned aggregate shares.
//!
//! [`Delivery::already_applied`]: mongoose_core::Delivery::already_applied
//! [`Line`]: mongoose_source_file::Line
#![forbid(unsafe_code)]

pub mod changelog_writes;
mod journal;
mod partitioned;
#[cfg(test)]
mod snapshot_tests;
mod state;
#[cfg(test)]
mod tests;

mod alerts;
mod apply;
mod open;
mod processor;
mod settings;
mod snapshot;

pub use self::alerts::{send_error, AlertSink, SinkAlerts};
pub use self::processor::Ledger;
pub use self::settings::{LedgerSettings, SettingsRefusal, StateMode};

pub use partitioned::{partition_state, PartitionedLedger};
pub use state::{LanePosition, LedgerState};
