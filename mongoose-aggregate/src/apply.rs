//! Applying a line: the [`Aggregate`] (a compiled config and its state), its
//! [`Outcome`]s, the rules after each line and the windows that close.

use std::cmp::Ordering;
use std::fmt::Write as _;

use mongoose_core::{Epoch, PositionValue};

use crate::compile::{AggregateSpec, Aggregator, Function, Piece, Rule};
use crate::decimal::{format_time, Decimal, Value};
use crate::error::AggregateError;
use crate::expr::{Operand, Scalar};
use crate::record::{LineReader, Read, Rejection, Slot};
use crate::settings::{FieldType, Fire};
use crate::state::{AggregateState, AggregateValue, Counters, KeyState, LanePosition};

/// The separator of the `group_by` values in a key.
pub const KEY_SEPARATOR: char = '\u{1f}';

/// Where a line is in its feed: the source's epoch and the line's position (its lane
/// and the offset after it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinePosition {
    /// The source's epoch.
    pub epoch: Epoch,
    /// The lane and offset.
    pub position: PositionValue,
}

impl LinePosition {
    /// Lane 0 of `epoch`, at `offset`.
    pub fn at(epoch: u64, offset: u64) -> Self {
        LinePosition {
            epoch: Epoch(epoch),
            position: PositionValue::at(offset),
        }
    }
}

/// An output of a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Emit {
    /// The rule's name.
    pub rule: String,
    /// The key's `group_by` values.
    pub key: Vec<String>,
    /// The rule's output text.
    pub text: String,
    /// With windows: the window's `[start, end)` in ms.
    pub window: Option<(i64, i64)>,
}

/// A window's result, returned once, by the line whose event time closed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowResult {
    /// The key's `group_by` values.
    pub key: Vec<String>,
    /// The window's start (ms since the epoch).
    pub start: i64,
    /// Its end (exclusive).
    pub end: i64,
    /// The declared aggregates, by name.
    pub values: Vec<(String, Option<Value>)>,
}

/// A line that came after its window closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LateEvent {
    /// Its event time (ms).
    pub event_time: i64,
    /// Its window's `[start, end)`.
    pub window: (i64, i64),
    /// The watermark it was behind.
    pub watermark: i64,
}

/// What applying a line did. Everything but [`Outcome::AlreadyApplied`] moved the
/// lane's position in the state, and counted the line once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The state already holds the line (its lane's position is at or after it, in
    /// the same epoch): nothing changed.
    AlreadyApplied,
    /// Applied to its key; the rules that fired and the windows the line closed.
    Applied {
        /// The rule outputs.
        emits: Vec<Emit>,
        /// The windows closed.
        closed: Vec<WindowResult>,
    },
    /// A CSV header, skipped.
    Header,
    /// The line did not read: counted under its reason (for the dead-letter sink).
    Rejected(Rejection),
    /// The line's window had closed: counted (for the dead-letter sink).
    Late(LateEvent),
}

/// A compiled config and its state: lines are applied to it one by one.
#[derive(Debug)]
pub struct Aggregate {
    aggregator: Aggregator,
    state: AggregateState,
    reader: LineReader,
    key: String,
    scratch: String,
}

impl Aggregate {
    /// A new, empty aggregate.
    pub fn new(aggregator: Aggregator) -> Self {
        let state = AggregateState {
            aggregates: aggregator.fingerprint.clone(),
            ..AggregateState::default()
        };
        Self::with_state(aggregator, state)
    }

    /// An aggregate with a saved state.
    ///
    /// # Errors
    /// [`AggregateError::OtherConfig`] when the state was written with other
    /// aggregates.
    pub fn restore(aggregator: Aggregator, state: AggregateState) -> Result<Self, AggregateError> {
        if state.aggregates != aggregator.fingerprint {
            return Err(AggregateError::OtherConfig {
                saved: state.aggregates,
                current: aggregator.fingerprint,
            });
        }
        Ok(Self::with_state(aggregator, state))
    }

