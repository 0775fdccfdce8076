//! Test fixtures that several Mongoose-rs crates' tests share (a dev-dependency only,
//! never published):
//!
//! - [`Tmpfs`]: a real, small tmpfs for tests of full and read-only file systems
//!   (mounting needs root, as CI and the development machines have);
//! - [`CountingAllocator`]: a global allocator that counts allocations, for the tests
//!   that pin a hot path allocating nothing per item;
//! - [`build_plugin`]: a plugin of `plugins/` built by cargo with test features.
//!
//! Fixtures that one crate's tests share stay in that crate's `tests/common` or
//! `tests/support` module.

mod allocator;
mod plugin_build;
mod tmpfs;

pub use allocator::CountingAllocator;
pub use plugin_build::{build_plugin, plugin_dir, workspace_root};
pub use tmpfs::Tmpfs;
