//! A plugin's own `tracing` events, forwarded to the host's log.
//!
//! A plugin is a shared library with its own copy of `tracing`, whose events reach no
//! subscriber: a connector written against the core traits (the Kafka source's
//! assignments and revocations, a journal tailer's warnings) would log nothing in the
//! server. So the SDK installs, in the plugin's copy, a subscriber that forwards every
//! event at INFO and above to the host's `log` function, as the feed of the source the
//! host is calling into on that thread (while it runs `create`, `start`, `do_work` or
//! `stop`: the Kafka source's rebalance callbacks run inside `do_work`). An event on
//! another thread (librdkafka's own) or between calls is dropped, as before.

use std::cell::Cell;
use std::fmt::Write as _;
use std::sync::Once;

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{span, Event, Level, Metadata, Subscriber};

use crate::abi::{self, HostOutput, Str};

thread_local! {
    /// The feed the host is calling into on this thread.
    static TARGET: Cell<Option<HostOutput>> = const { Cell::new(None) };
}

/// While alive, this thread's events go to `host`'s log; dropping it restores what was
/// there before (calls may nest: a source created inside another's call).
pub(crate) struct Forwarding(Option<HostOutput>);

impl Forwarding {
    /// Forwards this thread's events to `host` until dropped (installing the plugin's
    /// subscriber at the first call).
    pub(crate) fn to(host: HostOutput) -> Self {
        static INSTALL: Once = Once::new();
        INSTALL.call_once(|| {
            // fails only when something in the plugin set one already: that one stays
            let _ = tracing::subscriber::set_global_default(Forward);
        });
        Forwarding(TARGET.replace(Some(host)))
    }
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        TARGET.set(self.0);
    }
}

/// The event's message and fields as one line: `message key=value ...`.
#[derive(Default)]
struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, "{}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            let _ = write!(self.0, "{}={value}", field.name());
        }
    }
}

/// The plugin's subscriber: INFO and above, to the host of the current call.
struct Forward;

impl Subscriber for Forward {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        // asked again at each event (whether a host call is in progress changes)
        if *metadata.level() <= Level::INFO {
            Interest::sometimes()
        } else {
            Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::INFO)
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::INFO && TARGET.with(|target| target.get().is_some())
    }

    fn new_span(&self, _span: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }

    fn record(&self, _span: &span::Id, _values: &span::Record<'_>) {}

    fn record_follows_from(&self, _span: &span::Id, _follows: &span::Id) {}

    fn event(&self, event: &Event<'_>) {
        let Some(host) = TARGET.with(Cell::get) else {
            return;
        };
        let mut line = Line::default();
        event.record(&mut line);
        let level = if *event.metadata().level() <= Level::WARN {
            abi::level::WARN
        } else {
            abi::level::INFO
        };
        // SAFETY: `host` is the output of the source the host is calling into on this
        // thread (set for the call's length), valid until that source is destroyed.
        unsafe { ((*host.vtable).log)(host.context, level, Str::new(&line.0)) }
    }

    fn enter(&self, _span: &span::Id) {}

    fn exit(&self, _span: &span::Id) {}
}
