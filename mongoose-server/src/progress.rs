//! What a long run tells while it runs: every `progress_interval_seconds` a line at
//! INFO per feed (events/s and bytes/s since the last line, lag, state) and per sink
//! (outputs/s, queued, held, waiting for a retry); and the latency histograms of
//! `/metrics` ([`crate::metrics`]), from sampled positions.
//!
//! The latencies are measured off the hot path: at each observation (the run loop's,
//! every 20 ms) the [`Observer`] notes each subscriber queue's position and each sink's
//! admitted count with the time; when a later observation finds the queue dispatched
//! (the sink finished) past a noted mark, it records the time since; what was admitted
//! and done between two observations is recorded at the interval between them (an
//! upper bound). A histogram's resolution is thus the observation interval, and
//! nothing is added per event.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use mongoose_delivery::StatusReport;
use mongoose_sink::SinkStatus;
use tracing::info;

/// The most marks waiting per queue or sink: past it, no new mark is taken until the
/// oldest is reached (a stalled queue holds no more memory than this).
const MAX_MARKS: usize = 256;

/// Marks of one queue or sink: (count at the mark, when).
struct Marks {
    waiting: VecDeque<(u64, Instant)>,
    last: u64,
    /// When `last` was seen (first: when the observer began).
    last_at: Instant,
    histogram: metrics::Histogram,
}

impl Marks {
    fn new(histogram: metrics::Histogram, since: Instant) -> Self {
        Marks {
            waiting: VecDeque::new(),
            last: 0,
            last_at: since,
            histogram,
        }
    }

    /// Records the marks `done` has reached, then takes a mark at `admitted` when it
    /// moved on.
    fn advance(&mut self, admitted: u64, done: u64, now: Instant) {
        if admitted < self.last {
            // counted again from 0 (a queue made anew): the old marks mean nothing
            self.waiting.clear();
        }
        while let Some(&(mark, at)) = self.waiting.front() {
            if done < mark {
                break;
            }
            self.histogram
                .record(now.saturating_duration_since(at).as_secs_f64());
            self.waiting.pop_front();
        }
        if admitted > self.last && done >= admitted && self.waiting.is_empty() {
            // what was admitted since the last observation is done already: it came and
            // went within one interval, recorded at the interval (an upper bound), so a
            // fast path still shows in the histogram instead of measuring nothing
            self.histogram
                .record(now.saturating_duration_since(self.last_at).as_secs_f64());
        }
        if admitted > done && admitted > self.last && self.waiting.len() < MAX_MARKS {
            self.waiting.push_back((admitted, now));
        }
        self.last = admitted;
        self.last_at = now;
    }
}

/// Counts at the last progress line, for the rates.
#[derive(Clone, Copy, Default)]
struct Seen {
    events: u64,
    bytes: u64,
}

/// Follows a run's status: progress lines and latency histograms
/// ([`Observer::observe`], called by the run loop with each status it reads).
pub struct Observer {
    interval: Option<Duration>,
    /// When the observer was made (the run's start): the first interval's beginning.
    began: Instant,
    last_line: Instant,
    feeds: HashMap<String, Seen>,
    sinks: HashMap<String, u64>,
    queue_marks: HashMap<String, Marks>,
    sink_marks: HashMap<String, Marks>,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

/// The bytes a feed's input files were read (or committed) to, summed.
fn bytes_of(feed: &mongoose_delivery::FeedStatus) -> u64 {
    feed.files.iter().map(|file| file.committed).sum()
}

fn rate(now: u64, then: u64, seconds: f64) -> f64 {
    if seconds <= 0.0 {
        return 0.0;
    }
    // a count that went back (a rotated file read from 0) gives no rate
    (now.saturating_sub(then) as f64 / seconds * 10.0).round() / 10.0
}

impl Observer {
    /// An observer logging progress every `interval_seconds` (0: never). With
    /// `install_metrics` (a server with an admin API, so a `/metrics`) it installs
    /// the Prometheus recorder now, so the histograms record from the start; without,
    /// an embedder's own recorder (if any) gets them.
    pub fn new(interval_seconds: u64, install_metrics: bool) -> Self {
        if install_metrics {
            crate::metrics::prometheus();
        }
        Observer {
            interval: (interval_seconds > 0).then(|| Duration::from_secs(interval_seconds)),
            began: Instant::now(),
            last_line: Instant::now(),
            feeds: HashMap::new(),
            sinks: HashMap::new(),
            queue_marks: HashMap::new(),
            sink_marks: HashMap::new(),
        }
    }

