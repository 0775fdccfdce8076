//! The wire form of an optional id: `-1` for `None`, the number for `Some`.
//!
//! Request ids, root ids and generations are `Option<u64>` in memory; replies, audit
//! exports and recordings have always written the missing ones as `-1`, so this
//! helper keeps that form (`#[serde(with = "mongoose_audit::sentinel")]`) and old files read.

use serde::{de, ser, Deserialize, Deserializer, Serializer};

/// The wire value of a missing id.
const NONE: i64 = -1;

/// Writes `None` as `-1` and `Some(n)` as `n`.
pub fn serialize<S: Serializer>(id: &Option<u64>, serializer: S) -> Result<S::Ok, S::Error> {
    // always an i64, as the field was: binary formats (postcard) encode it the same
    let wire = match id {
        Some(n) => i64::try_from(*n)
            .map_err(|_| ser::Error::custom(format!("id {n} is larger than i64::MAX")))?,
        None => NONE,
    };
    serializer.serialize_i64(wire)
}

/// Reads `-1` as `None` and a non-negative number as `Some`; any other negative
/// number is an error.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    match i64::deserialize(deserializer)? {
        NONE => Ok(None),
        n if n >= 0 => Ok(Some(n.unsigned_abs())),
        n => Err(de::Error::custom(format!(
            "id {n} is negative: only -1 (no id) or a non-negative number is valid"
        ))),
    }
}

/// The text form of an optional id in audit texts (`4.1 DeliverService(-1)`): the
/// number, or `-1`.
pub fn text(id: Option<u64>) -> String {
    match id {
        Some(n) => n.to_string(),
        None => NONE.to_string(),
    }
}
