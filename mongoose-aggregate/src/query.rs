//! Reading one key's aggregates: what the admin route will answer.

use serde::Serialize;

use crate::apply::{named_values, Aggregate, KEY_SEPARATOR};
use crate::decimal::Value;
use crate::state::AggregateValue;

/// One key's aggregates.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KeyView {
    /// The key's `group_by` values.
    pub key: Vec<String>,
    /// Without windows: the declared aggregates, by name (none: no value yet).
    pub values: Vec<(String, Option<Value>)>,
    /// With windows: the key's open windows.
    pub windows: Vec<WindowView>,
    /// The `count_distinct` aggregates of the key that reached the bound (their counts
    /// are lower bounds).
    pub saturated: Vec<String>,
}

/// An open window of a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WindowView {
    /// Its start (ms).
    pub start: i64,
    /// Its end (ms, exclusive).
    pub end: i64,
    /// The declared aggregates, by name.
    pub values: Vec<(String, Option<Value>)>,
}

impl KeyView {
    /// The view as JSON: `{"key": [...], "values": {"total": "12.50", ...}, "windows": [...]}`.
    pub fn to_json(&self) -> serde_json::Value {
        let values = |values: &[(String, Option<Value>)]| {
            serde_json::Value::Object(
                values
                    .iter()
                    .map(|(name, value)| {
                        (
                            name.clone(),
                            value
                                .as_ref()
                                .map_or(serde_json::Value::Null, Value::to_json),
                        )
                    })
                    .collect(),
            )
        };
        serde_json::json!({
            "key": self.key,
            "values": values(&self.values),
            "windows": self.windows.iter().map(|window| serde_json::json!({
                "start": crate::decimal::format_time(window.start),
                "end": crate::decimal::format_time(window.end),
                "values": values(&window.values),
            })).collect::<Vec<_>>(),
            "saturated": self.saturated,
        })
    }
}

impl Aggregate {
    /// The aggregates of the key whose `group_by` values are `parts` (their canonical
    /// text: a decimal as it sums, `1.5` not `1.50`), if the state has it.
    pub fn key(&self, parts: &[&str]) -> Option<KeyView> {
        let key = parts.join(&KEY_SEPARATOR.to_string());
        let entry = self.state().keys.get(&key)?;
        let aggregator = self.aggregator();
        let size = aggregator.window.map_or(0, |window| window.size);
        let saturated_in = |values: &[AggregateValue]| {
            aggregator
                .named
                .iter()
                .filter(|(_, slot)| {
                    matches!(
                        values.get(*slot),
                        Some(AggregateValue::Distinct {
                            saturated: true,
                            ..
                        })
                    )
                })
                .map(|(name, _)| name.clone())
                .collect::<Vec<_>>()
        };
        let mut saturated = saturated_in(&entry.values);
        for values in entry.windows.values() {
            saturated.extend(saturated_in(values));
        }
        saturated.sort();
        saturated.dedup();
        Some(KeyView {
            key: parts.iter().map(|part| (*part).to_owned()).collect(),
            values: if aggregator.window.is_none() {
                named_values(aggregator, &entry.values)
            } else {
                Vec::new()
            },
            windows: entry
                .windows
                .iter()
                .map(|(start, values)| WindowView {
                    start: *start,
                    end: start + size,
                    values: named_values(aggregator, values),
                })
                .collect(),
            saturated,
        })
    }
}