    /// Logs progress every `interval_seconds` from now on (0: never; a reload).
    pub fn set_interval(&mut self, interval_seconds: u64) {
        self.interval = (interval_seconds > 0).then(|| Duration::from_secs(interval_seconds));
    }

    /// Takes one observation: advances the latency marks, and logs the progress lines
    /// when the interval passed.
    pub fn observe(&mut self, report: &StatusReport, sinks: &[SinkStatus]) {
        let now = Instant::now();
        for feed in &report.feeds {
            for queue in &feed.subscribers {
                if !self.queue_marks.contains_key(&queue.queue) {
                    let histogram = metrics::histogram!("mongoose_feed_latency_seconds", "feed" => feed.feed.clone());
                    self.queue_marks
                        .insert(queue.queue.clone(), Marks::new(histogram, self.began));
                }
                if let Some(marks) = self.queue_marks.get_mut(&queue.queue) {
                    marks.advance(queue.position, queue.dispatched, now);
                }
            }
        }
        for sink in sinks {
            if !self.sink_marks.contains_key(&sink.name) {
                let histogram = metrics::histogram!("mongoose_sink_latency_seconds", "sink" => sink.name.clone());
                self.sink_marks
                    .insert(sink.name.clone(), Marks::new(histogram, self.began));
            }
            let over = sink.published + sink.expired + sink.lost;
            let admitted = over + sink.queued + sink.held_count;
            if let Some(marks) = self.sink_marks.get_mut(&sink.name) {
                marks.advance(admitted, over, now);
            }
        }
        let Some(interval) = self.interval else {
            return;
        };
        let elapsed = now.saturating_duration_since(self.last_line);
        if elapsed < interval {
            return;
        }
        self.last_line = now;
        self.log(report, sinks, elapsed.as_secs_f64());
    }

    fn log(&mut self, report: &StatusReport, sinks: &[SinkStatus], seconds: f64) {
        for feed in &report.feeds {
            let seen = self.feeds.get(&feed.feed).copied().unwrap_or_default();
            let bytes = bytes_of(feed);
            let lag_events: u64 = feed
                .subscribers
                .iter()
                .map(|queue| queue.position.saturating_sub(queue.dispatched))
                .sum();
            let lag_bytes: u64 = feed.files.iter().map(|file| file.lag).sum();
            info!(
                feed = %feed.feed,
                state = %feed.state,
                events_per_sec = rate(feed.sequence, seen.events, seconds),
                bytes_per_sec = rate(bytes, seen.bytes, seconds),
                published = feed.sequence,
                lag_events,
                lag_bytes,
                settled = feed.settled,
                stalled = feed.stalled.as_deref().unwrap_or("-"),
                "progress: feed"
            );
            self.feeds.insert(
                feed.feed.clone(),
                Seen {
                    events: feed.sequence,
                    bytes,
                },
            );
        }
        for sink in sinks {
            let seen = self.sinks.get(&sink.name).copied().unwrap_or_default();
            info!(
                sink = %sink.name,
                outputs_per_sec = rate(sink.published, seen, seconds),
                published = sink.published,
                queued = sink.queued,
                held = sink.held_count,
                retrying = sink.retrying,
                lost = sink.lost,
                "progress: sink"
            );
            self.sinks.insert(sink.name.clone(), sink.published);
        }
    }
}
