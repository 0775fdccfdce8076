//! Positions and epochs: where an item came from in its source.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The position space of a source.
///
/// A position means something only within its epoch. A file source takes a new epoch
/// when its pointer file is created or when the input file is replaced or truncated;
/// appending to the file keeps the epoch. [`crate::Delivery::already_applied`] is false
/// for any other epoch, so an application never skips a new line because its offset
/// happens to be at or below a stored one from another epoch.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct Epoch(pub u64);

impl Epoch {
    /// The epoch of a source that has no position space of its own.
    pub const NONE: Epoch = Epoch(0);

    /// The raw value.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Debug for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Epoch({:#x})", self.0)
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A source position in the engine's erased form: a lane (a Kafka partition, 0 for a
/// source with one totally ordered stream) and an offset within the lane.
///
/// Positions increase within a lane of one epoch. They encode to 12 big-endian bytes
/// ([`PositionValue::to_bytes`]) for stores that keep them with state.
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug, Serialize, Deserialize,
)]
pub struct PositionValue {
    /// The independent stream the offset belongs to (0 when there is only one).
    pub lane: u32,
    /// The offset within the lane: a file's byte offset after the line, a journal index.
    pub offset: u64,
}

impl PositionValue {
    /// A position in lane 0.
    pub const fn at(offset: u64) -> Self {
        PositionValue { lane: 0, offset }
    }

    /// The 12-byte big-endian encoding: lane, then offset.
    pub fn to_bytes(self) -> [u8; 12] {
        let mut bytes = [0u8; 12];
        bytes[..4].copy_from_slice(&self.lane.to_be_bytes());
        bytes[4..].copy_from_slice(&self.offset.to_be_bytes());
        bytes
    }

    /// Decodes [`PositionValue::to_bytes`].
    pub fn from_bytes(bytes: [u8; 12]) -> Self {
        let mut lane = [0u8; 4];
        lane.copy_from_slice(&bytes[..4]);
        let mut offset = [0u8; 8];
        offset.copy_from_slice(&bytes[4..]);
        PositionValue {
            lane: u32::from_be_bytes(lane),
            offset: u64::from_be_bytes(offset),
        }
    }
}

impl fmt::Display for PositionValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lane == 0 {
            write!(f, "{}", self.offset)
        } else {
            write!(f, "{}:{}", self.lane, self.offset)
        }
    }
}

/// A source's own, typed position.
///
/// The engine treats it as opaque apart from its erased [`PositionValue`], which
/// processors read through [`crate::DeliveryContext`]. A file source uses `u64` (the byte
/// offset after the line); a partitioned log uses a `(partition, offset)` type.
pub trait Position: Copy + Send + Sync + fmt::Debug + 'static {
    /// The erased form carried in a [`crate::Delivery`].
    fn value(&self) -> PositionValue;
}

impl Position for u64 {
    fn value(&self) -> PositionValue {
        PositionValue::at(*self)
    }
}

impl Position for PositionValue {
    fn value(&self) -> PositionValue {
        *self
    }
}

impl Position for (u32, u64) {
    fn value(&self) -> PositionValue {
        PositionValue {
            lane: self.0,
            offset: self.1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_round_trips_through_its_bytes() {
        let position = PositionValue {
            lane: 7,
            offset: u64::MAX - 3,
        };
        assert_eq!(PositionValue::from_bytes(position.to_bytes()), position);
        assert_eq!(PositionValue::at(12).to_string(), "12");
        assert_eq!(position.to_string(), format!("7:{}", u64::MAX - 3));
    }

    #[test]
    fn positions_order_by_lane_then_offset() {
        assert!(PositionValue::at(5) < PositionValue::at(6));
        assert!(PositionValue { lane: 1, offset: 0 } > PositionValue::at(u64::MAX));
        assert_eq!((3u32, 9u64).value(), PositionValue { lane: 3, offset: 9 });
    }
}
