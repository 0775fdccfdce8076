//! The stateful processors (book: processors/stateful-processors.md and
//! processors/aggregate.md): the ledger's state, its identity and its outbox under
//! damage, and the `aggregate` kind with its recovery.

mod aggregate;
#[cfg(feature = "kafka")]
mod aggregate_kafka;
mod aggregate_recovery;
mod ledger_journal;
mod ledger_state;
