//! `mongoose top`: a refreshing terminal view of a running server's feeds, groups and
//! sinks, with rates computed from successive `/status` polls; `q` (or Esc, Ctrl-C)
//! quits.

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::{cursor, execute, queue, terminal};
use mongoose_control::GroupStatus;
use mongoose_delivery::StatusReport;
use mongoose_server::{admin, ServerError};
use mongoose_sink::SinkStatus;

/// One poll of the admin API.
struct Poll {
    at: Instant,
    report: StatusReport,
    sinks: Vec<SinkStatus>,
    groups: Vec<GroupStatus>,
}

fn poll(address: &str, token: Option<&str>) -> Result<Poll, ServerError> {
    let text = admin::get_text_with_token(address, "/status", token)?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|error| ServerError::State(format!("unexpected status answer: {error}")))?;
    let sinks = serde_json::from_value(value["sinks"].clone()).unwrap_or_default();
    let report = serde_json::from_value(value)
        .map_err(|error| ServerError::State(format!("unexpected status answer: {error}")))?;
    let groups = admin::get_text_with_token(address, "/groups", token)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default();
    Ok(Poll {
        at: Instant::now(),
        report,
        sinks,
        groups,
    })
}

/// A per-second rate of a count between two polls, or `-` without an earlier one.
fn rate(now: u64, then: Option<u64>, seconds: f64) -> String {
    match then {
        Some(then) if seconds > 0.0 => {
            format!("{:.1}", now.saturating_sub(then) as f64 / seconds)
        }
        _ => "-".to_owned(),
    }
}

fn bytes_of(feed: &mongoose_delivery::FeedStatus) -> u64 {
    feed.files.iter().map(|file| file.committed).sum()
}

/// The screen's lines for `now`, with rates since `before`.
fn render(address: &str, now: &Poll, before: Option<&Poll>) -> Vec<String> {
    let seconds = before.map_or(0.0, |before| {
        now.at.saturating_duration_since(before.at).as_secs_f64()
    });
    let old_feeds: HashMap<&str, &mongoose_delivery::FeedStatus> = before
        .map(|before| {
            before
                .report
                .feeds
                .iter()
                .map(|feed| (feed.feed.as_str(), feed))
                .collect()
        })
        .unwrap_or_default();
    let old_queues: HashMap<&str, u64> = before
        .map(|before| {
            before
                .report
                .feeds
                .iter()
                .flat_map(|feed| &feed.subscribers)
                .map(|queue| (queue.queue.as_str(), queue.dispatched))
                .collect()
        })
        .unwrap_or_default();
    let mut lines = vec![
        format!(
            "mongoose top  {address}  settled: {}  lossless: {}   (q quits)",
            now.report.settled, now.report.lossless
        ),
        String::new(),
        format!(
            "{:<16} {:<13} {:>10} {:>10} {:>12} {:>9} {:>10}  STALLED",
            "FEED", "STATE", "EVENTS/S", "BYTES/S", "PUBLISHED", "LAG", "LAG BYTES"
        ),
    ];
    for feed in &now.report.feeds {
        let old = old_feeds.get(feed.feed.as_str());
        let lag: u64 = feed
            .subscribers
            .iter()
            .map(|queue| queue.position.saturating_sub(queue.dispatched))
            .sum();
        lines.push(format!(
            "{:<16} {:<13} {:>10} {:>10} {:>12} {:>9} {:>10}  {}",
            feed.feed,
            feed.state,
            rate(feed.sequence, old.map(|old| old.sequence), seconds),
            rate(bytes_of(feed), old.map(|old| bytes_of(old)), seconds),
            feed.sequence,
            lag,
            feed.files.iter().map(|file| file.lag).sum::<u64>(),
            feed.stalled.as_deref().unwrap_or("-"),
        ));
    }
    lines.push(String::new());
    lines.push(format!(
        "{:<16} {:<9} {:>8} {:>11} {:>10} {:>8} {:>12}",
        "GROUP", "STATE", "RUNNING", "QUARANTINED", "EVENTS/S", "QUEUED", "MAILBOX"
    ));
    for group in &now.groups {
        let prefix = format!("{}/", group.group);
        let queues = || {
            now.report
                .feeds
                .iter()
                .flat_map(|feed| &feed.subscribers)
                .filter(|queue| queue.queue.starts_with(&prefix))
        };
        let dispatched: u64 = queues().map(|queue| queue.dispatched).sum();
        let before_dispatched = before.map(|_| {
            queues()
                .map(|queue| {
                    old_queues
                        .get(queue.queue.as_str())
                        .copied()
                        .unwrap_or(queue.dispatched)
                })
                .sum()
        });
        lines.push(format!(
            "{:<16} {:<9} {:>8} {:>11} {:>10} {:>8} {:>12}",
            group.group,
            format!("{:?}", group.state).to_uppercase(),
            group.running.len(),
            group.quarantined.len(),
            rate(dispatched, before_dispatched, seconds),
            group.queued_items,
            format!("{}/{}", group.mailbox_depth, group.mailbox_capacity),
        ));
    }
    lines.push(String::new());
    lines.push(format!(
        "{:<16} {:<10} {:>10} {:>10} {:>8} {:>8} {:>6} {:>6}",
        "SINK", "KIND", "OUTPUTS/S", "PUBLISHED", "QUEUED", "RETRYING", "HELD", "LOST"
    ));
    for sink in &now.sinks {
        let old = before.and_then(|before| {
            before
                .sinks
                .iter()
                .find(|old| old.name == sink.name)
                .map(|old| old.published)
        });
        lines.push(format!(
            "{:<16} {:<10} {:>10} {:>10} {:>8} {:>8} {:>6} {:>6}",
            sink.name,
            sink.kind,
            rate(sink.published, old, seconds),
            sink.published,
            sink.queued,
            sink.retrying,
            sink.held_count,
            sink.lost
        ));
    }
    lines
}

