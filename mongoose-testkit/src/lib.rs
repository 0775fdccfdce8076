//! Test fixtures that several Mongoose-rs crates' tests share (a dev-dependency only,
//! never published):
//!
//! - [`Tmpfs`]: a real, small tmpfs for tests of full and read-only file systems
//!   (mounting needs root, as CI and the development machines have);
//! - [`CountingAllocator`]: a global allocator that counts allocations, for the tests
//!   that pin a hot path allocating nothing per item;
//! - [`http_target::HttpTarget`]: the one scripted HTTP/1.1 target (plain or TLS) of
//!   the sink's tests, the end-to-end tests, the chaos harness's HTTP peer and the
//!   benchmarks: each request answered as a script says (a status, late, never,
//!   closed before the answer or mid-body) and recorded; [`tcp_target::TcpLineTarget`],
//!   its raw TCP line counterpart;
//! - [`https::TestCa`] and [`https::HttpsTarget`]: a generated CA and a real HTTPS
//!   server (the scripted target over rustls) that records requests and refused
//!   handshakes;
//! - [`build_plugin`]: a plugin of `plugins/` built by cargo with test features;
//! - [`kafka::Cluster`]: Apache Kafka nodes of a test's own (1 or 3, extra listeners
//!   and properties, one SIGKILLed and started again), from the jars `cargo xtask
//!   broker start` resolved.
//!
//! Fixtures that one crate's tests share stay in that crate's `tests/common` or
//! `tests/support` module.
//!
//! # Example
//!
//! A server test's plugin folder holding the template plugin built with a test feature:
//!
//! ```no_run
//! use mongoose_testkit::{build_plugin, plugin_dir};
//!
//! let library = build_plugin("template-plugin", &["panic-source"]);
//! let scratch = tempfile::tempdir().expect("scratch");
//! // `<scratch>/plugins/libtemplate_plugin.so`: `plugin_dir = "plugins"` in its config
//! let plugins = plugin_dir(scratch.path(), &[&library]);
//! assert!(plugins.join("libtemplate_plugin.so").exists());
//! ```

mod allocator;
pub mod http_target;
pub mod https;
pub mod kafka;
mod plugin_build;
pub mod tcp_target;
mod tmpfs;

pub use allocator::CountingAllocator;
pub use plugin_build::{build_plugin, plugin_dir, workspace_root};
pub use tmpfs::Tmpfs;
