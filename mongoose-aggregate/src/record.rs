//! Reading one line into typed fields: CSV with `csv-core` (quoting, no allocation
//! per line once its buffers have grown) or JSON with `serde_json`. A line that does
//! not read gives a [`Rejection`]: the reason it is counted under, and its message.

use std::ops::Range;

use crate::compile::{Aggregator, Field, TimeFormat};
use crate::decimal::Decimal;
use crate::settings::{FieldType, Format};

/// Why a line was not applied.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rejection {
    /// The reason it is counted under (`amount: not a decimal`, `not enough columns`,
    /// `missing field user.id`): the same for every line with that fault.
    pub reason: String,
    /// The reason with what was found (`amount: not a decimal: "x"`).
    pub message: String,
}

impl Rejection {
    fn new(reason: &str, found: impl std::fmt::Display) -> Self {
        Rejection {
            reason: reason.to_owned(),
            message: format!("{reason}: {found}"),
        }
    }
}

/// A field's value in the line being applied (text borrowed from the reader's buffer).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Slot {
    Number(Decimal),
    Text(Range<usize>),
    Time(i64),
}

/// What a line is.
#[derive(Debug, PartialEq)]
pub(crate) enum Read {
    /// Data: the fields are in [`LineReader::slots`].
    Data,
    /// A CSV header (its columns are the column names).
    Header,
}

/// The reader of lines, its buffers kept from line to line.
#[derive(Debug)]
pub(crate) struct LineReader {
    csv: csv_core::Reader,
    output: Vec<u8>,
    ends: Vec<usize>,
    /// The fields' values, by field index.
    pub(crate) slots: Vec<Slot>,
    /// The text the slots' ranges are in.
    pub(crate) text: String,
}

impl LineReader {
    pub(crate) fn new(aggregator: &Aggregator) -> Self {
        let csv = csv_core::ReaderBuilder::new()
            .delimiter(aggregator.delimiter)
            .quote(aggregator.quote)
            .build();
        LineReader {
            csv,
            output: vec![0; 256],
            ends: vec![0; aggregator.columns.max(1) + 1],
            slots: Vec::with_capacity(aggregator.fields.len()),
            text: String::with_capacity(256),
        }
    }

    /// The text of a slot.
    pub(crate) fn text_of(&self, range: &Range<usize>) -> &str {
        &self.text[range.clone()]
    }

    /// Reads `line` (without its line ending) into [`Self::slots`].
    pub(crate) fn read(&mut self, aggregator: &Aggregator, line: &[u8]) -> Result<Read, Rejection> {
        self.slots.clear();
        self.text.clear();
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        match aggregator.settings.format {
            Format::Csv => self.read_csv(aggregator, line),
            Format::Json => self.read_json(aggregator, line),
        }
    }

    fn read_csv(&mut self, aggregator: &Aggregator, line: &[u8]) -> Result<Read, Rejection> {
        self.csv.reset();
        let (mut consumed, mut written, mut ended) = (0, 0, 0);
        loop {
            let (result, read, wrote, ends) = self.csv.read_record(
                &line[consumed..],
                &mut self.output[written..],
                &mut self.ends[ended..],
            );
            consumed += read;
            written += wrote;
            ended += ends;
            match result {
                csv_core::ReadRecordResult::InputEmpty => {
                    if consumed < line.len() {
                        continue;
                    }
                    // the end of the line ends the record: read it with no more input
                    let (result, _, wrote, ends) = self.csv.read_record(
                        &[],
                        &mut self.output[written..],
                        &mut self.ends[ended..],
                    );
                    written += wrote;
                    ended += ends;
                    match result {
                        csv_core::ReadRecordResult::OutputFull => {
                            self.output.resize(self.output.len() * 2, 0)
                        }
                        csv_core::ReadRecordResult::OutputEndsFull => {
                            self.ends.resize(self.ends.len() * 2, 0)
                        }
                        _ => break,
                    }
                }
                csv_core::ReadRecordResult::OutputFull => {
                    self.output.resize(self.output.len() * 2, 0)
                }
                csv_core::ReadRecordResult::OutputEndsFull => {
                    self.ends.resize(self.ends.len() * 2, 0)
                }
                csv_core::ReadRecordResult::Record | csv_core::ReadRecordResult::End => break,
            }
        }
        if ended < aggregator.columns {
            return Err(Rejection::new(
                "not enough columns",
                format_args!("{ended} of {}", aggregator.columns),
            ));
        }
        if ended > aggregator.columns {
            return Err(Rejection::new(
                "too many columns",
                format_args!("{ended} for {}", aggregator.columns),
            ));
        }
        let column = |index: usize| {
            let start = if index == 0 { 0 } else { self.ends[index - 1] };
            &self.output[start..self.ends[index]]
        };
        if aggregator.settings.header
            && aggregator
                .settings
                .columns
                .iter()
                .enumerate()
                .all(|(index, name)| column(index) == name.as_bytes())
        {
            return Ok(Read::Header);
        }
        for field in &aggregator.fields {
            let bytes = column(field.column);
            let Ok(text) = std::str::from_utf8(bytes) else {
                return Err(Rejection::new(
                    &format!("{}: not UTF-8", field.name),
                    String::from_utf8_lossy(bytes),
                ));
            };
            let slot = typed(field, text, &mut self.text)?;
            self.slots.push(slot);
        }
        Ok(Read::Data)
    }

