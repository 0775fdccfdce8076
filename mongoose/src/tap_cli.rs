//! `mongoose tap --feed F | --sink S [--limit N]`: a live sample of a running server's
//! feed items or sink outputs over the admin API (`GET /feeds/{feed}/tap`,
//! `GET /sinks/{sink}/tap`, JSON Lines), printed one line per record until `--limit`
//! records or Ctrl-C, then how many were shown and how many the tap dropped (records
//! this client did not take in time: the pipeline lost none of them).

use mongoose_server::{admin, cli, ServerError};
use std::io::BufRead;

use crate::status_cli::AdminTarget;

/// What to tap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TapPoint {
    /// A feed's published items.
    Feed(String),
    /// The outputs a sink is given.
    Sink(String),
}

/// How the records are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapFormat {
    /// One readable line per record.
    Text,
    /// The admin API's JSON line per record.
    Json,
}

/// What one tap run saw.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TapTotals {
    /// Records printed.
    pub shown: u64,
    /// Records the server dropped from the tap (this client was slow).
    pub dropped: u64,
}

/// Runs the tap until `limit` records, a signal (`stop`), or the server ends the
/// stream; prints the records and returns the totals.
///
/// # Errors
/// The admin API cannot be reached, refused the token, or knows no such feed or sink.
pub fn tap(
    target: &AdminTarget,
    point: &TapPoint,
    limit: Option<u64>,
    format: TapFormat,
    stop: &dyn Fn() -> bool,
) -> Result<TapTotals, ServerError> {
    let token = match &target.token_file {
        Some(path) => Some(
            std::fs::read_to_string(path).map_err(|error| ServerError::Io {
                context: format!("cannot read the token file {}", path.display()),
                error,
            })?,
        ),
        None => None,
    };
    let mut totals = TapTotals::default();
    // a stream ends after the server's TAP_STREAM_MAX with "renew": attach again
    loop {
        let left = limit.map(|limit| limit.saturating_sub(totals.shown));
        if left == Some(0) || stop() {
            return Ok(totals);
        }
        let ended = one_stream(
            target,
            point,
            left,
            token.as_deref(),
            format,
            stop,
            &mut totals,
        )?;
        if ended.as_deref() != Some("renew") {
            return Ok(totals);
        }
    }
}

/// One stream; its `end` (`limit`, `renew`), or `None` when it stopped otherwise.
fn one_stream(
    target: &AdminTarget,
    point: &TapPoint,
    limit: Option<u64>,
    token: Option<&str>,
    format: TapFormat,
    stop: &dyn Fn() -> bool,
    totals: &mut TapTotals,
) -> Result<Option<String>, ServerError> {
    let address = &target.address;
    let path = match point {
        TapPoint::Feed(feed) => format!("/feeds/{}/tap", encode(feed)),
        TapPoint::Sink(sink) => format!("/sinks/{}/tap", encode(sink)),
    };
    let path = match limit {
        Some(limit) => format!("{path}?limit={limit}"),
        None => path,
    };
    let url = format!("http://{address}{path}");
    let reader = std::io::BufReader::new(admin::get_stream_with_token(address, &path, token)?);
    let mut out = crate::stdout::stdout();
    let dropped_before = totals.dropped;
    for line in reader.lines() {
        if stop() {
            return Ok(None);
        }
        let line = line.map_err(|error| {
            ServerError::State(format!("the tap stream of {url} broke: {error}"))
        })?;
        let Ok(record) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if record.get("tapping").is_some() {
            continue;
        }
        if let Some(dropped) = record.get("dropped").and_then(serde_json::Value::as_u64) {
            totals.dropped = dropped_before + dropped;
            if let Some(end) = record["end"].as_str() {
                return Ok(Some(end.to_owned()));
            }
            continue;
        }
        totals.shown += 1;
        use std::io::Write as _;
        let _ = match format {
            TapFormat::Json => writeln!(out, "{line}"),
            TapFormat::Text => writeln!(out, "{}", text_line(&record)),
        };
        let _ = out.flush();
    }
    Ok(None)
}

/// A path segment with the characters that would change the path encoded.
fn encode(segment: &str) -> String {
    mongoose_audit::capture::encode_component(segment)
}

/// One record, readable: `feed lines #5 epoch 3 at 0:1234 | text` or `sink out <-
/// lines epoch 3 at 0:1234 #0 | text`, and how much was cut.
pub fn text_line(record: &serde_json::Value) -> String {
    let epoch = match record["epoch"].as_u64() {
        Some(epoch) => format!("epoch {epoch}"),
        None => "no position".to_owned(),
    };
    let at = format!(
        "{}:{}",
        record["lane"].as_u64().unwrap_or_default(),
        record["position"].as_u64().unwrap_or_default()
    );
    let text = record["text"].as_str().unwrap_or_default();
    let cut = match record["cut"].as_u64().unwrap_or_default() {
        0 => String::new(),
        bytes => format!(" [+{bytes} bytes cut]"),
    };
    match record["sink"].as_str() {
        Some(sink) => {
            let attempt = match record["attempt"].as_u64().unwrap_or_default() {
                0 => String::new(),
                attempt => format!(" attempt {}", attempt + 1),
            };
            format!(
                "sink {sink} <- {} {epoch} at {at} output {}{attempt} | {text}{cut}",
                record["feed"].as_str().unwrap_or("-"),
                record["index"].as_u64().unwrap_or_default(),
            )
        }
        None => format!(
            "feed {} #{} {epoch} at {at} | {text}{cut}",
            record["feed"].as_str().unwrap_or_default(),
            record["sequence"].as_u64().unwrap_or_default(),
        ),
    }
}

/// `mongoose tap`: the records, then the totals on stderr; 0 when the tap ran.
pub fn run(
    target: &AdminTarget,
    point: &TapPoint,
    limit: Option<u64>,
    format: TapFormat,
) -> Result<u8, (u8, ServerError)> {
    let failed = |error| (cli::EXIT_FAILED, error);
    let signals = cli::Signals::install().map_err(failed)?;
    let totals = tap(target, point, limit, format, &|| signals.received()).map_err(failed)?;
    let what = match point {
        TapPoint::Feed(feed) => format!("feed {feed}"),
        TapPoint::Sink(sink) => format!("sink {sink}"),
    };
    eprintln!(
        "tap of {what}: {} shown, {} dropped from the tap (this client did not keep up; the pipeline lost none of them)",
        totals.shown, totals.dropped
    );
    Ok(cli::EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_as_one_line() {
        let feed = serde_json::json!({"feed":"lines","sequence":5,"epoch":3,"lane":0,"position":12,"text":"hello","cut":0});
        assert_eq!(text_line(&feed), "feed lines #5 epoch 3 at 0:12 | hello");
        let sink = serde_json::json!({"sink":"out","feed":"lines","epoch":3,"lane":1,"position":12,"index":0,"attempt":1,"text":"hi","cut":7});
        assert_eq!(
            text_line(&sink),
            "sink out <- lines epoch 3 at 1:12 output 0 attempt 2 | hi [+7 bytes cut]"
        );
    }
}
