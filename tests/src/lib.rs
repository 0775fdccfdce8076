//! Cross-crate integration tests of Mongoose-rs live in `tests/` of this crate.
#![forbid(unsafe_code)]
