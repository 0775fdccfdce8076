//! `GET /feeds/{feed}/tap` and `GET /sinks/{sink}/tap`: a live sample of a feed's
//! published items or a sink's outputs, streamed as JSON Lines (chunked) until
//! `?limit=N` records were sent, the client goes away, or [`TAP_STREAM_MAX`] passed
//! (then the last line says `"end":"renew"` and `mongoose tap` attaches again).
//!
//! The lines, in order: one `{"tapping":"feed"|"sink","name":..,"capacity":..}` once
//! the tap is attached; per record `{"feed":..,"sequence":..,"epoch":..,"lane":..,
//! "position":..,"text":..,"cut":..}` (a sink's: `"sink"`, the input's `"feed"`,
//! `"index"` and `"attempt"` instead of the sequence); about once a second, and last,
//! `{"shown":N,"dropped":D}` (with `"end":"limit"|"renew"` on the last): `dropped`
//! counts the records dropped *from the tap* because this client did not keep up.
//! The pipeline never waits for a tap: a slow client only loses tap records.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use mongoose_core::tap::{TapReceiver, TapRecord};
use serde::Deserialize;
use serde_json::json;
use tracing::info;

use crate::server::{Server, TapRefused};

use super::auth::error_response;

/// How long one tap stream lasts before it ends with `"end":"renew"` (below the admin
/// connection's age limit, [`super::MAX_CONNECTION_AGE`]).
pub const TAP_STREAM_MAX: Duration = Duration::from_secs(100);

/// The unread records a tap holds by default (`?capacity=` up to
/// [`TAP_CAPACITY_MAX`]); more are dropped from the tap and counted.
pub const TAP_CAPACITY_DEFAULT: usize = 1024;

/// The most unread records a tap may hold.
pub const TAP_CAPACITY_MAX: usize = 65_536;

/// How often the drop count is sent while records flow or not.
const SUMMARY_EVERY: Duration = Duration::from_secs(1);

/// How long the pump sleeps when the tap is empty.
const IDLE: Duration = Duration::from_millis(20);

/// The largest chunk the pump sends at once.
const CHUNK_BYTES: usize = 64 * 1024;

/// The query of a tap route.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TapQuery {
    limit: Option<u64>,
    capacity: Option<usize>,
}

/// What is tapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Point {
    Feed,
    Sink,
}

impl Point {
    fn word(self) -> &'static str {
        match self {
            Point::Feed => "feed",
            Point::Sink => "sink",
        }
    }
}

pub(super) async fn tap_feed(
    State(server): State<Server>,
    Path(feed): Path<String>,
    query: Result<Query<TapQuery>, QueryRejection>,
) -> Response {
    tap(&server, Point::Feed, feed, query)
}

pub(super) async fn tap_sink(
    State(server): State<Server>,
    Path(sink): Path<String>,
    query: Result<Query<TapQuery>, QueryRejection>,
) -> Response {
    tap(&server, Point::Sink, sink, query)
}

/// Attaches a tap to the feed or sink `name` and streams what it shows.
fn tap(
    server: &Server,
    point: Point,
    name: String,
    query: Result<Query<TapQuery>, QueryRejection>,
) -> Response {
    let query = match query {
        Ok(Query(query)) => query,
        Err(rejection) => return bad_query(&rejection),
    };
    let capacity = capacity(&query);
    let attached = match point {
        Point::Feed => server.tap_feed(&name, capacity),
        Point::Sink => server.tap_sink(&name, capacity),
    };
    stream(attached, point, name, capacity, query.limit)
}

fn bad_query(rejection: &QueryRejection) -> Response {
    error_response(
        StatusCode::BAD_REQUEST,
        format!("{}: a tap takes ?limit=N (records, then the stream ends) and ?capacity=C (unread records it holds, 1 to {TAP_CAPACITY_MAX})", rejection.body_text()),
    )
}