    fn with_state(aggregator: Aggregator, state: AggregateState) -> Self {
        Aggregate {
            reader: LineReader::new(&aggregator),
            aggregator,
            state,
            key: String::with_capacity(64),
            scratch: String::with_capacity(64),
        }
    }

    /// The state (to save with the feed's position).
    pub fn state(&self) -> &AggregateState {
        &self.state
    }

    /// The compiled config.
    pub fn aggregator(&self) -> &Aggregator {
        &self.aggregator
    }

    /// The key (the `group_by` values joined by [`KEY_SEPARATOR`]) of the last line
    /// [`Aggregate::apply`] read as far as its key: the key an [`Outcome::Applied`]
    /// changed (a state saved per key, the Kafka changelog, saves that key's entry).
    pub fn last_key(&self) -> &str {
        &self.key
    }

    /// True when the state holds the line at `at`: the same epoch as its lane's last
    /// line, and at or before it.
    pub fn already_applied(&self, at: LinePosition) -> bool {
        self.state
            .lanes
            .get(&at.position.lane)
            .is_some_and(|saved| saved.epoch == at.epoch.0 && at.position.offset <= saved.offset)
    }

    /// Applies `line` (without its line ending) at `at`. A line the state already
    /// holds changes nothing ([`Outcome::AlreadyApplied`]): applying a stream again
    /// with the same positions leaves the state and the outputs as they were.
    pub fn apply(&mut self, at: LinePosition, line: &[u8]) -> Outcome {
        if self.already_applied(at) {
            return Outcome::AlreadyApplied;
        }
        let outcome = self.apply_new(line);
        self.state.lanes.insert(
            at.position.lane,
            LanePosition {
                epoch: at.epoch.0,
                offset: at.position.offset,
            },
        );
        match &outcome {
            Outcome::Applied { .. } => self.state.counters.applied += 1,
            Outcome::Header => self.state.counters.headers += 1,
            Outcome::Late(_) => self.state.counters.late += 1,
            Outcome::Rejected(rejection) => {
                match self.state.counters.rejected.get_mut(&rejection.reason) {
                    Some(count) => *count += 1,
                    None => {
                        self.state
                            .counters
                            .rejected
                            .insert(rejection.reason.clone(), 1);
                    }
                }
                tracing::debug!(reason = %rejection.message, "aggregate line rejected");
            }
            Outcome::AlreadyApplied => {}
        }
        outcome
    }

    fn apply_new(&mut self, line: &[u8]) -> Outcome {
        let aggregator = &self.aggregator;
        match self.reader.read(aggregator, line) {
            Err(rejection) => return Outcome::Rejected(rejection),
            Ok(Read::Header) => return Outcome::Header,
            Ok(Read::Data) => {}
        }
        if let Err(rejection) = self.make_key() {
            return Outcome::Rejected(rejection);
        }
        match self.aggregator.window {
            None => self.apply_to_key(),
            Some(window) => {
                let Slot::Time(time) = self.reader.slots[window.field] else {
                    unreachable!("a window field is a timestamp")
                };
                let start = time.div_euclid(window.size) * window.size;
                let end = start.saturating_add(window.size);
                if let Some(watermark) = self.watermark() {
                    if end <= watermark {
                        return Outcome::Late(LateEvent {
                            event_time: time,
                            window: (start, end),
                            watermark,
                        });
                    }
                }
                self.apply_to_window(time, start, end)
            }
        }
    }

    fn watermark(&self) -> Option<i64> {
        let lateness = self.aggregator.window.map_or(0, |window| window.lateness);
        self.state
            .max_event_time
            .map(|time| time.saturating_sub(lateness))
    }

    /// Writes the line's key into `self.key`.
    fn make_key(&mut self) -> Result<(), Rejection> {
        self.key.clear();
        for (part, field) in self.aggregator.group_by.iter().enumerate() {
            if part > 0 {
                self.key.push(KEY_SEPARATOR);
            }
            let start = self.key.len();
            write_slot(&mut self.key, &self.reader, &self.reader.slots[*field]);
            if self.key[start..].contains(KEY_SEPARATOR) {
                let name = &self.aggregator.fields[*field].name;
                return Err(Rejection {
                    reason: format!("{name}: contains U+001F"),
                    message: format!("{name}: contains U+001F, the key separator"),
                });
            }
        }
        Ok(())
    }

