//! The Mongoose-rs server: configuration, wiring, lifecycle and ordered shutdown, the
//! admin API and metrics, used by the `mongoose` binary and by programs that host
//! their own processors.
//!
//! ```
//! use mongoose_server::config::ServerConfig;
//!
//! let config = ServerConfig::parse(
//!     r#"
//!     [[feeds]]
//!     name = "lines"
//!     source = "file"
//!     path = "input.txt"
//!     "#,
//!     std::path::Path::new("."),
//! )
//! .unwrap();
//! assert_eq!(config.feeds[0].name, "lines");
//! ```
#![forbid(unsafe_code)]

pub mod admin;
pub mod audit_journal;
pub mod cli;
pub mod config;
mod error;
pub mod forward;
pub mod log_filter;
pub mod losses;
pub mod metrics;
pub mod progress;
mod server;
pub mod sinks;
pub mod unit_tests;

pub use error::ServerError;
/// The item of the server's file feeds: a line that borrows its read chunk (no
/// allocation per line); a handler takes `&Line` (`fn on_line(&mut self, line: &Line)`).
pub use mongoose_source_file::Line;
pub use server::{
    replay, ProcessorContext, ProcessorFactory, ProcessorKind, ProcessorReports, ReloadStatus,
    Server, ServerBuilder, SettingsCheck, SettingsError, SettingsValidator, StatusReader,
    StopResult, TapRefused,
};
