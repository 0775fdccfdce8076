//! Routing on the processor's thread: the capture of the processor being called lives
//! in a thread-local for the length of the call, where [`CaptureLayer`] and the core's
//! audit hook find it. A processor that is not captured costs its host one `Option`
//! check per call: no allocation, no lock, no thread-local access.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mongoose_core::audit::AuditHook;
use mongoose_core::context::ContextSlot;
use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

use super::{CaptureRecord, CaptureWriter};

/// What a session shares with its status: the records written and a write failure.
#[derive(Debug, Default)]
pub struct SessionCounters {
    pub(crate) written: AtomicU64,
    pub(crate) write_error: Mutex<Option<String>>,
}

/// An installed capture: its writer, used on the processor's thread only. Its host
/// moves it into the thread for each call ([`enter`], [`leave`]).
pub struct ActiveCapture {
    writer: Box<dyn CaptureWriter>,
    counters: Arc<SessionCounters>,
    /// A write failed: nothing more is written.
    failed: bool,
    /// The encoding of the record being written, reused.
    buffer: Vec<u8>,
    /// The text of the event being written, reused.
    text: String,
}

impl std::fmt::Debug for ActiveCapture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActiveCapture")
            .field("counters", &self.counters)
            .field("failed", &self.failed)
            .finish()
    }
}

impl ActiveCapture {
    /// A capture writing to `writer`, counting into `counters` (its session's, from
    /// [`CaptureSessions::set_recording`](super::CaptureSessions::set_recording)).
    pub fn new(writer: Box<dyn CaptureWriter>, counters: Arc<SessionCounters>) -> Self {
        ActiveCapture {
            writer,
            counters,
            failed: false,
            buffer: Vec::new(),
            text: String::new(),
        }
    }

    /// The writer, to close.
    pub fn into_writer(self) -> Box<dyn CaptureWriter> {
        self.writer
    }

    fn write_buffer(&mut self) -> bool {
        if self.failed {
            return false;
        }
        match self.writer.write(&self.buffer) {
            Ok(()) => {
                self.counters.written.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(error) => {
                self.failed = true;
                *self.counters.write_error.lock() = Some(format!("a write failed: {error}"));
                false
            }
        }
    }

    fn write_record(&mut self, bytes: &[u8]) -> bool {
        CaptureRecord::encode_record(&mut self.buffer, now_micros(), bytes);
        self.write_buffer()
    }

    fn write_event(&mut self, event: &Event<'_>) {
        if self.failed {
            return;
        }
        let mut text = std::mem::take(&mut self.text);
        text.clear();
        event.record(&mut EventText { text: &mut text });
        let metadata = event.metadata();
        CaptureRecord::encode_event(
            &mut self.buffer,
            now_micros(),
            metadata.level().as_str(),
            metadata.target(),
            &text,
        );
        self.text = text;
        self.write_buffer();
    }
}

fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_micros() as u64)
}

/// An event's message, then its other fields as ` name=value`.
struct EventText<'a> {
    text: &'a mut String,
}

impl Visit for EventText<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.text.insert_str(0, value);
        } else {
            let _ = write!(self.text, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let message = format!("{value:?}");
            self.text.insert_str(0, &message);
        } else {
            let _ = write!(self.text, " {}={value:?}", field.name());
        }
    }
}

/// The capture of the processor being called on this thread, if it is captured (its
/// part of the thread's context).
static CURRENT: ContextSlot<Option<Box<ActiveCapture>>> = ContextSlot::new();

/// Makes `capture` the current capture for a call; returns what was current.
pub fn enter(capture: Box<ActiveCapture>) -> Option<Box<ActiveCapture>> {
    CURRENT.replace(Some(capture))
}

/// Ends a call: restores `previous` and returns the call's capture.
pub fn leave(previous: Option<Box<ActiveCapture>>) -> Option<Box<ActiveCapture>> {
    CURRENT.replace(previous)
}

fn capturing() -> bool {
    CURRENT
        .try_with(|current| current.is_some())
        .unwrap_or(false)
}

fn record(bytes: &[u8]) -> bool {
    CURRENT
        .try_with(|current| {
            current
                .as_mut()
                .is_some_and(|capture| capture.write_record(bytes))
        })
        .unwrap_or(false)
}

/// The hook a group installs on its thread ([`mongoose_core::audit::install_hook`]).
pub const HOOK: AuditHook = AuditHook { capturing, record };

/// A `tracing_subscriber` layer that writes each event emitted on a group's thread
/// while it calls a captured processor into that processor's capture. It does nothing
/// for any other event (one thread-local check); install it once in the process's
/// subscriber (the `mongoose` binary does). Events filtered out before the layer (by a
/// global level filter) are not captured.
#[derive(Clone, Copy, Debug, Default)]
pub struct CaptureLayer;

impl<S: Subscriber> Layer<S> for CaptureLayer {
    fn on_event(&self, event: &Event<'_>, _context: Context<'_, S>) {
        // a writer that logs while it writes does not capture itself
        CURRENT.try_with(|current| {
            if let Some(capture) = current.as_mut() {
                capture.write_event(event);
            }
        });
    }
}