    fn apply_to_key(&mut self) -> Outcome {
        // one look-up for a key the state has (the usual case); a new key inserts first
        if let Some(entry) = self.state.keys.get_mut(self.key.as_str()) {
            return apply_to_entry(
                entry,
                &self.aggregator,
                &self.reader,
                &self.key,
                &mut self.scratch,
                &mut self.state.counters,
            );
        }
        let specs = &self.aggregator.specs;
        let mut entry = KeyState {
            values: specs.iter().map(initial).collect(),
            ..KeyState::default()
        };
        let outcome = apply_to_entry(
            &mut entry,
            &self.aggregator,
            &self.reader,
            &self.key,
            &mut self.scratch,
            &mut self.state.counters,
        );
        if !matches!(outcome, Outcome::Rejected(_)) {
            self.state.keys.insert(self.key.clone(), entry);
        }
        outcome
    }

    fn apply_to_window(&mut self, time: i64, start: i64, end: i64) -> Outcome {
        let specs = &self.aggregator.specs;
        let bound = self.aggregator.settings.count_distinct_bound;
        if !self.state.keys.contains_key(self.key.as_str()) {
            self.state
                .keys
                .insert(self.key.clone(), KeyState::default());
        }
        let Some(entry) = self.state.keys.get_mut(self.key.as_str()) else {
            unreachable!("inserted above")
        };
        let is_new = !entry.windows.contains_key(&start);
        let values = entry
            .windows
            .entry(start)
            .or_insert_with(|| specs.iter().map(initial).collect());
        match update(values, specs, &self.reader, bound, &mut self.scratch) {
            Ok(saturated) => self.state.counters.count_distinct_saturated += saturated,
            Err(rejection) => {
                if is_new {
                    entry.windows.remove(&start);
                }
                if entry.windows.is_empty() {
                    self.state.keys.remove(self.key.as_str());
                }
                return Outcome::Rejected(rejection);
            }
        }
        if is_new {
            self.state
                .closing
                .entry(end)
                .or_default()
                .insert(self.key.clone());
        }
        self.state.max_event_time = Some(
            self.state
                .max_event_time
                .map_or(time, |latest| latest.max(time)),
        );
        let mut emits = Vec::new();
        let mut closed = Vec::new();
        let watermark = self.watermark().unwrap_or(i64::MIN);
        while let Some(first) = self.state.closing.first_entry() {
            if *first.key() > watermark {
                break;
            }
            let (end, keys) = first.remove_entry();
            let size = self.aggregator.window.map_or(0, |window| window.size);
            for key in keys {
                let Some(entry) = self.state.keys.get_mut(&key) else {
                    continue;
                };
                let Some(values) = entry.windows.remove(&(end - size)) else {
                    continue;
                };
                if entry.windows.is_empty() {
                    self.state.keys.remove(&key);
                }
                for rule in &self.aggregator.rules {
                    if holds(rule, &values, &key, &self.aggregator) {
                        emits.push(emit(
                            rule,
                            &values,
                            &key,
                            self.aggregator.group_by.len(),
                            Some((end - size, end)),
                        ));
                    }
                }
                closed.push(WindowResult {
                    key: key_parts(&key, self.aggregator.group_by.len()),
                    start: end - size,
                    end,
                    values: named_values(&self.aggregator, &values),
                });
            }
        }
        self.state.counters.windows_closed += closed.len() as u64;
        self.state.counters.emits += emits.len() as u64;
        Outcome::Applied { emits, closed }
    }
}

