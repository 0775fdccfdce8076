//! The built-in processor kind `forward`: copies each line of a file feed to a sink,
//! optionally keeping or dropping lines by a regular expression and rewriting them
//! through a template, so file -> file and file -> HTTP need no Rust.
//!
//! ```toml
//! [[groups.processors]]
//! name = "copy"
//! kind = "forward"
//! settings = { feed = "lines", sink = "out", keep = "ERROR|WARN", drop = "healthcheck", template = "{path}:{position} {line}" }
//! ```
//!
//! | setting | meaning |
//! |---|---|
//! | `feed` | the file feed to read (required) |
//! | `sink` | the `[[sinks]]` entry to write to (required) |
//! | `keep` | only lines matching this regular expression are forwarded |
//! | `drop` | lines matching this regular expression are not forwarded (after `keep`) |
//! | `template` | what is written for a line: `{line}`, `{feed}`, `{path}` (the file), `{epoch}`, `{lane}`, `{position}` (the byte offset after the line); `{{` and `}}` are braces. Default: the line as read |
//!
//! Each output is keyed by its line (feed, epoch, lane, position), and the line's
//! position is committed only once the output is published, so with the file sink a
//! `kill -9` at any moment gives every output line exactly once. The file sink's record
//! of what it holds is reported to the feed's source
//! ([`Processor::written_positions`]): a source whose pointer is lost, damaged or another
//! input's resumes after the last line written, under its epoch, instead of reading the
//! file again under a new epoch (which would write every line a second time). When the sink's queue
//! is full the processor is busy ([`ProcessorError::busy`]): the line is offered again
//! a little later and the feed's queue fills, which pauses the source; nothing is
//! skipped.

use mongoose_core::{DeliveryContext, Processor, ProcessorError, StartContext};
use mongoose_sink::{SendError, SinkWriter};
use mongoose_source_file::Line;
use regex::bytes::Regex;
use serde::Deserialize;

use crate::server::{ProcessorContext, ServerBuilder, SettingsCheck, SettingsError};

/// The `forward` kind's settings.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardSettings {
    /// The file feed to read.
    pub feed: String,
    /// The sink to write to.
    pub sink: String,
    /// Only lines matching this are forwarded.
    #[serde(default)]
    pub keep: Option<String>,
    /// Lines matching this are not forwarded.
    #[serde(default)]
    pub drop: Option<String>,
    /// What is written for a line (see the module documentation).
    #[serde(default)]
    pub template: Option<String>,
}

/// One piece of a template.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(Vec<u8>),
    Line,
    Feed,
    Path,
    Epoch,
    Lane,
    Position,
}

/// A parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Template(Vec<Piece>);

impl Template {
    fn parse(text: &str) -> Result<Self, String> {
        let mut pieces = Vec::new();
        let mut literal = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find(['{', '}']) {
            literal.extend_from_slice(&rest.as_bytes()[..at]);
            let tail = &rest[at..];
            if tail.starts_with("{{") || tail.starts_with("}}") {
                literal.push(tail.as_bytes()[0]);
                rest = &tail[2..];
                continue;
            }
            if tail.starts_with('}') {
                return Err(format!(
                    "a lone '}}' at byte {} of the template: write '}}}}' for a brace",
                    text.len() - tail.len()
                ));
            }
            let Some(end) = tail.find('}') else {
                return Err(
                    "a '{' without its '}' in the template: write '{{' for a brace".to_owned(),
                );
            };
            let piece = match &tail[1..end] {
                "line" => Piece::Line,
                "feed" => Piece::Feed,
                "path" => Piece::Path,
                "epoch" => Piece::Epoch,
                "lane" => Piece::Lane,
                "position" => Piece::Position,
                other => {
                    return Err(format!(
                        "unknown placeholder {{{other}}} in the template: known are {{line}}, {{feed}}, {{path}}, {{epoch}}, {{lane}}, {{position}}"
                    ))
                }
            };
            if !literal.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut literal)));
            }
            pieces.push(piece);
            rest = &tail[end + 1..];
        }
        literal.extend_from_slice(rest.as_bytes());
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Template(pieces))
    }

    fn render(&self, line: &Line, out: &mut Vec<u8>) {
        let delivery = DeliveryContext::current();
        for piece in &self.0 {
            match piece {
                Piece::Text(text) => out.extend_from_slice(text),
                Piece::Line => out.extend_from_slice(line.as_bytes()),
                Piece::Path => out.extend_from_slice(line.path().as_os_str().as_encoded_bytes()),
                Piece::Feed => {
                    if let Some(delivery) = &delivery {
                        out.extend_from_slice(delivery.feed().as_bytes());
                    }
                }
                Piece::Epoch => {
                    if let Some(delivery) = &delivery {
                        out.extend_from_slice(delivery.epoch().0.to_string().as_bytes());
                    }
                }
                Piece::Lane => {
                    if let Some(delivery) = &delivery {
                        out.extend_from_slice(delivery.position().lane.to_string().as_bytes());
                    }
                }
                Piece::Position => {
                    if let Some(delivery) = &delivery {
                        out.extend_from_slice(delivery.position().offset.to_string().as_bytes());
                    }
                }
            }
        }
    }
}

