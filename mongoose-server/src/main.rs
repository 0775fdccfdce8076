//! The `mongoose` binary.
fn main() {}
