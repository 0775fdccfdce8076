//! What processors read time through ([`Clock`]) and write outputs through
//! ([`OutputSink`]), and the thread-local tap that RECORD and REPLAY put behind them.
//!
//! Live (no tap on the thread) a [`Clock`] reads its source and an [`OutputSink`]
//! delivers to its target. On a group thread whose recorder is installed, both also
//! tell the recorder, under the processor being called
//! ([`mongoose_core::engine::current_processor`]): each reading joins the clock
//! readings of the entry being recorded, each output the recorded run's outputs. In a
//! replay the clock returns the entry's recorded readings, in order, and outputs are
//! captured, not delivered.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use mongoose_core::context::ContextSlot;
use mongoose_core::engine;
use mongoose_core::ProcessorId;
use parking_lot::Mutex;

/// What the recorder collects between two of its hooks.
#[derive(Default, Debug)]
pub(crate) struct RecordTap {
    pub(crate) readings: Vec<(ProcessorId, i64)>,
    pub(crate) outputs: Vec<(ProcessorId, String)>,
}

/// The replay of one entry: the readings it may take and the outputs it made.
#[derive(Default, Debug)]
pub(crate) struct ReplayPin {
    pub(crate) readings: VecDeque<i64>,
    /// Readings taken past the recorded ones.
    pub(crate) extra: usize,
    pub(crate) outputs: Vec<String>,
}

#[derive(Debug)]
enum Tap {
    Record(RecordTap),
    Replay(ReplayPin),
}

/// The replay's part of the thread's context: what its clocks and sinks do here.
static TAP: ContextSlot<Option<Tap>> = ContextSlot::new();

/// Installs a record tap on this thread (a recorder's group thread), if none is.
pub(crate) fn install_record() {
    TAP.with(|tap| {
        if tap.is_none() {
            *tap = Some(Tap::Record(RecordTap::default()));
        }
    });
}

/// Takes what was recorded since the last call.
pub(crate) fn take_recorded(into: &mut RecordTap) {
    TAP.with(|tap| {
        if let Some(Tap::Record(recorded)) = tap.as_mut() {
            into.readings.append(&mut recorded.readings);
            into.outputs.append(&mut recorded.outputs);
        }
    });
}

/// Removes the tap from this thread.
pub(crate) fn uninstall() {
    TAP.with(|tap| *tap = None);
}

/// Pins this thread's clocks to `readings` for one replayed entry.
pub(crate) fn pin(readings: &[i64]) {
    TAP.with(|tap| {
        *tap = Some(Tap::Replay(ReplayPin {
            readings: readings.iter().copied().collect(),
            extra: 0,
            outputs: Vec::new(),
        }))
    });
}

/// Ends the pin of one replayed entry: what it left.
pub(crate) fn unpin() -> ReplayPin {
    TAP.with(|tap| match tap.take() {
        Some(Tap::Replay(pin)) => pin,
        _ => ReplayPin::default(),
    })
}

/// Reads time for a processor: a source of milliseconds (or any `i64` time), recorded
/// in RECORD and pinned to the recorded readings in REPLAY.
///
/// ```
/// use mongoose_replay::Clock;
/// let fixed = Clock::from_fn(|| 42);
/// assert_eq!(fixed.now(), 42);
/// ```
#[derive(Clone)]
pub struct Clock {
    source: Arc<dyn Fn() -> i64 + Send + Sync>,
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Clock")
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

impl Clock {
    /// Wall-clock milliseconds since the Unix epoch.
    pub fn system() -> Self {
        Clock::from_fn(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.as_millis() as i64)
        })
    }

    /// A clock reading `source` live.
    pub fn from_fn(source: impl Fn() -> i64 + Send + Sync + 'static) -> Self {
        Clock {
            source: Arc::new(source),
        }
    }

    /// The time. In a replayed entry: the next recorded reading (the live source once
    /// they are used up, which stops the replay with "clock divergence").
    pub fn now(&self) -> i64 {
        let pinned = TAP.with(|tap| match tap.as_mut() {
            Some(Tap::Replay(pin)) => match pin.readings.pop_front() {
                Some(reading) => Some(Ok(reading)),
                None => {
                    pin.extra += 1;
                    Some(Err(()))
                }
            },
            _ => None,
        });
        match pinned {
            Some(Ok(reading)) => return reading,
            Some(Err(())) => return (self.source)(),
            None => {}
        }
        let reading = (self.source)();
        TAP.with(|tap| {
            if let Some(Tap::Record(recorded)) = tap.as_mut() {
                if let Some(processor) = engine::current_processor() {
                    recorded.readings.push((processor, reading));
                }
            }
        });
        reading
    }
}

/// Where a processor sends its outputs (a message sink): delivered to its target live,
/// also recorded in RECORD, captured and not delivered in REPLAY.
///
/// ```
/// use mongoose_replay::OutputSink;
/// let (sink, sent) = OutputSink::collecting("alerts");
/// sink.send("EURUSD above 1.09");
/// assert_eq!(*sent.lock(), vec!["EURUSD above 1.09".to_string()]);
/// ```
#[derive(Clone)]
pub struct OutputSink {
    name: Arc<str>,
    target: Arc<dyn Fn(&str) + Send + Sync>,
}

impl fmt::Debug for OutputSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutputSink")
            .field("name", &self.name)
            .finish()
    }
}

/// The messages an [`OutputSink::collecting`] sink delivered.
pub type Collected = Arc<Mutex<Vec<String>>>;

impl OutputSink {
    /// A sink named `name` delivering each message to `target`.
    pub fn new(name: &str, target: impl Fn(&str) + Send + Sync + 'static) -> Self {
        OutputSink {
            name: Arc::from(name),
            target: Arc::new(target),
        }
    }

    /// A sink that keeps what it delivers in memory (tests, examples).
    pub fn collecting(name: &str) -> (Self, Collected) {
        let collected: Collected = Arc::default();
        let kept = Arc::clone(&collected);
        (
            OutputSink::new(name, move |message| kept.lock().push(message.to_owned())),
            collected,
        )
    }

    /// The sink's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sends `message`.
    pub fn send(&self, message: impl AsRef<str>) {
        let message = message.as_ref();
        let captured = TAP.with(|tap| match tap.as_mut() {
            Some(Tap::Replay(pin)) => {
                pin.outputs.push(message.to_owned());
                true
            }
            Some(Tap::Record(recorded)) => {
                if let Some(processor) = engine::current_processor() {
                    recorded.outputs.push((processor, message.to_owned()));
                }
                false
            }
            None => false,
        });
        if !captured {
            (self.target)(message);
        }
    }
}
