//! Checking the settings and compiling them into an [`Aggregator`]: fields by index,
//! aggregates by slot, rules parsed and resolved. Every error names its key path.

use crate::error::AggregateError;
use crate::expr::{parse_aggregate, parse_condition, with_caret, AstOperand, Condition, Operand};
use crate::settings::{AggregateSettings, FieldSpec, FieldType, Fire, Format};

/// How a timestamp field is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TimeFormat {
    Rfc3339,
    Unix,
    UnixMs,
    /// A chrono pattern; true when it has a zone (`%z`, `%:z`).
    Pattern(String, bool),
}

/// A typed field.
#[derive(Clone, Debug)]
pub(crate) struct Field {
    pub(crate) name: String,
    pub(crate) kind: FieldType,
    pub(crate) time: TimeFormat,
    /// With CSV: the column's index; with JSON: the path's segments.
    pub(crate) column: usize,
    pub(crate) path: Vec<String>,
    /// The counted reasons of this field, made once: `amount: not a decimal`.
    pub(crate) not_typed: String,
    pub(crate) missing: String,
}

/// What an aggregate computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Function {
    Count,
    Sum,
    Min,
    Max,
    Last,
    CountDistinct,
}

/// One aggregate slot: a function of a field (none for `count`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AggregateSpec {
    pub(crate) function: Function,
    pub(crate) field: Option<usize>,
    /// `sum(amount)`: its canonical text.
    pub(crate) text: String,
}

/// A piece of a rule's output template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    Literal(String),
    KeyPart(usize),
    Slot(usize),
    WindowStart,
    WindowEnd,
}

/// A compiled rule.
#[derive(Clone, Debug)]
pub(crate) struct Rule {
    pub(crate) name: String,
    pub(crate) condition: Condition,
    pub(crate) template: Vec<Piece>,
    pub(crate) fire: Fire,
}

/// Tumbling windows, in milliseconds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    pub(crate) field: usize,
    pub(crate) size: i64,
    pub(crate) lateness: i64,
}

/// The settings checked and compiled: what [`crate::Aggregate`] applies lines with.
#[derive(Clone, Debug)]
pub struct Aggregator {
    pub(crate) settings: AggregateSettings,
    pub(crate) fields: Vec<Field>,
    pub(crate) columns: usize,
    pub(crate) delimiter: u8,
    pub(crate) quote: u8,
    pub(crate) group_by: Vec<usize>,
    pub(crate) specs: Vec<AggregateSpec>,
    /// The declared aggregates: name and slot, by name.
    pub(crate) named: Vec<(String, usize)>,
    pub(crate) rules: Vec<Rule>,
    pub(crate) window: Option<Window>,
    pub(crate) fingerprint: String,
}

/// The most rules an aggregate holds (their states are bits of a `u64`).
pub const MAX_RULES: usize = 64;

fn one_byte(
    value: &Option<String>,
    default: u8,
    at: &str,
    key: &str,
) -> Result<u8, AggregateError> {
    match value.as_deref() {
        None => Ok(default),
        Some(text) if text.len() == 1 => Ok(text.as_bytes()[0]),
        Some(text) => Err(AggregateError::config(
            format!("{at}.{key}"),
            format!("{text:?} is not one byte: give one ASCII character such as \",\" or \";\" (\"\\t\" for a tab)"),
        )),
    }
}