/// Applies the line in `reader` to the key `key`'s `entry` and runs the rules.
fn apply_to_entry(
    entry: &mut KeyState,
    aggregator: &Aggregator,
    reader: &LineReader,
    key: &str,
    scratch: &mut String,
    counters: &mut Counters,
) -> Outcome {
    let bound = aggregator.settings.count_distinct_bound;
    match update(&mut entry.values, &aggregator.specs, reader, bound, scratch) {
        Err(rejection) => return Outcome::Rejected(rejection),
        Ok(saturated) => counters.count_distinct_saturated += saturated,
    }
    let mut emits = Vec::new();
    for (index, rule) in aggregator.rules.iter().enumerate() {
        let holds = holds(rule, &entry.values, key, aggregator);
        let bit = 1u64 << index;
        let held = entry.firing & bit != 0;
        if holds && (!held || rule.fire == Fire::Every) {
            emits.push(emit(
                rule,
                &entry.values,
                key,
                aggregator.group_by.len(),
                None,
            ));
        }
        if holds {
            entry.firing |= bit;
        } else {
            entry.firing &= !bit;
        }
    }
    counters.emits += emits.len() as u64;
    Outcome::Applied {
        emits,
        closed: Vec::new(),
    }
}

/// The declared aggregates of `values`, by name.
pub(crate) fn named_values(
    aggregator: &Aggregator,
    values: &[AggregateValue],
) -> Vec<(String, Option<Value>)> {
    aggregator
        .named
        .iter()
        .map(|(name, slot)| (name.clone(), values[*slot].value()))
        .collect()
}

fn initial(spec: &AggregateSpec) -> AggregateValue {
    match spec.function {
        Function::Count => AggregateValue::Count(0),
        Function::Sum => AggregateValue::Sum(Decimal::default()),
        Function::Min => AggregateValue::Min(None),
        Function::Max => AggregateValue::Max(None),
        Function::Last => AggregateValue::Last(None),
        Function::CountDistinct => AggregateValue::Distinct {
            values: Default::default(),
            saturated: false,
        },
    }
}

/// Appends a slot's text (its canonical form: a key part, a distinct value).
fn write_slot(out: &mut String, reader: &LineReader, slot: &Slot) {
    match slot {
        Slot::Number(number) => {
            let _ = write!(out, "{number}");
        }
        Slot::Text(range) => out.push_str(reader.text_of(range)),
        Slot::Time(millis) => out.push_str(&format_time(*millis)),
    }
}

fn slot_value(reader: &LineReader, slot: &Slot) -> Value {
    match slot {
        Slot::Number(number) => Value::Number(*number),
        Slot::Text(range) => Value::Text(reader.text_of(range).to_owned()),
        Slot::Time(millis) => Value::Time(*millis),
    }
}

/// How the slot compares with a value of the same kind.
fn compare(reader: &LineReader, slot: &Slot, value: &Value) -> Ordering {
    match (slot, value) {
        (Slot::Number(a), Value::Number(b)) => a.cmp(b),
        (Slot::Text(range), Value::Text(b)) => reader.text_of(range).cmp(b.as_str()),
        (Slot::Time(a), Value::Time(b)) => a.cmp(b),
        // a field has one type: its values are of one kind
        _ => Ordering::Equal,
    }
}