    fn read_json(&mut self, aggregator: &Aggregator, line: &[u8]) -> Result<Read, Rejection> {
        let document: serde_json::Value =
            serde_json::from_slice(line).map_err(|error| Rejection::new("not JSON", error))?;
        if !document.is_object() {
            return Err(Rejection::new(
                "not a JSON object",
                "a line is one JSON object",
            ));
        }
        for field in &aggregator.fields {
            let mut value = &document;
            for segment in &field.path {
                value = match value.get(segment) {
                    Some(inner) => inner,
                    None => return Err(Rejection::new(&field.missing, "not in the line")),
                };
            }
            let slot = match value {
                serde_json::Value::String(text) => typed(field, text, &mut self.text)?,
                serde_json::Value::Number(number) => match (field.kind, number.as_i64()) {
                    (FieldType::Integer | FieldType::Decimal, Some(integer)) => {
                        Slot::Number(Decimal::from_integer(integer))
                    }
                    (FieldType::Timestamp, _)
                        if matches!(field.time, TimeFormat::Unix | TimeFormat::UnixMs) =>
                    {
                        typed(field, &number.to_string(), &mut self.text)?
                    }
                    (FieldType::String | FieldType::Decimal, _) => {
                        // a float's shortest round-trip text: `0.1` reads as 0.1 exactly
                        typed(field, &number.to_string(), &mut self.text)?
                    }
                    _ => return Err(Rejection::new(&field.not_typed, number)),
                },
                serde_json::Value::Bool(flag) if field.kind == FieldType::String => {
                    typed(field, if *flag { "true" } else { "false" }, &mut self.text)?
                }
                serde_json::Value::Null => return Err(Rejection::new(&field.missing, "null")),
                other => return Err(Rejection::new(&field.not_typed, other)),
            };
            self.slots.push(slot);
        }
        Ok(Read::Data)
    }
}

/// `text` as `field`'s type; a string is appended to `buffer`.
fn typed(field: &Field, text: &str, buffer: &mut String) -> Result<Slot, Rejection> {
    let refused = || Rejection::new(&field.not_typed, format_args!("{text:?}"));
    match field.kind {
        FieldType::Integer => text
            .trim()
            .parse::<i64>()
            .map(|value| Slot::Number(Decimal::from_integer(value)))
            .map_err(|_| refused()),
        FieldType::Decimal => Decimal::parse(text.trim())
            .map(Slot::Number)
            .ok_or_else(refused),
        FieldType::String => {
            let start = buffer.len();
            buffer.push_str(text);
            Ok(Slot::Text(start..buffer.len()))
        }
        FieldType::Timestamp => parse_time(&field.time, text.trim())
            .map(Slot::Time)
            .ok_or_else(refused),
    }
}

/// `text` in `format` as milliseconds since the epoch.
pub(crate) fn parse_time(format: &TimeFormat, text: &str) -> Option<i64> {
    match format {
        TimeFormat::Rfc3339 => chrono::DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|time| time.timestamp_millis()),
        TimeFormat::Unix => {
            // seconds, with up to 3 decimals: milliseconds exactly
            let seconds = Decimal::parse(text)?;
            let scale = seconds.scale();
            if scale > 3 {
                return None;
            }
            let millis = seconds
                .units()
                .checked_mul(10i128.pow(u32::from(3 - scale)))?;
            i64::try_from(millis).ok()
        }
        TimeFormat::UnixMs => text.parse().ok(),
        TimeFormat::Pattern(pattern, true) => chrono::DateTime::parse_from_str(text, pattern)
            .ok()
            .map(|time| time.timestamp_millis()),
        TimeFormat::Pattern(pattern, false) => chrono::NaiveDateTime::parse_from_str(text, pattern)
            .ok()
            .map(|time| time.and_utc().timestamp_millis()),
    }
}
