//! Test fixtures that several Mongoose-rs crates' tests share (a dev-dependency only,
//! never published):
//!
//! - [`Tmpfs`]: a real, small tmpfs for tests of full and read-only file systems
//!   (mounting needs root, as CI and the development machines have);
//! - [`CountingAllocator`]: a global allocator that counts allocations, for the tests
//!   that pin a hot path allocating nothing per item.
//!
//! Fixtures that one crate's tests share stay in that crate's `tests/common` or
//! `tests/support` module.

mod allocator;
mod tmpfs;

pub use allocator::CountingAllocator;
pub use tmpfs::Tmpfs;