/// The compiled settings.
struct Compiled {
    keep: Option<Regex>,
    drop: Option<Regex>,
    template: Option<Template>,
}

fn compile(settings: &ForwardSettings) -> Result<Compiled, SettingsError> {
    let regex =
        |key: &'static str, text: &Option<String>| -> Result<Option<Regex>, SettingsError> {
            text.as_deref()
                .map(|text| {
                    Regex::new(text).map_err(|error| {
                        SettingsError::at(key, format!("not a regular expression: {error}"))
                    })
                })
                .transpose()
        };
    Ok(Compiled {
        keep: regex("keep", &settings.keep)?,
        drop: regex("drop", &settings.drop)?,
        template: settings
            .template
            .as_deref()
            .map(Template::parse)
            .transpose()
            .map_err(|message| SettingsError::at("template", message))?,
    })
}

/// Copies lines of a feed to a sink.
pub struct Forward {
    feed: String,
    writer: SinkWriter,
    compiled: Compiled,
}

impl std::fmt::Debug for Forward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forward")
            .field("feed", &self.feed)
            .field("sink", &self.writer.sink())
            .finish_non_exhaustive()
    }
}

impl Forward {
    fn on_line(&mut self, line: &Line) -> Result<(), ProcessorError> {
        let bytes = line.as_bytes();
        if let Some(keep) = &self.compiled.keep {
            if !keep.is_match(bytes) {
                return Ok(());
            }
        }
        if let Some(drop) = &self.compiled.drop {
            if drop.is_match(bytes) {
                return Ok(());
            }
        }
        let written = match &self.compiled.template {
            Some(template) => self
                .writer
                .write_with(|payload| template.render(line, payload)),
            None => self
                .writer
                .write_with(|payload| payload.extend_from_slice(bytes)),
        };
        match written {
            Ok(_) => Ok(()),
            Err(error @ SendError::Full { .. }) => Err(ProcessorError::busy(error.to_string())),
            Err(error) => Err(ProcessorError::new(error.to_string())),
        }
    }
}

impl Processor for Forward {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        let feed = self.feed.clone();
        context.subscribe(&feed, Forward::on_line)
    }

    fn retry_safe(&self) -> bool {
        // a failed write took nothing: the line can simply be offered again
        true
    }

    fn written_positions(&self) -> Vec<mongoose_core::SavedPosition> {
        // a line makes at most one output: the last line the sink holds is done. A
        // source whose pointer is lost resumes there under that epoch, so the lines
        // already written are not written again under a new one (seeds 1796179446144,
        // 1796179446274, 1796542670070)
        self.writer.written_positions(&self.feed)
    }
}

fn check(check: &SettingsCheck<'_>) -> Result<(), SettingsError> {
    let settings: ForwardSettings = check.settings()?;
    check.feed("feed", &settings.feed)?;
    check.sink("sink", &settings.sink)?;
    compile(&settings).map(|_| ())
}

fn build(context: &ProcessorContext<'_>) -> Result<Box<dyn Processor>, String> {
    let settings: ForwardSettings = context.settings()?;
    let compiled = compile(&settings).map_err(|error| error.to_string())?;
    Ok(Box::new(Forward {
        writer: context.sink(&settings.sink)?,
        feed: settings.feed,
        compiled,
    }))
}

/// Registers the built-in kind `forward` (every server builder has it).
pub(crate) fn register(builder: ServerBuilder) -> ServerBuilder {
    builder.processor_kind_checked("forward", check, build)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_parses_placeholders_and_escaped_braces() {
        let template = Template::parse("{{{feed}}} {line} at {position}").expect("parsed");
        assert_eq!(
            template.0,
            vec![
                Piece::Text(b"{".to_vec()),
                Piece::Feed,
                Piece::Text(b"} ".to_vec()),
                Piece::Line,
                Piece::Text(b" at ".to_vec()),
                Piece::Position,
            ]
        );
        assert!(Template::parse("{nope}").unwrap_err().contains("{nope}"));
        assert!(Template::parse("a } b").unwrap_err().contains("lone"));
        assert!(Template::parse("{line").unwrap_err().contains("without"));
    }
}
