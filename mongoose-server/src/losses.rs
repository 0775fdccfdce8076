//! Loss records kept beside a feed's pointer (the format and its files belong to the
//! file source, which also writes a record the moment it finds a loss: see
//! [`mongoose_source_file::losses`]). Re-exported here for the server's own use.

pub use mongoose_source_file::losses::*;