/// Restores the terminal when dropped (also on an error or a panic's unwinding).
struct Screen;

impl Screen {
    fn enter() -> std::io::Result<Self> {
        terminal::enable_raw_mode()?;
        let screen = Screen;
        execute!(
            std::io::stdout(),
            terminal::EnterAlternateScreen,
            cursor::Hide
        )?;
        Ok(screen)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = execute!(
            std::io::stdout(),
            cursor::Show,
            terminal::LeaveAlternateScreen
        );
        let _ = terminal::disable_raw_mode();
    }
}

fn draw(lines: &[String], error: Option<&str>) -> std::io::Result<()> {
    let (width, height) = terminal::size().unwrap_or((120, 40));
    let mut out = std::io::stdout();
    queue!(out, terminal::Clear(terminal::ClearType::All))?;
    let shown = lines
        .iter()
        .map(String::as_str)
        .chain(error)
        .take(height as usize);
    for (row, line) in shown.enumerate() {
        let line: String = line.chars().take(width as usize).collect();
        queue!(out, cursor::MoveTo(0, row as u16))?;
        out.write_all(line.as_bytes())?;
    }
    out.flush()
}

/// Whether a key asking to quit came within `wait`.
fn quit_within(wait: Duration) -> std::io::Result<bool> {
    let until = Instant::now() + wait;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if !event::poll(left)? {
            return Ok(false);
        }
        if let Event::Key(key) = event::read()? {
            if key.kind == KeyEventKind::Release {
                continue;
            }
            let quit = matches!(key.code, KeyCode::Char('q') | KeyCode::Esc)
                || (key.code == KeyCode::Char('c')
                    && key.modifiers.contains(KeyModifiers::CONTROL));
            if quit {
                return Ok(true);
            }
        }
    }
}

/// Runs `mongoose top` against the admin API at `address` until `q`: exit 0, or an
/// error when the terminal cannot be driven or the first poll fails.
///
/// # Errors
/// The admin API cannot be reached at the start, or the terminal cannot be set up.
pub fn run(address: &str, interval: Duration, token: Option<&str>) -> Result<(), ServerError> {
    // the first poll before the screen: an unreachable server is a plain error
    let mut before = poll(address, token)?;
    let terminal_error = |error: std::io::Error| ServerError::Io {
        context: "cannot drive the terminal for `mongoose top` (is stdout a terminal?)".into(),
        error,
    };
    let _screen = Screen::enter().map_err(terminal_error)?;
    draw(&render(address, &before, None), None).map_err(terminal_error)?;
    let mut last_error: Option<String> = None;
    loop {
        if quit_within(interval).map_err(terminal_error)? {
            return Ok(());
        }
        match poll(address, token) {
            Ok(now) => {
                draw(&render(address, &now, Some(&before)), None).map_err(terminal_error)?;
                before = now;
                last_error = None;
            }
            Err(error) => {
                let text = format!("(the last poll failed: {error}; retrying)");
                if last_error.as_deref() != Some(text.as_str()) {
                    draw(&render(address, &before, None), Some(&text)).map_err(terminal_error)?;
                    last_error = Some(text);
                }
            }
        }
    }
}
