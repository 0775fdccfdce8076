//! The `mongoose` binary's own code, over the server library: the processor kinds it
//! registers beside the server's built-in `forward` ([`kinds`]: the ledger, with its
//! state in local files, a journal, or a Kafka changelog with the `kafka` feature; and
//! [`aggregate`], keyed aggregates configured in TOML with their state in the outbox),
//! and
//! the operator tools of its `journal` and `archive` subcommands ([`journal_cli`],
//! [`archive_cli`]).
//!
//! The layering, read from the manifests: `mongoose-server` is the library a program
//! embeds (config, wiring, lifecycle, admin API) and depends on no application and on no
//! connector library it does not wire itself; this crate is the application on top of
//! it, and the only one of the server's dependents that pulls the ledger (an example
//! application) and, with the `kafka` feature (on by default), librdkafka.
//! `cargo build -p mongoose --no-default-features` builds a binary without librdkafka:
//! a changelog ledger is then refused at load with the command that builds one with it.
//!
//! A program that wants the binary's processor kinds in its own server:
//!
//! ```
//! use mongoose_server::config::ServerConfig;
//! use mongoose_server::Server;
//!
//! let config = ServerConfig::parse(
//!     r#"
//!     [[feeds]]
//!     name = "payments"
//!     source = "file"
//!     path = "payments.csv"
//!
//!     [[groups]]
//!     name = "bank"
//!
//!     [[groups.processors]]
//!     name = "ledger"
//!     kind = "ledger"
//!     settings = { feed = "payments", state_dir = "state" }
//!     "#,
//!     std::path::Path::new("."),
//! )
//! .unwrap();
//! let builder = mongoose::kinds::register(Server::builder(config));
//! // `builder.build()` wires the feeds, the group and the ledger; `start()` runs them
//! # let _ = builder;
//! ```
#![forbid(unsafe_code)]

pub mod aggregate;
pub mod archive_cli;
pub mod journal_cli;
pub mod kinds;
pub mod status_cli;
pub mod stdout;
pub mod tap_cli;
pub mod test_cli;
pub mod top;