fn capacity(query: &TapQuery) -> usize {
    query
        .capacity
        .unwrap_or(TAP_CAPACITY_DEFAULT)
        .clamp(1, TAP_CAPACITY_MAX)
}

fn stream(
    attached: Result<TapReceiver, TapRefused>,
    point: Point,
    name: String,
    capacity: usize,
    limit: Option<u64>,
) -> Response {
    let tap = match attached {
        Ok(tap) => tap,
        Err(TapRefused::Unknown(why)) => return error_response(StatusCode::NOT_FOUND, why),
        Err(TapRefused::Unavailable(why)) => return error_response(StatusCode::CONFLICT, why),
    };
    info!(point = point.word(), name = %name, capacity, limit, "a tap attached");
    let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(4);
    tokio::spawn(pump(tap, point, name, capacity, limit, sender));
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(Chunks(receiver)),
    )
        .into_response()
}

/// The response body: the chunks the pump sends.
struct Chunks(tokio::sync::mpsc::Receiver<Bytes>);

impl futures_core::Stream for Chunks {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|chunk| chunk.map(Ok))
    }
}

/// Moves the tap's records into the response, a chunk at a time. While the client
/// does not read, `send` waits, the tap fills and its records are dropped (counted):
/// the pipeline never waits. Ends at the limit, at [`TAP_STREAM_MAX`], or when the
/// client went away (the tap is detached when `tap` is dropped).
async fn pump(
    tap: TapReceiver,
    point: Point,
    name: String,
    capacity: usize,
    limit: Option<u64>,
    sender: tokio::sync::mpsc::Sender<Bytes>,
) {
    let started = Instant::now();
    let mut first =
        json!({ "tapping": point.word(), "name": name, "capacity": capacity }).to_string();
    first.push('\n');
    if sender.send(Bytes::from(first)).await.is_err() {
        return;
    }
    let mut shown = 0u64;
    let mut summarized = Instant::now();
    loop {
        let mut chunk = String::new();
        let mut received = false;
        while chunk.len() < CHUNK_BYTES && limit.is_none_or(|limit| shown < limit) {
            let Some(record) = tap.try_recv() else {
                break;
            };
            received = true;
            shown += 1;
            chunk.push_str(&record_line(point, &name, &record));
            chunk.push('\n');
        }
        let end = if limit.is_some_and(|limit| shown >= limit) {
            Some("limit")
        } else if started.elapsed() >= TAP_STREAM_MAX {
            Some("renew")
        } else {
            None
        };
        if end.is_some() || summarized.elapsed() >= SUMMARY_EVERY {
            let mut summary = json!({ "shown": shown, "dropped": tap.dropped() });
            if let Some(end) = end {
                summary["end"] = json!(end);
            }
            chunk.push_str(&summary.to_string());
            chunk.push('\n');
            summarized = Instant::now();
        }
        if !chunk.is_empty() && sender.send(Bytes::from(chunk)).await.is_err() {
            break;
        }
        if end.is_some() {
            break;
        }
        if !received {
            tokio::time::sleep(IDLE).await;
        }
    }
    info!(point = point.word(), name = %name, shown, dropped = tap.dropped(), "a tap detached");
}

/// One record as a JSON line (without the newline).
fn record_line(point: Point, name: &str, record: &TapRecord) -> String {
    let epoch = record.epoch.map(|epoch| epoch.0);
    match (point, &record.output) {
        (Point::Sink, Some((feed, index))) => json!({
            "sink": name,
            "feed": &**feed,
            "epoch": epoch,
            "lane": record.lane,
            "position": record.position,
            "index": index,
            "attempt": record.attempt,
            "text": record.text,
            "cut": record.cut,
        }),
        _ => json!({
            "feed": name,
            "sequence": record.sequence,
            "epoch": epoch,
            "lane": record.lane,
            "position": record.position,
            "text": record.text,
            "cut": record.cut,
        }),
    }
    .to_string()
}
