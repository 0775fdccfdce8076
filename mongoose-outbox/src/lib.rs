//! The durable outbox of Mongoose-rs (being built: see issue 13, item 3).
#![forbid(unsafe_code)]