/// Parses `500ms`, `10s`, `1m`, `1h`, `1d` into milliseconds.
pub(crate) fn parse_duration(text: &str) -> Option<i64> {
    let digits_end = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(digits_end);
    let number: i64 = number.parse().ok()?;
    let unit_ms = match unit.trim() {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    number.checked_mul(unit_ms)
}

fn function_named(name: &str) -> Option<Function> {
    Some(match name {
        "count" => Function::Count,
        "sum" => Function::Sum,
        "min" => Function::Min,
        "max" => Function::Max,
        "last" => Function::Last,
        "count_distinct" => Function::CountDistinct,
        _ => return None,
    })
}

impl Aggregator {
    /// Checks `settings` and compiles them; `at` is the key path of the settings table
    /// in the config (`processors[alerts].settings`), for the errors.
    ///
    /// # Errors
    /// [`AggregateError::Config`] naming the key and what to do; for an expression,
    /// with its column and a caret line.
    pub fn compile(settings: AggregateSettings, at: &str) -> Result<Self, AggregateError> {
        let (delimiter, quote) = match settings.format {
            Format::Csv => {
                if settings.columns.is_empty() {
                    return Err(AggregateError::config(
                        format!("{at}.columns"),
                        "format = \"csv\" needs columns: the names of the line's columns in order",
                    ));
                }
                (
                    one_byte(&settings.delimiter, b',', at, "delimiter")?,
                    one_byte(&settings.quote, b'"', at, "quote")?,
                )
            }
            Format::Json => {
                for (key, given) in [
                    ("columns", !settings.columns.is_empty()),
                    ("delimiter", settings.delimiter.is_some()),
                    ("quote", settings.quote.is_some()),
                    ("header", settings.header),
                ] {
                    if given {
                        return Err(AggregateError::config(
                            format!("{at}.{key}"),
                            "is a csv setting: with format = \"json\" name each field's path instead",
                        ));
                    }
                }
                (b',', b'"')
            }
        };
        let mut fields = Vec::with_capacity(settings.fields.len());
        for (name, spec) in &settings.fields {
            fields.push(compile_field(
                &settings,
                name,
                spec,
                &format!("{at}.fields.{name}"),
            )?);
        }
        let field_index = |name: &str| fields.iter().position(|field| field.name == name);
        let mut group_by = Vec::new();
        for (index, name) in settings.group_by.iter().enumerate() {
            let Some(field) = field_index(name) else {
                return Err(AggregateError::config(
                    format!("{at}.group_by[{index}]"),
                    format!("{name:?} is not a field: declare it in fields"),
                ));
            };
            group_by.push(field);
        }
        let mut compiled = Aggregator {
            columns: settings.columns.len(),
            delimiter,
            quote,
            group_by,
            specs: Vec::new(),
            named: Vec::new(),
            rules: Vec::new(),
            window: None,
            fingerprint: String::new(),
            fields,
            settings: settings.clone(),
        };
        for (name, spec) in &settings.aggregates {
            let key = format!("{at}.aggregates.{name}");
            let parsed = parse_aggregate(spec).map_err(|error| {
                AggregateError::config(&key, with_caret(spec, error.offset, &error.message))
            })?;
            let slot = compiled
                .slot_of(&parsed)
                .map_err(|message| AggregateError::config(&key, with_caret(spec, 0, &message)))?;
            compiled.named.push((name.clone(), slot));
        }
        if let Some(window) = &settings.window {
            compiled.window = Some(compiled.compile_window(window, at)?);
        }
        if settings.rules.len() > MAX_RULES {
            return Err(AggregateError::config(
                format!("{at}.rules"),
                format!("{} rules: at most {MAX_RULES}", settings.rules.len()),
            ));
        }
        for (index, rule) in settings.rules.iter().enumerate() {
            let key = format!("{at}.rules[{index}]");
            let ast = parse_condition(&rule.when).map_err(|error| {
                AggregateError::config(
                    format!("{key}.when"),
                    with_caret(&rule.when, error.offset, &error.message),
                )
            })?;
            let condition = Condition::resolve(&ast, &mut |operand| compiled.operand(operand))
                .map_err(|error| {
                    AggregateError::config(
                        format!("{key}.when"),
                        with_caret(&rule.when, error.offset, &error.message),
                    )
                })?;
            let template = compiled.template(&rule.emit, &format!("{key}.emit"))?;
            compiled.rules.push(Rule {
                name: rule.name.clone(),
                condition,
                template,
                fire: rule.fire,
            });
        }
        // what the state's meaning depends on: its aggregates, what makes a key, and
        // the windows (a state read with another group_by or window would mix keys or
        // windows of another meaning)
        let mut fingerprint = compiled
            .specs
            .iter()
            .map(|spec| spec.text.as_str())
            .collect::<Vec<_>>()
            .join(",");
        if !compiled.settings.group_by.is_empty() {
            fingerprint.push_str(" by ");
            fingerprint.push_str(&compiled.settings.group_by.join(","));
        }
        if let Some(window) = compiled.window {
            let field = &compiled.fields[window.field].name;
            fingerprint.push_str(&format!(" per {}ms of {field}", window.size));
        }
        compiled.fingerprint = fingerprint;
        Ok(compiled)
    }

    /// The settings it was compiled from.
    pub fn settings(&self) -> &AggregateSettings {
        &self.settings
    }

    /// The sink rejected and late lines go to, if one.
    pub fn dead_letter(&self) -> Option<&str> {
        self.settings.dead_letter.as_deref()
    }

    fn compile_window(
        &self,
        window: &crate::settings::WindowSettings,
        at: &str,
    ) -> Result<Window, AggregateError> {
        let field = self
            .fields
            .iter()
            .position(|field| field.name == window.field && field.kind == FieldType::Timestamp)
            .ok_or_else(|| {
                AggregateError::config(
                    format!("{at}.window.field"),
                    format!("{:?} is not a timestamp field: declare it in fields with type = \"timestamp\"", window.field),
                )
            })?;
        let duration = |text: &str, key: &str, zero_ok: bool| {
            parse_duration(text)
                .filter(|ms| *ms > 0 || (zero_ok && *ms == 0))
                .ok_or_else(|| {
                    AggregateError::config(
                        format!("{at}.window.{key}"),
                        format!("{text:?} is not a duration: give a number and a unit, such as 500ms, 10s, 1m, 1h or 1d"),
                    )
                })
        };
        Ok(Window {
            field,
            size: duration(&window.size, "size", false)?,
            lateness: match &window.allowed_lateness {
                Some(text) => duration(text, "allowed_lateness", true)?,
                None => 0,
            },
        })
    }

    /// The slot of `count` or `sum(field)`, added if new.
    fn slot_of(&mut self, parsed: &AstOperand) -> Result<usize, String> {
        let (function_name, field_name) = match parsed {
            AstOperand::Name(name, _) => (name.as_str(), None),
            AstOperand::Call(name, field, _) => (name.as_str(), Some(field.as_str())),
            _ => return Err("an aggregate is `count` or a call such as sum(amount)".to_owned()),
        };
        let function = function_named(function_name).ok_or_else(|| {
            format!("unknown function `{function_name}`: use count, sum, min, max, last or count_distinct")
        })?;
        let field = match (function, field_name) {
            (Function::Count, None) => None,
            (Function::Count, Some(_)) => {
                return Err("count takes no field: write `count`".to_owned())
            }
            (_, None) => {
                return Err(format!(
                    "{function_name} needs a field: write {function_name}(field)"
                ))
            }
            (_, Some(name)) => {
                let index = self
                    .fields
                    .iter()
                    .position(|field| field.name == name)
                    .ok_or_else(|| format!("`{name}` is not a field: declare it in fields"))?;
                let kind = self.fields[index].kind;
                if function == Function::Sum
                    && !matches!(kind, FieldType::Integer | FieldType::Decimal)
                {
                    return Err(format!(
                        "sum needs an integer or decimal field; `{name}` is a {kind:?}"
                    )
                    .to_lowercase());
                }
                Some(index)
            }
        };
        let text = match field {
            Some(index) => format!("{function_name}({})", self.fields[index].name),
            None => function_name.to_owned(),
        };
        if let Some(slot) = self.specs.iter().position(|spec| spec.text == text) {
            return Ok(slot);
        }
        self.specs.push(AggregateSpec {
            function,
            field,
            text,
        });
        Ok(self.specs.len() - 1)
    }

    /// What a name or a call in a condition reads.
    fn operand(&mut self, parsed: &AstOperand) -> Result<Operand, String> {
        if let AstOperand::Name(name, _) = parsed {
            if let Some((_, slot)) = self.named.iter().find(|(declared, _)| declared == name) {
                return Ok(Operand::Slot(*slot));
            }
            if let Some(part) = self
                .group_by
                .iter()
                .position(|field| self.fields[*field].name == *name)
            {
                return Ok(Operand::KeyPart(part));
            }
            if name != "count" {
                return Err(format!(
                    "`{name}` is not an aggregate, `count` or a group_by field: declare it in aggregates, or write a call such as sum({name})"
                ));
            }
        }
        self.slot_of(parsed).map(Operand::Slot)
    }

    /// Parses an output template: `{name}` is a group field, an aggregate name, or in
    /// a window `window_start`/`window_end`; `{{` and `}}` are braces.
    fn template(&self, text: &str, at: &str) -> Result<Vec<Piece>, AggregateError> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(at_brace) = rest.find(['{', '}']) {
            literal.push_str(&rest[..at_brace]);
            let after = &rest[at_brace..];
            if after.starts_with("{{") || after.starts_with("}}") {
                literal.push_str(&after[..1]);
                rest = &after[2..];
                continue;
            }
            let offset = text.len() - after.len();
            let Some(close) = after.find('}').filter(|_| after.starts_with('{')) else {
                return Err(AggregateError::config(
                    at,
                    with_caret(
                        text,
                        offset,
                        "an unmatched brace (write {{ or }} for a brace)",
                    ),
                ));
            };
            let name = after[1..close].trim();
            let piece =
                if let Some((_, slot)) = self.named.iter().find(|(declared, _)| declared == name) {
                    Piece::Slot(*slot)
                } else if let Some(part) = self
                    .group_by
                    .iter()
                    .position(|field| self.fields[*field].name == name)
                {
                    Piece::KeyPart(part)
                } else if self.window.is_some() && name == "window_start" {
                    Piece::WindowStart
                } else if self.window.is_some() && name == "window_end" {
                    Piece::WindowEnd
                } else {
                    return Err(AggregateError::config(
                        at,
                        with_caret(
                            text,
                            offset + 1,
                            &format!("`{name}` is not a group_by field or an aggregate name"),
                        ),
                    ));
                };
            if !literal.is_empty() {
                pieces.push(Piece::Literal(std::mem::take(&mut literal)));
            }
            pieces.push(piece);
            rest = &after[close + 1..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            pieces.push(Piece::Literal(literal));
        }
        Ok(pieces)
    }
}

fn compile_field(
    settings: &AggregateSettings,
    name: &str,
    spec: &FieldSpec,
    at: &str,
) -> Result<Field, AggregateError> {
    let (kind, format, path, column) = match spec {
        FieldSpec::Type(kind) => (*kind, None, None, None),
        FieldSpec::Table(table) => (
            table.kind,
            table.format.clone(),
            table.path.clone(),
            table.column.clone(),
        ),
    };
    let time = match (kind, format.as_deref()) {
        (FieldType::Timestamp, None | Some("rfc3339")) => TimeFormat::Rfc3339,
        (FieldType::Timestamp, Some("unix")) => TimeFormat::Unix,
        (FieldType::Timestamp, Some("unix_ms")) => TimeFormat::UnixMs,
        (FieldType::Timestamp, Some(pattern)) => {
            let items = chrono::format::StrftimeItems::new(pattern);
            if items
                .clone()
                .any(|item| matches!(item, chrono::format::Item::Error))
            {
                return Err(AggregateError::config(
                    format!("{at}.format"),
                    format!("{pattern:?} is not a time format: use rfc3339, unix, unix_ms or a strftime pattern such as %Y-%m-%d %H:%M:%S"),
                ));
            }
            TimeFormat::Pattern(
                pattern.to_owned(),
                pattern.contains("%z") || pattern.contains("%:z"),
            )
        }
        (_, None) => TimeFormat::Rfc3339,
        (_, Some(_)) => {
            return Err(AggregateError::config(
                format!("{at}.format"),
                "only a timestamp field has a format",
            ))
        }
    };
    let column_index = match settings.format {
        Format::Csv => {
            if path.is_some() {
                return Err(AggregateError::config(
                    format!("{at}.path"),
                    "a path is for format = \"json\": with csv, give column",
                ));
            }
            let column = column.as_deref().unwrap_or(name);
            settings.columns.iter().position(|named| named == column).ok_or_else(|| {
                AggregateError::config(at, format!("no column named {column:?} in columns: add it, or give column = \"...\""))
            })?
        }
        Format::Json => {
            if column.is_some() {
                return Err(AggregateError::config(
                    format!("{at}.column"),
                    "a column is for format = \"csv\": with json, give path",
                ));
            }
            0
        }
    };
    let path_text = path.unwrap_or_else(|| name.to_owned());
    if path_text.split('.').any(str::is_empty) {
        return Err(AggregateError::config(
            format!("{at}.path"),
            format!("{path_text:?} has an empty segment: write a.b.c"),
        ));
    }
    let kind_name = match kind {
        FieldType::Integer => "an integer",
        FieldType::Decimal => "a decimal",
        FieldType::String => "a string",
        FieldType::Timestamp => "a timestamp",
    };
    Ok(Field {
        name: name.to_owned(),
        kind,
        time,
        column: column_index,
        not_typed: format!("{name}: not {kind_name}"),
        missing: format!("missing field {path_text}"),
        path: path_text.split('.').map(str::to_owned).collect(),
    })
}