/// Adds the line in `reader` to `values`; how many `count_distinct` reached the
/// bound. A sum that would overflow changes nothing and rejects the line.
fn update(
    values: &mut [AggregateValue],
    specs: &[AggregateSpec],
    reader: &LineReader,
    bound: u64,
    scratch: &mut String,
) -> Result<u64, Rejection> {
    let field_slot = |spec: &AggregateSpec| spec.field.map(|field| &reader.slots[field]);
    for (value, spec) in values.iter().zip(specs) {
        if let (AggregateValue::Sum(sum), Some(Slot::Number(number))) = (value, field_slot(spec)) {
            if sum.checked_add(*number).is_none() {
                return Err(Rejection {
                    reason: format!("{} would overflow", spec.text),
                    message: format!("{} would overflow: {sum} + {number}", spec.text),
                });
            }
        }
    }
    let mut saturated = 0;
    for (value, spec) in values.iter_mut().zip(specs) {
        let slot = field_slot(spec);
        match (value, slot) {
            (AggregateValue::Count(count), _) => *count += 1,
            (AggregateValue::Sum(sum), Some(Slot::Number(number))) => {
                *sum = sum.checked_add(*number).unwrap_or(*sum);
            }
            (AggregateValue::Min(current), Some(slot))
                if current
                    .as_ref()
                    .is_none_or(|value| compare(reader, slot, value).is_lt()) =>
            {
                *current = Some(slot_value(reader, slot));
            }
            (AggregateValue::Max(current), Some(slot))
                if current
                    .as_ref()
                    .is_none_or(|value| compare(reader, slot, value).is_gt()) =>
            {
                *current = Some(slot_value(reader, slot));
            }
            (AggregateValue::Last(current), Some(slot)) => match (current.as_mut(), slot) {
                (Some(Value::Text(text)), Slot::Text(range)) => {
                    text.clear();
                    text.push_str(reader.text_of(range));
                }
                (_, slot) => *current = Some(slot_value(reader, slot)),
            },
            (
                AggregateValue::Distinct {
                    values,
                    saturated: full,
                },
                Some(slot),
            ) => {
                scratch.clear();
                write_slot(scratch, reader, slot);
                if !values.contains(scratch.as_str()) {
                    if (values.len() as u64) < bound {
                        values.insert(scratch.clone());
                    } else if !*full {
                        *full = true;
                        saturated += 1;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(saturated)
}

/// The `group_by` values of `key` (none without `group_by`).
fn key_parts(key: &str, parts: usize) -> Vec<String> {
    if parts == 0 {
        return Vec::new();
    }
    key.split(KEY_SEPARATOR).map(str::to_owned).collect()
}

/// The `part`th `group_by` value of `key`.
fn key_part(key: &str, part: usize) -> &str {
    key.split(KEY_SEPARATOR).nth(part).unwrap_or("")
}

fn holds(rule: &Rule, values: &[AggregateValue], key: &str, aggregator: &Aggregator) -> bool {
    rule.condition.eval(&|operand: &Operand| match operand {
        Operand::Number(number) => Some(Scalar::Number(*number)),
        Operand::Text(text) => Some(Scalar::Text(text)),
        Operand::Slot(slot) => match &values[*slot] {
            AggregateValue::Count(count) => {
                Some(Scalar::Number(Decimal::from_integer(*count as i64)))
            }
            AggregateValue::Sum(sum) => Some(Scalar::Number(*sum)),
            AggregateValue::Min(value)
            | AggregateValue::Max(value)
            | AggregateValue::Last(value) => value.as_ref().map(|value| match value {
                Value::Number(number) => Scalar::Number(*number),
                Value::Text(text) => Scalar::Text(text),
                Value::Time(millis) => Scalar::Time(*millis),
            }),
            AggregateValue::Distinct { values, .. } => {
                Some(Scalar::Number(Decimal::from_integer(values.len() as i64)))
            }
        },
        Operand::KeyPart(part) => {
            let text = key_part(key, *part);
            match aggregator.fields[aggregator.group_by[*part]].kind {
                FieldType::Integer | FieldType::Decimal => Decimal::parse(text).map(Scalar::Number),
                _ => Some(Scalar::Text(text)),
            }
        }
    })
}

fn emit(
    rule: &Rule,
    values: &[AggregateValue],
    key: &str,
    rule_key_parts: usize,
    window: Option<(i64, i64)>,
) -> Emit {
    let mut text = String::new();
    for piece in &rule.template {
        match piece {
            Piece::Literal(literal) => text.push_str(literal),
            Piece::KeyPart(part) => text.push_str(key_part(key, *part)),
            Piece::Slot(slot) => match values[*slot].value() {
                Some(value) => {
                    let _ = write!(text, "{value}");
                }
                None => text.push_str("null"),
            },
            Piece::WindowStart => text.push_str(&format_time(window.map_or(0, |window| window.0))),
            Piece::WindowEnd => text.push_str(&format_time(window.map_or(0, |window| window.1))),
        }
    }
    Emit {
        rule: rule.name.clone(),
        key: key_parts(key, rule_key_parts),
        text,
        window,
    }
}
