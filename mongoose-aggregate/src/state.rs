//! The aggregate's state: what it saves with the feed's position (serde + postcard,
//! with a magic and a version), deterministic (ordered maps only), so that the same
//! lines give the same bytes.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::decimal::{Decimal, Value};
use crate::error::AggregateError;

/// The version of the state's encoding ([`AggregateState::to_bytes`]).
pub const STATE_VERSION: u32 = 1;

/// The first bytes of an encoded state.
pub const STATE_MAGIC: [u8; 8] = *b"MGAGGST\0";

/// The `(epoch, offset)` of the last line of a lane the state holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LanePosition {
    /// The lane's epoch.
    pub epoch: u64,
    /// The position (a file's byte offset after the line) of the lane's last line.
    pub offset: u64,
}

/// One aggregate's value for a key (or a window).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AggregateValue {
    /// `count`: lines applied.
    Count(u64),
    /// `sum(field)`.
    Sum(Decimal),
    /// `min(field)` (none before a line).
    Min(Option<Value>),
    /// `max(field)`.
    Max(Option<Value>),
    /// `last(field)`: the value of the last line applied.
    Last(Option<Value>),
    /// `count_distinct(field)`: the distinct values (their text), up to the bound.
    Distinct {
        /// The values seen.
        values: BTreeSet<String>,
        /// True once a new value came when the bound was reached: the count is then a
        /// lower bound.
        saturated: bool,
    },
}

impl AggregateValue {
    /// The value as a [`Value`] (none for a `min`, `max` or `last` of nothing).
    pub fn value(&self) -> Option<Value> {
        match self {
            AggregateValue::Count(count) => {
                Some(Value::Number(Decimal::from_integer(*count as i64)))
            }
            AggregateValue::Sum(sum) => Some(Value::Number(*sum)),
            AggregateValue::Min(value)
            | AggregateValue::Max(value)
            | AggregateValue::Last(value) => value.clone(),
            AggregateValue::Distinct { values, .. } => {
                Some(Value::Number(Decimal::from_integer(values.len() as i64)))
            }
        }
    }
}

/// The aggregates of one key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyState {
    /// Without windows: the aggregates, by slot.
    pub values: Vec<AggregateValue>,
    /// Bit `i` set: rule `i` held after the last line (so it fires on the transition
    /// only).
    pub firing: u64,
    /// With windows: the open windows' aggregates, by window start (ms).
    pub windows: BTreeMap<i64, Vec<AggregateValue>>,
}

/// The counters of what the aggregate did (each line counts once, in one of them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Lines applied to a key.
    pub applied: u64,
    /// Lines that did not read, per reason.
    pub rejected: BTreeMap<String, u64>,
    /// Lines whose window had already closed.
    pub late: u64,
    /// CSV header lines skipped.
    pub headers: u64,
    /// Windows closed (their results emitted).
    pub windows_closed: u64,
    /// Rule outputs emitted.
    pub emits: u64,
    /// Times a key's `count_distinct` reached `count_distinct_bound`.
    pub count_distinct_saturated: u64,
}

impl Counters {
    /// Lines rejected, all reasons.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.values().sum()
    }
}

/// The aggregate's whole state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AggregateState {
    /// The config's aggregates, group_by fields and window (`count,sum(amount) by
    /// account per 60000ms of ts`): a state is refused by a config where one of them
    /// differs.
    pub aggregates: String,
    /// The last line of each lane in the state: a line at or before it (same epoch)
    /// is already applied.
    pub lanes: BTreeMap<u32, LanePosition>,
    /// The aggregates per key (the `group_by` values, joined by U+001F).
    pub keys: BTreeMap<String, KeyState>,
    /// What happened to the lines.
    pub counters: Counters,
    /// With windows: the latest event time applied (ms); the watermark is this minus
    /// the allowed lateness, and never goes back. A window that ends at or before the
    /// watermark is closed: its result was emitted, and a line for it is late.
    pub max_event_time: Option<i64>,
    /// With windows: the keys with an open window, by the window's end (ms).
    pub closing: BTreeMap<i64, BTreeSet<String>>,
}

impl AggregateState {
    /// The state as bytes: [`STATE_MAGIC`], [`STATE_VERSION`] (u32 little-endian), then
    /// postcard.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(64);
        bytes.extend_from_slice(&STATE_MAGIC);
        bytes.extend_from_slice(&STATE_VERSION.to_le_bytes());
        // a state of ordered maps, strings and integers always encodes
        postcard::to_extend(self, bytes).unwrap_or_default()
    }

    /// Reads [`Self::to_bytes`].
    ///
    /// # Errors
    /// [`AggregateError::State`] for bytes of another program, another version, or
    /// damaged ones.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, AggregateError> {
        let Some(rest) = bytes.strip_prefix(&STATE_MAGIC) else {
            return Err(AggregateError::State(
                "it does not start with the aggregate state's magic".to_owned(),
            ));
        };
        let (version, body) = rest
            .split_at_checked(4)
            .ok_or_else(|| AggregateError::State("it ends before its version".to_owned()))?;
        let version = u32::from_le_bytes(version.try_into().unwrap_or_default());
        if version != STATE_VERSION {
            return Err(AggregateError::State(format!(
                "its version is {version}, this build reads version {STATE_VERSION}"
            )));
        }
        let (state, left) = postcard::take_from_bytes::<AggregateState>(body)
            .map_err(|error| AggregateError::State(format!("its body does not decode: {error}")))?;
        if !left.is_empty() {
            return Err(AggregateError::State(format!(
                "{} bytes follow its body",
                left.len()
            )));
        }
        Ok(state)
    }
}
